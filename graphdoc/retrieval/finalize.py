"""Turn an index's shards into its searchable files: FAISS indexes, BM25, docstore, vectors."""

from __future__ import annotations

import hashlib
import json
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from graphdoc.errors import DamagedIndexError, GraphDocError, InputError
from graphdoc.fileio import atomic_directory, remove_stale_temporaries, restore_moved_aside, writer_lock
from graphdoc.retrieval import docstore
from graphdoc.retrieval.bm25 import BM25Config, BM25Index
from graphdoc.retrieval.dense import DenseIndex, prepare_vectors
from graphdoc.retrieval.filters import MetadataSummary
from graphdoc.retrieval.manifest import Manifest
from graphdoc.retrieval.shards import read_shard

logger = logging.getLogger(__name__)

FINAL_DIR = "final"
#: Written last into ``final/``: the build's id and sizes, which the files of that folder must agree with.
BUILD_FILE = "build.json"


def tidy_after_a_kill(index_dir: Path) -> None:
    """Undo what a killed run left in ``index_dir``, under its writer lock: the last complete build, which finalising
    moves aside (``.final.old-PID``) just before putting the new one in its place, is put back when a kill came
    between the two (removing it then left no searchable build until a later run finished); then the temporaries
    of killed writes are removed."""
    aside = restore_moved_aside(index_dir, FINAL_DIR)
    if aside is not None:
        logger.info("putting back %s/ from %s, where a run stopped while replacing it left it", FINAL_DIR, aside.name)
    for stale in remove_stale_temporaries(index_dir):
        logger.info("removing %s left by an interrupted run", stale.name)


@contextmanager
def maintaining(index_dir: Path) -> Iterator[Manifest]:
    """The manifest of the index in ``index_dir``, read under its writer lock after :func:`tidy_after_a_kill`, for a
    command that changes an existing index (delete, stop reading). A folder that is no index is one error line before
    a lock file is left in it; a second writer is refused."""
    Manifest.load(index_dir)
    with writer_lock(index_dir):
        tidy_after_a_kill(index_dir)
        yield Manifest.load(index_dir)  # again: the folder is ours only now


def _kept_rows(ids: list[str], deleted: np.ndarray | None = None) -> np.ndarray:
    """Row numbers to keep: the last occurrence of every id among the rows not ``deleted`` (a replaced document's
    older row goes, and so do a deleted document's rows)."""
    last = {doc_id: row for row, doc_id in enumerate(ids) if deleted is None or not deleted[row]}
    return np.fromiter(sorted(last.values()), dtype=np.int64, count=len(last))


def finalize(index_dir: Path, manifest: Manifest, show_progress_bar: bool = False,
             shown_as: Path | None = None) -> None:
    """Rebuild ``final/`` from every shard (atomically) and mark the manifest finalised; ``shown_as`` names the
    folder in the log when ``index_dir`` is a temporary one (a merge's)."""
    ids, doc_vectors, passage_vectors, passage_ptr, attention, stores, deleted = _gather(index_dir, manifest)
    keep = _kept_rows(ids, deleted)
    if not len(keep):
        raise GraphDocError(f"index {index_dir} has no documents")
    with atomic_directory(index_dir / FINAL_DIR) as tmp:
        kept_ids = [ids[r] for r in keep]
        (tmp / "doc_ids.txt").write_text("".join(i + "\n" for i in kept_ids), encoding="utf-8")
        vectors = prepare_vectors(doc_vectors[keep], manifest.metric)  # as scored: unit rows for cosine
        _save_dense(tmp, "dense.faiss", "doc_vectors.npy", vectors, manifest.faiss_factory)
        n_passages = 0
        if manifest.store_passages:
            p_vectors, p_ptr = _select_passages(passage_vectors, passage_ptr, keep)
            if attention is not None:
                np.save(tmp / "passage_attention.npy", _select_passages(attention[:, None], passage_ptr, keep)[0][:, 0])
            p_vectors = prepare_vectors(p_vectors, manifest.metric)
            np.save(tmp / "passage_ptr.npy", p_ptr)
            _save_dense(tmp, "passages.faiss", "passage_vectors.npy", p_vectors,
                        "Flat" if len(p_vectors) < 4096 else manifest.faiss_factory)
            n_passages = len(p_vectors)
        records = _records(stores, keep)
        docstore.write_store(tmp / "docstore.jsonl", records)
        metadata = MetadataSummary()

        def texts():  # (each record's metadata summed up on the way)
            for r in docstore.iter_store(tmp / "docstore.jsonl"):
                metadata.add(r.get("metadata") or {})
                yield f"{r['title']} {r['text']}".strip()

        BM25Index.build(texts(), BM25Config.from_stored(manifest.bm25)).save(tmp / "bm25")
        build = {**_build_record(manifest, len(keep), n_passages), "metadata": metadata.to_dict()}
        (tmp / BUILD_FILE).write_text(json.dumps(build) + "\n", encoding="utf-8")
    gone = {ids[row] for row in np.flatnonzero(deleted).tolist()}.difference(kept_ids)  # (not added again)
    manifest.counts.update({"documents": len(keep), "passages": n_passages, "shards": len(manifest.shards),
                            "replaced": len(ids) - int(deleted.sum()) - len(keep), "deleted": len(gone)})
    manifest.finalized = True
    manifest.save(index_dir)
    logger.debug("index %s: %d documents, %d passages", shown_as or index_dir, len(keep), n_passages)


