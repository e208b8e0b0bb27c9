"""Documents held in memory as a corpus: a list (any sequence) of JSON-style records or :class:`Document` objects.

A :class:`MemoryCorpus` is named by a hash of its records, ``memory:sha256:<16 hex digits>`` (the canonical JSON
of each record, in order), so that an index that read it knows the same documents given again: a build stopped
part-way resumes, one finished adds nothing, and another list is another corpus. Its records are checked all at
once (types, ids, duplicates, text) before any is read, so that a bad one fails before an index is touched.

A generator or iterator is refused, since it can be read only once and a build reads its corpus more than once;
so is a plain string (it has no id: give ``{"id": ..., "text": ...}``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator as IteratorType, Mapping, Sequence
from typing import Any, Iterator

from graphdoc.documents import Document, id_problem
from graphdoc.errors import InputError
from graphdoc.corpus.fields import Fields

#: how a key of documents in memory starts
KEY_PREFIX = "memory:sha256:"


class MemoryCorpus:
    """The documents of ``records`` (dicts as one JSON lines record each, or :class:`Document` objects), kept by
    reference, not copied; ``key`` names them in an index's manifest. Wrong types fail here, naming the record."""

    def __init__(self, records: Sequence[Mapping[str, Any] | Document], name: str | None = None) -> None:
        """``name``: what messages call the records (``"the JSON lines piped in"``); by default their type and key."""
        if not records:
            raise InputError(f"{name or 'the ' + _kind(records)} of documents is empty: there is nothing to read")
        self.records = records
        self.key = KEY_PREFIX + _digest(records)[:16]
        self.name = name
        self._checked: set[Fields] = set()

    def __len__(self) -> int:
        return len(self.records)

    def __str__(self) -> str:
        return f"{self.name} ({self.key})" if self.name else f"the {_kind(self.records)} {self.key}"

    def __repr__(self) -> str:
        return f"MemoryCorpus({len(self)} records, {self.key})"

    def documents(self, fields: Fields | None = None) -> Iterator[Document]:
        """Every record checked first (ids, duplicates, fields: an :class:`InputError` naming its position), then
        its documents, one at a time. ``fields`` names the fields of dict records (:class:`Fields`)."""
        fields = fields if fields is not None else Fields()
        if fields not in self._checked:
            self._check(fields)
            self._checked.add(fields)
        return (self._document(i, fields) for i in range(len(self.records)))

    def _check(self, fields: Fields) -> None:
        """Refuse the first record that cannot be read with ``fields``, or whose id is bad or seen before."""
        first: dict[str, int] = {}
        for i in range(len(self.records)):
            doc = self._document(i, fields)
            problem = id_problem(doc.id)
            if problem:
                raise InputError(f"{_where(i)}: document id {doc.id!r} {problem}")
            seen = first.setdefault(doc.id, i)
            if seen != i:
                raise InputError(f"{_where(i)}: duplicate document id {doc.id!r} (first seen at document {seen})")

    def _document(self, i: int, fields: Fields) -> Document:
        record = self.records[i]
        if isinstance(record, Document):
            if not fields.is_default:
                raise InputError(f"{_where(i)} is a graphdoc.Document: field names (fields=) apply to dict "
                                 "records only")
            return record
        try:
            return Document.from_dict(record, fields=fields)
        except InputError as err:
            raise InputError(f"{_where(i)}: {err}") from None


def corpus_argument(corpus: Any) -> "str | os.PathLike[str] | MemoryCorpus":
    """What an index build reads: a path or corpus name as given, or documents in memory (any sequence of dicts
    or :class:`Document` objects) as a :class:`MemoryCorpus`; anything else is an :class:`InputError`."""
    if isinstance(corpus, (str, os.PathLike, MemoryCorpus)):
        return corpus
    if isinstance(corpus, IteratorType):
        raise InputError(f"corpus is a {type(corpus).__name__}, which can be read only once, but an index build "
                         "reads its documents more than once (to check them first, to resume): pass a list "
                         "(list(documents)), or write them to a JSON lines file to stream a large corpus")
    if isinstance(corpus, Sequence) and not isinstance(corpus, (bytes, bytearray)):
        return MemoryCorpus(corpus)
    raise InputError(f"corpus must be the path or name of a corpus, or a list of documents (dicts or "
                     f"graphdoc.Document); got a {type(corpus).__name__}")


def _digest(records: Sequence) -> str:
    """The SHA-256 of the records' canonical JSON, one line each, in order: one record at a time in memory."""
    digest = hashlib.sha256()
    for i, record in enumerate(records):
        digest.update(_canonical(i, record).encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()


def _canonical(i: int, record: Any) -> str:
    """A record as JSON with sorted keys and no spaces, its values as the index's document store keeps them
    (:func:`~graphdoc.retrieval.docstore.json_safe`: a set sorted, a NumPy value as the number or list it holds, a
    value JSON has no type for as its ``str``, whose text must not change between runs for the same documents to
    be known again); a :class:`Document` as ``[id, title, text, sections, metadata]``."""
    from graphdoc.retrieval.docstore import json_safe

    if isinstance(record, Document):
        sections = None if record.sections is None else [[s.title, s.start, s.end] for s in record.sections]
        record = ["graphdoc.Document", record.id, record.title, record.text, sections, record.metadata]
    elif isinstance(record, Mapping):
        record = dict(record)
    else:
        why = " (a string has no id: give {\"id\": ..., \"text\": ...})" if isinstance(record, str) else ""
        raise InputError(f"{_where(i)} is a {type(record).__name__}, not a dict or a graphdoc.Document{why}")
    try:
        return json.dumps(json_safe(record), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:
        raise InputError(f"{_where(i)} is not a JSON-style record (it holds itself)") from None


def _where(i: int) -> str:
    return f"document {i} of the list (counting from 0)"


def _kind(records: Sequence) -> str:
    return "tuple" if isinstance(records, tuple) else "list"
