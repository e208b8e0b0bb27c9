"""TREC run files: ``qid Q0 docid rank score tag``, one line per retrieved document."""

from __future__ import annotations

import contextlib
import io
import math
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from graphdoc.errors import GraphDocError, InputError
from graphdoc.fileio import atomic_write, is_stdio
from graphdoc.retrieval.runs import Run, ranked

_SPACE_IN_LINE = re.compile(r"[^\S\n]")
#: what :func:`read_run` says of a file whose first line is a qrels line (graphdoc eval --run qrels.txt)
QRELS_AS_RUN = " (this looks like a qrels file: pass it as --qrels)"


def _check_token(what: str, value: str) -> None:
    if not value or any(c.isspace() for c in value):
        raise GraphDocError(f"{what} {value!r} cannot be written to a TREC run: it is empty or has whitespace")


def unwritable_ids(ids: Sequence[str]) -> list[str]:
    """The ids that cannot go into a TREC run (empty or with whitespace), in order; one regex pass when none."""
    joined = "\n".join(ids)
    if all(ids) and joined.count("\n") == len(ids) - 1 and _SPACE_IN_LINE.search(joined) is None:
        return []
    return [i for i in ids if not i or any(c.isspace() for c in i)]


def run_lines(run: Mapping[str, Mapping[str, float]], tag: str = "graphdoc", k: int | None = None) -> Iterator[str]:
    """The lines of `run` as a TREC run file (see :func:`write_run` for the order)."""
    _check_token("tag", tag)
    return _run_lines(run, tag, k)


def _run_lines(run: Mapping[str, Mapping[str, float]], tag: str, k: int | None):
    for qid, docs in run.items():
        _check_token("query id", qid)
        for rank, (doc, score) in enumerate(ranked(docs, k), start=1):
            _check_token("doc id", doc)
            if not math.isfinite(score):
                raise GraphDocError(f"score {score!r} of query {qid!r}, doc {doc!r} is not finite")
            yield f"{qid} Q0 {doc} {rank} {float(score)!r} {tag}\n"


def _compressor(suffix: str, raw):
    """A compressing stream over ``raw`` for a run named ``*.gz``, ``*.bz2`` or ``*.xz`` (as ir_measures and
    trec_eval's wrappers read them; gzip without a time stamp: the same run gives the same bytes), else ``raw``."""
    import bz2
    import gzip
    import lzma

    openers = {".gz": lambda: gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0),
               ".bz2": lambda: bz2.open(raw, "wb"), ".xz": lambda: lzma.open(raw, "wb")}
    return openers.get(suffix.lower(), lambda: contextlib.nullcontext(raw))()


def write_run(run: Mapping[str, Mapping[str, float]], path: str | Path, tag: str = "graphdoc",
              k: int | None = None) -> None:
    """Write `run` as a TREC run file, atomically (temporary file in the same folder, then rename); a name
    ending in ``.gz``, ``.bz2`` or ``.xz`` is written compressed so.

    Queries keep the run's order; within a query documents are sorted by score desc, ties by doc
    id, and cut to the top `k` if given. Ranks start at 1.
    """
    lines = run_lines(run, tag, k)
    with atomic_write(path, "wb") as raw, _compressor(Path(path).suffix, raw) as binary:
        text = io.TextIOWrapper(binary, encoding="utf-8", newline="\n")
        text.writelines(lines)
        text.flush()
        text.detach()  # the compressor closes itself; the raw file is atomic_write's to close


def _parse_line(line: str, where: str, first: bool = False) -> tuple[str, str, float]:
    """A run line's query id, document id and score; ``first``: the file's first line, which tells a qrels file
    given as a run."""
    parts = line.split()
    if len(parts) != 6:
        from graphdoc.corpus.trec import is_qrels_line

        hint = QRELS_AS_RUN if first and is_qrels_line(line) else ""
        raise InputError(f"{where}: expected 6 columns 'qid Q0 docid rank score tag', got {len(parts)}{hint}")
    qid, _, doc, rank, score, _ = parts
    try:
        int(rank)
    except ValueError:
        raise InputError(f"{where}: rank {rank!r} is not an integer") from None
    try:
        value = float(score)
    except ValueError:
        raise InputError(f"{where}: score {score!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(f"{where}: score {score!r} is not finite")
    return qid, doc, value


def read_run(path: str | Path) -> Run:
    """Read a TREC run file into ``{qid: {docid: score}}``; blank lines and a leading byte-order mark are skipped.
    ``"-"`` reads standard input, and a named pipe (``/dev/stdin``, ``<(...)``) is read as a file.

    The rank column is checked but not used: rankings come from the scores.
    """
    stdin = is_stdio(path)
    path = Path("<stdin>" if stdin else path)
    if path.is_dir():
        raise InputError(f"{path} is a folder, not a run file")
    if not stdin and not path.exists():
        raise InputError(f"run file not found: {path}")
    run: Run = {}
    first = True
    for lineno, line in _numbered_lines(path, stdin):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        qid, doc, score = _parse_line(line, where, first)
        first = False
        docs = run.setdefault(qid, {})
        if doc in docs:
            raise InputError(f"{where}: document {doc!r} listed twice for query {qid!r}")
        docs[doc] = score
    return run


#: what a compressed run file starts with (a file is read as it is, whatever its name: a plain-text run named
#: ``run.gz`` reads as plain text); bzip2's "BZh" and a block size, then a block's or the end's magic
_MAGIC = (("gzip", re.compile(rb"\x1f\x8b")), ("bz2", re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)")),
          ("lzma", re.compile(rb"\xfd7zXZ\x00")))
_HEAD = 10  # bytes that tell them apart


def _numbered_lines(path: Path, stdin: bool) -> Iterator[tuple[int, str]]:
    """The run's lines, numbered from 1: decompressed when it is gzip, bzip2 or xz (a file or standard input), a
    byte-order mark dropped, a bad byte named by its line, lines ended by ``\n``, ``\r\n`` or ``\r``."""
    import importlib

    from graphdoc.corpus.files import READ_ERRORS, decoded_lines

    try:
        # opened once: a named pipe (eval --run <(...)) is read once
        with contextlib.nullcontext(sys.stdin.buffer) if stdin else open(path, "rb") as raw:
            head = b""
            while len(head) < _HEAD and (more := raw.read(_HEAD - len(head))):  # a pipe may give less at a time
                head += more
            kind = next((name for name, magic in _MAGIC if magic.match(head)), None)
            stream = io.BufferedReader(_Prepended(head, raw))
            if kind:
                stream = importlib.import_module(kind).open(stream, "rb")
            yield from decoded_lines(path, stream, lone_cr=True)  # lines ended by a carriage return alone too
    except READ_ERRORS as err:
        raise InputError(f"{path}: cannot read file ({err})") from None


class _Prepended(io.RawIOBase):
    """The bytes ``head``, then the rest of ``rest``: a stream whose first bytes were read to tell its kind."""

    def __init__(self, head: bytes, rest) -> None:
        self.head, self.rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.head:
            n = min(len(buffer), len(self.head))
            buffer[:n], self.head = self.head[:n], self.head[n:]
            return n
        data = self.rest.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)
