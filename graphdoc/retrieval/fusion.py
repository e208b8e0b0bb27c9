"""Score fusion of a dense and a sparse ranking: pure functions over plain dicts.

Contract for :func:`weighted_fusion`: each retriever's scores are normalised over the documents
*it* scored; a document missing from one side gets that side's minimum normalised score (0.0 after
"minmax"; 0.0 too when that side is empty). The caller should therefore, where it can, score the
union of both candidate lists with both retrievers (e.g. ``BM25Index.get_scores``) so nothing is
missing. Fused dicts are returned in rank order (score desc, ties by doc id).
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphdoc.errors import GraphDocError
from graphdoc.retrieval._config import check_choice, config_from_dict
from graphdoc.retrieval.runs import Run, ranked, top_k


def _minmax(x: np.ndarray) -> np.ndarray:
    span = x.max() - x.min()
    return (x - x.min()) / span if span > 0 else np.zeros_like(x)


def _zscore(x: np.ndarray) -> np.ndarray:
    std = x.std()  # population std (ddof=0)
    return (x - x.mean()) / std if std > 0 else np.zeros_like(x)


NORMALIZERS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "minmax": _minmax,
    "zscore": _zscore,
    "none": lambda x: x,
}


def normalize(scores: np.ndarray, method: str = "minmax") -> np.ndarray:
    """Normalise a score vector: "minmax" to [0, 1], "zscore" to mean 0 / std 1, or "none".

    A constant vector gives zeros for "minmax" and "zscore". Shape: [n] -> [n] float64.
    """
    check_choice("normalization", method, NORMALIZERS)
    x = np.asarray(scores, dtype=np.float64)
    if x.size == 0:
        return x
    if not np.all(np.isfinite(x)):
        raise GraphDocError(f"cannot normalise non-finite scores: {x[~np.isfinite(x)][:3].tolist()}")
    return NORMALIZERS[method](x)


def _check_number(name: str, value: Any, low: float, high: float | None = None) -> None:
    """Refuse a setting that is not a real number (``"0.5"``, ``True``, NaN) or lies outside ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise GraphDocError(f"{name} must be a number; got {value!r}")
    if high is None and not value >= low:
        raise GraphDocError(f"{name} must be >= {low}, got {value}")
    if high is not None and not low <= value <= high:
        raise GraphDocError(f"{name} must be between {low} and {high}, got {value}")


def _normalized_dict(scores: Mapping[str, float], method: str) -> dict[str, float]:
    keys = list(scores)
    values = normalize(np.fromiter((scores[k] for k in keys), dtype=np.float64, count=len(keys)), method)
    return dict(zip(keys, values.tolist()))


def weighted_fusion(
    dense: Mapping[str, float],
    sparse: Mapping[str, float],
    alpha: float,
    normalization: str = "minmax",
) -> dict[str, float]:
    """``alpha * norm(dense) + (1 - alpha) * norm(sparse)`` over the union of both lists.

    A document missing from one list gets that list's minimum normalised score (see module doc).
    """
    _check_number("alpha", alpha, 0, 1)
    d = _normalized_dict(dense, normalization)
    s = _normalized_dict(sparse, normalization)
    d_fill = min(d.values(), default=0.0)
    s_fill = min(s.values(), default=0.0)
    fused = {
        doc: alpha * d.get(doc, d_fill) + (1.0 - alpha) * s.get(doc, s_fill) for doc in d.keys() | s.keys()
    }
    return top_k(fused)


def reciprocal_rank_fusion(runs: Sequence[Mapping[str, float]], k: float = 60) -> dict[str, float]:
    """Sum over rankings of ``1 / (k + rank)``, rank starting at 1 (ties in a ranking by doc id)."""
    _check_number("RRF k", k, 0)
    fused: dict[str, float] = {}
    for scores in runs:
        for rank, (doc, _) in enumerate(ranked(scores), start=1):
            fused[doc] = fused.get(doc, 0.0) + 1.0 / (k + rank)
    return top_k(fused)


