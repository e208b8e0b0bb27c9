"""``graphdoc delete``: delete documents from an index folder (its ``final/`` is rebuilt without them).

Ids come as arguments and from ``--ids FILE``, one a line (as an ``embed`` output's ``.ids.txt`` holds them). A
deleted id can be indexed again later (``graphdoc index`` with a corpus holding it). A run killed while it
rebuilds the index leaves the previous build searchable: run the same command again to finish it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from graphdoc.cli.common import counted
from graphdoc.errors import GraphDocError


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("delete", help="delete documents from an index", description=__doc__)
    parser.add_argument("--index-dir", required=True, type=Path)
    parser.add_argument("ids", nargs="*", metavar="ID", help="ids of the documents to delete")
    parser.add_argument("--ids", dest="ids_file", type=Path, default=None, metavar="FILE",
                        help="a file of ids to delete, one a line (blank lines are passed over)")
    parser.add_argument("--missing", choices=("warn", "error"), default="warn",
                        help="an id the index does not hold: warn and delete the others (default), or refuse and "
                             "change nothing")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graphdoc.retrieval.deletion import deleting

    ids = [*args.ids, *(_read_ids(args.ids_file) if args.ids_file is not None else [])]
    if not ids:
        raise GraphDocError("name the ids to delete (ID ... or --ids FILE)")
    manifest, deleted = deleting(args.index_dir, ids, missing=args.missing, show_progress_bar=not args.quiet)
    counts = manifest.counts
    print(f"{args.index_dir}: {counted(len(deleted), 'documents')} deleted, "
          + ", ".join(counted(counts.get(what, 0), what) for what in ("documents", "passages")))
    return 0


def _read_ids(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8-sig")  # (a BOM is no part of the first id)
    except FileNotFoundError:
        raise GraphDocError(f"--ids {path}: no such file") from None
    except IsADirectoryError:
        raise GraphDocError(f"--ids {path} is a folder; name a file of ids, one a line") from None
    except UnicodeDecodeError as exc:
        raise GraphDocError(f"--ids {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    ids = [line for line in text.splitlines() if line.strip()]
    if not ids:
        raise GraphDocError(f"--ids {path} holds no ids")
    return ids
