"""Build an index folder from a corpus: resumable shards of vectors, then FAISS + BM25 + docstore.

Layout of ``INDEX_DIR``::

    manifest.json              settings, model identity, progress per corpus, counts
    shards/NNNNN/              one per ``shard_size`` documents, written atomically
        ids.txt  doc_vectors.npy  passage_vectors.npy  passage_ptr.npy  passage_attention.npy  docs.jsonl
    final/                     rebuilt from the shards after every run (atomically)
        doc_ids.txt  dense.faiss  passages.faiss  passage_ptr.npy  passage_attention.npy  bm25/
        docstore.jsonl(+.offsets.npy)  build.json; doc_vectors.npy  passage_vectors.npy beside a FAISS index
        that codes its vectors (an exact Flat index holds them: the searcher reads them there)

A killed run rerun with the same command skips the documents already in shards; shards a crash
left unlisted in the manifest, and temporaries of a killed atomic write, are removed; a corpus that changed
since such a run is refused (a run resumes by position: :mod:`graphdoc.retrieval.stopping` keeps what it read
instead). A corpus already indexed, or stopped so, is not read again (a change to it is warned about). Adding a corpus to an existing index appends shards; an id already indexed is refused (``on_duplicate="error"``), skipped, or replaces the
old document (a deleted one, see :mod:`graphdoc.retrieval.deletion`, is not in the index). One process at a time
writes a folder (:func:`~graphdoc.fileio.writer_lock`).
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from graphdoc.config import check_count
from graphdoc.corpus import Fields, ReadStats, check_outside_corpus, document_count, source_key
from graphdoc.corpus.fields import as_fields
from graphdoc.corpus.memory import corpus_argument
from graphdoc.device import arithmetic_refusal
from graphdoc.documents import Document
from graphdoc.errors import GraphDocError
from graphdoc.fileio import LOCK_NAME, writer_lock
from graphdoc.progress import complete, logs_beside_bars, progress_bar
from graphdoc.retrieval import docstore
from graphdoc.retrieval.bm25 import BM25Config
from graphdoc.retrieval.dense_searcher import DenseSettings
from graphdoc.retrieval.fusion import HYBRID_DEFAULT, FusionConfig
from graphdoc.retrieval.dense import METRICS, TrainingError, new_faiss_index, training_minimum
from graphdoc.retrieval.manifest import (MANIFEST_NAME, Manifest, SourceProgress, check_identity, chunker_version,
                                         model_identity, normal_part, split_of)
from graphdoc.retrieval.progress import (Cursor, check_read_part_unchanged, corpus_state, open_corpus, state_changed,
                                         part_documents, report_complete, source_fields, stop_hint,
                                         warn_partly_read)
from graphdoc.retrieval.shards import indexed_ids, write_shard
from graphdoc.retrieval.finalize import FINAL_DIR, finalize, tidy_after_a_kill
from graphdoc.retrieval.searcher import final_problem

logger = logging.getLogger(__name__)

DUPLICATE_POLICIES = ("error", "skip", "replace")
#: documents a shard holds in a new index (or one built before graphdoc recorded its shard size) unless told
DEFAULT_SHARD_SIZE = 1000


@dataclass
class IndexSettings:
    """How an index is built. ``None`` for faiss/metric/bm25 keeps an existing index's own setting (a new
    index gets Flat, cosine, or the metric a fine-tuned model recorded, and ``BM25Config()``), and ``None`` for
    ``shard_size`` the size the index recorded (1,000 for a new index); a size given is recorded for later runs
    (search results do not depend on it)."""

    faiss_factory: str | None = None
    metric: str | None = None
    bm25: BM25Config | None = None
    store_passages: bool = True
    shard_size: int | None = None
    on_duplicate: str = "error"

    def __post_init__(self) -> None:
        if self.on_duplicate not in DUPLICATE_POLICIES:
            raise GraphDocError(f"on_duplicate must be one of {', '.join(DUPLICATE_POLICIES)}; "
                                f"got {self.on_duplicate!r}")
        if self.shard_size is not None and self.shard_size < 1:
            raise GraphDocError("shard_size must be at least 1")
        if self.metric is not None and self.metric not in METRICS:
            raise GraphDocError(f"unknown metric {self.metric!r}; valid: {', '.join(METRICS)}")
        if self.faiss_factory is not None and not isinstance(self.faiss_factory, str):
            raise GraphDocError(f"faiss_factory must be a string (Flat, HNSW32, ...); got {self.faiss_factory!r}")
        if self.faiss_factory is not None and not self.faiss_factory.strip():  # was taken as Flat
            raise GraphDocError("faiss_factory (--faiss-factory) is empty: name a FAISS factory string, such as Flat "
                                "or HNSW32, or leave it out")


def warn_other_chunker(manifest: Manifest, index_dir, what: str) -> None:
    """Warn when an index holding documents was chunked by another graphdoc chunker than this one: ``what`` (the
    documents added, a merged part) are chunked otherwise, and the index mixes the two until it is rebuilt."""
    from graphdoc.chunker import CHUNKER_VERSION

    version = chunker_version(manifest.model)
    if manifest.shards and version != CHUNKER_VERSION:  # (a first build stopped part-way has shards, no counts yet)
        logger.warning("%s was chunked by %s graphdoc (chunker version %s, this one's %s: a sentence over the word "
                       "limit ends differently): %s are chunked by this one, and the index mixes the two; rebuild it "
                       "for one chunking", index_dir, "an earlier" if version < CHUNKER_VERSION else "a later",
                       version, CHUNKER_VERSION, what)


def parse_part(part: str) -> tuple[int, int]:
    """``"2/4"`` -> ``(1, 4)``: zero-based part number and number of parts."""
    try:
        i, n = (int(x) for x in part.split("/"))
    except ValueError:
        raise GraphDocError(f"part (--shard) must look like I/N (for example 1/4); got {part!r}") from None
    if not 1 <= i <= n:
        raise GraphDocError(f"part (--shard) {part}: I must be between 1 and N")
    return i - 1, n


def open_manifest(index_dir: Path, model, settings: IndexSettings, identity: dict | None = None) -> Manifest:
    """The existing manifest (checked against the model and settings) or a new one, saved.

    ``identity`` is the model's :func:`model_identity` when the caller has it (it hashes the weights)."""
    identity = identity or model_identity(model)
    manifest = _existing_manifest(index_dir, identity, settings)
    if manifest is None:
        manifest = _new_manifest(model, identity, settings)
        index_dir.mkdir(parents=True, exist_ok=True)
        manifest.save(index_dir)
    return manifest


