"""IR evaluation of runs with ir_measures, and plain-text / markdown result tables.

Conventions: a run is ranked the graphdoc way (score desc, ties by doc id) before scoring, so
tied scores do not fall back on trec_eval's reverse-doc-id order. Aggregates are ir_measures' (the mean, a
sum for counts) over every query in the qrels; a query with no results counts as 0. Queries without qrels are ignored.
Query and document ids of runs and qrels are compared as strings (``0`` and ``"0"`` are one query); a run
may hold :meth:`Searcher.search` hits lists (see :func:`~graphdoc.retrieval.runs.run_from_hits`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from graphdoc.errors import GraphDocError
from graphdoc.retrieval.runs import Run, ranked, run_from_hits

logger = logging.getLogger(__name__)

DEFAULT_MEASURES = ("nDCG@10", "nDCG@20", "P@20", "RR@100", "R@100")
_EXAMPLES = "nDCG@10, P@20, RR@100, R@100, AP, AP@100, Judged@10, Success@5"

Qrels = Mapping[str, Mapping[str, int]]
RunLike = Mapping[str, Mapping[str, float] | Sequence[Any]]


def parse_measures(names: str | Iterable[Any]) -> list[Any]:
    """Parse measure names (ir_measures syntax) into ir_measures measure objects."""
    import ir_measures

    if isinstance(names, str):
        names = [names]
    measures = []
    for name in names:
        if not isinstance(name, str):
            measures.append(_check_cutoff(name))  # already a measure object
            continue
        try:
            measure = ir_measures.parse_measure(name)
        except (NameError, ValueError, TypeError, SyntaxError) as err:
            raise GraphDocError(f"unknown measure {name!r}; use ir_measures names such as {_EXAMPLES}") from err
        try:
            str(measure)  # ir_measures names a measure by its parameters: one it does not know fails there
        except KeyError as err:
            raise GraphDocError(f"measure {name!r} has no parameter {err.args[0]!r}; use ir_measures names such as "
                                f"{_EXAMPLES}") from None
        measures.append(_check_cutoff(measure))
    if not measures:
        raise GraphDocError(f"no measures given; use ir_measures names such as {_EXAMPLES}")
    return measures


def check_computable(measures: Sequence[Any]) -> None:
    """Refuse, in one line, a measure ir_measures can name but not compute here (no installed provider, as for
    ``alpha_nDCG`` or ``RBP``; parameters it needs, as for ``INST``; a failing tool, as ``ERR`` without perl): a
    trial on one judged query, before a run is made or read."""
    import ir_measures

    for measure in measures:
        try:
            if not ir_measures.DefaultPipeline.supports(measure):
                raise ValueError("no installed ir_measures provider computes it")
            # a numeric query id: gdeval.pl (ERR, nDCG with dcg='exp-log2') refuses any other
            with _captured_stderr():  # a failing tool's own lines: the error below says it in one
                list(ir_measures.iter_calc([measure], {"1": {"d": 1}}, {"1": {"d": 1.0}}))
        except (*_CALC_ERRORS, TypeError) as err:  # (TypeError: pytrec_eval's, for a parameter out of range)
            raise GraphDocError(f"measure {str(measure)!r} cannot be computed here: {_reason(err)}; use "
                                f"ir_measures names such as {_EXAMPLES}") from None


def _reason(err: BaseException) -> str:
    """The first line of an ir_measures provider's error, or its kind when it says nothing."""
    text = str(err).strip().splitlines()
    # (a parameter ir_measures leaves unset shows as a bare object: "invalid param max_rel=<object object at 0x..>")
    return re.sub(r"<object object at 0x[0-9a-f]+>", "(not given)", text[0]) if text else type(err).__name__


def _check_cutoff(measure: Any) -> Any:
    """Refuse a cutoff below 1 or not whole: trec_eval aborts the interpreter on ``P@0``."""
    cutoff = getattr(measure, "params", {}).get("cutoff")
    if cutoff is None:
        return measure
    if isinstance(cutoff, bool) or not isinstance(cutoff, int):
        raise GraphDocError(f"measure {str(measure)!r}: the cutoff must be a whole number; got {cutoff!r}")
    if cutoff < 1:
        raise GraphDocError(f"measure {str(measure)!r}: the cutoff must be at least 1")
    return measure


def _plain_qrels(qrels: Qrels) -> dict[str, dict[str, int]]:
    """``qrels`` with str ids and int relevance; a relevance that is not a whole number is refused."""
    if not isinstance(qrels, Mapping):
        raise GraphDocError(f"qrels must be a dict {{query id: {{doc id: relevance}}}}; got {type(qrels).__name__}")
    plain = {}
    for qid, docs in qrels.items():
        if not isinstance(docs, Mapping):
            raise GraphDocError(f"qrels: query {qid!r} holds a {type(docs).__name__}, not {{doc id: relevance}}")
        plain[str(qid)] = {str(doc): _relevance(qid, doc, value) for doc, value in docs.items()}
    return plain


