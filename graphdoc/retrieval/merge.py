"""Join index parts built with ``--shard I/N`` (or any indexes of the same model) into one index.

The merged index is built in a temporary folder beside the output and renamed into place at the end, so a
failed or killed merge leaves no half-written index; the same merge run again cleans up after it.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from graphdoc import __version__
from graphdoc.errors import GraphDocError, IndexMismatchError
from graphdoc.fileio import LOCK_NAME, atomic_directory, remove_stale_temporaries, writer_lock
from graphdoc.retrieval.bm25 import LEGACY_TERMS
from graphdoc.retrieval.progress import stop_hint
from graphdoc.retrieval.finalize import finalize
from graphdoc.retrieval.manifest import (
    Manifest,
    SourceProgress,
    chunker_version,
    first_difference,
    part_number,
    split_of,
)
from graphdoc.retrieval.shards import check_shard, indexed_ids

logger = logging.getLogger(__name__)

SETTINGS = ("dimension", "metric", "faiss_factory", "bm25", "store_passages")


def merge_indexes(output: str | Path, parts: Sequence[str | Path], on_duplicate: str = "error") -> Manifest:
    """Copy every part's shards into ``output`` (a new or empty folder) and finalise it."""
    output = Path(output)
    if not parts:
        raise GraphDocError("name at least one index part to merge")
    _check_output(output)
    parts = _distinct(parts)
    manifests = _one_corpus_at_two_paths([Manifest.load(p) for p in parts])
    _check_compatible(parts, manifests)
    for path, manifest in zip(parts, manifests):
        for name in manifest.shards:
            check_shard(path / "shards" / name)  # a damaged part: one line naming its file, before any copying
    held = [indexed_ids(path, manifest) for path, manifest in zip(parts, manifests)]
    _check_duplicates(parts, held, on_duplicate)
    _check_deletions(parts, manifests, held)
    if not any(m.shards for m in manifests):
        raise GraphDocError("the parts hold no documents")
    with writer_lock(output):
        for stale in remove_stale_temporaries(output.parent, output.name):  # a killed merge's (we hold its lock)
            logger.info("removing %s left by an interrupted merge", stale.name)
        with atomic_directory(output) as tmp:
            merged = _copy_parts(tmp, parts, manifests)
            finalize(tmp, merged, shown_as=output)
    return merged


def _check_output(output: Path) -> None:
    """A killed merge leaves only its lock file in the output folder: that is not "already exists"."""
    if output.exists() and (not output.is_dir() or any(p.name != LOCK_NAME for p in output.iterdir())):
        raise GraphDocError(f"{output} already exists; merge into a new folder")


def _distinct(parts: Sequence[str | Path]) -> list[Path]:
    seen: dict[Path, Path] = {}
    for part in map(Path, parts):
        resolved = part.resolve()
        if resolved in seen:
            also = f" (as {seen[resolved]})" if seen[resolved] != part else ""
            raise GraphDocError(f"{part} is named twice{also}")
        seen[resolved] = part
    return list(seen.values())


def _one_corpus_at_two_paths(manifests: list[Manifest]) -> list[Manifest]:
    """The manifests with the parts of one split corpus that were indexed at different paths (one machine each,
    as ``--shard`` is for) under the first part's path and state: a file of the same name, size and document
    count whose other parts they are. A corpus is known by its resolved path, so they would otherwise look like
    two corpora, each with parts missing."""
    groups: dict[tuple, tuple[SourceProgress, set[int]]] = {}  # signature -> (first part's source, parts held)
    renamed = []
    for manifest in manifests:
        sources = []
        for source in manifest.sources:
            if source.state is not None and split_of(source.part) > 1:
                signature = (Path(source.corpus).name, tuple(source.state[:2]), split_of(source.part),
                             source.documents_read)
                first, held = groups.setdefault(signature, (source, set()))
                number = part_number(source.part)
                if first.corpus != source.corpus and number not in held:
                    logger.info("%s part %s is taken as part of %s: same file name, size and document count, "
                                "indexed at another path", source.corpus, source.part, first.corpus)
                    source = replace(source, corpus=first.corpus, state=first.state)
                held.add(number)
            sources.append(source)
        renamed.append(replace(manifest, sources=sources))
    return renamed


