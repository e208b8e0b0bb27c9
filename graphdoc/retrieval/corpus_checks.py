"""Checks on a corpus a build is about to read into an index, against what the index recorded of it: the same
split into parts, not gone while part-read, the same record fields, one arithmetic for its vectors; and enough
documents for a FAISS factory that needs training."""

from __future__ import annotations

import itertools
import logging
import os
from pathlib import Path

from graphdoc.corpus import Fields
from graphdoc.device import arithmetic_refusal
from graphdoc.errors import GraphDocError
from graphdoc.retrieval.dense import training_minimum
from graphdoc.retrieval.manifest import Manifest, SourceProgress, split_of
from graphdoc.retrieval.progress import Cursor, open_corpus, part_documents, source_fields, stop_hint
from graphdoc.retrieval.shards import indexed_ids

# under the builder's name, which these messages had before they moved here (a user's log filters name it)
logger = logging.getLogger("graphdoc.retrieval.builder")


def check_same_split(index_dir: Path, manifest: Manifest, key: str, corpus, part: str) -> None:
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


def check_not_gone(index_dir: Path, manifest: Manifest, corpus, part: str) -> None:
    """Refuse a corpus file or folder gone since an interrupted run began reading it into the index, saying how to
    keep what that run read (the reader would only say that there is no such file)."""
    if not isinstance(corpus, (str, os.PathLike)) or os.path.exists(corpus):
        return
    source = manifest.source(str(Path(corpus).resolve()), part)
    if source is not None and not source.complete:
        raise GraphDocError(f"{corpus}: no such file or folder, and an interrupted run read {source.documents_read} of "
                            f"its documents into {index_dir}: restore it to go on, or keep those and read no more of "
                            f"it: {stop_hint(index_dir, source)}")


def corpus_fields(manifest: Manifest, key: str, corpus, index_dir: Path, fields: Fields | None) -> Fields:
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


def check_arithmetic(index_dir: Path, corpus, source: SourceProgress, model) -> None:
    """Refuse to go on with a corpus read part-way in another arithmetic than this run's (:attr:`SourceProgress.
    precision`): one corpus's vectors would be computed two ways. A corpus recorded before graphdoc kept it goes on
    as before."""
    now = model.passage_encoder.arithmetic
    if source.complete or not source.documents_read or source.precision in (None, now):
        return
    part = f" part {source.part}" if source.part != "1/1" else ""
    raise GraphDocError(arithmetic_refusal(f"{corpus}{part} in {index_dir}", source.precision, now,
                                           model.passage_encoder.config.precision, "index it into a new folder"))


def record_arithmetic(index_dir: Path, manifest: Manifest, corpus, source: SourceProgress, now: str) -> None:
    """Record the arithmetic a corpus read from its start is encoded in; warn when the index holds documents
    encoded in another (allowed: their vectors differ by about 1e-3, so scores across the two shift that much)."""
    source.precision = now
    others = sorted({s.precision for s in manifest.sources
                     if s is not source and s.precision not in (None, now) and s.part_documents()})
    if others:
        logger.warning("%s is encoded at %s, and %s holds documents encoded at %s: their vectors differ by about "
                       "1e-3 (pass --precision %s to add it as they were)", corpus, now, index_dir,
                       " and ".join(others), others[0])


def check_training_size(index_dir: Path, manifest: Manifest, corpus: str, source: SourceProgress, part_no: int,
                        parts: int) -> None:
    """Refuse, before encoding, a FAISS factory that needs more training vectors than the index will hold."""
    need = training_minimum(manifest.faiss_factory, manifest.dimension)
    if need <= 1:
        return
    have = len(known_ids(index_dir, manifest))
    cursor = Cursor(source.documents_read)
    new = part_documents(open_corpus(corpus, fields=source_fields(source)), cursor, part_no, parts)
    have += sum(1 for _ in itertools.islice(new, max(need - have, 0)))
    if have < need:
        raise GraphDocError(f"FAISS index {manifest.faiss_factory!r} needs at least {need} documents to be built; "
                            f"{index_dir} would hold {have}: choose a smaller one (Flat and HNSW32 need no training)")


def known_ids(index_dir: Path, manifest: Manifest) -> set[str]:
    """The ids the index holds (a deleted one is not: adding it again is no duplicate), as a set the build adds
    to."""
    return set(indexed_ids(index_dir, manifest))