def _relevance(qid: Any, doc: Any, value: Any) -> int:
    """A judgement as an int: a whole number, or the text of one (``"1"``); ``"yes"`` or 1.5 is refused."""
    try:
        number = int(value)
        whole = isinstance(value, str) or number == value
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole:
        raise GraphDocError(f"qrels: the relevance of document {doc!r} for query {qid!r} must be a whole number; "
                            f"got {value!r}")
    return number


def _plain_run(run: RunLike) -> Run:
    """``run`` with str ids and float scores (hits lists turned into scores)."""
    if not isinstance(run, Mapping):
        raise GraphDocError(f"the run must be a dict {{query id: {{doc id: score}}}}; got {type(run).__name__}")
    return {qid: {doc: _score(qid, doc, value) for doc, value in docs.items()}
            for qid, docs in run_from_hits(run).items()}


def _score(qid: str, doc: str, value: Any) -> float:
    """A run's score as a float; anything else, NaN included (it cannot be ranked), is refused."""
    try:
        score = float(value)
    except (TypeError, ValueError):
        score = math.nan
    if math.isnan(score):
        raise GraphDocError(f"the run's score of document {doc!r} for query {qid!r} is not a number: {value!r}")
    return score


def _rank_scores(run: Run) -> dict[str, dict[str, float]]:
    """Replace scores by strictly decreasing values that encode graphdoc's ranking order."""
    out = {}
    for qid, docs in run.items():
        n = len(docs)
        out[qid] = {doc: float(n - i) for i, (doc, _) in enumerate(ranked(docs))}
    return out


def evaluate_per_query(run: RunLike, qrels: Qrels, measures: Sequence[Any] = DEFAULT_MEASURES) -> dict[str, dict[str, float]]:
    """``{qid: {measure: value}}`` for every query in `qrels` (0.0 where the run has no results, but ``NumQ`` and
    ``NumRel``, which count the qrels)."""
    import ir_measures

    parsed = parse_measures(measures)
    names = [str(m) for m in parsed]
    qrels_plain = _plain_qrels(qrels)
    results = {q: _without_results(parsed, judged) for q, judged in qrels_plain.items()}
    run_plain = {q: docs for q, docs in _rank_scores(_plain_run(run)).items() if q in qrels_plain and docs}
    if run_plain:
        check_query_ids(parsed, qrels_plain)
        gdeval = _gdeval_measures(parsed)
        try:  # gdeval.pl, a perl script, writes to descriptor 2: held back (the other providers print nothing)
            with _captured_stderr() if gdeval else contextlib.nullcontext([""]) as captured:
                for metric in ir_measures.iter_calc(parsed, qrels_plain, run_plain):
                    if metric.query_id in run_plain:  # (it gives the others 0 for every measure, NumQ too)
                        results[metric.query_id][str(metric.measure)] = float(metric.value)
        except (*_CALC_ERRORS, TypeError) as err:  # (what check_computable finds first, for the commands)
            raise GraphDocError(f"ir_measures cannot compute {', '.join(names)}: {_reason(err)}") from None
        sys.stderr.write(captured[0])  # what the tools said, when they succeeded: not theirs to lose
    return results


def _without_results(measures: Sequence[Any], judged: Mapping[str, int]) -> dict[str, float]:
    """A query's values while the run has no results for it: 0, but for the measures that count its qrels, as
    trec_eval -c gives them (``NumQ`` 1, ``NumRel`` its documents judged relevant)."""
    counts = {"NumQ": 1.0, "NumRel": float(sum(rel >= 1 for rel in judged.values()))}
    return {str(m): counts.get(getattr(m, "NAME", ""), 0.0) for m in measures}


_NUMBER = re.compile(r"[0-9]+")


def check_query_ids(measures: Sequence[Any], qrels: Qrels) -> None:
    """Refuse, in one line, query ids that a measure's tool cannot take (gdeval.pl, for ``ERR`` and
    ``nDCG(dcg='exp-log2')``: numbers only): what :func:`evaluate` would refuse, said before a run is made."""
    parsed = parse_measures(measures)
    gdeval = _gdeval_measures(parsed)
    problem = _gdeval_problem(gdeval, {str(q): docs for q, docs in qrels.items()}) if gdeval else None
    if problem is not None:
        raise GraphDocError(f"ir_measures cannot compute {', '.join(str(m) for m in parsed)}: {problem}")


def _gdeval_measures(measures: Sequence[Any]) -> list[str]:
    """The names of the measures that gdeval.pl computes (``ERR``, ``nDCG(dcg='exp-log2')``)."""
    import ir_measures

    return [str(m) for m in measures if _supports(ir_measures.gdeval, m)]


