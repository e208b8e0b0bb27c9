"""A reader's side of an index whose ``final/`` an add or a delete replaces while it is searched: which build a
reader opened (:func:`build_identity`), waiting out a replacement under way (:func:`wait_for_swap`), and noticing a
newer build than the one opened (:func:`build_changed`: the server reopens its searcher on it)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from graphdoc.errors import GraphDocError
from graphdoc.fileio import hidden_prefix
from graphdoc.retrieval.finalize import FINAL_DIR, read_build
from graphdoc.retrieval.manifest import MANIFEST_NAME, Manifest

if TYPE_CHECKING:
    from graphdoc.retrieval.searcher import Searcher

SWAP_WAIT_S = 5.0  # how long an open waits for an add's finalising to put its new final/ in place of the old


def wait_for_swap(index_dir: Path) -> bool:
    """Whether ``final/``, missing while an add's finalising had moved it aside (to ``.final.old-PID``) and not
    yet put the new build in its place, is back within ``SWAP_WAIT_S``. An old build left aside with no
    ``final/`` after that (the add was killed between the two renames) is an error saying to rerun the build."""
    final = index_dir / FINAL_DIR
    deadline = time.monotonic() + SWAP_WAIT_S
    while not final.is_dir():
        aside = sorted(index_dir.glob(f"{hidden_prefix(FINAL_DIR)}old-*"))  # as atomic_directory names it
        if not aside:
            return final.is_dir()  # (the swap may have ended, and its old build gone, since the last look)
        if time.monotonic() > deadline:
            raise GraphDocError(f"index {index_dir} has no {FINAL_DIR}/: an add was stopped as it replaced it (its "
                                f"last build is in {aside[0].name}): rerun the build that was interrupted (the same "
                                "build_index call or graphdoc index command)")
        time.sleep(0.01)
    return True


def file_stamp(path: Path) -> tuple[int, int] | None:
    """A file's inode and modification time (``None`` when missing): another after it was replaced."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def build_identity(folder: Path) -> tuple[int, int, str | None] | None:
    """The folder's inode, change time and build id: others when an add's finalising puts a new ``final/`` in its
    place (the build id tells two builds apart even if a later one got the inode of an earlier one)."""
    try:
        stat = os.stat(folder)
        build = read_build(folder)
    except (OSError, GraphDocError):
        return None
    return stat.st_ino, stat.st_ctime_ns, None if build is None else build["build"]


def build_changed(searcher: "Searcher") -> bool:
    """Whether the index of ``searcher`` has a newer build than the one it opened: ``final/`` was replaced (an add
    or a delete finalised), or it was opened while a build was being finalised and the manifest has changed since
    (the manifest's own fields, its counts and fusion, are saved after ``final/``) and says it is finalised now.
    A manifest saved by a build still under way is noted as seen, so that it is not read again until it changes."""
    final_then, manifest_then = searcher.opened
    if build_identity(searcher.index_dir / FINAL_DIR) not in (final_then, None):
        return True
    if not searcher.updating:
        return False
    manifest_now = file_stamp(searcher.index_dir / MANIFEST_NAME)
    if manifest_now == manifest_then:
        return False
    try:
        finalized = Manifest.load(searcher.index_dir).finalized
    except GraphDocError:  # being replaced, or damaged: the next request looks again
        return False
    if not finalized:
        searcher.opened = (final_then, manifest_now)
    return finalized
