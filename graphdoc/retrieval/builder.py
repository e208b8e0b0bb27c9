"""Build an index folder from a corpus: resumable shards of vectors, then FAISS + BM25 + docstore.

Layout of ``INDEX_DIR``::

    manifest.json              settings, model identity, progress per corpus, counts
    shards/NNNNN/              one per ``shard_size`` documents, written atomically
        ids.txt  doc_vectors.npy  passage_vectors.npy  passage_ptr.npy  passage_attention.npy  docs.jsonl
    final/                     rebuilt from the shards after every run (atomically)
        doc_ids.txt  dense.faiss  doc_vectors.npy  passage_vectors.npy  passage_ptr.npy  passage_attention.npy
        passages.faiss  bm25/  docstore.jsonl(+.offsets.npy)

A killed run rerun with the same command skips the documents already in shards; shards a crash
left unlisted in the manifest are removed. Adding a corpus to an existing index appends shards;
an id already indexed is refused (``on_duplicate="error"``), skipped, or replaces the old document.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
from tqdm.auto import tqdm

from graphdoc.errors import GraphDocError
from graphdoc.retrieval import docstore
from graphdoc.retrieval.bm25 import BM25Config
from graphdoc.retrieval.dense_searcher import DenseSettings
from graphdoc.retrieval.fusion import HYBRID_DEFAULT
from graphdoc.retrieval.dense import METRICS, new_faiss_index
from graphdoc.retrieval.manifest import Manifest, SourceProgress, check_identity, model_identity
from graphdoc.retrieval.shards import read_shard, write_shard
from graphdoc.retrieval.finalize import finalize

logger = logging.getLogger(__name__)

DUPLICATE_POLICIES = ("error", "skip", "replace")


@dataclass
class IndexSettings:
    """How an index is built. ``None`` for faiss/metric keeps an existing index's own setting."""

    faiss_factory: str | None = None
    metric: str | None = None
    bm25: BM25Config = field(default_factory=BM25Config)
    store_passages: bool = True
    shard_size: int = 1000
    on_duplicate: str = "error"

    def __post_init__(self) -> None:
        if self.on_duplicate not in DUPLICATE_POLICIES:
            raise GraphDocError(f"on_duplicate must be one of {', '.join(DUPLICATE_POLICIES)}; "
                                f"got {self.on_duplicate!r}")
        if self.shard_size < 1:
            raise GraphDocError("shard_size must be at least 1")


def parse_part(part: str) -> tuple[int, int]:
    """``"2/4"`` -> ``(1, 4)``: zero-based part number and number of parts."""
    try:
        i, n = (int(x) for x in part.split("/"))
    except ValueError:
        raise GraphDocError(f"--shard must look like I/N (for example 1/4); got {part!r}") from None
    if not 1 <= i <= n:
        raise GraphDocError(f"--shard {part}: I must be between 1 and N")
    return i - 1, n


def open_manifest(index_dir: Path, model, settings: IndexSettings) -> Manifest:
    """The existing manifest (checked against the model and settings) or a new one."""
    identity = model_identity(model)
    if (index_dir / "manifest.json").exists():
        manifest = Manifest.load(index_dir)
        check_identity(manifest.model, identity, index_dir)
        for name in ("faiss_factory", "metric"):
            wanted = getattr(settings, name)
            if wanted is not None and wanted != getattr(manifest, name):
                raise GraphDocError(f"index {index_dir} has {name}={getattr(manifest, name)!r}; "
                                    f"cannot change it to {wanted!r} (build a new index)")
        if manifest.store_passages and not settings.store_passages:
            raise GraphDocError(f"index {index_dir} keeps passage vectors; cannot add documents without them "
                                "(build a new index with --no-passages)")
        return manifest
    from graphdoc import __version__

    # checked before anything is written: the manifest fixes these for every later run
    if (settings.metric or "cosine") not in METRICS:
        raise GraphDocError(f"unknown metric {settings.metric!r}; valid: {', '.join(METRICS)}")
    new_faiss_index(settings.faiss_factory or "Flat", model.dimension)
    index_dir.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(model=identity, dimension=model.dimension, metric=settings.metric or "cosine",
                        faiss_factory=settings.faiss_factory or "Flat", bm25=settings.bm25.to_dict(),
                        store_passages=settings.store_passages, graphdoc_version=__version__,
                        fusion=HYBRID_DEFAULT.to_dict(), dense=asdict(DenseSettings()))
    manifest.save(index_dir)
    return manifest