def _gdeval_problem(gdeval: list[str], qrels: Qrels) -> str | None:
    """Why gdeval.pl cannot score these queries for the measures ``gdeval``: a query id that is not a number.
    It refuses some such ids, and it cuts others to what follows their last hyphen ("a-1" is query 1), merging
    queries or losing them; so any id other than ASCII digits is refused before it runs."""
    named = next((q for q in qrels if not _NUMBER.fullmatch(q)), None)
    if named is not None:
        return (f"gdeval.pl, which computes {', '.join(gdeval)}, takes numeric query ids only; got {named!r} "
                f"(nDCG@10 and the other trec_eval measures take any id)")
    seen: dict[int, str] = {}
    for q in qrels:
        other = seen.setdefault(int(q), q)
        if other != q:
            return (f"gdeval.pl, which computes {', '.join(gdeval)}, reads query ids as numbers: {other!r} and {q!r} "
                    f"are one query to it (nDCG@10 and the other trec_eval measures take them apart)")
    return None


def _supports(provider: Any, measure: Any) -> bool:
    try:
        return bool(provider.supports(measure))
    except _CALC_ERRORS:  # a measure missing a parameter (INST) fails its own check
        return False


_STDERR_LOCK = threading.RLock()  # descriptor 2 is the process's: one capture at a time


@contextlib.contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    """What is written to file descriptor 2 meanwhile (a tool run by ir_measures writes there, not to
    ``sys.stderr``), held back: ``[text]`` once the block ends. Threads capture one after the other."""
    captured = [""]
    with _STDERR_LOCK:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError, AttributeError):  # no descriptor 2 (an embedded interpreter): none held back
            yield captured
            return
        try:
            try:
                held_file = tempfile.TemporaryFile()
            except OSError:  # no usable temporary folder: nothing to hold it in, so nothing held back
                yield captured
                return
            with held_file as held:
                os.dup2(held.fileno(), 2)
                try:
                    yield captured
                finally:
                    sys.stderr.flush()
                    os.dup2(saved, 2)
                    held.seek(0)
                    captured[0] = held.read().decode("utf-8", "replace")
        finally:
            os.close(saved)


#: what ir_measures' providers raise for a measure they cannot compute (ValueError: unsupported; AssertionError:
#: a parameter missing; SubprocessError: a tool such as gdeval's perl failing)
_CALC_ERRORS = (ValueError, AssertionError, RuntimeError, OSError, subprocess.SubprocessError)


def coverage(run: RunLike, qrels: Qrels) -> tuple[int, int]:
    """How many of the run's queries have judgements, and how many judged queries the run lacks (they count as 0).

    Query ids are compared as strings."""
    judged_ids = {str(q) for q in qrels}
    judged = len({str(q) for q in run} & judged_ids)
    return judged, len(judged_ids) - judged


def evaluate(run: RunLike, qrels: Qrels, measures: Sequence[Any] = DEFAULT_MEASURES, *,
             warn_unjudged: bool = True) -> dict[str, float]:
    """Each measure over the queries in `qrels`, aggregated as ir_measures does (the mean; the sum for counts such
    as ``NumQ`` or ``NumRet``); keys are the measures' canonical names.

    When the run is empty or none of its queries is judged in `qrels`, every figure is 0: a warning is
    logged, unless ``warn_unjudged`` is False (for callers that report the coverage themselves).
    """
    per_query = evaluate_per_query(run, qrels, measures)
    parsed = parse_measures(measures)
    if not per_query:
        raise GraphDocError("cannot evaluate: the qrels hold no queries")
    if warn_unjudged and not run:
        logger.warning("the run is empty: every figure is 0")
    elif warn_unjudged and coverage(run, qrels)[0] == 0:
        logger.warning("none of the %d queries of the run is judged in the qrels (ids are compared as strings): "
                       "every figure is 0", len(run))
    results = {}
    for measure in parsed:
        aggregate = measure.aggregator()
        for values in per_query.values():
            aggregate.add(values[str(measure)])
        results[str(measure)] = float(aggregate.result())
    return results


def _table_cells(results: Mapping[str, Mapping[str, float]], digits: int) -> tuple[list[str], list[list[str]]]:
    measures: list[str] = []
    for row in results.values():
        measures += [m for m in row if m not in measures]
    rows = [[name] + [_cell(m, row[m], digits) if m in row else "-" for m in measures] for name, row in results.items()]
    return ["name", *measures], rows


def _cell(measure: str, value: float, digits: int) -> str:
    """A measure's value as a table shows it: a count (``NumQ``, ``NumRet``, ``NumRel``, ``NumRelRet``, summed
    over queries) as a whole number, any other measure with ``digits`` decimals."""
    if measure.startswith("Num") and float(value).is_integer():
        return str(int(value))
    return f"{value:.{digits}f}"


def format_table(results: Mapping[str, Mapping[str, float]], digits: int = 4) -> str:
    """Aligned plain-text table: one row per system, one column per measure."""
    header, rows = _table_cells(results, digits)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        return "  ".join([first] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]).rstrip()

    return "\n".join([line(header), *(line(r) for r in rows)])


def format_markdown_table(results: Mapping[str, Mapping[str, float]], digits: int = 4) -> str:
    """The same table as GitHub markdown (numbers right-aligned)."""
    header, rows = _table_cells(results, digits)
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
