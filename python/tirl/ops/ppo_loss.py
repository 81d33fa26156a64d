"""PPO clipped surrogate with its gradient fused in the forward (MATH.md, ppoLoss)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

import torch

from .. import _abi
from .._layout import layout


@dataclass(frozen=True)
class PpoStats:
    """Statistics of one ``ppo_loss`` call, as plain floats (means over masked-in tokens)."""

    loss: float
    """``pg_loss + kl_coef * kl_loss``."""
    pg_loss: float
    """The aggregated clipped surrogate (weighted by ``weights``)."""
    kl_loss: float
    """The aggregated KL estimate without ``kl_coef``; 0 when no ``ref_logp`` is given."""
    clip_fraction: float
    """Fraction of masked-in tokens where the clipped term is larger (L2 > L1)."""
    clip_fraction_lower: float
    """Fraction where the dual clip is active (0 when it is off)."""
    approx_kl: float
    """Masked mean of -clamp(logp - old_logp, -20, 20)."""
    non_finite: int
    """Masked-in tokens with a non-finite input; when nonzero, skip the step."""
    masked_tokens: int
    """Masked-in tokens."""
    selected_tokens: int = 0
    """clip_cov: tokens zeroed; kl_cov: tokens given the KL term (0 for the other losses)."""
    rollout_is_batch_norm_factor: float = 1.0
    """bypass_mode with reinforce and batch normalisation: the divisor applied; else 1."""


def _stats(**values: Any) -> PpoStats:
    """A PpoStats of ``values`` (every field): the frozen dataclass's own ``__init__`` sets
    each field through ``object.__setattr__``, about 1 µs for the ten, a twentieth of a
    small call's whole cost; the instance made here is the same."""
    stats = object.__new__(PpoStats)
    stats.__dict__.update(values)
    return stats


class PpoLossFunction(torch.autograd.Function):
    """Autograd form of the fused policy-loss kernels (``tirl_ppo_loss``,
    ``tirl_policy_loss``): the forward runs ``kernel(grad)``, which writes dLoss/dlogp into
    ``grad`` and returns the loss; the backward scales that saved gradient. Gradient flows
    into ``logp`` only."""

    @staticmethod
    def forward(ctx, logp, kernel):  # type: ignore[override]
        grad = torch.empty_like(logp)
        loss = kernel(grad)
        ctx.save_for_backward(grad)
        return torch.scalar_tensor(loss, dtype=torch.float32, device=logp.device)

    @staticmethod
    def backward(ctx, grad_loss):  # type: ignore[override]
        (grad,) = ctx.saved_tensors
        return grad * grad_loss, None


def _apply(logp: torch.Tensor, kernel: Callable[[torch.Tensor], float]) -> torch.Tensor:
    """PpoLossFunction.apply(logp, kernel), or, where no gradient can flow into ``logp``
    (no requires_grad, or under torch.no_grad()), the kernel's loss without an autograd
    node: the same value, ~3 µs less a call."""
    if logp.requires_grad and torch.is_grad_enabled():
        return PpoLossFunction.apply(logp, kernel)
    loss = kernel(torch.empty_like(logp))
    return torch.scalar_tensor(loss, dtype=torch.float32, device=logp.device)


# Options of tirl_policy_loss beyond tirl_ppo_options, by their tirl.h names (None = the
# library's default); enum-valued ones map through these tables.
_POLICY_ENUMS = {"loss_type": _abi.BYPASS_LOSS_TYPES, "rollout_is": _abi.ROLLOUT_IS_LEVELS}
_POLICY_NUMBERS = ("clip_ratio_c", "tau_pos", "tau_neg", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub",
                   "kl_cov_ratio", "ppo_kl_coef", "dro_beta", "rollout_is_threshold", "rollout_is_threshold_lower")


