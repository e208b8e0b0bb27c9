"""Registries that tell corpus, query and qrels formats apart by file suffix, folder contents or first line."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from graphdoc.errors import InputError
from graphdoc.corpus import beir, jsonl, mediawiki, table, textdir, trec
from graphdoc.corpus.files import check_not_utf16, first_line, has_suffix
from graphdoc.corpus.named import NAMED_CORPORA

#: JSON lines files; ``.json`` too, as Hugging Face datasets' ``to_json`` names them (a pretty-printed JSON file
#: is then one clear error)
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.bz2", ".jsonl.xz", ".json", ".json.gz", ".json.bz2", ".json.xz")
XML_SUFFIXES = (".xml", ".xml.bz2", ".xml.gz")


@dataclass(frozen=True)
class Format:
    """A file format: how to recognise a path, how to read it, and how to name it in error messages."""

    name: str
    description: str
    matches: Callable[[Path], bool]
    read: Callable[..., Any]
    takes_split: bool = False
    #: whether its records have named fields, so that ``fields=`` (:class:`~graphdoc.corpus.fields.Fields`) applies
    takes_fields: bool = False


def _suffix(*suffixes: str) -> Callable[[Path], bool]:
    return lambda path: path.is_file() and has_suffix(path, *suffixes)


def _first_line(test: Callable[[str], bool]) -> Callable[[Path], bool]:
    def matches(path: Path) -> bool:
        if not path.is_file() or has_suffix(path, *JSONL_SUFFIXES):
            return False
        try:
            return test(first_line(path))
        except InputError:  # not text: some other format, or none
            return False

    return matches


#: Corpus formats, tried in order.
CORPUS_FORMATS = (
    Format("beir", "a BEIR folder (with corpus.jsonl[.gz])", beir.is_beir_folder, beir.read_beir_corpus,
           takes_fields=True),
    Format("textdir", "a folder of .txt/.md/.markdown files", Path.is_dir, textdir.read_text_folder),
    Format("jsonl", "JSON lines (.jsonl or .json, plain or .gz/.bz2/.xz)", _suffix(*JSONL_SUFFIXES),
           jsonl.read_jsonl_corpus, takes_fields=True),
    Format("text", "a .txt/.md/.markdown file", textdir.is_text_file, textdir.read_single_text_file),
    Format("mediawiki", "a MediaWiki XML dump (.xml, .xml.bz2)", _suffix(*XML_SUFFIXES), mediawiki.read_mediawiki),
    Format("table", "CSV or TSV with a header line naming id and text columns (.csv/.tsv, plain or .gz/.bz2/.xz)",
           _suffix(*table.TABLE_SUFFIXES), table.read_table_corpus, takes_fields=True),
)

#: Query formats, tried in order.
QUERY_FORMATS = (
    Format("beir", "a BEIR folder (with queries.jsonl[.gz])", beir.holds_queries, beir.read_beir_queries,
           takes_split=True),
    Format("jsonl", "JSON lines (.jsonl or .json, plain or .gz/.bz2/.xz)", _suffix(*JSONL_SUFFIXES),
           jsonl.read_jsonl_queries),
    Format("trec-topics", "a TREC topics file (<top> <num> <title> ...)", _first_line(trec.is_trec_topics),
           trec.read_trec_topics),
    Format("tsv", "a query-id<TAB>text file", _first_line(lambda line: "\t" in line), trec.read_tsv_queries),
    Format("lines", "a .txt file of one query a line (its id: the line number)", trec.is_text_queries,
           trec.read_text_queries),
)

#: Relevance judgement formats, tried in order.
QRELS_FORMATS = (
    Format("beir", "a BEIR folder (with qrels/<split>.tsv)", beir.holds_qrels, beir.read_beir_qrels,
           takes_split=True),
    Format("beir-tsv", "a BEIR qrels .tsv (query-id<TAB>corpus-id<TAB>score)", _first_line(trec.is_tsv_qrels),
           beir.read_tsv_qrels),
    Format("trec-qrels", "a TREC qrels file (query-id 0 doc-id relevance)", _first_line(trec.is_trec_qrels),
           trec.read_trec_qrels),
)


def detect(path: Path, formats: tuple[Format, ...], what: str, split: str | None = None,
           hint: Callable[[str], str | None] | None = None) -> Format:
    """The first format that matches ``path``, or an :class:`InputError` listing the accepted ones; ``hint`` says
    what a file of none of them is, by its first line (a run given as qrels), when it can."""
    if str(path) == "-":
        raise InputError(f"- (standard input) cannot be read as {what}: give a file, a folder or a corpus name")
    if path.exists() and not path.is_file() and not path.is_dir():  # read twice: to tell the format, then whole
        raise InputError(f"{path} is a pipe or a device, not a file: graphdoc reads {what} from a file, a folder or "
                         "a corpus name (write standard input to a file first)")
    if not path.exists():
        raise InputError(f"{path}: no such file or folder, and not a named corpus{_did_you_mean(path)} "
                         f"(accepted: {accepted(formats)})")
    found = next((fmt for fmt in formats if fmt.matches(path)), None)
    if found is None:
        said = None
        if path.is_file():
            check_not_utf16(path)  # the first-line sniffing could not read it: say why
            try:
                if formats is not CORPUS_FORMATS:  # (a corpus file's format is told by its name alone)
                    first = first_line(path)
                    said = hint(first) if hint is not None else None
            except InputError as err:  # e.g. Latin-1 text: its first line could not be sniffed
                utf8 = f": {what} files are read as UTF-8 text" if "not valid UTF-8" in str(err) else ""
                raise InputError(f"{err}{utf8}") from None
        raise InputError(f"{path}: unknown {what} format ({f'{said}; ' if said else ''}accepted: {accepted(formats)})")
    # a file named after the split (qrels/test.tsv) is that split already
    if split is not None and not found.takes_split and split != path.name.split(".")[0]:
        raise InputError(f"{path}: split={split!r} applies only to BEIR folders and named corpora "
                         "(a file holds one split: leave the split out)")
    return found


def _did_you_mean(path: Path) -> str:
    """``"; did you mean X?"`` for a missing ``path`` close to a named corpus or to a file beside it (a typo), what
    a broken link points to, else ``""``."""
    if path.is_symlink():
        return f" (a link to {path.readlink()}, which is missing)"
    named = difflib.get_close_matches(str(path), list(NAMED_CORPORA), n=1, cutoff=0.75)
    if named:
        return f"; did you mean {named[0]}?"
    try:
        siblings = [entry.name for entry in path.parent.iterdir()] if path.parent.is_dir() else []
    except OSError:  # a folder that cannot be listed: no suggestion
        siblings = []
    close = difflib.get_close_matches(path.name, siblings, n=1, cutoff=0.75)
    return f"; did you mean {path.parent / close[0]}?" if close else ""


def accepted(formats: tuple[Format, ...]) -> str:
    """The accepted formats in words, for error messages."""
    return "; ".join(fmt.description for fmt in formats) + f"; a named corpus ({', '.join(NAMED_CORPORA)})"
