"""Data-parallel training with torch.distributed: the global normalisers that make the
gradient DDP/FSDP averages equal the gradient of one process on the whole batch.

Each rank holds a slice of the batch. A per-rank loss normalised by its own counts (its own
masked tokens, its own sequences) weighs ranks unequally once the split is uneven; instead
every rank divides by the *global* count and multiplies by the data-parallel size D, so the
average over ranks that DDP takes is the one-process loss (MATH.md, aggregation table)::

    norms = tirl.distributed.global_normalizers(mask, group=group)
    loss, stats = tirl.ppo_loss(logp, old_logp, adv, mask, **norms.ppo_options())
    loss.backward()                     # DDP averages: equals the one-process gradient

All collectives run on the process group you pass (default: the world group), with any
backend (gloo on CPUs, NCCL on GPUs: counts travel on the mask's device).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed as dist

from . import _abi
from ._layout import layout
from .ops.group_advantages import group_advantages as _group_advantages
from .ops.ppo_loss import PpoStats
from .ops.ppo_loss import ppo_loss as _ppo_loss


@dataclass(frozen=True)
class GlobalNormalizers:
    """The batch-wide counts a data-parallel step divides by."""

    token_normalizer: float
    """Masked-in tokens over all ranks ('token-mean')."""
    seq_normalizer: float
    """Sequences with at least one masked-in token over all ranks ('seq-*')."""
    horizon: float
    """Longest sequence over all ranks, in tokens (the padded length T for padded batches;
    'seq-mean-token-sum-norm')."""
    dp_size: int
    """Ranks in the group (D)."""

    def ppo_options(self) -> Dict[str, float]:
        """Keyword arguments for :func:`tirl.ppo_loss`. A normaliser that is 0 (nothing
        masked in anywhere) is left to the kernel's default, which then gives loss 0."""
        options: Dict[str, float] = {"dp_size": float(self.dp_size)}
        for name in ("token_normalizer", "seq_normalizer", "horizon"):
            value = getattr(self, name)
            if value > 0:
                options[name] = float(value)
        return options


def _world(group: Optional[Any]) -> int:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("tirl.distributed: torch.distributed is not initialised "
                           "(call torch.distributed.init_process_group first)")
    return dist.get_world_size(group)


def _collective_device(device: torch.device, group: Optional[Any]) -> torch.device:
    # NCCL reduces CUDA tensors only; gloo reduces CPU tensors (and CUDA ones by copying).
    backend = dist.get_backend(group)
    if backend == "nccl" and device.type != "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    if backend == "gloo":
        return torch.device("cpu")
    return device


def local_counts(mask: torch.Tensor, cu_seqlens: Optional[torch.Tensor] = None) -> Tuple[int, int, int]:
    """This rank's (masked-in tokens, non-empty sequences, longest sequence) of a padded
    ``[B, T]`` or packed ``[N]`` + ``cu_seqlens`` mask (a packed mask without cu_seqlens
    counts as one sequence)."""
    if not isinstance(mask, torch.Tensor):
        raise _abi.type_error("mask", "a tensor", mask)
    offsets, num_seqs, _ = layout("mask", mask, cu_seqlens)
    flat = (mask.reshape(-1) != 0)
    if offsets is None:
        count = int(flat.sum())
        return count, int(count > 0), flat.numel()
    lengths = (offsets[1:] - offsets[:-1]).long()
    if num_seqs == 0:
        return 0, 0, 0
    per_seq = torch.zeros(num_seqs, dtype=torch.int64, device=mask.device)
    per_seq.index_add_(0, torch.repeat_interleave(torch.arange(num_seqs, device=mask.device), lengths),
                       flat.long())
    return int(per_seq.sum()), int((per_seq > 0).sum()), int(lengths.max())


def global_normalizers(mask: torch.Tensor, *, cu_seqlens: Optional[torch.Tensor] = None,
                       group: Optional[Any] = None) -> GlobalNormalizers:
    """All-reduces this rank's counts over ``group`` (sum of masked tokens and non-empty
    sequences, max of the longest sequence) and returns them with the group's size.
    Every rank of the group must call it (it is a collective)."""
    world = _world(group)
    tokens, sequences, longest = local_counts(mask, cu_seqlens)
    device = _collective_device(mask.device, group)
    sums = torch.tensor([tokens, sequences], dtype=torch.float64, device=device)
    peak = torch.tensor([longest], dtype=torch.float64, device=device)
    dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=group)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX, group=group)
    return GlobalNormalizers(token_normalizer=float(sums[0]), seq_normalizer=float(sums[1]),
                             horizon=float(peak[0]), dp_size=world)


def ppo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
             group: Optional[Any] = None, cu_seqlens: Optional[torch.Tensor] = None,
             **options: Any) -> Tuple[torch.Tensor, PpoStats]:
    """:func:`tirl.ppo_loss` with the global normalisers of ``group`` (see the module).
    Normalisers given in ``options`` win over the gathered ones (e.g. ``horizon`` = the
    configured maximum response length, as Dr.GRPO trainers use)."""
    norms = global_normalizers(mask, cu_seqlens=cu_seqlens, group=group).ppo_options()
    norms.update(options)
    return _ppo_loss(logp, old_logp, advantages, mask, cu_seqlens=cu_seqlens, **norms)


def _all_gather_ragged(value: torch.Tensor, group: Optional[Any], world: int):
    device = _collective_device(value.device, group)
    local = value.to(device)
    size = torch.tensor([local.numel()], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    sizes_list = [int(s) for s in sizes]
    longest = max(sizes_list) if sizes_list else 0
    padded = torch.zeros(longest, dtype=local.dtype, device=device)
    padded[: local.numel()] = local
    parts = [torch.zeros_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded, group=group)
    return torch.cat([part[:n] for part, n in zip(parts, sizes_list)]), sizes_list


def group_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, *, group: Optional[Any] = None,
                     scale_by_std: bool = True, epsilon: float = 1e-6) -> torch.Tensor:
    """:func:`tirl.group_advantages` when a group's members sit on different ranks: the
    rewards and group ids of every rank are all-gathered (ranks may hold different
    numbers), every rank computes the same advantages of the whole batch, and returns its
    own slice. Group ids must mean the same group on every rank (e.g. a prompt's index)."""
    world = _world(group)
    rewards_t = _abi.tensor("rewards", rewards, (torch.float32,))
    ids = _abi.int32_tensor("group_ids", group_ids, rewards_t.device)
    _abi.shape("group_ids", ids, rewards_t.shape)
    all_rewards, sizes = _all_gather_ragged(rewards_t, group, world)
    all_ids, _ = _all_gather_ragged(ids, group, world)
    advantages = _group_advantages(all_rewards.to(rewards_t.device), group_ids=all_ids.to(rewards_t.device),
                                   scale_by_std=scale_by_std, epsilon=epsilon)
    rank = dist.get_rank(group)
    start = sum(sizes[:rank])
    return advantages[start:start + sizes[rank]].to(rewards_t.device)
