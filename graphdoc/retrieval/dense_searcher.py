"""Dense scoring with the document node and the graph-contextualised passage nodes of one pass.

``score(q, d) = (1 - w) * sim(q, document node) + w * max_p sim(q, passage node p)`` with
``w = passage_weight``; ``w = 0`` is the document vector alone. Candidates come from FAISS over
document vectors and over passage vectors; every candidate is then scored exactly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphdoc.errors import GraphDocError
from graphdoc.fileio import reading
from graphdoc.retrieval.dense import DenseIndex, RowSelection, prepare_vectors


PASSAGE_DEPTH_FACTOR = 4
#: the share of all passages from which a search scores a query's candidates from its scores of all passages
FULL_PRODUCT_SHARE = 0.25
#: the most memory those scores take for a block of queries, and the most queries in a block
FULL_PRODUCT_BYTES = 64 * 2**20
QUERY_BLOCK = 256
#: a filter that keeps at most this many documents makes every one of them a candidate, scored exactly, without FAISS
EXACT_ROWS = 2048


@dataclass
class DenseSettings:
    """``passage_weight``: weight of the best passage node against the document node (see module doc).

    The default 1.0 scores by the best graph-contextualised passage node: with the untrained default
    model it was the best of 0.8/0.9/1.0 x alpha 0.5/0.6/0.7 for hybrid search over both SciFact and
    QMSum (docs/retrieval_benchmark.md). A trained model's index can store its own weight.
    """

    passage_weight: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.passage_weight <= 1.0:
            raise GraphDocError(f"passage_weight must be between 0 and 1; got {self.passage_weight}")


class DenseSearcher:
    """Searches the dense files of a finalised index folder (``final/``)."""

    def __init__(self, folder: Path, metric: str, factory: str, settings: DenseSettings | None = None,
                 device=None) -> None:
        """``device``: where the FAISS searches run (see :class:`DenseIndex`)."""
        self.metric = metric
        self.settings = settings or DenseSettings()
        self.doc_index, self.doc_vectors, self._doc_source = _load_dense(folder, "dense.faiss", "doc_vectors.npy",
                                                                         metric, factory, device)
        self.has_passages = (folder / "passage_ptr.npy").is_file()
        if self.has_passages:
            self.passage_index, self.passage_vectors, self._passage_source = _load_dense(
                folder, "passages.faiss", "passage_vectors.npy", metric, factory, device)
            self.passage_ptr = _load_array(folder / "passage_ptr.npy", mmap=False)
        elif self.settings.passage_weight > 0:
            self.settings = DenseSettings(0.0)  # the index kept no passage vectors

    @property
    def nprobe(self) -> int:
        """The IVF lists a document search visits (0: not an IVF index); see :attr:`DenseIndex.nprobe`."""
        return self.doc_index.nprobe

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        self.doc_index.nprobe = value
        if self.has_passages and self.passage_index.nlist:  # (a small index's passages are in a Flat index)
            self.passage_index.nprobe = value

    def size_problem(self, documents: int) -> str | None:
        """Why the dense files disagree with each other or with ``documents``, or ``None`` when they agree."""
        sizes = [(self._doc_source, len(self.doc_vectors)), ("dense.faiss", self.doc_index.size)]
        if self.has_passages:
            sizes.append(("passage_ptr.npy", len(self.passage_ptr) - 1))
        for name, size in sizes:
            if size != documents:
                return f"{name} holds {size} documents, not {documents}"
        if self.has_passages:
            ptr = self.passage_ptr
            if len(ptr) and (ptr[0] != 0 or np.any(np.diff(ptr) < 0)):
                return "passage_ptr.npy does not start at 0 and rise (its passage offsets are broken)"
            passages = int(ptr[-1]) if len(ptr) else 0
            for name, size in ((self._passage_source, len(self.passage_vectors)),
                               ("passages.faiss", self.passage_index.size)):
                if size != passages:
                    return f"{name} holds {size} passages, not {passages} (passage_ptr.npy)"
        return None

    def candidates(self, queries: np.ndarray, depth: int, allowed: RowSelection | None = None) -> list[np.ndarray]:
        """Candidate document rows per query: FAISS top ``depth`` documents and passages' documents (with any
        rows tied with the last of each); only rows of ``allowed`` when given (every one of them when they are
        few: see :data:`EXACT_ROWS`)."""
        if allowed is not None and allowed.count <= EXACT_ROWS:
            return [allowed.rows] * len(queries)
        found = self.doc_index.search_ties(queries, depth, allowed)  # a tie at the cut whole: ties rank by id
        for i in range(len(found) if allowed is not None else 0):
            if len(found[i]) < min(depth, allowed.count):  # an HNSW graph's walk reached too few allowed rows
                found[i] = np.union1d(found[i], self._nearest_allowed(queries[i], depth, allowed))
        if self.has_passages and self.settings.passage_weight > 0:
            # several passages of one document can crowd the top: look deeper to reach ``depth`` documents
            passages = None if allowed is None else allowed.of_passages(self.passage_ptr)
            p_rows = self.passage_index.search_ties(queries, depth * PASSAGE_DEPTH_FACTOR, passages)
            for i, pr in enumerate(p_rows):
                docs = np.searchsorted(self.passage_ptr, pr, side="right") - 1
                found[i] = np.unique(np.concatenate([found[i], docs]))
        return found

    def _nearest_allowed(self, query: np.ndarray, depth: int, allowed: RowSelection) -> np.ndarray:
        """The ``depth`` allowed documents whose vectors score best for one prepared query, by brute force
        (:data:`QUERY_BLOCK` thousand rows at a time)."""
        step = QUERY_BLOCK * 1024
        scores = np.concatenate([self.doc_vectors[allowed.rows[start:start + step]] @ query
                                 for start in range(0, allowed.count, step)])
        best = np.argpartition(-scores, depth - 1)[:depth] if depth < len(scores) else np.arange(len(scores))
        return allowed.rows[best]

    def score(self, query: np.ndarray, rows: np.ndarray, all_passages: np.ndarray | None = None) -> np.ndarray:
        """Exact dense scores of one ``[d]`` query (already prepared) against document ``rows``; ``all_passages``:
        the query's scores of every passage, when already computed."""
        rows = np.asarray(rows, dtype=np.int64)
        doc_scores = np.asarray(self.doc_vectors[rows] @ query, dtype=np.float64)
        w = self.settings.passage_weight
        if w == 0 or len(rows) == 0:
            return doc_scores
        return (1 - w) * doc_scores + w * self.max_passage_scores(query, rows, all_passages)

    def max_passage_scores(self, query: np.ndarray, rows: np.ndarray,
                           all_passages: np.ndarray | None = None) -> np.ndarray:
        """The best passage score of each document of ``rows`` (each has one passage or more), from the query's
        scores of every passage when given (``all_passages``, ``[passages]``), else from its candidates'."""
        flat, firsts = self._passages_of(rows)
        if all_passages is not None:
            scores = np.asarray(all_passages[flat], dtype=np.float64)
        else:
            scores = np.asarray(self.passage_vectors[flat] @ query, dtype=np.float64)
        return np.maximum.reduceat(scores, firsts)

    def _passages_of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The passage rows of documents ``rows``, in one flat list, and where each document's start in it."""
        starts = self.passage_ptr[rows]
        lengths = self.passage_ptr[rows + 1] - starts
        firsts = np.cumsum(lengths) - lengths
        return np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - firsts, lengths), firsts

    def _needs_all_passages(self, candidates: list[np.ndarray]) -> list[bool]:
        """Which queries are scored from their scores of every passage: those whose candidates hold
        :data:`FULL_PRODUCT_SHARE` of all passages or more (long documents: a QMSum query's candidates hold most
        of them), where one matrix product over such queries costs less than gathering their candidates' vectors
        query by query."""
        if not self.has_passages or self.settings.passage_weight == 0 or not len(self.passage_vectors):
            return [False] * len(candidates)
        ptr, share = self.passage_ptr, FULL_PRODUCT_SHARE * len(self.passage_vectors)
        return [int((ptr[rows + 1] - ptr[rows]).sum()) >= share for rows in candidates]

    @property
    def full_block(self) -> int:
        """How many queries' scores of every passage fit in :data:`FULL_PRODUCT_BYTES` (at least one)."""
        return max(1, FULL_PRODUCT_BYTES // max(4 * len(self.passage_vectors), 1)) if self.has_passages else 1

    def search_blocks(self, queries: np.ndarray, depth: int, tie_rank: np.ndarray | None = None,
                      allowed: RowSelection | None = None
                      ) -> Iterator[list[tuple[np.ndarray, np.ndarray, Callable[[np.ndarray], np.ndarray]]]]:
        """:meth:`search` a block of queries at a time: per query ``(rows, scores, score_more)``, where
        ``score_more(rows)`` scores other documents for that query as its candidates were (from its scores of all
        passages while the block is current). FAISS takes :data:`QUERY_BLOCK` queries at a time; a block is cut
        further where its queries' scores of every passage would pass :data:`FULL_PRODUCT_BYTES`."""
        prepared = prepare_vectors(queries, self.metric)
        most = self.full_block
        for start in range(0, len(prepared), QUERY_BLOCK):
            block = prepared[start:start + QUERY_BLOCK]
            candidates = self.candidates(block, depth, allowed)
            needs = self._needs_all_passages(candidates)
            cuts, held = [0], 0  # sub-blocks of at most `most` queries that need all their passages' scores
            for i in np.flatnonzero(needs).tolist():
                if held == most:
                    cuts.append(i)
                    held = 0
                held += 1
            for first, last in zip(cuts, cuts[1:] + [len(block)]):
                full = [i for i in range(first, last) if needs[i]]
                product = block[full] @ self.passage_vectors.T if full else None  # [queries, passages]
                all_passages = {i: product[j] for j, i in enumerate(full)}
                results = []
                for i in range(first, last):
                    query, rows = block[i], candidates[i]
                    scores = self.score(query, rows, all_passages.get(i))
                    order = np.lexsort((rows if tie_rank is None else tie_rank[rows], -scores))[:depth]
                    more = functools.partial(self.score, query, all_passages=all_passages.get(i))
                    results.append((rows[order], scores[order], more))
                yield results

    def passage_scores(self, query: np.ndarray, row: int) -> np.ndarray:
        """Scores of every passage of document ``row`` (empty if the index kept no passages)."""
        if not self.has_passages:
            return np.zeros(0)
        return np.asarray(self.passage_vectors[self.passage_ptr[row]:self.passage_ptr[row + 1]] @ query)

    def search(self, queries: np.ndarray, depth: int, tie_rank: np.ndarray | None = None,
               allowed: RowSelection | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query, ``(rows, scores)`` of its candidates, best first, at most ``depth``; equal scores in the
        order of ``tie_rank[row]`` (the rank of each row's document id), else by row; only rows of ``allowed``
        when given (at least one)."""
        blocks = self.search_blocks(queries, depth, tie_rank, allowed)
        return [(rows, scores) for block in blocks for rows, scores, _ in block]


def _load_dense(folder: Path, index_name: str, vectors_name: str, metric: str, factory: str,
                device) -> tuple[DenseIndex, np.ndarray, str]:
    """A FAISS index, its vectors and the name of the file they were read from: the ``.npy`` file beside the index
    (memory-mapped, without memmap's overhead), or, where there is none, those the index holds in its memory (an
    exact index: finalize writes no copy of them since 2026-11)."""
    with reading(folder / index_name):
        index = DenseIndex.load(folder / index_name, metric, factory, device=device)
    held = None if (folder / vectors_name).is_file() else index.stored_vectors()
    if held is None:
        return index, np.asarray(_load_array(folder / vectors_name)), vectors_name
    return index, held, index_name


def _load_array(path: Path, mmap: bool = True) -> np.ndarray:
    with reading(path):
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        if array.ndim == 0:
            raise ValueError("not an array")
    return array
