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
instead). A corpus already indexed, or stopped so, is not read again (a change to it is warned about). Adding a
corpus to an existing index appends shards; an id already indexed is refused (``on_duplicate="error"``), skipped,
or replaces the old document (a deleted one, see :mod:`graphdoc.retrieval.deletion`, is not in the index). One
process at a time writes a folder (:func:`~graphdoc.fileio.writer_lock`).

The settings and the manifest a build opens or creates are :mod:`graphdoc.retrieval.index_setup`'s; the checks on
a corpus against what the index recorded of it, :mod:`graphdoc.retrieval.corpus_checks`'s. This module reads and
encodes: :func:`build_index`, the shards of a corpus, and the finalising.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from graphdoc.config import check_count
from graphdoc.corpus import Fields, ReadStats, check_outside_corpus, document_count, source_key
from graphdoc.corpus.fields import as_fields
from graphdoc.corpus.memory import corpus_argument
from graphdoc.documents import Document
from graphdoc.errors import GraphDocError
from graphdoc.fileio import writer_lock
from graphdoc.progress import complete, logs_beside_bars, progress_bar
from graphdoc.retrieval import docstore
from graphdoc.retrieval.corpus_checks import (check_arithmetic, check_not_gone, check_same_split, check_training_size,
                                              corpus_fields, known_ids, record_arithmetic)
from graphdoc.retrieval.dense import TrainingError
from graphdoc.retrieval.finalize import FINAL_DIR, finalize, tidy_after_a_kill
from graphdoc.retrieval.index_setup import (IndexSettings, check_index_folder, existing_manifest, new_manifest,
                                            open_manifest, parse_part, record_moved_model, remove_orphans,
                                            run_shard_size, warn_other_chunker)
# (these lived here: callers may still import them from here)
from graphdoc.retrieval.index_setup import (DEFAULT_SHARD_SIZE, DUPLICATE_POLICIES, change_setting,  # noqa: F401
                                            search_defaults)
from graphdoc.retrieval.manifest import Manifest, SourceProgress, model_identity, normal_part
from graphdoc.retrieval.progress import (Cursor, check_read_part_unchanged, corpus_state, open_corpus, state_changed,
                                         part_documents, report_complete, source_fields, warn_partly_read)
from graphdoc.retrieval.shards import write_shard
from graphdoc.retrieval.searcher import final_problem

logger = logging.getLogger(__name__)


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
    check_index_folder(index_dir)
    check_outside_corpus(corpus, index_dir, "the index folder", "the index's files")
    if isinstance(model, (str, os.PathLike)):
        from graphdoc.backbones import load_model

        model = load_model(str(model))
    identity = model_identity(model)
    manifest = (existing_manifest(index_dir, identity, settings, announce=False)
                or new_manifest(model, identity, settings))
    key = source_key(corpus)
    if key != str(corpus) and manifest.source(key, part) is None and not manifest.whole(key) \
            and (manifest.source(str(corpus), part) or manifest.whole(str(corpus))):
        key = str(corpus)  # named with its split by an index built before stop 28: resumed under that name
    check_same_split(index_dir, manifest, key, corpus, part)
    check_not_gone(index_dir, manifest, corpus, part)
    fields = corpus_fields(manifest, key, corpus, index_dir, as_fields(fields))
    source = manifest.source(key, part) or SourceProgress(corpus=key, part=part, fields=fields.to_dict() or None)
    if not source.complete and not manifest.whole(key):  # a corpus already indexed is not read again
        check_arithmetic(index_dir, corpus, source, model)
        open_corpus(corpus, fields=fields)
        check_training_size(index_dir, manifest, corpus, source, part_no, parts)
    with writer_lock(index_dir):
        tidy_after_a_kill(index_dir)
        manifest = open_manifest(index_dir, model, settings, identity)  # again: the folder is ours only now
        record_moved_model(index_dir, manifest, identity)
        remove_orphans(index_dir, manifest)
        fields = corpus_fields(manifest, key, corpus, index_dir, fields)
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


def _index_source(model, corpus: str, index_dir: Path, manifest: Manifest, source: SourceProgress,
                  settings: IndexSettings, part: tuple[int, int], batch_size: int, show_progress_bar: bool) -> None:
    """Encode the documents of ``corpus`` past ``source.documents_read`` (all of a new corpus; the rest of one a
    killed run left) into shards, saving the manifest after each. A corpus already indexed is not read again."""
    if source.complete:
        report_complete(corpus, [source])
        return
    if source.documents_read == 0:
        source.state = corpus_state(corpus)
        record_arithmetic(index_dir, manifest, corpus, source, model.passage_encoder.arithmetic)
    else:
        check_arithmetic(index_dir, corpus, source, model)  # (the manifest read again under the lock)
        if state_changed(source.state, corpus):
            check_read_part_unchanged(corpus, index_dir, manifest, source, part, settings.on_duplicate)
            source.state = corpus_state(corpus)
    settings = replace(settings, shard_size=run_shard_size(index_dir, manifest, settings))
    warn_other_chunker(manifest, index_dir, "documents added now")
    stats, cursor, cut_before = ReadStats(), Cursor(source.documents_read), model.chunker.counts()
    known = known_ids(index_dir, manifest)
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
        raise TrainingError(f"{exc}; the {len(known_ids(index_dir, manifest))} documents encoded so far are "
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