def _existing_manifest(index_dir: Path, identity: dict, settings: IndexSettings,
                       announce: bool = True) -> Manifest | None:
    """The manifest of ``index_dir`` checked against the model and settings; ``None`` when there is none or it
    holds no documents yet and has read no corpus to the end (a run that failed before its first shard binds no
    later run to its model; an empty ``--shard`` part, whose corpus has no document for it, keeps its record)."""
    if not (index_dir / MANIFEST_NAME).exists():
        return None
    manifest = Manifest.load(index_dir)
    if not manifest.shards and not any(source.complete for source in manifest.sources):
        return None
    check_identity(manifest.model, identity, index_dir)
    if manifest.store_passages and not settings.store_passages:
        raise GraphDocError(f"index {index_dir} keeps passage vectors; cannot add documents without them "
                            "(build a new index with store_passages=False, --no-passages)")
    wanted = {"metric": settings.metric, "faiss_factory": settings.faiss_factory,  # terms=None: the index's own
              "bm25": settings.bm25.resolved(manifest.bm25).to_dict() if settings.bm25 is not None else None}
    for name, value in wanted.items():
        if value is not None and value != getattr(manifest, name):
            change_setting(index_dir, manifest, name, value, announce)
    return manifest


def _record_moved_model(index_dir: Path, manifest: Manifest, identity: dict) -> None:
    """An index whose model folder is gone, given its model (the same weights: checked) from another folder,
    records the new place, so that searches load it from there without ``--model``. Under the writer lock."""
    recorded, now = manifest.model.get("path"), identity.get("path")
    if recorded and now and os.path.isabs(recorded) and not os.path.exists(recorded) and os.path.isdir(now):
        now = os.path.abspath(now)
        logger.info("index %s: its model %s is gone; recording it at %s (the same weights)", index_dir, recorded,
                    now)
        manifest.model["path"] = now
        manifest.save(index_dir)


