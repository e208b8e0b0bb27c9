"""BEIR folders: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]`` and ``qrels/<split>.tsv``."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from graphdoc.documents import Document
from graphdoc.errors import InputError
from graphdoc.corpus.fields import Fields
from graphdoc.corpus.files import iter_lines
from graphdoc.corpus.jsonl import check_id, read_jsonl_corpus, read_jsonl_queries

DEFAULT_SPLIT = "test"
QRELS_HEADER = ("query-id", "corpus-id", "score")

Qrels = dict[str, dict[str, int]]


def _find(folder: Path, stem: str) -> Path | None:
    return next((p for p in (folder / f"{stem}.jsonl", folder / f"{stem}.jsonl.gz") if p.is_file()), None)


def is_beir_folder(path: Path) -> bool:
    """Whether ``path`` is a folder with a ``corpus.jsonl`` or ``corpus.jsonl.gz``."""
    return path.is_dir() and _find(path, "corpus") is not None


def holds_queries(path: Path) -> bool:
    """Whether ``path`` is a BEIR folder, or a folder of its queries and qrels alone (a ``queries.jsonl[.gz]``)."""
    return is_beir_folder(path) or path.is_dir() and _find(path, "queries") is not None


def holds_qrels(path: Path) -> bool:
    """Whether ``path`` is a BEIR folder, or a folder of its queries and qrels alone (a ``qrels/`` folder)."""
    return is_beir_folder(path) or path.is_dir() and (path / "qrels").is_dir()


def corpus_file(folder: Path) -> Path | None:
    """The folder's ``corpus.jsonl`` or ``corpus.jsonl.gz`` (``None``: not a BEIR folder)."""
    return _find(folder, "corpus")


def read_beir_corpus(folder: Path, fields: Fields | None = None) -> Iterator[Document]:
    """The documents of the folder's ``corpus.jsonl[.gz]`` (``fields``: see :func:`read_jsonl_corpus`)."""
    return read_jsonl_corpus(_find(folder, "corpus"), fields)


def splits(folder: Path) -> list[str]:
    """The qrels splits of a BEIR folder (the names of ``qrels/*.tsv``), sorted."""
    return sorted(p.stem for p in (folder / "qrels").glob("*.tsv"))


def qrels_file(folder: Path, split: str | None) -> Path:
    """``qrels/<split>.tsv``; with no split, ``test`` if there is one, else the only split."""
    available = splits(folder)
    if split is None:
        split = DEFAULT_SPLIT if DEFAULT_SPLIT in available or len(available) != 1 else available[0]
    path = folder / "qrels" / f"{split}.tsv"
    if not path.is_file():
        raise InputError(f"{path}: no qrels for split {split!r} "
                         f"(splits here: {', '.join(available) or 'none'})")
    return path


def read_beir_queries(folder: Path, split: str | None = None) -> Iterator[tuple[str, str]]:
    """The folder's queries; with a ``split``, only those judged in ``qrels/<split>.tsv``."""
    path = _find(folder, "queries")
    if path is None:
        raise InputError(f"{folder}: BEIR folder has no queries.jsonl or queries.jsonl.gz")
    queries = read_jsonl_queries(path)
    if split is None:
        return queries
    judged = read_tsv_qrels(qrels_file(folder, split))
    return ((qid, text) for qid, text in queries if qid in judged)


def read_beir_qrels(folder: Path, split: str | None = None) -> Qrels:
    """The judgements of ``qrels/<split>.tsv`` (see :func:`qrels_file` for the default split)."""
    return read_tsv_qrels(qrels_file(folder, split))


def read_tsv_qrels(path: Path) -> Qrels:
    """A BEIR qrels file: ``query-id<TAB>corpus-id<TAB>score`` lines after an optional header (the first
    non-blank line)."""
    qrels: Qrels = {}
    qrels_builder = QrelsBuilder(path, qrels)
    first = True  # the header, if any, is the first non-blank line
    for lineno, line in iter_lines(path, lone_cr=True):
        if not line.strip():
            continue
        fields = line.split("\t")
        if first:
            first = False
            if tuple(f.strip().lower() for f in fields) == QRELS_HEADER:
                continue
        if len(fields) != 3:
            raise InputError(f"{path}:{lineno}: expected 3 tab-separated fields "
                             f"(query-id, corpus-id, score), got {len(fields)}")
        qid, doc_id, score = (f.strip() for f in fields)
        check_id(path, lineno, "query", qid)
        check_id(path, lineno, "judged document", doc_id)
        qrels_builder.add(qid, doc_id, parse_relevance(path, lineno, score), lineno)
    return qrels


class QrelsBuilder:
    """Builds :data:`Qrels` from lines of ``path``; a pair judged twice with two grades is an error."""

    def __init__(self, path: Path, qrels: Qrels) -> None:
        self.path, self.qrels, self.line_of = path, qrels, {}

    def add(self, qid: str, doc_id: str, grade: int, lineno: int) -> None:
        grades = self.qrels.setdefault(qid, {})
        first = self.line_of.setdefault((qid, doc_id), lineno)
        if first != lineno and grades[doc_id] != grade:
            raise InputError(f"{self.path}:{lineno}: query {qid!r} and document {doc_id!r} are judged "
                             f"{grade} here and {grades[doc_id]} on line {first}")
        grades[doc_id] = grade


def parse_relevance(path: Path, lineno: int, value: str) -> int:
    """A relevance grade as an int, or an :class:`InputError` naming the line."""
    try:
        return int(value)
    except ValueError:
        raise InputError(f"{path}:{lineno}: relevance must be an integer, got {value!r}") from None
