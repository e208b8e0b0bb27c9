"""Shards: the unit of resumable indexing, each a folder written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from graphdoc.errors import GraphDocError
from graphdoc.fileio import atomic_directory
from graphdoc.retrieval import docstore


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


def read_shard(folder: Path, ids_only: bool = False):
    """The ids of a shard, or ``(ids, doc_vectors, passage_vectors, passage_ptr, attention, docs path)``.

    ``attention`` (the document node's last-layer attention over each passage) is ``None`` for shards
    written before it was kept.
    """
    ids = (folder / "ids.txt").read_text(encoding="utf-8").splitlines()
    if ids_only:
        return ids
    attention = folder / "passage_attention.npy"
    return (ids, np.load(folder / "doc_vectors.npy"), np.load(folder / "passage_vectors.npy"),
            np.load(folder / "passage_ptr.npy"), np.load(attention) if attention.is_file() else None,
            folder / "docs.jsonl")
