"""Delete documents from an index folder.

Shards are never rewritten: the manifest records each deleted id with the number of shards the index had then
(``deleted: {id: shards}``), and :func:`~graphdoc.retrieval.finalize.finalize` leaves its rows in those shards
out of ``final/``, which is rebuilt (atomically, as after an add). A document of that id added later goes into a
later shard and is indexed again.

The deletion is saved in the manifest before ``final/`` is rebuilt: a run killed while finalising leaves the
previous ``final/`` searchable (with a warning, as after an add killed then), and the same call run again, or any
later ``graphdoc index`` run, finishes it.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Iterable

from graphdoc.errors import GraphDocError
from graphdoc.retrieval.dense import training_minimum
from graphdoc.retrieval.finalize import finalize, maintaining
from graphdoc.retrieval.index_setup import remove_orphans
from graphdoc.retrieval.manifest import Manifest
from graphdoc.retrieval.progress import stop_hint
from graphdoc.retrieval.shards import indexed_ids

logger = logging.getLogger(__name__)

MISSING_POLICIES = ("warn", "error")
SHOWN = 5  # ids a message names


def delete_documents(index_dir: str | os.PathLike, ids: Iterable[str | int], *, missing: str = "warn",
                     show_progress_bar: bool = False) -> Manifest:
    """Delete the documents ``ids`` from the index in ``index_dir``; returns the manifest of the rebuilt index.

    An id the index does not hold is warned about (``missing="warn"``: the others are deleted; when none is held,
    nothing is rewritten) or refused (``missing="error"``: nothing changes). An id given twice counts once.
    Deleting every document is refused (an index without documents cannot be searched), and so is deleting from
    an index whose build is still in progress (a corpus only partly read: finish it first, or keep what it read with
    :func:`~graphdoc.retrieval.stopping.stop_reading`). A second process
    writing the folder is refused, as for :func:`~graphdoc.retrieval.builder.build_index`.
    """
    return deleting(index_dir, ids, missing=missing, show_progress_bar=show_progress_bar)[0]


def deleting(index_dir: str | os.PathLike, ids: Iterable[str | int], *, missing: str = "warn",
             show_progress_bar: bool = False) -> tuple[Manifest, list[str]]:
    """:func:`delete_documents`, and the ids of ``ids`` it deleted, those an earlier run killed while finalising
    recorded included (this one finishes their deletion)."""
    if missing not in MISSING_POLICIES:
        raise GraphDocError(f"missing must be one of {', '.join(MISSING_POLICIES)}; got {missing!r}")
    wanted = _requested(ids)
    index_dir = Path(index_dir)
    with maintaining(index_dir) as manifest:
        _check_deletable(index_dir, manifest)
        remove_orphans(index_dir, manifest)  # (refuses links and missing shards too)
        held = indexed_ids(index_dir, manifest)
        # an earlier call killed while finalising recorded these: deleting them again finishes it
        pending = set() if manifest.finalized else {i for i in manifest.deleted if i not in held}
        found = [i for i in wanted if i in held]
        absent = [i for i in wanted if i not in held and i not in pending]
        _report_absent(index_dir, absent, len(wanted), missing)
        if not found and manifest.finalized:
            logger.warning("no id given is in %s: nothing was changed", index_dir)
            return manifest, []
        _check_remaining(index_dir, manifest, len(held) - len(found), len(found))
        _record(index_dir, manifest, found, show_progress_bar)
    done = set(found) | pending
    return manifest, [i for i in wanted if i in done]


def _requested(ids: Iterable[str | int]) -> list[str]:
    """The ids as strings, each once, in the order given; a lone string, an empty id or one of another type is
    refused."""
    if isinstance(ids, (str, bytes)):
        raise GraphDocError(f"ids must be a list of document ids, not one string: pass [{ids!r}]")
    try:
        given = list(ids)
    except TypeError:
        raise GraphDocError(f"ids must be a list of document ids; got {type(ids).__name__}") from None
    wanted: dict[str, None] = {}
    for doc_id in given:
        if isinstance(doc_id, int) and not isinstance(doc_id, bool):
            doc_id = str(doc_id)  # as a corpus's integer ids are indexed
        if not isinstance(doc_id, str):
            raise GraphDocError(f"a document id is a string or an integer; got {doc_id!r}")
        if not doc_id:
            raise GraphDocError("an empty document id was given; no document has one")
        wanted[doc_id] = None
    if not wanted:
        raise GraphDocError("no document ids were given to delete")
    return list(wanted)


def _check_deletable(index_dir: Path, manifest: Manifest) -> None:
    """Refuse an index with no documents, or one whose build is in progress."""
    building = [s for s in manifest.sources if not s.complete]
    if building:
        source = building[0]
        raise GraphDocError(f"the build of {index_dir} is not finished ({source.corpus} part {source.part}: "
                            f"{source.documents_read} documents read): finish it first (rerun the build_index call "
                            f"or graphdoc index command) or keep what it read, {stop_hint(index_dir, source)}; then "
                            "delete (nothing was changed)")
    if not manifest.shards:
        raise GraphDocError(f"index {index_dir} holds no documents to delete")


def _report_absent(index_dir: Path, absent: list[str], given: int, missing: str) -> None:
    if not absent:
        return
    shown = ", ".join(map(repr, absent[:SHOWN])) + (", ..." if len(absent) > SHOWN else "")
    if missing == "error":
        raise GraphDocError(f"{len(absent)} of the {given} ids given {'is' if len(absent) == 1 else 'are'} not in "
                            f"{index_dir}: {shown} (nothing was changed; missing='warn', --missing warn, deletes "
                            "the others)")
    logger.warning("%d of the %d ids given %s not in %s, left out: %s", len(absent), given,
                   "is" if len(absent) == 1 else "are", index_dir, shown)


def _check_remaining(index_dir: Path, manifest: Manifest, remaining: int, deleting: int) -> None:
    """Refuse leaving no documents, or fewer than the index's FAISS factory is trained on."""
    if remaining == 0:
        raise GraphDocError(f"cannot delete all {deleting} documents of {index_dir}: an index without documents "
                            "cannot be searched (remove the folder instead; nothing was changed)")
    need = training_minimum(manifest.faiss_factory, manifest.dimension)
    if remaining < need:
        raise GraphDocError(f"FAISS index {manifest.faiss_factory!r} of {index_dir} needs at least {need} "
                            f"documents to be built; {remaining} would be left (nothing was changed)")


def _record(index_dir: Path, manifest: Manifest, found: list[str], show_progress_bar: bool) -> None:
    """Save the deletion of ``found`` in the manifest, then rebuild ``final/``; a build that fails (a full disk, a
    damaged shard: not a kill or Ctrl-C, which the same call run again finishes) takes the deletion back."""
    before = copy.deepcopy(manifest)
    manifest.deleted.update(dict.fromkeys(found, len(manifest.shards)))
    manifest.finalized = False
    manifest.save(index_dir)
    try:
        finalize(index_dir, manifest, show_progress_bar=show_progress_bar)
    except Exception:
        before.save(index_dir)  # final/ is the previous build still: as it was
        raise
    logger.info("%s: %d document%s deleted", index_dir, len(found), "" if len(found) == 1 else "s")
