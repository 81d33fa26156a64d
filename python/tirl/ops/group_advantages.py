"""GRPO / Dr.GRPO group-normalised advantages (MATH.md, groupAdvantages)."""

from __future__ import annotations

import ctypes
from typing import Optional

import torch

from .. import _abi


def group_advantages(
    rewards: torch.Tensor,
    *,
    group_ids: Optional[torch.Tensor] = None,
    group_size: Optional[int] = None,
    scale_by_std: bool = True,
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """A_i = (r_i - mean_g) / (std_g + epsilon) within each group (unbiased std; a group
    of one has mean 0 and std 1), or r_i - mean_g with ``scale_by_std=False`` (Dr.GRPO).

    Args:
        rewards: float32 ``[B]``, one scalar reward per sequence.
        group_ids: int32/int64 ``[B]``, any order and any values; or
        group_size: contiguous groups of this size (must divide B). Exactly one is needed.
        scale_by_std: divide by the group's std.
        epsilon: added to the std, >= 0.

    Returns:
        float32 ``[B]`` advantages (no gradient: rewards are data).
    """
    rewards = _abi.tensor("rewards", rewards, (torch.float32,))
    if rewards.dim() != 1:
        raise _abi.value_error("rewards", "a 1-D [B] tensor", rewards)
    if (group_ids is None) == (group_size is None):
        raise _abi.type_error("group_ids", "exactly one of group_ids and group_size", group_ids)
    size = 0
    if group_ids is not None:
        group_ids = _abi.int32_tensor("group_ids", group_ids, rewards.device)
        _abi.shape("group_ids", group_ids, rewards.shape)
    else:
        if isinstance(group_size, bool) or not isinstance(group_size, int):
            raise _abi.type_error("group_size", "an int", group_size)
        size = group_size
    if not isinstance(scale_by_std, bool):
        raise _abi.type_error("scale_by_std", "a bool", scale_by_std)
    options = _abi.lib.tirl_group_advantages_options_default()
    options.scale_by_std = int(scale_by_std)
    options.epsilon = _abi.number("epsilon", epsilon)
    advantages = torch.empty_like(rewards)
    _abi.check(_abi.lib.tirl_group_advantages(
        rewards.data_ptr(), rewards.numel(), _abi.pointer(group_ids), size, ctypes.byref(options),
        advantages.data_ptr(), _abi.device_of("rewards", rewards)), "group_advantages")
    return advantages
