"""Reading corpora, queries and relevance judgements from files, folders or named data sets.

Everything streams: documents and queries are yielded one at a time, never read into memory at once.
A ``source`` is a path (JSON lines, a BEIR folder, a folder of .txt/.md/.markdown files, a MediaWiki XML dump,
TREC topics or qrels) or the name of a corpus fetched by an optional package (``robust04``, ...); a corpus may
also be documents held in memory, a :class:`~graphdoc.corpus.memory.MemoryCorpus`. A JSON lines,
BEIR or CSV/TSV corpus whose records name their id, text or title otherwise is read with :class:`Fields`.
Problems with the source (missing, unknown format) are raised at the call; problems inside it
(a broken line, a duplicate id) when the reader reaches them, as one :class:`InputError` line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Union

from graphdoc.documents import Document
from graphdoc.errors import InputError
from graphdoc.corpus.fields import APPLIES_TO, Fields, as_fields
from graphdoc.corpus.formats import CORPUS_FORMATS, QRELS_FORMATS, QUERY_FORMATS, detect
from graphdoc.corpus.markup import markdown_sections, wikitext_sections
from graphdoc.corpus.memory import MemoryCorpus
from graphdoc.corpus.named import NAMED_CORPORA, NamedCorpus, resolve
from graphdoc.corpus.stats import ReadStats, skip_empty
from graphdoc.corpus.trec import run_hint

Source = Union[str, "os.PathLike[str]"]
Qrels = dict[str, dict[str, int]]

__all__ = ["Fields", "MemoryCorpus", "NAMED_CORPORA", "Qrels", "ReadStats", "check_outside_corpus", "corpus_files",
           "markdown_sections", "read_corpus", "read_qrels", "read_queries", "source_key", "wikitext_sections"]


def _check_source(source: Source, what: str) -> None:
    """An empty source is an error, not the current folder (``Path("")`` is ``.``)."""
    if isinstance(source, str) and not source.strip():
        raise InputError(f"the {what} source is {'empty' if not source else 'only whitespace'} "
                         f"({source!r}): give a file, a folder or a corpus name")


def _named(source: Source, split: str | None = None) -> tuple[NamedCorpus, str | None] | None:
    """The named corpus for ``source`` when it is not an existing path, else ``None``."""
    if isinstance(source, str) and not os.path.exists(source):
        return resolve(source, split)
    return None


def source_key(source: Source | MemoryCorpus) -> str:
    """How an index or a training run names a corpus it reads: an existing path resolved, a named corpus by its
    name without a split (a split picks queries and qrels only: ``wikir/en59k/test`` holds the documents of
    ``wikir/en59k``), documents in memory by the hash of their records (``memory:sha256:...``), anything else as
    given."""
    if isinstance(source, MemoryCorpus):
        return source.key
    if os.path.exists(source):
        return str(Path(source).resolve())
    try:
        named = _named(str(source))
    except InputError:  # a split the corpus does not have: reading it says so
        named = None
    return named[0].name if named else str(source)


def check_outside_corpus(source, path: Source | None, flag: str, written: str) -> None:
    """Refuse ``path`` (what a command writes: ``written``, given by ``flag``) inside the corpus folder ``source``
    when that folder is read file by file (a folder of text files: a BEIR folder reads its corpus file only), since
    the files written there would be read as documents the next time. ``source`` that is no folder (a file, a
    corpus name, documents in memory) passes."""
    from graphdoc.corpus import beir, textdir

    if path is None or not isinstance(source, (str, os.PathLike)) or not os.path.isdir(source) \
            or beir.is_beir_folder(Path(source)):
        return
    inside, root = Path(path).resolve(), os.path.realpath(source)
    for folder in textdir.read_folders(Path(source)):  # the corpus folder, and folders it links to
        if inside.is_relative_to(folder) and not any(part.startswith(".") for part in inside.relative_to(folder).parts):
            # (a hidden file or folder, such as docs/.graphdoc-index, is not read as documents)
            through = "" if os.path.commonpath([folder, root]) == root else f" (through its link to {folder})"
            raise InputError(f"{flag} {path} is inside the corpus folder {source}{through}: {written} would be "
                             "read as documents")


def corpus_files(source: Source | MemoryCorpus) -> list[Path]:
    """The files a local corpus is read from: a BEIR folder's corpus file (not its queries or qrels), a
    folder's text files, or the file itself; ``[]`` for a named corpus or documents in memory. What a change to
    the corpus means."""
    from graphdoc.corpus import beir, textdir

    if isinstance(source, MemoryCorpus):
        return []
    _check_source(source, "corpus")
    path = Path(source)
    if not path.exists():
        return []
    if path.is_file():
        return [path]
    corpus = beir.corpus_file(path)
    return [corpus] if corpus is not None else textdir.text_files(path)


def data_files(source: Source | MemoryCorpus) -> list[Path]:
    """Every file of a local corpus, queries or qrels source that a command could read: :func:`corpus_files`,
    and a BEIR folder's queries and qrels files too; what an output must not replace."""
    from graphdoc.corpus import beir

    if isinstance(source, MemoryCorpus) or isinstance(source, str) and not source.strip():
        return []  # the reader says what is wrong with it
    path = Path(source)
    files = corpus_files(source)
    if beir.holds_queries(path) or beir.holds_qrels(path):  # (a BEIR folder, or its queries and qrels alone)
        files += [p for p in (path / "queries.jsonl", path / "queries.jsonl.gz") if p.is_file()]
        files += sorted((path / "qrels").glob("*.tsv"))
    return files


