#!/usr/bin/python3
"""PyTorch eager peers of the tirl kernels, written the way verl and TRL write them.

Each op is the code a trainer runs today: log_softmax + gather for token log-probs,
elementwise clamp/exp/max chains for the PPO loss, autograd for every backward. The
formulas are written once (verl_ppo_loss, trl_dpo_loss, grpo_advantages, log_probs) and
timed on the CPU for `tirl bench` and on a GPU for benchmarks/gpu/run.sh.

Three modes:
  --serve           (used by `tirl bench`, CPU) first stdin line: {"threads": T, "cases": [...],
                    "sweep": {"bytes", "threads"} (optional)};
                    then one JSON command per line, one JSON reply per line:
                    {"cmd": "setup", "id"} -> {"ok": true} | {"error"}
                    {"cmd": "sample", "id", "inner", "evict": true (optional)}
                        -> {"seconds", "cpuSeconds": per call, "sweptBytes"}; with evict,
                        the caches are swept first (CacheSweep), outside the timed region,
                        and sweptBytes is the bytes that sweep read (else 0)
                    {"cmd": "drop", "id"} -> {"ok": true}
                    Inputs have the shapes and distributions of benchmarks/data.ts (not
                    the same values: timings do not depend on them).
  CASES.json        standalone (CPU): {"threads", "cases", "reps"}; prints {"id": median seconds}.
  --gpu --tirl gpu_check.json --out DIR [--quick]
                    (used by benchmarks/gpu/run.sh) the CUDA peers at the sizes of
                    benchmarks/gpu/sizes.h, merged with gpu_check's JSON into results.json
                    and a Markdown table results.md. Without PyTorch or CUDA it still writes
                    the table of tirl's results, saying the peers are missing.
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

# benchmarks/gpu/sizes.h (keep in step).
PPO_TOKENS = 1048576
SEQUENCE_LENGTH = 1024
GROUP_REWARDS = 65536
GROUP_SIZE = 16
DPO_PAIRS = 65536
LOGITS_SHAPES = [(4096, 32000), (1024, 151936)]


def tool_use_roles(torch, num_seqs, seq_len, generator):
    """Roles of a padded tool-use batch, as data.ts draws them: a prompt (10%), action
    spans (40-200 tokens) alternating with tool feedback (10-90), padding (0-10%)."""
    roles = torch.zeros(num_seqs, seq_len, dtype=torch.uint8)
    spans = torch.randint(0, 1 << 30, (num_seqs, 2 + seq_len // 10), generator=generator).tolist()
    for s in range(num_seqs):
        draws = spans[s]
        prompt = int(seq_len * 0.1)
        padding = int(seq_len * 0.1 * (draws[0] / (1 << 30)))
        t, action, k = prompt, True, 1
        while t < seq_len - padding:
            span = 40 + draws[k] % 161 if action else 10 + draws[k] % 81
            end = min(seq_len - padding, t + span)
            roles[s, t:end] = 1 if action else 2
            t, action, k = end, not action, k + 1
        roles[s, seq_len - padding:] = 3
    return roles


# ------------------------------------------------------------------ the formulas, once

def masked_mean(values, mask):
    return (values * mask).sum() / (mask.sum() + 1e-8)  # verl's core_algos.masked_mean


def verl_ppo_loss(torch, logp, old_logp, advantages, mask, clip_low, clip_high, dual_clip):
    """verl compute_policy_loss_vanilla, token-mean: (loss, clipfrac, clipfrac_lower, ppo_kl)."""
    negative_approx_kl = torch.clamp(logp - old_logp, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, mask)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), mask)
    pg_losses3 = -advantages * dual_clip
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_clipfrac_lower = masked_mean(
        torch.gt(clip_pg_losses1, pg_losses3) * (advantages < 0).float(), mask)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    return masked_mean(pg_losses, mask), pg_clipfrac, pg_clipfrac_lower, ppo_kl


def low_var_kl(torch, logp, ref_logp):
    """verl's low_var_kl (k3) per token, with its clamps."""
    log_ratio = torch.clamp(ref_logp - logp, min=-20, max=20)
    return torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10, max=10)


def trl_dpo_loss(F, policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta, label_smoothing):
    """TRL DPOTrainer.dpo_loss, sigmoid: (mean loss, reward accuracy)."""
    logits = (policy_chosen - policy_rejected) - (ref_chosen - ref_rejected)
    losses = (-F.logsigmoid(beta * logits) * (1 - label_smoothing)
              - F.logsigmoid(-beta * logits) * label_smoothing)
    chosen_rewards = beta * (policy_chosen - ref_chosen).detach()
    rejected_rewards = beta * (policy_rejected - ref_rejected).detach()
    return losses.mean(), (chosen_rewards > rejected_rewards).float().mean()


def grpo_advantages(scores, group_size):
    """GRPO outcome advantages over contiguous groups, vectorised (verl loops over a dict of
    groups in Python, which is far slower; this is its best form)."""
    grouped = scores.view(-1, group_size)
    mean = grouped.mean(dim=-1, keepdim=True)
    std = grouped.std(dim=-1, keepdim=True)  # unbiased
    return ((grouped - mean) / (std + 1e-6)).view(-1)


def log_probs(torch, logits, labels):
    """verl logprobs_from_logits: log_softmax + gather, in f32 (verl's .float() for bf16)."""
    if logits.dtype != torch.float32:
        return torch.log_softmax(logits, dim=-1, dtype=torch.float32).gather(-1, labels).squeeze(-1)
    return torch.log_softmax(logits, dim=-1).gather(-1, labels).squeeze(-1)


# ------------------------------------------------------------------ CPU cases (tirl bench)

def ppo_loss(torch, numSeqs, seqLen, kl, clipLow, clipHigh, dualClip, klCoef):
    """verl compute_policy_loss_vanilla (token-mean) + low_var_kl (k3), then backward."""
    g = torch.Generator().manual_seed(1)
    mask = tool_use_roles(torch, numSeqs, seqLen, g) == 1
    logp = (-5 * torch.rand(numSeqs, seqLen, generator=g)).requires_grad_()
    old_logp = logp.detach() + 0.1 * torch.randn(numSeqs, seqLen, generator=g)
    advantages = torch.randn(numSeqs, seqLen, generator=g)
    ref_logp = logp.detach() + 0.05 * torch.randn(numSeqs, seqLen, generator=g)

    def call():
        logp.grad = None
        loss, pg_clipfrac, pg_clipfrac_lower, ppo_kl = verl_ppo_loss(
            torch, logp, old_logp, advantages, mask, clipLow, clipHigh, dualClip)
        if kl:
            loss = loss + klCoef * masked_mean(low_var_kl(torch, logp, ref_logp), mask)
        loss.backward()
        return loss.item(), pg_clipfrac.item(), pg_clipfrac_lower.item(), ppo_kl.item()

    return call


