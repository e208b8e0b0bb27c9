"""Plain-text and Markdown files as documents: one file, or a folder of them read recursively."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Iterable, Iterator

from graphdoc.documents import Document, Section, id_problem, lone_surrogate
from graphdoc.errors import InputError
from graphdoc.corpus.files import decode_text
from graphdoc.corpus.markup import markdown_sections, markdown_title

logger = logging.getLogger(__name__)

#: File suffix -> (function giving the sections, function giving the title or '').
TEXT_FILE_TYPES: dict[str, tuple[Callable[[str], list[Section]], Callable[[str], str]]] = {
    ".md": (markdown_sections, markdown_title),
    ".markdown": (markdown_sections, markdown_title),
    ".txt": (markdown_sections, markdown_title),
}


#: Names of files that hold a corpus of their own, which a folder corpus does not read (it says so).
DATA_SUFFIXES = (".jsonl", ".json", ".xml", ".tsv", ".csv", ".gz", ".bz2", ".xz")


def is_text_file(path: Path) -> bool:
    """Whether ``path`` is a file with one of the :data:`TEXT_FILE_TYPES` suffixes."""
    return path.is_file() and path.suffix.lower() in TEXT_FILE_TYPES


def text_files(folder: Path) -> list[Path]:
    """The text files under ``folder``, recursively, sorted by relative path; hidden ones are left out.

    Links to folders are followed, each folder walked once (a link into the corpus folder adds nothing: the
    folder is read under its own path); a file reached by several paths is listed once (see :func:`_once_each`).
    """
    return _walk(folder)[0]


def read_folders(folder: Path) -> list[str]:
    """The resolved folders whose files :func:`text_files` reads: ``folder`` and the folders under it, those
    reached through links included; hidden ones left out."""
    return _walk(folder)[2]


def _walk(folder: Path) -> tuple[list[Path], list[Path], list[str], list[Path], list[Path]]:
    """``(text files, broken links, resolved folders walked, data files, other files)`` under ``folder``, all
    but the folders sorted by relative path; hidden ones left out. Data files (:data:`DATA_SUFFIXES`: JSON lines,
    CSV, XML dumps...) and other files (HTML, PDF, ...) are not read, and are listed to say so."""
    root = os.path.realpath(folder)
    found: dict[Path, str] = {}  # path -> resolved path
    broken, walked, data, other = [], set(), [], []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        real = os.path.realpath(dirpath)
        through_link = real != os.path.normpath(os.path.join(root, os.path.relpath(dirpath, folder)))
        if real in walked or (through_link and _visible_inside(real, root)):  # walked, or walked under its path
            dirnames.clear()
            continue
        walked.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            path = Path(dirpath, name)
            if name.startswith("."):
                continue
            if is_text_file(path):
                found[path] = os.path.realpath(path) if path.is_symlink() else os.path.join(real, name)
            elif path.is_symlink() and not path.exists():
                broken.append(path)
            elif name.lower().endswith(DATA_SUFFIXES):
                data.append(path)
            else:
                other.append(path)
    return (_once_each(folder, root, found), _by_relative_path(folder, broken), sorted(walked),
            _by_relative_path(folder, data), _by_relative_path(folder, other))


def _by_relative_path(folder: Path, paths: Iterable[Path]) -> list[Path]:
    return sorted(paths, key=lambda p: p.relative_to(folder).as_posix())


def _visible_inside(real: str, root: str) -> bool:
    """Whether the resolved folder ``real`` is ``root`` or under it, in no hidden folder: walked as it is."""
    if os.path.commonpath([real, root]) != root:
        return False
    return not any(part.startswith(".") for part in Path(os.path.relpath(real, root)).parts if part != ".")


def _once_each(folder: Path, root: str, found: dict[Path, str]) -> list[Path]:
    """The files of ``found`` (path -> resolved path, ``root`` the resolved ``folder``), sorted by relative
    path, one path per file that links let the walk reach by several: the file's own path under ``folder``
    when it is one of them, else the first."""
    chosen: dict[str, Path] = {}
    for path in _by_relative_path(folder, found):
        real = found[path]
        if real not in chosen or real == os.path.join(root, *path.relative_to(folder).parts):
            chosen[real] = path
    if len(chosen) < len(found):
        logger.info("%s: %d file(s) reached through links more than once: each read once", folder,
                    len(found) - len(chosen))
    return _by_relative_path(folder, chosen.values())


def read_text_file(path: Path, doc_id: str | None = None) -> Document:
    """One file as a document: sections from its headings; title from its first level-1 heading, else its
    front matter's ``title:``, else (for a file with text) its stem. An empty file stays empty: its name
    alone is not something to embed."""
    doc_id = file_id(path, doc_id if doc_id is not None else path.stem)
    text = decode_text(path, path.read_bytes()).replace("\r\n", "\n").replace("\r", "\n")  # old Mac files too
    sections_of, title_of = TEXT_FILE_TYPES[path.suffix.lower()]
    title = title_of(text) or (path.stem if text.strip() else "")
    return Document(id=doc_id, text=text, title=title, sections=sections_of(text), metadata={"path": str(path)})


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
    Broken links, and data files (JSON lines, dumps: read when given as the corpus, not in a folder), are named in
    a warning when the folder has been read to the end (or in the error if it holds no text file).
    """
    files, broken, _, data, other = _walk(folder)
    if not files:
        _warn_broken(folder, broken)
        held = f"; it holds {_data_files(folder, data)}: give one as the corpus itself" if data else \
            (f"; it holds {_data_files(folder, other, 'other')}, which graphdoc does not read" if other else "")
        raise InputError(f"{folder}: folder has no {'/'.join(sorted(TEXT_FILE_TYPES))} files "
                         f"(and no corpus.jsonl[.gz] of a BEIR folder){held}")
    return _read_files(folder, files, broken, data, other)


def _data_files(folder: Path, data: list[Path], kind: str = "data") -> str:
    """``"N data file(s) (a few names)"``."""
    shown = ", ".join(p.relative_to(folder).as_posix() for p in data[:3]) + (", ..." if len(data) > 3 else "")
    return f"{len(data)} {kind} file(s) ({shown})"


def _read_files(folder: Path, files: list[Path], broken: list[Path], data: list[Path],
                other: list[Path]) -> Iterator[Document]:
    first_file: dict[str, Path] = {}
    for path in files:
        doc_id = file_id(path, path.relative_to(folder).with_suffix("").as_posix())
        first = first_file.setdefault(doc_id, path)
        if first != path:
            raise InputError(f"{path}: duplicate document id {doc_id!r} (also from {first.name})")
        yield read_text_file(path, doc_id)
    _warn_broken(folder, broken)
    if data:
        logger.warning("%s: read its %d %s file(s), not its %s: give a data file as the corpus itself to read it",
                       folder, len(files), "/".join(sorted(TEXT_FILE_TYPES)), _data_files(folder, data))
    if other:
        logger.warning("%s: read its %d %s file(s), not its %s: graphdoc reads no other kind in a folder (convert "
                       "them to text, or to JSON lines or CSV)", folder, len(files), "/".join(sorted(TEXT_FILE_TYPES)),
                       _data_files(folder, other, "other"))


def _warn_broken(folder: Path, broken: list[Path]) -> None:
    if broken:
        shown = ", ".join(p.relative_to(folder).as_posix() for p in broken[:5]) + (", ..." if len(broken) > 5 else "")
        logger.warning("%s: %d broken symbolic link(s) skipped: %s", folder, len(broken), shown)


def read_single_text_file(path: Path) -> Iterator[Document]:
    """A one-document corpus: the file ``path``."""
    yield read_text_file(path)
