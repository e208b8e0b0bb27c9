"""Retrieval benchmark: BM25, flat MiniLM baselines, graphdoc dense and hybrid, on SciFact and QMSum.

    python benchmarks/retrieval.py [--collections scifact qmsum] [--work-dir /tmp/graphdoc-bench]

Prints one table per collection and writes them to ``--output`` (default docs/retrieval_benchmark.md),
between its benchmark markers: the notes around them are kept. Indexes are built under --work-dir (resumed
if present: the build time is read from the index manifest; ``NAME-data.json`` records the corpus they and
the FirstP cache were made from, and other data is refused). The flat baselines with passages (MaxP, MeanP)
use the passage vectors of the untrained graphdoc index, which are exactly the default model's own passage
vectors (the GAT layers start as the identity); FirstP encodes title + text truncated to 256 tokens with
the same model.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from graphdoc.corpus import read_corpus, read_qrels, read_queries, source_key  # noqa: E402
from graphdoc.encoder import GraphDocEncoder  # noqa: E402
from graphdoc.retrieval.builder import build_index  # noqa: E402
from graphdoc.retrieval.dense import prepare_vectors  # noqa: E402
from graphdoc.retrieval.evaluation import evaluate, format_markdown_table, format_table  # noqa: E402
from graphdoc.retrieval.fusion import FusionConfig, fuse  # noqa: E402
from graphdoc.retrieval.searcher import Searcher  # noqa: E402
from graphdoc.config import load_config_file  # noqa: E402
from graphdoc.retrieval.progress import corpus_state  # noqa: E402

from doc_blocks import write_block  # noqa: E402  (benchmarks/)

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MEASURES = ["nDCG@10", "nDCG@20", "R@100"]
COLLECTIONS = {  # name: (folder, qrels split, model config or None)
    "scifact": ("scifact", "test", None),
    "qmsum": ("qmsum", "val", "section-graph"),
}
FLAT_ALPHAS = (0.3, 0.5, 0.7)


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def check_work_dir(work_dir: Path, name: str, corpus: Path) -> None:
    """Refuse a ``--work-dir`` whose ``name`` index and FirstP cache were made from other data: they are kept
    by collection name, and an index resumed over another corpus stops at its first document id."""
    stamp = work_dir / f"{name}-data.json"  # the corpus the artefacts were made from, as an index records one
    here = {"corpus": source_key(str(corpus)), "state": corpus_state(str(corpus))}
    index, first_p = work_dir / f"{name}-index", work_dir / f"{name}-firstp.npy"
    artefacts = [p for p in (index, first_p) if p.exists()]
    made = json.loads(stamp.read_text(encoding="utf-8")) if stamp.is_file() else None
    if made is None and (index / "manifest.json").is_file():  # made before the stamp: the index names its corpus
        sources = json.loads((index / "manifest.json").read_text(encoding="utf-8")).get("sources", [])
        made = here if {s.get("corpus") for s in sources} == {here["corpus"]} else None
    if artefacts and made != here:
        origin = f"from {made['corpus']} as it was then" if made else "from data it does not record"
        raise SystemExit(f"{work_dir}: its {name} index and FirstP cache were made {origin}, not from "
                         f"{here['corpus']} as it is now: use another --work-dir, or remove "
                         + " and ".join(map(str, artefacts)))
    stamp.write_text(json.dumps(here), encoding="utf-8")


def first_p_vectors(model: GraphDocEncoder, corpus: Path, cache: Path) -> np.ndarray:
    """The default model on title + text truncated to 256 tokens (cached on disk between runs)."""
    if cache.is_file():
        return np.load(cache)
    texts = [f"{d.title} {d.text}".strip() for d in read_corpus(corpus)]
    vectors = model.encode_queries(texts, batch_size=32)  # one node, truncated: the encoder's own vector
    np.save(cache, vectors)
    return vectors


def run_from_scores(qids, doc_ids, scores: np.ndarray, k: int = 100) -> dict:
    run = {}
    for qid, row in zip(qids, scores):
        top = np.argsort(-row)[:k]
        run[qid] = {doc_ids[i]: float(row[i]) for i in top}
    return run


def passage_baselines(searcher: Searcher, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MaxP and MeanP scores of every query against every document: ``[n_queries, n_docs]`` each."""
    dense = searcher.dense
    p_scores = np.asarray(dense.passage_vectors @ q.T)  # [P, Q]
    starts = dense.passage_ptr[:-1]
    max_p = np.maximum.reduceat(p_scores, starts, axis=0).T
    means = np.add.reduceat(np.asarray(dense.passage_vectors), starts, axis=0)
    mean_p = prepare_vectors(means, "cosine") @ q.T
    return max_p, mean_p.T


def fused_baseline(dense_run: dict, bm25_all: dict, qrels: dict, k: int = 100) -> tuple[float, dict]:
    """Best of alpha 0.3/0.5/0.7 min-max fusion of a flat run with BM25 over the union (as the issue)."""
    best = None
    for alpha in FLAT_ALPHAS:
        run = {q: fuse(dense_run[q], bm25_all[q], FusionConfig(alpha=alpha), k) for q in dense_run}
        result = evaluate(run, qrels, MEASURES)
        if best is None or result["nDCG@10"] > best[1]["nDCG@10"]:
            best = (alpha, result)
    return best


def union_scores(run_a: dict, full_b: np.ndarray, doc_index: dict, qids) -> dict:
    """``run_a``'s documents scored by a full score matrix (to fuse over the union)."""
    return {q: {d: float(full_b[i, doc_index[d]]) for d in run_a[q]} for i, q in enumerate(qids)}


