"""BM25 on BEIR SciFact test reproduces the reference figures (run with ``pytest -m slow -s``)."""

import csv
import gzip
import json
import time
from pathlib import Path

import pytest

from graphdoc.retrieval.bm25 import BM25Config, BM25Index
from graphdoc.retrieval.evaluation import evaluate
from graphdoc.retrieval.runs import hits_to_run

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.data,
    pytest.mark.skipif(not (DATA / "corpus.jsonl.gz").is_file(), reason=f"SciFact data not found in {DATA}"),
]


def _load():
    with gzip.open(DATA / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    with open(DATA / "queries.jsonl", encoding="utf-8") as f:
        queries = {q["_id"]: q["text"] for q in map(json.loads, f)}
    qrels: dict[str, dict[str, int]] = {}
    with open(DATA / "qrels" / "test.tsv", encoding="utf-8", newline="") as f:
        rows = csv.reader(f, delimiter="\t")
        next(rows)  # header: query-id, corpus-id, score
        for qid, doc_id, score in rows:
            qrels.setdefault(qid, {})[doc_id] = int(score)
    return docs, queries, qrels


def _queries_per_second(index: BM25Index, texts: list[str], repeats: int = 1) -> float:
    """Best of `repeats` timings of one batched search (tokenisation included), k=100."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        index.search(texts, k=100)
        best = min(best, time.perf_counter() - start)
    return len(texts) / best


def test_scifact_bm25_reference():
    docs, queries, qrels = _load()
    doc_ids = [d["_id"] for d in docs]
    texts = [d["title"] + " " + d["text"] for d in docs]
    qids = [q for q in queries if q in qrels]
    query_texts = [queries[q] for q in qids]

    index = BM25Index.build(texts)
    indices, scores = index.search(query_texts, k=100)
    result = evaluate(hits_to_run(qids, indices, scores, doc_ids), qrels, ["nDCG@10", "R@100"])
    assert result["nDCG@10"] == pytest.approx(0.662, abs=0.003)
    assert result["R@100"] == pytest.approx(0.876, abs=0.003)

    bm25s_qps = _queries_per_second(index, query_texts, repeats=3)  # before rank_bm25 fills the heap
    reference = BM25Index.build(texts, BM25Config(backend="rank_bm25"))
    rank_qps = _queries_per_second(reference, query_texts[:30])
    print(
        f"\nSciFact test ({len(qids)} queries, {len(docs)} docs): nDCG@10 {result['nDCG@10']:.4f}, "
        f"R@100 {result['R@100']:.4f}; bm25s {bm25s_qps:.0f} queries/s, "
        f"rank_bm25 {rank_qps:.1f} queries/s (30 queries)"
    )
