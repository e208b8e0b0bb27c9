"""TREC files: topics (``<top> <num> <title> ...``), qrels (``qid 0 docid rel``) and ``qid<TAB>text`` queries."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from graphdoc.errors import InputError
from graphdoc.corpus.beir import QRELS_HEADER, QrelsBuilder, Qrels, parse_relevance
from graphdoc.corpus.files import first_line, iter_lines
from graphdoc.corpus.jsonl import IdTracker

_NUM = re.compile(r"<num>\s*(?:Number:)?\s*([^\s<]+)", re.IGNORECASE)
_TITLE = re.compile(r"<title>\s*(?:Topic:)?\s*(.*?)\s*(?=</title>|<desc>|<narr>|</top>|\Z)", re.IGNORECASE | re.DOTALL)
TSV_HEADER_IDS = ("query-id", "query_id", "qid", "id", "_id")
#: the column holding a query's text in a TSV header of more than two columns
QUERY_TEXT_COLUMNS = ("text", "query")


def read_trec_topics(path: Path) -> Iterator[tuple[str, str]]:
    """Yield ``(topic number, title)`` for each ``<top>...</top>`` block, read one topic at a time (a block may
    open and close on one line); a topic number given twice is an error naming both blocks' lines."""
    ids = IdTracker(path, "topic")
    block: list[str] = []
    start = 0
    for lineno, line in iter_lines(path, lone_cr=True):
        if line.strip().lower().startswith("<top>"):
            if block:
                raise InputError(f"{path}:{lineno}: <top> before the topic opened on line {start} was closed")
            block, start = [line], lineno
        elif block:
            block.append(line)
        elif line.strip():
            raise InputError(f"{path}:{lineno}: expected <top>, got {line.strip()[:40]!r}")
        if block and line.strip().lower().endswith("</top>"):
            topic = _parse_topic(path, start, "\n".join(block))
            ids.check(topic[0], start)
            yield topic
            block = []
    if block:
        raise InputError(f"{path}:{start}: topic opened here is never closed with </top>")


def _parse_topic(path: Path, lineno: int, block: str) -> tuple[str, str]:
    num, title = _NUM.search(block), _TITLE.search(block)
    if num is None:
        raise InputError(f"{path}:{lineno}: topic has no <num>")
    number = num.group(1)
    if title is None or not title.group(1):
        raise InputError(f"{path}:{lineno}: topic {number} has no <title>")
    return number, " ".join(title.group(1).split())


def read_trec_qrels(path: Path) -> Qrels:
    """A TREC qrels file: whitespace-separated ``query-id iteration doc-id relevance`` lines."""
    qrels: Qrels = {}
    qrels_builder = QrelsBuilder(path, qrels)
    for lineno, line in iter_lines(path, lone_cr=True):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 4:
            raise InputError(f"{path}:{lineno}: expected 4 fields (query-id iteration doc-id relevance), "
                             f"got {len(fields)}")
        qid, _, doc_id, rel = fields
        qrels_builder.add(qid, doc_id, parse_relevance(path, lineno, rel), lineno)
    if not qrels:
        raise InputError(f"{path}: the qrels file is empty")
    return qrels


def read_tsv_queries(path: Path) -> Iterator[tuple[str, str]]:
    """Yield ``(query id, text)`` from ``query-id<TAB>text`` lines (a header, the first non-blank line when its
    first column is a query id's name, is skipped; one of more columns, ``_id<TAB>title<TAB>text``, names the
    column the text is read from); an id given twice is an error naming both lines."""
    ids = IdTracker(path, "query")
    columns = None  # (count, text column) when a header names more than two columns
    header_line = 0  # the first non-blank line's number once read (a header may follow blank lines)
    for lineno, line in iter_lines(path, lone_cr=True):
        if not line.strip():
            continue
        qid, tab, text = line.partition("\t")
        if not tab:
            raise InputError(f"{path}:{lineno}: expected 'query-id<TAB>text', found no tab")
        if not header_line:
            header_line = lineno
            if qid.strip().lower() in TSV_HEADER_IDS:
                if is_tsv_qrels(line) and "corpus" in line.lower():  # query-id, corpus-id, score
                    raise InputError(f"{path}: its header {line.strip()!r} is that of a BEIR qrels file, not of "
                                     "queries (query-id<TAB>text)")
                columns = _query_columns(path, lineno, line)
                continue
        if columns is not None:
            cells = line.split("\t")
            while len(cells) > columns[0] and not cells[-1].strip():  # trailing tabs
                cells.pop()
            if len(cells) != columns[0]:
                raise InputError(f"{path}:{lineno}: {len(cells)} columns; the header (line {header_line}) names "
                                 f"{columns[0]}")
            text = cells[columns[1]]
        ids.check(qid.strip(), lineno)
        if not text.strip():
            raise InputError(f"{path}:{lineno}: query {qid.strip()!r} has no text")
        yield qid.strip(), text.strip()


#: a line of TREC qrels (query id, 0 or Q0, document id, relevance) and of a TREC run (query id, Q0, document id,
#: rank, score, tag)
TREC_QRELS_LINE = re.compile(r"\S+\s+(?:0|Q0)\s+\S+\s+[-+]?\d+")
TREC_RUN_LINE = re.compile(r"\S+\s+Q0\s+\S+\s+\d+\s+[-+]?[\d.]+(?:[eE][-+]?\d+)?\s+\S+")
#: lines that are no queries
NOT_QUERIES = {"TREC qrels (query-id 0 doc-id relevance)": TREC_QRELS_LINE,
               "a TREC run (query-id Q0 doc-id rank score tag)": TREC_RUN_LINE}
