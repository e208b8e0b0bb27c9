"""Search an index folder densely, with BM25, or both fused; hits carry their best passage."""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from graphdoc.config import check_count
from graphdoc.errors import DamagedIndexError, GraphDocError
from graphdoc.retrieval.bm25 import BM25Index
from graphdoc.retrieval.dense import RowSelection, prepare_vectors
from graphdoc.fileio import UnreadableFileError, reading
from graphdoc.progress import logs_beside_bars, progress_bar
from graphdoc.retrieval.dense_searcher import DenseSearcher, DenseSettings
from graphdoc.retrieval.docstore import DocStore, offsets_path
from graphdoc.retrieval.filters import MetadataFilters
from graphdoc.retrieval.finalize import FINAL_DIR, build_id, read_build
from graphdoc.retrieval.fusion import HYBRID_DEFAULT, FusionConfig, fuse_arrays
from graphdoc.retrieval.manifest import MANIFEST_NAME, Manifest, check_identity, model_identity
from graphdoc.retrieval.queries import check_query, split_queries
from graphdoc.retrieval.rebuilds import build_identity, file_stamp, wait_for_swap
from graphdoc.retrieval.rebuilds import build_changed  # noqa: F401 (it lived here: callers import it from here)
from graphdoc.retrieval.runs import id_ranks

logger = logging.getLogger(__name__)

MODES = ("dense", "bm25", "hybrid")
SNIPPET_CHARS = 300
OPEN_ATTEMPTS = 3  # tries at opening a final/ that adds keep replacing
QUERY_BLOCK = 1024  # queries encoded and searched at a time by batch_search (a step of its bar)
DEPTH = 100  # each retriever's candidates a search fuses (or ranks) at least, however few hits it keeps
ATTENTION_FILE = "passage_attention.npy"  # checked here with the others, and kept for explanations


@dataclass
class Hit:
    """One ranked document, with the passage that matched the query best and the document's metadata (the
    fields of its record other than id, title and text; ``{}`` in an index built before graphdoc kept them)."""

    rank: int
    doc_id: str
    score: float
    title: str = ""
    passage: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