def _check_compatible(parts: list[Path], manifests: list[Manifest]) -> None:
    first = manifests[0]
    versions = {path: chunker_version(manifest.model) for path, manifest in zip(parts, manifests)}
    if len(set(versions.values())) > 1:
        logger.warning("the parts were chunked by different graphdoc chunkers (%s: a sentence over the word limit "
                       "ends differently): the merged index mixes the two; rebuild the older parts for one chunking",
                       ", ".join(f"{path} version {version}" for path, version in versions.items()))
    _warn_other_arithmetics(parts, manifests)
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
            ours, theirs = getattr(first, name), getattr(manifest, name)
            if theirs != ours:
                if isinstance(ours, dict) and isinstance(theirs, dict):  # name the setting: bm25.terms, say
                    key = next(k for k in sorted({*ours, *theirs}) if ours.get(k) != theirs.get(k))
                    name, ours, theirs = f"{name}.{key}", ours.get(key), theirs.get(key)
                hint = ""
                if name == "bm25.terms" and LEGACY_TERMS in (ours, theirs):
                    old = parts[0] if ours == LEGACY_TERMS else path
                    hint = (f" ({old} was built before graphdoc had this setting: build the other parts with "
                            f"graphdoc index --bm25-terms {LEGACY_TERMS}, or index {old}'s corpus again)")
                raise GraphDocError(f"cannot merge {path}: it has {name}={theirs!r}, {parts[0]} {name}={ours!r}{hint}")
        if not manifest.sources:
            raise GraphDocError(f"cannot merge {path}: nothing was indexed into it (the build_index call or graphdoc "
                                "index command that made it stopped before the first shard was saved): rerun it")
        for source in manifest.sources:
            if not source.complete:
                raise GraphDocError(f"cannot merge {path}: {source.corpus} part {source.part} is incomplete "
                                    f"({source.documents_read} documents read): rerun its graphdoc index command to "
                                    f"finish it, or keep what it read: {stop_hint(path, source)}")
    _check_splits(parts, manifests)
    for path, manifest in zip(parts[1:], manifests[1:]):
        for name in ("fusion", "dense"):
            if getattr(manifest, name) != getattr(first, name):
                logger.warning("%s's search settings (%s) differ from %s's: the merged index takes %s's", path, name,
                               parts[0], parts[0])


def _warn_other_arithmetics(parts: list[Path], manifests: list[Manifest]) -> None:
    """Parts encoded in different arithmetics (``--precision``) merge, with a warning: the merged index mixes
    vectors that differ by about 1e-3 (each corpus part keeps its own record)."""
    found = {path: sorted({s.precision for s in manifest.sources if s.precision})
             for path, manifest in zip(parts, manifests)}
    if len({arithmetic for each in found.values() for arithmetic in each}) > 1:
        logger.warning("the parts were encoded in different arithmetics (%s): the merged index mixes vectors that "
                       "differ by about 1e-3", ", ".join(f"{path} {' and '.join(each)}"
                                                        for path, each in found.items() if each))


def _check_splits(parts: list[Path], manifests: list[Manifest]) -> None:
    """The parts of one corpus must come from one ``--shard I/N`` split of one version of it; a part of the split
    that is missing is warned about (the merged index lacks its documents)."""
    by_corpus: dict[str, list[tuple[Path, SourceProgress]]] = {}
    for path, manifest in zip(parts, manifests):
        for source in manifest.sources:
            by_corpus.setdefault(source.corpus, []).append((path, source))
    for corpus, found in by_corpus.items():
        # compared with a part read to the end, where there is one: a part stopped part-way read fewer documents
        first = next((i for i, (_, source) in enumerate(found) if not source.stopped), 0)
        (path_a, a), others = found[first], found[:first] + found[first + 1:]
        for path_b, b in others:
            if split_of(b.part) != split_of(a.part):
                raise GraphDocError(f"cannot merge {path_b}: it holds {corpus} part {b.part}, {path_a} part {a.part}: "
                                    "parts of different splits (part, --shard) overlap and leave documents out")
            if (b.fields or {}) != (a.fields or {}):
                raise GraphDocError(f"cannot merge {path_b}: it read {corpus} part {b.part} with fields "
                                    f"{b.fields or 'the default ones'}, {path_a} part {a.part} with "
                                    f"{a.fields or 'the default ones'}: the parts hold other texts of one corpus")
            _check_same_version(corpus, (path_a, a), (path_b, b))
        for path, source in found:
            if source.stopped:
                logger.warning("%s holds %s part %s stopped after %d of its documents (graphdoc index --stop-reading): "
                               "the merged index lacks the rest of that part", path, corpus, source.part,
                               source.part_documents() or 0)
        have = {part_number(s.part) for _, s in found}
        missing = [f"{i}/{split_of(a.part)}" for i in range(1, split_of(a.part) + 1) if i not in have]
        if missing:
            logger.warning("the parts hold %s without its part%s %s: the merged index lacks those documents",
                           corpus, "s" if len(missing) > 1 else "", ", ".join(missing))