def ppo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    cu_seqlens: Optional[torch.Tensor] = None,
    clip_low: float = 0.2,
    clip_high: Optional[float] = None,
    dual_clip: Optional[float] = None,
    aggregation: str = "token-mean",
    token_normalizer: Optional[float] = None,
    seq_normalizer: Optional[float] = None,
    horizon: Optional[float] = None,
    dp_size: float = 1.0,
    ref_logp: Optional[torch.Tensor] = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    weights: Optional[torch.Tensor] = None,
    ratio_level: str = "token",
    policy_loss: str = "vanilla",
    **policy_options: Any,
) -> Tuple[torch.Tensor, PpoStats]:
    """PPO clipped surrogate over the masked tokens, verl's ``compute_policy_loss`` +
    ``agg_loss`` in one fused kernel; returns the loss (a 0-d float32 tensor whose backward
    gives dLoss/dlogp) and its :class:`PpoStats`.

    Layout: padded ``[B, T]`` tensors (sequence i is row i), or packed ``[N]`` tensors with
    ``cu_seqlens`` ``[B + 1]`` (needed then by the ``seq-*`` aggregations and GSPO).

    Args:
        logp: current-policy log-probs of the sampled tokens, float32; the gradient goes here.
        old_logp: behaviour-policy log-probs, float32, same shape.
        advantages: per-token advantages, float32, same shape.
        mask: loss mask, same shape (bool/uint8 used as is; other dtypes compared with 0).
            Masked-out tokens get gradient 0 whatever their inputs.
        cu_seqlens: int32/int64 sequence offsets for packed 1-D inputs.
        clip_low: ratio clipped below at ``1 - clip_low``; in [0, 1).
        clip_high: ratio clipped above at ``1 + clip_high``; default ``clip_low``.
        dual_clip: c > 1 caps the loss at ``-A * c`` for A < 0; None = off.
        aggregation: 'token-mean', 'token-sum', 'seq-mean-token-sum', 'seq-mean-token-mean'
            or 'seq-mean-token-sum-norm' (MATH.md).
        token_normalizer, seq_normalizer, horizon: global divisors for data-parallel
            training (see :mod:`tirl.distributed`); default: this call's counts (masked
            tokens, non-empty sequences, longest sequence = T when padded).
        dp_size: data-parallel size multiplying the loss (verl's dp_size).
        ref_logp: reference-policy log-probs, float32: adds ``kl_coef * KL``.
        kl_coef: weight of the KL term, >= 0.
        kl_estimator: 'k1', 'k2' (or 'mse'), 'k3' (or 'low_var_kl') or 'abs'; with a
            library that has them, verl's straight-through forms 'k1+', 'k3+'
            ('low_var_kl+') and 'abs+'.
        weights: per-token loss weights, float32 (e.g. rollout-correction importance
            weights); no gradient flows into them.
        ratio_level: 'token', or 'sequence' for GSPO's sequence ratio.
        policy_loss: verl's loss mode: 'vanilla' (the default, PPO clip), 'gspo', 'dppo_tv',
            'dppo_kl', 'sapo', 'gpg', 'clip_cov', 'kl_cov', 'geo_mean', 'dro', 'cispo',
            'reinforce' or 'bypass_mode' (formulas: docs/math.md, "Policy losses").
        policy_options: the options of those losses, named as in ``tirl_policy_loss_options``
            (verl's config keys): clip_ratio_c, tau_pos, tau_neg, clip_cov_ratio,
            clip_cov_lb, clip_cov_ub, kl_cov_ratio, ppo_kl_coef, dro_beta, seed, loss_type
            ('ppo_clip' | 'reinforce'), rollout_is ('none' | 'token' | 'sequence'),
            rollout_is_threshold, rollout_is_threshold_lower, rollout_is_batch_normalize.
            Left out: the library's defaults.

    Raises:
        TypeError: a wrong type or dtype, naming the argument.
        ValueError: a wrong shape or device, or an option out of range (the core names it).
    """
    logp = _abi.tensor("logp", logp, (torch.float32,))
    device = logp.device
    old_logp = _abi.tensor("old_logp", old_logp, (torch.float32,), device)
    advantages = _abi.tensor("advantages", advantages, (torch.float32,), device)
    shape = logp.shape  # each .shape makes a new torch.Size: read once
    _abi.shape("old_logp", old_logp, shape)
    _abi.shape("advantages", advantages, shape)
    mask = _abi.mask_tensor("mask", mask, device, shape)
    if ref_logp is not None:
        ref_logp = _abi.tensor("ref_logp", ref_logp, (torch.float32,), device)
        _abi.shape("ref_logp", ref_logp, shape)
    if weights is not None:
        weights = _abi.tensor("weights", weights, (torch.float32,), device)
        _abi.shape("weights", weights, shape)
    seq_offsets, num_seqs, _ = layout("logp", logp, cu_seqlens)

    options = _abi.lib.tirl_ppo_options_default()
    options.clip_low = _abi.number("clip_low", clip_low)
    options.clip_high = options.clip_low if clip_high is None else _abi.number("clip_high", clip_high)
    options.dual_clip = 0.0 if dual_clip is None else _abi.number("dual_clip", dual_clip)
    options.aggregation = _abi.choice("aggregation", aggregation, _abi.AGGREGATIONS)
    options.token_normalizer = 0.0 if token_normalizer is None else _abi.number("token_normalizer", token_normalizer)
    options.seq_normalizer = 0.0 if seq_normalizer is None else _abi.number("seq_normalizer", seq_normalizer)
    options.horizon = 0.0 if horizon is None else _abi.number("horizon", horizon)
    options.dp_size = _abi.number("dp_size", dp_size)
    options.kl_coef = _abi.number("kl_coef", kl_coef)
    options.kl_estimator = _abi.choice("kl_estimator", kl_estimator, _abi.KL_ESTIMATORS)
    options.ratio_level = _abi.choice("ratio_level", ratio_level, _abi.RATIO_LEVELS)

    inputs = (logp.data_ptr(), old_logp.data_ptr(), advantages.data_ptr(), mask.data_ptr(), logp.numel(),
              _abi.pointer(seq_offsets), num_seqs, _abi.pointer(ref_logp), _abi.pointer(weights))
    tirl_device = _abi.device_of("logp", logp)
    if policy_loss == "vanilla" and not policy_options and options.kl_estimator <= _abi.KL_ESTIMATORS["abs"]:
        result = _abi.PpoResult()

        def kernel(grad: torch.Tensor) -> float:
            _abi.check(_abi.lib.tirl_ppo_loss(*inputs, ctypes.byref(options), grad.data_ptr(), ctypes.byref(result),
                                              tirl_device), "ppo_loss")
            return result.loss

        loss = _apply(logp, kernel)
        return loss, _stats(
            loss=result.loss, pg_loss=result.pg_loss, kl_loss=result.kl_loss,
            clip_fraction=result.clip_fraction, clip_fraction_lower=result.clip_fraction_lower,
            approx_kl=result.approx_kl, non_finite=result.non_finite, masked_tokens=result.masked_tokens,
            selected_tokens=0, rollout_is_batch_norm_factor=1.0)

    extended = _abi.policy_loss_options_default()
    extended.ppo = options
    extended.policy_loss = _abi.choice("policy_loss", policy_loss, _abi.POLICY_LOSSES)
    for name, value in policy_options.items():
        if name in _POLICY_NUMBERS:
            setattr(extended, name, _abi.number(name, value))
        elif name in _POLICY_ENUMS:
            setattr(extended, name, _abi.choice(name, value, _POLICY_ENUMS[name]))
        elif name == "seed":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
                raise _abi.value_error("seed", "an int in [0, 2^53)", value)
            extended.seed = value
        elif name == "rollout_is_batch_normalize":
            if not isinstance(value, bool):
                raise _abi.type_error(name, "a bool", value)
            extended.rollout_is_batch_normalize = int(value)
        else:
            raise TypeError(f"tirl: ppo_loss() got an unexpected keyword argument {name!r}")
    extended_result = _abi.PolicyLossResult()
    extended_result.struct_size = ctypes.sizeof(_abi.PolicyLossResult)

    def policy_kernel(grad: torch.Tensor) -> float:
        _abi.check(_abi.lib.tirl_policy_loss(*inputs, ctypes.byref(extended), grad.data_ptr(),
                                             ctypes.byref(extended_result), tirl_device), "ppo_loss")
        return extended_result.ppo.loss

    loss = _apply(logp, policy_kernel)
    r = extended_result.ppo
    return loss, _stats(
        loss=r.loss, pg_loss=r.pg_loss, kl_loss=r.kl_loss, clip_fraction=r.clip_fraction,
        clip_fraction_lower=r.clip_fraction_lower, approx_kl=r.approx_kl, non_finite=r.non_finite,
        masked_tokens=r.masked_tokens, selected_tokens=extended_result.selected_tokens,
        rollout_is_batch_norm_factor=extended_result.rollout_is_batch_norm_factor)
