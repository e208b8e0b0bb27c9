"""IR evaluation of runs with ir_measures, and plain-text / markdown result tables.

Conventions: a run is ranked the graphdoc way (score desc, ties by doc id) before scoring, so
tied scores do not fall back on trec_eval's reverse-doc-id order. Aggregates are the mean over
every query in the qrels; a query with no results counts as 0. Queries without qrels are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from graphdoc.errors import GraphDocError
from graphdoc.retrieval.runs import ranked

DEFAULT_MEASURES = ("nDCG@10", "nDCG@20", "P@20", "RR@100", "R@100")
_EXAMPLES = "nDCG@10, P@20, RR@100, R@100, AP, AP@100, Judged@10, Success@5"

Qrels = Mapping[str, Mapping[str, int]]
RunLike = Mapping[str, Mapping[str, float]]


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
        measures.append(_check_cutoff(measure))
    if not measures:
        raise GraphDocError(f"no measures given; use ir_measures names such as {_EXAMPLES}")
    return measures


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


def _rank_scores(run: RunLike) -> dict[str, dict[str, float]]:
    """Replace scores by strictly decreasing values that encode graphdoc's ranking order."""
    out = {}
    for qid, docs in run.items():
        n = len(docs)
        out[qid] = {doc: float(n - i) for i, (doc, _) in enumerate(ranked(docs))}
    return out


def evaluate_per_query(run: RunLike, qrels: Qrels, measures: Sequence[Any] = DEFAULT_MEASURES) -> dict[str, dict[str, float]]:
    """``{qid: {measure: value}}`` for every query in `qrels` (0.0 where the run has no results)."""
    import ir_measures

    parsed = parse_measures(measures)
    names = [str(m) for m in parsed]
    qrels_plain = {q: {d: int(r) for d, r in docs.items()} for q, docs in qrels.items()}
    results: dict[str, dict[str, float]] = {q: dict.fromkeys(names, 0.0) for q in qrels_plain}
    run_plain = {q: docs for q, docs in _rank_scores(run).items() if q in qrels_plain and docs}
    if run_plain:
        for metric in ir_measures.iter_calc(parsed, qrels_plain, run_plain):
            results[metric.query_id][str(metric.measure)] = float(metric.value)
    return results


def coverage(run: RunLike, qrels: Qrels) -> tuple[int, int]:
    """How many of the run's queries have judgements, and how many judged queries the run lacks (they count as 0)."""
    judged = sum(1 for q in run if q in qrels)
    return judged, len(qrels) - judged


def evaluate(run: RunLike, qrels: Qrels, measures: Sequence[Any] = DEFAULT_MEASURES) -> dict[str, float]:
    """Mean of each measure over the queries in `qrels`; keys are the measures' canonical names."""
    per_query = evaluate_per_query(run, qrels, measures)
    names = [str(m) for m in parse_measures(measures)]
    if not per_query:
        raise GraphDocError("cannot evaluate: the qrels hold no queries")
    return {name: sum(v[name] for v in per_query.values()) / len(per_query) for name in names}


def _table_cells(results: Mapping[str, Mapping[str, float]], digits: int) -> tuple[list[str], list[list[str]]]:
    measures: list[str] = []
    for row in results.values():
        measures += [m for m in row if m not in measures]
    rows = [[name] + [f"{row[m]:.{digits}f}" if m in row else "-" for m in measures] for name, row in results.items()]
    return ["name", *measures], rows


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
