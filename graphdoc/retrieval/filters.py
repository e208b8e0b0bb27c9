"""Metadata filters: which documents of an index a search may return.

A filter is a mapping ``{field: value or [values]}``. A document matches when, for every field named, its
metadata value equals one of the values given (AND across fields, OR within a field's values). Values compare as
text (:func:`value_key`), so that ``year=2020`` typed on a command line (the string ``"2020"``) matches the number
2020; a list in the metadata matches when one of its elements does; a document without the field never matches.

A field is a top-level metadata key or, inside objects, a dotted path (:func:`leaves`): ``metadata.year`` names
``{"metadata": {"year": 2020}}``'s year, and ``authors.name`` the names of a list of objects. A top-level key that
holds a dot (``{"a.b": 1}``) is named as it is: where some document has it, ``a.b`` is that key, not the path into
``{"a": {"b": ...}}``. A field that holds only objects is named by the paths inside it, not by itself.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import numbers
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from graphdoc.errors import GraphDocError
from graphdoc.fileio import reading
from graphdoc.retrieval.dense import RowSelection
from graphdoc.retrieval.docstore import DocStore

logger = logging.getLogger(__name__)

#: a normalised filter: ``((field, frozenset of value keys), ...)`` sorted by field; hashable, so it keys caches
Conditions = tuple[tuple[str, frozenset], ...]
#: a field where :func:`leaves` found it: ``(nested, name)``, ``nested`` false for a top-level key
Found = tuple[bool, str]
T = TypeVar("T")
SHOWN_FIELDS = 10  # fields an unknown-field error lists
SELECTIONS = 8  # filters whose selections an index's searcher keeps (each: a bool a document, one a passage)

_METADATA_KEY = b', "metadata": '  # as json.dumps writes a record's metadata after its other fields
_DECODER = json.JSONDecoder()


def value_key(value) -> str | None:
    """The text a metadata or filter value compares as, or ``None`` for one that is no scalar (an object, a list).

    A string is itself; ``None`` is ``"null"``, booleans ``"true"``/``"false"``; an integer, or a float with an
    integer value, is its decimal digits (``2020``, ``2020.0`` and ``"2020"`` are all ``"2020"``); another float
    is its shortest repr (``0.5``), NaN and infinities ``"nan"``, ``"inf"``, ``"-inf"`` (as an index stores them).
    """
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            return str(number)
        return str(int(number)) if number.is_integer() else repr(number)
    return None


def normalize_filter(filter: Mapping | None) -> Conditions | None:
    """``filter`` checked and made hashable; ``None`` for no filter (``None`` or an empty mapping). A field is a
    non-empty string; its value a scalar (string, number, boolean, null) or a non-empty list of them."""
    if filter is None:
        return None
    if not isinstance(filter, Mapping):
        raise GraphDocError(f"a filter is a mapping {{field: value or [values]}}; got {type(filter).__name__}")
    conditions = []
    for field, given in filter.items():
        if not isinstance(field, str) or not field:
            raise GraphDocError(f"a filter's fields are non-empty strings; got {field!r}")
        values = list(given) if isinstance(given, (list, tuple, set, frozenset)) else [given]
        if not values:
            raise GraphDocError(f"filter field {field!r} has an empty list of values; give at least one")
        keys = [value_key(value) for value in values]
        if None in keys:
            bad = values[keys.index(None)]
            raise GraphDocError(f"filter field {field!r}: a value is a string, number, boolean or null (or a list "
                                f"of them); got {type(bad).__name__} {_short(bad)}")
        conditions.append((field, frozenset(keys)))
    return tuple(sorted(conditions, key=lambda condition: condition[0])) or None


def filter_from_pairs(pairs: Iterable[str] | None, name: str = "--filter") -> dict[str, list[str]] | None:
    """``FIELD=VALUE`` strings (``name`` says where they were given) as a filter, each split at its first ``=``:
    a field given twice takes either value, different fields must all match. ``None`` when none is given."""
    conditions: dict[str, list[str]] = {}
    for pair in pairs or ():
        field, equals, value = pair.partition("=")
        if not equals or not field:
            raise GraphDocError(f"{name} takes FIELD=VALUE (split at the first =); got {pair!r}")
        conditions.setdefault(field, []).append(value)
    return conditions or None


@dataclass
class _Column:
    """One metadata field: a ``(row, value code)`` pair for each value a document holds in it (several for a list)."""

    rows: np.ndarray  # int32 [pairs]
    codes: np.ndarray  # int32 [pairs]
    vocab: dict[str, int]  # value key -> code
    nested: bool = False  # a path into objects, not a top-level key


def leaves(metadata: Mapping) -> Iterator[tuple[Found, str]]:
    """``((nested, field), key)`` for each value of one document's metadata a filter can match (its key:
    :func:`value_key`): a top-level key's value, or each element of its list, under the key; a value inside an
    object, or inside an object in a list, under the dotted path to it (``metadata.year``), ``nested`` true. A
    list in a list holds none."""
    for field, value in metadata.items():
        yield from _leaves(str(field), value, False)


def _leaves(name: str, value, nested: bool) -> Iterator[tuple[Found, str]]:
    for element in value if isinstance(value, list) else (value,):
        if isinstance(element, Mapping):
            for key, inner in element.items():
                yield from _leaves(f"{name}.{key}", inner, True)
        else:
            key = value_key(element)  # (None for a list in a list: never matched)
            if key is not None:
                yield (nested, name), key


def by_name(found: Mapping[Found, T]) -> dict[str, T]:
    """``found`` by field name, sorted: where a top-level key holding a dot spells a nested path too (``a.b``), the
    key wins (a filter names it; the path cannot be named)."""
    named: dict[str, T] = {}
    for (_, name), item in sorted(found.items(), key=lambda pair: pair[0]):  # (top-level keys first)
        named.setdefault(name, item)
    return dict(sorted(named.items()))


class MetadataTable:
    """Every document's scalar metadata values, by field, read once from an index's document store: memory grows
    with the values held (8 bytes a value, plus each distinct value once), not with the fields times documents."""

    def __init__(self, columns: dict[str, _Column], size: int) -> None:
        self.columns, self.size = columns, size

    @classmethod
    def read(cls, lines: Iterable[bytes], size: int) -> MetadataTable:
        """From the first ``size`` lines of a document store (JSON records whose ``metadata`` is an object)."""
        building: dict[Found, tuple[array, array, dict[str, int]]] = {}
        for row, line in zip(range(size), lines):
            for field, key in leaves(_metadata(line)):
                rows, codes, vocab = building.setdefault(field, (array("i"), array("i"), {}))
                rows.append(row)
                codes.append(vocab.setdefault(key, len(vocab)))
        columns = {(nested, name): _Column(np.asarray(rows, dtype=np.int32), np.asarray(codes, dtype=np.int32),
                                           vocab, nested)
                   for (nested, name), (rows, codes, vocab) in building.items()}
        return cls(by_name(columns), size)

    @property
    def fields(self) -> list[str]:
        """The fields a filter may name, sorted: those holding a value some document has (see the module doc)."""
        return sorted(self.columns)

    def mask(self, conditions: Conditions, where: str = "the index") -> np.ndarray:
        """Which documents match (bool ``[size]``); a field no document has is an error naming the fields there
        are (``where`` names the index)."""
        for field, _ in conditions:
            if field not in self.columns:
                raise GraphDocError(self._unknown(field, where))
        mask = np.ones(self.size, dtype=bool)
        for field, keys in conditions:
            column = self.columns[field]
            codes = [column.vocab[key] for key in keys if key in column.vocab]
            matched = np.zeros(self.size, dtype=bool)
            matched[column.rows[np.isin(column.codes, codes)]] = True
            mask &= matched
        return mask

    def _unknown(self, field: str, where: str) -> str:
        fields = self.fields
        inside = [name for name in fields if self.columns[name].nested and name.startswith(field + ".")]
        if inside:
            return (f"filter field {field!r} holds objects, which no value matches: name a field inside them, as "
                    f"{inside[0]!r} (fields there: {_listed(inside)})")
        if not fields:
            return f"unknown filter field {field!r}: the documents of {where} have no metadata"
        close = difflib.get_close_matches(field, fields, n=1)
        hint = (" (a document's id, title and text are no metadata)" if field in ("id", "title", "text") else
                f" (did you mean {close[0]!r}?)" if close else "")
        return f"unknown filter field {field!r}{hint}: no document of {where} has it; fields: {_listed(fields)}"


def _listed(fields: list[str]) -> str:
    return ", ".join(fields[:SHOWN_FIELDS]) + (f", ... ({len(fields)} in all)" if len(fields) > SHOWN_FIELDS else "")


#: distinct values a field's summary counts: past this, "at least" (a field of ids or URLs would hold them all)
SUMMARY_VALUES = 1000


class MetadataSummary:
    """What a filter may name in an index (the fields of :attr:`MetadataTable.fields`): for each, how many documents
    hold a value in it and how many distinct values a filter matches (counted to :data:`SUMMARY_VALUES`), gathered
    while ``final/`` is written."""

    def __init__(self) -> None:
        self._documents: dict[Found, int] = {}
        self._values: dict[Found, set[str]] = {}

    def add(self, metadata: Mapping) -> None:
        counted = set()  # (a document counted once for a field, however many values it holds there)
        for field, key in leaves(metadata):
            if field not in counted:
                counted.add(field)
                self._documents[field] = self._documents.get(field, 0) + 1
            values = self._values.setdefault(field, set())
            if len(values) <= SUMMARY_VALUES:  # (one past the cap tells "more than")
                values.add(key)

    def to_dict(self) -> dict[str, dict[str, int | bool]]:
        """``{field: {"documents": n, "values": m}}``, sorted by field; ``"values_capped": true`` where there are more
        than ``m``."""
        summary: dict[str, dict[str, int | bool]] = {}
        seen = by_name({field: (self._documents[field], len(values)) for field, values in self._values.items()})
        for field, (documents, count) in seen.items():
            summary[field] = {"documents": documents, "values": min(count, SUMMARY_VALUES)}
            if count > SUMMARY_VALUES:
                summary[field]["values_capped"] = True
        return summary


class MetadataFilters:
    """The selections of filters over the documents of one document store (an index build's): its metadata is
    read once, on the first filter, and the last :data:`SELECTIONS` filters' selections are kept. Threads may
    share it (one reads the store while the others wait for it)."""

    def __init__(self, store: DocStore, where: str = "the index") -> None:
        self.store, self.size, self.where = store, len(store), where
        self._table: MetadataTable | None = None
        self._table_lock, self._lock = threading.Lock(), threading.Lock()
        self._selections: OrderedDict[Conditions, RowSelection] = OrderedDict()

    @property
    def table(self) -> MetadataTable:
        """Every document's metadata values (the store is read, its metadata only, the first time)."""
        if self._table is None:
            with self._table_lock:
                if self._table is None:
                    logger.debug("reading the metadata of %d documents from %s", self.size, self.store.path)
                    with reading(self.store.path):  # (the file opened with the searcher: its build's records)
                        self._table = MetadataTable.read(self.store.lines(), self.size)
        return self._table

    def selection(self, filter: Mapping | None) -> RowSelection | None:
        """The documents ``filter`` keeps (see the module doc), or ``None`` for no filter (``None``, ``{}``)."""
        conditions = normalize_filter(filter)
        if conditions is None:
            return None
        with self._lock:
            if conditions in self._selections:
                self._selections.move_to_end(conditions)
                return self._selections[conditions]
        selection = RowSelection(self.table.mask(conditions, self.where))
        with self._lock:
            self._selections[conditions] = selection
            while len(self._selections) > SELECTIONS:
                self._selections.popitem(last=False)
        return selection


def _metadata(line: bytes) -> dict:
    """A store record's metadata, decoding only the end of its line where it can (past the text, the bulk of it):
    ``, "metadata": `` cannot occur inside a JSON string (its quote would be escaped), and no field before it
    holds an object, so its first occurrence is the record's own key."""
    at = line.find(_METADATA_KEY)
    if at >= 0:
        value, _ = _DECODER.raw_decode(line[at + len(_METADATA_KEY):].decode("utf-8"))
    elif b'"metadata"' in line:  # (a record written with its keys in another order)
        value = json.loads(line).get("metadata")
    else:
        return {}
    return value if isinstance(value, dict) else {}


def _short(value, most: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= most else text[:most - 3] + "..."
