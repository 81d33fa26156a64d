"""tirl for PyTorch: tirl's fused RL kernels (PPO/GRPO/GSPO losses, group advantages, DPO,
log-probs from logits, loss masks, rollout correction) as autograd functions over the
tensors' own memory.

    import tirl
    logp = tirl.token_logprobs(logits, labels)              # [B, T], grad into logits
    loss, stats = tirl.ppo_loss(logp, old_logp, adv, mask, aggregation="token-mean")
    loss.backward()

The kernels are the same libtirl.so the npm package ships (``tirl.library_path``).
"""

from __future__ import annotations

from . import _abi
from .ops import (ACTION, FEEDBACK, PADDING, PROMPT, DpoStats, PpoStats, advantages, dpo_loss, feedback_mask,
                  group_advantages, ppo_loss, rollout_correction, sequence_logprobs,
                  token_logprobs)

__version__ = "0.1.0"

library_path: str = _abi.library_path
"""The path of the libtirl.so this process loaded."""


def version() -> str:
    """The native library's version (tirl_version)."""
    return _abi.lib.tirl_version().decode()


def num_threads() -> int:
    """Threads the CPU kernels use (TIRL_NUM_THREADS, else the CPUs this process may use)."""
    return int(_abi.lib.tirl_num_threads())


def set_num_threads(n: int) -> None:
    """Sets the CPU kernels' thread count (n >= 1); results are bitwise the same for any n."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise _abi.type_error("n", "an int", n)
    _abi.check(_abi.lib.tirl_set_num_threads(n), "set_num_threads")


def simd_level() -> str:
    """The SIMD path the CPU kernels run on this machine, e.g. 'avx2'."""
    return _abi.lib.tirl_simd_level().decode()


def cuda_available() -> bool:
    """Whether libtirl can run its kernels on CUDA tensors."""
    return bool(_abi.lib.tirl_cuda_available())


def cuda_status() -> str:
    """Why CUDA is unavailable ('' when it is available)."""
    return _abi.lib.tirl_cuda_status().decode()


__all__ = [
    "ACTION", "FEEDBACK", "PADDING", "PROMPT",
    "DpoStats", "PpoStats",
    "advantages", "cuda_available", "cuda_status", "dpo_loss", "feedback_mask", "group_advantages",
    "library_path", "num_threads", "ppo_loss", "rollout_correction", "sequence_logprobs",
    "set_num_threads",
    "simd_level", "token_logprobs", "version",
]
