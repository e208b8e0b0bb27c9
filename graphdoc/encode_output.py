"""What ``encode`` returns of the document vectors it computed: the options sentence-transformers' ``encode`` has
(``truncate_dim``, ``normalize_embeddings``, ``precision``, ``prompt``), checked before anything is encoded, and applied
in its order: truncated, then normalised, then quantised (:mod:`graphdoc.quantization`)."""

from __future__ import annotations

import numbers
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from graphdoc.errors import ArgumentTypeError, GraphDocError
from graphdoc.quantization import check_calibration, check_output_precision, quantize_embeddings


def check_encode_options(model: nn.Module, prompt: Any, precision: Any, truncate_dim: Any, calibration: Any) -> None:
    """Refuse, in one line and before anything is encoded, an ``encode`` option that is not valid for ``model``."""
    if prompt is not None:
        if not isinstance(prompt, str):
            raise ArgumentTypeError(f"prompt must be a str or None; got a {type(prompt).__name__}")
        model.passage_encoder.prompt_tokens(prompt)  # as the configured prompts: it must leave room for the text
    check_output_precision(precision)
    check_truncate_dim(truncate_dim, model.dimension)
    if calibration is not None and precision.endswith("int8"):
        check_calibration(calibration, truncate_dim or model.dimension)


def check_truncate_dim(truncate_dim: Any, dimension: int, name: str = "truncate_dim") -> None:
    """Matryoshka truncation keeps the first ``truncate_dim`` of the model's ``dimension`` dimensions: ``None`` (all)
    or 1 to ``dimension``, else one error line."""
    if truncate_dim is None:
        return
    if isinstance(truncate_dim, bool) or not isinstance(truncate_dim, numbers.Integral):
        raise ArgumentTypeError(f"{name} must be an integer or None; got {truncate_dim!r}")
    if not 1 <= truncate_dim <= dimension:
        raise GraphDocError(f"{name} must be from 1 to the model's dimension, {dimension}; got {truncate_dim}")


def finish_embeddings(chunks: list[torch.Tensor], dim: int, device: torch.device, single: bool, normalize: bool,
                      to_numpy: bool, truncate_dim: int | None = None, precision: str = "float32", calibration=None):
    """The rows of ``chunks`` as encode returns them: truncated, then normalised, then quantised (the order of
    sentence-transformers' ``encode``)."""
    out = torch.cat(chunks) if chunks else torch.empty((0, dim), device=device)
    out = out.float()[:, :truncate_dim].contiguous()  # [n, truncate_dim or dim]
    if normalize:
        out = F.normalize(out, dim=-1)
    if precision != "float32":  # quantised in numpy, all rows together (int8 ranges are the rows'), as ST does
        quantized = quantize_embeddings(out.cpu().numpy(), precision, calibration)
        out = quantized if to_numpy else torch.from_numpy(quantized)
        return out[0] if single else out
    if single:
        out = out[0]
    return out.cpu().numpy() if to_numpy else out
