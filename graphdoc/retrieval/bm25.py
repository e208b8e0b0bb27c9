"""BM25 keyword search over plain texts, saved as a folder of plain files.

Row ``i`` of the index is the ``i``-th text given to :meth:`BM25Index.build`; the caller maps row
positions to its own document ids (see :func:`graphdoc.retrieval.runs.hits_to_run`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import itertools
import json
import logging
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphdoc.errors import ArgumentTypeError, GraphDocError, InputError
from graphdoc.retrieval._config import check_choice, config_from_dict
from graphdoc.retrieval.bm25_backends import BACKENDS, import_backend_module
from graphdoc.retrieval.runs import top_k_array

logger = logging.getLogger(__name__)

METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
STOPWORDS = ("en", None)
TERMS = ("unicode", "bm25s")
#: The terms of a stored BM25 setting written before graphdoc had the setting.
LEGACY_TERMS = "bm25s"
BM25S_TERM_PATTERN = r"(?u)\b\w\w+\b"  # bm25s's own
CONFIG_FILE = "config.json"
FORMAT = "graphdoc.bm25"
FORMAT_VERSION = 1


@dataclass
class BM25Config:
    """Settings of a BM25 index.

    The defaults (bm25s, Lucene variant, k1=1.5, b=0.75, English stop words, no stemming) give
    nDCG@10 0.662 / R@100 0.876 on BEIR SciFact test.

    Args:
        backend: "bm25s" (default) or "rank_bm25" (``BM25Okapi``; needs ``pip install rank-bm25``).
        method: bm25s variant: "lucene", "robertson", "atire", "bm25l" or "bm25+".
        idf_method: bm25s idf variant; None means the same as ``method``. bm25s with
            ``method="atire", idf_method="robertson"`` equals rank_bm25 with ``epsilon=0``.
        k1, b: term-frequency saturation and length normalisation.
        delta: the delta of bm25l / bm25+ (bm25s only).
        epsilon: rank_bm25's idf floor, as a fraction of the mean idf, for terms in more than
            half of the documents (rank_bm25 only).
        stopwords: "en" (bm25s's English list) or None.
        stemmer: None or a PyStemmer algorithm name such as "english".
        lowercase: lower-case texts before splitting into words.
        terms: "unicode": the text NFKC-normalised, terms are runs of 2+ letters, digits and combining marks,
            so that Devanagari, Bengali, Tamil, vowelled Arabic and Hebrew, and decomposed accents stay whole
            words, and full-width letters match their ASCII forms (an ASCII text, which neither changes, takes
            bm25s's faster pattern: the same terms); "bm25s": bm25s's own ``\w\w+`` over the text as it is
            (which splits words at combining marks), as indexes built before this setting existed have it.
            None (default): an existing index's own setting when documents are added to it, else "unicode".
    """

    backend: str = "bm25s"
    method: str = "lucene"
    idf_method: str | None = None
    k1: float = 1.5
    b: float = 0.75
    delta: float = 0.5
    epsilon: float = 0.25
    stopwords: str | None = "en"
    stemmer: str | None = None
    lowercase: bool = True
    terms: str | None = None

    def __post_init__(self) -> None:
        check_choice("BM25 backend", self.backend, BACKENDS)
        check_choice("BM25 terms", self.terms, (None, *TERMS))
        check_choice("BM25 method", self.method, METHODS)
        check_choice("BM25 idf_method", self.idf_method, (None, *METHODS))
        check_choice("BM25 stopwords", self.stopwords, STOPWORDS)
        if self.k1 < 0 or not 0 <= self.b <= 1:
            raise GraphDocError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={self.k1}, b={self.b}")
        _stemmer(self.stemmer)  # a bad name fails here, not after a whole corpus is encoded

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BM25Config:
        return config_from_dict(cls, data)

    def resolved(self, stored: dict[str, Any] | None = None) -> BM25Config:
        """This setting with ``terms`` decided: as given, else the ``stored`` setting's (an index's, read with
        :func:`with_legacy_terms`), else "unicode"."""
        if self.terms is not None:
            return self
        return dataclasses.replace(self, terms=(stored or {}).get("terms") or "unicode")

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> BM25Config:
        """A setting an index stored: one stored before ``terms`` existed has :data:`LEGACY_TERMS`."""
        return config_from_dict(cls, with_legacy_terms(data))


def with_legacy_terms(data: Any) -> Any:
    """A stored BM25 setting, with :data:`LEGACY_TERMS` when it was stored before ``terms`` existed."""
    return {**data, "terms": LEGACY_TERMS} if isinstance(data, dict) and data and "terms" not in data else data


@functools.lru_cache(maxsize=1)
def unicode_term_pattern() -> str:
    """The "unicode" terms: runs of 2+ characters that are word characters (Python's ``\w``) or combining marks
    (Unicode categories Mn, Mc, Me: ``\w`` leaves them out). Built once, in ~0.1 s, from the Unicode database."""
    marks = [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) in ("Mn", "Mc", "Me")]
    ranges: list[list[int]] = []
    for c in marks:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    members = "".join(re.escape(chr(a)) + (f"-{re.escape(chr(b))}" if b != a else "") for a, b in ranges)
    return f"[\\w{members}]{{2,}}"


def _stemmer(name: str | None):
    if name is None:
        return None
    try:
        Stemmer = importlib.import_module("Stemmer")
    except ImportError as err:
        raise GraphDocError("BM25 stemming needs PyStemmer; install it with: pip install PyStemmer") from err
    check_choice("BM25 stemmer", name, Stemmer.algorithms())
    return Stemmer.Stemmer(name)


def tokenize(texts: list[str], config: BM25Config) -> list[list[str]]:
    """Split texts into terms with bm25s's tokenizer (words of 2+ characters), as set in `config`."""
    terms: list[list[str]] = [[] for _ in texts]
    for rows, group, pattern in _term_groups(texts, config):
        for row, found in zip(rows, _bm25s_tokenize(group, config, pattern, return_ids=False)):
            terms[row] = found
    return terms


def _term_groups(texts: list[str], config: BM25Config) -> list[tuple[range | list[int], list[str], str]]:
    """``(rows, texts, term pattern)``: how ``texts`` are tokenised. With "unicode" terms an ASCII text (which
    NFKC leaves alone and which holds no combining mark) takes bm25s's own pattern, twice as fast as the one
    with the marks; the others are NFKC-normalised."""
    terms = config.terms or "unicode"
    ascii_text = [text.isascii() for text in texts] if terms == "unicode" else [True] * len(texts)
    if all(ascii_text):
        return [(range(len(texts)), texts, BM25S_TERM_PATTERN)] if texts else []
    ascii_rows = [i for i, plain in enumerate(ascii_text) if plain]
    other_rows = [i for i, plain in enumerate(ascii_text) if not plain]
    groups = [(other_rows, [unicodedata.normalize("NFKC", texts[i]) for i in other_rows], unicode_term_pattern())]
    if ascii_rows:
        groups.insert(0, (ascii_rows, [texts[i] for i in ascii_rows], BM25S_TERM_PATTERN))
    return groups


def _bm25s_tokenize(texts: list[str], config: BM25Config, pattern: str, return_ids: bool):
    bm25s = import_backend_module("bm25s", "bm25s")
    return bm25s.tokenize(
        texts,
        token_pattern=pattern,
        lower=config.lowercase,
        stopwords=config.stopwords,
        stemmer=_stemmer(config.stemmer),
        return_ids=return_ids,
        show_progress=False,
    )


TOKENIZE_BATCH = 4096


class TermIds:
    """A tokenised corpus held as term ids: one flat int32 array, document ``i``'s terms being
    ``flat[ptr[i]:ptr[i + 1]]``, and ``vocab`` mapping a term to its id.

    Texts are tokenised :data:`TOKENIZE_BATCH` at a time, and iterating gives each document's ids as a list, one
    document at a time, which is what bm25s's index build reads: the corpus costs 4 bytes a term, not a list of
    every document's terms and every text held at once (``python benchmarks/bm25_build.py``: 0.67x the peak
    memory and 0.84x the time of that, on 50k documents).
    """

    def __init__(self, flat: np.ndarray, ptr: np.ndarray, vocab: dict[str, int]) -> None:
        self.flat, self.ptr, self.vocab = flat, ptr, vocab

    @classmethod
    def from_texts(cls, texts: Iterable[str], config: BM25Config) -> TermIds:
        vocab: dict[str, int] = {}
        chunks, lengths = [], []
        texts = iter(texts)
        while batch := list(itertools.islice(texts, TOKENIZE_BATCH)):
            documents: list[np.ndarray] = [np.zeros(0, np.int32)] * len(batch)
            for rows, group, pattern in _term_groups(batch, config):  # each group's terms into their documents
                local_ids, local_vocab = _bm25s_tokenize(group, config, pattern, return_ids=True)
                to_global = np.empty(len(local_vocab), dtype=np.int32)
                for term, i in local_vocab.items():
                    to_global[i] = vocab.setdefault(term, len(vocab))
                for row, ids in zip(rows, local_ids):
                    documents[row] = to_global[np.asarray(ids, dtype=np.int64)]
            chunks.append(np.concatenate(documents))
            lengths.extend(map(len, documents))
        flat = np.concatenate(chunks) if chunks else np.zeros(0, np.int32)
        return cls(flat, np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]), vocab)

    def __len__(self) -> int:
        return len(self.ptr) - 1

    def __iter__(self) -> Iterator[list[int]]:
        flat = self.flat
        for start, end in itertools.pairwise(self.ptr.tolist()):
            yield flat[start:end].tolist()

    def terms(self) -> list[list[str]]:
        """Every document's terms as strings (for backends that need them)."""
        names = np.empty(len(self.vocab), dtype=object)
        names[list(self.vocab.values())] = list(self.vocab)
        return [names[self.flat[s:e]].tolist() for s, e in itertools.pairwise(self.ptr.tolist())]


