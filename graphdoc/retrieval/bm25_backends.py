"""BM25 scoring backends: ``bm25s`` (default, sparse matrices, memory-mappable) and ``rank_bm25``.

A backend is built from pre-tokenised documents and scores one tokenised query against every
document. Both store plain files only (``.npy``, JSON, JSON lines); nothing is pickled.
"""

from __future__ import annotations

import importlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from graphdoc.errors import GraphDocError, InputError

if TYPE_CHECKING:
    from graphdoc.retrieval.bm25 import BM25Config, TermIds

logger = logging.getLogger(__name__)

TOKENS_FILE = "corpus.tokens.jsonl"


class Backend(Protocol):
    num_docs: int

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        """Every document's score; exactly 0 for a document that holds none of the query terms."""
        ...

    def save(self, path: Path) -> None: ...


def import_backend_module(module: str, extra: str):
    """Import an optional module, or raise a GraphDocError saying what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise GraphDocError(f"the BM25 backend needs {module}; install it with: pip install {extra}") from err


class BM25sBackend:
    """bm25s: scores are precomputed per (term, document) in a CSC matrix; a query sums columns."""

    def __init__(self, retriever) -> None:
        self.retriever = retriever
        self.num_docs = int(retriever.scores["num_docs"])
        self.path: Path | None = None  # the folder it was loaded from

    @classmethod
    def build(cls, corpus: TermIds, config: BM25Config) -> BM25sBackend:
        bm25s = import_backend_module("bm25s", "bm25s")
        retriever = bm25s.BM25(
            k1=config.k1, b=config.b, delta=config.delta, method=config.method, idf_method=config.idf_method
        )
        # bm25s reads an object with ids and vocab as (documents' term ids, term -> id); create_empty_token=False:
        # it would add "" to the vocabulary without a matrix column
        tokenized = bm25s.tokenization.Tokenized(ids=corpus, vocab=corpus.vocab)
        with np.errstate(divide="ignore", invalid="ignore"):  # (documents without terms: a mean length of 0)
            retriever.index(tokenized, create_empty_token=False, show_progress=False)
        return cls(retriever)

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        try:
            return self._scores(query_tokens)
        except (IndexError, ValueError) as exc:  # a term's column past the matrix, a row past the documents
            raise InputError(f"BM25 index {self.path} is damaged: its score matrix does not fit its vocabulary or "
                             f"its documents ({(str(exc).strip().splitlines() or [type(exc).__name__])[0]}); "
                             "rebuild the index") from None

    def _scores(self, query_tokens: list[str]) -> np.ndarray:
        if not self.retriever.vocab_dict:  # no document held a word to index: none holds a query's
            return np.zeros(self.num_docs, dtype=np.float32)
        ids = np.asarray(self.retriever.get_tokens_ids(query_tokens), dtype=np.int64)  # unknown terms are dropped
        scores = self.retriever.get_scores_from_ids(ids)
        if self.retriever.nonoccurrence_array is not None:
            # bm25l and bm25+ give a document without a query term a floor score above 0 (the same for all of
            # them): 0 says "no match" for every method, so that search and RRF leave such documents out
            scores[~self._holds_a_term(ids)] = 0
        return scores

    def _holds_a_term(self, ids: np.ndarray) -> np.ndarray:
        """Which documents hold one of the terms `ids`: the rows of their columns in the score matrix."""
        indptr, indices = self.retriever.scores["indptr"], self.retriever.scores["indices"]
        found = np.zeros(self.num_docs, dtype=bool)
        for start, end in zip(indptr[ids], indptr[ids + 1]):
            found[indices[start:end]] = True
        return found

    def save(self, path: Path) -> None:
        self.retriever.save(path, allow_pickle=False, show_progress=False)

    @classmethod
    def load(cls, path: Path, config: BM25Config, mmap: bool) -> BM25sBackend:
        bm25s = import_backend_module("bm25s", "bm25s")
        retriever = bm25s.BM25.load(path, mmap=mmap, allow_pickle=False, show_progress=False)
        _check_matrix(path, retriever)
        backend = cls(retriever)
        backend.path = path
        return backend


def _check_matrix(path: Path, retriever) -> None:
    """Refuse bm25s files that do not fit together (of a damaged or hand-edited index): term ids that are not
    columns of the score matrix, column pointers that do not match its stored scores, a document count that is
    not one. (Row numbers, one per stored score, are not scanned: a search names them if they are wrong.)"""
    scores, vocab = retriever.scores, retriever.vocab_dict
    data, indices, indptr, num_docs = (scores.get(k) for k in ("data", "indices", "indptr", "num_docs"))
    problem = None
    if not isinstance(vocab, dict) or set(map(type, vocab.values())) - {int}:
        problem = "its vocabulary is not a mapping of terms to integer ids"
    elif type(num_docs) is not int or num_docs < 0:
        problem = f"num_docs is {num_docs!r}, not a count"
    elif any(getattr(a, "ndim", None) != 1 for a in (data, indices, indptr)) or len(indptr) == 0 or indptr[0] != 0:
        problem = "its score matrix arrays are not a sparse matrix"
    elif not len(data) == len(indices) == int(indptr[-1]) or np.any(np.diff(indptr) < 0):
        problem = (f"its score matrix has {len(data)} scores and {len(indices)} rows, and its column pointers end at "
                   f"{int(indptr[-1])}")
    elif vocab and not (0 <= min(vocab.values()) and max(vocab.values()) < len(indptr) - 1):
        problem = f"its vocabulary has term ids outside the {len(indptr) - 1} columns of its score matrix"
    if problem is not None:
        raise InputError(f"damaged BM25 files: {problem}")  # (the index around them names the folder)


class RankBM25Backend:
    """rank_bm25's ``BM25Okapi`` (k1, b, epsilon); slow, kept as a reference implementation.

    ``method``/``idf_method``/``delta`` are not used. It cannot be saved without pickle, so the
    tokenised corpus is stored as JSON lines and the model is rebuilt on load.
    """

    def __init__(self, corpus_tokens: list[list[str]], config: BM25Config) -> None:
        rank_bm25 = import_backend_module("rank_bm25", "rank-bm25")
        self.corpus_tokens = corpus_tokens
        self.model = rank_bm25.BM25Okapi(corpus_tokens, k1=config.k1, b=config.b, epsilon=config.epsilon)
        self.num_docs = len(corpus_tokens)

    @classmethod
    def build(cls, corpus: TermIds, config: BM25Config) -> RankBM25Backend:
        return cls(corpus.terms(), config)

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        return np.asarray(self.model.get_scores(query_tokens), dtype=np.float32)

    def save(self, path: Path) -> None:
        with open(path / TOKENS_FILE, "w", encoding="utf-8") as f:
            for tokens in self.corpus_tokens:
                f.write(json.dumps(tokens, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: Path, config: BM25Config, mmap: bool) -> RankBM25Backend:
        file = path / TOKENS_FILE
        if not file.is_file():
            raise InputError(f"missing {file}: not a rank_bm25 index folder")
        with open(file, encoding="utf-8") as f:
            corpus_tokens = [json.loads(line) for line in f]
        logger.debug("rebuilding rank_bm25 model from %d tokenised documents", len(corpus_tokens))
        return cls(corpus_tokens, config)


BACKENDS: dict[str, type] = {"bm25s": BM25sBackend, "rank_bm25": RankBM25Backend}
