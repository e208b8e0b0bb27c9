"""``graphdoc merge``: join index parts built with ``--shard I/N`` into one index."""

from __future__ import annotations

import argparse
from pathlib import Path

from graphdoc.cli.common import counted


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("merge", help="join index parts into one index", description=__doc__)
    parser.add_argument("--index-dir", required=True, type=Path, help="the new, merged index folder")
    parser.add_argument("parts", nargs="+", type=Path, help="index folders to join, in order")
    parser.add_argument("--on-duplicate", choices=("error", "replace"), default="error",
                        help="an id in two parts: refuse (default) or keep the later part's")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graphdoc.retrieval.merge import merge_indexes

    manifest = merge_indexes(args.index_dir, args.parts, args.on_duplicate)
    parts = len(args.parts)
    counts = manifest.counts
    print(f"{args.index_dir}: {counted(counts['documents'], 'documents')}, "
          f"{counted(counts.get('passages', 0), 'passages')} from {counted(parts, 'parts')}")
    return 0
