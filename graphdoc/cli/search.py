"""``graphdoc search``: one query as a readable ranked list, or many queries into a TREC run."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from graphdoc.cli.common import DEVICE_HELP, add_nprobe_argument, check_at_least_one, logger, stdin_queries
from graphdoc.errors import GraphDocError
from graphdoc.fileio import check_not_an_input, check_output_file, is_stdio


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("search", help="search an index", description=__doc__)
    parser.add_argument("--index-dir", required=True, type=Path)
    parser.add_argument("query", nargs="?", help="one query (or use --queries, or --like)")
    parser.add_argument("--queries", help="queries: JSON lines, query-id<TAB>text lines, TREC topics, a .txt of "
                        "one query a line (ids: line numbers), a BEIR folder, a dataset name, or - for any of the "
                        "line formats piped in")
    parser.add_argument("--split", default=None, help="with a BEIR folder: only queries judged in this split")
    parser.add_argument("--like", metavar="DOC_ID", default=None,
                        help="the documents most like this indexed one (itself left out), by its stored vector: a "
                             "dense search, no model loaded")
    parser.add_argument("--mode", choices=("dense", "bm25", "hybrid"), default=None,
                        help="default hybrid: dense and BM25 scores fused (with --like: dense, the only mode)")
    parser.add_argument("--fusion", choices=("weighted", "rrf"), default=None,
                        help="default: the index's (weighted for a new index, or as tune-fusion --save or a "
                             "fine-tuned model set it)")
    parser.add_argument("--alpha", type=float, default=None,
                        help="dense weight for weighted fusion, 0 to 1 (default: the index's: 0.6 for a new index, "
                             "unless tune-fusion --save or a fine-tuned model set another)")
    parser.add_argument("--normalization", choices=("minmax", "zscore", "none"), default=None,
                        help="how weighted fusion scales each retriever's scores before adding them (default: the "
                             "index's: zscore for a new index, unless tune-fusion --save or a fine-tuned model set "
                             "another; with zscore, "
                             "hybrid scores can be above 1 or below 0)")
    parser.add_argument("-k", type=int, default=None, help="results per query (default 10 for one query, 100 for many)")
    parser.add_argument("--filter", action="append", default=None, metavar="FIELD=VALUE",
                        help="only documents whose metadata FIELD is VALUE (a number matches its digits; a list, "
                             "when it holds VALUE; a field inside an object by its path, metadata.year=2020); "
                             "repeatable: the same field again takes either value, other fields must match too")
    parser.add_argument("--output", type=Path, help="with --queries: write the run to this TREC file (-: print "
                        "it; without --output or --qrels the run is printed as TREC lines)")
    parser.add_argument("--qrels", help="with --queries: evaluate the run against these qrels")
    parser.add_argument("--measures", nargs="+", default=None, help="ir-measures names (default nDCG@10 ...)")
    parser.add_argument("--json", action="store_true",
                        help="print hits as JSON lines (with --queries: one line per query and hit)")
    parser.add_argument("--explain", nargs="?", type=int, const=3, default=None, metavar="N",
                        help="with one QUERY: each hit's N passages (default 3) most similar to the query, "
                             "with the document node's attention, sections and offsets")
    add_nprobe_argument(parser)
    parser.add_argument("--model", default=None, help="query encoder (default: the index's model)")
    parser.add_argument("--device", default=None, help=DEVICE_HELP)
    parser.set_defaults(func=run)


def fusion_config(searcher, args: argparse.Namespace):
    """The index's fusion with ``--fusion``/``--alpha``/``--normalization`` applied; options rrf ignores are refused."""
    from dataclasses import replace

    changes = {k: v for k, v in (("method", args.fusion), ("alpha", args.alpha),
                                 ("normalization", args.normalization)) if v is not None}
    fusion = replace(searcher.fusion, **changes) if changes else searcher.fusion
    if fusion.method == "rrf":
        flag = "--alpha" if args.alpha is not None else "--normalization" if args.normalization is not None else None
        if flag is not None:
            whose = "" if args.fusion else " (the index's fusion; add --fusion weighted)"
            raise GraphDocError(f"{flag} applies to weighted fusion, not rrf{whose}")
    return fusion


