"""Join index parts built with ``--shard I/N`` (or any indexes of the same model) into one index."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from graphdoc.errors import GraphDocError, IndexMismatchError
from graphdoc.retrieval.finalize import finalize
from graphdoc.retrieval.manifest import Manifest, first_difference
from graphdoc.retrieval.shards import read_shard

SETTINGS = ("dimension", "metric", "faiss_factory", "bm25", "store_passages")


def merge_indexes(output: str | Path, parts: Sequence[str | Path], on_duplicate: str = "error") -> Manifest:
    """Copy every part's shards into ``output`` (which must not exist) and finalise it."""
    output = Path(output)
    if output.exists():
        raise GraphDocError(f"{output} already exists; merge into a new folder")
    if not parts:
        raise GraphDocError("name at least one index part to merge")
    manifests = [Manifest.load(Path(p)) for p in parts]
    first = manifests[0]
    for path, manifest in zip(parts, manifests):
        difference = first_difference(first.model, manifest.model)
        if difference is not None:
            name, ours, theirs = difference
            ours, theirs = repr(ours), repr(theirs)
            if name == "fingerprint":
                name, ours, theirs = "model", _model_name(first), _model_name(manifest)
            raise IndexMismatchError(f"cannot merge {path}: it was built with {name}={theirs}, "
                                     f"{parts[0]} with {name}={ours}")
        for name in SETTINGS:
            if getattr(manifest, name) != getattr(first, name):
                raise GraphDocError(f"cannot merge {path}: its {name} differs from {parts[0]}'s")
        for source in manifest.sources:
            if not source.complete:
                raise GraphDocError(f"cannot merge {path}: {source.corpus} part {source.part} is incomplete")
    _check_duplicates(parts, manifests, on_duplicate)
    merged = replace(first, shards=[], sources=[], counts={}, finalized=False)
    (output / "shards").mkdir(parents=True)
    for path, manifest in zip(parts, manifests):
        for name in manifest.shards:
            new_name = f"{len(merged.shards):05d}"
            shutil.copytree(Path(path) / "shards" / name, output / "shards" / new_name)
            merged.shards.append(new_name)
        merged.sources.extend(manifest.sources)
    merged.save(output)
    finalize(output, merged)
    return merged


def _model_name(manifest: Manifest) -> str:
    return f"{manifest.model.get('name')!r} (weights {str(manifest.model.get('fingerprint'))[:12]})"


def _check_duplicates(parts, manifests, on_duplicate: str) -> None:
    if on_duplicate != "error":
        return
    seen: dict[str, str] = {}
    for path, manifest in zip(parts, manifests):
        for name in manifest.shards:
            for doc_id in read_shard(Path(path) / "shards" / name, ids_only=True):
                if doc_id in seen and seen[doc_id] != str(path):
                    raise GraphDocError(f"document id {doc_id!r} is in both {seen[doc_id]} and {path}; "
                                        "pass --on-duplicate replace to keep the later one")
                seen[doc_id] = str(path)
