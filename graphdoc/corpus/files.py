"""Opening corpus files: transparent decompression and line-by-line UTF-8 decoding with file:line errors."""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from pathlib import Path
from typing import IO, Callable, Iterator

from graphdoc.errors import InputError

#: Compressed suffix -> function opening the file for binary reading.
OPENERS: dict[str, Callable[[Path], IO[bytes]]] = {
    ".gz": lambda p: gzip.open(p, "rb"),
    ".bz2": lambda p: bz2.open(p, "rb"),
    ".xz": lambda p: lzma.open(p, "rb"),
}

#: What a broken compressed stream raises while it is read.
READ_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)


def open_binary(path: Path) -> IO[bytes]:
    """Open ``path`` for binary reading, decompressing by suffix (``.gz``, ``.bz2``, ``.xz``)."""
    opener = OPENERS.get(path.suffix.lower())
    return opener(path) if opener else open(path, "rb")


def has_suffix(path: Path, *suffixes: str) -> bool:
    """Whether the file name ends with one of ``suffixes`` (case-insensitive, e.g. ``".jsonl.gz"``)."""
    return path.name.lower().endswith(tuple(s.lower() for s in suffixes))


def bad_utf8(path: Path, err: UnicodeDecodeError, lineno: int = 1) -> InputError:
    """An :class:`InputError` naming the line and column of the first byte of ``err.object`` that is not UTF-8.

    ``lineno`` is the line on which ``err.object`` starts; lines inside it are counted on from there.
    """
    data = err.object
    line_start = data.rfind(b"\n", 0, err.start) + 1
    lineno += data.count(b"\n", 0, err.start)
    column = err.start - line_start + 1
    return InputError(f"{path}:{lineno}: not valid UTF-8 (byte 0x{data[err.start]:02x} at column {column})")


def utf16_problem(data: bytes) -> str | None:
    """Why the start of a file, ``data``, looks like UTF-16 (a byte order mark, or a quarter or more NUL
    bytes: ASCII text in UTF-16 is half NULs), or ``None``."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "it starts with a UTF-16 byte order mark"
    sample = data[:4096]
    nuls = sample.count(0)
    if nuls and 4 * nuls >= len(sample):
        return "many of its bytes are NUL, as in UTF-16 text"
    return None


def utf16_error(path: Path, data: bytes) -> InputError | None:
    """An :class:`InputError` saying that a file whose first bytes are ``data`` is UTF-16, or ``None``."""
    problem = utf16_problem(data)
    if problem is None:
        return None
    return InputError(f"{path}: the file looks like UTF-16 ({problem}); graphdoc reads UTF-8: convert it "
                      "(e.g. iconv -f UTF-16 -t UTF-8)")


def check_not_utf16(path: Path) -> None:
    """Raise :class:`InputError` if the file ``path`` looks like UTF-16 (unreadable files pass: the reader says why)."""
    try:
        with open_binary(path) as stream:
            error = utf16_error(path, stream.read(4096))
    except READ_ERRORS:
        return
    if error is not None:
        raise error


def decode_text(path: Path, data: bytes) -> str:
    """Decode a whole small file as UTF-8 (a BOM is dropped), naming the line of the first bad byte."""
    error = utf16_error(path, data)
    if error is not None:
        raise error
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise bad_utf8(path, err) from None


def iter_lines(path: Path, lone_cr: bool = False) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, line)`` without its line break, decoding each line on its own.

    Decoding line by line lets an encoding error name its line; a BOM on the first line is dropped, and a
    UTF-16 file is named as one. ``lone_cr``: in a file with no line feed at all, a carriage return ends a line
    (old Mac line ends), for formats whose lines hold no such character (TSV, TREC); not for JSON lines, where
    it is whitespace.
    """
    try:
        with open_binary(path) as stream:
            yield from decoded_lines(path, stream, lone_cr)
    except READ_ERRORS as err:
        raise InputError(f"{path}: cannot read file ({err})") from None


def decoded_lines(path: Path, stream: IO[bytes], lone_cr: bool = False) -> Iterator[tuple[int, str]]:
    """:func:`iter_lines` of an open binary ``stream`` (``path`` names it in errors)."""
    lineno = 0
    try:
        for number, raw in enumerate(stream, 1):
            error = utf16_error(path, raw) if number == 1 else None
            if error is not None:
                raise error
            # a file with no LF at all has CR line ends; elsewhere a CR is a stray character of its line
            cr_ends = lone_cr and number == 1 and not raw.endswith(b"\n")
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                if cr_ends:  # name the line as they are counted: CR ends one (same length, same offsets)
                    err = UnicodeDecodeError(err.encoding, raw.replace(b"\r", b"\n"), err.start, err.end, err.reason)
                raise bad_utf8(path, err, lineno + 1) from None
            line = line.rstrip("\r\n")
            for piece in line.split("\r") if cr_ends else (line,):
                lineno += 1
                yield lineno, piece
    except READ_ERRORS as err:
        raise InputError(f"{path}: cannot read file ({err})") from None


def first_line(path: Path) -> str:
    """The first non-blank line of a file, stripped ('' for an empty file); used to sniff formats."""
    for _, line in iter_lines(path, lone_cr=True):  # a TSV or TREC file's lines may end in CR alone
        if line.strip():
            return line.strip()
    return ""
