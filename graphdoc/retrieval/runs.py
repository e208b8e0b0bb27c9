"""Plain-data helpers for rankings and runs.

A *run* is ``dict[query_id, dict[doc_id, score]]``. Everywhere in graphdoc a ranking orders documents
by score, highest first, and breaks ties by doc id (ascending string order), so results are
deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphdoc.errors import GraphDocError

Run = dict[str, dict[str, float]]


def _rank_key(item: tuple[str, float]) -> tuple[float, str]:
    return (-item[1], item[0])


def ranked(scores: Mapping[str, float], k: int | None = None) -> list[tuple[str, float]]:
    """``(doc_id, score)`` pairs sorted by score desc, ties by doc id; the first `k` if given."""
    if k is None:
        return sorted(scores.items(), key=_rank_key)
    return heapq.nsmallest(max(k, 0), scores.items(), key=_rank_key)


def top_k(scores: Mapping[str, float], k: int | None = None) -> dict[str, float]:
    """The `k` best documents as a dict whose insertion order is the ranking."""
    return dict(ranked(scores, k))


def truncate_run(run: Mapping[str, Mapping[str, float]], k: int | None) -> Run:
    """Keep the top `k` documents of every query, each query's dict in rank order."""
    return {qid: top_k(docs, k) for qid, docs in run.items()}


def id_ranks(ids: Sequence[str]) -> np.ndarray:
    """Each id's rank among ``ids`` in sorted order (``[n]`` int64): the order ties take, by document id, whatever
    the order the documents are stored in."""
    ranks = np.empty(len(ids), dtype=np.int64)
    ranks[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
    return ranks


def top_k_array(scores: np.ndarray, k: int, tie_rank: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Indices and scores of the `k` best *non-zero* entries of a score vector (BM25's 0 is "no match").

    Order: score desc, then ``tie_rank[index]`` asc (e.g. the rank of each row's document id), else index asc.
    Entries with score 0 are left out (a negative score, from rank_bm25's
    idf floor, is a match, ranked below the positive ones); when fewer than `k` remain the row is padded with
    index -1 and score 0.0 (FAISS's convention for missing results).

    Shapes: scores [n] -> (indices int64 [min(k, n)], scores float32 [min(k, n)]).
    """
    k = max(0, min(int(k), scores.shape[0]))
    indices = np.full(k, -1, dtype=np.int64)
    values = np.zeros(k, dtype=np.float32)
    candidates = np.flatnonzero(scores != 0)
    if candidates.size > k > 0:
        # k-th largest value; keep everything >= it so that ties at the cut are broken as the order says
        kth = np.partition(scores[candidates], candidates.size - k)[candidates.size - k]
        candidates = candidates[scores[candidates] >= kth]
    order = np.lexsort((candidates if tie_rank is None else tie_rank[candidates], -scores[candidates]))[:k]
    chosen = candidates[order]
    indices[: chosen.size] = chosen
    values[: chosen.size] = scores[chosen]
    return indices, values


def hits_to_run(
    query_ids: Sequence[str],
    indices: np.ndarray,
    scores: np.ndarray,
    doc_ids: Sequence[str],
) -> Run:
    """Turn row-position arrays (as :meth:`BM25Index.search` and FAISS return them) into a run, naming rows by
    ``doc_ids``; -1 padding is dropped. For the hits of :meth:`Searcher.search` use :func:`run_from_hits`.

    Shapes: indices [q, k] int, scores [q, k] float; ``len(query_ids) == q``.
    """
    if len(query_ids) != indices.shape[0] or indices.shape != scores.shape:
        raise ValueError(
            f"shape mismatch: {len(query_ids)} query ids, indices {indices.shape}, scores {scores.shape}"
        )
    run: Run = {}
    for qid, row, row_scores in zip(query_ids, indices, scores):
        run[qid] = {doc_ids[int(i)]: float(s) for i, s in zip(row, row_scores) if i >= 0}
    return run


def run_from_hits(results: Mapping[Any, Sequence[Any] | Mapping[str, float]]) -> Run:
    """Turn :meth:`Searcher.search` results, ``{query id: [Hit, ...]}``, into a run ``{query id: {doc id: score}}``.

    A query may hold a ``{doc id: score}`` dict instead (as :meth:`Searcher.batch_search` gives); ids become str.
    """
    if not isinstance(results, Mapping):
        raise GraphDocError("results must map each query id to its hits ({query id: [Hit, ...]}); got "
                            f"{type(results).__name__}")
    return {str(qid): _doc_scores(qid, docs) for qid, docs in results.items()}


def _doc_scores(qid: Any, docs: Sequence[Any] | Mapping[str, float]) -> dict[str, Any]:
    if isinstance(docs, Mapping):
        return {str(doc): score for doc, score in docs.items()}
    try:
        return {str(hit.doc_id): hit.score for hit in docs}
    except (AttributeError, TypeError):
        raise GraphDocError(f"query {qid!r} of the run holds a {type(docs).__name__}: expected {{doc id: score}} "
                            "or a list of search() hits") from None
