"""JSON lines corpora and queries, plain or gzip-compressed, read one line at a time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from graphdoc.documents import Document
from graphdoc.errors import InputError
from graphdoc.corpus.files import iter_lines

#: JSON value type -> how an error message names it.
JSON_TYPE_NAMES = {list: "an array", str: "a string", int: "a number", float: "a number",
                   bool: "true/false", type(None): "null"}

QUERY_ID_KEYS = ("_id", "id", "query_id", "qid")
QUERY_TEXT_KEYS = ("text", "query")


def iter_json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for each non-blank line; a line that is not a JSON object is an error."""
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{path}:{lineno}: invalid JSON ({err.msg})") from None
        if not isinstance(record, dict):
            kind = JSON_TYPE_NAMES.get(type(record), type(record).__name__)
            raise InputError(f"{path}:{lineno}: expected a JSON object, got {kind}")
        yield lineno, record


class IdTracker:
    """Remembers the line each id was first seen on, to report duplicates with both lines."""

    def __init__(self, path: Path, what: str) -> None:
        self.path, self.what, self.first_line = path, what, {}

    def check(self, item_id: str, lineno: int) -> None:
        """Raise :class:`InputError` if ``item_id`` was seen on an earlier line."""
        first = self.first_line.setdefault(item_id, lineno)
        if first != lineno:
            raise InputError(f"{self.path}:{lineno}: duplicate {self.what} id {item_id!r} "
                             f"(first seen on line {first})")


def read_jsonl_corpus(path: Path) -> Iterator[Document]:
    """Yield the documents of a JSON lines file (see :meth:`Document.from_dict` for the fields).

    Keys other than id, text, title and sections (e.g. 20 Newsgroups' ``label``) end up in ``metadata``.
    """
    ids = IdTracker(path, "document")
    for lineno, record in iter_json_objects(path):
        try:
            doc = Document.from_dict(record)
        except InputError as err:
            raise InputError(f"{path}:{lineno}: {err}") from None
        ids.check(doc.id, lineno)
        yield doc


def read_jsonl_queries(path: Path) -> Iterator[tuple[str, str]]:
    """Yield ``(query id, text)`` from a JSON lines file of ``{"_id", "text"}`` objects."""
    ids = IdTracker(path, "query")
    for lineno, record in iter_json_objects(path):
        query_id = _first_field(record, QUERY_ID_KEYS, path, lineno, "id")
        text = _first_field(record, QUERY_TEXT_KEYS, path, lineno, "text")
        ids.check(str(query_id), lineno)
        yield str(query_id), str(text)


def _first_field(record: dict[str, Any], keys: tuple[str, ...], path: Path, lineno: int, what: str) -> Any:
    value = next((record[k] for k in keys if record.get(k) not in (None, "")), None)
    if value is None:
        raise InputError(f"{path}:{lineno}: query has no {what} (expected a non-empty field: {', '.join(keys)})")
    return value
