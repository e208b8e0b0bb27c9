"""CSV and TSV corpora, plain or compressed: one document per row.

The first line names the columns: an id column (``_id``, ``id``, ``docid``, ``doc_id``), a text column
(``text``, ``contents``, ``body``), optionally ``title``; other columns go into the document's ``metadata``, as
other fields of a JSON lines record do. A TSV file without such a header is ``id<TAB>text`` on every line (as
MS MARCO's ``collection.tsv``): its first line is read as a document unless both its fields look like column
names, letters only once spaces, dashes and underscores are taken out (``pid<TAB>passage``, ``Doc ID<TAB>Text``,
refused as a header that names no id and text column); an id holding a digit or other sign (``0``, ``d1``,
``MED-10``) makes it a document, whatever its text. CSV fields follow the usual quoting (a quoted field may hold
commas, quotes as ``""`` and line breaks); TSV fields are taken as they are, with no quoting, unless the header's
names are in double quotes (as R's ``write.table`` writes them): then quoting is read as in CSV. A field of a TSV
read as it is that a CSV writer quoted (pandas' or Python's csv module's ``"a ""b"" c"``, or every field in
quotes) is warned of once. A ``sections`` column is metadata (a cell holds no list of sections). Errors name the
line a row starts on. Columns of other names are read as id, text or title with
:class:`~graphdoc.corpus.fields.Fields` (the file then needs its header).
"""

from __future__ import annotations

import csv
import itertools
import logging
import re
from pathlib import Path
from typing import Iterator

from graphdoc.corpus.fields import Fields
from graphdoc.corpus.files import has_suffix, iter_lines
from graphdoc.corpus.jsonl import IdTracker
from graphdoc.documents import ID_KEYS, TEXT_KEYS, Document
from graphdoc.errors import InputError

logger = logging.getLogger(__name__)

_COMPRESSED = ("", ".gz", ".bz2", ".xz")
CSV_SUFFIXES = tuple(".csv" + c for c in _COMPRESSED)
TSV_SUFFIXES = tuple(".tsv" + c for c in _COMPRESSED)
TABLE_SUFFIXES = CSV_SUFFIXES + TSV_SUFFIXES
#: the column names matched whatever their case
KNOWN_COLUMNS = (*ID_KEYS, *TEXT_KEYS, "title")
#: what a column name looks like once spaces, dashes and underscores are taken out: letters only ("Doc ID",
#: "doc-id", "pid"); a document's id seldom is ("0", "d1", "MED-10"), so a first line that is not two such names is
#: a TSV file's first id<TAB>text document
COLUMN_NAME = re.compile(r"[^\W\d_]+")
#: a field as CSV writers quote one: in double quotes, any inside doubled
_CSV_QUOTED = re.compile(r'"(?:[^"]|"")*"', re.DOTALL)
_LITERAL_TSV = ("a TSV file is read as it is, quotes kept, unless its header's names are in double quotes too: "
                "write it without quoting (csv.QUOTE_NONE) or as CSV")
#: what a column name looks like once spaces and dashes are taken out ("Doc ID", "doc-id")
_SQUASHED = re.compile(r"[\s_-]+")
#: the longest field a row may hold, in characters: a whole long document (the csv module's default is 128 KiB)
FIELD_LIMIT = 2**31 - 1


def read_table_corpus(path: Path, fields: Fields | None = None) -> Iterator[Document]:
    """Yield the documents of a CSV or TSV file (see the module doc; ``fields`` names the columns)."""
    for _, doc in table_documents(path, fields=fields):
        yield doc


def table_documents(path: Path, warn: bool = True, fields: Fields | None = None) -> Iterator[tuple[int, Document]]:
    """``(line, document)`` for each row of a CSV or TSV file: the line its row starts on (a quoted field may
    span lines), which its errors name too. ``warn=False``: a file read again, whose warning was given.
    ``fields`` names the id, text or title columns (matched exactly); the file must then have a header."""
    named = set(fields.named().values()) if fields is not None else set()
    tsv = has_suffix(path, *TSV_SUFFIXES)
    kind = "TSV" if tsv else "CSV"
    if csv.field_size_limit() < FIELD_LIMIT:
        csv.field_size_limit(FIELD_LIMIT)
    where = [0]  # the line the reader has read up to

    def lines() -> Iterator[str]:
        for number, line in iter_lines(path, lone_cr=True):
            where[0] = number
            yield line + "\n"

    source = lines()
    first = next((line for line in source if line.strip()), None)
    if first is None:
        return
    header_line = where[0]
    header, quoted = _header(path, header_line, first, tsv, fields)
    dialect = {"strict": True} if not tsv else {"delimiter": "\t"} if quoted else \
        {"delimiter": "\t", "quoting": csv.QUOTE_NONE}
    reader = csv.reader(source if header is not None else itertools.chain([first], source), **dialect)
    columns = header or ["id", "text"]  # a TSV of id<TAB>text lines, with no header
    literal = tsv and not quoted  # quotes kept as they are: a field quoted as CSV writers quote is warned of once
    warned = not warn
    ids = IdTracker(path, "document")
    start = header_line + 1 if header is not None else header_line  # the line the next row starts on
    try:
        for row in reader:
            lineno, start = start, where[0] + 1
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(columns):
                names = (f"the header (line {header_line}) names {len(columns)}" if header is not None else
                         "a TSV without a header has 2 (id<TAB>text)")
                hint = (" (a field holding a comma must be in double quotes)" if not tsv else
                        f" ({_LITERAL_TSV})" if literal and '"' in "\t".join(row) else "")
                raise InputError(f"{path}:{lineno}: {len(row)} {kind} column(s); {names}{hint}")
            if literal and not warned and _csv_quoted(row):
                logger.warning("%s:%d: a field is in double quotes, as CSV writers quote (pandas, Python's csv "
                               "module); %s", path, lineno, _LITERAL_TSV)
                warned = True
            record = dict(zip(columns, row))
            # a cell holds no list of sections: a column like others (unless a field is named after it)
            sections = record.pop("sections", None) if "sections" not in named else None
            try:
                doc = Document.from_dict(record, fields=fields)
            except InputError as err:
                raise InputError(f"{path}:{lineno}: {err}") from None
            if sections is not None:
                doc.metadata["sections"] = sections
            ids.check(doc.id, lineno)
            yield lineno, doc
    except csv.Error as err:
        unclosed = " a quoted field opened on this line is not closed:" if "end of data" in str(err) else ""
        raise InputError(f"{path}:{start}:{unclosed} not valid {kind} ({err})") from None


