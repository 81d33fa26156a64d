"""tirl's kernels inside PyTorch autograd, through the C ABI (ctypes).

The kernels read and write the tensors' own memory: no copies on the CPU, and on CUDA the
work is queued on the tensor's current stream (when libtirl reports CUDA available).
``native/include/tirl/tirl.h`` is the reference for every struct and function here.

    from tirl_torch import token_logprobs, ppo_loss, dpo_loss
    logp = token_logprobs(logits, labels)                  # [N], differentiable w.r.t. logits
    loss, stats = ppo_loss(logp, old_logp, advantages, mask, clip_low=0.2)
    loss.backward()

The library is found at $TIRL_LIBRARY, else in the repository's build/Release or
prebuilds/linux-x64.
"""

import ctypes
import os
from pathlib import Path

import torch

# ------------------------------------------------------------------ the C ABI, from tirl.h

TIRL_DEVICE_CPU, TIRL_DEVICE_CUDA = 0, 1
TIRL_DTYPE_F32, TIRL_DTYPE_BF16 = 0, 1
AGGREGATIONS = {
    "token-mean": 0,
    "token-sum": 1,
    "seq-mean-token-sum": 2,
    "seq-mean-token-mean": 3,
    "seq-mean-token-sum-norm": 4,
}
KL_ESTIMATORS = {"k1": 0, "k2": 1, "k3": 2, "abs": 3}
RATIO_LEVELS = {"token": 0, "sequence": 1}
DPO_VARIANTS = {"sigmoid": 0, "hinge": 1, "ipo": 2, "robust": 3}


class Device(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("index", ctypes.c_int32), ("stream", ctypes.c_void_p)]


class PpoOptions(ctypes.Structure):
    _fields_ = [
        ("clip_low", ctypes.c_double),
        ("clip_high", ctypes.c_double),
        ("dual_clip", ctypes.c_double),
        ("aggregation", ctypes.c_int),
        ("token_normalizer", ctypes.c_double),
        ("seq_normalizer", ctypes.c_double),
        ("horizon", ctypes.c_double),
        ("dp_size", ctypes.c_double),
        ("kl_coef", ctypes.c_double),
        ("kl_estimator", ctypes.c_int),
        ("ratio_level", ctypes.c_int),
    ]


class PpoResult(ctypes.Structure):
    _fields_ = [
        ("loss", ctypes.c_double),
        ("pg_loss", ctypes.c_double),
        ("kl_loss", ctypes.c_double),
        ("clip_fraction", ctypes.c_double),
        ("clip_fraction_lower", ctypes.c_double),
        ("approx_kl", ctypes.c_double),
        ("non_finite", ctypes.c_int64),
        ("masked_tokens", ctypes.c_int64),
    ]


class DpoOptions(ctypes.Structure):
    _fields_ = [("beta", ctypes.c_double), ("label_smoothing", ctypes.c_double), ("variant", ctypes.c_int)]


class DpoResult(ctypes.Structure):
    _fields_ = [("loss", ctypes.c_double), ("reward_accuracy", ctypes.c_double)]


def _find_library():
    if os.environ.get("TIRL_LIBRARY"):
        return os.environ["TIRL_LIBRARY"]
    root = Path(__file__).resolve().parents[2]
    for candidate in (root / "build" / "Release" / "libtirl.so", root / "prebuilds" / "linux-x64" / "libtirl.so"):
        if candidate.exists():
            return str(candidate)
    raise OSError(
        "libtirl.so not found: build it with 'npm run build' in the tirl checkout, or set TIRL_LIBRARY to its path"
    )


_lib = ctypes.CDLL(_find_library())
_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_lib.tirl_last_error.restype = ctypes.c_char_p
_lib.tirl_ppo_options_default.restype = PpoOptions
_lib.tirl_dpo_options_default.restype = DpoOptions
_lib.tirl_ppo_loss.argtypes = [_P, _P, _P, _P, _I64, _P, _I64, _P, _P, ctypes.POINTER(PpoOptions), _P,
                               ctypes.POINTER(PpoResult), Device]
_lib.tirl_dpo_loss.argtypes = [_P, _P, _P, _P, _I64, ctypes.POINTER(DpoOptions), _P, _P, _P, _P,
                               ctypes.POINTER(DpoResult), Device]
_lib.tirl_token_logprobs.argtypes = [_P, ctypes.c_int, _I64, _I64, _P, ctypes.c_double, _P, _P, Device]
_lib.tirl_token_logprobs_backward.argtypes = [_P, ctypes.c_int, _I64, _I64, _P, ctypes.c_double, _P, _P, _P,
                                              Device]
for _name in ("tirl_ppo_loss", "tirl_dpo_loss", "tirl_token_logprobs", "tirl_token_logprobs_backward"):
    getattr(_lib, _name).restype = ctypes.c_int