#: what a qrels reader says of a file whose first line is a TREC run's (given as qrels: eval --qrels run.trec)
RUN_AS_QRELS = "this looks like a run file, which graphdoc eval takes as --run"
#: how many first lines must all look like one of NOT_QUERIES for a file to be refused (a query may look like one)
SNIFFED_LINES = 3


def read_text_queries(path: Path) -> Iterator[tuple[str, str]]:
    """Yield ``(line number, text)`` from a ``.txt`` file of one query a line (blank lines are skipped, and keep
    the ids of the lines after them). A line holding a tab is an error: the file would be a
    ``query-id<TAB>text`` file whose first line lacks its tab; so is a file whose first lines are all TREC
    qrels or run lines, or JSON objects."""
    first: list[str] = []
    for lineno, line in iter_lines(path, lone_cr=True):
        if "\t" in line:
            raise InputError(f"{path}:{lineno}: a tab in a file of one query a line (its first line has none); a "
                             "file of query-id<TAB>text lines has a tab on every line")
        if not line.strip():
            continue
        if len(first) < SNIFFED_LINES:
            first.append(line.strip())
            if len(first) == 1:
                _check_not_json(path, first[0])
            if len(first) == SNIFFED_LINES:
                _check_queries(path, first)
        yield str(lineno), line.strip()
    if 0 < len(first) < SNIFFED_LINES:
        _check_queries(path, first)


def _check_not_json(path: Path, line: str) -> None:
    """Refuse a ``.txt`` whose first line is a JSON object: JSON lines read as text would search their markup."""
    import json

    if line.startswith("{"):
        try:
            is_object = isinstance(json.loads(line), dict)
        except ValueError:
            return
        if is_object:
            raise InputError(f"{path}: its first line is a JSON object: a JSON lines file of queries is read by its "
                             "name, .jsonl (rename it); a .txt file holds one query a line")


def _check_queries(path: Path, lines: list[str]) -> None:
    """Refuse a file whose first ``lines`` all look like TREC qrels or a TREC run (given as the queries)."""
    for what, pattern in NOT_QUERIES.items():
        if all(pattern.fullmatch(line) for line in lines):
            raise InputError(f"{path}: its first lines look like {what}, not queries (a .txt file of queries holds "
                             "one query a line)")


def is_text_queries(path: Path) -> bool:
    """Whether ``path`` is a ``.txt`` file of one query a line: its first line holds no tab (else it is a
    ``query-id<TAB>text`` file) and is no TREC topic."""
    if not (path.is_file() and path.name.lower().endswith(".txt")):
        return False
    try:
        first = first_line(path)
    except InputError:  # not text: the reader says why
        return True
    return "\t" not in first and not is_trec_topics(first)


def _query_columns(path: Path, lineno: int, header: str) -> tuple[int, int] | None:
    """For a header of more than two columns (``_id<TAB>title<TAB>text``): their count and which is the text
    (``text`` or ``query``), read from each line in place of all that follows the id; ``None`` for two."""
    names = [name.strip().lower() for name in header.split("\t")]
    while names and not names[-1]:  # a trailing tab names no column
        names.pop()
    if len(names) <= 2:
        return None
    text = next((i for i, name in enumerate(names) if i and name in QUERY_TEXT_COLUMNS), None)
    if text is None:
        raise InputError(f"{path}:{lineno}: the header names {len(names)} columns and none is the query's text "
                         f"({', '.join(QUERY_TEXT_COLUMNS)}); it holds {header.strip()!r}")
    return len(names), text


def is_trec_topics(first: str) -> bool:
    """Whether a file whose first non-blank line is ``first`` looks like TREC topics."""
    return first.lower().startswith("<top>")


def is_trec_qrels(first: str) -> bool:
    """Whether a first line looks like TREC qrels: four fields, the last a number (one that is no integer, 1.5,
    is then the reader's error, naming the line). An empty file (no first line) is taken as qrels too, so that
    reading it says it is empty rather than of an unknown format."""
    fields = first.split()
    return not first or (len(fields) == 4 and re.fullmatch(r"[-+]?\d+(?:\.\d*)?", fields[3]) is not None)


def is_tsv_qrels(first: str) -> bool:
    """Whether a first line looks like BEIR qrels: three tab-separated fields."""
    return len(first.split("\t")) == 3


def is_qrels_line(line: str) -> bool:
    """Whether ``line`` is one of TREC qrels (``qid 0 docid rel``) or of BEIR qrels (``qid<TAB>docid<TAB>score``,
    or their header)."""
    cells = [cell.strip() for cell in line.strip().split("\t")]
    if len(cells) == 3 and (tuple(c.lower() for c in cells) == QRELS_HEADER or re.fullmatch(r"[-+]?\d+", cells[2])):
        return True
    return TREC_QRELS_LINE.fullmatch(line.strip()) is not None


def run_hint(first: str) -> str | None:
    """What to tell of a file of no qrels format whose first line is ``first``: that it is a run, if it looks so."""
    return RUN_AS_QRELS if TREC_RUN_LINE.fullmatch(first.strip()) else None
