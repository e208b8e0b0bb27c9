"""Device selection and mixed precision."""

from __future__ import annotations

import contextlib
import functools
import logging

import torch

from graphdoc.errors import GraphDocError

logger = logging.getLogger(__name__)


#: the device types graphdoc runs on
DEVICE_TYPES = ("cpu", "cuda", "mps")


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``None`` picks CUDA when present, else the CPU; a named device must exist on this machine."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = str(device)
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise GraphDocError(f"unknown device {name!r}; use cpu, cuda, cuda:N or mps") from None
    if resolved.type not in DEVICE_TYPES:
        raise GraphDocError(f"device {name!r} is not supported; use cpu, cuda, cuda:N or mps")
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise GraphDocError(f"device {name!r} requested but CUDA is not available")
        count = torch.cuda.device_count()
        if resolved.index is not None and resolved.index >= count:
            raise GraphDocError(f"device {name!r} requested but this machine has {count} CUDA device(s) "
                                f"(cuda:0 to cuda:{count - 1})")
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise GraphDocError(f"device {name!r} requested but MPS is not available on this machine")
    return resolved


@functools.lru_cache(maxsize=1)
def cpu_supports_bf16() -> bool:
    """Whether this CPU runs bfloat16 matrix products natively (AVX512-BF16 or AMX, through oneDNN)."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN
        return False


def autocast_dtype(device: torch.device, precision: str = "auto") -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device`` (``None``: full precision).

    On CUDA, ``auto`` is bf16 where supported, else fp16. On a CPU, ``auto`` and ``fp16`` mean full
    precision (CPU half-precision matrix products are slow), and ``bf16`` is honoured where the CPU has
    native bfloat16 (all-MiniLM-L6-v2 encodes ~1.7x as fast; vectors within a cosine of 1e-4).
    """
    if precision == "fp32":
        return None
    if device.type == "cpu":
        if precision == "fp16":
            _warn_once("precision fp16 asked for, but CPUs run half precision slowly: running in fp32 "
                       "(bf16 is honoured on CPUs with native bfloat16)")
        if precision != "bf16":
            return None
        if not cpu_supports_bf16():
            _warn_once("precision bf16 asked for, but this CPU has no native bfloat16 (AVX512-BF16 or "
                       "AMX): running in fp32")
            return None
        return torch.bfloat16
    if device.type != "cuda":
        return None
    if precision == "fp16":
        return torch.float16
    if precision == "bf16" or cuda_has_bf16(device):
        return torch.bfloat16
    return torch.float16


#: how :func:`arithmetic` names autocast_dtype's answers: the ``--precision`` value that asks for each
ARITHMETIC_NAMES = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def arithmetic(device: torch.device, precision: str = "auto") -> str:
    """What ``precision`` computes in on ``device``: ``fp32``, ``bf16`` or ``fp16`` (``bf16`` on a CPU without native
    bfloat16 is ``fp32``, as it runs). Recorded where work resumes (an index's corpora, embed's saved part), since
    vectors of two arithmetics differ (by about 1e-3) and must not be mixed in one run unawares."""
    return ARITHMETIC_NAMES[autocast_dtype(device, precision)]


def arithmetic_refusal(what: str, was: str, now: str, precision: str, otherwise: str) -> str:
    """One line refusing to go on with ``what``, started in arithmetic ``was``, where ``precision`` computes in
    ``now``; ``otherwise`` is the other way out (starting again)."""
    if precision == was:  # asked for, but this device does not compute in it
        how = f" (--precision {was} runs {now} on this device): go on where it computes in {was}"
    else:
        how = f": pass --precision {was} to go on"
    return f"{what} was started at {was}, and this run computes at {now}{how}, or {otherwise}"


def cuda_has_bf16(device: torch.device) -> bool:
    """Whether the GPU ``device`` computes in bfloat16 natively (compute capability 8.0 on: Ampere and later).
    ``torch.cuda.is_bf16_supported()`` also says yes for older GPUs that only emulate it (V100, T4: slower than
    fp16), and asks the current GPU rather than this one."""
    return torch.cuda.get_device_capability(device) >= (8, 0)


@functools.lru_cache(maxsize=None)
def _warn_once(message: str) -> None:
    logger.warning(message)


def autocast(device: torch.device, precision: str = "auto"):
    """A mixed-precision context for :func:`autocast_dtype`'s dtype; a no-op at full precision."""
    dtype = autocast_dtype(device, precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
