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
KL_ESTIMATORS: Dict[str, int] = {"k1": 0, "k2": 1, "k3": 2, "abs": 3}
RATIO_LEVELS: Dict[str, int] = {"token": 0, "sequence": 1}
DPO_VARIANTS: Dict[str, int] = {"sigmoid": 0, "hinge": 1, "ipo": 2, "robust": 3}

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


class GroupAdvantagesOptions(ctypes.Structure):
    _fields_ = [("scale_by_std", _i32), ("epsilon", _f64)]


class DpoOptions(ctypes.Structure):
    _fields_ = [("beta", _f64), ("label_smoothing", _f64), ("variant", _c_int)]


class DpoResult(ctypes.Structure):
    _fields_ = [("loss", _f64), ("reward_accuracy", _f64)]


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
    "tirl_group_advantages_options_default": (GroupAdvantagesOptions, []),
    "tirl_group_advantages": (_c_int, [_P, _i64, _P, _i64, ctypes.POINTER(GroupAdvantagesOptions),
                                       _P, Device]),
    "tirl_dpo_options_default": (DpoOptions, []),
    "tirl_dpo_loss": (_c_int, [_P, _P, _P, _P, _i64, ctypes.POINTER(DpoOptions), _P, _P, _P, _P,
                               ctypes.POINTER(DpoResult), Device]),
    "tirl_feedback_mask": (_c_int, [_P, _i64, _P, _i64, _P, _P, _P, Device]),
    "tirl_sequence_logprobs": (_c_int, [_P, _P, _i64, _P, _i64, _i32, _P, Device]),
    "tirl_sequence_logprobs_backward": (_c_int, [_P, _P, _i64, _P, _i64, _i32, _P, Device]),
    "tirl_token_logprobs": (_c_int, [_P, _c_int, _i64, _i64, _P, _f64, _P, _P, Device]),
    "tirl_token_logprobs_backward": (_c_int, [_P, _c_int, _i64, _i64, _P, _f64, _P, _P, _P, Device]),
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
        function = getattr(library, name)
        function.restype = restype
        function.argtypes = list(argtypes)
    return library


lib = _load()
library_path: str = lib._name


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
    if device is not None and value.device != device:
        raise value_error(name, f"a tensor on {device}", value)
    if value.device.type not in ("cpu", "cuda"):
        raise value_error(name, "a CPU or CUDA tensor", value)
    return value if value.is_contiguous() else value.contiguous()


def shape(name: str, value: torch.Tensor, expected: Sequence[int]) -> None:
    if tuple(value.shape) != tuple(expected):
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