def remove_orphans(index_dir: Path, manifest: Manifest) -> None:
    """Delete shard folders (and temporary folders) a crash left that the manifest does not list."""
    shards = index_dir / "shards"
    if not shards.is_dir():
        return
    for entry in shards.iterdir():
        if entry.name not in manifest.shards:
            logger.info("removing incomplete shard %s left by an interrupted run", entry.name)
            shutil.rmtree(entry, ignore_errors=True)


def build_index(model, corpus: str, index_dir: str | Path, settings: IndexSettings | None = None,
                part: str = "1/1", batch_size: int = 32, show_progress_bar: bool = False) -> Manifest:
    """Index (or resume indexing, or add) a corpus; returns the manifest of the finalised index."""
    from graphdoc.corpus import ReadStats, read_corpus

    settings = settings or IndexSettings()
    index_dir = Path(index_dir)
    part_no, parts = parse_part(part)
    manifest = open_manifest(index_dir, model, settings)
    remove_orphans(index_dir, manifest)
    key = str(corpus) if not Path(corpus).exists() else str(Path(corpus).resolve())
    source = manifest.source(key, part)
    if source is None:
        source = SourceProgress(corpus=key, part=part)
        manifest.sources.append(source)
    if source.complete:
        logger.info("%s (part %s) is already in the index", corpus, part)
    else:
        started = time.perf_counter()
        stats = ReadStats()
        known = _known_ids(index_dir, manifest)
        bar = tqdm(desc="Indexing", unit="doc", initial=source.documents_read, disable=not show_progress_bar,
                   dynamic_ncols=True)
        for docs in _batches(read_corpus(corpus, stats=stats), source, part_no, parts, settings, known):
            _encode_shard(model, docs, index_dir, manifest, settings, batch_size, bar)
            source.documents_read = docs.position
            manifest.counts["encode_seconds"] = round(
                manifest.counts.get("encode_seconds", 0) + time.perf_counter() - started, 3)
            started = time.perf_counter()
            manifest.save(index_dir)
        bar.close()
        source.complete = True
        manifest.finalized = False
        manifest.save(index_dir)
        if stats.empty_skipped:
            logger.info("skipped %d empty documents", stats.empty_skipped)
    if not manifest.finalized:
        finalize(index_dir, manifest, show_progress_bar=show_progress_bar)
    return manifest


class _ShardDocs(list):
    """Documents for one shard, and the reading position just after the last of them."""

    position: int = 0


def _batches(documents, source: SourceProgress, part_no: int, parts: int, settings: IndexSettings,
             known: set[str]) -> Iterator[_ShardDocs]:
    """Group the documents still to index into shards; ``position`` counts documents read."""
    batch, position = _ShardDocs(), source.documents_read
    for position, doc in enumerate(documents, start=1):
        if position <= source.documents_read:
            continue  # already in a shard: resuming
        if (position - 1) % parts != part_no:
            continue
        if doc.id in known:
            if settings.on_duplicate == "error":
                raise GraphDocError(f"document id {doc.id!r} is already in the index; pass "
                                    "--on-duplicate replace or --on-duplicate skip")
            if settings.on_duplicate == "skip":
                continue
        known.add(doc.id)
        batch.append(doc)
        if len(batch) >= settings.shard_size:
            batch.position = position
            yield batch
            batch = _ShardDocs()
    if batch:
        batch.position = position
        yield batch


def _encode_shard(model, docs: list, index_dir: Path, manifest: Manifest, settings: IndexSettings,
                  batch_size: int, bar) -> None:
    doc_vectors, passage_vectors, attention, ptr, records = [], [], [], [0], []
    keep = manifest.store_passages  # the index's own setting: an added corpus cannot change it
    for out in model.iter_forward(docs, batch_size=batch_size, return_attention_weights=keep):
        bar.update(len(out.documents))
        doc_vectors.append(out.document_embeddings.float().cpu().numpy())
        for i, prepared in enumerate(out.documents):
            if keep:
                vectors = out.passage_embeddings(i).float().cpu().numpy()
                passage_vectors.append(vectors)
                attention.append(out.document_attention(i).float().cpu().numpy())
                ptr.append(ptr[-1] + len(vectors))
            records.append(docstore.record(prepared.document, prepared.passages))
    name = f"{len(manifest.shards):05d}"
    empty = np.zeros((0, model.dimension), np.float32)
    write_shard(index_dir / "shards" / name, records, np.concatenate(doc_vectors),
                np.concatenate(passage_vectors) if keep else empty, np.asarray(ptr, dtype=np.int64),
                np.concatenate(attention) if keep else None)
    manifest.shards.append(name)


def _known_ids(index_dir: Path, manifest: Manifest) -> set[str]:
    known: set[str] = set()
    for name in manifest.shards:
        known.update(read_shard(index_dir / "shards" / name, ids_only=True))
    return known
