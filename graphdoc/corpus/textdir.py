"""Plain-text and Markdown files as documents: one file, or a folder of them read recursively."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

from graphdoc.documents import Document, Section, id_problem, lone_surrogate
from graphdoc.errors import InputError
from graphdoc.corpus.files import decode_text
from graphdoc.corpus.markup import markdown_sections, markdown_title

#: File suffix -> (function giving the sections, function giving the title or '').
TEXT_FILE_TYPES: dict[str, tuple[Callable[[str], list[Section]], Callable[[str], str]]] = {
    ".md": (markdown_sections, markdown_title),
    ".txt": (markdown_sections, markdown_title),
}


def is_text_file(path: Path) -> bool:
    """Whether ``path`` is a file with one of the :data:`TEXT_FILE_TYPES` suffixes."""
    return path.is_file() and path.suffix.lower() in TEXT_FILE_TYPES


def text_files(folder: Path) -> list[Path]:
    """The text files under ``folder``, recursively, sorted by relative path; hidden ones are left out."""
    found = (p for p in folder.rglob("*") if is_text_file(p))
    visible = (p for p in found if not any(part.startswith(".") for part in p.relative_to(folder).parts))
    return sorted(visible, key=lambda p: p.relative_to(folder).as_posix())


def read_text_file(path: Path, doc_id: str | None = None) -> Document:
    """One file as a document: sections from its headings; title from its first ``#`` heading, else its stem."""
    doc_id = file_id(path, doc_id if doc_id is not None else path.stem)
    text = decode_text(path, path.read_bytes()).replace("\r\n", "\n")
    sections_of, title_of = TEXT_FILE_TYPES[path.suffix.lower()]
    return Document(id=doc_id, text=text, title=title_of(text) or path.stem, sections=sections_of(text),
                    metadata={"path": str(path)})


def file_id(path: Path, doc_id: str) -> str:
    """``doc_id``, made from the name of ``path``, or an :class:`InputError` if it cannot be an id."""
    if lone_surrogate(doc_id):  # Python escapes the bytes of a file name that are not UTF-8 as surrogates
        raise InputError(f"{_shown(path)}: file name is not valid UTF-8 (it makes the document id); rename the file")
    problem = id_problem(doc_id)
    if problem:
        raise InputError(f"{_shown(path)}: document id {doc_id!r} (from the file name) {problem}; rename the file")
    return doc_id


def _shown(path: Path) -> str:
    """``path`` for a one-line message: quoted with escapes if its name has a line break or undecodable bytes."""
    return str(path) if str(path).isprintable() else repr(str(path))


def read_text_folder(folder: Path) -> Iterator[Document]:
    """Documents from the text files under ``folder``; the id is the relative path without suffix.

    The folder is listed at once (an error if it holds no text file); files are read as they are consumed.
    """
    files = text_files(folder)
    if not files:
        raise InputError(f"{folder}: folder has no {'/'.join(sorted(TEXT_FILE_TYPES))} files "
                         "(and no corpus.jsonl[.gz] of a BEIR folder)")
    return _read_files(folder, files)


def _read_files(folder: Path, files: list[Path]) -> Iterator[Document]:
    first_file: dict[str, Path] = {}
    for path in files:
        doc_id = file_id(path, path.relative_to(folder).with_suffix("").as_posix())
        first = first_file.setdefault(doc_id, path)
        if first != path:
            raise InputError(f"{path}: duplicate document id {doc_id!r} (also from {first.name})")
        yield read_text_file(path, doc_id)


def read_single_text_file(path: Path) -> Iterator[Document]:
    """A one-document corpus: the file ``path``."""
    yield read_text_file(path)
