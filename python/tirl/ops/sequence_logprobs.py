"""Per-sequence sums (or means) of masked token log-probs, with their backward
(MATH.md, sequenceLogprobs)."""

from __future__ import annotations

from typing import Optional

import torch

from .. import _abi
from .._layout import layout


class SequenceLogprobsFunction(torch.autograd.Function):
    """Autograd form of ``tirl_sequence_logprobs`` and its backward."""

    @staticmethod
    def forward(ctx, logp, mask, seq_offsets, num_seqs, average):  # type: ignore[override]
        out = torch.empty(num_seqs, dtype=torch.float32, device=logp.device)
        _abi.check(_abi.lib.tirl_sequence_logprobs(
            logp.data_ptr(), mask.data_ptr(), logp.numel(), seq_offsets.data_ptr(), num_seqs,
            int(average), out.data_ptr(), _abi.device_of("logp", logp)), "sequence_logprobs")
        ctx.save_for_backward(mask, seq_offsets)
        ctx.average = average
        ctx.logp_shape = logp.shape
        return out

    @staticmethod
    def backward(ctx, grad_seq):  # type: ignore[override]
        mask, seq_offsets = ctx.saved_tensors
        grad_seq = grad_seq.float().contiguous()
        grad_logp = torch.empty(ctx.logp_shape, dtype=torch.float32, device=grad_seq.device)
        _abi.check(_abi.lib.tirl_sequence_logprobs_backward(
            grad_seq.data_ptr(), mask.data_ptr(), grad_logp.numel(), seq_offsets.data_ptr(),
            grad_seq.numel(), int(ctx.average), grad_logp.data_ptr(),
            _abi.device_of("grad_seq", grad_seq)), "sequence_logprobs_backward")
        return grad_logp, None, None, None, None


def sequence_logprobs(
    logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    cu_seqlens: Optional[torch.Tensor] = None,
    average: bool = False,
) -> torch.Tensor:
    """Sum of each sequence's masked token log-probs (their mean when ``average``; a
    sequence with no masked token gets 0), as DPO and GSPO need.

    Args:
        logp: float32 ``[B, T]``, or ``[N]`` with ``cu_seqlens`` ``[B + 1]``.
        mask: same shape; nonzero = counted.
        cu_seqlens: sequence offsets of packed 1-D inputs (required then).
        average: divide by the masked token count.

    Returns:
        float32 ``[B]``, differentiable with respect to ``logp``.
    """
    logp = _abi.tensor("logp", logp, (torch.float32,))
    mask = _abi.mask_tensor("mask", mask, logp.device, logp.shape)
    if not isinstance(average, bool):
        raise _abi.type_error("average", "a bool", average)
    seq_offsets, num_seqs, _ = layout("logp", logp, cu_seqlens)
    if seq_offsets is None:
        raise _abi.type_error("cu_seqlens", "an int32 tensor of B + 1 offsets for packed [N] logp", None)
    return SequenceLogprobsFunction.apply(logp, mask, seq_offsets, num_seqs, average)
