"""CSV and TSV corpora, plain or compressed: one document per row.

The first line names the columns: an id column (``_id``, ``id``, ``docid``, ``doc_id``), a text column
(``text``, ``contents``, ``body``), optionally ``title``; other columns go into the document's ``metadata``, as
other fields of a JSON lines record do. A TSV file without such a header is ``id<TAB>text`` on every line (as
MS MARCO's ``collection.tsv``). CSV fields follow the usual quoting (a quoted field may hold commas, quotes as
``""`` and line breaks); TSV fields are taken as they are, with no quoting.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterator

from graphdoc.corpus.files import has_suffix, iter_lines
from graphdoc.corpus.jsonl import IdTracker
from graphdoc.documents import ID_KEYS, TEXT_KEYS, Document
from graphdoc.errors import InputError

_COMPRESSED = ("", ".gz", ".bz2", ".xz")
CSV_SUFFIXES = tuple(".csv" + c for c in _COMPRESSED)
TSV_SUFFIXES = tuple(".tsv" + c for c in _COMPRESSED)
#: the longest field a row may hold, in characters: a whole long document (the csv module's default is 128 KiB)
FIELD_LIMIT = 2**31 - 1


def read_table_corpus(path: Path) -> Iterator[Document]:
    """Yield the documents of a CSV or TSV file (see the module doc)."""
    tsv = has_suffix(path, *TSV_SUFFIXES)
    kind = "TSV" if tsv else "CSV"
    lines = (line + "\n" for _, line in iter_lines(path, lone_cr=tsv))
    dialect = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if tsv else {"strict": True}
    reader = csv.reader(lines, **dialect)
    if csv.field_size_limit() < FIELD_LIMIT:
        csv.field_size_limit(FIELD_LIMIT)
    ids = IdTracker(path, "document")
    try:
        header = None
        for row in reader:
            lineno = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if header is None:
                header = _header(path, row, tsv)
                if header is not None:
                    continue
                header = ["id", "text"]  # a TSV of id<TAB>text lines, with no header: this row is a document
            if len(row) != len(header):
                raise InputError(f"{path}:{lineno}: {len(row)} {kind} column(s), the header names {len(header)}"
                                 + ("" if tsv else " (a field holding a comma must be in double quotes)"))
            try:
                doc = Document.from_dict(dict(zip(header, row)))
            except InputError as err:
                raise InputError(f"{path}:{lineno}: {err}") from None
            ids.check(doc.id, lineno)
            yield doc
    except csv.Error as err:
        raise InputError(f"{path}:{reader.line_num}: not valid {kind} ({err})") from None


def _header(path: Path, row: list[str], tsv: bool) -> list[str] | None:
    """The column names of a first line; ``None`` for a TSV file's first ``id<TAB>text`` document."""
    names = [name.strip() for name in row]
    if any(name in ID_KEYS for name in names) and any(name in TEXT_KEYS for name in names):
        repeated = next((name for name in names if names.count(name) > 1), None)
        if repeated is not None:
            raise InputError(f"{path}:1: the header names column {repeated!r} twice")
        return names
    if tsv and len(names) == 2:
        return None
    shown = ", ".join(repr(name) for name in names[:6]) + (", ..." if len(names) > 6 else "")
    raise InputError(f"{path}:1: the first line must name the columns, among them an id ({', '.join(ID_KEYS)}) "
                     f"and a text ({', '.join(TEXT_KEYS)}); it holds {shown}")
