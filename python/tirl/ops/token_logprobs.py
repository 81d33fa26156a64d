"""Label log-probs (and entropies) from logits without materialising the softmax
(MATH.md, tokenLogprobs); the backward goes through both outputs."""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

from .. import _abi

_DTYPES = {torch.float32: _abi.DTYPE_F32, torch.bfloat16: _abi.DTYPE_BF16}


def _forward(logits: torch.Tensor, labels: torch.Tensor, temperature: float, with_entropy: bool):
    """``tirl_token_logprobs`` on ``[N, V]`` logits and int32 labels ``[N]``: the log-probs,
    or (log-probs, entropies) when ``with_entropy``."""
    tokens, vocab = logits.shape
    logp = torch.empty(tokens, dtype=torch.float32, device=logits.device)
    entropy = torch.empty(tokens, dtype=torch.float32, device=logits.device) if with_entropy else None
    _abi.check(_abi.lib.tirl_token_logprobs(
        logits.data_ptr(), _DTYPES[logits.dtype], tokens, vocab, labels.data_ptr(), temperature,
        logp.data_ptr(), _abi.pointer(entropy), _abi.device_of("logits", logits)), "token_logprobs")
    if with_entropy:
        return logp, entropy
    return logp


class TokenLogprobsFunction(torch.autograd.Function):
    """Autograd form of ``tirl_token_logprobs`` / ``tirl_token_logprobs_backward`` on
    ``[N, V]`` logits and int32 labels ``[N]``."""

    @staticmethod
    def forward(ctx, logits, labels, temperature, with_entropy):  # type: ignore[override]
        ctx.save_for_backward(logits, labels)
        ctx.temperature = temperature
        ctx.with_entropy = with_entropy
        return _forward(logits, labels, temperature, with_entropy)

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy=None):  # type: ignore[override]
        logits, labels = ctx.saved_tensors
        tokens, vocab = logits.shape
        if grad_logp is None:
            grad_logp = torch.zeros(tokens, dtype=torch.float32, device=logits.device)
        grad_logp = grad_logp.float().contiguous()
        if grad_entropy is not None:
            grad_entropy = grad_entropy.float().contiguous()
        grad_logits = torch.empty((tokens, vocab), dtype=torch.float32, device=logits.device)
        _abi.check(_abi.lib.tirl_token_logprobs_backward(
            logits.data_ptr(), _DTYPES[logits.dtype], tokens, vocab, labels.data_ptr(), ctx.temperature,
            grad_logp.data_ptr(), _abi.pointer(grad_entropy), grad_logits.data_ptr(),
            _abi.device_of("logits", logits)), "token_logprobs_backward")
        if logits.dtype != torch.float32:
            grad_logits = grad_logits.to(logits.dtype)
        return grad_logits, None, None, None


def token_logprobs(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """log softmax(logits / temperature)[label] for each position, and the entropy of that
    distribution when ``with_entropy`` (verl's ``logprobs_from_logits`` and
    ``entropy_from_logits`` in one pass over the vocabulary).

    Args:
        logits: ``[..., V]`` float32 or bfloat16 (read as bf16, accumulated in f32).
        labels: ``[...]`` int32 or int64 token ids in ``[0, V)``.
        temperature: in [1e-37, 1e37]; the logits are divided by it.
        with_entropy: also return the entropy ``[...]``.

    Returns:
        float32 log-probs of shape ``labels.shape`` (and entropies of the same shape),
        differentiable with respect to ``logits`` through both.
    """
    logits = _abi.tensor("logits", logits, (torch.float32, torch.bfloat16))
    if logits.dim() < 1:
        raise _abi.value_error("logits", "a [..., V] tensor", logits)
    labels = _abi.int32_tensor("labels", labels, logits.device)
    _abi.shape("labels", labels, logits.shape[:-1])
    if not isinstance(with_entropy, bool):
        raise _abi.type_error("with_entropy", "a bool", with_entropy)
    vocab = logits.shape[-1]
    # The autograd node only where a gradient can flow into the logits (~3 µs a call).
    forward = TokenLogprobsFunction.apply if logits.requires_grad and torch.is_grad_enabled() else _forward
    result = forward(logits.reshape(-1, vocab), labels.reshape(-1), _abi.number("temperature", temperature),
                     with_entropy)
    if with_entropy:
        logp, entropy = result
        return logp.view(labels.shape), entropy.view(labels.shape)
    return result.view(labels.shape)