def change_setting(index_dir: Path, manifest: Manifest, name: str, value, announce: bool) -> None:
    """FAISS factory and BM25 settings shape only ``final/``: they may change until the index is first finalised
    (a factory that could not be trained is replaced without re-encoding), not after an add that was interrupted
    while finalising, as the index searched meanwhile is its last build; the metric never."""
    old = getattr(manifest, name)
    shown_name, shown_old, shown_new = name, old, value
    if isinstance(old, dict):
        key = next(k for k in value if value[k] != old.get(k))
        shown_name, shown_old, shown_new = f"{name}.{key}", old.get(key), value[key]
    if name == "metric" or manifest.finalized or "documents" in manifest.counts:  # (counts: a build finished)
        raise GraphDocError(f"index {index_dir} has {shown_name}={shown_old!r}; cannot change it to "
                            f"{shown_new!r} (build a new index)")
    if announce:
        logger.warning("index %s is not finalised: its %s changes from %r to %r", index_dir, shown_name, shown_old,
                       shown_new)
    setattr(manifest, name, value)


def _new_manifest(model, identity: dict, settings: IndexSettings) -> Manifest:
    """A manifest for a new index; a bad FAISS factory string is refused here, before anything is written.

    Its search settings are the defaults, or those a ranking fine-tuning saved with the model (its
    ``search_defaults``: the passage weight, fusion and similarity it was trained and selected with)."""
    from graphdoc import __version__

    new_faiss_index(settings.faiss_factory or "Flat", model.dimension)
    fusion, dense, metric = search_defaults(model)
    if getattr(model, "search_defaults", None):
        if not settings.store_passages and dense.passage_weight > 0:
            logger.warning("the model was fine-tuned to score with passage_weight %s, but --no-passages keeps no "
                           "passage vectors: dense search scores by the document vector alone",
                           dense.passage_weight)
        logger.info("searching as the model was fine-tuned: passage_weight %s, %s fusion alpha %s (%s), %s",
                    dense.passage_weight, fusion.method, fusion.alpha, fusion.normalization,
                    settings.metric or metric)
    return Manifest(model=identity, dimension=model.dimension, metric=settings.metric or metric,
                    faiss_factory=settings.faiss_factory or "Flat", bm25=(settings.bm25 or BM25Config()).resolved().to_dict(),
                    store_passages=settings.store_passages, graphdoc_version=__version__,
                    fusion=fusion.to_dict(), dense=asdict(dense))


def search_defaults(model) -> tuple[FusionConfig, DenseSettings, str]:
    """Fusion, dense settings and metric of a new index of ``model``: what its fine-tuning recorded, else the
    defaults (a malformed record is an error naming the model)."""
    saved = getattr(model, "search_defaults", None) or {}
    try:
        fusion = FusionConfig.from_dict({**HYBRID_DEFAULT.to_dict(), **saved.get("fusion", {})})
        dense = DenseSettings(**saved.get("dense", {}))
        metric = saved.get("metric", "cosine")
        if metric not in METRICS:
            raise GraphDocError(f"unknown metric {metric!r}")
    except (GraphDocError, TypeError, AttributeError) as exc:
        raise GraphDocError(f"model {getattr(model, 'name_or_path', '?')}: its saved search settings are not "
                            f"usable ({exc})") from None
    return fusion, dense, metric


def remove_orphans(index_dir: Path, manifest: Manifest) -> None:
    """Delete shard folders (and temporary folders) a crash left that the manifest does not list; first refuse a
    ``shards/`` or ``final/`` that is a link (what it points to is not the index's to replace or delete) and a
    listed shard that is missing (a damaged index loses nothing more)."""
    for name in ("shards", FINAL_DIR):
        if (index_dir / name).is_symlink():
            raise GraphDocError(f"index {index_dir}: {name}/ is a symbolic link, and graphdoc writes an index only "
                                "inside its folder: copy the index without links to add to it")
    shards = index_dir / "shards"
    missing = [name for name in manifest.shards if not (shards / name).is_dir()]  # (a link to one is read, kept)
    if missing:
        raise GraphDocError(f"index {index_dir} is damaged: shard {missing[0]}, which its manifest lists, is not a "
                            f"folder in {shards} (nothing was changed)")
    if not shards.is_dir():
        return
    for entry in shards.iterdir():
        if entry.name not in manifest.shards:
            logger.info("removing incomplete shard %s left by an interrupted run", entry.name)
            if entry.is_symlink() or not entry.is_dir():
                entry.unlink()
            else:
                shutil.rmtree(entry, ignore_errors=True)


