"""Atomic file writes: a reader sees the old file or the complete new one, never half of one."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterator


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` (fsynced), else it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Build a folder in a temporary sibling; on success it takes the place of ``path``.

    An existing folder at ``path`` is moved aside first and deleted only once the new one is in place.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        os.replace(path, old)
    os.replace(tmp, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


#: what :func:`atomic_write` and :func:`atomic_directory` leave when a process is killed mid-write
_STALE = re.compile(r"^\..+\.(?:[A-Za-z0-9_]+\.tmp|old-\d+)$")


def remove_stale_temporaries(folder: str | Path) -> list[Path]:
    """Delete the temporary files and folders that a killed atomic write left in ``folder``; returns them.

    Call it only where no other process is writing (a run's own folder, at its start).
    """
    folder = Path(folder)
    stale = [p for p in folder.iterdir() if _STALE.match(p.name)] if folder.is_dir() else []
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return stale
