"""Metadata filters: which documents of an index a search may return.

A filter is a mapping ``{field: value or [values]}``. A document matches when, for every field named, its
metadata value equals one of the values given (AND across fields, OR within a field's values). Values compare as
text (:func:`value_key`), so that ``year=2020`` typed on a command line (the string ``"2020"``) matches the number
2020; a list in the metadata matches when one of its elements does; a document without the field never matches.
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

import numpy as np

from graphdoc.errors import GraphDocError
from graphdoc.fileio import reading
from graphdoc.retrieval.dense import RowSelection
from graphdoc.retrieval.docstore import DocStore

logger = logging.getLogger(__name__)

#: a normalised filter: ``((field, frozenset of value keys), ...)`` sorted by field; hashable, so it keys caches
Conditions = tuple[tuple[str, frozenset], ...]
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
    """One metadata field: a ``(row, value code)`` pair for each document holding it (several for a list)."""

    rows: np.ndarray  # int32 [pairs]
    codes: np.ndarray  # int32 [pairs]
    vocab: dict[str, int]  # value key -> code


def value_keys(value) -> Iterator[str]:
    """The keys (:func:`value_key`) a document's metadata value is matched by: its own, or each element's of a list;
    an object, or a list in a list, has none (it is never matched)."""
    for element in value if isinstance(value, list) else (value,):
        key = value_key(element)
        if key is not None:
            yield key


class MetadataTable:
    """Every document's scalar metadata values, by field, read once from an index's document store: memory grows
    with the values held (8 bytes a value, plus each distinct value once), not with the fields times documents."""

    def __init__(self, columns: dict[str, _Column], size: int) -> None:
        self.columns, self.size = columns, size

    @classmethod
    def read(cls, lines: Iterable[bytes], size: int) -> MetadataTable:
        """From the first ``size`` lines of a document store (JSON records whose ``metadata`` is an object)."""
        building: dict[str, tuple[array, array, dict[str, int]]] = {}
        for row, line in zip(range(size), lines):
            for field, value in _metadata(line).items():
                rows, codes, vocab = building.setdefault(field, (array("i"), array("i"), {}))
                for key in value_keys(value):
                    rows.append(row)
                    codes.append(vocab.setdefault(key, len(vocab)))
        columns = {field: _Column(np.asarray(rows, dtype=np.int32), np.asarray(codes, dtype=np.int32), vocab)
                   for field, (rows, codes, vocab) in building.items()}
        return cls(columns, size)

    @property
    def fields(self) -> list[str]:
        """The metadata fields some document has, sorted."""
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
        if not fields:
            return f"unknown filter field {field!r}: the documents of {where} have no metadata"
        close = difflib.get_close_matches(field, fields, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        shown = ", ".join(fields[:SHOWN_FIELDS]) + (f", ... ({len(fields)} in all)" if len(fields) > SHOWN_FIELDS
                                                    else "")
        return f"unknown filter field {field!r}{hint}: no document of {where} has it; fields: {shown}"


#: distinct values a field's summary counts: past this, "at least" (a field of ids or URLs would hold them all)
SUMMARY_VALUES = 1000


class MetadataSummary:
    """What a filter may name in an index: for each metadata field, how many documents have it and how many distinct
    values a filter matches (counted to :data:`SUMMARY_VALUES`), gathered while ``final/`` is written."""

    def __init__(self) -> None:
        self._documents: dict[str, int] = {}
        self._values: dict[str, set[str]] = {}

    def add(self, metadata: Mapping) -> None:
        for field, value in metadata.items():
            self._documents[field] = self._documents.get(field, 0) + 1
            values = self._values.setdefault(field, set())
            if len(values) <= SUMMARY_VALUES:  # (one past the cap tells "more than")
                values.update(value_keys(value))

    def to_dict(self) -> dict[str, dict[str, int | bool]]:
        """``{field: {"documents": n, "values": m}}``, sorted by field; ``"values_capped": true`` where there are more
        than ``m``."""
        summary: dict[str, dict[str, int | bool]] = {}
        for field in sorted(self._documents):
            count = len(self._values[field])
            summary[field] = {"documents": self._documents[field], "values": min(count, SUMMARY_VALUES)}
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