def check_run_output(args: argparse.Namespace) -> None:
    """Refuse, before searching, an ``--output`` run file that could not be written, is an input (the queries,
    the qrels) or lies inside the index folder (it would replace the index's files)."""
    check_output_file(args.output)
    from graphdoc.corpus import data_files

    inputs = [file for source in (args.queries, args.qrels) if source is not None for file in data_files(source)]
    check_not_an_input(args.output, inputs, what="the run")
    if Path(args.output).resolve().is_relative_to(Path(args.index_dir).resolve()):
        raise GraphDocError(f"--output {args.output} is inside the index folder {args.index_dir}; write the run "
                            "elsewhere")


def open_searcher(args: argparse.Namespace):
    """The searcher of ``--index-dir`` with ``--model`` when one is given and used; the caller closes it."""
    from graphdoc.retrieval.searcher import Searcher

    used = (args.mode != "bm25" and getattr(args, "like", None) is None) or getattr(args, "explain", None) is not None
    searcher = Searcher(args.index_dir, model=args.model if used else None, device=args.device)
    if getattr(args, "nprobe", None) is not None:
        if not searcher.dense.nprobe:
            searcher.close()
            raise GraphDocError(f"--nprobe applies to IVF indexes; {args.index_dir} is "
                                f"{searcher.manifest.faiss_factory!r}")
        searcher.dense.nprobe = args.nprobe
    return searcher


def check_trec_ids(searcher, hint: str = "") -> None:
    """Refuse, before searching, an index whose document ids cannot go into a TREC run."""
    from graphdoc.retrieval.trec import unwritable_ids

    bad = unwritable_ids(searcher.doc_ids)
    if bad:
        raise GraphDocError(f"index {searcher.index_dir}: {len(bad)} of its {len(searcher.doc_ids)} document ids "
                            f"cannot go into a TREC run, e.g. {bad[0]!r} (whitespace); rename those documents and "
                            f"rebuild the index{hint}")


def _check_options(args: argparse.Namespace) -> None:
    """Refuse, before any work, options that are missing, out of range, or would be silently ignored."""
    if sum(given is not None for given in (args.query, args.queries, args.like)) != 1:
        raise GraphDocError("give one QUERY, --queries or --like")
    if args.like is not None:
        if args.mode not in (None, "dense"):
            raise GraphDocError(f"--like searches with the document's dense vector: --mode {args.mode} cannot "
                                "(leave --mode out)")
        for flag, value in (("--explain", args.explain), ("--model", args.model), ("--device", args.device)):
            if value is not None:
                raise GraphDocError(f"{flag} is not used with --like (the document's stored vector is the query)")
    args.mode = args.mode or ("dense" if args.like is not None else "hybrid")
    if args.explain is not None and args.query is None:
        raise GraphDocError("--explain works with one QUERY, not with --queries")
    check_at_least_one("-k", args.k)
    check_at_least_one("--nprobe", args.nprobe)
    check_at_least_one("--explain", args.explain)
    batch_only = (("--output", args.output), ("--qrels", args.qrels), ("--measures", args.measures),
                  ("--split", args.split))
    for flag, value in batch_only if args.queries is None else ():
        if value is not None:
            alone = "one QUERY" if args.like is None else "--like"
            raise GraphDocError(f"{flag} works with --queries, not with {alone}")
    if args.measures is not None and args.qrels is None:
        raise GraphDocError("--measures needs --qrels")
    if args.json and args.queries is not None and ((args.output and not is_stdio(args.output)) or args.qrels):
        raise GraphDocError("--json prints the run of --queries: it cannot be combined with --output FILE or "
                            "--qrels")
    unused = ((("--fusion", args.fusion), ("--alpha", args.alpha), ("--normalization", args.normalization))
              if args.mode != "hybrid" else ())
    if args.mode == "bm25" and args.explain is None:  # --explain encodes the query even then
        unused += (("--model", args.model), ("--device", args.device), ("--nprobe", args.nprobe))
    for flag, value in unused:
        if value is not None:
            raise GraphDocError(f"{flag} is not used with " + ("--like" if args.like is not None else
                                                                f"--mode {args.mode}"))


