"""``graphdoc tune-fusion``: choose the hybrid weight alpha by k-fold cross-validation over queries."""

from __future__ import annotations

import argparse
from pathlib import Path

from graphdoc.errors import GraphDocError


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("tune-fusion", help="pick the fusion weight alpha by cross-validation",
                            description=__doc__)
    parser.add_argument("--index-dir", required=True, type=Path)
    parser.add_argument("--queries", required=True, help="queries file, BEIR folder or dataset name")
    parser.add_argument("--qrels", required=True, help="qrels file, BEIR folder or dataset name")
    parser.add_argument("--split", default=None, help="split of a BEIR folder (queries and qrels)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--measure", default="nDCG@10")
    parser.add_argument("--normalization", choices=("minmax", "zscore"), default="minmax")
    parser.add_argument("--depth", type=int, default=100, help="candidates per retriever")
    parser.add_argument("--output", type=Path, help="write the cross-validated fused run here")
    parser.add_argument("--save", action="store_true", help="store the chosen alpha in the index manifest")
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default=None)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graphdoc.corpus import read_qrels, read_queries
    from graphdoc.retrieval.tuning import tune_alpha
    from graphdoc.cli.search import open_searcher

    args.mode = "hybrid"
    searcher = open_searcher(args)
    qrels = read_qrels(args.qrels, args.split)
    queries = {q: t for q, t in read_queries(args.queries, args.split) if q in qrels}
    if not queries:
        raise GraphDocError("no query has relevance judgements in the given qrels")
    dense_run, sparse_run = searcher.component_runs(queries, args.depth)
    result = tune_alpha(dense_run, sparse_run, qrels, folds=args.folds, normalization=args.normalization,
                        measure=args.measure)
    for i, fold in enumerate(result.folds, start=1):
        print(f"fold {i}: alpha={fold.alpha:.2f}  train {args.measure}={fold.train_score:.4f}  "
              f"test {args.measure}={fold.test_score:.4f}")
    print(f"cross-validated {args.measure}: {result.mean_test_score:.4f}; alpha on all queries: {result.alpha:.2f}")
    if args.output:
        from graphdoc.retrieval.trec import write_run

        write_run(result.run, args.output, tag="graphdoc-hybrid-cv")
    if args.save:
        manifest = searcher.manifest
        manifest.fusion = {**searcher.fusion.to_dict(), "method": "weighted", "alpha": result.alpha,
                           "normalization": args.normalization}
        manifest.save(args.index_dir)
        print(f"stored alpha={result.alpha:.2f} in {args.index_dir}/manifest.json")
    return 0
