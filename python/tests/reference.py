"""Independent float64 references of every op, written from MATH.md in plain PyTorch so that
autograd gives their gradients. Shared by the op tests, the distributed tests and the
benchmark's correctness check. Inputs are lists of per-sequence boundaries (offsets)."""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch


def segments(offsets: Sequence[int]):
    return [(int(offsets[i]), int(offsets[i + 1])) for i in range(len(offsets) - 1)]


def aggregate(x: torch.Tensor, m: torch.Tensor, offsets: Optional[Sequence[int]], aggregation: str,
              token_normalizer=None, seq_normalizer=None, horizon=None, dp_size=1.0) -> torch.Tensor:
    """MATH.md's aggregation table on flat [N] float64 tensors."""
    masked = torch.where(m > 0, x, torch.zeros_like(x))
    if aggregation in ("token-mean", "token-sum") and offsets is None:
        offsets = [0, x.numel()]
    sums, counts = [], []
    for start, end in segments(offsets):
        sums.append(masked[start:end].sum())
        counts.append(float(m[start:end].sum()))
    zero = x.sum() * 0
    if aggregation == "token-sum":
        return sum(sums, zero) * dp_size
    if aggregation == "token-mean":
        normalizer = sum(counts) if token_normalizer is None else token_normalizer
        return zero if normalizer == 0 else sum(sums, zero) / normalizer * dp_size
    nonempty = [i for i, c in enumerate(counts) if c > 0]
    normalizer = len(nonempty) if seq_normalizer is None else seq_normalizer
    if normalizer == 0:
        return zero
    if aggregation == "seq-mean-token-sum":
        return sum((sums[i] for i in nonempty), zero) / normalizer * dp_size
    if aggregation == "seq-mean-token-mean":
        return sum((sums[i] / counts[i] for i in nonempty), zero) / normalizer * dp_size
    if aggregation == "seq-mean-token-sum-norm":
        if horizon is None:
            horizon = max(end - start for start, end in segments(offsets))
        return sum((sums[i] for i in nonempty), zero) / normalizer / horizon * dp_size
    raise ValueError(aggregation)


def kl_term(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    x = logp - ref_logp
    if estimator == "k1":
        return x
    if estimator == "abs":
        return x.abs()
    if estimator == "k2":
        return 0.5 * x * x
    clamped = x.clamp(-20, 20)
    return (torch.exp(-clamped) + clamped - 1).clamp(-10, 10)


def ppo_loss(logp, old_logp, advantages, mask, offsets=None, *, clip_low=0.2, clip_high=None,
             dual_clip=None, aggregation="token-mean", token_normalizer=None, seq_normalizer=None,
             horizon=None, dp_size=1.0, ref_logp=None, kl_coef=0.0, kl_estimator="k3", weights=None,
             ratio_level="token"):
    """PPO / GSPO loss on flat float64 tensors; returns (loss, pg_loss, kl_loss, stats)."""
    clip_high = clip_low if clip_high is None else clip_high
    m = mask.double()
    if ratio_level == "sequence":
        log_ratio = torch.zeros_like(logp)
        pieces = []
        for start, end in segments(offsets):
            n = float(m[start:end].sum())
            seq = ((logp[start:end] - old_logp[start:end]) * m[start:end]).sum() / max(n, 1.0)
            pieces.append(seq.detach().expand(end - start))
        seq_log_ratio = torch.cat(pieces) if pieces else log_ratio
        log_ratio = torch.clamp(seq_log_ratio + logp - logp.detach(), max=10.0)
        clamped = (logp - old_logp).clamp(-20, 20)
    else:
        log_ratio = (logp - old_logp).clamp(-20, 20)
        clamped = log_ratio
    ratio = torch.exp(log_ratio)
    l1 = -advantages * ratio
    l2 = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    lc = torch.maximum(l1, l2)
    loss_tokens = lc
    lower = torch.zeros_like(lc, dtype=torch.bool)
    if dual_clip is not None and ratio_level == "token":
        lower = (advantages < 0) & (lc > -advantages * dual_clip)
        loss_tokens = torch.where(advantages < 0, torch.minimum(lc, -advantages * dual_clip), lc)
    if weights is not None:
        loss_tokens = loss_tokens * weights
    norms = dict(token_normalizer=token_normalizer, seq_normalizer=seq_normalizer, horizon=horizon,
                 dp_size=dp_size)
    pg = aggregate(loss_tokens, m, offsets, aggregation, **norms)
    kl = aggregate(kl_term(logp, ref_logp, kl_estimator), m, offsets, aggregation, **norms) \
        if ref_logp is not None else pg * 0
    count = float(m.sum())
    on = m > 0
    stats = dict(
        clip_fraction=float((l2 > l1)[on].double().sum()) / count if count else 0.0,
        clip_fraction_lower=float(lower[on].double().sum()) / count if count else 0.0,
        approx_kl=float((-clamped)[on].sum()) / count if count else 0.0,
        masked_tokens=int(count),
    )
    return pg + kl_coef * kl, pg, kl, stats


def group_advantages(rewards: torch.Tensor, group_ids: List[int], scale_by_std=True, epsilon=1e-6):
    out = torch.empty_like(rewards)
    for g in set(group_ids):
        members = [i for i, x in enumerate(group_ids) if x == g]
        values = rewards[members]
        if len(members) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = values.mean(), values.std(unbiased=True)
        out[members] = (values - mean) / (std + epsilon) if scale_by_std else values - mean
    return out


def log_sigmoid(x):
    return torch.minimum(x, torch.zeros_like(x)) - torch.log1p(torch.exp(-x.abs()))


def dpo_loss(pc, pr, rc, rr, beta=0.1, label_smoothing=0.0, variant="sigmoid"):
    delta = (pc - rc) - (pr - rr)
    ls = label_smoothing
    if variant == "sigmoid":
        losses = -(1 - ls) * log_sigmoid(beta * delta) - ls * log_sigmoid(-beta * delta)
    elif variant == "hinge":
        losses = torch.relu(1 - beta * delta)
    elif variant == "ipo":
        losses = (delta - 1 / (2 * beta)) ** 2
    elif variant == "robust":
        losses = (-(1 - ls) * log_sigmoid(beta * delta) + ls * log_sigmoid(-beta * delta)) / (1 - 2 * ls)
    else:
        raise ValueError(variant)
    chosen, rejected = beta * (pc - rc), beta * (pr - rr)
    return losses.mean(), chosen, rejected, float((chosen > rejected).double().mean())


def token_logprobs(logits: torch.Tensor, labels: torch.Tensor, temperature=1.0):
    z = logits.double() / temperature
    logp_all = torch.log_softmax(z, dim=-1)
    logp = logp_all.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy
