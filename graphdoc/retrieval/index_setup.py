"""Setting up an index folder for a run that writes it: how the index is built (:class:`IndexSettings`), the
folder checked, its manifest opened (checked against the model and settings) or created with the model's search
defaults, a setting changed while the index allows it, and what a crash left in ``shards/`` removed.

:mod:`graphdoc.retrieval.builder` builds with these; :mod:`~graphdoc.retrieval.stopping` and
:mod:`~graphdoc.retrieval.deletion` tidy and change the folder with them too.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from graphdoc.errors import GraphDocError
from graphdoc.fileio import LOCK_NAME
from graphdoc.retrieval.bm25 import BM25Config
from graphdoc.retrieval.dense import METRICS, new_faiss_index
from graphdoc.retrieval.dense_searcher import DenseSettings
from graphdoc.retrieval.finalize import FINAL_DIR
from graphdoc.retrieval.fusion import HYBRID_DEFAULT, FusionConfig
from graphdoc.retrieval.manifest import MANIFEST_NAME, Manifest, check_identity, chunker_version, model_identity

# under the builder's name, which these messages had before they moved here (a user's log filters name it)
logger = logging.getLogger("graphdoc.retrieval.builder")

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


def parse_part(part: str) -> tuple[int, int]:
    """``"2/4"`` -> ``(1, 4)``: zero-based part number and number of parts."""
    try:
        i, n = (int(x) for x in part.split("/"))
    except ValueError:
        raise GraphDocError(f"part (--shard) must look like I/N (for example 1/4); got {part!r}") from None
    if not 1 <= i <= n:
        raise GraphDocError(f"part (--shard) {part}: I must be between 1 and N")
    return i - 1, n


def check_index_folder(index_dir: Path) -> None:
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


def open_manifest(index_dir: Path, model, settings: IndexSettings, identity: dict | None = None) -> Manifest:
    """The existing manifest (checked against the model and settings) or a new one, saved.

    ``identity`` is the model's :func:`model_identity` when the caller has it (it hashes the weights)."""
    identity = identity or model_identity(model)
    manifest = existing_manifest(index_dir, identity, settings)
    if manifest is None:
        manifest = new_manifest(model, identity, settings)
        index_dir.mkdir(parents=True, exist_ok=True)
        manifest.save(index_dir)
    return manifest


def existing_manifest(index_dir: Path, identity: dict, settings: IndexSettings,
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


def record_moved_model(index_dir: Path, manifest: Manifest, identity: dict) -> None:
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


def new_manifest(model, identity: dict, settings: IndexSettings) -> Manifest:
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
                    faiss_factory=settings.faiss_factory or "Flat",
                    bm25=(settings.bm25 or BM25Config()).resolved().to_dict(),
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


def run_shard_size(index_dir: Path, manifest: Manifest, settings: IndexSettings) -> int:
    """The documents a shard of this run holds: ``settings.shard_size`` when given, else the size the index
    recorded (else the default); recorded in the manifest for the runs after this one."""
    size = settings.shard_size or manifest.shard_size or DEFAULT_SHARD_SIZE
    if manifest.shard_size not in (None, size):
        logger.info("index %s: shards of %d documents from now on (they held %d; search results do not depend on "
                    "it)", index_dir, size, manifest.shard_size)
    manifest.shard_size = size
    return size


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
