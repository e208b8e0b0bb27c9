"""BM25 speed: bm25s (graphdoc's default backend) against rank-bm25 on SciFact, in one process.

    python benchmarks/bm25_speed.py [--rank-bm25-queries 30] [--data-dir ../shared/data]

Both backends use the same tokenisation and the same queries (top 100, tokenisation included);
rank-bm25 runs on the first N queries only, as it is slow. Prints queries/s and the ratio, and
nDCG@10 / R@100 of the default configuration on the 300 test queries.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from graphdoc.corpus import read_corpus, read_qrels, read_queries
from graphdoc.retrieval.bm25 import BM25Config, BM25Index
from graphdoc.retrieval.evaluation import evaluate
from graphdoc.retrieval.runs import hits_to_run

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def queries_per_second(index: BM25Index, texts: list[str], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        index.search(texts, k=100)
        best = min(best, time.perf_counter() - start)
    return len(texts) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank-bm25-queries", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="holds scifact/ (default: ../shared/data)")
    args = parser.parse_args()
    if args.rank_bm25_queries < 1 or args.repeats < 1:
        parser.error("--rank-bm25-queries and --repeats must be at least 1")
    data = args.data_dir / "scifact"
    if not (data / "qrels" / "test.tsv").is_file():
        raise SystemExit(f"{data}: no SciFact data there (expected corpus.jsonl.gz, queries.jsonl and "
                         "qrels/test.tsv; see ../shared/data/README.md)")
    docs = list(read_corpus(data))
    ids, texts = [d.id for d in docs], [f"{d.title} {d.text}".strip() for d in docs]
    qrels = read_qrels(data, "test")
    queries = {q: t for q, t in read_queries(data, "test") if q in qrels}
    fast = BM25Index.build(texts, BM25Config())
    slow = BM25Index.build(texts, BM25Config(backend="rank_bm25", method="atire", idf_method="robertson", epsilon=0))
    indices, scores = fast.search(list(queries.values()), k=100)
    figures = evaluate(hits_to_run(list(queries), indices, scores, ids), qrels, ["nDCG@10", "R@100"])
    all_texts = list(queries.values())
    few = all_texts[: args.rank_bm25_queries]
    qps_fast = queries_per_second(fast, all_texts, args.repeats)
    qps_slow = queries_per_second(slow, few, 1)
    print(f"SciFact test ({len(docs)} documents, {len(all_texts)} queries), bm25s defaults: "
          f"nDCG@10 {figures['nDCG@10']:.4f}, R@100 {figures['R@100']:.4f}")
    print(f"bm25s      {qps_fast:10.1f} queries/s ({len(all_texts)} queries, best of {args.repeats})")
    print(f"rank-bm25  {qps_slow:10.1f} queries/s ({len(few)} queries)")
    print(f"ratio      {qps_fast / qps_slow:10.1f}x")


if __name__ == "__main__":
    main()