def _check_same_version(corpus: str, first: tuple[Path, SourceProgress], other: tuple[Path, SourceProgress]) -> None:
    """Refuse a part of ``corpus`` read from a version of it that held another number of documents than the
    ``first`` part's (read to the end, where one is). A part stopped part-way
    (:func:`~graphdoc.retrieval.stopping.stop_reading`) read fewer: it must not have read more."""
    (path_a, a), (path_b, b) = first, other
    if b.stopped and (a.stopped or b.documents_read <= a.documents_read) or b.documents_read == a.documents_read:
        return
    if b.stopped:
        raise GraphDocError(f"cannot merge {path_b}: {corpus} part {b.part} was stopped after {b.documents_read} "
                            f"documents read, more than the {a.documents_read} {path_a}'s part {a.part} read to the "
                            "end: the parts come from different versions of it")
    raise GraphDocError(f"cannot merge {path_b}: {corpus} had {b.documents_read} documents when its part "
                        f"{b.part} was indexed, {a.documents_read} when {path_a}'s part {a.part} was: "
                        "the parts come from different versions of it")


def _now() -> str:
    """When a merged index is made: it is a new index, made now by this graphdoc."""
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _copy_parts(folder: Path, parts: list[Path], manifests: list[Manifest]) -> Manifest:
    merged = replace(manifests[0], shards=[], sources=[], counts={}, deleted={}, finalized=False,
                     created=_now(), graphdoc_version=__version__)
    (folder / "shards").mkdir(parents=True)
    for path, manifest in zip(parts, manifests):
        for doc_id, shards in manifest.deleted.items():  # the part's shards come after those copied before it
            merged.deleted[doc_id] = max(merged.deleted.get(doc_id, 0), len(merged.shards) + shards)
        renamed = {}
        for name in manifest.shards:
            renamed[name] = f"{len(merged.shards):05d}"
            shutil.copytree(path / "shards" / name, folder / "shards" / renamed[name])
            merged.shards.append(renamed[name])
        merged.sources.extend(replace(s, shards=None if s.shards is None else [renamed[n] for n in s.shards])
                              for s in manifest.sources)
    merged.save(folder)
    return merged


def _model_name(manifest: Manifest) -> str:
    return f"{manifest.model.get('name')!r} (weights {str(manifest.model.get('fingerprint'))[:12]})"


def _check_duplicates(parts: list[Path], held: list[dict[str, None]], on_duplicate: str) -> None:
    if on_duplicate != "error":
        return
    seen: dict[str, Path] = {}
    for path, ids in zip(parts, held):
        for doc_id in ids:
            if doc_id in seen:
                raise GraphDocError(f"document id {doc_id!r} is in both {seen[doc_id]} and {path}; "
                                    "to keep the later one, set on_duplicate to replace (--on-duplicate replace)")
            seen[doc_id] = path


def _check_deletions(parts: list[Path], manifests: list[Manifest], held: list[dict[str, None]]) -> None:
    """Refuse a part that deleted an id an earlier part holds: the merged index records a deletion as the shards
    before it, which would take the earlier part's document too."""
    for i, (path, manifest) in enumerate(zip(parts, manifests)):
        for doc_id in manifest.deleted:
            earlier = next((parts[j] for j in range(i) if doc_id in held[j]), None)
            if earlier is not None and doc_id not in held[i]:
                raise GraphDocError(f"cannot merge {path}: document {doc_id!r} was deleted from it, and {earlier}, "
                                    f"named before it, holds it: the merged index would lose that one too (delete it "
                                    f"from {earlier} as well, or name {path} before {earlier})")
