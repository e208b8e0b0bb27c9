"""Dense scoring with the document node and the graph-contextualised passage nodes of one pass.

``score(q, d) = (1 - w) * sim(q, document node) + w * max_p sim(q, passage node p)`` with
``w = passage_weight``; ``w = 0`` is the document vector alone. Candidates come from FAISS over
document vectors and over passage vectors; every candidate is then scored exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphdoc.errors import GraphDocError
from graphdoc.fileio import reading
from graphdoc.retrieval.dense import DenseIndex, prepare_vectors


PASSAGE_DEPTH_FACTOR = 4


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
        with reading(folder / "dense.faiss"):
            self.doc_index = DenseIndex.load(folder / "dense.faiss", metric, factory, device=device)
        self.doc_vectors = _load_array(folder / "doc_vectors.npy")
        self.has_passages = (folder / "passage_vectors.npy").is_file()
        if self.has_passages:
            with reading(folder / "passages.faiss"):
                self.passage_index = DenseIndex.load(folder / "passages.faiss", metric, factory, device=device)
            self.passage_vectors = _load_array(folder / "passage_vectors.npy")
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
        sizes = [("doc_vectors.npy", len(self.doc_vectors)), ("dense.faiss", self.doc_index.size)]
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
            for name, size in (("passage_vectors.npy", len(self.passage_vectors)),
                               ("passages.faiss", self.passage_index.size)):
                if size != passages:
                    return f"{name} holds {size} passages, not {passages} (passage_ptr.npy)"
        return None

    def candidates(self, queries: np.ndarray, depth: int) -> list[np.ndarray]:
        """Candidate document rows per query: FAISS top ``depth`` documents and passages' documents."""
        _, rows = self.doc_index.search(queries, depth)
        found = [r[r >= 0] for r in rows]
        if self.has_passages and self.settings.passage_weight > 0:
            # several passages of one document can crowd the top: look deeper to reach ``depth`` documents
            _, p_rows = self.passage_index.search(queries, depth * PASSAGE_DEPTH_FACTOR)
            for i, pr in enumerate(p_rows):
                docs = np.searchsorted(self.passage_ptr, pr[pr >= 0], side="right") - 1
                found[i] = np.unique(np.concatenate([found[i], docs]))
        return found

    def score(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Exact dense scores of one ``[d]`` query (already prepared) against document ``rows``."""
        rows = np.asarray(rows, dtype=np.int64)
        doc_scores = np.asarray(self.doc_vectors[rows] @ query, dtype=np.float64)
        w = self.settings.passage_weight
        if w == 0 or len(rows) == 0:
            return doc_scores
        return (1 - w) * doc_scores + w * self.max_passage_scores(query, rows)

    def max_passage_scores(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        starts, ends = self.passage_ptr[rows], self.passage_ptr[rows + 1]
        lengths = ends - starts
        flat = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)])
        scores = np.asarray(self.passage_vectors[flat] @ query, dtype=np.float64)
        return np.maximum.reduceat(scores, np.concatenate([[0], np.cumsum(lengths)[:-1]]))

    def passage_scores(self, query: np.ndarray, row: int) -> np.ndarray:
        """Scores of every passage of document ``row`` (empty if the index kept no passages)."""
        if not self.has_passages:
            return np.zeros(0)
        return np.asarray(self.passage_vectors[self.passage_ptr[row]:self.passage_ptr[row + 1]] @ query)

    def search(self, queries: np.ndarray, depth: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query, ``(rows, scores)`` of its candidates, best first, at most ``depth``."""
        prepared = prepare_vectors(queries, self.metric)
        results = []
        for query, rows in zip(prepared, self.candidates(prepared, depth)):
            scores = self.score(query, rows)
            order = np.lexsort((rows, -scores))[:depth]
            results.append((rows[order], scores[order]))
        return results


def _load_array(path: Path, mmap: bool = True) -> np.ndarray:
    with reading(path):
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        if array.ndim == 0:
            raise ValueError("not an array")
    return array
