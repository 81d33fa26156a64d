"""Loss masks from token roles: only action tokens of kept sequences are trained on
(MATH.md, feedbackMask)."""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from .. import _abi
from .._layout import layout

PROMPT, ACTION, FEEDBACK, PADDING = 0, 1, 2, 3
"""Role codes (tirl_role): prompt, action (sampled from the policy), feedback (tool or
environment output), padding."""


def feedback_mask(
    roles: torch.Tensor,
    *,
    cu_seqlens: Optional[torch.Tensor] = None,
    keep: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The loss mask of a batch from its token roles.

    Args:
        roles: uint8 ``[B, T]``, or ``[N]`` with ``cu_seqlens``; values 0..3 (see the
            module's role codes).
        cu_seqlens: sequence offsets ``[B + 1]`` for packed 1-D roles.
        keep: bool/uint8 ``[B]``: sequences to train on (default all), e.g. after a filter.

    Returns:
        ``(mask, action_tokens)``: a bool mask shaped like ``roles`` and int32 ``[B]``
        masked token counts.
    """
    roles = _abi.tensor("roles", roles, (torch.uint8,))
    seq_offsets, num_seqs, _ = layout("roles", roles, cu_seqlens)
    if seq_offsets is None:
        raise _abi.type_error("cu_seqlens", "an int32 tensor of B + 1 offsets for packed [N] roles", None)
    if keep is not None:
        keep = _abi.mask_tensor("keep", keep, roles.device, (num_seqs,))
    mask = torch.empty(roles.shape, dtype=torch.bool, device=roles.device)
    action_tokens = torch.empty(num_seqs, dtype=torch.int32, device=roles.device)
    _abi.check(_abi.lib.tirl_feedback_mask(
        roles.data_ptr(), roles.numel(), seq_offsets.data_ptr(), num_seqs, _abi.pointer(keep),
        mask.data_ptr(), action_tokens.data_ptr(), _abi.device_of("roles", roles)), "feedback_mask")
    return mask, action_tokens