def _save_dense(folder: Path, index_name: str, vectors_name: str, vectors: np.ndarray, factory: str) -> None:
    """Write the FAISS index of ``vectors`` (prepared for the index's metric) and, unless it holds them as they are
    (an exact ``Flat`` index, whose vectors the searcher reads from it), the vectors themselves, which exact scoring
    reads."""
    index = DenseIndex.build(vectors, factory, "ip")  # (prepared for the metric already: not normalised twice)
    index.save(folder / index_name)
    if index.stored_vectors() is None:
        np.save(folder / vectors_name, vectors)


def _build_record(manifest: Manifest, documents: int, passages: int) -> dict:
    """What :data:`BUILD_FILE` holds."""
    return {"build": build_id(manifest, documents, passages), "documents": documents, "passages": passages}


def build_id(manifest: Manifest, documents: int, passages: int) -> str:
    """The id of the build of ``manifest``'s shards and settings: a digest of what decides ``final/``'s content
    (the shards, which are never rewritten, and the settings), so that another build of an index has another id,
    while a rebuild of a damaged ``final/`` writes the same bytes."""
    decided_by = [manifest.shards, manifest.metric, manifest.faiss_factory, manifest.bm25, manifest.store_passages,
                  documents, passages]
    if manifest.deleted:  # (an index without deletions keeps the id it had before they existed)
        decided_by.append(manifest.deleted)
    return hashlib.blake2b(json.dumps(decided_by, sort_keys=True).encode("utf-8"), digest_size=16).hexdigest()


def read_build(final: Path) -> dict | None:
    """``final/``'s :data:`BUILD_FILE` (``{"build": id, "documents": n, "passages": m, "metadata": {field:
    {"documents": n, "values": m}}}``; no ``"metadata"`` in a build written before graphdoc summed it up), or ``None``
    for an index finalised before graphdoc wrote it."""
    file = final / BUILD_FILE
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as err:
        raise DamagedIndexError(final.parent, f"{FINAL_DIR}/{BUILD_FILE} cannot be read ({err})") from None
    try:
        build = json.loads(text)
        if not (isinstance(build, dict) and isinstance(build.get("build"), str)
                and all(isinstance(build.get(k), int) for k in ("documents", "passages"))
                and isinstance(build.get("metadata", {}), dict)):
            raise ValueError("not a build record")
    except ValueError as err:
        raise DamagedIndexError(final.parent, f"{FINAL_DIR}/{BUILD_FILE} is not valid ({err})") from None
    return build


def _gather(index_dir: Path, manifest: Manifest):
    """Every shard's rows, one after the other: ids, document vectors, passage vectors, passage pointers, attention
    (``None`` when a shard lacks it), docstore paths with their shard's row count, and which rows are deleted."""
    ids, docs, passages, attention, ptrs, stores, deleted = [], [], [], [], [0], [], []
    offset = 0
    for number, name in enumerate(manifest.shards):
        s_ids, s_docs, s_passages, s_ptr, s_attention, s_store = read_shard(index_dir / "shards" / name)
        ids.extend(s_ids)
        deleted.extend(manifest.is_deleted(doc_id, number) for doc_id in s_ids)
        docs.append(s_docs)
        passages.append(s_passages)
        attention.append(s_attention)
        ptrs.extend((s_ptr[1:] + offset).tolist())
        offset += len(s_passages)
        stores.append((s_store, len(s_ids)))
    dim = manifest.dimension
    has_attention = bool(attention) and all(a is not None for a in attention)
    return (ids, np.concatenate(docs) if docs else np.zeros((0, dim), np.float32),
            np.concatenate(passages) if passages else np.zeros((0, dim), np.float32),
            np.asarray(ptrs, dtype=np.int64), np.concatenate(attention) if has_attention else None, stores,
            np.asarray(deleted, dtype=bool))


def _select_passages(vectors: np.ndarray, ptr: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(keep) == len(ptr) - 1:
        return vectors, ptr
    rows = np.concatenate([np.arange(ptr[r], ptr[r + 1]) for r in keep])
    lengths = ptr[keep + 1] - ptr[keep]
    return vectors[rows], np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _records(stores: list[tuple[Path, int]], keep: np.ndarray):
    """The records of the rows ``keep``; a shard's ``docs.jsonl`` that cannot be read, or holds another number of
    records than its ids, is an :class:`InputError` naming it."""
    wanted = set(keep.tolist())
    row = 0
    for store, ids in stores:
        records = 0
        try:
            for rec in docstore.iter_store(store):
                if row in wanted:
                    yield rec
                row, records = row + 1, records + 1
        except (OSError, ValueError) as exc:  # (json's and UTF-8's errors are ValueErrors)
            raise InputError(f"{store}: cannot be read at record {records + 1} ({exc}): the shard is damaged; "
                             "build the index anew") from None
        if records != ids:
            raise InputError(f"{store}: {records} records for {ids} ids in ids.txt: the shard is damaged; build the "
                             "index anew")