def _explain(searcher, args: argparse.Namespace, hits: list) -> list:
    """``--explain N``: each hit's explanation (a list of passage dicts), or None for every hit."""
    if args.explain is None:
        return [None] * len(hits)
    from graphdoc.explain import explain_hits

    return explain_hits(searcher, args.query, hits, top=args.explain)


def _no_terms(searcher, query: str) -> str:
    """Why BM25 found nothing when the query has no term it indexes, else ``""``."""
    from graphdoc.retrieval.bm25 import tokenize

    if tokenize([query], searcher.bm25.config)[0]:
        return ""
    return ": the query has no word BM25 indexes (2+ letters or digits, not a stop word)"


def _warn_empty(searcher, args: argparse.Namespace, queries: dict, run_: dict) -> None:
    """Name the queries that found nothing: a TREC run has no line for them, and evaluation counts them 0."""
    empty = [qid for qid in queries if not run_.get(qid)]
    if not empty:
        return
    no_terms = sum(bool(_no_terms(searcher, queries[qid])) for qid in empty) if args.mode == "bm25" else 0
    reason = f" ({no_terms} without a word BM25 indexes)" if no_terms else ""
    shown = ", ".join(empty[:5]) + (", ..." if len(empty) > 5 else "")
    them = "it" if len(empty) == 1 else "them"
    logger.warning("%d of %d queries found no document%s: %s; the results have no line for %s, and evaluation "
                   "counts %s as 0", len(empty), len(queries), reason, shown, them, them)


def _one_line(text: str) -> str:
    """``text`` on one line, whatever its layout (a hit is two lines: a title holding a newline broke that)."""
    return " ".join(text.split())


def _warn_no_match(searcher, filter) -> None:
    """Say so when ``--filter`` keeps no document (an unknown field is an error before this)."""
    mask = searcher.filter_mask(filter)
    if mask is not None and not mask.any():
        shown = " ".join(f"{field}={value}" for field, values in filter.items() for value in values)
        logger.warning("no document of %s matches --filter %s: nothing is found", searcher.index_dir, shown)


def _print_hits(searcher, args: argparse.Namespace, fusion) -> None:
    k = 10 if args.k is None else args.k
    if args.like is not None:
        hits = searcher.similar(args.like, k=k, filter=args.filter)
    else:
        hits = searcher.search(args.query, k=k, mode=args.mode, fusion=fusion, filter=args.filter)
    if not hits and not args.json:
        print("no results" + (_no_terms(searcher, args.query) if args.mode == "bm25" else ""))
    explained = _explain(searcher, args, hits)
    for hit, explanation in zip(hits, explained):
        if args.json:
            extra = {} if explanation is None else {"explanation": explanation}
            print(json.dumps({**vars(hit), **extra}, ensure_ascii=False))
        else:
            section = f" [{_one_line(hit.passage['section_title'])}]" if hit.passage.get("section_title") else ""
            snippet = _one_line(hit.passage.get("snippet", ""))
            print(f"{hit.rank:>3}. {hit.score:.4f}  {hit.doc_id}  {_one_line(hit.title)}{section}\n     {snippet}")
            if explanation is not None:
                from graphdoc.explain import format_explanation

                print(format_explanation(explanation, indent=7))