#: the largest plain file whose lines are counted for a progress bar's total (one pass over it: ~1 s a GB)
COUNT_LIMIT = 2 * 2**30


def document_count(source: Source | MemoryCorpus) -> int | None:
    """About how many documents a local corpus holds, for a progress bar's total and time left: a plain JSON
    lines file's lines (a BEIR folder's ``corpus.jsonl`` too; blank lines are counted), a folder's text files or
    the records in memory (empty ones too);
    ``None`` where telling means decompressing or parsing (compressed files, CSV rows that may span lines, XML
    dumps, named corpora) or a file over :data:`COUNT_LIMIT`, and on any error (the reader reports it)."""
    from graphdoc.corpus import beir
    from graphdoc.corpus.files import has_suffix
    from graphdoc.corpus.formats import JSONL_SUFFIXES

    if isinstance(source, MemoryCorpus):
        return len(source)
    try:
        path = Path(source)
        if _named(source) is not None or not path.exists():
            return None
        files = corpus_files(source)
        if path.is_dir() and not beir.is_beir_folder(path):
            return len(files)
        plain = [suffix for suffix in JSONL_SUFFIXES if not suffix.endswith((".gz", ".bz2", ".xz"))]
        if len(files) != 1 or not has_suffix(files[0], *plain) or files[0].stat().st_size > COUNT_LIMIT:
            return None
        lines, last = 0, b"\n"
        with open(files[0], "rb") as handle:
            while block := handle.read(1 << 24):
                lines, last = lines + block.count(b"\n"), block[-1:]
        return lines + (last != b"\n")
    except (OSError, InputError, ValueError):
        return None


def read_corpus(source: Source | MemoryCorpus, *, stats: ReadStats | None = None,
                fields: Fields | None = None) -> Iterator[Document]:
    """Stream the documents of ``source``, skipping empty ones (blank title and text; counted in ``stats``,
    logged at INFO).

    ``fields`` names the record fields that hold the id, text and title (:class:`Fields`) of a JSON lines file,
    a BEIR folder, a CSV/TSV table or the dict records of a :class:`MemoryCorpus` (whose records are all checked
    at the call); any other source given a mapping is an :class:`InputError`.
    """
    _check_source(source, "corpus")
    fields = as_fields(fields)
    if isinstance(source, MemoryCorpus):
        return skip_empty(source.documents(fields), stats if stats is not None else ReadStats(), str(source))
    mapped = fields is not None and not fields.is_default
    if mapped and isinstance(source, str) and not os.path.exists(source) \
            and any(source == name or source.startswith(name + "/") for name in NAMED_CORPORA):
        raise InputError(f"{source} is a named corpus: {APPLIES_TO}")  # (before its package is looked for)
    named = _named(source)
    if named is not None:
        if mapped:
            raise InputError(f"{source} is a named corpus: {APPLIES_TO}")
        docs = named[0].docs()
    else:
        fmt = detect(Path(source), CORPUS_FORMATS, "corpus")
        if mapped and not fmt.takes_fields:
            raise InputError(f"{source} is {fmt.description}: {APPLIES_TO}")
        docs = fmt.read(Path(source), fields) if mapped else fmt.read(Path(source))
    return skip_empty(docs, stats if stats is not None else ReadStats(), str(source))


def read_queries(source: Source, split: str | None = None) -> Iterator[tuple[str, str]]:
    """Stream ``(query id, text)`` pairs; for a BEIR folder or named corpus, ``split`` keeps the judged ones.

    ``source`` is a BEIR folder, ``queries.jsonl[.gz]``, a ``query-id<TAB>text`` file, a TREC topics file
    (the title is the query), a ``.txt`` file of one query a line (its id: the line number) or a named corpus
    such as ``robust04/fold1``.
    """
    _check_source(source, "queries")
    named = _named(source, split)
    if named is not None:
        corpus, split = named
        return corpus.queries(split)
    fmt = detect(Path(source), QUERY_FORMATS, "queries", split)
    return fmt.read(Path(source), split) if fmt.takes_split else fmt.read(Path(source))


def read_qrels(source: Source, split: str | None = None) -> Qrels:
    """Relevance judgements as ``{query id: {doc id: relevance}}``.

    ``source`` is a BEIR folder (``split`` picks ``qrels/<split>.tsv``, ``test`` by default), a BEIR
    ``.tsv`` with its ``query-id corpus-id score`` header, a TREC qrels file, or a named corpus.
    """
    _check_source(source, "qrels")
    named = _named(source, split)
    if named is not None:
        corpus, split = named
        return corpus.qrels(split)
    fmt = detect(Path(source), QRELS_FORMATS, "qrels", split, hint=run_hint)
    return fmt.read(Path(source), split) if fmt.takes_split else fmt.read(Path(source))
