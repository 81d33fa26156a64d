"""TRL drop-in: GRPOTrainer's loss for each ``loss_type``, computed by tirl's fused kernel.

Conventions read from huggingface/trl at commit f2cd57710ae345ea6428ae95363267fcf38a3dc8
(2026-07-24), ``trl/trainer/grpo_trainer.py`` ``GRPOTrainer._compute_loss`` and
``trl/trainer/grpo_config.py``. Every loss type TRL has is mapped onto the kernel's
aggregations where the kernel computes it:

| loss_type | TRL's normalisation | here |
|---|---|---|
| grpo | mean over sequences of the per-sequence token mean, / grad. accumulation | seq-mean-token-mean, seq_normalizer = B |
| bnpo | masked token mean of the micro-batch, / grad. accumulation | token-mean |
| dr_grpo | masked sum / (B · max_completion_length), / grad. accumulation | token-mean, token_normalizer = B · max_completion_length |
| dapo (default) | masked sum / (num_items_in_batch / num_processes) | token-mean, token_normalizer = that |
| luspo | mean over sequences of (sequence loss · its length); sequence level only | token-mean, token_normalizer = B |
| sapo | SAPO's soft gate, normalised as grpo | policy loss 'sapo', as grpo (needs tirl_policy_loss) |
| cispo | -sg(min(ratio, epsilon_high)) · A · logp, normalised as dapo | policy loss 'cispo', as dapo (needs tirl_policy_loss) |
| vespo | gamma-weighted sequence objective | NotImplementedError: no kernel yet |

``importance_sampling_level`` 'token' or 'sequence' (GSPO; the kernel's sequence ratio
gives TRL's values and gradients), ``delta`` (INTELLECT-2's two-sided clip: the kernel's
dual clip, equal to TRL's when ``delta > 1 + epsilon_high`` as TRL recommends; refused
otherwise), ``beta`` with ``ref_per_token_logps`` (the k3 KL added per token), and
per-token multipliers of the policy term (vLLM's ``importance_sampling_ratio``, the
off-policy and entropy masks) as kernel weights (one per sequence, ``[B, 1]``, at the
sequence level, where TRL's gradient and the kernel's differ for weights varying within a
sequence). Differences by construction: the kernel
clamps the token log-ratio to [-20, 20] and the sequence log-ratio at 10, and k3's argument
to [-20, 20] and its value to [-10, 10] (verl's guards; TRL has none); none is reached by
realistic log-probs. ``use_bias_correction_kl`` is not supported.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import torch

from .. import _abi
from ..ops.ppo_loss import ppo_loss

TRL_COMMIT = "f2cd57710ae345ea6428ae95363267fcf38a3dc8"
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo")
# cispo and sapo run on tirl_policy_loss where the loaded library has it; vespo has no kernel.
_NO_KERNEL = ("vespo",) if hasattr(_abi.lib, "tirl_policy_loss") else ("cispo", "sapo", "vespo")
# cispo clips the ratio above only: a lower bound of 2^-52 is never reached by the kernel's
# ratio, whose log is clamped at -20 first.
_NO_LOWER_CLIP = 1.0 - 2.0**-52


def _reduce(pairs: torch.Tensor, group: Optional[Any]) -> torch.Tensor:
    if group is None:
        return pairs
    import torch.distributed as dist
    reduced = pairs.clone()
    dist.all_reduce(reduced, group=group)
    return reduced


def grpo_loss(
    per_token_logps: torch.Tensor,
    old_per_token_logps: Optional[torch.Tensor],
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    loss_type: str = "dapo",
    epsilon: float = 0.2,
    epsilon_high: Optional[float] = None,
    delta: Optional[float] = None,
    importance_sampling_level: str = "token",
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    beta: float = 0.0,
    ref_per_token_logps: Optional[torch.Tensor] = None,
    max_completion_length: Optional[int] = None,
    num_items_in_batch: Optional[Any] = None,
    num_processes: int = 1,
    gradient_accumulation_steps: int = 1,
    importance_sampling_ratio: Optional[torch.Tensor] = None,
    loss_weights: Optional[torch.Tensor] = None,
    entropies: Optional[torch.Tensor] = None,
    group: Optional[Any] = None,
) -> Tuple[torch.Tensor, Dict[str, float]]:
    """GRPOTrainer's loss and logged metrics for one micro-batch.

    Args:
        per_token_logps: ``[B, T]`` float32 log-probs of the completion tokens (the gradient goes here).
        old_per_token_logps: ``[B, T]`` behaviour log-probs, or None (on-policy: ``per_token_logps.detach()``).
        advantages: ``[B]`` or ``[B, T]``.
        completion_mask: ``[B, T]`` (TRL: ``completion_mask``, times ``tool_mask`` when present).
        loss_type: one of ``LOSS_TYPES`` (TRL's default 'dapo').
        epsilon, epsilon_high: clip range ``[1 - epsilon, 1 + epsilon_high]`` (epsilon_high defaults to epsilon).
        delta: two-sided clip of the ratio for A < 0 (None = off; TRL reads it for the
            clipped losses only, not cispo or sapo).
        sapo_temperature_pos, sapo_temperature_neg: sapo's gate temperatures.
        importance_sampling_level: 'token' or 'sequence'.
        beta: KL coefficient; > 0 needs ``ref_per_token_logps``.
        max_completion_length: dr_grpo's constant.
        num_items_in_batch: dapo's global completion-token count of the accumulation window
            over all processes (TRL's ``inputs["num_items_in_batch"]``).
        num_processes: processes sharing ``num_items_in_batch`` (``accelerator.num_processes``).
        gradient_accumulation_steps: divisor of grpo, bnpo, dr_grpo and luspo (1 in eval).
        importance_sampling_ratio: vLLM's truncated importance weights, ``[B, T]`` or ``[B, 1]``.
        loss_weights: other multipliers of the policy term (off-policy mask, entropy mask).
        entropies: ``[B, T]`` per-token entropies, only for the 'entropy' metric.
        group: process group over which the metrics are reduced, as TRL's
            ``accelerator.reduce``/``gather`` do (None: this process only).

    Returns:
        ``(loss, metrics)``; metrics use TRL's names: 'kl' (with beta), 'entropy' (with
        entropies), 'clip_ratio/low_mean', 'clip_ratio/high_mean', 'clip_ratio/region_mean',
        'clip_ratio/low_min', 'clip_ratio/high_max'.
    """
    if loss_type not in LOSS_TYPES:
        raise _abi.value_error("loss_type", "one of " + ", ".join(map(repr, LOSS_TYPES)), loss_type)
    if loss_type in _NO_KERNEL:
        raise NotImplementedError(f"tirl: loss_type {loss_type!r} has no tirl kernel yet (TRL's own code computes it)")
    if importance_sampling_level not in ("token", "sequence"):
        raise _abi.value_error("importance_sampling_level", "'token' or 'sequence'", importance_sampling_level)
    logp = _abi.tensor("per_token_logps", per_token_logps, (torch.float32,))
    if logp.dim() != 2:
        raise _abi.value_error("per_token_logps", "a [B, T] tensor", per_token_logps)
    batch = logp.shape[0]
    old = logp.detach() if old_per_token_logps is None else old_per_token_logps
    advantages = advantages.to(torch.float32)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    advantages = advantages.expand_as(logp).contiguous()
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    sequence = importance_sampling_level == "sequence"

    options: Dict[str, Any] = dict(clip_low=epsilon, clip_high=epsilon_high,
                                   ratio_level="sequence" if sequence else "token")
    if loss_type in ("cispo", "sapo"):
        if sequence:
            raise NotImplementedError(f"tirl: loss_type {loss_type!r} with importance_sampling_level='sequence' "
                                      "has no kernel yet")
        if loss_type == "cispo":  # TRL's clamp(ratio, max=epsilon_high), epsilon_high being the bound itself
            options.update(policy_loss="cispo", clip_low=_NO_LOWER_CLIP, clip_high=epsilon_high - 1.0)
        else:
            options.update(policy_loss="sapo", tau_pos=sapo_temperature_pos, tau_neg=sapo_temperature_neg)
    elif delta is not None:
        if sequence:
            raise NotImplementedError("tirl: delta with importance_sampling_level='sequence' has no kernel yet")
        if not delta > 1 + epsilon_high:
            raise _abi.value_error("delta", f"a number > 1 + epsilon_high = {1 + epsilon_high}", delta)
        options["dual_clip"] = delta
    if beta != 0.0:
        if ref_per_token_logps is None:
            raise _abi.type_error("ref_per_token_logps", "a [B, T] float32 tensor with beta != 0", None)
        options.update(ref_logp=ref_per_token_logps, kl_coef=beta, kl_estimator="k3")
    scale = 1.0 / gradient_accumulation_steps
    if loss_type in ("grpo", "sapo"):
        options.update(aggregation="seq-mean-token-mean", seq_normalizer=batch, dp_size=scale)
    elif loss_type == "bnpo":
        options.update(aggregation="token-mean", dp_size=scale)
    elif loss_type == "dr_grpo":
        if max_completion_length is None:
            raise _abi.type_error("max_completion_length", "an int for loss_type 'dr_grpo'", None)
        options.update(aggregation="token-mean", token_normalizer=batch * max_completion_length, dp_size=scale)
    elif loss_type in ("dapo", "cispo"):
        if num_items_in_batch is None:
            raise _abi.type_error("num_items_in_batch",
                                  f"the global completion-token count for loss_type {loss_type!r}", None)
        items = float(num_items_in_batch.item() if isinstance(num_items_in_batch, torch.Tensor)
                      else num_items_in_batch)
        options.update(aggregation="token-mean", token_normalizer=max(items, 1.0) / num_processes)
    else:  # luspo
        if not sequence:
            raise NotImplementedError("tirl: loss_type 'luspo' is supported with importance_sampling_level='sequence' "
                                      "(TRL recommends it; its token level averages over unmasked tokens too)")
        if beta != 0.0:
            raise NotImplementedError("tirl: loss_type 'luspo' with beta != 0 has no kernel yet")
        options.update(aggregation="token-mean", token_normalizer=batch, dp_size=scale)

    weights = None
    for name, multiplier in (("importance_sampling_ratio", importance_sampling_ratio),
                             ("loss_weights", loss_weights)):
        if multiplier is not None:
            if sequence and multiplier.dim() == 2 and multiplier.shape[1] != 1:
                # TRL's sequence ratio spreads a weighted sum over the sequence's tokens; the
                # kernel's (verl's) gives each token its own weight: equal only per sequence.
                raise NotImplementedError(f"tirl: {name} with importance_sampling_level='sequence' must be one "
                                          "weight per sequence ([B, 1]), as TRL's sequence-level modes give")
            multiplier = multiplier.to(torch.float32).expand_as(logp)
            weights = multiplier if weights is None else weights * multiplier
    if weights is not None:
        options["weights"] = weights.contiguous()

    loss, _ = ppo_loss(logp, old, advantages, completion_mask, **options)
    return loss, _metrics(loss_type, logp, old, advantages, completion_mask, epsilon, epsilon_high, sequence,
                          ref_per_token_logps if beta != 0.0 else None, entropies, group)


@torch.no_grad()
def _metrics(loss_type, logp, old, advantages, completion_mask, epsilon, epsilon_high, sequence, ref, entropies,
             group):
    """TRL's logged metrics (its ``global_masked_mean``, ``masked_seq_mean``, nanmin/nanmax)."""
    mask = completion_mask.to(torch.float64)
    log_ratio = logp.detach().double() - old.double()
    if sequence:
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
        advantages = advantages[:, :1]
    ratio = torch.exp(log_ratio)
    low = ((ratio < 1 - epsilon) & (advantages < 0)).double()
    high = ((ratio > 1 + epsilon_high) & (advantages > 0)).double()

    def masked_sum_count(x):
        if x.shape[1] == 1:
            return [x.sum(), torch.tensor(float(x.shape[0]), dtype=torch.float64, device=x.device)]
        return [(x * mask).sum(), mask.sum()]

    def seq_mean(x):
        return x.squeeze(1) if x.shape[1] == 1 else (x * mask).sum(-1) / mask.sum(-1)

    clipped = loss_type not in ("cispo", "sapo")
    parts, names = [], []
    if clipped:
        parts = masked_sum_count(low) + masked_sum_count(high) + masked_sum_count(torch.maximum(low, high))
        names = ["clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"]
    elif loss_type == "cispo":
        parts = masked_sum_count(((ratio > epsilon_high) & (advantages > 0)).double())
        names = ["cispo_clip_ratio"]
    if ref is not None:
        x = ref.double() - logp.detach().double()
        parts += masked_sum_count(torch.exp(x) - x - 1)
        names.append("kl")
    if entropies is not None:
        parts += masked_sum_count(entropies.detach().double())
        names.append("entropy")
    totals = _reduce(torch.stack(parts), group).tolist() if parts else []
    metrics = {name: totals[2 * i] / max(totals[2 * i + 1], 1.0) for i, name in enumerate(names)}
    if not clipped:
        return metrics
    low_seq, high_seq = seq_mean(low), seq_mean(high)
    if group is not None:
        import torch.distributed as dist
        gathered_low = [torch.zeros_like(low_seq) for _ in range(dist.get_world_size(group))]
        gathered_high = [torch.zeros_like(high_seq) for _ in range(dist.get_world_size(group))]
        dist.all_gather(gathered_low, low_seq.contiguous(), group=group)
        dist.all_gather(gathered_high, high_seq.contiguous(), group=group)
        low_seq, high_seq = torch.cat(gathered_low), torch.cat(gathered_high)
    finite_low = low_seq[~torch.isnan(low_seq)]
    finite_high = high_seq[~torch.isnan(high_seq)]
    metrics["clip_ratio/low_min"] = float(finite_low.min()) if finite_low.numel() else math.nan
    metrics["clip_ratio/high_max"] = float(finite_high.max()) if finite_high.numel() else math.nan
    return metrics
