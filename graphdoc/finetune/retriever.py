"""Exact in-memory ranking of a corpus with a model being fine-tuned: dense, BM25 and hybrid runs.

Every document graph is embedded once per evaluation (cheap over cached passage vectors); each query is
scored against every document exactly as the index's dense search scores candidates (see
:mod:`graphdoc.finetune.scoring`). The hybrid run fuses dense and BM25 scores over the union of both top
``depth`` lists, as :class:`graphdoc.retrieval.Searcher` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from graphdoc.finetune.inputs import GraphInputs
from graphdoc.finetune.scoring import graph_scores
from graphdoc.retrieval.bm25 import BM25Config, BM25Index
from graphdoc.retrieval.fusion import FusionConfig, fuse_runs
from graphdoc.retrieval.runs import Run, id_ranks, top_k_array

QUERY_CHUNK = 64


@dataclass
class ComponentRuns:
    """``dense`` (top ``depth``), and dense / BM25 scores over the union of both top lists (for fusion)."""

    dense: Run
    union_dense: Run
    union_sparse: Run

    def hybrid(self, fusion: FusionConfig, k: int = 100) -> Run:
        return fuse_runs(self.union_dense, self.union_sparse, fusion, k)


class CorpusRanker:
    """Ranks ``doc_ids`` (all in ``documents``) for queries; ``bm25`` row ``i`` is ``doc_ids[i]``."""

    def __init__(self, documents: GraphInputs, doc_ids: Sequence[str], bm25: BM25Index | None = None,
                 passage_weight: float = 0.9, similarity: str = "cosine") -> None:
        self.documents, self.doc_ids = documents, list(doc_ids)
        self.bm25 = bm25
        self.passage_weight, self.similarity = passage_weight, similarity
        self.name_rank = id_ranks(self.doc_ids)  # equal scores rank by document id, as the index's search ranks them

    @classmethod
    def build_bm25(cls, texts: Sequence[str], config: BM25Config | None = None) -> BM25Index:
        """A BM25 index over ``title text`` strings, in ``doc_ids`` order (the index builder's text)."""
        return BM25Index.build(list(texts), config or BM25Config())

    def dense_scores(self, query_vectors: torch.Tensor) -> np.ndarray:
        """``[Q, N]`` dense scores of ``[Q, d]`` query vectors against every document (current weights)."""
        graphs = self.documents.embed_all(self.doc_ids)
        rows = [graph_scores(query_vectors[i:i + QUERY_CHUNK].float().cpu(), graphs, self.passage_weight,
                             self.similarity) for i in range(0, len(query_vectors), QUERY_CHUNK)]
        return torch.cat(rows).numpy() if rows else np.zeros((0, len(self.doc_ids)))

    def components(self, query_ids: Sequence[str], query_texts: Sequence[str], query_vectors: torch.Tensor,
                   depth: int = 100) -> ComponentRuns:
        """Dense top ``depth`` per query, and both retrievers' scores over the union of their top lists."""
        scores = self.dense_scores(query_vectors)
        dense, union_dense, union_sparse = {}, {}, {}
        for i, qid in enumerate(query_ids):
            top = np.lexsort((self.name_rank, -scores[i]))[:depth]
            dense[qid] = {self.doc_ids[r]: float(scores[i, r]) for r in top}
            if self.bm25 is None:
                continue
            sparse_all = self.bm25.get_scores(query_texts[i])
            s_top, _ = top_k_array(sparse_all, depth, self.name_rank)  # BM25's matches (a negative score is one)
            union = np.unique(np.concatenate([top, s_top[s_top >= 0]]))
            union_dense[qid] = {self.doc_ids[r]: float(scores[i, r]) for r in union}
            union_sparse[qid] = {self.doc_ids[r]: float(sparse_all[r]) for r in union}
        return ComponentRuns(dense, union_dense, union_sparse)

    def bm25_run(self, query_ids: Sequence[str], query_texts: Sequence[str], depth: int = 100) -> Run:
        """BM25 alone: the top ``depth`` documents that match the query, as the index's BM25 search gives them."""
        run = {}
        for qid, text in zip(query_ids, query_texts):
            rows, scores = top_k_array(self.bm25.get_scores(text), depth, self.name_rank)
            run[qid] = {self.doc_ids[r]: float(s) for r, s in zip(rows.tolist(), scores.tolist()) if r >= 0}
        return run
