"""The document store of an index: ids, titles, texts, passage spans and metadata, one JSON line per document.

A ``.offsets.npy`` file beside it holds each line's byte offset, so any document is read directly.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from graphdoc.fileio import atomic_write


def record(document, passages) -> dict[str, Any]:
    """What the store keeps of a document: text, passage spans ``[start, end, section, title]`` and its metadata
    (the record's other fields), when it has any."""
    kept = {"id": document.id, "title": document.title, "text": document.text,
            "passages": [[p.start, p.end, p.section, p.section_title] for p in passages]}
    if document.metadata:
        kept["metadata"] = json_safe(document.metadata)
    return kept


def json_safe(value: Any) -> Any:
    """``value`` as strict JSON holds it: dict keys become strings; a tuple, a NumPy array and a set become lists
    (a set's items sorted, so that it is stored the same in every process); a NumPy scalar is the number or bool
    it holds (a NumPy date or time its text); a NaN or infinite number, or an object JSON has no type for (a date), becomes its ``str``."""
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):  # (dates and times by element, as their text: tolist() makes ns ints)
        value = list(value) if value.dtype.kind in "mMV" else value.tolist()
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [json_safe(item) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True, ensure_ascii=False))
    if isinstance(value, (np.datetime64, np.timedelta64, np.void)):  # (their text, as before NumPy values were read)
        return str(value)
    if isinstance(value, np.generic):  # (np.bool_ is no bool; np.str_ is a str already)
        value = value.item()
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):  # (numpy's integers too)
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value) if math.isfinite(value) else str(value)
    return str(value)


def write_store(path: Path, records: Iterable[dict[str, Any]]) -> int:
    """Write records as JSON lines plus their byte offsets; returns the count."""
    offsets = []
    position = 0
    with atomic_write(path, "wb") as handle:
        for rec in records:
            line = (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")
            offsets.append(position)
            handle.write(line)
            position += len(line)
    with atomic_write(offsets_path(path), "wb") as handle:
        np.save(handle, np.asarray(offsets, dtype=np.int64))
    return len(offsets)


def offsets_path(path: Path) -> Path:
    return path.with_name(path.name + ".offsets.npy")


def iter_store(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            yield json.loads(line)


class DocStore:
    """Random access to the records of a store written by :func:`write_store`.

    A record is read at its offset without moving a shared file position (``os.pread``; a lock where there is
    none), so threads, and processes forked after it was opened, read the records they ask for: a seek and a
    read by one thread between another's gave that one a neighbour's record, or half of one."""

    def __init__(self, path: str | Path, offsets: np.ndarray | None = None) -> None:
        self.path = Path(path)
        self.offsets = np.load(offsets_path(self.path), mmap_mode="r") if offsets is None else offsets
        self._handle = open(self.path, "rb")
        self._size = os.fstat(self._handle.fileno()).st_size
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, row: int) -> dict[str, Any]:
        asked = row = int(row)
        if row < 0:
            row += len(self.offsets)
        if not 0 <= row < len(self.offsets):
            raise IndexError(f"row {asked} of a store of {len(self.offsets)} records")
        start = int(self.offsets[row])
        end = int(self.offsets[row + 1]) if row + 1 < len(self.offsets) else self._size
        return json.loads(self._read(start, end))

    def lines(self, block_bytes: int = 8 * 2**20) -> Iterator[bytes]:
        """Every record's JSON line, in row order, read through the file opened with the store (the build it was
        opened on, even once a newer one took its path), about ``block_bytes`` at a time."""
        rows = len(self.offsets)
        row = 0
        while row < rows:
            start = int(self.offsets[row])
            last = max(row + 1, int(np.searchsorted(self.offsets, start + block_bytes, side="right")) - 1)
            end = int(self.offsets[last]) if last < rows else self._size
            data = self._read(start, end)
            for i in range(row, min(last, rows)):
                stop = int(self.offsets[i + 1]) if i + 1 < rows else self._size
                yield data[int(self.offsets[i]) - start:stop - start]
            row = last

    def _read(self, start: int, end: int) -> bytes:
        """Bytes ``start:end`` of the file, without moving a shared file position."""
        if hasattr(os, "pread"):
            return os.pread(self._handle.fileno(), end - start, start)
        with self._lock:
            self._handle.seek(start)
            return self._handle.read(end - start)

    def is_complete(self) -> bool:
        """Whether the file ends where its offsets say: a line starts at the last offset and the file ends
        with a newline (a truncated store does not)."""
        size = self._handle.seek(0, 2)
        if len(self.offsets) == 0:
            return size == 0
        if int(self.offsets[-1]) >= size:
            return False
        self._handle.seek(size - 1)
        return self._handle.read(1) == b"\n"

    @property
    def closed(self) -> bool:
        return self._handle.closed

    def close(self) -> None:
        self._handle.close()
