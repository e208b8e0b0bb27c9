"""``graphdoc search``: one query as a readable ranked list, or many queries into a TREC run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from graphdoc.errors import GraphDocError


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("search", help="search an index", description=__doc__)
    parser.add_argument("--index-dir", required=True, type=Path)
    parser.add_argument("query", nargs="?", help="one query (or use --queries)")
    parser.add_argument("--queries", help="queries file, BEIR folder or dataset name")
    parser.add_argument("--split", default=None, help="with a BEIR folder: only queries judged in this split")
    parser.add_argument("--mode", choices=("dense", "bm25", "hybrid"), default="hybrid")
    parser.add_argument("--fusion", choices=("weighted", "rrf"), default=None, help="default: the index's")
    parser.add_argument("--alpha", type=float, default=None, help="dense weight for weighted fusion")
    parser.add_argument("--normalization", choices=("minmax", "zscore", "none"), default=None)
    parser.add_argument("-k", type=int, default=None, help="results per query (default 10 for one query, 100 for many)")
    parser.add_argument("--output", type=Path, help="write a TREC run file")
    parser.add_argument("--qrels", help="evaluate the run against these qrels")
    parser.add_argument("--measures", nargs="+", default=None, help="ir-measures names (default nDCG@10 ...)")
    parser.add_argument("--json", action="store_true", help="print hits as JSON lines")
    parser.add_argument("--explain", nargs="?", type=int, const=3, default=None, metavar="N",
                        help="with one QUERY: each hit's N passages (default 3) most similar to the query, "
                             "with the document node's attention, sections and offsets")
    parser.add_argument("--model", default=None, help="query encoder (default: the index's model)")
    parser.add_argument("--device", default=None)
    parser.set_defaults(func=run)


def fusion_config(searcher, args: argparse.Namespace):
    from dataclasses import replace

    changes = {k: v for k, v in (("method", args.fusion), ("alpha", args.alpha),
                                 ("normalization", args.normalization)) if v is not None}
    return replace(searcher.fusion, **changes) if changes else searcher.fusion


def open_searcher(args: argparse.Namespace):
    from graphdoc.retrieval.searcher import Searcher

    searcher = Searcher(args.index_dir, device=args.device)
    if args.model is not None and args.mode != "bm25":
        from graphdoc.backbones import load_model

        searcher.model = load_model(args.model, device=args.device)
    return searcher


def _explain(searcher, args: argparse.Namespace, hits: list) -> list:
    """``--explain N``: each hit's explanation (a list of passage dicts), or None for every hit."""
    if args.explain is None:
        return [None] * len(hits)
    from graphdoc.explain import explain_hits

    return explain_hits(searcher, args.query, hits, top=args.explain)


def run(args: argparse.Namespace) -> int:
    if (args.query is None) == (args.queries is None):
        raise GraphDocError("give either one QUERY or --queries")
    if args.explain is not None and args.query is None:
        raise GraphDocError("--explain works with one QUERY, not with --queries")
    searcher = open_searcher(args)
    fusion = fusion_config(searcher, args)
    if args.query is not None:
        hits = searcher.search(args.query, k=args.k or 10, mode=args.mode, fusion=fusion)
        explained = _explain(searcher, args, hits)
        for hit, explanation in zip(hits, explained):
            if args.json:
                extra = {} if explanation is None else {"explanation": explanation}
                print(json.dumps({**vars(hit), **extra}, ensure_ascii=False))
            else:
                section = f" [{hit.passage['section_title']}]" if hit.passage.get("section_title") else ""
                print(f"{hit.rank:>3}. {hit.score:.4f}  {hit.doc_id}  {hit.title}{section}\n"
                      f"     {hit.passage.get('snippet', '')}")
                if explanation is not None:
                    from graphdoc.explain import format_explanation

                    print(format_explanation(explanation, indent=7))
        return 0
    from graphdoc.corpus import read_queries

    queries = dict(read_queries(args.queries, args.split))
    if not queries:
        raise GraphDocError(f"no queries in {args.queries}")
    run_ = searcher.batch_search(queries, k=args.k or 100, mode=args.mode, fusion=fusion)
    if args.output:
        from graphdoc.retrieval.trec import write_run

        write_run(run_, args.output, tag=f"graphdoc-{args.mode}")
        print(f"wrote {len(run_)} queries to {args.output}")
    if args.qrels:
        from graphdoc.cli.eval import print_evaluation

        print_evaluation(run_, args.qrels, args.measures, args.split, name=args.mode)
    return 0