def build_index(model, corpus: str | os.PathLike | Sequence[dict | Document], index_dir: str | Path,
                settings: IndexSettings | None = None, part: str = "1/1", batch_size: int = 32,
                show_progress_bar: bool = False, fields: Fields | None = None) -> Manifest:
    """Index (or resume indexing, or add) a corpus; returns the manifest of the finalised index.

    ``model`` is a loaded model, or the name or folder of one (loaded with :func:`graphdoc.load_model`).
    ``corpus`` is a corpus file or folder, or a dataset name, as :func:`graphdoc.corpus.read_corpus` reads it:
    the index records how far it got in it, to resume. It may also be documents in memory, a list (any sequence)
    of dicts (``{"_id"/"id", "title", "text"/"sections", ...}``, one JSON lines record each) or of
    :class:`graphdoc.Document`: the index names them by a hash of their records (``memory:sha256:...``), so the
    same list given again resumes an interrupted build (one lost meanwhile: :func:`stop_reading` keeps what was
    read) or adds nothing, and another list adds its documents. A generator (read only once) and plain strings (no
    ids) are refused.
    ``fields`` (:class:`graphdoc.corpus.Fields`) names the record fields of its id, text and title; the index
    records them with the corpus's progress, so that ``None`` resumes (or reads another part) with the recorded
    ones, and other ones are refused for a corpus the index holds (they would index other text under its ids).

    Everything that can be checked is checked before the folder is touched: arguments and settings, the model
    against an existing index, the corpus (opened and its first document read; every record of documents in
    memory), and whether a FAISS factory that needs training will have enough documents. A second process writing
    the same folder is refused.
    """
    settings = IndexSettings() if settings is None else settings
    if not isinstance(settings, IndexSettings):
        raise GraphDocError(f"settings must be an IndexSettings; got {type(settings).__name__}")
    corpus = corpus_argument(corpus)  # documents in memory: a MemoryCorpus, every record's type checked
    check_count("batch_size", batch_size)
    index_dir = Path(index_dir)
    part_no, parts = parse_part(part)
    part = normal_part(part)  # " 1/2" and "01/2" are 1/2
    _check_index_folder(index_dir)
    check_outside_corpus(corpus, index_dir, "the index folder", "the index's files")
    if isinstance(model, (str, os.PathLike)):
        from graphdoc.backbones import load_model

        model = load_model(str(model))
    identity = model_identity(model)
    manifest = (_existing_manifest(index_dir, identity, settings, announce=False)
                or _new_manifest(model, identity, settings))
    key = source_key(corpus)
    if key != str(corpus) and manifest.source(key, part) is None and not manifest.whole(key) \
            and (manifest.source(str(corpus), part) or manifest.whole(str(corpus))):
        key = str(corpus)  # named with its split by an index built before stop 28: resumed under that name
    _check_same_split(index_dir, manifest, key, corpus, part)
    _check_not_gone(index_dir, manifest, corpus, part)
    fields = _corpus_fields(manifest, key, corpus, index_dir, as_fields(fields))
    source = manifest.source(key, part) or SourceProgress(corpus=key, part=part, fields=fields.to_dict() or None)
    if not source.complete and not manifest.whole(key):  # a corpus already indexed is not read again
        _check_arithmetic(index_dir, corpus, source, model)
        open_corpus(corpus, fields=fields)
        _check_training_size(index_dir, manifest, corpus, source, part_no, parts)
    with writer_lock(index_dir):
        tidy_after_a_kill(index_dir)
        manifest = open_manifest(index_dir, model, settings, identity)  # again: the folder is ours only now
        _record_moved_model(index_dir, manifest, identity)
        remove_orphans(index_dir, manifest)
        fields = _corpus_fields(manifest, key, corpus, index_dir, fields)
        source = manifest.source(key, part)
        if source is None and manifest.whole(key):  # all its parts are in (a merged index): nothing to add
            report_complete(corpus, manifest.whole(key))
        else:
            if source is None:
                source = SourceProgress(corpus=key, part=part, fields=fields.to_dict() or None)
                manifest.sources.append(source)
            _index_source(model, corpus, index_dir, manifest, source, settings, (part_no, parts), batch_size,
                          show_progress_bar)
        if manifest.finalized and manifest.shards and (problem := final_problem(index_dir)):
            logger.warning("index %s is damaged (%s): rebuilding %s/ from its shards", index_dir, problem, FINAL_DIR)
            manifest.finalized = False
        if not manifest.finalized:
            _finalize(index_dir, manifest, part, show_progress_bar)
        warn_partly_read(index_dir, manifest)  # e.g. a run adding one was interrupted, and another corpus came next
    return manifest


