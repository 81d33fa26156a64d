"""One rank of the data-parallel tests (test_distributed.py starts WORLD of them, as
torchrun would): a small model under DistributedDataParallel (gloo), a GRPO batch split
unevenly over the ranks, tirl's losses with global normalisers. Rank 0 saves the loss
(averaged over ranks) and the DDP-averaged gradient of each configuration, and the group
advantages computed with groups spread over ranks.

    python dist_worker.py RANK WORLD INIT_FILE OUT_FILE
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tirl  # noqa: E402
import tirl.distributed  # noqa: E402

HIDDEN, VOCAB = 8, 13
LENGTHS = [5, 9, 2, 7, 4, 11, 3, 6, 8, 1]
FULLY_MASKED = 3  # a sequence with no action token; it lands on rank 1
GROUP_IDS = [0, 1, 0, 2, 1, 2, 0, 3, 1, 3]  # groups straddle the ranks

CONFIGS = []
for aggregation in ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                    "seq-mean-token-sum-norm"):
    CONFIGS.append(dict(aggregation=aggregation))
    CONFIGS.append(dict(aggregation=aggregation, kl_coef=0.1, kl_estimator="k3", weights=True, dual_clip=3.0,
                        clip_high=0.28))
    CONFIGS.append(dict(aggregation=aggregation, ratio_level="sequence", kl_coef=0.05, kl_estimator="k2",
                        weights=True))


def batch():
    """The whole batch, the same on every rank (seeded)."""
    g = torch.Generator().manual_seed(1234)
    n = sum(LENGTHS)
    offsets = [0]
    for length in LENGTHS:
        offsets.append(offsets[-1] + length)
    features = torch.randn(n, HIDDEN, generator=g)
    labels = torch.randint(0, VOCAB, (n,), generator=g)
    mask = torch.rand(n, generator=g) > 0.2
    mask[offsets[FULLY_MASKED]:offsets[FULLY_MASKED + 1]] = False
    rewards = torch.rand(len(LENGTHS), generator=g)
    return dict(features=features, labels=labels, mask=mask, offsets=offsets, rewards=rewards,
                old_shift=0.3 * torch.randn(n, generator=g), ref_shift=0.2 * torch.randn(n, generator=g),
                weights=torch.rand(n, generator=g) * 1.5)


def model():
    torch.manual_seed(7)
    return torch.nn.Linear(HIDDEN, VOCAB)


def split(world):
    """Contiguous, uneven runs of sequences per rank; rank 1 holds FULLY_MASKED."""
    plans = {1: [10], 2: [6, 4], 4: [1, 4, 2, 3]}
    bounds, start = [], 0
    for count in plans[world]:
        bounds.append((start, start + count))
        start += count
    return bounds


def slice_batch(full, first, last):
    """Sequences [first, last) of the batch, as a packed slice with its own cu_seqlens."""
    offsets = full["offsets"]
    lo, hi = offsets[first], offsets[last]
    part = {key: full[key][lo:hi] for key in ("features", "labels", "mask", "old_shift", "ref_shift", "weights")}
    part["cu_seqlens"] = torch.tensor([o - lo for o in offsets[first:last + 1]], dtype=torch.int32)
    part["rewards"] = full["rewards"][first:last]
    part["group_ids"] = torch.tensor(GROUP_IDS[first:last], dtype=torch.int32)
    return part


def step(net, part, config, advantages, distributed):
    """One loss on a (slice of the) batch: returns the loss tensor."""
    logits = net(part["features"])
    logp = tirl.token_logprobs(logits, part["labels"])
    old_logp = (logp.detach() + part["old_shift"]).contiguous()
    ref_logp = (logp.detach() + part["ref_shift"]).contiguous()
    token_adv = torch.repeat_interleave(advantages, (part["cu_seqlens"][1:] - part["cu_seqlens"][:-1]).long())
    options = dict(config)
    if options.pop("weights", False):
        options["weights"] = part["weights"]
    if "kl_coef" in options:
        options["ref_logp"] = ref_logp
    loss_fn = tirl.distributed.ppo_loss if distributed else tirl.ppo_loss
    loss, _ = loss_fn(logp, old_logp, token_adv, part["mask"], cu_seqlens=part["cu_seqlens"], **options)
    return loss


def one_process():
    """The reference: one process, the whole batch, the kernels' own default normalisers."""
    full = batch()
    part = slice_batch(full, 0, len(LENGTHS))
    advantages = tirl.group_advantages(part["rewards"], group_ids=part["group_ids"])
    results = []
    for config in CONFIGS:
        net = model()
        loss = step(net, part, config, advantages, distributed=False)
        loss.backward()
        results.append((loss.detach(), net.weight.grad.clone(), net.bias.grad.clone()))
    return results, advantages


def main(rank, world, init_file, out_file):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    full = batch()
    first, last = split(world)[rank]
    part = slice_batch(full, first, last)
    advantages = tirl.distributed.group_advantages(part["rewards"], part["group_ids"])
    gathered = [None] * world
    dist.all_gather_object(gathered, advantages)
    results = []
    for config in CONFIGS:
        net = torch.nn.parallel.DistributedDataParallel(model())
        loss = step(net, part, config, advantages, distributed=True)
        loss.backward()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        mean_loss /= world
        results.append((mean_loss, net.module.weight.grad.clone(), net.module.bias.grad.clone()))
    if rank == 0:
        torch.save({"results": results, "advantages": torch.cat(gathered)}, out_file)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
