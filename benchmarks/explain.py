"""Does the top explained passage of the relevant meeting overlap an answer span? (QMSum val)

    python benchmarks/explain.py [--index-dir /tmp/qmidx] [--split val] [--output docs/explain.md]

For every (query, relevant meeting) pair with answer spans in ``spans/<split>.tsv`` (character offsets
into the meeting text), the meeting's passages, as the index holds them, are ranked three ways:

* explained: ``graphdoc.explain.explain_passages``, by similarity of the graph-contextualised passage
  nodes to the query (the queries encoded by the index's model, or ``--model`` checked against it, as
  ``graphdoc search --explain`` ranks them);
* BM25: bm25s over the meeting's passages alone (the index's BM25 settings);
* random: the exact expectation (for hit@1, the fraction of passages that overlap a span);
* attention: the document node's attention, when the index keeps ``passage_attention.npy``.

hit@k is 1 when one of the top k passages overlaps an answer span; ties in a ranking count as a
uniformly random order (the exact expectation). "specific" pairs leave out queries whose spans cover
half of the meeting's passages or more (mostly "summarize the whole meeting"). Passage vectors are read
from the index (``final/``); only the queries are encoded. The table goes to stdout and into the
block between the benchmark markers of ``--output``.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from collections import defaultdict
from math import comb
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from graphdoc.corpus import read_queries  # noqa: E402
from graphdoc.errors import GraphDocError  # noqa: E402
from graphdoc.explain import explain_passages  # noqa: E402
from graphdoc.retrieval.bm25 import BM25Config, BM25Index  # noqa: E402
from graphdoc.retrieval.dense import prepare_vectors  # noqa: E402
from graphdoc.retrieval.searcher import Searcher  # noqa: E402

from doc_blocks import write_block  # noqa: E402  (benchmarks/)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "qmsum"
KS = (1, 3)


def read_spans(path: Path) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """``{(query id, meeting id): [(start, end), ...]}`` from a ``query-id corpus-id start end`` file."""
    spans = defaultdict(list)
    with open(path, encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            spans[row["query-id"], row["corpus-id"]].append((int(row["start"]), int(row["end"])))
    return dict(spans)


def overlapping(passages: list, spans: list[tuple[int, int]]) -> np.ndarray:
    """``[n]`` bool: whether each passage ``[start, end)`` shares a character with an answer span."""
    return np.array([any(s < pe and ps < e for s, e in spans) for ps, pe, *_ in passages])


def expected_hit_at_k(scores: np.ndarray, hits: np.ndarray, k: int) -> float:
    """P(one of the top ``k`` passages is a hit) when ties are ordered uniformly at random."""
    remaining = k
    for value in np.unique(scores)[::-1]:
        group = scores == value
        size, good = int(group.sum()), int(hits[group].sum())
        if size >= remaining:
            return 1.0 - comb(size - good, remaining) / comb(size, remaining)
        if good:
            return 1.0
        remaining -= size
    return 0.0


def score_pair(query: str, vector: np.ndarray, record: dict, vectors: np.ndarray, bm25: BM25Index,
               attention: np.ndarray | None, spans: list[tuple[int, int]]) -> dict[str, float]:
    """hit@k of every ranking for one (query, meeting) pair, and the fraction of passages that are hits."""
    hits = overlapping(record["passages"], spans)
    explained = explain_passages(vector, vectors, record, attention, top=None)
    dense = np.empty(len(hits))
    dense[[e.index for e in explained]] = [e.score for e in explained]
    rankings = {"explained": dense, "bm25": bm25.get_scores(query), "random": np.zeros(len(hits))}
    if attention is not None:
        rankings["attention"] = np.asarray(attention, dtype=np.float64)
    row = {f"{name}@{k}": expected_hit_at_k(scores, hits, k) for name, scores in rankings.items() for k in KS}
    row["fraction"], row["any"] = float(hits.mean()), float(hits.any())
    row["explained_top"] = float(hits[explained[0].index])  # explain_passages' own top passage
    return row


def evaluate_pairs(searcher: Searcher, spans: dict, queries: dict[str, str]) -> list[dict]:
    """One row per judged (query, meeting) pair the index holds: its passages as the index keeps them, the query
    encoded by the searcher's model (the index's, as ``graphdoc search`` encodes it)."""
    if not searcher.dense.has_passages:
        raise SystemExit(f"{searcher.index_dir}: keeps no passage vectors (build it without --no-passages)")
    row_of, vectors, ptr = searcher.row_of, searcher.dense.passage_vectors, searcher.dense.passage_ptr
    attention, config = searcher.passage_attention, BM25Config.from_dict(searcher.manifest.bm25)
    pairs = sorted((q, d) for q, d in spans if q in queries and d in row_of)
    if not pairs:
        raise SystemExit(f"{searcher.index_dir}: holds none of the meetings the span file's queries are judged on "
                         "(an index of another corpus?)")
    qvecs = prepare_vectors(searcher.encode_queries([queries[q] for q, _ in pairs], batch_size=64),
                            searcher.manifest.metric)
    rows, bm25_of = [], {}
    for (qid, doc_id), qvec in zip(pairs, qvecs):
        r = row_of[doc_id]
        record = searcher.record(r)
        if doc_id not in bm25_of:
            bm25_of[doc_id] = BM25Index.build((record["text"][s:e] for s, e, *_ in record["passages"]), config)
        weights = None if attention is None else np.asarray(attention[ptr[r]:ptr[r + 1]])
        rows.append({"query": qid, "meeting": doc_id, **score_pair(
            queries[qid], qvec, record, np.asarray(vectors[ptr[r]:ptr[r + 1]]), bm25_of[doc_id], weights,
            spans[qid, doc_id])})
    return rows


def bootstrap_ci(diff: np.ndarray, samples: int = 10000, seed: int = 0) -> tuple[float, float]:
    """95% paired bootstrap interval of the mean of ``diff``."""
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(samples, len(diff)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def table(rows: list[dict]) -> str:
    """Markdown table: hit@k per ranking, for all pairs and for specific ones, with paired 95% CIs."""
    names = [n for n in ("explained", "bm25", "random", "attention") if f"{n}@1" in rows[0]]
    subsets = {"all pairs": rows, "specific (spans < 1/2 of passages)": [r for r in rows if r["fraction"] < 0.5]}
    lines = ["| pairs | n | " + " | ".join(f"{n} hit@{k}" for n in names for k in KS) + " |",
             "|---|---:|" + "---:|" * (len(names) * len(KS))]
    for label, subset in subsets.items():
        means = [np.mean([r[f"{n}@{k}"] for r in subset]) for n in names for k in KS]
        lines.append(f"| {label} | {len(subset)} | " + " | ".join(f"{m:.3f}" for m in means) + " |")
    lines.append("")
    for label, subset in subsets.items():
        for other in ("bm25", "random"):
            diff = np.array([r["explained@1"] - r[f"{other}@1"] for r in subset])
            lo, hi = bootstrap_ci(diff)
            lines.append(f"- {label}: explained - {other} hit@1 = {diff.mean():+.3f} (95% CI {lo:+.3f} to {hi:+.3f})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index-dir", type=Path, default=Path("/tmp/qmidx"))
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--split", default="val")
    parser.add_argument("--model", default=None, help="encode the queries with this model, loaded with the index's "
                        "settings and checked against it, as graphdoc search --model (default: the index's own)")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "explain.md")
    args = parser.parse_args()
    spans_file = args.data / "spans" / f"{args.split}.tsv"
    if not spans_file.is_file():
        raise SystemExit(f"{spans_file}: not found (--data is the QMSum folder of ../shared/data, with "
                         "spans/<split>.tsv; see its README)")
    if not (args.index_dir / "manifest.json").is_file():
        raise SystemExit(f"{args.index_dir}: not a graphdoc index (build one with `graphdoc index --corpus "
                         "../shared/data/qmsum --index-dir DIR --config section-graph`)")
    started = time.perf_counter()
    spans = read_spans(spans_file)
    queries = dict(read_queries(str(args.data), args.split))
    try:
        with Searcher(args.index_dir, model=args.model, device="cpu") as searcher:
            rows = evaluate_pairs(searcher, spans, queries)
    except GraphDocError as err:  # (a model that is not the index's, a damaged index: one line)
        raise SystemExit(str(err)) from None
    assert all(r["explained_top"] == r["explained@1"] for r in rows)  # no ties at the top
    block = (f"QMSum {args.split}: {len(rows)} (query, relevant meeting) pairs, "
             f"{np.mean([len(spans[r['query'], r['meeting']]) for r in rows]):.2f} answer spans per pair; "
             f"a random passage overlaps a span with probability {np.mean([r['fraction'] for r in rows]):.3f} "
             f"on average; {np.mean([r['any'] for r in rows]):.0%} of the pairs have a passage that does "
             f"(the upper bound of hit@1).\n\n{table(rows)}\n\n({time.perf_counter() - started:.0f} s on the CPU, "
             f"index {args.index_dir})")
    print(block)
    write_block(args.output, block)


if __name__ == "__main__":
    main()