def _header(path: Path, lineno: int, line: str, tsv: bool,
            fields: Fields | None = None) -> tuple[list[str] | None, bool]:
    """The column names of the first line, and whether they were in double quotes (a TSV file written with
    quoting, as R's ``write.table``: its fields are unquoted too); ``None`` for a TSV file's first ``id<TAB>text``
    document. Known names are matched whatever their case (``ID``, ``Text``); names ``fields`` gives, exactly."""
    cells = next(csv.reader([line], delimiter="\t", quoting=csv.QUOTE_NONE) if tsv else csv.reader([line]))
    cells = [cell.strip() for cell in cells]
    quoted = tsv and all(len(cell) >= 2 and cell[0] == cell[-1] == '"' for cell in cells)
    names = [cell[1:-1] if quoted else cell for cell in cells]
    mapped = set(fields.named().values()) if fields is not None else set()
    names = [name.lower() if name.lower() in KNOWN_COLUMNS and name not in mapped else name for name in names]
    id_keys = (fields.id,) if fields is not None and fields.id else ID_KEYS
    text_keys = (fields.text,) if fields is not None and fields.text else TEXT_KEYS
    if mapped:
        _check_named_columns(path, lineno, names, fields, id_keys, text_keys)
    if any(name in id_keys for name in names) and any(name in text_keys for name in names):
        repeated = next((name for name in names if names.count(name) > 1), None)
        if repeated is not None:
            raise InputError(f"{path}:{lineno}: the header names column {repeated!r} twice")
        return names, quoted
    if tsv and len(names) == 2 and not all(COLUMN_NAME.fullmatch(_squashed(name)) for name in names):
        return None, False  # a document: an id and a text, not two column names ("Doc ID", "Text" are names)
    shown = ", ".join(repr(name) for name in names[:6]) + (", ..." if len(names) > 6 else "")
    headerless = (" (a TSV file without a header holds id<TAB>text on every line; if this line is a document, "
                  "put a header line id<TAB>text before it)") if tsv and len(names) == 2 else ""
    raise InputError(f"{path}:{lineno}: the first line must name the columns, among them an id ({', '.join(ID_KEYS)}) "
                     f"and a text ({', '.join(TEXT_KEYS)}); it holds {shown}{headerless}")


def _check_named_columns(path: Path, lineno: int, names: list[str], fields: Fields, id_keys: tuple[str, ...],
                         text_keys: tuple[str, ...]) -> None:
    """A header must hold every column ``fields`` names (a file without a header has none to name), and an id
    and a text column of the defaults for the roles not named."""
    shown = ", ".join(repr(name) for name in names[:8]) + (", ..." if len(names) > 8 else "")
    for role, name in fields.named().items():
        if name not in names:
            raise InputError(f"{path}:{lineno}: no column {name!r} (the {role} field named) in the header, which "
                             f"names {shown}")
    for role, keys in (("id", id_keys), ("text", text_keys)):
        if not any(name in keys for name in names):
            raise InputError(f"{path}:{lineno}: the header names no {role} column ({', '.join(keys)}); it names "
                             f"{shown}")


def _csv_quoted(row: list[str]) -> bool:
    """Whether a row read as it is holds a field quoted by a CSV writer: on one line, a writer quotes a TSV field
    for the quotes inside it (doubled), or quotes every field (QUOTE_ALL); a text merely in quotes is not one."""
    quoted = [bool(_CSV_QUOTED.fullmatch(cell)) for cell in row]
    return all(quoted) or any(q and '""' in cell[1:-1] for q, cell in zip(quoted, row))


def _squashed(name: str) -> str:
    return _SQUASHED.sub("", name.lower())
