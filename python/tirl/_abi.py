"""The C ABI of ``native/include/tirl/tirl.h``, declared once for ctypes.

Everything that crosses into libtirl is here: the library's location, the enums and
structs, one table of function signatures, the status check, and the helpers that turn a
tensor into a pointer after checking its dtype, device and layout. Op modules
(``tirl/ops/<op>.py``) only call these; no formula lives in Python.

Adding an op: declare its options/result structs below (fields in the header's order),
add its functions to ``_SIGNATURES``, and write ``tirl/ops/<op>.py`` with its
``torch.autograd.Function`` and plain function.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import torch

# ------------------------------------------------------------------ enums (tirl.h)

DEVICE_CPU, DEVICE_CUDA = 0, 1
DTYPE_F32, DTYPE_BF16 = 0, 1
STATUS_INVALID_ARGUMENT, STATUS_OUT_OF_MEMORY, STATUS_UNSUPPORTED = 1, 2, 3

AGGREGATIONS: Dict[str, int] = {
    "token-mean": 0,
    "token-sum": 1,
    "seq-mean-token-sum": 2,
    "seq-mean-token-mean": 3,
    "seq-mean-token-sum-norm": 4,
}
KL_ESTIMATORS: Dict[str, int] = {"k1": 0, "k2": 1, "k3": 2, "abs": 3, "low_var_kl": 2, "mse": 1,
                                 "k1+": 4, "k3+": 5, "low_var_kl+": 5, "abs+": 6}
RATIO_LEVELS: Dict[str, int] = {"token": 0, "sequence": 1}
DPO_VARIANTS: Dict[str, int] = {"sigmoid": 0, "hinge": 1, "ipo": 2, "robust": 3}
ROLLOUT_IS_LEVELS: Dict[str, int] = {"none": 0, "token": 1, "sequence": 2}
ROLLOUT_RS_OPTIONS: Dict[str, int] = {
    name: i for i, name in enumerate([
        "token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
        "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3"])
}
POLICY_LOSSES: Dict[str, int] = {
    "vanilla": 0, "gspo": 1, "dppo_tv": 2, "dppo_kl": 3, "sapo": 4, "gpg": 5, "clip_cov": 6, "kl_cov": 7,
    "geo_mean": 8, "dro": 9, "cispo": 10, "reinforce": 11, "bypass_mode": 12,
}
ADVANTAGE_ESTIMATORS: Dict[str, int] = {
    "grpo": 0, "grpo_passk": 1, "gdpo": 2, "rloo": 3, "reinforce_plus_plus": 4, "reinforce_plus_plus_baseline": 5,
    "remax": 6, "opo": 7, "gpg": 8, "gae": 9, "optimal_token_baseline": 10, "tir_optimal_token_baseline": 11,
}
BYPASS_LOSS_TYPES: Dict[str, int] = {"ppo_clip": 0, "reinforce": 1}

# ------------------------------------------------------------------ structs (tirl.h)

_c_int = ctypes.c_int
_f64 = ctypes.c_double
_i32 = ctypes.c_int32
_i64 = ctypes.c_int64
_ptr = ctypes.c_void_p


class Device(ctypes.Structure):
    _fields_ = [("type", _c_int), ("index", _i32), ("stream", _ptr)]


class PpoOptions(ctypes.Structure):
    _fields_ = [
        ("clip_low", _f64),
        ("clip_high", _f64),
        ("dual_clip", _f64),
        ("aggregation", _c_int),
        ("token_normalizer", _f64),
        ("seq_normalizer", _f64),
        ("horizon", _f64),
        ("dp_size", _f64),
        ("kl_coef", _f64),
        ("kl_estimator", _c_int),
        ("ratio_level", _c_int),
    ]


class PpoResult(ctypes.Structure):
    _fields_ = [
        ("loss", _f64),
        ("pg_loss", _f64),
        ("kl_loss", _f64),
        ("clip_fraction", _f64),
        ("clip_fraction_lower", _f64),
        ("approx_kl", _f64),
        ("non_finite", _i64),
        ("masked_tokens", _i64),
    ]


class PolicyLossOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("policy_loss", _c_int),
        ("ppo", PpoOptions),
        ("clip_ratio_c", _f64),
        ("tau_pos", _f64),
        ("tau_neg", _f64),
        ("clip_cov_ratio", _f64),
        ("clip_cov_lb", _f64),
        ("clip_cov_ub", _f64),
        ("kl_cov_ratio", _f64),
        ("ppo_kl_coef", _f64),
        ("dro_beta", _f64),
        ("seed", ctypes.c_uint64),
        ("loss_type", _c_int),
        ("rollout_is", _c_int),
        ("rollout_is_threshold", _f64),
        ("rollout_is_threshold_lower", _f64),
        ("rollout_is_batch_normalize", _i32),
    ]


class _PolicyLossOptionsReturn(ctypes.Structure):
    """PolicyLossOptions with room to spare, as the restype of its default(): a library whose
    struct grew cannot write past the buffer, and its struct_size then shows the mismatch."""
    _fields_ = [("options", PolicyLossOptions), ("spare", ctypes.c_uint8 * 256)]


class PolicyLossResult(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("ppo", PpoResult),
        ("selected_tokens", _i64),
        ("rollout_is_batch_norm_factor", _f64),
    ]


class GroupAdvantagesOptions(ctypes.Structure):
    _fields_ = [("scale_by_std", _i32), ("epsilon", _f64)]


class AdvantagesOptions(ctypes.Structure):
    _fields_ = [
        ("estimator", _c_int),
        ("norm_adv_by_std", _i32),
        ("epsilon", _f64),
        ("gamma", _f64),
        ("lam", _f64),
        ("f_norm", _f64),
        ("handle_zero_tail", _i32),
        ("num_reward_keys", _i64),
        ("group_size", _i64),
    ]


class _AdvantagesOptionsReturn(ctypes.Structure):
    """AdvantagesOptions with room to spare, as the restype of its default() (see _PolicyLossOptionsReturn)."""
    _fields_ = [("options", AdvantagesOptions), ("spare", ctypes.c_uint8 * 256)]


class AdvantagesInputs(ctypes.Structure):
    _fields_ = [(name, _ptr) for name in (
        "rewards", "token_rewards", "mask", "seq_offsets", "group_ids", "values", "reward_baselines", "old_logp",
        "sum_pi_squared", "rollout_is_weights", "reward_weights")]


class DpoOptions(ctypes.Structure):
    _fields_ = [("beta", _f64), ("label_smoothing", _f64), ("variant", _c_int)]


class DpoResult(ctypes.Structure):
    _fields_ = [("loss", _f64), ("reward_accuracy", _f64)]


_RS_COUNT = len(ROLLOUT_RS_OPTIONS)


class RolloutCorrectionOptions(ctypes.Structure):
    _fields_ = [
        ("rollout_is", _c_int),
        ("rollout_is_threshold", _f64),
        ("rollout_is_threshold_lower", _f64),
        ("rollout_is_batch_normalize", _i32),
        ("rollout_rs", ctypes.c_uint32),
        ("rollout_rs_threshold", _f64 * _RS_COUNT),
        ("rollout_rs_threshold_lower", _f64 * _RS_COUNT),
    ]


ROLLOUT_RS_STATS = ("masked_fraction", "seq_masked_fraction", "mean", "max", "min", "std",
                    "fraction_high", "fraction_low", "seq_mean", "seq_std", "seq_max", "seq_min",
                    "seq_max_deviation", "seq_fraction_high", "seq_fraction_low")


class RolloutRsStats(ctypes.Structure):
    _fields_ = [(name, _f64) for name in ROLLOUT_RS_STATS]


ROLLOUT_IS_STATS = ("rollout_is_mean", "rollout_is_max", "rollout_is_min", "rollout_is_std",
                    "rollout_is_eff_sample_size", "rollout_is_ratio_fraction_high",
                    "rollout_is_ratio_fraction_low", "rollout_is_seq_mean", "rollout_is_seq_std",
                    "rollout_is_seq_max", "rollout_is_seq_min", "rollout_is_seq_max_deviation",
                    "rollout_is_seq_fraction_high", "rollout_is_seq_fraction_low",
                    "rollout_is_batch_norm_factor", "rollout_is_oob_ratio")
OFF_POLICY_STATS = ("training_ppl", "training_log_ppl", "kl", "k3_kl", "rollout_ppl",
                    "rollout_log_ppl", "log_ppl_diff", "log_ppl_abs_diff", "log_ppl_diff_max",
                    "log_ppl_diff_min", "ppl_ratio", "chi2_token", "chi2_seq")


class RolloutCorrectionResult(ctypes.Structure):
    _fields_ = ([(name, _f64) for name in ROLLOUT_IS_STATS]
                + [("rollout_rs_masked_fraction", _f64), ("rollout_rs_seq_masked_fraction", _f64),
                   ("rollout_rs", RolloutRsStats * _RS_COUNT)]
                + [(name, _f64) for name in OFF_POLICY_STATS]
                + [("masked_tokens", _i64), ("valid_seqs", _i64), ("non_finite", _i64)])


# ------------------------------------------------------------------ signatures (tirl.h)

_P = _ptr
_PpoOptionsP = ctypes.POINTER(PpoOptions)

# name -> (restype, argtypes). Functions returning tirl_status have restype c_int.
_SIGNATURES: Dict[str, Tuple[object, Sequence[object]]] = {
    "tirl_last_error": (ctypes.c_char_p, []),
    "tirl_version": (ctypes.c_char_p, []),
    "tirl_num_threads": (_i32, []),
    "tirl_set_num_threads": (_c_int, [_i32]),
    "tirl_simd_level": (ctypes.c_char_p, []),
    "tirl_build_info": (ctypes.c_char_p, []),
    "tirl_cuda_available": (_i32, []),
    "tirl_cuda_status": (ctypes.c_char_p, []),
    "tirl_ppo_options_default": (PpoOptions, []),
    "tirl_ppo_loss": (_c_int, [_P, _P, _P, _P, _i64, _P, _i64, _P, _P, _PpoOptionsP, _P,
                               ctypes.POINTER(PpoResult), Device]),
    "tirl_policy_loss_options_default": (_PolicyLossOptionsReturn, []),
    "tirl_policy_loss": (_c_int, [_P, _P, _P, _P, _i64, _P, _i64, _P, _P, ctypes.POINTER(PolicyLossOptions), _P,
                                  ctypes.POINTER(PolicyLossResult), Device]),
    "tirl_group_advantages_options_default": (GroupAdvantagesOptions, []),
    "tirl_group_advantages": (_c_int, [_P, _i64, _P, _i64, ctypes.POINTER(GroupAdvantagesOptions),
                                       _P, Device]),
    "tirl_advantages_options_default": (_AdvantagesOptionsReturn, []),
    "tirl_advantages": (_c_int, [ctypes.POINTER(AdvantagesInputs), _i64, _i64, ctypes.POINTER(AdvantagesOptions),
                                 _P, _P, Device]),
    "tirl_dpo_options_default": (DpoOptions, []),
    "tirl_dpo_loss": (_c_int, [_P, _P, _P, _P, _i64, ctypes.POINTER(DpoOptions), _P, _P, _P, _P,
                               ctypes.POINTER(DpoResult), Device]),
    "tirl_feedback_mask": (_c_int, [_P, _i64, _P, _i64, _P, _P, _P, Device]),
    "tirl_sequence_logprobs": (_c_int, [_P, _P, _i64, _P, _i64, _i32, _P, Device]),
    "tirl_sequence_logprobs_backward": (_c_int, [_P, _P, _i64, _P, _i64, _i32, _P, Device]),
    "tirl_token_logprobs": (_c_int, [_P, _c_int, _i64, _i64, _P, _f64, _P, _P, Device]),
    "tirl_token_logprobs_backward": (_c_int, [_P, _c_int, _i64, _i64, _P, _f64, _P, _P, _P, Device]),
    "tirl_rollout_correction_options_default": (RolloutCorrectionOptions, []),
    "tirl_rollout_correction": (_c_int, [_P, _P, _P, _i64, _P, _i64,
                                         ctypes.POINTER(RolloutCorrectionOptions), _P, _P,
                                         ctypes.POINTER(RolloutCorrectionResult), Device]),
}

# ------------------------------------------------------------------ loading

_PACKAGE_LIBRARY = Path(__file__).resolve().parent / "lib" / "libtirl.so"
_REPOSITORY = Path(__file__).resolve().parents[2]


def library_candidates() -> Sequence[Path]:
    """Where libtirl.so is looked for, in order: $TIRL_LIBRARY, the copy shipped in the
    package (``tirl/lib``), then a tirl checkout's ``build/Release`` and
    ``prebuilds/linux-x64`` (when the package is used from the source tree)."""
    explicit = os.environ.get("TIRL_LIBRARY")
    if explicit:
        return [Path(explicit)]
    return [
        _PACKAGE_LIBRARY,
        _REPOSITORY / "build" / "Release" / "libtirl.so",
        _REPOSITORY / "prebuilds" / "linux-x64" / "libtirl.so",
    ]


def _load() -> ctypes.CDLL:
    candidates = library_candidates()
    for path in candidates:
        if path.is_file():
            library = ctypes.CDLL(str(path))
            break
    else:
        tried = ", ".join(str(p) for p in candidates)
        raise OSError(
            f"tirl: libtirl.so not found (tried {tried}). Install the package with "
            "'pip install ./python' from a tirl checkout that has build/Release/libtirl.so "
            "('npm run build') or prebuilds/linux-x64, or set TIRL_LIBRARY to the library's path."
        )
    for name, (restype, argtypes) in _SIGNATURES.items():
        if not hasattr(library, name):
            continue  # an older library: the op's wrapper says so when called (require())
        function = getattr(library, name)
        function.restype = restype
        function.argtypes = list(argtypes)
    return library


lib = _load()
library_path: str = lib._name


def policy_loss_options_default() -> PolicyLossOptions:
    """tirl_policy_loss_options_default(), refused when the library's struct is not the one
    declared here (a library built from another tirl.h)."""
    require("tirl_policy_loss")
    options = lib.tirl_policy_loss_options_default().options
    if options.struct_size != ctypes.sizeof(PolicyLossOptions):
        raise RuntimeError(f"tirl: {library_path} has a tirl_policy_loss_options of {options.struct_size} bytes, "
                           f"this package declares {ctypes.sizeof(PolicyLossOptions)}: use the libtirl.so of the "
                           "same checkout, or update tirl/_abi.py from tirl.h")
    return options


def require(name: str) -> None:
    """Refuses an op the loaded library does not export (one older than this package)."""
    if not hasattr(lib, name):
        raise RuntimeError(f"tirl: {library_path} has no {name}; rebuild it from this checkout "
                           "('npm run build') or point TIRL_LIBRARY at a newer libtirl.so")


# ------------------------------------------------------------------ status and messages

def check(status: int, op: str) -> None:
    """Raises for a non-zero tirl_status: ValueError for an invalid argument (the message
    names it), MemoryError, RuntimeError otherwise."""
    if status == 0:
        return
    message = f"tirl.{op}: {lib.tirl_last_error().decode(errors='replace')}"
    if status == STATUS_INVALID_ARGUMENT:
        raise ValueError(message)
    if status == STATUS_OUT_OF_MEMORY:
        raise MemoryError(message)
    raise RuntimeError(f"{message} (status {status})")


def describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)} on {value.device}"
    return f"{value!r} of type {type(value).__name__}"


def type_error(name: str, expected: str, value: object) -> TypeError:
    """The one message shape: Expected <what> for <name> but received <value>."""
    return TypeError(f"tirl: expected {expected} for {name} but received {describe(value)}")


def value_error(name: str, expected: str, value: object) -> ValueError:
    return ValueError(f"tirl: expected {expected} for {name} but received {describe(value)}")


def choice(name: str, value: str, table: Dict[str, int]) -> int:
    """The enum value of an option given by name, e.g. aggregation='token-mean'."""
    if not isinstance(value, str) or value not in table:
        expected = "one of " + ", ".join(repr(key) for key in table)
        raise value_error(name, expected, value)
    return table[value]


def number(name: str, value: object) -> float:
    """A real number option (bool is refused; NaN passes to the core, which names it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.requires_grad:
            return float(value.item())
        raise type_error(name, "a number", value)
    return float(value)


# ------------------------------------------------------------------ tensors -> pointers

def tensor(name: str, value: object, dtypes: Tuple[torch.dtype, ...],
           device: Optional[torch.device] = None) -> torch.Tensor:
    """Checks one tensor argument: a torch.Tensor of one of ``dtypes`` (the first is the one
    named in the message), on ``device`` when given; returns it contiguous (a copy only
    when it was not)."""
    if not isinstance(value, torch.Tensor):
        raise type_error(name, f"a {dtypes[0]} tensor", value)
    if value.dtype not in dtypes:
        expected = " or ".join(str(d) for d in dtypes)
        raise type_error(name, f"a {expected} tensor", value)
    value_device = value.device  # each .device makes a new torch.device: read once
    if device is not None and value_device != device:
        raise value_error(name, f"a tensor on {device}", value)
    if value_device.type not in ("cpu", "cuda"):
        raise value_error(name, "a CPU or CUDA tensor", value)
    return value if value.is_contiguous() else value.contiguous()


def shape(name: str, value: torch.Tensor, expected: Sequence[int]) -> None:
    actual = value.shape
    if actual != expected and tuple(actual) != tuple(expected):  # a torch.Size is a tuple
        raise value_error(name, f"shape {tuple(expected)}", value)


def mask_tensor(name: str, value: object, device: torch.device, expected: Sequence[int]) -> torch.Tensor:
    """A mask as the kernels read it: one byte per element, nonzero = included. bool and
    uint8 tensors are used as they are; other dtypes (verl's int64 attention masks, float
    masks) become a bool copy once."""
    if not isinstance(value, torch.Tensor):
        raise type_error(name, "a bool or uint8 tensor", value)
    if value.device != device:
        raise value_error(name, f"a tensor on {device}", value)
    shape(name, value, expected)
    if value.dtype not in (torch.bool, torch.uint8):
        if value.is_complex():
            raise type_error(name, "a bool or uint8 tensor", value)
        value = value != 0
    return value if value.is_contiguous() else value.contiguous()


def int32_tensor(name: str, value: object, device: torch.device) -> torch.Tensor:
    """An int32 index tensor (labels, group ids, cu_seqlens); int64 ones (PyTorch's default)
    are narrowed to an int32 copy, refused when a value does not fit."""
    if not isinstance(value, torch.Tensor):
        raise type_error(name, "an int32 or int64 tensor", value)
    if value.dtype not in (torch.int32, torch.int64):
        raise type_error(name, "an int32 or int64 tensor", value)
    if value.device != device:
        raise value_error(name, f"a tensor on {device}", value)
    if value.dtype == torch.int64:
        if value.numel():
            low, high = torch.aminmax(value)
            if int(low) < -2**31 or int(high) >= 2**31:
                raise value_error(name, "values that fit in int32", value)
        value = value.to(torch.int32)
    return value if value.is_contiguous() else value.contiguous()


def pointer(value: Optional[torch.Tensor]) -> Optional[int]:
    return None if value is None else value.data_ptr()


_CPU = Device(DEVICE_CPU, 0, None)


def device_of(name: str, value: torch.Tensor) -> Device:
    """The tirl device for a tensor's memory: the host, or its CUDA device with PyTorch's
    current stream on it (kernels are queued there, ordered with the caller's work)."""
    if value.device.type == "cpu":
        return _CPU
    if value.device.type == "cuda":
        if not lib.tirl_cuda_available():
            raise RuntimeError(f"tirl: {name} is a CUDA tensor but libtirl cannot use CUDA: "
                               f"{lib.tirl_cuda_status().decode(errors='replace')}")
        index = value.device.index if value.device.index is not None else torch.cuda.current_device()
        stream = torch.cuda.current_stream(index).cuda_stream
        return Device(DEVICE_CUDA, index, stream)
    raise value_error(name, "a CPU or CUDA tensor", value)