def _print_run(searcher, run_: dict, args: argparse.Namespace) -> None:
    """A batch run on stdout: TREC lines, or with ``--json`` one JSON line per hit, with the document's title and
    metadata (as a single search's hits have them; read once per document however many queries find it)."""
    if not args.json:
        from graphdoc.retrieval.trec import run_lines

        sys.stdout.writelines(run_lines(run_, tag=f"graphdoc-{args.mode}"))
        return
    shown: dict[str, tuple[str, dict]] = {}
    for qid, docs in run_.items():
        for rank, (doc_id, score) in enumerate(docs.items(), start=1):
            if doc_id not in shown:
                record = searcher.document(doc_id)
                shown[doc_id] = record.get("title", ""), record.get("metadata", {})
            title, metadata = shown[doc_id]
            print(json.dumps({"query_id": qid, "rank": rank, "doc_id": doc_id, "score": score, "title": title,
                              "metadata": metadata}, ensure_ascii=False))


def warn_deeper(measures, k: int, flag: str, kept: str) -> None:
    """Warn of the measures whose cutoff is over ``k``, the documents a ranking keeps (``flag`` sets it)."""
    deeper = [str(m) for m in measures if (getattr(m, "params", {}).get("cutoff") or 0) > k]
    if deeper:
        logger.warning("%s %s a cutoff over %s %d: computed over the %d %s", ", ".join(deeper),
                       "has" if len(deeper) == 1 else "have", flag, k, k, kept)


def run(args: argparse.Namespace) -> int:
    from graphdoc.retrieval.filters import filter_from_pairs

    _check_options(args)
    args.filter = filter_from_pairs(args.filter)
    if args.queries == "-":  # (read before anything loads, as a file's queries are checked before searching)
        if args.split is not None:
            raise GraphDocError("--split picks the queries of a BEIR folder or a dataset; --queries - is neither")
        args.piped_queries = stdin_queries()
    to_stdout = is_stdio(args.output)  # --output -: the run is printed
    if to_stdout:
        args.output = None
    if args.output is not None:
        check_run_output(args)
    judgements = None
    if args.qrels is not None:
        from graphdoc.cli.eval import read_judgements

        judgements = read_judgements(args.qrels, args.measures, args.split)
        warn_deeper(judgements.measures, 100 if args.k is None else args.k, "-k", "results a query keeps")
    with open_searcher(args) as searcher:
        fusion = fusion_config(searcher, args)
        _warn_no_match(searcher, args.filter)
        if args.queries is None:
            _print_hits(searcher, args, fusion)
        else:
            _search_queries(searcher, args, fusion, judgements, to_stdout)
    return 0


def _search_queries(searcher, args: argparse.Namespace, fusion, judgements, to_stdout: bool) -> None:
    """``--queries``: the run into ``--output``, onto stdout, or evaluated against ``--qrels``."""
    from graphdoc.corpus import read_queries

    queries = args.piped_queries if args.queries == "-" else dict(read_queries(args.queries, args.split))
    if not queries:
        raise GraphDocError(f"no queries in {args.queries}")
    if args.output is not None or ((judgements is None or to_stdout) and not args.json):
        check_trec_ids(searcher, "" if args.output is not None else ", or print the run with --json")
    run_ = searcher.batch_search(queries, k=100 if args.k is None else args.k, mode=args.mode, fusion=fusion,
                                 show_progress_bar=not args.quiet, filter=args.filter)
    _warn_empty(searcher, args, queries, run_)
    if args.output is not None:
        from graphdoc.fileio import replacing
        from graphdoc.retrieval.trec import write_run

        note = replacing(args.output)
        write_run(run_, args.output, tag=f"graphdoc-{args.mode}")
        written = sum(bool(hits) for hits in run_.values())
        logger.info("wrote the results of %d quer%s to %s%s", written, "y" if written == 1 else "ies", args.output,
                    note)
    elif judgements is None or to_stdout:
        _print_run(searcher, run_, args)
    if judgements is not None:
        from graphdoc.cli.eval import print_evaluation

        with contextlib.redirect_stdout(sys.stderr if to_stdout else sys.stdout):  # stdout holds the run
            print_evaluation(run_, judgements, name=args.mode, run_name=str(args.queries))
