"""``python3 -m tirl.bench``: tirl's kernels through this package against PyTorch eager
written the way verl and TRL write these ops, on the same tensors and threads, and the
per-call overhead of the Python binding over the bare kernel call.

    python3 -m tirl.bench [--quick] [--threads N] [--device cpu|cuda] [--json FILE]

Each case runs forward and backward (where the op has one). The eager baselines follow verl's ``compute_policy_loss_vanilla`` +
``agg_loss``, ``logprobs_from_logits`` / ``entropy_from_logits``,
``compute_grpo_outcome_advantage``, and TRL's DPO sigmoid loss.
Times are the fastest of several repeats (other processes only add time).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import time
from typing import Callable, Dict, List

import torch

import tirl

from . import _abi


def _timer(fn: Callable[[], object], device: torch.device, min_time: float, repeats: int = 5) -> float:
    """Seconds per call: the fastest of ``repeats`` batches of calls (each about
    ``min_time / 4`` long). The minimum, not the median: on a shared machine other
    processes only ever add time."""
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    for _ in range(3):
        fn()
    sync()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_time / 4 or calls < 3:
        fn()
        calls += 1
    sync()
    per_batch = max(calls, 3)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(per_batch):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / per_batch)
    return min(samples)


# ------------------------------------------------------------------ eager baselines (verl, TRL)

def verl_policy_loss(log_prob, old_log_prob, advantages, response_mask, clip_low=0.2, clip_high=0.28, clip_c=3.0):
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_losses3 = -advantages * clip_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    mask = response_mask.to(pg_losses.dtype)
    return (pg_losses * mask).sum() / mask.sum()


def verl_logprobs_entropy(logits, labels):
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    pd = torch.softmax(logits.float(), dim=-1)
    entropy = torch.logsumexp(logits.float(), dim=-1) - torch.sum(pd * logits.float(), dim=-1)
    return logp, entropy


def verl_grpo_advantage(scores, index):
    groups: Dict[int, List[torch.Tensor]] = {}
    for i in range(scores.shape[0]):
        groups.setdefault(index[i], []).append(scores[i])
    stats = {k: (torch.mean(torch.stack(v)), torch.std(torch.stack(v))) for k, v in groups.items()}
    out = scores.clone()
    for i in range(scores.shape[0]):
        mean, std = stats[index[i]]
        out[i] = (scores[i] - mean) / (std + 1e-6)
    return out


def trl_dpo_sigmoid(pc, pr, rc, rr, beta=0.1):
    logits = (pc - pr) - (rc - rr)
    return (-torch.nn.functional.logsigmoid(beta * logits)).mean()


# ------------------------------------------------------------------ cases

SIZES = {
    "full": dict(ppo=(64, 2048), logits=(1024, 128000), sequences=4096, pairs=16384),
    "quick": dict(ppo=(16, 512), logits=(256, 32000), sequences=256, pairs=1024),
    "tiny": dict(ppo=(2, 8), logits=(4, 16), sequences=16, pairs=8),  # the test's smoke run
}


def run(size: str, device: torch.device, min_time: float) -> List[Dict[str, object]]:
    sizes = SIZES[size]
    g = torch.Generator().manual_seed(0)
    rows: List[Dict[str, object]] = []

    def record(name: str, shape: str, eager: Callable[[], object], fused: Callable[[], object]):
        eager_s = _timer(eager, device, min_time)
        tirl_s = _timer(fused, device, min_time)
        rows.append(dict(case=name, shape=shape, eager_ms=eager_s * 1e3, tirl_ms=tirl_s * 1e3,
                         speedup=eager_s / tirl_s))

    batch, length = sizes["ppo"]
    old = (-torch.rand(batch, length, generator=g) * 3).to(device)
    logp_data = (old + 0.3 * torch.randn(batch, length, generator=g).to(device)).contiguous()
    adv = torch.randn(batch, 1, generator=g).to(device).expand(batch, length).contiguous()
    mask = (torch.rand(batch, length, generator=g) > 0.2).to(device)
    logp = logp_data.clone().requires_grad_()

    def eager_ppo():
        logp.grad = None
        verl_policy_loss(logp, old, adv, mask).backward()

    def tirl_ppo():
        logp.grad = None
        tirl.ppo_loss(logp, old, adv, mask, clip_high=0.28, dual_clip=3.0)[0].backward()

    record("ppo_loss fwd+bwd (verl vanilla, token-mean)", f"{batch}x{length}", eager_ppo, tirl_ppo)

    tokens, vocab = sizes["logits"]
    logits = (torch.randn(tokens, vocab, generator=g) * 2).to(device).requires_grad_()
    labels = torch.randint(0, vocab, (tokens,), generator=g).to(device)
    grad_logp, grad_entropy = torch.randn(tokens, device=device), torch.randn(tokens, device=device)

    def eager_logprobs():
        logits.grad = None
        lp, ent = verl_logprobs_entropy(logits, labels)
        ((lp * grad_logp).sum() + (ent * grad_entropy).sum()).backward()

    def tirl_logprobs():
        logits.grad = None
        lp, ent = tirl.token_logprobs(logits, labels, with_entropy=True)
        ((lp * grad_logp).sum() + (ent * grad_entropy).sum()).backward()

    record("token_logprobs+entropy fwd+bwd (verl)", f"{tokens}x{vocab} f32", eager_logprobs, tirl_logprobs)

    sequences = sizes["sequences"]
    scores = torch.rand(sequences, generator=g).to(device)
    index = [i // 8 for i in range(sequences)]
    group_ids = torch.tensor(index, dtype=torch.int32, device=device)
    record("group_advantages (verl GRPO loop)", f"{sequences} in groups of 8",
           lambda: verl_grpo_advantage(scores, index),
           lambda: tirl.group_advantages(scores, group_ids=group_ids))

    pairs = sizes["pairs"]
    pc, pr = (torch.randn(pairs, generator=g).to(device).requires_grad_() for _ in range(2))
    rc, rr = (torch.randn(pairs, generator=g).to(device) for _ in range(2))

    def eager_dpo():
        pc.grad = pr.grad = None
        trl_dpo_sigmoid(pc, pr, rc, rr).backward()

    def tirl_dpo():
        pc.grad = pr.grad = None
        tirl.dpo_loss(pc, pr, rc, rr)[0].backward()

    record("dpo_loss sigmoid fwd+bwd (TRL)", f"{pairs} pairs", eager_dpo, tirl_dpo)
    return rows


def binding_overhead(device: torch.device, min_time: float) -> Dict[str, float]:
    """Per-call cost of the package over the bare ctypes call of the same kernel, on one
    token (so the kernel's own work is negligible): the ctypes call with prepared
    arguments, the plain function's forward, and forward + backward through autograd."""
    n = 1
    logp = torch.full((1, n), -1.0, device=device)
    old = torch.full((1, n), -1.1, device=device)
    adv = torch.ones((1, n), device=device)
    mask = torch.ones((1, n), dtype=torch.bool, device=device)
    grad = torch.empty_like(logp)
    offsets = torch.tensor([0, n], dtype=torch.int32, device=device)
    options = _abi.lib.tirl_ppo_options_default()
    result = _abi.PpoResult()
    dev = _abi.device_of("logp", logp)
    args = (logp.data_ptr(), old.data_ptr(), adv.data_ptr(), mask.data_ptr(), n, offsets.data_ptr(), 1, None, None,
            ctypes.byref(options), grad.data_ptr(), ctypes.byref(result), dev)
    bare = _timer(lambda: _abi.lib.tirl_ppo_loss(*args), device, min_time)
    forward = _timer(lambda: tirl.ppo_loss(logp, old, adv, mask), device, min_time)
    leaf = logp.clone().requires_grad_()

    def both():
        leaf.grad = None
        tirl.ppo_loss(leaf, old, adv, mask)[0].backward()

    full = _timer(both, device, min_time)
    labels = torch.zeros((1, n), dtype=torch.int64, device=device)
    logits = torch.zeros((1, n, 8), device=device)
    out = torch.empty(n, device=device)
    token_args = (logits.data_ptr(), 0, n, 8, labels.to(torch.int32).data_ptr(), 1.0, out.data_ptr(), None, dev)
    bare_token = _timer(lambda: _abi.lib.tirl_token_logprobs(*token_args), device, min_time)
    token_forward = _timer(lambda: tirl.token_logprobs(logits, labels), device, min_time)
    return {"ppo_loss bare ctypes call": bare * 1e6, "ppo_loss forward (plain function)": forward * 1e6,
            "ppo_loss forward + backward (autograd)": full * 1e6,
            "ppo_loss overhead, forward": (forward - bare) * 1e6,
            "token_logprobs bare ctypes call": bare_token * 1e6,
            "token_logprobs forward (plain function)": token_forward * 1e6,
            "token_logprobs overhead, forward": (token_forward - bare_token) * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python3 -m tirl.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument("--threads", type=int, default=None, help="threads for both tirl and PyTorch")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    device = torch.device(args.device)
    threads = args.threads or tirl.num_threads()
    torch.set_num_threads(threads)
    tirl.set_num_threads(threads)
    min_time = 0.05 if args.quick else 0.3
    print(f"tirl {tirl.version()} ({tirl.simd_level()}), torch {torch.__version__}, {threads} thread(s), {device}")
    rows = run("quick" if args.quick else "full", device, min_time)
    print(f"{'case':<46} {'shape':<22} {'eager ms':>10} {'tirl ms':>10} {'speedup':>8}")
    for row in rows:
        print(f"{row['case']:<46} {row['shape']:<22} {row['eager_ms']:>10.3f} {row['tirl_ms']:>10.3f} "
              f"{row['speedup']:>7.2f}x")
    overhead = binding_overhead(device, min_time)
    print("\nbinding overhead, one token (µs per call):")
    for name, value in overhead.items():
        print(f"  {name:<42} {value:>8.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"threads": threads, "device": str(device), "torch": torch.__version__, "cases": rows,
                       "overhead_us": overhead}, f, indent=2)


if __name__ == "__main__":
    main()