def _check_same_split(index_dir: Path, manifest: Manifest, key: str, corpus, part: str) -> None:
    """Refuse reading ``corpus`` as ``part`` into an index that holds it read in a split of another number of
    parts (a ``--shard 1/2`` run resumed without ``--shard``: every document of its part would be a duplicate)."""
    if manifest.source(key, part) is not None or manifest.whole(key):
        return
    other = next((s for s in manifest.sources if s.corpus == key and split_of(s.part) != split_of(part)), None)
    if other is None:
        return
    given = "no --shard" if part == "1/1" else f"--shard {part}"
    wanted = "no --shard" if other.part == "1/1" else f"--shard {other.part}"
    raise GraphDocError(f"{index_dir} holds {corpus} read as part {other.part} ({wanted}), not with {given}: run "
                        f"the same command again with {wanted} to go on with it, or index {corpus} into another "
                        "folder")


def _check_not_gone(index_dir: Path, manifest: Manifest, corpus, part: str) -> None:
    """Refuse a corpus file or folder gone since an interrupted run began reading it into the index, saying how to
    keep what that run read (the reader would only say that there is no such file)."""
    if not isinstance(corpus, (str, os.PathLike)) or os.path.exists(corpus):
        return
    source = manifest.source(str(Path(corpus).resolve()), part)
    if source is not None and not source.complete:
        raise GraphDocError(f"{corpus}: no such file or folder, and an interrupted run read {source.documents_read} of "
                            f"its documents into {index_dir}: restore it to go on, or keep those and read no more of "
                            f"it: {stop_hint(index_dir, source)}")


def _corpus_fields(manifest: Manifest, key: str, corpus, index_dir: Path, fields: Fields | None) -> Fields:
    """The record fields to read ``corpus`` with: those the index recorded for it (a run resumed, another part of
    it, a corpus already in), which ``fields`` must then match, or ``fields`` (default: the default keys) for a
    corpus new to the index."""
    recorded = [s for s in manifest.sources if s.corpus == key]
    if not recorded:
        return fields or Fields()
    kept = source_fields(recorded[0])
    if fields is not None and fields != kept:
        raise GraphDocError(f"{corpus} was read into {index_dir} with {kept.describe()}, not {fields.describe()}: "
                            "that would index other text under the same ids (leave the field options out to go on "
                            "with its own, or index into a new folder)")
    return kept


def _check_index_folder(index_dir: Path) -> None:
    """Refuse a file, or a folder of other files, as the index folder: an index is written into it."""
    if index_dir.exists() and not index_dir.is_dir():
        raise GraphDocError(f"the index folder {index_dir} (--index-dir) is a file, not a folder")
    if not index_dir.is_dir() or (index_dir / MANIFEST_NAME).exists():
        return
    # what a run killed before its first manifest leaves is not "other files"
    others = [p for p in index_dir.iterdir() if p.name != LOCK_NAME and not p.name.startswith(f".{MANIFEST_NAME}.")]
    if others:
        raise GraphDocError(f"{index_dir} is a folder of other files, not a graphdoc index: "
                            "index into a new or empty folder")


def _check_training_size(index_dir: Path, manifest: Manifest, corpus: str, source: SourceProgress, part_no: int,
                         parts: int) -> None:
    """Refuse, before encoding, a FAISS factory that needs more training vectors than the index will hold."""
    need = training_minimum(manifest.faiss_factory, manifest.dimension)
    if need <= 1:
        return
    have = len(_known_ids(index_dir, manifest))
    cursor = Cursor(source.documents_read)
    new = part_documents(open_corpus(corpus, fields=source_fields(source)), cursor, part_no, parts)
    have += sum(1 for _ in itertools.islice(new, max(need - have, 0)))
    if have < need:
        raise GraphDocError(f"FAISS index {manifest.faiss_factory!r} needs at least {need} documents to be built; "
                            f"{index_dir} would hold {have}: choose a smaller one (Flat and HNSW32 need no training)")


