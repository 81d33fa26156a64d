"""The two batch layouts trainers use, mapped to the C ABI's ragged one.

- padded ``[B, T]`` (verl, TRL): every sequence has T slots, the mask marks the real ones;
  the sequence offsets are ``i * T``.
- packed 1-D ``[N]`` with ``cu_seqlens`` ``[B + 1]`` (varlen / flash-attention style).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Optional

import torch

from . import _abi


class Layout(NamedTuple):
    seq_offsets: Optional[torch.Tensor]  # int32 [B + 1], or None (no sequence structure)
    num_seqs: int
    num_tokens: int


@lru_cache(maxsize=64)
def _padded_offsets(batch: int, length: int, device: torch.device) -> torch.Tensor:
    return torch.arange(0, batch * length + 1, max(length, 1), dtype=torch.int32, device=device)[: batch + 1]


def layout(name: str, value: torch.Tensor, cu_seqlens: Optional[torch.Tensor]) -> Layout:
    """The ragged layout of a ``[B, T]`` or ``[N]`` tensor argument named ``name``."""
    if value.dim() == 2:
        if cu_seqlens is not None:
            raise _abi.value_error("cu_seqlens", f"None when {name} is padded [B, T]", cu_seqlens)
        batch, length = value.shape
        offsets = _padded_offsets(batch, length, value.device) if length else \
            torch.zeros(batch + 1, dtype=torch.int32, device=value.device)
        return Layout(offsets, batch, value.numel())
    if value.dim() == 1:
        if cu_seqlens is None:
            return Layout(None, 0, value.numel())
        offsets = _abi.int32_tensor("cu_seqlens", cu_seqlens, value.device)
        if offsets.dim() != 1 or offsets.numel() < 1:
            raise _abi.value_error("cu_seqlens", "a 1-D tensor of B + 1 offsets", cu_seqlens)
        return Layout(offsets, offsets.numel() - 1, value.numel())
    raise _abi.value_error(name, "a padded [B, T] or packed [N] tensor", value)
