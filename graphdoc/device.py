"""Device selection and mixed precision."""

from __future__ import annotations

import contextlib

import torch

from graphdoc.errors import GraphDocError


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``None`` picks CUDA when present, else the CPU; a named device must exist."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise GraphDocError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise GraphDocError(f"device {device!r} requested but CUDA is not available")
    return resolved


def autocast_dtype(device: torch.device, precision: str = "auto") -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device`` (``None``: full precision)."""
    if precision == "fp32" or device.type != "cuda":
        return None
    if precision == "fp16":
        return torch.float16
    if precision == "bf16" or torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float16


def autocast(device: torch.device, precision: str = "auto"):
    """A mixed-precision context on CUDA (bf16 where supported), a no-op elsewhere."""
    dtype = autocast_dtype(device, precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