def latency(fn, queries: list, repeats: int = 1) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        for query in queries:
            start = time.perf_counter()
            fn(query)
            times.append((time.perf_counter() - start) * 1000)
    return float(np.percentile(times, 50)), float(np.percentile(times, 95))


def benchmark(name: str, args) -> tuple[dict, dict]:
    folder, split, config_file = COLLECTIONS[name]
    corpus = args.data_dir / folder
    config = load_config_file(config_file) if config_file else None
    model = GraphDocEncoder.from_pretrained(None, config=config)
    index_dir = args.work_dir / f"{name}-index"
    build_index(model, str(corpus), index_dir, batch_size=16, show_progress_bar=True)
    searcher = Searcher(index_dir, model=model)
    qrels = read_qrels(corpus, split)
    queries = {q: t for q, t in read_queries(corpus, split) if q in qrels}
    qids, texts = list(queries), list(queries.values())
    q_vectors = model.encode_queries(texts, batch_size=64)
    q = prepare_vectors(q_vectors, "cosine")
    doc_ids = searcher.doc_ids
    doc_index = {d: i for i, d in enumerate(doc_ids)}
    results: dict[str, dict] = {}

    bm25_run = searcher.batch_search(queries, 100, "bm25")
    results["BM25 (bm25s)"] = evaluate(bm25_run, qrels, MEASURES)
    bm25_full = np.stack([searcher.bm25.get_scores(t) for t in texts])
    first_p = prepare_vectors(first_p_vectors(model, corpus, args.work_dir / f"{name}-firstp.npy"), "cosine")
    max_p, mean_p = passage_baselines(searcher, q)
    flats = {"FirstP": q @ first_p.T, "MaxP": max_p, "MeanP": mean_p}
    for label, scores in flats.items():
        run = run_from_scores(qids, doc_ids, scores)
        results[f"{label} (flat MiniLM)"] = evaluate(run, qrels, MEASURES)
        dense_u = {qid: {**run[qid], **{d: float(scores[i, doc_index[d]]) for d in bm25_run[qid]}}
                   for i, qid in enumerate(qids)}
        bm25_u = union_scores(dense_u, bm25_full, doc_index, qids)
        alpha, fused = fused_baseline(dense_u, bm25_u, qrels)
        results[f"{label} + BM25 (alpha {alpha})"] = fused

    dense_run = searcher.batch_search(queries, 100, "dense", query_vectors=q_vectors)
    results[f"graphdoc dense (passage_weight {searcher.dense.settings.passage_weight})"] = evaluate(dense_run, qrels, MEASURES)
    hybrid_run = searcher.batch_search(queries, 100, "hybrid", query_vectors=q_vectors)
    f = searcher.fusion
    results[f"graphdoc hybrid ({f.method}, alpha {f.alpha}, {f.normalization})"] = evaluate(hybrid_run, qrels, MEASURES)

    manifest = searcher.manifest
    stats = {"documents": manifest.counts["documents"], "passages": manifest.counts["passages"],
             "encode_seconds": manifest.counts.get("encode_seconds", float("nan")),
             "index_mb": folder_size(index_dir / "final") / 2**20}
    sample = texts[: args.latency_queries]
    vectors = {t: v[None, :] for t, v in zip(sample, q_vectors)}
    for mode in ("dense", "bm25", "hybrid"):
        stats[f"{mode} p50/p95 ms (vectors given)"] = latency(
            lambda t, m=mode: searcher.batch_search([t], 100, m, query_vectors=vectors[t] if m != "bm25" else None),
            sample)
        stats[f"{mode} p50/p95 ms (with query encoding)"] = latency(
            lambda t, m=mode: searcher.batch_search([t], 100, m), sample)
    return results, stats


def format_stat(value) -> str:
    """A figure as the report shows it: floats (and pairs of them, p50/p95) to two decimals."""
    if isinstance(value, tuple):
        return ", ".join(f"{x:.2f}" for x in value)
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS), choices=list(COLLECTIONS))
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="holds scifact/ and qmsum/")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/graphdoc-bench"))
    parser.add_argument("--latency-queries", type=int, default=100)
    parser.add_argument("--output", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "retrieval_benchmark.md")
    args = parser.parse_args()
    for name in args.collections:
        folder, split, _ = COLLECTIONS[name]
        if not (args.data_dir / folder / "qrels" / f"{split}.tsv").is_file():
            raise SystemExit(f"{args.data_dir / folder}: no {name} data there (expected corpus.jsonl.gz, "
                             f"queries.jsonl and qrels/{split}.tsv; see ../shared/data/README.md)")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    for name in args.collections:  # every collection before the first is run
        check_work_dir(args.work_dir, name, args.data_dir / COLLECTIONS[name][0])
    sections = []
    for name in args.collections:
        results, stats = benchmark(name, args)
        print(f"\n== {name} ==")
        print(format_table(results))
        for key, value in stats.items():
            print(f"{key}: {format_stat(value)}")
        lines = [f"## {name}", "", format_markdown_table(results), ""]
        lines += [f"- {k}: {format_stat(v)}" for k, v in stats.items()]
        sections.append("\n".join(lines) + "\n")
    header = ("# Retrieval benchmark\n\nProduced by `python benchmarks/retrieval.py` on a 2-core CPU "
              "(no GPU). Untrained default model (all-MiniLM-L6-v2).\n\n")
    write_block(args.output, header + "\n".join(sections))


if __name__ == "__main__":
    main()
