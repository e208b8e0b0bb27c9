"""Choosing the dense/sparse fusion weight alpha by k-fold cross-validation over queries."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphdoc.errors import GraphDocError
from graphdoc.retrieval.evaluation import Qrels, RunLike, evaluate_per_query, parse_measures
from graphdoc.retrieval.fusion import FusionConfig, fuse, fuse_runs
from graphdoc.retrieval.runs import Run, run_from_hits

DEFAULT_ALPHAS = tuple(round(i * 0.1, 1) for i in range(11))  # 0.0, 0.1, ..., 1.0
#: two mean scores closer than this are a tie (a mean of the same per-query values summed in another order
#: may differ in the last bits)
TIE_TOLERANCE = 1e-12


@dataclass
class FoldResult:
    """One fold: the alpha chosen on the other folds, its score there (train) and here (test)."""

    fold: int
    alpha: float
    train_score: float
    test_score: float
    query_ids: list[str]


@dataclass
class TuningResult:
    """Outcome of :func:`tune_alpha`.

    ``alpha`` is chosen on all queries (the value to store); ``mean_test_score`` is the honest
    estimate: the mean over queries of their held-out score, i.e. the score of ``run``, which fuses
    each query with the alpha chosen without it.
    """

    alpha: float
    measure: str
    normalization: str
    mean_test_score: float
    folds: list[FoldResult]
    scores_by_alpha: dict[float, float]
    run: Run = field(repr=False)

    @property
    def alphas_tied(self) -> bool:
        """True when every alpha scores the same on all queries: the measure does not tell them apart,
        and ``alpha`` is only the tie-break (see :func:`tune_alpha`)."""
        scores = list(self.scores_by_alpha.values())
        return max(scores) - min(scores) <= TIE_TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (without the fused run)."""
        return {
            "alpha": self.alpha,
            "measure": self.measure,
            "normalization": self.normalization,
            "mean_test_score": self.mean_test_score,
            "scores_by_alpha": {str(a): s for a, s in self.scores_by_alpha.items()},
            "alphas_tied": self.alphas_tied,
            "folds": [vars(f) for f in self.folds],
        }


def assign_folds(query_ids: Sequence[str], folds: int, seed: int = 0, *, name: str = "folds") -> list[list[str]]:
    """Split query ids into `folds` groups after a seeded shuffle (deterministic; ids sorted first). ``name``: what
    an error calls `folds` (a command its option, ``--folds``)."""
    qids = sorted(set(query_ids))
    if len(qids) < 2:
        raise GraphDocError(f"cross-validation needs at least 2 judged queries; got {len(qids)}")
    if folds < 2 or folds > len(qids):
        raise GraphDocError(f"{name} must be between 2 and the number of queries ({len(qids)}), got {folds}")
    order = np.random.default_rng(seed).permutation(len(qids))
    return [sorted(qids[i] for i in order[f::folds]) for f in range(folds)]


def best_alpha(alphas: Sequence[float], per_query: list[dict[str, float]], qids: Sequence[str],
          prefer: float) -> tuple[int, float]:
    """Index of the alpha with the highest mean over `qids`, and that mean.

    Of alphas whose means tie (within ``TIE_TOLERANCE``), the one closest to `prefer` wins; of those
    equally close, the first in `alphas`.
    """
    means = [float(np.mean([scores[q] for q in qids])) for scores in per_query]
    top = max(means)
    tied = [i for i, m in enumerate(means) if m >= top - TIE_TOLERANCE]
    best = min(tied, key=lambda i: (round(abs(alphas[i] - prefer), 9), i))
    return best, means[best]


def tune_alpha(
    dense_run: RunLike,
    sparse_run: RunLike,
    qrels: Qrels,
    *,
    folds: int = 5,
    alphas: Sequence[float] | None = None,
    normalization: str = "minmax",
    measure: str = "nDCG@10",
    seed: int = 0,
    prefer: float | None = None,
    k: int | None = None,
) -> TuningResult:
    """Cross-validate alpha of weighted fusion (``alpha`` weights the dense side).

    Only queries that were searched (in either run) and have qrels are used: a judged query that was
    not searched would count as 0 for every alpha and only lower the figures. For each fold the alpha
    maximising `measure` on the other folds is applied to the held-out fold.

    Alphas that score the same are told apart by `prefer` (e.g. the index's current alpha; default: the
    middle of the range of `alphas`, 0.5): the one closest to it wins, and of two equally close, the first
    in `alphas`. So where the measure cannot choose (``TuningResult.alphas_tied``) the result is `prefer`
    or its nearest alpha, not an extreme such as 0.0 (BM25 alone).

    Each fused ranking is cut to its top `k` (``None``: the whole union of the two runs' documents), as
    ``graphdoc search -k`` returns it: a measure deeper than what search keeps is not scored on more.
    """
    alphas = list(DEFAULT_ALPHAS if alphas is None else alphas)
    if not alphas:
        raise GraphDocError("alphas must hold at least one value")
    prefer = (min(alphas) + max(alphas)) / 2 if prefer is None else prefer
    name = str(parse_measures([measure])[0])
    # ids are compared as strings, as in evaluate
    dense_run, sparse_run = run_from_hits(dense_run), run_from_hits(sparse_run)
    qrels = {str(q): docs for q, docs in qrels.items()}
    qids = sorted(q for q, docs in qrels.items() if docs and (q in dense_run or q in sparse_run))
    if not qids:
        raise GraphDocError("no searched query has relevance judgements")
    qrels = {q: qrels[q] for q in qids}
    groups = assign_folds(qids, folds, seed)
    dense = {q: dense_run[q] for q in qids if q in dense_run}
    sparse = {q: sparse_run[q] for q in qids if q in sparse_run}
    per_query = []  # per_query[i][qid]: the measure for alphas[i]; one fused run held at a time
    for a in alphas:
        fused = fuse_runs(dense, sparse, FusionConfig(alpha=a, normalization=normalization), k)
        per_query.append({q: v[name] for q, v in evaluate_per_query(fused, qrels, [name]).items()})
    del fused
    fold_results, chosen = [], {}  # chosen[qid]: index of the alpha applied to that query
    for f, test in enumerate(groups):
        train = [q for g, group in enumerate(groups) if g != f for q in group]
        best, train_score = best_alpha(alphas, per_query, train, prefer)
        test_score = float(np.mean([per_query[best][q] for q in test]))
        fold_results.append(FoldResult(f, alphas[best], train_score, test_score, test))
        chosen.update(dict.fromkeys(test, best))
    best_all, _ = best_alpha(alphas, per_query, qids, prefer)
    return TuningResult(
        alpha=alphas[best_all],
        measure=name,
        normalization=normalization,
        mean_test_score=float(np.mean([per_query[chosen[q]][q] for q in qids])),
        folds=fold_results,
        scores_by_alpha={a: float(np.mean([pq[q] for q in qids])) for a, pq in zip(alphas, per_query)},
        run={q: fuse(dense.get(q, {}), sparse.get(q, {}), FusionConfig(alpha=alphas[chosen[q]],
                                                                        normalization=normalization), k)
             for q in qids if q in dense or q in sparse},
    )
