"""Quantised embeddings, as sentence-transformers' ``quantize_embeddings`` makes them (``encode(precision=...)``).

Not to be confused with the passage encoder's *arithmetic* (``passage_encoder.precision``, ``--precision``:
``auto``/``fp32``/``bf16``/``fp16``), which decides how the vectors are computed; these values decide how float32
vectors are stored once computed.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import numpy as np
import torch

from graphdoc.config import PRECISIONS as ARITHMETICS
from graphdoc.errors import ArgumentTypeError, GraphDocError

logger = logging.getLogger(__name__)

OutputPrecision = Literal["float32", "int8", "uint8", "binary", "ubinary"]
#: ``encode``'s output precisions, sentence-transformers' names
OUTPUT_PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
#: names of the encoder's arithmetic (and its dtypes), which ``encode``'s ``precision`` is not
_ARITHMETIC_NAMES = (*ARITHMETICS, "float16", "bfloat16", "half")
#: below this many embeddings, int8 / uint8 ranges computed from the embeddings themselves are unsteady
_FEW = 100


def check_output_precision(precision: Any) -> str:
    """``precision`` if it is one of :data:`OUTPUT_PRECISIONS`; else one error line, which for an arithmetic
    (``"bf16"``) says where that setting lives."""
    if precision in OUTPUT_PRECISIONS:
        return precision
    if precision in _ARITHMETIC_NAMES:
        raise GraphDocError(
            f"precision={precision!r} is an arithmetic: encode's precision quantises the returned embeddings (one of "
            f"{', '.join(OUTPUT_PRECISIONS)}); the arithmetic the encoder computes in is the model config's "
            "passage_encoder.precision (auto, fp32, bf16, fp16; --precision on the command line)")
    raise GraphDocError(f"precision must be one of {', '.join(OUTPUT_PRECISIONS)}; got {precision!r}")


def quantize_embeddings(embeddings: np.ndarray, precision: str,
                        calibration_embeddings: np.ndarray | torch.Tensor | None = None) -> np.ndarray:
    """``[n, d]`` float embeddings in ``precision``, exactly as ``sentence_transformers.quantization``'s function
    of that name gives them.

    ``int8`` / ``uint8``: each dimension's ``[min, max]`` (of ``calibration_embeddings`` when given, else of the
    embeddings themselves) cut into 256 buckets, ``int8`` shifted by -128. ``binary`` / ``ubinary``: the sign bits
    (``> 0``) packed 8 to a byte (``numpy.packbits``: ``[n, ceil(d / 8)]``), ``binary`` shifted by -128 as int8.

    Shapes: ``embeddings: [n, d]``; ``calibration_embeddings: [m, d]``.
    """
    check_output_precision(precision)
    if precision == "float32":
        return embeddings.astype(np.float32)
    if precision.endswith("binary"):
        packed = np.packbits(embeddings > 0, axis=-1)  # [n, ceil(d / 8)] uint8
        return (packed - 128).astype(np.int8) if precision == "binary" else packed
    if calibration_embeddings is None and not len(embeddings):  # nothing to take ranges from, nor to quantise
        return np.zeros(embeddings.shape, np.uint8 if precision == "uint8" else np.int8)
    ranges = _ranges(embeddings, precision, calibration_embeddings).astype(np.float32, copy=False)
    starts = ranges[0, :]
    steps = (ranges[1, :] - starts) / 255
    steps = np.where(steps == 0, 1, steps)  # a constant dimension: all in bucket 0
    buckets = np.clip(np.floor((embeddings - starts) / steps), 0, 255)
    return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)


def _ranges(embeddings: np.ndarray, precision: str, calibration: np.ndarray | torch.Tensor | None) -> np.ndarray:
    """``[2, d]``: each dimension's minimum and maximum, of ``calibration`` or else of ``embeddings``."""
    if calibration is None:
        if len(embeddings) == 1:
            raise GraphDocError(f"{precision} quantisation of a single embedding needs calibration_embeddings (float "
                                "embeddings of the same kind, e.g. a sample of the corpus's) to give each dimension "
                                "its range")
        if len(embeddings) < _FEW:
            logger.warning("%s quantisation: each dimension's range comes from %d embeddings; pass "
                           "calibration_embeddings (more of them) for steadier buckets", precision, len(embeddings))
        calibration = embeddings
    else:
        calibration = check_calibration(calibration, embeddings.shape[-1])
    return np.vstack((np.min(calibration, axis=0), np.max(calibration, axis=0)))


def check_calibration(calibration: Any, dimension: int) -> np.ndarray:
    """``calibration`` as a ``[m, dimension]`` float array, else one error line."""
    if isinstance(calibration, torch.Tensor):
        calibration = calibration.detach().cpu().numpy()
    if not isinstance(calibration, np.ndarray) or not np.issubdtype(calibration.dtype, np.floating):
        got = f"an array of {calibration.dtype}" if isinstance(calibration, np.ndarray) else \
            f"a {type(calibration).__name__}"
        raise ArgumentTypeError(f"calibration_embeddings must be float embeddings (an array or tensor as encode "
                                f"returns them in float32); got {got}")
    if calibration.ndim != 2 or not len(calibration) or calibration.shape[1] != dimension:
        raise GraphDocError(f"calibration_embeddings must be [m, {dimension}] (m >= 1, as many dimensions as the "
                            f"embeddings, after truncate_dim); got {list(calibration.shape)}")
    return calibration