class BM25Index:
    """A BM25 index over ``num_docs`` texts; rows are numbered 0..n-1 in build order."""

    def __init__(self, backend, config: BM25Config) -> None:
        self.backend = backend
        self.config = config

    @property
    def num_docs(self) -> int:
        return self.backend.num_docs

    def __len__(self) -> int:
        return self.num_docs

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_docs={self.num_docs}, config={self.config})"

    @classmethod
    def build(cls, texts: Iterable[str], config: BM25Config | None = None) -> BM25Index:
        """Tokenise and index `texts` (any iterable, read once, :data:`TOKENIZE_BATCH` texts at a time); an
        empty corpus is an error."""
        if isinstance(texts, str):
            raise ArgumentTypeError("BM25Index.build expects an iterable of texts, got a single string")
        config = (config or BM25Config()).resolved()
        corpus = TermIds.from_texts(texts, config)
        if not len(corpus):
            raise GraphDocError("cannot build a BM25 index from an empty corpus")
        if not len(corpus.flat):
            if config.backend != "bm25s":  # (rank_bm25 divides by the mean length, 0)
                raise GraphDocError(f"cannot build a BM25 index: none of the {len(corpus)} texts has a word to index "
                                    "(2+ letters or digits, not a stop word)")
            # (a corpus of symbols, or of a script the terms miss: dense search still finds its documents)
            logger.warning("none of the %d texts has a word BM25 indexes (2+ letters or digits, not a stop word): "
                           "BM25 finds nothing in them", len(corpus))
        logger.debug("indexing %d texts with the %s BM25 backend", len(corpus), config.backend)
        return cls(BACKENDS[config.backend].build(corpus, config), config)

    def get_scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for one query; exactly 0 for a document that holds no query term, with
        every method (bm25l and bm25+ would give it a floor score). Shape: [num_docs] float32."""
        return self._scores(tokenize([query], self.config)[0])

    def _scores(self, query_tokens: list[str]) -> np.ndarray:
        if not query_tokens:
            return np.zeros(self.num_docs, dtype=np.float32)
        return np.asarray(self.backend.scores(query_tokens), dtype=np.float32)

    def search(self, queries: list[str], k: int = 10, n_threads: int = 1, tie_rank: np.ndarray | None = None,
               allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-`k` rows per query, best first (ties in the order of ``tie_rank[row]``, else by row), `k` clipped
        to the corpus size; only rows where ``allowed`` (bool ``[num_docs]``) is true, when given.

        Documents that hold no query term (score 0) are left out; rows with fewer than `k`
        matches are padded with index -1 and score 0.0.

        Shapes: -> (indices int64 [q, k], scores float32 [q, k]).
        """
        indices, scores, _ = self.search_scoring(queries, k, None, n_threads, tie_rank, allowed)
        return indices, scores

    def search_scoring(self, queries: list[str], k: int, rows: Sequence[np.ndarray] | None, n_threads: int = 1,
                       tie_rank: np.ndarray | None = None, allowed: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """:meth:`search`, and each query's scores of its ``rows`` (e.g. another retriever's candidates) from
        the same scoring of the corpus: ``(indices, scores, [float32 [len(rows[i])], ...])``."""
        if isinstance(queries, str):
            raise GraphDocError("search expects a list of query strings, got a single string")
        k = max(0, min(int(k), self.num_docs))
        query_tokens = tokenize(list(queries), self.config)
        wanted = [None] * len(query_tokens) if rows is None else list(rows)

        def one(item) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
            tokens, rows_i = item
            scores = self._scores(tokens)
            ranked = scores if allowed is None else np.where(allowed, scores, 0)  # 0: "no match", left out
            return (*top_k_array(ranked, k, tie_rank), None if rows_i is None else scores[rows_i])

        if n_threads > 1 and len(query_tokens) > 1:
            with ThreadPoolExecutor(max_workers=n_threads) as pool:
                hits = list(pool.map(one, zip(query_tokens, wanted)))
        else:
            hits = [one(item) for item in zip(query_tokens, wanted)]
        if not hits:
            return np.zeros((0, k), dtype=np.int64), np.zeros((0, k), dtype=np.float32), []
        return np.stack([h[0] for h in hits]), np.stack([h[1] for h in hits]), [h[2] for h in hits]

    def save(self, path: str | Path) -> None:
        """Write the index to folder `path` (created if needed); ``config.json`` is written last."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.backend.save(path)
        meta = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "graphdoc_version": _graphdoc_version(),
            "num_docs": self.num_docs,
            "config": self.config.to_dict(),
        }
        (path / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path, mmap: bool = True) -> BM25Index:
        """Open an index folder written by :meth:`save`; `mmap` memory-maps the bm25s arrays."""
        path = Path(path)
        meta = _read_meta(path)
        config = BM25Config.from_stored(meta["config"])
        backend = BACKENDS[config.backend].load(path, config, mmap)
        if backend.num_docs != meta["num_docs"]:
            raise InputError(f"{path}: index holds {backend.num_docs} documents, config.json says {meta['num_docs']}")
        return cls(backend, config)


def _read_meta(path: Path) -> dict[str, Any]:
    file = path / CONFIG_FILE
    if not file.is_file():
        raise InputError(f"not a BM25 index folder (no {CONFIG_FILE}): {path}")
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise InputError(f"{file}: invalid JSON ({err})") from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise InputError(f"{file}: not a {FORMAT} index (format={meta.get('format') if isinstance(meta, dict) else None!r})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise InputError(f"{file}: unsupported format_version {meta.get('format_version')!r}; expected {FORMAT_VERSION}")
    if type(meta.get("num_docs")) is not int or not isinstance(meta.get("config"), dict):
        raise InputError(f"{file}: num_docs must be an integer and config a JSON object")
    return meta


def _graphdoc_version() -> str:
    from graphdoc import __version__

    return __version__
