"""BM25 index build: memory and time of graphdoc's streamed build against tokenising the whole corpus at once.

    python benchmarks/bm25_build.py [--documents 50000] [--data-dir ../shared/data]

The corpus is SciFact's texts repeated (each copy gets one extra word of its own) up to ``--documents``, given
as a generator, as ``graphdoc index`` reads its document store. The reference is what graphdoc did before it
streamed: hold every text, tokenise them all with bm25s into lists of strings, and index those. Both run in
this process, each built twice: once timed, once measured with tracemalloc (peak of Python and numpy
allocations above the start). Both must give the same score of every document for SciFact's test queries.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from graphdoc.corpus import read_corpus, read_queries
from graphdoc.retrieval.bm25 import BM25Config, BM25Index, tokenize
from graphdoc.retrieval.bm25_backends import BM25sBackend

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def all_at_once(texts: Iterator[str], config: BM25Config) -> BM25Index:
    import bm25s

    tokens = tokenize(list(texts), config)
    retriever = bm25s.BM25(k1=config.k1, b=config.b, delta=config.delta, method=config.method,
                           idf_method=config.idf_method)
    retriever.index(tokens, create_empty_token=False, show_progress=False)
    return BM25Index(BM25sBackend(retriever), config)


def measure(build: Callable[[], BM25Index]) -> tuple[BM25Index, float, float]:
    """The index, the seconds of a build, and the peak MiB of another build under tracemalloc (which slows
    allocation-heavy code unevenly)."""
    gc.collect()
    start = time.perf_counter()
    index = build()
    seconds = time.perf_counter() - start
    del index
    gc.collect()
    tracemalloc.start()
    index = build()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return index, seconds, peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=50_000)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="holds scifact/ (default: ../shared/data)")
    args = parser.parse_args()
    if args.documents < 1:
        parser.error("--documents must be at least 1")
    data = args.data_dir / "scifact"
    if not (data / "queries.jsonl").is_file():
        raise SystemExit(f"{data}: no SciFact data there (see ../shared/data/README.md)")
    base = [f"{d.title} {d.text}".strip() for d in read_corpus(data)]
    queries = [text for _, text in read_queries(data, "test")]

    def texts() -> Iterator[str]:
        return (f"{base[i % len(base)]} copy{i}" for i in range(args.documents))

    config = BM25Config()
    reference, ref_seconds, ref_peak = measure(lambda: all_at_once(texts(), config))
    streamed, seconds, peak = measure(lambda: BM25Index.build(texts(), config))
    same = all(np.array_equal(reference.get_scores(q), streamed.get_scores(q)) for q in queries)
    words = sum(len(t.split()) for t in texts())
    print(f"{args.documents} documents ({words / args.documents:.0f} words each on average)")
    print(f"all at once  {ref_seconds:7.1f} s  peak {ref_peak:7.0f} MiB")
    print(f"streamed     {seconds:7.1f} s  peak {peak:7.0f} MiB  ({peak / ref_peak:.2f}x the memory, "
          f"{seconds / ref_seconds:.2f}x the time)")
    print(f"same scores for all {len(queries)} test queries: {same}")


if __name__ == "__main__":
    main()
