"""A few GRPO steps of a small PyTorch policy with tirl's kernels, data-parallel.

    torchrun --standalone --nproc_per_node=2 examples/pytorch/ddp_train.py [--steps 5] [--check]
    python3 examples/pytorch/ddp_train.py              # the same run in one process

Each step samples a group of responses per prompt from the current policy (the whole batch
is drawn from one seeded generator on every rank, so ranks agree on it), scores them,
and each rank trains on its own uneven share of the sequences: GRPO advantages with
groups spread over ranks (``tirl.distributed.group_advantages``), loss masks from token
roles (``tirl.feedback_mask``), log-probs from logits (``tirl.token_logprobs``) and the
clipped loss with global normalisers (``tirl.distributed.ppo_loss``) under
DistributedDataParallel. Rank 0 prints a per-step table; with ``--check`` it then replays
the run in one process on the whole batch and verifies the parameters agree (rtol 1e-5).
NCCL on GPUs is the same code (``--backend nccl``).
"""

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))  # the checkout's package
import tirl  # noqa: E402
import tirl.distributed  # noqa: E402

VOCAB, PROMPTS, GROUP, LENGTH, EOS = 12, 4, 4, 10, 0
PPO_EPOCHS, LR = 2, 0.5


class Policy(torch.nn.Module):
    """Logits for every response position from the prompt id (non-autoregressive, small)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.prompt = torch.nn.Embedding(PROMPTS, 16)
        self.position = torch.nn.Parameter(0.1 * torch.randn(LENGTH, 16))
        self.head = torch.nn.Linear(16, VOCAB)

    def forward(self, prompt_ids):
        hidden = torch.tanh(self.prompt(prompt_ids)[:, None, :] + self.position[None])
        return self.head(hidden)  # [B, LENGTH, VOCAB]


def rollout(policy, step, device):
    """Samples GROUP responses per prompt (Gumbel-max with seeded noise): token ids, roles
    (action up to and including EOS, padding after it), rewards and group ids."""
    g = torch.Generator().manual_seed(1000 + step)
    prompt_ids = torch.arange(PROMPTS, device=device).repeat_interleave(GROUP)
    with torch.no_grad():
        logits = policy(prompt_ids)
    noise = -torch.log(-torch.log(torch.rand(logits.shape, generator=g))).to(device)
    tokens = (logits + noise).argmax(-1)
    ended = torch.cumsum((tokens == EOS).int(), dim=1)
    after_eos = (ended - (tokens == EOS).int()) > 0
    roles = torch.where(after_eos, tirl.PADDING, tirl.ACTION).to(torch.uint8)
    target = (prompt_ids % (VOCAB - 1) + 1)[:, None]
    hits = ((tokens == target) & ~after_eos).sum(1).float()
    rewards = hits / LENGTH
    return dict(prompt_ids=prompt_ids, tokens=tokens, roles=roles, rewards=rewards,
                group_ids=prompt_ids.to(torch.int32))


def shares(batch_size, world):
    """Uneven contiguous shares of the sequences: rank r gets a little more than rank r+1."""
    base = [batch_size // world] * world
    for r in range(batch_size % world):
        base[r] += 1
    if world > 1:
        base[0] += 1
        base[-1] -= 1
    bounds, start = [], 0
    for size in base:
        bounds.append((start, start + size))
        start += size
    return bounds


def train(steps, rank=0, world=1, distributed=False, log=print, device=torch.device("cpu")):
    policy = Policy().to(device)
    model = torch.nn.parallel.DistributedDataParallel(policy) if distributed else policy
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    if log:
        log(f"{'step':>4} {'reward':>8} {'loss':>10} {'clip':>6} {'kl':>9} {'tokens':>6}")
    for step in range(steps):
        batch = rollout(policy, step, device)
        first, last = shares(PROMPTS * GROUP, world)[rank]
        mine = {key: value[first:last] for key, value in batch.items()}
        if distributed:
            advantages = tirl.distributed.group_advantages(mine["rewards"], mine["group_ids"])
        else:
            advantages = tirl.group_advantages(mine["rewards"], group_ids=mine["group_ids"])
        mask, _ = tirl.feedback_mask(mine["roles"])
        token_advantages = advantages[:, None].expand_as(mask)
        old_logp = None
        for _ in range(PPO_EPOCHS):
            logp = tirl.token_logprobs(model(mine["prompt_ids"]), mine["tokens"])
            if old_logp is None:
                old_logp = logp.detach()
            options = dict(clip_low=0.2, clip_high=0.28, aggregation="seq-mean-token-mean")
            if distributed:
                loss, stats = tirl.distributed.ppo_loss(logp, old_logp, token_advantages, mask, **options)
            else:
                loss, stats = tirl.ppo_loss(logp, old_logp, token_advantages, mask, **options)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        summary = torch.tensor([float(loss), stats.clip_fraction * stats.masked_tokens, stats.approx_kl *
                                stats.masked_tokens, float(stats.masked_tokens)], dtype=torch.float64, device=device)
        if distributed:
            dist.all_reduce(summary)
            summary[0] /= world
        if log:
            tokens = summary[3].item()
            log(f"{step:>4} {batch['rewards'].mean().item():>8.4f} {summary[0].item():>10.6f} "
                f"{summary[1].item() / tokens:>6.3f} {summary[2].item() / tokens:>9.2e} {int(tokens):>6}")
    return policy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--check", action="store_true", help="compare with a one-process replay")
    parser.add_argument("--backend", default="gloo")
    args = parser.parse_args()
    torch.set_num_threads(1)
    distributed = "WORLD_SIZE" in os.environ
    if not distributed:
        train(args.steps)
        return 0
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if args.backend == "nccl":  # one GPU per rank; tirl's kernels run on the tensors' CUDA device
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    if rank == 0:
        print(f"tirl {tirl.version()} on {world} ranks ({args.backend}), shares {shares(PROMPTS * GROUP, world)}")
    policy = train(args.steps, rank, world, distributed=True, log=print if rank == 0 else None, device=device)
    status = 0
    if rank == 0 and args.check:
        reference = train(args.steps, log=None, device=device)
        worst = 0.0
        for (name, p), q in zip(policy.named_parameters(), reference.parameters()):
            worst = max(worst, float(((p - q).abs() / (q.abs() + 1e-6)).max()))
            if not torch.allclose(p, q, rtol=1e-5, atol=1e-6):
                print(f"parameter {name} differs from the one-process run")
                status = 1
        print(f"parameters after {args.steps} steps equal the one-process run: "
              f"{'yes' if status == 0 else 'NO'} (max relative difference {worst:.2e})")
    dist.barrier()
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
