#!/usr/bin/python3
"""PyTorch eager peers of the tirl kernels, written the way verl and TRL write them.

Each op is the code a trainer runs today: log_softmax + gather for token log-probs,
elementwise clamp/exp/max chains for the PPO loss, autograd for every backward. Inputs are
drawn here with the same shapes and distributions as benchmarks/data.ts (not the same
values: timings do not depend on them).

Two modes:
  --serve           (used by `tirl bench`) first stdin line: {"threads": T, "cases": [...]};
                    then one JSON command per line, one JSON reply per line:
                    {"cmd": "setup", "id"} -> {"ok": true} | {"error"}
                    {"cmd": "sample", "id", "inner"} -> {"seconds", "cpuSeconds": per call}
                    {"cmd": "drop", "id"} -> {"ok": true}
  CASES.json        standalone: {"threads", "cases", "reps"}; prints {"id": median seconds}.
"""
import gc
import json
import sys
import time


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


def masked_mean(values, mask):
    return (values * mask).sum() / (mask.sum() + 1e-8)  # verl's core_algos.masked_mean


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
        negative_approx_kl = torch.clamp(logp - old_logp, min=-20.0, max=20.0)
        ratio = torch.exp(negative_approx_kl)
        ppo_kl = masked_mean(-negative_approx_kl, mask)
        pg_losses1 = -advantages * ratio
        pg_losses2 = -advantages * torch.clamp(ratio, 1 - clipLow, 1 + clipHigh)
        clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
        pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), mask)
        pg_losses3 = -advantages * dualClip
        clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
        pg_clipfrac_lower = masked_mean(
            torch.gt(clip_pg_losses1, pg_losses3) * (advantages < 0).float(), mask)
        pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
        loss = masked_mean(pg_losses, mask)
        if kl:
            log_ratio = torch.clamp(ref_logp - logp, min=-20, max=20)
            kld = torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10, max=10)
            loss = loss + klCoef * masked_mean(kld, mask)
        loss.backward()
        return loss.item(), pg_clipfrac.item(), pg_clipfrac_lower.item(), ppo_kl.item()

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

    def log_probs():
        if dtype == 'bf16':  # read bf16, compute in f32 (what verl's .float() does)
            return torch.log_softmax(logits, dim=-1, dtype=torch.float32).gather(-1, labels).squeeze(-1)
        return torch.log_softmax(logits, dim=-1).gather(-1, labels).squeeze(-1)

    if not backward:
        def forward():
            with torch.no_grad():
                return log_probs()
        return forward

    logits.requires_grad_()

    def forward_backward():
        logits.grad = None
        log_probs().backward(grad_logp)
        return logits.grad

    return forward_backward


def group_advantages(torch, numRewards, groupSize, seqLen):
    """GRPO outcome advantages, vectorised over contiguous groups (verl loops over a dict of
    groups in Python, which is far slower; this is its best form), optionally broadcast to
    the action tokens of a [B, seqLen] batch as verl does (scores.unsqueeze(-1) * mask)."""
    g = torch.Generator().manual_seed(3)
    scores = torch.randint(0, 2, (numRewards,), generator=g).float()
    mask = tool_use_roles(torch, numRewards, seqLen, g) == 1 if seqLen > 0 else None

    def call():
        grouped = scores.view(-1, groupSize)
        mean = grouped.mean(dim=-1, keepdim=True)
        std = grouped.std(dim=-1, keepdim=True)  # unbiased
        advantages = ((grouped - mean) / (std + 1e-6)).view(-1)
        if mask is not None:
            return advantages.unsqueeze(-1) * mask
        return advantages

    return call


def advantages(torch, estimator, numSeqs, seqLen, groupSize):
    """verl's code for the estimator (verl/trainer/ppo/core_algos.py, 1dda039b), on a padded
    [B, T] tool-use batch with the score on each response's last action token: 'grpo' loops
    over a dict of groups in Python; 'gae' runs its backward loop over the columns, then
    masked_whiten; 'optimal_token_baseline' loops over the groups."""
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

    return {'grpo': grpo, 'gae': gae, 'optimal_token_baseline': optimal_token_baseline}[estimator]


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
        logits = (policy_chosen - policy_rejected) - (ref_chosen - ref_rejected)
        losses = (-F.logsigmoid(beta * logits) * (1 - labelSmoothing)
                  - F.logsigmoid(-beta * logits) * labelSmoothing)
        chosen_rewards = beta * (policy_chosen - ref_chosen).detach()
        rejected_rewards = beta * (policy_rejected - ref_rejected).detach()
        loss = losses.mean()
        loss.backward()
        accuracy = (chosen_rewards > rejected_rewards).float().mean()
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


BUILDERS = {
    'ppoLoss': ppo_loss,
    'tokenLogprobs': token_logprobs,
    'groupAdvantages': group_advantages,
    'advantages': advantages,
    'dpoLoss': dpo_loss,
    'feedbackMask': feedback_mask,
    'sequenceLogprobs': sequence_logprobs,
}


def timed(call, inner):
    """Wall-clock and process CPU seconds (all threads) per call."""
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(inner):
        call()
    return ((time.perf_counter() - start) / inner, (time.process_time() - cpu_start) / inner)


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
                seconds, cpu_seconds = timed(live[case_id], message['inner'])
                reply({'seconds': seconds, 'cpuSeconds': cpu_seconds})
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


if __name__ == '__main__':
    if sys.argv[1:] == ['--serve']:
        serve()
    elif len(sys.argv) == 2:
        standalone(sys.argv[1])
    else:
        sys.exit(__doc__)