class Searcher:
    """Holds a dense and a BM25 searcher over one index folder and fuses them.

    ``model`` encodes the queries: a loaded model, or the name or folder of one (loaded with
    :func:`graphdoc.load_model`); by default the model the index was built with, loaded on first dense use.
    It is checked against the index: a different model or setting is refused.

    The document store stays open until :meth:`close`; ``with Searcher(index_dir) as searcher:`` closes it.

    ``filter`` (of :meth:`search`, :meth:`batch_search`, :meth:`similar`) keeps the documents whose metadata match
    a mapping ``{field: value or [values]}``: for every field named, the document's value equals one of the values
    (AND across fields, OR within a field's list). Values compare as text: a string as itself, ``None`` as
    ``"null"``, booleans as ``"true"``/``"false"``, a number as its decimal form (``2020``, ``2020.0`` and
    ``"2020"`` are one value; ``0.5`` is ``"0.5"``), so a value typed on a command line matches a number; a list in
    the metadata matches when one of its elements does. A field inside an object is named by its dotted path
    (``{"metadata.year": 2020}`` for BEIR's ``{"metadata": {"year": 2020}}``; ``authors.name`` for a list of
    objects, by element); a top-level key holding a dot is named as it is, and where some document of the index has
    it, it is what the name names in every document (the path it spells cannot be named). A document without the
    field never matches; a field no document holds a value in is an error listing the fields there are (a typo
    would find nothing), as is one holding only objects (naming the paths inside); a filter no document matches
    finds nothing. ``id``, ``title`` and ``text`` are no metadata
    fields (``id`` names a metadata field only where the corpus had one besides the id field it named). The
    index's metadata is read from its document store on the first filter (once per searcher: a rebuilt index is
    a new searcher's).
    """

    def __init__(self, index_dir: str | Path, model=None, device: str | None = None) -> None:
        self.index_dir = Path(index_dir)
        self.docstore: DocStore | None = None
        self.filters: MetadataFilters | None = None
        if not self.index_dir.is_dir():
            raise GraphDocError(f"{self.index_dir} is a file, not an index folder" if self.index_dir.exists()
                                else f"index folder not found: {self.index_dir}")
        self.device = device
        self._model = None
        self._model_lock = threading.Lock()  # threads' first dense searches load the model once
        self.passage_attention = None
        try:  # nothing stays open when opening fails, the model included
            for _ in range(OPEN_ATTEMPTS):
                if self._open():
                    break
                self.close()  # an add's finalising put a new final/ in place as it was read: read that one
            else:
                raise GraphDocError(f"index {self.index_dir} was replaced {OPEN_ATTEMPTS} times while it was opened "
                                    "(documents are being added): try again")
            if self.updating:
                logger.warning("index %s is being finalised after an add or a delete, or its finalising was "
                               "interrupted: searching the %d documents of its last complete build (rerun an "
                               "interrupted build or delete to finish it)", self.index_dir, len(self.doc_ids))
            self.fusion = FusionConfig.from_dict(self.manifest.fusion) if self.manifest.fusion else HYBRID_DEFAULT
            if model is not None:
                self.model = model
        except BaseException as exc:
            self.close()
            if isinstance(exc, UnreadableFileError):
                raise self._unreadable(exc) from exc
            raise

    def _open(self) -> bool:
        """Read the manifest and open ``final/``; False when ``final/`` was replaced while its files were opened,
        so that they may belong to two builds (one's ids with the other's BM25 rows, say)."""
        manifest_seen = file_stamp(self.index_dir / MANIFEST_NAME)  # (before reading it: a save after the read shows)
        self.manifest = Manifest.load(self.index_dir)
        final = self.index_dir / FINAL_DIR
        if self.manifest.finalized and not self.manifest.shards:
            raise GraphDocError(f"index {self.index_dir} holds no documents (an empty part of a sharded corpus): "
                                "merge it with the other parts (merge_indexes, graphdoc merge) and search the "
                                "merged index")
        if not final.is_dir() and wait_for_swap(self.index_dir):
            return False  # an add's finalising was swapping final/: read the manifest and the new final/ again
        # documents being added, or an add that was interrupted: the last complete build (final/) is searched
        self.updating = not self.manifest.finalized
        if self.updating and (not final.is_dir() or "documents" not in self.manifest.counts):
            raise GraphDocError(f"index {self.index_dir} is incomplete: rerun the build that was interrupted (the "
                                f"same build_index call or graphdoc index command){self._stop_hint()}")
        if not final.is_dir():
            raise self._damaged(f"{FINAL_DIR}/ is missing")
        before = build_identity(final)
        try:
            self._open_final(final)
        except GraphDocError:
            if build_identity(final) != before or (not final.is_dir() and wait_for_swap(self.index_dir)):
                return False
            raise
        #: the build opened (``final/``'s identity) and the manifest read, as :func:`build_changed` compares them
        self.opened = (before, manifest_seen)
        return build_identity(final) == before

    def _stop_hint(self) -> str:
        """How to keep what an interrupted first build read of a corpus and finalise the index (or finish the
        finalising of a corpus stopped so), where the index has one."""
        from graphdoc.retrieval.progress import stop_hint

        sources = self.manifest.sources
        building = next((s for s in sources if not s.complete), next((s for s in sources if s.stopped), None))
        return "" if building is None else f", or keep what it read: {stop_hint(self.index_dir, building)}"

    def _open_final(self, final: Path) -> None:
        """Open the files of ``final/`` and check that they describe the same documents."""
        self.passage_attention = None
        with reading(final / "doc_ids.txt"):
            text = (final / "doc_ids.txt").read_text(encoding="utf-8")
            if text and not text.endswith("\n"):
                raise ValueError("it is cut short")
        self.doc_ids = text.splitlines()
        store = final / "docstore.jsonl"
        with reading(offsets_path(store)):
            offsets = np.load(offsets_path(store), mmap_mode="r", allow_pickle=False)
        with reading(store):
            self.docstore = DocStore(store, offsets)
        self.filters = MetadataFilters(self.docstore, f"index {self.index_dir}")
        self.dense = DenseSearcher(final, self.manifest.metric, self.manifest.faiss_factory,
                                   DenseSettings(**self.manifest.dense), device=self.device)
        with reading(final / "bm25"):
            self.bm25 = BM25Index.load(final / "bm25")
        problem = self._size_problem(final)
        if problem is not None:
            raise self._damaged(problem)

    def _size_problem(self, final: Path) -> str | None:
        """Why the files of ``final/`` disagree in size (a truncated or replaced file), or ``None``. The number of
        documents is the one ``final/build.json`` gives, else (an index from before it) the manifest's: the
        manifest is saved after ``final/`` is replaced, so during an add it may still count the previous build."""
        build = read_build(final)
        where, documents = ("build.json", build["documents"]) if build is not None else \
            ("the manifest", self.manifest.counts.get("documents", len(self.doc_ids)))
        sizes = [("doc_ids.txt", len(self.doc_ids)), ("docstore.jsonl.offsets.npy", len(self.docstore)),
                 ("bm25", self.bm25.num_docs)]
        for name, size in sizes:
            if size != documents:
                return f"{FINAL_DIR}/{name} holds {size} documents, {where} {documents}"
        if not self.docstore.is_complete():
            return f"{FINAL_DIR}/docstore.jsonl is cut short"
        problem = self.dense.size_problem(documents)
        if problem is None and self.dense.has_passages and (final / ATTENTION_FILE).is_file():
            with reading(final / ATTENTION_FILE):
                attention = np.load(final / ATTENTION_FILE, mmap_mode="r", allow_pickle=False)
            if len(attention) != len(self.dense.passage_vectors):
                problem = f"{ATTENTION_FILE} holds {len(attention)} passages, not {len(self.dense.passage_vectors)}"
            else:  # this build's: explanations read it from here, not from final/, which an add may replace
                self.passage_attention = attention
        return None if problem is None else f"{FINAL_DIR}/{problem}"

    def _damaged(self, problem: str) -> DamagedIndexError:
        return DamagedIndexError(self.index_dir, problem)

    def _unreadable(self, exc: UnreadableFileError) -> DamagedIndexError:
        return self._damaged(f"{exc.path.relative_to(self.index_dir)} cannot be read ({exc.reason})")

    def close(self) -> None:
        """Close the document store file and let go of the index's vectors, FAISS indexes and BM25 matrices (their
        memory maps close once nothing else holds them): searching, :meth:`record` and explanations refuse to run
        afterwards. Closing twice is harmless."""
        if self.docstore is not None:
            self.docstore.close()
        self.dense = self.bm25 = self.passage_attention = self.filters = None

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.docstore is None or self.docstore.closed:
            raise GraphDocError(f"the searcher of index {self.index_dir} is closed")

    def record(self, row: int) -> dict[str, Any]:
        """The document store's record of document ``row``."""
        self._check_open()
        try:
            with reading(self.docstore.path):
                return self.docstore[row]
        except UnreadableFileError as exc:
            raise self._unreadable(exc) from exc

    @functools.cached_property
    def row_of(self) -> dict[str, int]:
        """Document id -> row number (built once, on first use)."""
        return {doc_id: row for row, doc_id in enumerate(self.doc_ids)}

    @functools.cached_property
    def build(self) -> str:
        """The id of the build opened (32 hex digits): ``final/build.json``'s, another after every add or delete;
        for an index finalised before graphdoc wrote that file, the id a rebuild of it would record."""
        recorded = self.opened[0][2]
        if recorded is not None:
            return recorded
        return build_id(self.manifest, len(self.doc_ids), self.manifest.counts.get("passages", 0))

    @functools.cached_property
    def name_rank(self) -> np.ndarray:
        """Each row's rank among the document ids in sorted order: equal scores rank by document id, whatever the
        rows' order (built once, on first use)."""
        return id_ranks(self.doc_ids)

    @property
    def model(self):
        if self._model is None:
            from graphdoc.backbones import load_index_model

            with self._model_lock:
                if self._model is None:
                    self.model = load_index_model(self.manifest.model, device=self.device, searching=True)
        return self._model

    @model.setter
    def model(self, model) -> None:
        if isinstance(model, (str, os.PathLike)):  # loaded with the index's settings (backbone, graph, chunker)
            from graphdoc.backbones import load_index_model
            from graphdoc.encoder import check_model_name

            check_model_name(model)
            model = load_index_model(self.manifest.model, self.device, name_or_path=str(model))
        # (the passage cap shapes documents, not queries: a model of another cap encodes them as the index's does)
        check_identity(self.manifest.model, model_identity(model), self.index_dir, ignore=("chunker.max_passages",))
        self._model = model

    def encode_queries(self, queries: Mapping[str, str] | Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Query vectors ``[n, d]`` (rows in the queries' order) from the searcher's model.

        ``queries`` is a list of texts or a dict ``{query id: text}`` (its texts are encoded), as for
        :meth:`batch_search`; one str is refused (pass ``[query]``), and so is a blank or non-str query.
        """
        check_count("batch_size", batch_size)
        _, texts = split_queries(queries)
        return self.model.encode_queries(texts, batch_size=batch_size, show_progress_bar=False)

    def _fusion(self, fusion: FusionConfig | Mapping[str, Any] | None) -> FusionConfig:
        """``fusion`` as a FusionConfig: the index's when ``None``; a dict replaces those fields of the index's."""
        if fusion is None:
            return self.fusion
        if isinstance(fusion, FusionConfig):
            return fusion
        if isinstance(fusion, Mapping):
            return FusionConfig.from_dict({**self.fusion.to_dict(), **fusion})
        raise GraphDocError(f"fusion must be a FusionConfig or a dict of its fields; got {type(fusion).__name__}")

    def _query_vectors(self, vectors, queries: int) -> np.ndarray:
        """Given query vectors as a float32 ``[queries, dimension]`` array; any other shape is refused."""
        want = f"[{queries}, {self.manifest.dimension}] (one row per query, the index's dimension)"
        try:
            array = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise GraphDocError(f"query_vectors must be an array of numbers {want}: {exc}") from None
        if array.shape != (queries, self.manifest.dimension):
            raise GraphDocError(f"query_vectors has shape {list(array.shape)}; expected {want}")
        if not np.isfinite(array).all():  # FAISS returns no hits for them, and fusion fails on their scores
            row = int(np.flatnonzero(~np.isfinite(array).all(axis=1))[0])
            raise GraphDocError(f"query_vectors row {row} holds a value that is not a finite number (NaN or inf, "
                                "or past float32's range)")
        return array

    # ----------------------------------------------------------------- ranking
    def batch_search(self, queries: Mapping[str, str] | Sequence[str], k: int = 100, mode: str = "hybrid",
                     fusion: FusionConfig | Mapping[str, Any] | None = None, query_vectors: np.ndarray | None = None,
                     depth: int | None = None, show_progress_bar: bool = False,
                     filter: Mapping[str, Any] | None = None) -> dict[str, dict[str, float]]:
        """Rank documents for many queries: ``{query id: {doc id: score}}``, best first.

        ``queries`` is a dict ``{query id: text}`` or a list of texts (query ids ``"0"``, ``"1"``, ...); one str
        is refused (use :meth:`search`), and so is a blank or non-str query. ``fusion`` (hybrid only) is a
        FusionConfig, or a dict of its fields that replace the index's (``{"alpha": 0.8}``); default the
        index's. ``query_vectors``, ``[queries, dimension]``, replaces encoding the queries with the model.
        Hybrid scores both retrievers over the union of their top ``depth`` (default ``max(k, DEPTH)``: at least 100).
        The queries are encoded and searched :data:`QUERY_BLOCK` at a time, under a "Searching" bar with
        ``show_progress_bar``. ``filter`` keeps the documents whose metadata match (see the class doc): their dense
        and BM25 scores are those of the same search without it, and hybrid fuses them over the matching candidates
        (its normalisation and ranks see only those).
        """
        self._check_open()
        if mode not in MODES:
            raise GraphDocError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
        check_count("k", k)
        if depth is not None:
            check_count("depth", depth)
        qids, texts = split_queries(queries)
        depth = max(k, depth or DEPTH)
        fusion = self._fusion(fusion)
        allowed = self._allowed(filter)
        if query_vectors is not None:
            query_vectors = self._query_vectors(query_vectors, len(texts))
        if allowed is not None and not allowed.count:
            return {qid: {} for qid in qids}
        run: dict[str, dict[str, float]] = {}
        for block in _query_blocks(len(texts), show_progress_bar):
            vectors = None if query_vectors is None else query_vectors[block]
            run.update(self._search_block(qids[block], texts[block], vectors, k, mode, fusion, depth, allowed))
        return run

    def _search_block(self, qids: list[str], texts: list[str], vectors: np.ndarray | None, k: int, mode: str,
                      fusion: FusionConfig, depth: int, allowed: RowSelection | None) -> dict[str, dict[str, float]]:
        """:meth:`batch_search` of a block of queries (``vectors`` their given vectors, or ``None``)."""
        if mode == "hybrid":
            vectors = self.encode_queries(texts) if vectors is None else vectors
            run = {}
            components = self._components(texts, vectors, depth, allowed)
            for qid, (union, dense_scores, sparse_scores) in zip(qids, components):
                order, fused = fuse_arrays(dense_scores, sparse_scores, fusion, self.name_rank[union], k)
                run[qid] = self._named(union[order], fused, k)
            return run
        if mode == "dense":
            vectors = self.encode_queries(texts) if vectors is None else vectors
            ranked = self.dense.search(np.asarray(vectors), depth, self.name_rank, allowed)
        else:
            mask = None if allowed is None else allowed.mask
            ranked = zip(*self.bm25.search(texts, depth, tie_rank=self.name_rank, allowed=mask))
        return {qid: self._named(rows, scores, k) for qid, (rows, scores) in zip(qids, ranked)}

    def filter_mask(self, filter: Mapping[str, Any] | None) -> np.ndarray | None:
        """Which documents ``filter`` keeps: bool ``[documents]`` in the order of :attr:`doc_ids` (see the class
        doc); ``None`` for no filter (``None`` or ``{}``)."""
        allowed = self._allowed(filter)
        return None if allowed is None else allowed.mask.copy()

    def metadata_fields(self) -> list[str]:
        """The metadata fields some indexed document holds a value in, sorted, a field inside an object by its
        dotted path (``metadata.year``): what a ``filter`` may name (read from the document store with the filters'
        metadata, once)."""
        self._check_open()
        try:
            return self.filters.table.fields
        except UnreadableFileError as exc:
            raise self._unreadable(exc) from exc

    def _allowed(self, filter: Mapping[str, Any] | None) -> RowSelection | None:
        """The rows ``filter`` keeps (read from the document store's metadata on the first filter)."""
        self._check_open()
        try:
            return self.filters.selection(filter)
        except UnreadableFileError as exc:
            raise self._unreadable(exc) from exc

    def component_runs(self, queries: Mapping[str, str], depth: int = 100,
                       show_progress_bar: bool = False) -> tuple[dict, dict]:
        """Dense and BM25 runs, each scored over the union of both top ``depth`` (for fusion tuning); a block of
        queries at a time, as :meth:`batch_search`."""
        self._check_open()
        check_count("depth", depth)
        qids, texts = split_queries(queries)
        dense_run, sparse_run = {}, {}
        for block in _query_blocks(len(texts), show_progress_bar):
            components = self._components(texts[block], self.encode_queries(texts[block]), depth)
            for qid, (union, dense_scores, sparse_scores) in zip(qids[block], components):
                names = [self.doc_ids[r] for r in union.tolist()]
                dense_run[qid] = dict(zip(names, dense_scores.tolist()))
                sparse_run[qid] = dict(zip(names, sparse_scores.tolist()))
        return dense_run, sparse_run

    def _components(self, texts: list[str], vectors: np.ndarray, depth: int, allowed: RowSelection | None = None
                    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per query, the union of both retrievers' top ``depth`` (rows, ascending) and both scores of each: the
        dense search's scores of its own candidates and BM25's of the corpus, each computed once; only the BM25
        candidates the dense top missed are scored densely on their own (a block of queries at a time). Both
        retrievers return only rows of ``allowed``, when given."""
        start = 0
        mask = None if allowed is None else allowed.mask
        for block in self.dense.search_blocks(np.asarray(vectors), depth, self.name_rank, allowed):
            rows, scores, at_dense = self.bm25.search_scoring(texts[start:start + len(block)], depth,
                                                              [d_rows for d_rows, _, _ in block],
                                                              tie_rank=self.name_rank, allowed=mask)
            start += len(block)
            for i, (d_rows, d_scores, score_more) in enumerate(block):
                found = rows[i] >= 0
                s_rows, s_scores = rows[i][found], scores[i][found]
                union = np.union1d(d_rows, s_rows).astype(np.int64)
                extra = np.setdiff1d(s_rows, d_rows)
                dense_scores, sparse_scores = np.empty(len(union)), np.zeros(len(union), dtype=np.float32)
                dense_scores[np.searchsorted(union, d_rows)] = d_scores
                dense_scores[np.searchsorted(union, extra)] = score_more(extra)
                sparse_scores[np.searchsorted(union, d_rows)] = at_dense[i]
                sparse_scores[np.searchsorted(union, s_rows)] = s_scores
                yield union, dense_scores, sparse_scores

    def _named(self, rows: np.ndarray, scores: np.ndarray, k: int) -> dict[str, float]:
        """``{doc id: score}`` of the first ``k`` rows (-1 padding left out), in their order."""
        return {self.doc_ids[r]: s for r, s in zip(rows[:k].tolist(), scores[:k].tolist()) if r >= 0}

    # ----------------------------------------------------------------- readable hits
    def search(self, query: str, k: int = 10, mode: str = "hybrid",
               fusion: FusionConfig | Mapping[str, Any] | None = None,
               filter: Mapping[str, Any] | None = None) -> list[Hit]:
        """Rank documents for one query, with titles and each hit's best passage (``fusion`` as in
        :meth:`batch_search`; ``filter`` keeps the documents whose metadata match, see the class doc); a blank or
        non-str query is refused."""
        self._check_open()
        check_query(query)
        check_count("k", k)
        if mode not in MODES:
            raise GraphDocError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
        fusion = self._fusion(fusion)
        allowed = self._allowed(filter)  # (a bad filter is refused before the model loads)
        if allowed is not None and not allowed.count:
            return []
        vector = self.encode_queries([query]) if mode != "bm25" else None
        run = self.batch_search({"q": query}, k, mode, fusion, query_vectors=vector, filter=filter)["q"]
        row_of = self.row_of
        hits = []
        for rank, (doc_id, score) in enumerate(run.items(), start=1):
            record = self.record(row_of[doc_id])
            passage = self.best_passage(query, record, row_of[doc_id], None if vector is None else vector[0])
            hits.append(Hit(rank, doc_id, score, record.get("title", ""), passage, record.get("metadata", {})))
        return hits

    def similar(self, doc_id: str, k: int = 10, filter: Mapping[str, Any] | None = None) -> list[Hit]:
        """The ``k`` documents most like the indexed document ``doc_id``, itself left out: its stored vector is the
        query, scored as a dense search scores one (the document node and, with passages stored, the best passage
        of each candidate); each hit carries its passage closest to that vector. An id the index does not hold is
        refused. ``filter`` keeps the documents whose metadata match (see the class doc; ``doc_id`` need not)."""
        self._check_open()
        check_count("k", k)
        row = self._row(doc_id)
        allowed = self._allowed(filter)
        if allowed is not None and not allowed.count:
            return []
        vector = np.asarray(self.dense.doc_vectors[row], dtype=np.float32)
        rows, scores = self.dense.search(vector[None, :], k + 1, self.name_rank, allowed)[0]
        record = None
        hits = []
        for hit_row, score in zip(rows.tolist(), scores.tolist()):
            if hit_row == row or len(hits) == k:
                continue
            if record is None:
                record = self.record(row)
            found = self.record(hit_row)
            passage = self.best_passage(f"{record.get('title', '')} {record['text']}", found, hit_row, vector)
            hits.append(Hit(len(hits) + 1, self.doc_ids[hit_row], score, found.get("title", ""), passage,
                            found.get("metadata", {})))
        return hits

    def document(self, doc_id: str) -> dict[str, Any]:
        """The stored record of the indexed document ``doc_id``: its ``id``, ``title``, ``text``, metadata and,
        with passages stored, their ``passages`` spans; an id the index does not hold is refused."""
        self._check_open()
        return self.record(self._row(doc_id))

    def _row(self, doc_id: str) -> int:
        if not isinstance(doc_id, str):
            raise GraphDocError(f"a document id is a string; got {type(doc_id).__name__} {doc_id!r}")
        row = self.row_of.get(doc_id)
        if row is None:
            raise GraphDocError(f"index {self.index_dir} holds no document {doc_id!r}")
        return row

    def __len__(self) -> int:
        """The documents the index holds."""
        return len(self.doc_ids)

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and doc_id in self.row_of

    def best_passage(self, query: str, record: dict[str, Any], row: int, vector: np.ndarray | None) -> dict[str, Any]:
        """The passage closest to the query (dense when a query vector is given, else by shared words)."""
        spans = record.get("passages") or [[0, len(record["text"]), 0, ""]]
        if vector is not None and self.dense.has_passages:
            scores = self.dense.passage_scores(prepare_vectors(vector[None, :], self.manifest.metric)[0], row)
        else:
            words = set(re.findall(r"\w+", query.lower()))
            scores = np.array([len(words & set(re.findall(r"\w+", record["text"][s:e].lower())))
                               for s, e, *_ in spans], dtype=float)
        best = int(np.argmax(scores)) if len(scores) else 0
        start, end, section, title = spans[best]
        text = record["text"][start:end]
        return {"index": best, "start": start, "end": end, "section": section, "section_title": title,
                "score": float(scores[best]) if len(scores) else 0.0,
                "snippet": text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS].rsplit(" ", 1)[0] + " ..."}


def final_problem(index_dir: str | Path) -> str | None:
    """What is wrong with the ``final/`` files of a finalised index (as :class:`Searcher` would refuse
    them: missing, cut short, disagreeing in size), or ``None`` when it opens."""
    try:
        Searcher(index_dir).close()
    except DamagedIndexError as exc:
        return exc.problem
    return None


def _query_blocks(queries: int, show_progress_bar: bool) -> Iterator[slice]:
    """Slices of :data:`QUERY_BLOCK` queries, under a "Searching" bar that moves as each is done."""
    with progress_bar(total=queries, desc="Searching", unit="query", disable=not show_progress_bar) as bar, \
            logs_beside_bars(show_progress_bar):
        for start in range(0, queries, QUERY_BLOCK):
            yield slice(start, start + QUERY_BLOCK)
            bar.update(min(QUERY_BLOCK, queries - start))