def _index_source(model, corpus: str, index_dir: Path, manifest: Manifest, source: SourceProgress,
                  settings: IndexSettings, part: tuple[int, int], batch_size: int, show_progress_bar: bool) -> None:
    """Encode the documents of ``corpus`` past ``source.documents_read`` (all of a new corpus; the rest of one a
    killed run left) into shards, saving the manifest after each. A corpus already indexed is not read again."""
    if source.complete:
        report_complete(corpus, [source])
        return
    if source.documents_read == 0:
        source.state = corpus_state(corpus)
        _record_arithmetic(index_dir, manifest, corpus, source, model.passage_encoder.arithmetic)
    else:
        _check_arithmetic(index_dir, corpus, source, model)  # (the manifest read again under the lock)
        if state_changed(source.state, corpus):
            check_read_part_unchanged(corpus, index_dir, manifest, source, part, settings.on_duplicate)
            source.state = corpus_state(corpus)
    settings = replace(settings, shard_size=_shard_size(index_dir, manifest, settings))
    warn_other_chunker(manifest, index_dir, "documents added now")
    stats, cursor, cut_before = ReadStats(), Cursor(source.documents_read), model.chunker.counts()
    known = _known_ids(index_dir, manifest)
    started, added = time.perf_counter(), 0
    total = document_count(corpus) if part[1] == 1 and show_progress_bar else None  # time left, where cheap
    bar = progress_bar(desc="Indexing", unit="doc", initial=source.documents_read, total=total,
                       disable=not show_progress_bar, dynamic_ncols=True)
    skipped, skipped_ids = 0, []  # documents --on-duplicate skip left out, and the first five ids

    def skip(doc_id: str) -> None:
        nonlocal skipped
        skipped += 1
        if skipped <= 5:
            skipped_ids.append(doc_id)
        bar.update(1)

    # log records on lines of their own, not glued onto the bar on a terminal; the bar is closed on an error too,
    # so that the error line starts a line of its own
    with logs_beside_bars(show_progress_bar):
        try:
            for docs in _batches(open_corpus(corpus, stats, source_fields(source)), cursor, *part, settings, known,
                                 skip):
                _encode_shard(model, docs, index_dir, manifest, settings, batch_size, bar)
                source.shards = [*(source.shards or []), manifest.shards[-1]]
                source.documents_read, added = docs.position, added + len(docs)
                manifest.counts["encode_seconds"] = round(
                    manifest.counts.get("encode_seconds", 0) + time.perf_counter() - started, 3)
                started = time.perf_counter()
                manifest.save(index_dir)
            complete(bar)  # its total counted blank documents the reader skipped
        finally:
            bar.close()
    if skipped:
        logger.info("%s: %d document(s) already in the index left out (--on-duplicate skip): %s%s", corpus,
                    skipped, ", ".join(map(repr, skipped_ids)), ", ..." if skipped > 5 else "")
    model.chunker.warn_cut(cut_before)  # a document's end past the cap cannot be found (empty ones: the reader says)
    source.complete, source.state, manifest.finalized = True, corpus_state(corpus), False
    source.documents_read = max(source.documents_read, cursor.position)
    manifest.save(index_dir)


def _check_arithmetic(index_dir: Path, corpus, source: SourceProgress, model) -> None:
    """Refuse to go on with a corpus read part-way in another arithmetic than this run's (:attr:`SourceProgress.
    precision`): one corpus's vectors would be computed two ways. A corpus recorded before graphdoc kept it goes on
    as before."""
    now = model.passage_encoder.arithmetic
    if source.complete or not source.documents_read or source.precision in (None, now):
        return
    part = f" part {source.part}" if source.part != "1/1" else ""
    raise GraphDocError(arithmetic_refusal(f"{corpus}{part} in {index_dir}", source.precision, now,
                                           model.passage_encoder.config.precision, "index it into a new folder"))


def _record_arithmetic(index_dir: Path, manifest: Manifest, corpus, source: SourceProgress, now: str) -> None:
    """Record the arithmetic a corpus read from its start is encoded in; warn when the index holds documents
    encoded in another (allowed: their vectors differ by about 1e-3, so scores across the two shift that much)."""
    source.precision = now
    others = sorted({s.precision for s in manifest.sources
                     if s is not source and s.precision not in (None, now) and s.part_documents()})
    if others:
        logger.warning("%s is encoded at %s, and %s holds documents encoded at %s: their vectors differ by about "
                       "1e-3 (pass --precision %s to add it as they were)", corpus, now, index_dir,
                       " and ".join(others), others[0])


