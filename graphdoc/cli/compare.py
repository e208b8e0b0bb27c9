"""``graphdoc compare A B``: how alike two documents are, by document, section and passage.

A and B are files (.txt/.md/.markdown with Markdown sections, a .json record, or a .jsonl file, plain or
compressed, holding one record), or, with ``--corpus``, two document ids of that corpus.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from graphdoc.cli.common import add_field_arguments, add_model_arguments, fields_from, load_model, logger
from graphdoc.errors import GraphDocError, InputError

FILE_KINDS = ".txt, .md, .markdown, .json, .jsonl, .jsonl.gz/.bz2/.xz, .json.gz/.bz2/.xz"


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("compare", help="compare two documents by document, section and passage",
                            description=__doc__)
    parser.add_argument("a", metavar="A", help="a file, or a document id with --corpus")
    parser.add_argument("b", metavar="B", help="a file, or a document id with --corpus")
    parser.add_argument("--corpus", default=None, help="read A and B as ids of this corpus")
    parser.add_argument("--top", type=int, default=5, metavar="N", help="most similar passage pairs (default 5)")
    parser.add_argument("--html", type=Path, default=None, metavar="FILE", help="write a self-contained HTML page")
    parser.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    add_field_arguments(parser)
    add_model_arguments(parser, batches=False)
    parser.set_defaults(func=run)


def read_document_file(path: Path, fields=None):
    """One document from a .txt/.md/.markdown file, a .json record or a one-record JSON lines file (``fields``: the
    record's fields, :class:`graphdoc.corpus.Fields`)."""
    from graphdoc.corpus.fields import APPLIES_TO
    from graphdoc.corpus.files import READ_ERRORS, open_binary
    from graphdoc.corpus.formats import JSONL_SUFFIXES
    from graphdoc.corpus.jsonl import iter_json_objects
    from graphdoc.corpus.textdir import TEXT_FILE_TYPES, read_text_file

    name = path.name.lower()
    if path.is_dir():
        raise InputError(f"{path} is a folder; name a document file ({FILE_KINDS}), or use --corpus {path} ID_A ID_B")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    if path.suffix.lower() in TEXT_FILE_TYPES:
        if fields is not None and not fields.is_default:
            raise InputError(f"{path} is a text file: {APPLIES_TO}")
        return read_text_file(path)
    single = next((suffix for suffix in (".json", ".json.gz", ".json.bz2", ".json.xz") if name.endswith(suffix)), None)
    if single is not None:  # one record, pretty-printed or not
        try:
            with open_binary(path) as handle:
                record = json.loads(handle.read().decode("utf-8-sig"))  # a BOM, as Windows editors write, is fine
        except READ_ERRORS as err:
            raise InputError(f"{path}: cannot read file ({err})") from None
        except (ValueError, UnicodeDecodeError) as err:
            raise InputError(f"{path}: not a JSON record ({err})") from None
        if not isinstance(record, dict):
            raise InputError(f"{path}: expected one JSON object")
        return _record_document(path, str(path), record, path.name[:-len(single)] or path.name, fields)
    jsonl = next((suffix for suffix in JSONL_SUFFIXES if name.endswith(suffix)), None)
    if jsonl is not None:
        records = list(iter_json_objects(path))
        if len(records) != 1:
            raise InputError(f"{path}: holds {len(records)} documents; give one, or use --corpus {path} ID_A ID_B")
        lineno, record = records[0]
        return _record_document(path, f"{path}:{lineno}", record, path.name[:-len(jsonl)] or path.name, fields)
    raise InputError(f"{path}: unknown document file (accepted: {FILE_KINDS}; or --corpus with ids)")


def read_document_files(paths: list[Path], fields=None) -> list:
    """The documents of ``paths`` (:func:`read_document_file`), which may be of different kinds: ``fields`` name
    the fields of the JSON records among them, and a text file, which has none, is read as it is (a warning says
    the options do not apply to it); ``fields`` given for text files only are refused."""
    from graphdoc.corpus.textdir import is_text_file

    texts = [is_text_file(path) for path in paths]
    docs = [read_document_file(path, None if text else fields) for path, text in zip(paths, texts)]
    named = [] if fields is None else [f"--{role}-field" for role in fields.named()]
    if not named or not any(texts):
        return docs
    options = f"{', '.join(named)} {'applies' if len(named) == 1 else 'apply'}"
    records = [str(path) for path, text in zip(paths, texts) if not text]
    if not records:
        raise InputError(f"{' and '.join(map(str, paths))} are text files: {options} only to a JSON record (.json, "
                         ".jsonl)")
    for path in (path for path, text in zip(paths, texts) if text):
        logger.warning("%s to the JSON record %s, not to %s, a text file: it is read as it is", options,
                       " and ".join(records), path)
    return docs


def _record_document(path: Path, where: str, record: dict, default_id: str, fields=None):
    """The document of a file's one JSON record; without an id, the file's name (``default_id``) is its id."""
    from graphdoc.documents import Document

    try:
        document = Document.from_dict(record, default_id=default_id, fields=fields)
    except InputError as err:
        raise InputError(f"{where}: {err}") from None
    document.metadata.setdefault("path", str(path))  # named by an error about it
    return document


def read_from_corpus(corpus: str, ids: list[str], fields=None) -> list:
    """The documents with ``ids`` from ``corpus`` (read with ``fields``, until all are found)."""
    from graphdoc.corpus import ReadStats, read_corpus

    wanted, found, stats = set(ids), {}, ReadStats()
    for doc in read_corpus(corpus, stats=stats, fields=fields):
        if doc.id in wanted:
            found[doc.id] = doc
            if len(found) == len(wanted):
                break
    missing = [i for i in ids if i not in found]
    empty = [i for i in missing if i in stats.skipped_ids]
    if empty:
        raise InputError(f"{corpus}: document {empty[0]!r} is empty: it has no passages")
    if missing:
        files = [i for i in missing if Path(i).is_file()]
        hint = (f" ({files[0]} is a file: with --corpus, A and B are ids of that corpus; compare files without it)"
                if files else "")
        raise InputError(f"{corpus}: no document with id {', '.join(map(repr, missing))}{hint}")
    return [found[i] for i in ids]


def run(args: argparse.Namespace) -> int:
    from graphdoc.corpus import corpus_files
    from graphdoc.explain import compare_documents, render_comparison
    from graphdoc.explain.compare import check_has_text
    from graphdoc.fileio import atomic_write, check_not_an_input, check_output_file, replacing

    if args.top < 0:
        raise GraphDocError(f"--top must be at least 0; got {args.top}")
    blank = next((name for name in (args.a, args.b) if not name.strip()), None)
    if blank is not None:  # (Path("") is the current folder: it was called a folder)
        raise GraphDocError(f"a document is named by an empty string ({blank!r}): name a document file"
                            + (" or an id" if args.corpus else ""))
    if args.html is not None:
        check_output_file(args.html, "--html")
        # (A, B, or a file of the corpus: writing the page would replace a document)
        check_not_an_input(args.html, corpus_files(args.corpus) if args.corpus else [args.a, args.b], "--html",
                           "the page")
    fields = fields_from(args)
    docs = (read_from_corpus(args.corpus, [args.a, args.b], fields) if args.corpus
            else read_document_files([Path(args.a), Path(args.b)], fields))
    for doc in docs:  # before the model loads
        check_has_text(doc)
    comparison = compare_documents(load_model(args), docs[0], docs[1], top=args.top)
    if args.html is not None:
        note = replacing(args.html)
        with atomic_write(args.html, "w", encoding="utf-8") as handle:
            handle.write(render_comparison(comparison))
    if args.json:
        print(json.dumps(comparison.to_dict(), ensure_ascii=False))
    else:
        print(summary(comparison))
    if args.html is not None and not args.json:
        logger.info("wrote %s%s", args.html, note)
    return 0


def summary(comparison, width: int = 18) -> str:
    """Document similarity, the section matrix and the top passage pairs as plain text."""
    from graphdoc.explain.passages import snippet

    # (titles on one line: a newline in one broke the table)
    secs_a, secs_b = ([" ".join(s.label.split()) for s in secs] for secs in comparison.sections)
    lines = [f"document similarity: {comparison.document_similarity:.4f}",
             "section similarity (rows: A's sections, columns: B's, named below):",
             " " * (width + 2) + " ".join(f"{f'B{j}':>8}" for j in range(1, len(secs_b) + 1))]
    for label, row in zip(secs_a, comparison.section_similarity):
        lines.append(f"  {label[:width]:<{width}}" + " ".join(f"{v:>8.3f}" for v in row))
    lines += [f"  B{j}: {label}" for j, label in enumerate(secs_b, start=1)]  # whole titles: columns are narrow
    if comparison.pairs:  # (--top 0 asks for none)
        lines.append("most similar passage pairs:")
    for rank, pair in enumerate(comparison.pairs, start=1):
        a, b = comparison.passages[0][pair.a], comparison.passages[1][pair.b]
        lines.append(f"  {rank}. {pair.score:.4f}  A p{a.index} chars {a.start}-{a.end}  |  "
                     f"B p{b.index} chars {b.start}-{b.end}")
        for side, p in (("A", a), ("B", b)):
            section = f"[{' '.join(p.section_title.split())}] " if p.section_title else ""
            lines.append(f"     {side}: {section}{' '.join(snippet(p.text, 160).split())}")
    return "\n".join(lines)
