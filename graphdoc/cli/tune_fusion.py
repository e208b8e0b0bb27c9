"""``graphdoc tune-fusion``: choose the hybrid weight alpha by k-fold cross-validation over queries."""

from __future__ import annotations

import argparse
from pathlib import Path

from graphdoc.cli.common import check_at_least_one, logger
from graphdoc.errors import GraphDocError
from graphdoc.fileio import check_output_file


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
    from graphdoc.cli.search import check_trec_ids, open_searcher
    from graphdoc.corpus import read_qrels, read_queries
    from graphdoc.retrieval.evaluation import parse_measures
    from graphdoc.retrieval.tuning import assign_folds, tune_alpha

    check_at_least_one("--depth", args.depth)
    if args.output is not None:
        check_output_file(args.output)
    parse_measures([args.measure])
    args.mode = "hybrid"
    searcher = open_searcher(args)
    qrels = read_qrels(args.qrels, args.split)
    judged = {q for q, docs in qrels.items() if docs}
    queries = {q: t for q, t in read_queries(args.queries, args.split) if q in judged}
    if not queries:
        raise GraphDocError("no query has relevance judgements in the given qrels")
    unsearched = len(judged) - len(queries)
    try:
        assign_folds(list(queries), args.folds)  # refuses --folds above the number of queries before searching
    except GraphDocError as exc:
        if unsearched:
            raise GraphDocError(f"{exc} ({unsearched} of the {len(judged)} queries judged in {args.qrels} "
                                f"are not in {args.queries})") from None
        raise
    if unsearched:
        logger.warning("%d of the %d queries judged in %s are not in %s: tuning on the other %d",
                       unsearched, len(judged), args.qrels, args.queries, len(queries))
    if args.output is not None:
        check_trec_ids(searcher)
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
