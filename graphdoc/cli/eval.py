"""``graphdoc eval``: ir-measures figures of a TREC run against qrels."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("eval", help="evaluate a run file", description=__doc__)
    parser.add_argument("--run", required=True, type=Path)
    parser.add_argument("--qrels", required=True, help="qrels file, BEIR folder or dataset name")
    parser.add_argument("--split", default=None, help="qrels split of a BEIR folder (default test)")
    parser.add_argument("--measures", nargs="+", default=None,
                        help="ir-measures names (default nDCG@10 nDCG@20 P@20 RR@100 R@100)")
    parser.set_defaults(func=run)


def print_evaluation(run_, qrels_source, measures, split=None, name="run") -> dict:
    from graphdoc.corpus import read_qrels
    from graphdoc.retrieval.evaluation import DEFAULT_MEASURES, evaluate, format_table, parse_measures

    qrels = read_qrels(qrels_source, split)
    parsed = parse_measures(measures) if measures else list(parse_measures(DEFAULT_MEASURES))
    results = evaluate(run_, qrels, parsed)
    print(format_table({name: results}))
    return results


def run(args: argparse.Namespace) -> int:
    from graphdoc.retrieval.trec import read_run

    print_evaluation(read_run(args.run), args.qrels, args.measures, args.split, name=args.run.name)
    return 0
