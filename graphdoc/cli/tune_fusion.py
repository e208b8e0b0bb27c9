"""``graphdoc tune-fusion``: choose the hybrid weight alpha by k-fold cross-validation over queries."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from graphdoc.cli.common import DEVICE_HELP, add_nprobe_argument, check_at_least_one, logger, stdin_queries
from graphdoc.errors import GraphDocError
from graphdoc.fileio import is_stdio, replacing

#: as ``graphdoc search --normalization`` (graphdoc.retrieval.fusion.NORMALIZERS, not imported here to keep
#: ``--help`` fast)
NORMALIZATIONS = ("minmax", "zscore", "none")


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("tune-fusion", help="pick the fusion weight alpha by cross-validation",
                            description=__doc__)
    parser.add_argument("--index-dir", required=True, type=Path)
    parser.add_argument("--queries", required=True, help="queries: JSON lines, query-id<TAB>text lines, TREC "
                        "topics, a .txt of one query a line (ids: line numbers), a BEIR folder, a dataset name, or - "
                        "for any of the line formats piped in")
    parser.add_argument("--qrels", required=True, help="qrels file, BEIR folder or dataset name")
    parser.add_argument("--split", default=None, help="split of a BEIR folder (queries and qrels)")
    parser.add_argument("--folds", type=int, default=5,
                        help="cross-validation folds over the judged queries (default 5)")
    parser.add_argument("--measure", default="nDCG@10",
                        help="the ir-measures name alpha maximises, e.g. RR@10 or R@100 (default nDCG@10)")
    parser.add_argument("--normalization", choices=NORMALIZATIONS, default=None,
                        help="score normalisation of weighted fusion (default: the index's, as graphdoc search "
                             "uses, so the tuned alpha means what search --alpha does)")
    parser.add_argument("--depth", type=int, default=100,
                        help="the documents a fused ranking keeps, fused as search -k DEPTH fuses them: from each "
                             "retriever's top max(DEPTH, 100) (default 100)")
    parser.add_argument("--output", type=Path, help="write the cross-validated fused run here (-: as TREC lines "
                        "on standard output, the report then going to standard error)")
    parser.add_argument("--save", action="store_true",
                        help="make weighted fusion with the chosen alpha and normalisation the index's setting "
                             "(kept when every alpha scores the same)")
    add_nprobe_argument(parser)
    parser.add_argument("--model", default=None, help="query encoder (default: the index's model)")
    parser.add_argument("--device", default=None, help=DEVICE_HELP)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graphdoc.cli.search import check_run_output, open_searcher, warn_deeper
    from graphdoc.retrieval.evaluation import check_computable, parse_measures

    if args.folds < 2:  # (before the index opens; more folds than queries is told once they are read)
        raise GraphDocError(f"--folds must be at least 2; got {args.folds}")
    check_at_least_one("--depth", args.depth)
    check_at_least_one("--nprobe", args.nprobe)
    if args.output is not None and not is_stdio(args.output):
        check_run_output(args)
    measures = parse_measures([args.measure])
    check_computable(measures)
    warn_deeper(measures, args.depth, "--depth", "documents a fused ranking keeps")
    if args.queries == "-":
        args.piped_queries = stdin_queries()
    args.mode = "hybrid"
    with open_searcher(args) as searcher:
        return _tune(args, searcher)


def _tune(args: argparse.Namespace, searcher) -> int:
    from graphdoc.cli.search import check_trec_ids
    from graphdoc.corpus import read_qrels, read_queries
    from graphdoc.retrieval.evaluation import check_query_ids
    from graphdoc.retrieval.searcher import DEPTH
    from graphdoc.retrieval.tuning import assign_folds, tune_alpha

    qrels = read_qrels(args.qrels, args.split)
    check_query_ids([args.measure], qrels)  # (before searching: ERR takes numeric query ids only)
    judged = {q for q, docs in qrels.items() if docs}
    given = args.piped_queries.items() if args.queries == "-" else read_queries(args.queries, args.split)
    queries = {q: t for q, t in given if q in judged}
    if not queries:
        raise GraphDocError("no query has relevance judgements in the given qrels")
    unsearched = len(judged) - len(queries)
    named = "the queries piped in" if args.queries == "-" else args.queries
    try:
        assign_folds(list(queries), args.folds, name="--folds")  # more folds than queries: refused before searching
    except GraphDocError as exc:
        if unsearched:
            raise GraphDocError(f"{exc} ({unsearched} of the {len(judged)} queries judged in {args.qrels} "
                                f"are not in {named})") from None
        raise
    if unsearched:
        logger.warning("%d of the %d queries judged in %s are not in %s: tuning on the other %d",
                       unsearched, len(judged), args.qrels, named, len(queries))
    if args.output is not None:
        check_trec_ids(searcher)
    # the candidates search -k DEPTH fuses: each retriever's top max(DEPTH, 100), as zscore and minmax see them
    dense_run, sparse_run = searcher.component_runs(queries, max(args.depth, DEPTH), show_progress_bar=not args.quiet)
    normalization = args.normalization or searcher.fusion.normalization
    result = tune_alpha(dense_run, sparse_run, qrels, folds=args.folds, normalization=normalization,
                        measure=args.measure, prefer=searcher.fusion.alpha, k=args.depth)
    to_stdout = is_stdio(args.output)  # the run alone on stdout
    with contextlib.redirect_stdout(sys.stderr if to_stdout else sys.stdout):
        _report(result, args.measure, searcher.fusion.alpha)
    if to_stdout:
        from graphdoc.retrieval.trec import run_lines

        sys.stdout.writelines(run_lines(result.run, tag="graphdoc-hybrid-cv"))
    elif args.output:
        from graphdoc.retrieval.trec import write_run

        note = replacing(args.output)
        write_run(result.run, args.output, tag="graphdoc-hybrid-cv")
        logger.info("wrote the cross-validated run of %d queries to %s%s", len(result.run), args.output, note)
    if args.save:
        with contextlib.redirect_stdout(sys.stderr if to_stdout else sys.stdout):
            _save(searcher, args.index_dir, result)
    return 0


def _report(result, measure: str, index_alpha: float) -> None:
    for i, fold in enumerate(result.folds, start=1):
        print(f"fold {i}: alpha={fold.alpha:.2f}  train {measure}={fold.train_score:.4f}  "
              f"test {measure}={fold.test_score:.4f}")
    print(f"cross-validated {measure}: {result.mean_test_score:.4f}; alpha on all queries: {result.alpha:.2f}")
    if result.alphas_tied:
        logger.warning("every alpha scores %s=%.4f on the %d queries: the measure does not tell the alphas apart, "
                       "so alpha %.2f is only the tie-break (the tried alpha nearest the index's %.2f)", measure,
                       result.scores_by_alpha[result.alpha], sum(len(f.query_ids) for f in result.folds),
                       result.alpha, index_alpha)


def _describe(fusion) -> str:
    """A fusion setting in one phrase: its method and the values that method uses."""
    if fusion.method == "rrf":
        return f"rrf k={fusion.rrf_k:g}"
    return f"{fusion.method} alpha={fusion.alpha:.2f} normalization={fusion.normalization}"


def _save(searcher, index_dir: Path, result) -> None:
    """Store weighted fusion with the tuned alpha in the manifest, saying what it replaces; keep it on a tie."""
    from dataclasses import replace

    where, old = f"{index_dir}/manifest.json", searcher.fusion
    if result.alphas_tied:
        print(f"not stored: {where} keeps fusion {_describe(old)}, as no alpha scored better than another")
        return
    new = replace(old, method="weighted", alpha=result.alpha, normalization=result.normalization)
    if new == old:
        print(f"{where} already holds fusion {_describe(new)}; unchanged")
        return
    from graphdoc.fileio import writer_lock
    from graphdoc.retrieval.manifest import Manifest

    with writer_lock(index_dir):  # not while `graphdoc index` or `merge` writes the folder
        manifest = Manifest.load(index_dir)  # as it is now: only its fusion changes
        if (manifest.shards, manifest.deleted, manifest.finalized) != \
                (searcher.manifest.shards, searcher.manifest.deleted, searcher.manifest.finalized):
            raise GraphDocError(f"{index_dir} changed while the fusion was tuned (documents were added or deleted): "
                                "not stored; rerun graphdoc tune-fusion on the index as it is now")
        manifest.fusion = new.to_dict()
        manifest.save(index_dir)
    print(f"stored fusion {_describe(new)} in {where} (was {_describe(old)})")