def _shard_size(index_dir: Path, manifest: Manifest, settings: IndexSettings) -> int:
    """The documents a shard of this run holds: ``settings.shard_size`` when given, else the size the index
    recorded (else the default); recorded in the manifest for the runs after this one."""
    size = settings.shard_size or manifest.shard_size or DEFAULT_SHARD_SIZE
    if manifest.shard_size not in (None, size):
        logger.info("index %s: shards of %d documents from now on (they held %d; search results do not depend on "
                    "it)", index_dir, size, manifest.shard_size)
    manifest.shard_size = size
    return size


def _finalize(index_dir: Path, manifest: Manifest, part: str, show_progress_bar: bool) -> None:
    if not manifest.shards:  # an empty part of a small corpus: nothing to search, but it can be merged
        manifest.counts.update({"documents": 0, "passages": 0, "shards": 0, "replaced": 0})
        manifest.finalized = True
        manifest.save(index_dir)
        logger.warning("part %s holds no documents: %s can be merged, not searched", part, index_dir)
        return
    try:
        finalize(index_dir, manifest, show_progress_bar=show_progress_bar)
    except TrainingError as exc:
        raise TrainingError(f"{exc}; the {len(_known_ids(index_dir, manifest))} documents encoded so far are "
                            "kept: rerun with another FAISS factory (faiss_factory, --faiss-factory; Flat needs "
                            "no training) to finish the index") from None


class _ShardDocs(list):
    """Documents for one shard, and the reading position just after the last of them."""

    position: int = 0


def _batches(documents, cursor: Cursor, part_no: int, parts: int, settings: IndexSettings,
             known: set[str], skip: Callable[[str], None] = lambda doc_id: None) -> Iterator[_ShardDocs]:
    """Group the documents still to index into shards; ``position`` counts documents read."""
    batch = _ShardDocs()
    for doc in part_documents(documents, cursor, part_no, parts):
        if doc.id in known:
            if settings.on_duplicate == "error":
                raise GraphDocError(f"document id {doc.id!r} is already in the index; set on_duplicate "
                                    "(--on-duplicate) to replace or skip")
            if settings.on_duplicate == "skip":
                skip(doc.id)
                continue
        known.add(doc.id)
        batch.append(doc)
        if len(batch) >= settings.shard_size:
            batch.position = cursor.position
            yield batch
            batch = _ShardDocs()
    if batch:
        batch.position = cursor.position
        yield batch


def _encode_shard(model, docs: list, index_dir: Path, manifest: Manifest, settings: IndexSettings,
                  batch_size: int, bar) -> None:
    doc_vectors, passage_vectors, attention, ptr, records = [], [], [], [0], []
    keep = manifest.store_passages  # the index's own setting: an added corpus cannot change it
    from graphdoc.serialization import GRAPH, backbone_of

    # a flat model has no graph attention: its explanations carry attention null, not a uniform stand-in
    keep_attention = keep and backbone_of(model) == GRAPH
    for out in model.iter_forward(docs, batch_size=batch_size, return_attention_weights=keep):
        out = out.cpu()  # float32, in the CPU's memory: read document by document below
        bar.update(len(out.documents))
        doc_vectors.append(out.document_embeddings.numpy())
        for i, prepared in enumerate(out.documents):
            if keep:
                vectors = out.passage_embeddings(i).numpy()
                passage_vectors.append(vectors)
                if keep_attention:
                    attention.append(out.document_attention(i).numpy())
                ptr.append(ptr[-1] + len(vectors))
            records.append(docstore.record(prepared.document, prepared.passages))
    name = f"{len(manifest.shards):05d}"
    empty = np.zeros((0, model.dimension), np.float32)
    write_shard(index_dir / "shards" / name, records, np.concatenate(doc_vectors),
                np.concatenate(passage_vectors) if keep else empty, np.asarray(ptr, dtype=np.int64),
                np.concatenate(attention) if keep_attention else None)
    manifest.shards.append(name)


def _known_ids(index_dir: Path, manifest: Manifest) -> set[str]:
    """The ids the index holds (a deleted one is not: adding it again is no duplicate), as a set the build adds
    to."""
    return set(indexed_ids(index_dir, manifest))
