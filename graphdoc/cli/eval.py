"""``graphdoc eval``: ir-measures figures of a TREC run against qrels."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphdoc.cli.common import logger
from graphdoc.errors import InputError
from graphdoc.fileio import is_descriptor_name, is_stdio


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("eval", help="evaluate a run file", description=__doc__)
    parser.add_argument("--run", required=True, type=Path, help="a TREC run file (-: read standard input)")
    parser.add_argument("--qrels", required=True, help="qrels file, BEIR folder or dataset name")
    parser.add_argument("--split", default=None,
                        help="qrels split of a BEIR folder (default: test, or the only split there is)")
    parser.add_argument("--measures", nargs="+", default=None,
                        help="ir-measures names (default nDCG@10 nDCG@20 P@20 RR@100 R@100)")
    parser.set_defaults(func=run)


@dataclass
class Judgements:
    """Qrels and parsed measures, read and checked before any run is made or read."""

    source: str
    qrels: dict[str, dict[str, int]]
    measures: list[Any]


def read_judgements(qrels_source, measures, split=None) -> Judgements:
    from graphdoc.corpus import read_qrels
    from graphdoc.retrieval.evaluation import DEFAULT_MEASURES, check_computable, check_query_ids, parse_measures

    parsed = parse_measures(measures if measures else DEFAULT_MEASURES)
    check_computable(parsed)
    qrels = read_qrels(qrels_source, split)
    if not qrels:
        raise InputError(f"{qrels_source} holds no relevance judgements")
    check_query_ids(parsed, qrels)  # (before a search is run: ERR takes numeric query ids only)
    return Judgements(str(qrels_source), qrels, parsed)


def print_evaluation(run_, judgements: Judgements, name: str = "run", run_name: str = "the run") -> dict[str, float]:
    """Print the figures of ``run_``; warn when its queries and the judged ones do not match."""
    from graphdoc.retrieval.evaluation import coverage, evaluate, format_table

    judged, missing = coverage(run_, judgements.qrels)
    if judged == 0:
        logger.warning("none of the %d queries of %s is judged in %s: every figure is 0",
                       len(run_), run_name, judgements.source)
    elif missing:
        logger.warning("%d of the %d queries judged in %s are not in %s: they count as 0",
                       missing, len(judgements.qrels), judgements.source, run_name)
    if 0 < judged < len(run_):
        logger.info("%d of the %d queries of %s have no judgements in %s and are left out of the figures",
                    len(run_) - judged, len(run_), run_name, judgements.source)
    results = evaluate(run_, judgements.qrels, judgements.measures, warn_unjudged=False)  # warned above
    print(format_table({name: results}))
    return results


def run(args: argparse.Namespace) -> int:
    from graphdoc.retrieval.trec import read_run

    judgements = read_judgements(args.qrels, args.measures, args.split)
    run_ = read_run(args.run)
    stdin = is_stdio(args.run)
    if not run_:
        raise InputError(f"{'standard input' if stdin else args.run} holds no results")
    print_evaluation(run_, judgements, name=_row_name(args.run),
                     run_name="standard input" if stdin else str(args.run))
    return 0


def _row_name(path: Path) -> str:
    """The table's name of the run read from ``path``: its file name; ``stdin`` for standard input, ``run`` for a
    descriptor's name (``--run <(...)`` reads /dev/fd/63, whose file name, 63, says nothing)."""
    if is_stdio(path):
        return "stdin"
    return "run" if is_descriptor_name(path) else path.name
