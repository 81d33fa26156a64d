#!/usr/bin/env python3
"""PyTorch eager CUDA peers of tirl's ops, written the way verl and TRL write them, timed at
the sizes of gpu_check.cc (benchmarks/gpu/sizes.h), then merged with gpu_check's JSON into
one results file and a Markdown table.

Usage: torch_peers.py --tirl gpu_check.json --out DIR [--quick]
Without PyTorch it still writes the table of tirl's results, saying the peers are missing.
"""
import argparse
import json
import os
import statistics
import sys

PPO_TOKENS = 1048576
SEQUENCE_LENGTH = 1024
GROUP_REWARDS = 65536
GROUP_SIZE = 16
DPO_PAIRS = 65536
LOGITS_SHAPES = [(4096, 32000), (1024, 151936)]


def timed(torch, fn, iterations):
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


def masked_mean(values, mask):
    return (values * mask).sum() / mask.sum().clamp(min=1)


def peers(torch, iterations):
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
        negative_approx_kl = torch.clamp(logp - old, min=-20.0, max=20.0)
        ratio = torch.exp(negative_approx_kl)
        ppo_kl = masked_mean(-negative_approx_kl, mask)
        pg_losses1 = -adv * ratio
        pg_losses2 = -adv * torch.clamp(ratio, 1 - 0.2, 1 + 0.2)
        clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
        pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), mask)
        pg_losses3 = -adv * 3.0
        clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
        pg_clipfrac_lower = masked_mean(torch.gt(clip_pg_losses1, pg_losses3) * (adv < 0).float(), mask)
        pg_losses = torch.where(adv < 0, clip_pg_losses2, clip_pg_losses1)
        loss = masked_mean(pg_losses, mask)
        if kl_coef:
            kl = ref - logp  # verl low_var_kl (k3)
            kl = torch.clamp(kl, min=-20, max=20)
            kld = torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)
            per_seq = (kld * mask).view(-1, SEQUENCE_LENGTH).sum(-1) / mask.view(-1, SEQUENCE_LENGTH).sum(-1).clamp(min=1)
            loss = loss + kl_coef * per_seq.mean()
        loss.backward()
        logp.grad = None
        return ppo_kl, pg_clipfrac, pg_clipfrac_lower

    yield "ppoLoss", "N=1048576 token-mean", timed(torch, ppo, iterations), "verl compute_policy_loss, fwd+bwd"
    yield "ppoLoss", "N=1048576 seq-mean k3", timed(torch, lambda: ppo(0.001), iterations), "verl + low_var_kl, fwd+bwd"

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

    yield "feedbackMask", "N=1048576 B=1024", timed(torch, feedback_mask, iterations), "repeat_interleave + index_add_"

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

    def grpo():
        grouped = rewards.view(-1, GROUP_SIZE)
        mean = grouped.mean(-1, keepdim=True)
        std = grouped.std(-1, keepdim=True)
        return ((grouped - mean) / (std + 1e-6)).view(-1)

    yield "groupAdvantages", "N=65536 groupSize=16", timed(torch, grpo, iterations), "view(-1, G) mean/std"

    # dpoLoss: TRL DPOTrainer.dpo_loss, sigmoid, forward + backward.
    p = DPO_PAIRS
    pc = (torch.randn(p, device=dev, generator=g) * 10 - 50).requires_grad_()
    pr = (torch.randn(p, device=dev, generator=g) * 10 - 55).requires_grad_()
    rc = torch.randn(p, device=dev, generator=g) * 10 - 50
    rr = torch.randn(p, device=dev, generator=g) * 10 - 55

    def dpo():
        logits = (pc - pr) - (rc - rr)
        losses = -F.logsigmoid(0.1 * logits) * (1 - 0.0) - F.logsigmoid(-0.1 * logits) * 0.0
        chosen_rewards = 0.1 * (pc - rc).detach()
        rejected_rewards = 0.1 * (pr - rr).detach()
        accuracy = (chosen_rewards > rejected_rewards).float().mean()
        losses.mean().backward()
        pc.grad = None
        pr.grad = None
        return accuracy

    yield "dpoLoss", "P=65536 sigmoid", timed(torch, dpo, iterations), "TRL dpo_loss, fwd+bwd"

    # tokenLogprobs: verl logprobs_from_logits (log_softmax + gather) and entropy_from_logits.
    for tokens, vocab in LOGITS_SHAPES:
        labels = torch.randint(0, vocab, (tokens,), device=dev, generator=g)
        grad = torch.randn(tokens, device=dev, generator=g)
        for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
            shape = f"{tokens}x{vocab} {name}"
            logits = (torch.rand(tokens, vocab, device=dev, generator=g) * 16 - 8).to(dtype)

            def forward(entropy=False):
                logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels[:, None]).squeeze(-1)
                if entropy:
                    pd = torch.softmax(logits.float(), dim=-1)
                    h = torch.logsumexp(logits.float(), dim=-1) - (pd * logits.float()).sum(-1)
                    return logp, h
                return logp

            yield "tokenLogprobs", shape, timed(torch, forward, iterations), "log_softmax + gather"
            yield "tokenLogprobs+entropy", shape, timed(torch, lambda: forward(True), iterations), \
                "+ verl entropy_from_logits"
            leaf = logits.detach().requires_grad_()

            def backward():
                logp = torch.log_softmax(leaf.float(), dim=-1).gather(-1, labels[:, None]).squeeze(-1)
                (logp * grad).sum().backward()
                leaf.grad = None

            yield "tokenLogprobs fwd+bwd", shape, timed(torch, backward, iterations), "autograd, grad in the logits dtype"
            del logits, leaf
            torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tirl", required=True, help="gpu_check's JSON")
    parser.add_argument("--out", required=True, help="directory for results.json and results.md")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()

    with open(args.tirl) as f:
        tirl = json.load(f)
    peer_rows, torch_note = [], None
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        torch_note = f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}"
        for op, shape, ms, note in peers(torch, 5 if args.quick else 20):
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


if __name__ == "__main__":
    main()