def cuda_available():
    """Whether libtirl can run kernels on CUDA tensors (its CUDA library loaded and found a GPU)."""
    if not hasattr(_lib, "tirl_cuda_available"):
        return False
    _lib.tirl_cuda_available.restype = ctypes.c_int
    return bool(_lib.tirl_cuda_available())


def _check(status, op):
    if status != 0:
        raise RuntimeError(f"tirl {op} failed (status {status}): {_lib.tirl_last_error().decode()}")


def _device(*tensors):
    """The tirl device of the tensors, which must share one and be contiguous (no hidden copies)."""
    first = tensors[0]
    for t in tensors:
        if t is None:
            continue
        if t.device != first.device:
            raise ValueError(f"tirl: all tensors must be on one device, got {first.device} and {t.device}")
        if not t.is_contiguous():
            raise ValueError("tirl: tensors must be contiguous (call .contiguous() once, explicitly)")
    if first.device.type == "cpu":
        return Device(TIRL_DEVICE_CPU, 0, None)
    if first.device.type == "cuda":
        if not cuda_available():
            raise RuntimeError("tirl: this libtirl has no usable CUDA support for CUDA tensors")
        stream = torch.cuda.current_stream(first.device).cuda_stream
        return Device(TIRL_DEVICE_CUDA, first.device.index or 0, stream)
    raise ValueError(f"tirl: unsupported device {first.device}")


def _ptr(t, dtype=None):
    if t is None:
        return None
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"tirl: expected a {dtype} tensor, got {t.dtype}")
    return t.data_ptr()


def _mask_ptr(mask):
    # bool and uint8 share the one-byte 0/1 layout the kernels read.
    if mask.dtype not in (torch.bool, torch.uint8):
        raise TypeError(f"tirl: masks must be bool or uint8, got {mask.dtype}")
    return mask.data_ptr()


def _labels(labels):
    # The ABI takes int32 labels; int64 ones (PyTorch's default) are narrowed, a copy of N ints.
    return labels if labels.dtype == torch.int32 else labels.to(torch.int32)


# ------------------------------------------------------------------ autograd functions

class TokenLogprobs(torch.autograd.Function):
    """log softmax(logits / T)[label] (and the entropy) per row; gradient w.r.t. the logits."""

    @staticmethod
    def forward(ctx, logits, labels, temperature, with_entropy):
        if logits.dtype not in (torch.float32, torch.bfloat16):
            raise TypeError(f"tirl: logits must be float32 or bfloat16, got {logits.dtype}")
        labels = _labels(labels)
        n, vocab = logits.shape
        dtype = TIRL_DTYPE_BF16 if logits.dtype == torch.bfloat16 else TIRL_DTYPE_F32
        device = _device(logits, labels)
        logp = torch.empty(n, dtype=torch.float32, device=logits.device)
        entropy = torch.empty(n, dtype=torch.float32, device=logits.device) if with_entropy else None
        _check(_lib.tirl_token_logprobs(logits.data_ptr(), dtype, n, vocab, labels.data_ptr(), temperature,
                                        logp.data_ptr(), _ptr(entropy), device), "token_logprobs")
        ctx.save_for_backward(logits, labels)
        ctx.temperature = temperature
        ctx.with_entropy = with_entropy
        if with_entropy:
            return logp, entropy
        return logp

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy=None):
        logits, labels = ctx.saved_tensors
        n, vocab = logits.shape
        dtype = TIRL_DTYPE_BF16 if logits.dtype == torch.bfloat16 else TIRL_DTYPE_F32
        grad_logp = grad_logp.contiguous().float()
        grad_entropy = grad_entropy.contiguous().float() if ctx.with_entropy and grad_entropy is not None else None
        grad_logits = torch.empty((n, vocab), dtype=torch.float32, device=logits.device)
        _check(_lib.tirl_token_logprobs_backward(logits.data_ptr(), dtype, n, vocab, labels.data_ptr(),
                                                 ctx.temperature, grad_logp.data_ptr(), _ptr(grad_entropy),
                                                 grad_logits.data_ptr(), _device(logits, grad_logp)),
               "token_logprobs_backward")
        return grad_logits.to(logits.dtype), None, None, None