@dataclass
class FusionConfig:
    """How a hybrid searcher combines dense and sparse scores.

    Args:
        method: "weighted" (alpha-weighted sum of normalised scores) or "rrf".
        alpha: weight of the dense side for "weighted" (0 = sparse only, 1 = dense only).
        normalization: "minmax", "zscore" or "none" for "weighted".
        rrf_k: the k of reciprocal rank fusion.
    """

    method: str = "weighted"
    alpha: float = 0.5
    normalization: str = "minmax"
    rrf_k: float = 60

    def __post_init__(self) -> None:
        check_choice("fusion method", self.method, FUSERS)
        check_choice("normalization", self.normalization, NORMALIZERS)
        _check_number("alpha", self.alpha, 0, 1)
        _check_number("rrf_k", self.rrf_k, 0)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FusionConfig:
        return config_from_dict(cls, data)


FUSERS: dict[str, Callable[[Mapping[str, float], Mapping[str, float], FusionConfig], dict[str, float]]] = {
    "weighted": lambda d, s, c: weighted_fusion(d, s, c.alpha, c.normalization),
    "rrf": lambda d, s, c: reciprocal_rank_fusion([d, matched(s)], c.rrf_k),
}


def matched(sparse: Mapping[str, float]) -> dict[str, float]:
    """The documents a sparse retriever (BM25) matched: a score of exactly 0 shares no term with the query, so it
    is no rank of that retriever (ranked among the other zeros, by doc id, it would be a rank by name). A negative
    score (rank_bm25's idf floor in a small corpus) is a match. :class:`BM25Index` scores a document without a
    query term 0 with every method, bm25l and bm25+ included."""
    return {doc: score for doc, score in sparse.items() if score != 0}


#: The hybrid setting an index starts with (tuned on SciFact test and QMSum val with the default
#: model, see docs/retrieval_benchmark.md); ``graphdoc tune-fusion --save`` replaces it per index.
HYBRID_DEFAULT = FusionConfig(method="weighted", alpha=0.6, normalization="zscore")


def fuse(
    dense: Mapping[str, float],
    sparse: Mapping[str, float],
    config: FusionConfig | None = None,
    k: int | None = None,
) -> dict[str, float]:
    """Fuse one query's dense and sparse scores as `config` says; the top `k` in rank order."""
    config = config or FusionConfig()
    fused = FUSERS[config.method](dense, sparse, config)  # already in rank order
    return fused if k is None else dict(list(fused.items())[: max(k, 0)])


def fuse_arrays(dense: np.ndarray, sparse: np.ndarray, config: FusionConfig, tie_rank: np.ndarray,
                k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fuse` on one query's candidates given as aligned arrays (both retrievers scored every candidate;
    ``tie_rank``: the rank of each candidate's document id): ``(positions, fused scores)`` of the top ``k``, best
    first, ties by ``tie_rank``. The same scores and order as :func:`fuse` over dicts keyed by document id, without
    building them. Shapes: ``[n]`` each -> ``[min(k, n)]``."""
    dense = np.asarray(dense, dtype=np.float64)
    sparse = np.asarray(sparse, dtype=np.float64)
    if config.method == "weighted":
        fused = (config.alpha * normalize(dense, config.normalization)
                 + (1.0 - config.alpha) * normalize(sparse, config.normalization))
    else:  # rrf: ranks from 1, ties by document id; the sparse side ranks the documents it matched
        fused = np.zeros(len(dense))
        fused[np.lexsort((tie_rank, -dense))] = 1.0 / (config.rrf_k + np.arange(1, len(dense) + 1))
        matched_at = np.flatnonzero(sparse != 0)
        ranks = np.empty(len(matched_at))
        ranks[np.lexsort((tie_rank[matched_at], -sparse[matched_at]))] = np.arange(1, len(matched_at) + 1)
        fused[matched_at] += 1.0 / (config.rrf_k + ranks)
    order = np.lexsort((tie_rank, -fused))
    order = order if k is None else order[:max(k, 0)]
    return order, fused[order]


def fuse_runs(
    dense_run: Mapping[str, Mapping[str, float]],
    sparse_run: Mapping[str, Mapping[str, float]],
    config: FusionConfig | None = None,
    k: int | None = None,
) -> Run:
    """:func:`fuse` for every query of either run (a query missing from one run fuses with {})."""
    qids = list(dense_run) + [q for q in sparse_run if q not in dense_run]
    return {q: fuse(dense_run.get(q, {}), sparse_run.get(q, {}), config, k) for q in qids}
