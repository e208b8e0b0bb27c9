"""JSON lines corpora and queries, plain or gzip-compressed, read one line at a time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from graphdoc.documents import Document, id_problem, lone_surrogate, scalar_id
from graphdoc.errors import InputError
from graphdoc.corpus.fields import Fields
from graphdoc.corpus.files import iter_lines

#: JSON value type -> how an error message names it.
JSON_TYPE_NAMES = {list: "an array", str: "a string", int: "a number", float: "a number",
                   bool: "true/false", type(None): "null"}

QUERY_ID_KEYS = ("_id", "id", "query_id", "qid")
QUERY_TEXT_KEYS = ("text", "query")


NOT_JSON_LINES = "not JSON lines (one JSON object per line)"
_JSON_SPACE = " \t\r\n"


def iter_json_objects(path: Path,
                      lines: Iterable[tuple[int, str]] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for each non-blank line; a line that is not a JSON object is an error.

    A file that is one JSON array, or JSON pretty-printed over several lines, is named as such on its first line.
    ``lines``, ``(line number, line)`` pairs, replaces reading the file (``path`` then names them in errors).
    """
    first = True
    for lineno, line in iter_lines(path) if lines is None else lines:
        if not line.strip():
            continue
        if first and line.lstrip().startswith("["):
            raise InputError(f"{path}:{lineno}: the file is a JSON array, {NOT_JSON_LINES}")
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise json_error(path, lineno, line, err, first) from None
        first = False
        if not isinstance(record, dict):
            kind = JSON_TYPE_NAMES.get(type(record), type(record).__name__)
            raise InputError(f"{path}:{lineno}: expected a JSON object, got {kind}")
        yield lineno, record


def json_error(path: Path, lineno: int, line: str, err: json.JSONDecodeError, first: bool) -> InputError:
    """The one-line error for a line that is not valid JSON: its column, and what the file seems to be when
    an object does not end on its line (pretty-printed JSON, or a record broken over lines)."""
    reason = f"{err.msg.removesuffix(' at')} at column {err.colno}"  # json's "Invalid control character at"
    if err.msg == "Extra data":
        reason += f": {line[err.pos:err.pos + 12]!r}; JSON lines hold one object per line"
    elif line.lstrip().startswith("{") and (err.pos >= len(line.rstrip(_JSON_SPACE))
                                             or err.msg.startswith("Unterminated string")):
        if first:
            return InputError(f"{path}:{lineno}: the object does not end on its line: the file looks like "
                              f"pretty-printed JSON, {NOT_JSON_LINES}")
        reason += "; the object does not end on this line: JSON lines hold one object per line"
    return InputError(f"{path}:{lineno}: invalid JSON ({reason})")


def check_id(path: Path, lineno: int, what: str, item_id: str) -> None:
    """Raise :class:`InputError` naming the line if ``item_id`` cannot be an id (see :func:`id_problem`)."""
    problem = id_problem(item_id, single_token=what != "document")
    if problem:
        raise InputError(f"{path}:{lineno}: {what} id {item_id!r} {problem}")


class IdTracker:
    """Checks each id and remembers the line it was first seen on, to report duplicates with both lines."""

    def __init__(self, path: Path, what: str) -> None:
        self.path, self.what, self.first_line = path, what, {}

    def check(self, item_id: str, lineno: int) -> None:
        """Raise :class:`InputError` if ``item_id`` cannot be an id or was seen on an earlier line."""
        check_id(self.path, lineno, self.what, item_id)
        first = self.first_line.setdefault(item_id, lineno)
        if first != lineno:
            raise InputError(f"{self.path}:{lineno}: duplicate {self.what} id {item_id!r} "
                             f"(first seen on line {first})")


def read_jsonl_corpus(path: Path, fields: Fields | None = None) -> Iterator[Document]:
    """Yield the documents of a JSON lines file (see :meth:`Document.from_dict` for the fields; ``fields``
    names others).

    Keys other than id, text, title and sections (e.g. 20 Newsgroups' ``label``) end up in ``metadata``.
    """
    return (doc for _, doc in checked_records(path, fields))


def checked_records(path: Path, fields: Fields | None = None,
                    lines: Iterable[tuple[int, str]] | None = None) -> Iterator[tuple[dict[str, Any], Document]]:
    """Each record of a JSON lines file with its document, checked (fields, id, duplicates), a bad one named by
    its line; ``lines`` replaces reading the file, as for :func:`iter_json_objects`."""
    ids = IdTracker(path, "document")
    for lineno, record in iter_json_objects(path, lines):
        try:
            doc = Document.from_dict(record, fields=fields)
        except InputError as err:
            raise InputError(f"{path}:{lineno}: {err}") from None
        ids.check(doc.id, lineno)
        yield record, doc


def read_jsonl_queries(path: Path) -> Iterator[tuple[str, str]]:
    """Yield ``(query id, text)`` from a JSON lines file of ``{"_id", "text"}`` objects."""
    ids = IdTracker(path, "query")
    for lineno, record in iter_json_objects(path):
        id_key = _first_field(record, QUERY_ID_KEYS, path, lineno, "id")
        text_key = _first_field(record, QUERY_TEXT_KEYS, path, lineno, "text")
        try:
            query_id = scalar_id(record[id_key], id_key)
        except InputError as err:
            raise InputError(f"{path}:{lineno}: {err}") from None
        ids.check(query_id, lineno)
        text = record[text_key]
        if not isinstance(text, str):  # a list would be searched as its Python repr
            raise InputError(f"{path}:{lineno}: query {query_id!r}: {text_key} must be a string, got "
                             f"{type(text).__name__}")
        for what, value in (("id", query_id), ("text", text)):
            surrogate = lone_surrogate(value)
            if surrogate:
                raise InputError(f"{path}:{lineno}: query {query_id!r}: {what} is not valid Unicode "
                                 f"(lone surrogate {surrogate})")
        yield query_id, text


def _first_field(record: dict[str, Any], keys: tuple[str, ...], path: Path, lineno: int, what: str) -> str:
    """The first of ``keys`` with a non-empty value in ``record``."""
    key = next((k for k in keys if record.get(k) is not None and str(record[k]).strip()), None)
    if key is None:
        raise InputError(f"{path}:{lineno}: query has no {what} (expected a non-empty field: {', '.join(keys)})")
    return key
