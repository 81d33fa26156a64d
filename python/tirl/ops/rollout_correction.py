"""Rollout correction: importance weights, rejection masks and off-policy diagnostics
between the rollout engine's log-probs and the trainer's, with verl's conventions and
metric names (docs/math.md, rolloutCorrection; verl's rollout_corr_helper.py)."""

from __future__ import annotations

import ctypes
from typing import Dict, Optional, Sequence, Tuple, Union

import torch

from .. import _abi
from .._layout import layout

Thresholds = Union[float, Sequence[float], None]


def _per_option(name: str, value: Thresholds, count: int) -> Sequence[float]:
    """One threshold for every option, or one per option; [] when absent."""
    if value is None:
        return []
    values = [value] if not isinstance(value, (list, tuple)) else list(value)
    if len(values) > 1 and len(values) != count:
        raise _abi.value_error(name, f"one number or one per rollout_rs option ({count})", value)
    return [_abi.number(f"{name}[{i}]", v) for i, v in enumerate(values)]


def rollout_correction(
    logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    cu_seqlens: Optional[torch.Tensor] = None,
    rollout_is: str = "sequence",
    rollout_is_threshold: float = 2.0,
    rollout_is_threshold_lower: Optional[float] = None,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: Union[str, Sequence[str], None] = None,
    rollout_rs_threshold: Thresholds = None,
    rollout_rs_threshold_lower: Thresholds = None,
) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, float]]:
    """verl's compute_rollout_correction_and_rejection_mask in one fused kernel.

    Args:
        logp: float32 ``[B, T]``, or ``[N]`` with ``cu_seqlens``: the trainer's log-probs
            (verl's ``old_log_prob``).
        rollout_logp: the rollout engine's log-probs of the same tokens, same shape.
        mask: same shape; nonzero = trained on (verl's ``response_mask``).
        cu_seqlens: sequence offsets ``[B + 1]`` of packed 1-D inputs (required then).
        rollout_is: ``'token'``, ``'sequence'`` or ``'none'`` (verl's None): the level of
            the importance weights exp(clamp(logp - rollout_logp, -20, 20)).
        rollout_is_threshold: upper bound of the weights (> 0); truncation (TIS).
        rollout_is_threshold_lower: IcePop: weights outside [lower, upper] become 0.
        rollout_is_batch_normalize: divide the weights by their batch mean.
        rollout_rs: rejection options, chained: a comma-separated string as in verl's
            config, or a list (``token_k1..3``, ``seq_sum_k1..3``, ``seq_mean_k1..3``,
            ``seq_max_k2..3``).
        rollout_rs_threshold: upper bound per option (one for all, or one each); ratio
            bounds for k1 options.
        rollout_rs_threshold_lower: lower ratio bounds of the k1 options (default 1/upper).

    Returns:
        ``(weights, mask, metrics)``: float32 weights shaped like ``logp`` (0 where masked
        out; pass them to ``ppo_loss(weights=...)``, they carry no gradient), the bool mask
        with rejected tokens removed, and verl's metrics by their names (prefix them with
        ``rollout_corr/`` to log them as verl does; ``non_finite`` and ``masked_tokens``
        are tirl's own).
    """
    logp = _abi.tensor("logp", logp, (torch.float32,))
    rollout_logp = _abi.tensor("rollout_logp", rollout_logp, (torch.float32,), logp.device)
    _abi.shape("rollout_logp", rollout_logp, logp.shape)
    mask = _abi.mask_tensor("mask", mask, logp.device, logp.shape)
    seq_offsets, num_seqs, _ = layout("logp", logp, cu_seqlens)
    if seq_offsets is None:
        raise _abi.type_error("cu_seqlens", "an int32 tensor of B + 1 offsets for packed [N] logp", None)

    options = _abi.lib.tirl_rollout_correction_options_default()
    options.rollout_is = _abi.choice("rollout_is", rollout_is, _abi.ROLLOUT_IS_LEVELS)
    options.rollout_is_threshold = _abi.number("rollout_is_threshold", rollout_is_threshold)
    if rollout_is_threshold_lower is not None:
        options.rollout_is_threshold_lower = _abi.number("rollout_is_threshold_lower",
                                                         rollout_is_threshold_lower)
        if not options.rollout_is_threshold_lower > 0:
            raise _abi.value_error("rollout_is_threshold_lower", "a number > 0 (None for TIS)",
                                   rollout_is_threshold_lower)
    if not isinstance(rollout_is_batch_normalize, bool):
        raise _abi.type_error("rollout_is_batch_normalize", "a bool", rollout_is_batch_normalize)
    options.rollout_is_batch_normalize = int(rollout_is_batch_normalize)
    if isinstance(rollout_rs, str):
        names = [part.strip() for part in rollout_rs.split(",") if part.strip()]
    elif rollout_rs is None:
        names = []
    else:
        names = list(rollout_rs)
    chosen = []
    for i, name in enumerate(names):
        option = _abi.choice(f"rollout_rs[{i}]", name, _abi.ROLLOUT_RS_OPTIONS)
        if option in chosen:
            raise _abi.value_error("rollout_rs", "each option once", rollout_rs)
        chosen.append(option)
        options.rollout_rs |= 1 << option
    upper = _per_option("rollout_rs_threshold", rollout_rs_threshold, len(chosen))
    lower = _per_option("rollout_rs_threshold_lower", rollout_rs_threshold_lower, len(chosen))
    for i, option in enumerate(chosen):
        is_k1 = option < 9 and option % 3 == 0
        if upper:
            options.rollout_rs_threshold[option] = upper[0 if len(upper) == 1 else i]
        if lower and (len(lower) > 1 or is_k1):
            options.rollout_rs_threshold_lower[option] = lower[0 if len(lower) == 1 else i]

    weights = torch.empty(logp.shape, dtype=torch.float32, device=logp.device)
    kept = torch.empty(logp.shape, dtype=torch.uint8, device=logp.device)
    result = _abi.RolloutCorrectionResult()
    _abi.check(_abi.lib.tirl_rollout_correction(
        logp.data_ptr(), rollout_logp.data_ptr(), mask.data_ptr(), logp.numel(),
        seq_offsets.data_ptr(), num_seqs, ctypes.byref(options), weights.data_ptr(),
        kept.data_ptr(), ctypes.byref(result), _abi.device_of("logp", logp)), "rollout_correction")

    metrics: Dict[str, float] = {}
    if options.rollout_is != 0:
        for name in _abi.ROLLOUT_IS_STATS:
            if name == "rollout_is_oob_ratio" and rollout_is_threshold_lower is None:
                continue
            if name == "rollout_is_batch_norm_factor" and not rollout_is_batch_normalize:
                continue
            metrics[name] = getattr(result, name)
    for option in sorted(chosen):
        name = next(key for key, value in _abi.ROLLOUT_RS_OPTIONS.items() if value == option)
        stats = result.rollout_rs[option]
        for stat in _abi.ROLLOUT_RS_STATS:
            if stat == "seq_fraction_low" and not name.endswith("k1"):
                continue
            metrics[f"rollout_rs_{name}_{stat}"] = getattr(stats, stat)
    if chosen:
        metrics["rollout_rs_masked_fraction"] = result.rollout_rs_masked_fraction
        metrics["rollout_rs_seq_masked_fraction"] = result.rollout_rs_seq_masked_fraction
    for name in _abi.OFF_POLICY_STATS:
        metrics[name] = getattr(result, name)
    metrics["non_finite"] = float(result.non_finite)
    metrics["masked_tokens"] = float(result.masked_tokens)
    return weights, kept.bool(), metrics
