"""Batch search speed of an index, by mode, with the query vectors encoded beforehand (the model's time is
the encoder's, measured in benchmarks/encode_speed.py): what the searcher itself costs.

    graphdoc index --corpus ../shared/data/qmsum --index-dir /tmp/qmsum-idx
    python benchmarks/search_speed.py --index-dir /tmp/qmsum-idx --queries ../shared/data/qmsum/queries.jsonl

Each mode runs ``--repeats`` times and the best time is kept; BM25 alone is the reference the other modes are
given against.
"""

from __future__ import annotations

import argparse
import time

from graphdoc.corpus import read_queries
from graphdoc.errors import GraphDocError
from graphdoc.retrieval.searcher import Searcher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index-dir", required=True)
    parser.add_argument("--queries", required=True)
    parser.add_argument("-k", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for flag, value in (("-k", args.k), ("--repeats", args.repeats)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    try:  # a missing or unreadable --queries or --index-dir: the library's one-line message
        queries = dict(read_queries(args.queries))
        searcher = Searcher(args.index_dir)
    except GraphDocError as exc:
        raise SystemExit(f"search_speed: {exc}") from None
    with searcher:
        vectors = searcher.encode_queries(queries)
        seconds = {}
        for mode in ("bm25", "dense", "hybrid"):
            best = float("inf")
            for _ in range(args.repeats):
                start = time.perf_counter()
                searcher.batch_search(queries, k=args.k, mode=mode, query_vectors=vectors)
                best = min(best, time.perf_counter() - start)
            seconds[mode] = best
        counts = searcher.manifest.counts
    print(f"{len(queries):,} queries, k={args.k}, over {counts.get('documents', 0):,} documents and "
          f"{counts.get('passages', 0):,} passages")
    print("| mode | seconds | queries / s | x BM25's time |")
    print("|---|---:|---:|---:|")
    for mode, s in seconds.items():
        print(f"| {mode} | {s:.2f} | {len(queries) / s:,.0f} | {s / seconds['bm25']:.1f} |")


if __name__ == "__main__":
    main()