class PpoLoss(torch.autograd.Function):
    """The PPO clipped surrogate (with optional KL and weights); gradient w.r.t. logp, fused in the forward."""

    @staticmethod
    def forward(ctx, logp, old_logp, advantages, mask, seq_offsets, ref_logp, weights, options, stats):
        device = _device(logp, old_logp, advantages, mask, seq_offsets, ref_logp, weights)
        grad = torch.empty_like(logp)
        result = PpoResult()
        num_seqs = 0 if seq_offsets is None else seq_offsets.numel() - 1
        _check(_lib.tirl_ppo_loss(_ptr(logp, torch.float32), _ptr(old_logp, torch.float32),
                                  _ptr(advantages, torch.float32), _mask_ptr(mask), logp.numel(),
                                  _ptr(seq_offsets, torch.int32), num_seqs, _ptr(ref_logp, torch.float32),
                                  _ptr(weights, torch.float32), ctypes.byref(options), grad.data_ptr(),
                                  ctypes.byref(result), device), "ppo_loss")
        ctx.save_for_backward(grad)
        stats.update({name: getattr(result, name) for name, _ in PpoResult._fields_})
        return torch.tensor(result.loss, dtype=torch.float32, device=logp.device)

    @staticmethod
    def backward(ctx, grad_loss):
        (grad,) = ctx.saved_tensors
        return grad * grad_loss, None, None, None, None, None, None, None, None


class DpoLoss(torch.autograd.Function):
    """The DPO-family loss on summed completion log-probs; gradients w.r.t. the policy's."""

    @staticmethod
    def forward(ctx, policy_chosen, policy_rejected, ref_chosen, ref_rejected, options, stats):
        device = _device(policy_chosen, policy_rejected, ref_chosen, ref_rejected)
        pairs = policy_chosen.numel()
        outputs = [torch.empty_like(policy_chosen) for _ in range(4)]
        result = DpoResult()
        _check(_lib.tirl_dpo_loss(_ptr(policy_chosen, torch.float32), _ptr(policy_rejected, torch.float32),
                                  _ptr(ref_chosen, torch.float32), _ptr(ref_rejected, torch.float32), pairs,
                                  ctypes.byref(options), *(o.data_ptr() for o in outputs), ctypes.byref(result),
                                  device), "dpo_loss")
        grad_chosen, grad_rejected, chosen_rewards, rejected_rewards = outputs
        ctx.save_for_backward(grad_chosen, grad_rejected)
        stats.update({"loss": result.loss, "reward_accuracy": result.reward_accuracy,
                      "chosen_rewards": chosen_rewards, "rejected_rewards": rejected_rewards})
        return torch.tensor(result.loss, dtype=torch.float32, device=policy_chosen.device)

    @staticmethod
    def backward(ctx, grad_loss):
        grad_chosen, grad_rejected = ctx.saved_tensors
        return grad_chosen * grad_loss, grad_rejected * grad_loss, None, None, None, None


# ------------------------------------------------------------------ functional forms

def token_logprobs(logits, labels, temperature=1.0, with_entropy=False):
    """Per-row label log-probs [N] (and entropies [N] when ``with_entropy``) of logits [N, V]."""
    return TokenLogprobs.apply(logits, labels, float(temperature), bool(with_entropy))


def ppo_loss(logp, old_logp, advantages, mask, seq_offsets=None, ref_logp=None, weights=None, *,
             clip_low=None, clip_high=None, dual_clip=None, aggregation=None, token_normalizer=None,
             seq_normalizer=None, horizon=None, dp_size=None, kl_coef=None, kl_estimator=None, ratio_level=None):
    """PPO loss (a 0-d tensor) and its statistics; options left None keep tirl's defaults."""
    options = _lib.tirl_ppo_options_default()
    for name, value in (("clip_low", clip_low), ("dual_clip", dual_clip), ("token_normalizer", token_normalizer),
                        ("seq_normalizer", seq_normalizer), ("horizon", horizon), ("dp_size", dp_size),
                        ("kl_coef", kl_coef)):
        if value is not None:
            setattr(options, name, float(value))
    # As in the TypeScript API: clip_high absent means equal to clip_low.
    options.clip_high = float(clip_high) if clip_high is not None else options.clip_low
    if aggregation is not None:
        options.aggregation = AGGREGATIONS[aggregation]
    if kl_estimator is not None:
        options.kl_estimator = KL_ESTIMATORS[kl_estimator]
    if ratio_level is not None:
        options.ratio_level = RATIO_LEVELS[ratio_level]
    stats = {}
    loss = PpoLoss.apply(logp, old_logp, advantages, mask, seq_offsets, ref_logp, weights, options, stats)
    return loss, stats


def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, *, beta=None, label_smoothing=None,
             variant=None):
    """DPO loss (a 0-d tensor) and its statistics (rewards, reward accuracy)."""
    options = _lib.tirl_dpo_options_default()
    if beta is not None:
        options.beta = float(beta)
    if label_smoothing is not None:
        options.label_smoothing = float(label_smoothing)
    if variant is not None:
        options.variant = DPO_VARIANTS[variant]
    stats = {}
    loss = DpoLoss.apply(policy_chosen, policy_rejected, ref_chosen, ref_rejected, options, stats)
    return loss, stats
