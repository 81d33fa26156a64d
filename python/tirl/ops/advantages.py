"""verl's advantage estimators in one op (``tirl_advantages``; formulas: docs/math.md,
"Advantage estimators"): grpo, grpo_passk, gdpo, rloo, reinforce_plus_plus,
reinforce_plus_plus_baseline, remax, opo, gpg, gae and the optimal-token baselines."""

from __future__ import annotations

import ctypes
from typing import Optional, Tuple

import torch

from .. import _abi
from .._layout import layout


def advantages(
    mask: torch.Tensor,
    *,
    estimator: str = "grpo",
    rewards: Optional[torch.Tensor] = None,
    token_rewards: Optional[torch.Tensor] = None,
    cu_seqlens: Optional[torch.Tensor] = None,
    group_ids: Optional[torch.Tensor] = None,
    group_size: Optional[int] = None,
    norm_adv_by_std_in_grpo: Optional[bool] = None,
    epsilon: Optional[float] = None,
    reward_weights: Optional[torch.Tensor] = None,
    gamma: Optional[float] = None,
    lam: Optional[float] = None,
    values: Optional[torch.Tensor] = None,
    reward_baselines: Optional[torch.Tensor] = None,
    f_norm: Optional[float] = None,
    old_logp: Optional[torch.Tensor] = None,
    sum_pi_squared: Optional[torch.Tensor] = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
    handle_zero_tail: Optional[bool] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Token advantages and returns of one verl estimator (no gradient: they are data).

    Args:
        mask: the response (action) mask, ``[B, T]``, or ``[N]`` with ``cu_seqlens``.
        estimator: verl's registry key (see the module).
        rewards: float32 scores, ``[B]`` (gdpo: ``[K, B]`` or key-major ``[K * B]``); or
        token_rewards: float32 ``[B, T]`` / ``[N]`` (verl's token_level_rewards). Exactly one.
        group_ids / group_size: the groups of the group estimators (int32/int64 ``[B]``, or contiguous runs).
        norm_adv_by_std_in_grpo, epsilon, reward_weights, gamma, lam, values,
        reward_baselines, f_norm, old_logp, sum_pi_squared, rollout_is_weights,
        handle_zero_tail: each estimator's own inputs and options (tirl.h's
            ``tirl_advantages_options`` / ``_inputs``); left out: the library's defaults.
            An array the estimator does not read is refused by the core.

    Returns:
        ``(advantages, returns)``, float32, shaped like ``mask``; 0 on masked-out tokens.
    """
    _abi.require("tirl_advantages")
    if not isinstance(mask, torch.Tensor):
        raise _abi.type_error("mask", "a bool or uint8 tensor", mask)
    device = mask.device
    mask = _abi.mask_tensor("mask", mask, device, mask.shape)
    seq_offsets, num_seqs, num_tokens = layout("mask", mask, cu_seqlens)
    if seq_offsets is None:
        raise _abi.type_error("cu_seqlens", "an int32 tensor of B + 1 offsets for packed [N] inputs", None)
    kept = [mask, seq_offsets]  # the tensors whose pointers the call reads stay alive until it returns
    inputs = _abi.AdvantagesInputs(mask=mask.data_ptr(), seq_offsets=seq_offsets.data_ptr())

    def token_array(name: str, value: Optional[torch.Tensor]) -> None:
        if value is not None:
            value = _abi.tensor(name, value, (torch.float32,), device)
            _abi.shape(name, value, mask.shape)
            kept.append(value)
            setattr(inputs, name, value.data_ptr())

    def sequence_array(name: str, value: Optional[torch.Tensor], length: Optional[int] = None) -> None:
        if value is not None:
            value = _abi.tensor(name, value, (torch.float32,), device).reshape(-1)
            if length is not None and value.numel() != length:
                raise _abi.value_error(name, f"{length} values", value)
            kept.append(value)
            setattr(inputs, name, value.data_ptr())

    options = _abi.lib.tirl_advantages_options_default().options
    options.estimator = _abi.choice("estimator", estimator, _abi.ADVANTAGE_ESTIMATORS)
    if rewards is not None:
        scores = _abi.tensor("rewards", rewards, (torch.float32,), device)
        if scores.dim() == 2 or (scores.dim() == 1 and num_seqs and scores.numel() % num_seqs == 0):
            options.num_reward_keys = scores.shape[0] if scores.dim() == 2 else scores.numel() // num_seqs
        elif not (scores.dim() == 1 and num_seqs == 0 and scores.numel() == 0):
            raise _abi.value_error("rewards", f"[B], [K, B] or [K * B] scores with B = {num_seqs}", scores)
        sequence_array("rewards", scores)
    token_array("token_rewards", token_rewards)
    token_array("values", values)
    token_array("old_logp", old_logp)
    token_array("sum_pi_squared", sum_pi_squared)
    token_array("rollout_is_weights", rollout_is_weights)
    sequence_array("reward_baselines", reward_baselines, num_seqs)
    sequence_array("reward_weights", reward_weights)
    if group_ids is not None:
        ids = _abi.int32_tensor("group_ids", group_ids, device)
        _abi.shape("group_ids", ids, (num_seqs,))
        kept.append(ids)
        inputs.group_ids = ids.data_ptr()
    if group_size is not None:
        if isinstance(group_size, bool) or not isinstance(group_size, int):
            raise _abi.type_error("group_size", "an int", group_size)
        options.group_size = group_size
    for name, value in (("norm_adv_by_std", norm_adv_by_std_in_grpo), ("handle_zero_tail", handle_zero_tail)):
        if value is not None:
            if not isinstance(value, bool):
                raise _abi.type_error(name, "a bool", value)
            setattr(options, name, int(value))
    for name, value in (("epsilon", epsilon), ("gamma", gamma), ("lam", lam), ("f_norm", f_norm)):
        if value is not None:
            setattr(options, name, _abi.number(name, value))
    out = torch.empty(mask.shape, dtype=torch.float32, device=device)
    returns = torch.empty(mask.shape, dtype=torch.float32, device=device)
    _abi.check(_abi.lib.tirl_advantages(ctypes.byref(inputs), num_tokens, num_seqs, ctypes.byref(options),
                                        out.data_ptr(), returns.data_ptr(), _abi.device_of("mask", mask)),
               "advantages")
    return out, returns
