"""Shards: the unit of resumable indexing, each a folder written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphdoc.errors import GraphDocError, InputError
from graphdoc.fileio import UnreadableFileError, atomic_directory, reading
from graphdoc.retrieval import docstore

if TYPE_CHECKING:
    from graphdoc.retrieval.manifest import Manifest


def write_shard(folder: Path, records: list[dict[str, Any]], doc_vectors: np.ndarray,
                passage_vectors: np.ndarray, passage_ptr: np.ndarray,
                passage_attention: np.ndarray | None = None) -> None:
    """Write one shard; it appears complete or not at all."""
    for rec in records:
        if "\n" in rec["id"] or "\r" in rec["id"]:
            raise GraphDocError(f"document id {rec['id']!r} contains a line break")
    with atomic_directory(folder) as tmp:
        (tmp / "ids.txt").write_text("".join(r["id"] + "\n" for r in records), encoding="utf-8")
        np.save(tmp / "doc_vectors.npy", doc_vectors.astype(np.float32, copy=False))
        np.save(tmp / "passage_vectors.npy", passage_vectors.astype(np.float32, copy=False))
        np.save(tmp / "passage_ptr.npy", passage_ptr.astype(np.int64, copy=False))
        if passage_attention is not None:
            np.save(tmp / "passage_attention.npy", passage_attention.astype(np.float32, copy=False))
        docstore.write_store(tmp / "docs.jsonl", records)


def read_shard(folder: Path, ids_only: bool = False, mmap: bool = False):
    """The ids of a shard, or ``(ids, doc_vectors, passage_vectors, passage_ptr, attention, docs path)``.

    ``attention`` (the document node's last-layer attention over each passage) is ``None`` for shards
    written before it was kept. A missing or damaged file is an :class:`InputError` naming it.
    """
    ids = _read(folder / "ids.txt", lambda f: f.read_text(encoding="utf-8").splitlines())
    if ids_only:
        return ids
    mode = "r" if mmap else None
    doc_vectors, passage_vectors, ptr = (_read(folder / name, lambda f: np.load(f, mmap_mode=mode))
                                         for name in ("doc_vectors.npy", "passage_vectors.npy", "passage_ptr.npy"))
    attention = folder / "passage_attention.npy"
    attention = _read(attention, lambda f: np.load(f, mmap_mode=mode)) if attention.is_file() else None
    if len(doc_vectors) != len(ids):
        raise InputError(f"{folder / 'doc_vectors.npy'}: {len(doc_vectors)} rows for {len(ids)} ids in ids.txt")
    if len(ptr) != 1 and (len(ptr) != len(ids) + 1 or ptr[-1] != len(passage_vectors)):
        raise InputError(f"{folder / 'passage_ptr.npy'}: does not match ids.txt and passage_vectors.npy")
    return ids, doc_vectors, passage_vectors, ptr, attention, folder / "docs.jsonl"


def indexed_ids(index_dir: Path, manifest: "Manifest") -> dict[str, None]:
    """The ids of the documents an index holds, in the order of its shards (a dict used as an ordered set): those
    of its shards, less the deleted ones (a deleted id added again later is held)."""
    held: dict[str, None] = {}
    for number, name in enumerate(manifest.shards):
        held.update((doc_id, None) for doc_id in read_shard(index_dir / "shards" / name, ids_only=True)
                    if not manifest.is_deleted(doc_id, number))
    return held


def check_shard(folder: Path) -> None:
    """Refuse a shard with a missing, truncated or inconsistent file (cheaply: arrays memory-mapped)."""
    ids = read_shard(folder, mmap=True)[0]
    store = _read(folder / "docs.jsonl", docstore.DocStore)
    try:
        if len(store) != len(ids) or not store.is_complete():
            raise InputError(f"{folder / 'docs.jsonl'}: does not hold the {len(ids)} documents of ids.txt")
    finally:
        store.close()


def _read(path: Path, load):
    if not path.exists():
        raise InputError(f"{path}: missing from the index")
    try:
        with reading(path):
            return load(path)
    except UnreadableFileError as exc:
        raise InputError(f"{path}: damaged ({exc.reason})") from None
