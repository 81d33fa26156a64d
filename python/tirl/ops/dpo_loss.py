"""DPO and its variants on summed completion log-probs (MATH.md, dpoLoss)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Tuple

import torch

from .. import _abi


@dataclass(frozen=True)
class DpoStats:
    """Statistics of one ``dpo_loss`` call."""

    loss: float
    reward_accuracy: float
    """Mean of [chosen reward > rejected reward]."""
    chosen_rewards: torch.Tensor
    """beta * (policy_chosen - ref_chosen), float32 ``[P]``."""
    rejected_rewards: torch.Tensor
    """beta * (policy_rejected - ref_rejected), float32 ``[P]``."""


class DpoLossFunction(torch.autograd.Function):
    """Autograd form of ``tirl_dpo_loss``: gradients into the two policy inputs."""

    @staticmethod
    def forward(ctx, policy_chosen, policy_rejected, ref_chosen, ref_rejected, options,
                result, rewards):  # type: ignore[override]
        grad_chosen = torch.empty_like(policy_chosen)
        grad_rejected = torch.empty_like(policy_chosen)
        chosen_rewards, rejected_rewards = rewards
        _abi.check(_abi.lib.tirl_dpo_loss(
            policy_chosen.data_ptr(), policy_rejected.data_ptr(), ref_chosen.data_ptr(),
            ref_rejected.data_ptr(), policy_chosen.numel(), ctypes.byref(options),
            grad_chosen.data_ptr(), grad_rejected.data_ptr(), chosen_rewards.data_ptr(),
            rejected_rewards.data_ptr(), ctypes.byref(result),
            _abi.device_of("policy_chosen", policy_chosen)), "dpo_loss")
        ctx.save_for_backward(grad_chosen, grad_rejected)
        return torch.scalar_tensor(result.loss, dtype=torch.float32, device=policy_chosen.device)

    @staticmethod
    def backward(ctx, grad_loss):  # type: ignore[override]
        grad_chosen, grad_rejected = ctx.saved_tensors
        return grad_chosen * grad_loss, grad_rejected * grad_loss, None, None, None, None, None


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    *,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    variant: str = "sigmoid",
) -> Tuple[torch.Tensor, DpoStats]:
    """Mean DPO loss over pairs (TRL's formulas) and its :class:`DpoStats`.

    Args:
        policy_chosen, policy_rejected, ref_chosen, ref_rejected: float32 ``[P]`` summed
            completion log-probs (per-token averages for 'ipo').
        beta: > 0.
        label_smoothing: in [0, 0.5) (cDPO for 'sigmoid', robust DPO for 'robust').
        variant: 'sigmoid', 'hinge', 'ipo' or 'robust'.

    Returns:
        The loss (0-d float32, differentiable with respect to the two policy inputs) and stats.
    """
    policy_chosen = _abi.tensor("policy_chosen", policy_chosen, (torch.float32,))
    if policy_chosen.dim() != 1:
        raise _abi.value_error("policy_chosen", "a 1-D [P] tensor", policy_chosen)
    device = policy_chosen.device
    inputs = {"policy_rejected": policy_rejected, "ref_chosen": ref_chosen, "ref_rejected": ref_rejected}
    for name in inputs:
        inputs[name] = _abi.tensor(name, inputs[name], (torch.float32,), device)
        _abi.shape(name, inputs[name], policy_chosen.shape)
    options = _abi.lib.tirl_dpo_options_default()
    options.beta = _abi.number("beta", beta)
    options.label_smoothing = _abi.number("label_smoothing", label_smoothing)
    options.variant = _abi.choice("variant", variant, _abi.DPO_VARIANTS)
    result = _abi.DpoResult()
    rewards = (torch.empty_like(policy_chosen), torch.empty_like(policy_chosen))
    loss = DpoLossFunction.apply(policy_chosen, inputs["policy_rejected"], inputs["ref_chosen"],
                                 inputs["ref_rejected"], options, result, rewards)
    return loss, DpoStats(loss=result.loss, reward_accuracy=result.reward_accuracy,
                          chosen_rewards=rewards[0], rejected_rewards=rewards[1])