def agg_loss(torch, loss_mat, loss_mask, mode):
    """verl core_algos.agg_loss on one rank (dp_size 1, the batch's own normalisers)."""
    if mode == 'token-mean':
        return (loss_mat * loss_mask).sum() / loss_mask.sum()
    if mode == 'seq-mean-token-mean':
        count = loss_mask.sum(dim=-1)
        seq_losses = (loss_mat * loss_mask).sum(dim=-1) / (count + 1e-8)
        seq_mask = (count > 0).float()
        return (seq_losses * seq_mask).sum() / seq_mask.sum()
    raise ValueError(mode)


def verl_policy_loss(torch, loss, log_prob, old_log_prob, advantages, response_mask, p):
    """verl's registered policy loss `loss` (core_algos.py, 1dda039b), as it computes it:
    (pg_loss, metrics as tensors). `p` holds the config values the loss reads."""
    mm = masked_mean
    clip_low, clip_high = p['clipLow'], p['clipHigh']
    if loss == 'gspo':
        negative_approx_kl = log_prob - old_log_prob
        seq_lengths = torch.sum(response_mask, dim=-1).clamp(min=1)
        negative_approx_kl_seq = torch.sum(negative_approx_kl * response_mask, dim=-1) / seq_lengths
        log_seq_ratio = log_prob - log_prob.detach() + negative_approx_kl_seq.detach().unsqueeze(-1)
        seq_ratio = torch.exp(torch.clamp(log_seq_ratio, max=10.0))
        pg_losses1 = -advantages * seq_ratio
        pg_losses2 = -advantages * torch.clamp(seq_ratio, 1 - clip_low, 1 + clip_high)
        pg_losses = torch.maximum(pg_losses1, pg_losses2)
        pg_loss = agg_loss(torch, pg_losses, response_mask, 'seq-mean-token-mean')
        return pg_loss, (mm(torch.gt(pg_losses2, pg_losses1).float(), response_mask), mm(-negative_approx_kl, response_mask))
    if loss in ('dppo_tv', 'dppo_kl'):
        negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
        ratio = torch.exp(negative_approx_kl)
        ppo_kl = mm(-negative_approx_kl, response_mask)
        truncated_ratio = torch.clamp(ratio, max=p['clipRatioC']).detach()
        prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
        if loss == 'dppo_tv':
            valid_positive = (prob - old_prob) <= clip_high
            valid_negative = (prob - old_prob) >= -clip_low
        else:
            binary_kl = old_prob * (old_log_prob - log_prob) + (1 - old_prob) * torch.log(
                (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8))
            valid_positive = (binary_kl <= clip_high) | (prob <= old_prob)
            valid_negative = (binary_kl <= clip_low) | (prob >= old_prob)
        valid_mask = torch.where(advantages > 0, valid_positive, valid_negative).detach().float()
        pg_losses = -advantages * truncated_ratio * log_prob * valid_mask
        pg_loss = agg_loss(torch, pg_losses, response_mask, 'token-mean')
        return pg_loss, (mm(1.0 - valid_mask, response_mask), ppo_kl,
                         mm((ratio > p['clipRatioC']).float() * valid_mask, response_mask))
    if loss == 'sapo':
        negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
        ratio = torch.exp(negative_approx_kl)
        taus = torch.where(advantages > 0, torch.as_tensor(p['tauPos']), torch.as_tensor(p['tauNeg']))
        gates = torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus)
        pg_loss = agg_loss(torch, -gates * advantages, response_mask, 'seq-mean-token-mean')
        return pg_loss, (mm(-negative_approx_kl, response_mask),)
    if loss == 'gpg':
        return agg_loss(torch, -log_prob * advantages, response_mask, 'token-mean'), ()
    if loss == 'clip_cov':
        negative_approx_kl = log_prob - old_log_prob
        ratio = torch.exp(negative_approx_kl)
        ppo_kl = mm(-negative_approx_kl, response_mask)
        pg_losses1 = -advantages * ratio
        corr = torch.ones_like(advantages)
        pg_losses2 = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
        clip_by_origin = (pg_losses2 > pg_losses1) & (response_mask > 0)
        cov_all = (advantages - mm(advantages, response_mask)) * (log_prob - mm(log_prob.detach(), response_mask))
        cov_all[response_mask == 0] = -torch.inf
        cov_all[clip_by_origin] = -torch.inf
        clip_num = max(int(p['clipCovRatio'] * response_mask.sum().item()), 1)
        top_k_idx = torch.nonzero((cov_all < p['clipCovUb']) & (cov_all > p['clipCovLb']) & (response_mask > 0))
        if len(top_k_idx) > 0:
            perm = torch.randperm(len(top_k_idx))
            top_k_idx = top_k_idx[perm[: min(clip_num, len(top_k_idx))]]
        corr[top_k_idx[:, 0], top_k_idx[:, 1]] = 0
        pg_clipfrac = mm((corr == 0).float(), response_mask)
        pg_loss = agg_loss(torch, torch.maximum(pg_losses1, pg_losses2) * corr, response_mask, 'token-mean')
        return pg_loss, (pg_clipfrac, ppo_kl)
    if loss == 'kl_cov':
        negative_approx_kl = log_prob - old_log_prob
        abs_kl = negative_approx_kl.abs()
        ratio = torch.exp(negative_approx_kl)
        ppo_kl_abs = mm(negative_approx_kl.abs(), response_mask)
        pg_losses1 = -advantages * ratio
        pg_losses_kl = -advantages * ratio + p['ppoKlCoef'] * abs_kl
        pg_losses = pg_losses1
        all_valid = response_mask > 0
        all_valid_idx = torch.nonzero(all_valid.reshape(-1), as_tuple=True)[0]
        all_valid_adv = advantages[all_valid].detach().reshape(-1).cpu()
        all_valid_logp = log_prob[all_valid].detach().reshape(-1).cpu()
        cov_lst_all = (all_valid_adv - all_valid_adv.mean()) * (all_valid_logp - all_valid_logp.mean())
        k_percent_nums = max(1, int(len(cov_lst_all) * p['klCovRatio']))
        large = all_valid_idx[torch.topk(cov_lst_all, k_percent_nums, largest=True).indices]
        width = advantages.shape[1]
        pg_losses[large // width, large % width] = pg_losses_kl[large // width, large % width]
        return agg_loss(torch, pg_losses, response_mask, 'token-mean'), (ppo_kl_abs,)
    if loss == 'geo_mean':
        negative_approx_kl = log_prob - old_log_prob
        ppo_kl = mm(-negative_approx_kl, response_mask)
        sgn_advantage = torch.sign(advantages)
        negative_approx_kl_clamp = torch.clamp(negative_approx_kl, -clip_low, clip_high)
        negative_approx_kl_min = sgn_advantage * torch.min(sgn_advantage * negative_approx_kl,
                                                           sgn_advantage * negative_approx_kl_clamp)
        response_mask_sum = response_mask.sum(dim=-1)
        ratio = torch.exp((negative_approx_kl_min * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8))
        advantage = (advantages * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8)
        pg_loss = torch.mean(-advantage * ratio)
        clipped = torch.ne(negative_approx_kl, negative_approx_kl_clamp)
        return pg_loss, (mm((clipped * (advantages > 0)).float(), response_mask), ppo_kl,
                         mm((clipped * (advantages < 0)).float(), response_mask))
    if loss == 'dro':
        log_ratio = log_prob - old_log_prob
        pg_losses = -(log_prob * advantages - 0.5 * p['droBeta'] * log_ratio.square())
        return agg_loss(torch, pg_losses, response_mask, 'token-mean'), (mm(-log_ratio, response_mask),)
    if loss == 'cispo':
        negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
        ratio = torch.exp(negative_approx_kl)
        ppo_kl = mm(-negative_approx_kl, response_mask)
        clipped_ratio = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
        pg_losses = -clipped_ratio.detach() * advantages * log_prob
        return agg_loss(torch, pg_losses, response_mask, 'token-mean'), (mm((ratio != clipped_ratio).float(), response_mask), ppo_kl)
    if loss in ('reinforce', 'bypass_mode'):
        # bypass_mode with loss_type 'reinforce': rollout_corr_helper's sequence-level TIS
        # weights (Σ masked log-ratio, clamped to ±20, exp, truncated at the threshold,
        # detached), then compute_policy_loss_reinforce; old_log_prob is the rollout's.
        weights = None
        if loss == 'bypass_mode':
            with torch.no_grad():
                log_ratio = log_prob - old_log_prob
                seq = torch.clamp((log_ratio * response_mask).sum(dim=-1, keepdim=True), min=-20.0, max=20.0)
                weights = torch.clamp(torch.exp(seq), max=p['rolloutIsThreshold']).expand_as(log_prob) * response_mask
        pg_losses = -advantages * log_prob * (weights if weights is not None else 1.0)
        pg_loss = agg_loss(torch, pg_losses, response_mask, 'token-mean')
        return pg_loss, (mm(-(log_prob - old_log_prob), response_mask),)
    raise ValueError(f'unknown policy loss {loss}')


def policy_loss(torch, loss, numSeqs, seqLen, **params):
    """verl's policy loss `loss` (verl_policy_loss) on a padded tool-use batch, then backward."""
    g = torch.Generator().manual_seed(1)
    mask = (tool_use_roles(torch, numSeqs, seqLen, g) == 1).float()
    logp = (-5 * torch.rand(numSeqs, seqLen, generator=g)).requires_grad_()
    old_logp = logp.detach() + 0.1 * torch.randn(numSeqs, seqLen, generator=g)
    advantages = torch.randn(numSeqs, seqLen, generator=g)

    def call():
        logp.grad = None
        loss_value, metrics = verl_policy_loss(torch, loss, logp, old_logp, advantages, mask, params)
        loss_value.backward()
        return loss_value.item(), [m.item() for m in metrics]

    return call


def token_logprobs(torch, numTokens, vocabSize, dtype, backward):
    """verl logprobs_from_logits (log_softmax + gather); backward by autograd into the
    logits (f32 logits get an f32 gradient, bf16 logits a bf16 one)."""
    g = torch.Generator().manual_seed(7)
    logits = 2 * torch.randn(numTokens, vocabSize, generator=g)
    if dtype == 'bf16':
        logits = logits.to(torch.bfloat16)
    labels = torch.randint(0, vocabSize, (numTokens, 1), generator=g)
    grad_logp = torch.randn(numTokens, generator=g)

    if not backward:
        def forward():
            with torch.no_grad():
                return log_probs(torch, logits, labels)
        return forward

    logits.requires_grad_()

    def forward_backward():
        logits.grad = None
        log_probs(torch, logits, labels).backward(grad_logp)
        return logits.grad

    return forward_backward


def group_advantages(torch, numRewards, groupSize, seqLen):
    """GRPO outcome advantages (grpo_advantages), optionally broadcast to the action tokens
    of a [B, seqLen] batch as verl does (scores.unsqueeze(-1) * mask)."""
    g = torch.Generator().manual_seed(3)
    scores = torch.randint(0, 2, (numRewards,), generator=g).float()
    mask = tool_use_roles(torch, numRewards, seqLen, g) == 1 if seqLen > 0 else None

    def call():
        advantages = grpo_advantages(scores, groupSize)
        if mask is not None:
            return advantages.unsqueeze(-1) * mask
        return advantages

    return call


def advantages(torch, estimator, numSeqs, seqLen, groupSize):
    """verl's code for the estimator (verl/trainer/ppo/core_algos.py, 1dda039b), on a padded
    [B, T] tool-use batch with the score on each response's last action token: the group
    estimators loop over a dict of groups in Python as verl does; 'gae' and
    'reinforce_plus_plus' run their backward loops over the columns, then masked_whiten;
    the optimal-token baselines loop over the groups (the tir_ one over each trajectory's
    response tokens, compacted, as verl does)."""
    g = torch.Generator().manual_seed(3)
    mask = (tool_use_roles(torch, numSeqs, seqLen, g) == 1).float()
    scores = torch.randint(0, 2, (numSeqs,), generator=g).float()
    last = (mask * torch.arange(seqLen)).argmax(dim=-1)
    token_level_rewards = torch.zeros(numSeqs, seqLen)
    token_level_rewards[torch.arange(numSeqs), last] = scores
    index = [i // groupSize for i in range(numSeqs)]
    values = torch.rand(numSeqs, seqLen, generator=g) - 0.5
    old_log_probs = -3 * torch.rand(numSeqs, seqLen, generator=g)
    sum_pi_squared = torch.exp(2 * old_log_probs) + 0.1 * torch.rand(numSeqs, seqLen, generator=g)
    reward_baselines = torch.randint(0, 2, (numSeqs,), generator=g).float()

    def masked_whiten(x, m):
        mean = (x * m).sum() / (m.sum() + 1e-8)
        var = ((x - mean) ** 2 * m).sum() / (m.sum() + 1e-8)
        var = var * (m.sum() / (m.sum() - 1))
        return (x - mean) * torch.rsqrt(var + 1e-8)

    def grpo():
        s = token_level_rewards.sum(dim=-1)
        id2score, id2mean, id2std = {}, {}, {}
        with torch.no_grad():
            for i in range(numSeqs):
                id2score.setdefault(index[i], []).append(s[i])
            for idx, group in id2score.items():
                if len(group) == 1:
                    id2mean[idx], id2std[idx] = torch.tensor(0.0), torch.tensor(1.0)
                else:
                    stacked = torch.stack(group)
                    id2mean[idx], id2std[idx] = torch.mean(stacked), torch.std(stacked)
            for i in range(numSeqs):
                s[i] = (s[i] - id2mean[index[i]]) / (id2std[index[i]] + 1e-6)
            return s.unsqueeze(-1) * mask

    def gae(gamma=1.0, lam=0.95):
        with torch.no_grad():
            nextvalues, lastgaelam, reversed_ = 0, 0, []
            for t in reversed(range(seqLen)):
                delta = token_level_rewards[:, t] + gamma * nextvalues - values[:, t]
                lastgaelam_ = delta + gamma * lam * lastgaelam
                nextvalues = values[:, t] * mask[:, t] + (1 - mask[:, t]) * nextvalues
                lastgaelam = lastgaelam_ * mask[:, t] + (1 - mask[:, t]) * lastgaelam
                reversed_.append(lastgaelam)
            adv = torch.stack(reversed_[::-1], dim=1)
            returns = adv + values
            return masked_whiten(adv, mask), returns

    def optimal_token_baseline(epsilon=1e-8):
        with torch.no_grad():
            returns = (token_level_rewards * mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
            w = 1 - 2 * torch.exp(old_log_probs) + sum_pi_squared
            w_cumulative = (w * mask).cumsum(dim=-1)
            groups = {}
            for i in range(numSeqs):
                groups.setdefault(index[i], []).append(i)
            baselines = torch.zeros_like(returns)
            for members in groups.values():
                if len(members) == 1:
                    continue
                idx = torch.tensor(members)
                r, wc, m = returns[idx], w_cumulative[idx], mask[idx]
                baselines[idx] = ((r * wc * m).sum(dim=0) / ((wc * m).sum(dim=0) + epsilon)).expand(len(members), -1)
                lengths = m.sum(dim=-1)
                ordered, _ = torch.sort(lengths)
                longest, second = int(ordered[-1].item()), int(ordered[-2].item())
                at = (lengths == longest).nonzero(as_tuple=True)[0]
                if at.numel() == 1 and longest > second:
                    baselines[members[int(at[0])], second:] = 0.0
            return (returns - baselines) * mask, returns

    def group_lists(values):
        grouped = {}
        for i in range(numSeqs):
            grouped.setdefault(index[i], []).append(values[i])
        return grouped

    def grpo_passk(epsilon=1e-6):
        scores = token_level_rewards.sum(dim=-1)
        adv = torch.zeros_like(scores)
        with torch.no_grad():
            id2scores, id2indices = group_lists(scores), group_lists(list(range(numSeqs)))
            for idx in id2scores:
                rewards = torch.stack(id2scores[idx])
                topk, topk_idx = torch.topk(rewards, 2)
                adv[id2indices[idx][topk_idx[0].item()]] = (topk[0] - topk[1]) / (torch.std(rewards) + epsilon)
            return adv.unsqueeze(-1) * mask

    def gdpo():
        # Two reward components (the second a 0.5-weighted copy shifted by one group), each
        # GRPO-normalised, weighted, summed, then masked_whiten.
        second = torch.zeros_like(token_level_rewards)
        second[torch.arange(numSeqs), last] = scores.roll(groupSize)
        total = None
        for weight, component in ((1.0, token_level_rewards), (0.5, second)):
            s = component.sum(dim=-1)
            with torch.no_grad():
                grouped = group_lists(s)
                stats = {k: (torch.mean(torch.stack(v)), torch.std(torch.stack(v))) for k, v in grouped.items()}
                for i in range(numSeqs):
                    s[i] = (s[i] - stats[index[i]][0]) / (stats[index[i]][1] + 1e-6)
            part = weight * (s.unsqueeze(-1) * mask)
            total = part if total is None else total + part
        return masked_whiten(total, mask) * mask

    def baseline_means(s):
        grouped = group_lists(s)
        return {k: (torch.mean(torch.stack(v)) if len(v) > 1 else torch.tensor(0.0), len(v)) for k, v in grouped.items()}

    def rloo():
        s = token_level_rewards.sum(dim=-1)
        with torch.no_grad():
            means = baseline_means(s)
            for i in range(numSeqs):
                mean, n = means[index[i]]
                if n > 1:
                    s[i] = s[i] * n / (n - 1) - mean * n / (n - 1)
            return s.unsqueeze(-1) * mask

    def reinforce_plus_plus_baseline():
        s = token_level_rewards.sum(dim=-1)
        with torch.no_grad():
            means = baseline_means(s)
            for i in range(numSeqs):
                s[i] = s[i] - means[index[i]][0]
            s = s.unsqueeze(-1).tile([1, seqLen]) * mask
            return masked_whiten(s, mask) * mask

    def reinforce_plus_plus(gamma=1.0):
        with torch.no_grad():
            returns = torch.zeros_like(token_level_rewards)
            running = 0
            for t in reversed(range(seqLen)):
                new_running = token_level_rewards[:, t] + gamma * running
                returns[:, t] = new_running * mask[:, t]
                running = new_running * mask[:, t] + running * (1 - mask[:, t])
            return masked_whiten(returns, mask) * mask, returns

    def remax():
        with torch.no_grad():
            returns = (token_level_rewards * mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
            return returns - reward_baselines.unsqueeze(-1) * mask, returns

    def opo():
        lengths = mask.sum(dim=-1)
        s = token_level_rewards.sum(dim=-1)
        with torch.no_grad():
            id2score, id2len = group_lists(s), group_lists(lengths)
            baseline = {k: (torch.stack(id2len[k]) * torch.stack(v)).sum() / torch.stack(id2len[k]).sum()
                        if len(v) > 1 else torch.tensor(0.0) for k, v in id2score.items()}
            for i in range(numSeqs):
                s[i] = s[i] - baseline[index[i]]
            return s.unsqueeze(-1) * mask

    def gpg(f_norm=1.0):
        s = token_level_rewards.sum(dim=-1)
        with torch.no_grad():
            alpha = numSeqs / torch.count_nonzero(s).clamp(min=1)
            means = baseline_means(s)
            for i in range(numSeqs):
                s[i] = alpha * (s[i] - means[index[i]][0]) / f_norm
            return s.unsqueeze(-1) * mask

    def tir_optimal_token_baseline(epsilon=1e-8):
        with torch.no_grad():
            token_returns = (token_level_rewards * mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
            w_cumulative = ((1 - 2 * torch.exp(old_log_probs) + sum_pi_squared) * mask).cumsum(dim=-1)
            response_lengths = mask.sum(dim=-1).to(dtype=torch.long)
            width = int(response_lengths.max().item())
            all_w, all_r = w_cumulative.new_zeros((numSeqs, width)), w_cumulative.new_zeros((numSeqs, width))
            for i in range(numSeqs):
                length = int(response_lengths[i].item())
                if length:
                    m = mask[i].bool()
                    all_w[i, :length] = w_cumulative[i, m]
                    all_r[i, :length] = token_returns[i, m]
            groups = {}
            for i in range(numSeqs):
                if response_lengths[i] > 0:
                    groups.setdefault(index[i], []).append(i)
            baselines = torch.zeros_like(all_r)
            for members in groups.values():
                if len(members) == 1:
                    continue
                idx = torch.tensor(members)
                baselines[idx] = ((all_r[idx] * all_w[idx]).sum(dim=0) / (all_w[idx].sum(dim=0) + epsilon)).to(baselines.dtype)
                lengths = response_lengths[idx]
                ordered, _ = torch.sort(lengths)
                longest, second = int(ordered[-1].item()), int(ordered[-2].item())
                at = (lengths == longest).nonzero(as_tuple=True)[0]
                if at.numel() == 1 and longest > second:
                    baselines[members[int(at[0])], second:] = 0.0
            all_adv = all_r - baselines
            adv = torch.zeros_like(token_returns)
            for i in range(numSeqs):
                if response_lengths[i] > 0:
                    adv[i, mask[i].bool()] = all_adv[i, : response_lengths[i]]
            return adv * mask, token_returns

    return {'grpo': grpo, 'gae': gae, 'optimal_token_baseline': optimal_token_baseline, 'grpo_passk': grpo_passk,
            'gdpo': gdpo, 'rloo': rloo, 'reinforce_plus_plus': reinforce_plus_plus,
            'reinforce_plus_plus_baseline': reinforce_plus_plus_baseline, 'remax': remax, 'opo': opo, 'gpg': gpg,
            'tir_optimal_token_baseline': tir_optimal_token_baseline}[estimator]


def dpo_loss(torch, numPairs, beta, labelSmoothing):
    """TRL DPOTrainer.dpo_loss, sigmoid variant, with the backward into the policy log-probs."""
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(5)
    policy_chosen = (-200 + 20 * torch.randn(numPairs, generator=g)).requires_grad_()
    policy_rejected = (-200 + 20 * torch.randn(numPairs, generator=g)).requires_grad_()
    ref_chosen = policy_chosen.detach() + torch.randn(numPairs, generator=g)
    ref_rejected = policy_rejected.detach() + torch.randn(numPairs, generator=g)

    def call():
        policy_chosen.grad = None
        policy_rejected.grad = None
        loss, accuracy = trl_dpo_loss(F, policy_chosen, policy_rejected, ref_chosen, ref_rejected,
                                      beta, labelSmoothing)
        loss.backward()
        return loss.item(), accuracy.item()

    return call


def feedback_mask(torch, numSeqs, seqLen):
    """The loss mask from roles as a padded trainer computes it, with per-sequence keep."""
    g = torch.Generator().manual_seed(1)
    roles = tool_use_roles(torch, numSeqs, seqLen, g)
    keep = torch.rand(numSeqs, generator=g) >= 0.05

    def call():
        mask = (roles == 1) & keep.unsqueeze(-1)
        return mask, mask.sum(dim=-1, dtype=torch.int32)

    return call


def sequence_logprobs(torch, numSeqs, seqLen, backward):
    """Summed masked log-probs per sequence, (logp * mask).sum(-1), and its backward
    gradSeq.unsqueeze(-1) * mask (what autograd computes for it)."""
    g = torch.Generator().manual_seed(1)
    mask = tool_use_roles(torch, numSeqs, seqLen, g) == 1
    logp = -5 * torch.rand(numSeqs, seqLen, generator=g)
    grad_seq = torch.randn(numSeqs, generator=g)

    if backward:
        return lambda: grad_seq.unsqueeze(-1) * mask
    return lambda: (logp * mask).sum(dim=-1)


def rollout_correction(torch, numSeqs, seqLen):
    """verl's compute_rollout_correction_and_rejection_mask (rollout_corr_helper.py, commit
    1dda039b) with the K3-RS-Token-TIS preset, as verl runs it on padded [B, T] tensors:
    token-level weights truncated at 2 with compute_is_metrics, seq_mean_k3 rejection at
    0.01 with compute_rs_metrics, and compute_offpolicy_metrics; .item() per metric."""
    g = torch.Generator().manual_seed(1)
    response_mask = (tool_use_roles(torch, numSeqs, seqLen, g) == 1).float()
    old_log_prob = -5 * torch.rand(numSeqs, seqLen, generator=g)
    rollout_log_prob = old_log_prob + 0.1 * torch.randn(numSeqs, seqLen, generator=g)
    bound, upper, lower, rs_upper = 20.0, 2.0, 0.5, 0.01

    def msum(values, mask, axis=None):
        valid = torch.where(mask.bool(), values, 0.0)
        return (valid * mask).sum() if axis is None else (valid * mask).sum(dim=axis)

    def mmean(values, mask, axis=None):
        return msum(values, mask, axis) / ((mask.sum() if axis is None else mask.sum(dim=axis)) + 1e-8)

    def call():
        metrics = {}
        mask_bool = response_mask.bool()
        log_ratio = old_log_prob - rollout_log_prob
        # compute_rollout_correction_weights + compute_is_metrics (token level, TIS)
        raw = torch.exp(torch.clamp(log_ratio, min=-bound, max=bound)) * response_mask
        weights = raw.clamp(max=upper)
        metrics["rollout_is_mean"] = mmean(weights, response_mask).item()
        metrics["rollout_is_ratio_fraction_high"] = mmean((raw > upper).float(), response_mask).item()
        metrics["rollout_is_ratio_fraction_low"] = mmean((raw < lower).float(), response_mask).item()
        metrics["rollout_is_max"] = weights.masked_fill(~mask_bool, float("-inf")).max().item()
        metrics["rollout_is_min"] = weights.masked_fill(~mask_bool, float("inf")).min().item()
        clamped = weights.clamp(min=0.0, max=upper)
        mean_clamped = mmean(clamped, response_mask)
        var = mmean(clamped.square(), response_mask) - mean_clamped.square()
        metrics["rollout_is_std"] = torch.sqrt(torch.clamp(var, min=0.0)).item()
        normalized = clamped / (mean_clamped + 1e-8)
        metrics["rollout_is_eff_sample_size"] = 1.0 / mmean(normalized.square(), response_mask).item()
        seq_w = mmean(weights, response_mask, axis=-1)
        metrics["rollout_is_seq_mean"] = seq_w.mean().item()
        metrics["rollout_is_seq_std"] = seq_w.std().item()
        metrics["rollout_is_seq_max"] = seq_w.max().item()
        metrics["rollout_is_seq_min"] = seq_w.min().item()
        metrics["rollout_is_seq_max_deviation"] = (seq_w - 1.0).abs().max().item()
        raw_seq = mmean(raw, response_mask, axis=-1)
        metrics["rollout_is_seq_fraction_high"] = (raw_seq > upper).float().mean().item()
        metrics["rollout_is_seq_fraction_low"] = (raw_seq < lower).float().mean().item()
        weights = weights.detach()
        # compute_rollout_rejection_mask + compute_rs_metrics (seq_mean_k3)
        safe = torch.clamp(log_ratio, min=-bound, max=bound)
        token_k3 = torch.exp(safe) - 1.0 - safe
        seq_valid = response_mask.sum(dim=-1) > 0
        seq_stat = mmean(token_k3, response_mask, axis=-1)
        keep = (seq_stat <= rs_upper).unsqueeze(-1).expand_as(mask_bool)
        per_token = seq_stat.unsqueeze(-1).expand_as(response_mask)
        p = "rollout_rs_seq_mean_k3"
        valid_values = seq_stat[seq_valid]
        metrics[f"{p}_mean"] = mmean(per_token, response_mask).item()
        metrics[f"{p}_max"] = valid_values.max().item()
        metrics[f"{p}_min"] = valid_values.min().item()
        metrics[f"{p}_fraction_high"] = (valid_values > rs_upper).float().mean().item()
        metrics[f"{p}_fraction_low"] = 0.0
        stat_std = per_token.clamp(min=0.0, max=rs_upper)
        m = mmean(stat_std, response_mask)
        metrics[f"{p}_std"] = torch.sqrt(torch.clamp(mmean(stat_std.square(), response_mask) - m.square(), min=0.0)).item()
        metrics[f"{p}_seq_mean"] = valid_values.mean().item()
        metrics[f"{p}_seq_std"] = valid_values.std().item()
        metrics[f"{p}_seq_max"] = valid_values.max().item()
        metrics[f"{p}_seq_min"] = valid_values.min().item()
        metrics[f"{p}_seq_max_deviation"] = valid_values.abs().max().item()
        metrics[f"{p}_seq_fraction_high"] = (valid_values > rs_upper).float().mean().item()
        keep_mask = keep.float()
        metrics[f"{p}_masked_fraction"] = mmean(1 - keep_mask, response_mask).item()
        seq_keep = (~((~keep) & mask_bool)).all(dim=-1).float()
        metrics[f"{p}_seq_masked_fraction"] = (((1.0 - seq_keep) * seq_valid.float()).sum() / seq_valid.float().sum()).item()
        metrics["rollout_rs_masked_fraction"] = mmean(1 - keep_mask, response_mask).item()
        metrics["rollout_rs_seq_masked_fraction"] = ((~((keep_mask > 0.5) & mask_bool) & mask_bool).any(dim=-1)).float().mean().item()
        modified_mask = response_mask * keep_mask
        # compute_offpolicy_metrics
        mean_train = mmean(old_log_prob, response_mask, axis=-1)
        metrics["training_ppl"] = torch.exp(-mean_train).mean().item()
        metrics["training_log_ppl"] = (-mean_train).mean().item()
        metrics["kl"] = mmean(rollout_log_prob - old_log_prob, response_mask).item()
        metrics["k3_kl"] = mmean(torch.exp(log_ratio) - log_ratio - 1, response_mask).item()
        mean_rollout = mmean(rollout_log_prob, response_mask, axis=-1)
        metrics["rollout_ppl"] = torch.exp(-mean_rollout).mean().item()
        metrics["rollout_log_ppl"] = (-mean_rollout).mean().item()
        diff = mean_rollout - mean_train
        metrics["log_ppl_diff"] = diff.mean().item()
        metrics["log_ppl_abs_diff"] = diff.abs().mean().item()
        metrics["log_ppl_diff_max"] = diff.max().item()
        metrics["log_ppl_diff_min"] = diff.min().item()
        metrics["ppl_ratio"] = torch.exp(diff).mean().item()
        metrics["chi2_token"] = (mmean(torch.exp(safe).square(), response_mask) - 1.0).item()
        seq_sum = torch.clamp(msum(log_ratio, response_mask, axis=-1), min=-bound, max=bound)
        metrics["chi2_seq"] = (torch.exp(2.0 * seq_sum).mean() - 1.0).item()
        return weights, modified_mask, metrics

    return call


def tirl_python_ppo_loss(torch, tokens):
    """tirl's own Python package (python/ of a checkout: tirl.ppo_loss, ctypes into libtirl)
    on the binding-overhead call: one sequence of `tokens` tokens, default options, inputs
    that need no gradient; the kernel writes dLoss/dlogp, as in the JavaScript call."""
    package = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'python')
    if not os.path.isdir(os.path.join(package, 'tirl')):
        raise RuntimeError('no python/ package beside the benchmarks (only a checkout has it)')
    if package not in sys.path:
        sys.path.insert(0, package)
    import tirl
    g = torch.Generator().manual_seed(1)
    logp = -5 * torch.rand(1, tokens, generator=g)
    old_logp = logp + 0.1 * torch.randn(1, tokens, generator=g)
    advantages = torch.randn(1, tokens, generator=g)
    mask = torch.rand(1, tokens, generator=g) < 0.6

    def call():
        return tirl.ppo_loss(logp, old_logp, advantages, mask)

    return call


BUILDERS = {
    'ppoLoss': ppo_loss,
    'tirlPythonPpoLoss': tirl_python_ppo_loss,
    'policyLoss': policy_loss,
    'tokenLogprobs': token_logprobs,
    'groupAdvantages': group_advantages,
    'advantages': advantages,
    'dpoLoss': dpo_loss,
    'feedbackMask': feedback_mask,
    'sequenceLogprobs': sequence_logprobs,
    'rolloutCorrection': rollout_correction,
}


def timed(call, inner):
    """Wall-clock and process CPU seconds (all threads) per call."""
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(inner):
        call()
    return ((time.perf_counter() - start) / inner, (time.process_time() - cpu_start) / inner)


class CacheSweep:
    """Evicts the caches before a cold sample, as benchmarks/cache.ts does in Node.

    It sweeps here, in the process that then makes the timed call, and not in Node before the
    request: a sweep in Node evicts the shared L3 and the L2 of Node's own core, but this
    process may run on another core, whose L2 would still hold this peer's last call. The
    buffer (the same size as Node's, twice the last-level cache) is written once when it is
    allocated (an unwritten buffer maps the zero page and evicts nothing), then only read
    by a sum on `threads` threads (as many as Node's sweep: every core's L2), which leaves
    clean lines that the timed call evicts without writing them back.
    """

    def __init__(self, torch, spec):
        self.torch = torch
        self.threads = int(spec['threads'])
        self.buffer = torch.ones(int(spec['bytes']) // 4, dtype=torch.float32)

    def evict(self):
        """Reads the whole buffer; returns the bytes read."""
        torch = self.torch
        own = torch.get_num_threads()
        if own != self.threads:
            torch.set_num_threads(self.threads)
        try:
            self.buffer.sum().item()
        finally:
            if own != self.threads:
                torch.set_num_threads(own)
        return self.buffer.numel() * self.buffer.element_size()


def reply(message):
    sys.stdout.write(json.dumps(message) + '\n')
    sys.stdout.flush()


def start(threads):
    import torch
    torch.set_num_threads(threads)
    return torch


def serve():
    first = json.loads(sys.stdin.readline())
    try:
        torch = start(first['threads'])
    except Exception as error:  # noqa: BLE001 - any import failure means "skipped"
        reply({'error': f'cannot import torch: {error}'})
        return
    cases = {case['id']: case for case in first['cases']}
    sweep_spec = first.get('sweep')
    sweep = None
    reply({'ready': True, 'torch': torch.__version__, 'threads': torch.get_num_threads()})
    live = {}
    for line in sys.stdin:
        message = json.loads(line)
        command, case_id = message['cmd'], message['id']
        try:
            if command == 'setup':
                case = cases[case_id]
                live[case_id] = BUILDERS[case['op']](torch, **case['params'])
                reply({'ok': True})
            elif command == 'sample':
                swept = 0
                if message.get('evict'):
                    if sweep_spec is None:
                        raise ValueError('evict asked for, but no sweep was given at start')
                    if sweep is None:
                        sweep = CacheSweep(torch, sweep_spec)
                    swept = sweep.evict()
                seconds, cpu_seconds = timed(live[case_id], message['inner'])
                reply({'seconds': seconds, 'cpuSeconds': cpu_seconds, 'sweptBytes': swept})
            elif command == 'drop':
                live.pop(case_id, None)
                gc.collect()
                reply({'ok': True})
            else:
                reply({'error': f'unknown command {command}'})
        except Exception as error:  # noqa: BLE001 - reported to the harness, which skips
            live.pop(case_id, None)
            reply({'error': f'{type(error).__name__}: {error}'})


def standalone(path):
    with open(path) as file:
        spec = json.load(file)
    torch = start(spec['threads'])
    medians = {}
    for case in spec['cases']:
        call = BUILDERS[case['op']](torch, **case['params'])
        call()
        samples = sorted(timed(call, 1)[0] for _ in range(spec.get('reps', 5)))
        medians[case['id']] = samples[len(samples) // 2]
        del call
        gc.collect()
    print(json.dumps({'torch': torch.__version__, 'threads': torch.get_num_threads(),
                      'seconds': medians}))


# ------------------------------------------------------------------ GPU peers (benchmarks/gpu/run.sh)

def cuda_cuda_timed(torch, fn, iterations):
    """Median milliseconds of fn() over CUDA events, after 3 warm-up calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def gpu_peers(torch, iterations):
    """Yields (op, shape, torch_ms, note) for each peer."""
    F = torch.nn.functional
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    # ppoLoss: verl core_algos.compute_policy_loss (vanilla), token-mean, forward + backward.
    n = PPO_TOKENS
    logp = (torch.randn(n, device=dev, generator=g) * 0.7 - 1.5).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(n, device=dev, generator=g)
    adv = torch.randn(n, device=dev, generator=g)
    mask = (torch.rand(n, device=dev, generator=g) < 0.8).float()
    ref = logp.detach() + 0.2 * torch.randn(n, device=dev, generator=g)

    def ppo(kl_coef=0.0):
        loss, pg_clipfrac, pg_clipfrac_lower, ppo_kl = verl_ppo_loss(
            torch, logp, old, adv, mask, 0.2, 0.2, 3.0)
        if kl_coef:
            kld = low_var_kl(torch, logp, ref)
            per_seq = (kld * mask).view(-1, SEQUENCE_LENGTH).sum(-1) / mask.view(-1, SEQUENCE_LENGTH).sum(-1).clamp(min=1)
            loss = loss + kl_coef * per_seq.mean()
        loss.backward()
        logp.grad = None
        return ppo_kl, pg_clipfrac, pg_clipfrac_lower

    yield "ppoLoss", "N=1048576 token-mean", cuda_timed(torch, ppo, iterations), "verl compute_policy_loss, fwd+bwd"
    yield "ppoLoss", "N=1048576 seq-mean k3", cuda_timed(torch, lambda: ppo(0.001), iterations), "verl + low_var_kl, fwd+bwd"

    # feedbackMask: response mask from roles and per-sequence keep, with per-sequence counts.
    b = n // SEQUENCE_LENGTH
    roles = torch.randint(0, 4, (n,), device=dev, dtype=torch.uint8, generator=g)
    keep = torch.rand(b, device=dev, generator=g) < 0.9
    lengths = torch.full((b,), SEQUENCE_LENGTH, device=dev, dtype=torch.int64)

    def feedback_mask():
        seq = torch.repeat_interleave(torch.arange(b, device=dev), lengths, output_size=n)
        m = (roles == 1) & keep[seq]
        counts = torch.zeros(b, device=dev, dtype=torch.int32).index_add_(0, seq, m.int())
        return m, counts

    yield "feedbackMask", "N=1048576 B=1024", cuda_timed(torch, feedback_mask, iterations), "repeat_interleave + index_add_"

    # sequenceLogprobs: TRL's (per_token_logps * mask).sum(-1) on the padded [B, T] batch.
    token_logp = torch.randn(b, SEQUENCE_LENGTH, device=dev, generator=g) - 2
    seq_mask = (torch.rand(b, SEQUENCE_LENGTH, device=dev, generator=g) < 0.7).float()
    grad_seq = torch.randn(b, device=dev, generator=g)
    yield "sequenceLogprobs", "N=1048576 B=1024", timed(
        torch, lambda: (token_logp * seq_mask).sum(-1), iterations), "TRL (logps * mask).sum(-1)"
    yield "sequenceLogprobsBackward", "N=1048576 B=1024", timed(
        torch, lambda: grad_seq[:, None] * seq_mask, iterations), "autograd of the sum: grad[:, None] * mask"

    # groupAdvantages: verl compute_grpo_outcome_advantage is a Python loop over the batch;
    # the contiguous case vectorised is the stronger peer, timed here.
    rewards = torch.randn(GROUP_REWARDS, device=dev, generator=g)

    yield "groupAdvantages", "N=65536 groupSize=16", cuda_timed(
        torch, lambda: grpo_advantages(rewards, GROUP_SIZE), iterations), "view(-1, G) mean/std"

    # dpoLoss: TRL DPOTrainer.dpo_loss, sigmoid, forward + backward.
    p = DPO_PAIRS
    pc = (torch.randn(p, device=dev, generator=g) * 10 - 50).requires_grad_()
    pr = (torch.randn(p, device=dev, generator=g) * 10 - 55).requires_grad_()
    rc = torch.randn(p, device=dev, generator=g) * 10 - 50
    rr = torch.randn(p, device=dev, generator=g) * 10 - 55

    def dpo():
        loss, accuracy = trl_dpo_loss(F, pc, pr, rc, rr, 0.1, 0.0)
        loss.backward()
        pc.grad = None
        pr.grad = None
        return accuracy

    yield "dpoLoss", "P=65536 sigmoid", cuda_timed(torch, dpo, iterations), "TRL dpo_loss, fwd+bwd"

    # tokenLogprobs: verl logprobs_from_logits (log_softmax + gather) and entropy_from_logits.
    for tokens, vocab in LOGITS_SHAPES:
        labels = torch.randint(0, vocab, (tokens,), device=dev, generator=g)
        grad = torch.randn(tokens, device=dev, generator=g)
        for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
            shape = f"{tokens}x{vocab} {name}"
            logits = (torch.rand(tokens, vocab, device=dev, generator=g) * 16 - 8).to(dtype)

            def forward(entropy=False):
                logp = log_probs(torch, logits, labels[:, None])
                if entropy:
                    pd = torch.softmax(logits.float(), dim=-1)
                    h = torch.logsumexp(logits.float(), dim=-1) - (pd * logits.float()).sum(-1)
                    return logp, h
                return logp

            yield "tokenLogprobs", shape, cuda_timed(torch, forward, iterations), "log_softmax + gather"
            yield "tokenLogprobs+entropy", shape, cuda_timed(torch, lambda: forward(True), iterations), \
                "+ verl entropy_from_logits"
            leaf = logits.detach().requires_grad_()

            def backward():
                (log_probs(torch, leaf, labels[:, None]) * grad).sum().backward()
                leaf.grad = None

            yield "tokenLogprobs fwd+bwd", shape, cuda_timed(torch, backward, iterations), "autograd, grad in the logits dtype"
            del logits, leaf
            torch.cuda.empty_cache()


def gpu_report(argv):
    parser = argparse.ArgumentParser(prog="torch_peers.py --gpu")
    parser.add_argument("--tirl", required=True, help="gpu_check's JSON")
    parser.add_argument("--out", required=True, help="directory for results.json and results.md")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)

    with open(args.tirl) as f:
        tirl = json.load(f)
    peer_rows, torch_note = [], None
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        torch_note = f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}"
        for op, shape, ms, note in gpu_peers(torch, 5 if args.quick else 20):
            peer_rows.append({"op": op, "shape": shape, "torchMs": ms, "torch": note})
            print(f"torch {op:28s} {shape:22s} {ms:9.4f} ms  ({note})", flush=True)
    except Exception as error:  # report, do not hide: the tirl results still stand
        torch_note = f"PyTorch peers not run: {error!r}"
        print(torch_note, file=sys.stderr)

    torch_ms = {(r["op"], r["shape"]): r for r in peer_rows}
    # tirl's forward+backward pairs compared with torch's fused autograd timings.
    benches = {(b["op"], b["shape"]): b for b in tirl["benchmarks"]}
    for (op, shape), forward in list(benches.items()):
        backward = benches.get(("tokenLogprobsBackward", shape))
        if op == "tokenLogprobs" and backward:
            ms = forward["tirlMs"] + backward["tirlMs"]
            benches[("tokenLogprobs fwd+bwd", shape)] = {
                "tirlMs": ms, "tirlGBs": (forward["bytes"] + backward["bytes"]) / ms / 1e6,
                "fractionOfCopyBandwidth": (forward["copyMs"] + backward["copyMs"]) / ms}
    tirl_ms = {key: b["tirlMs"] for key, b in benches.items()}
    rows = []
    for (op, shape), ms in tirl_ms.items():
        bench = benches[(op, shape)]
        peer = torch_ms.get((op, shape))
        rows.append({
            "op": op, "shape": shape, "tirlMs": ms,
            "fractionOfCopyBandwidth": bench["fractionOfCopyBandwidth"] if bench else None,
            "tirlGBs": bench["tirlGBs"] if bench else None,
            "torchMs": peer["torchMs"] if peer else None,
            "torch": peer["torch"] if peer else None,
            "speedupOverTorch": peer["torchMs"] / ms if peer else None,
        })
    for (op, shape), peer in torch_ms.items():
        if (op, shape) not in tirl_ms:
            rows.append({"op": op, "shape": shape, "tirlMs": None, "torchMs": peer["torchMs"],
                         "torch": peer["torch"], "note": "no tirl CUDA kernel"})

    result = {"gpu": tirl["gpu"], "torch": torch_note, "copyBandwidthGBs": tirl["copyBandwidthGBs"],
              "fatal": tirl.get("fatal", ""),
              "checks": tirl["checks"], "noCudaKernel": tirl["noCudaKernel"], "rows": rows}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=2)

    fmt = lambda x, spec: "—" if x is None else format(x, spec)  # noqa: E731
    failed = [c for c in tirl["checks"] if not c["passed"]]
    lines = [
        f"# tirl on {tirl['gpu']}",
        "",
        f"Correctness: {len(tirl['checks']) - len(failed)}/{len(tirl['checks'])} GPU-vs-CPU checks passed"
        + (f"; failed: {', '.join(c['op'] + ' ' + c['case'] for c in failed)}" if failed else "") + ".",
        f"No CUDA kernel: {', '.join(tirl['noCudaKernel']) or 'none'}. {torch_note}.",
        f"Device-to-device copy: {tirl['copyBandwidthGBs']:.0f} GB/s (read + write)."
        + (f" gpu_check stopped early: {tirl['fatal']}." if tirl.get("fatal") else ""),
        "",
        "| op | shape | tirl ms | tirl GB/s | of copy bandwidth | PyTorch eager ms | speed-up |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        frac = r.get("fractionOfCopyBandwidth")
        speedup = r.get("speedupOverTorch")
        share = "—" if frac is None else "%.0f%%" % (100 * frac)
        faster = "—" if speedup is None else "%.1fx" % speedup
        lines.append(
            f"| {r['op']} | {r['shape']} | {fmt(r['tirlMs'], '.4f')} | {fmt(r.get('tirlGBs'), '.0f')} | "
            f"{share} | {fmt(r['torchMs'], '.4f')} | {faster} |")
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == '__main__':
    if sys.argv[1:2] == ['--gpu']:
        gpu_report(sys.argv[2:])
    elif sys.argv[1:] == ['--serve']:
        serve()
    elif len(sys.argv) == 2:
        standalone(sys.argv[1])
    else:
        sys.exit(__doc__)
