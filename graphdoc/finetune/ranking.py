r"""Supervised ranking: query-document pairs, hard negatives, and the contrastive loss.

Each training pair ``(q_i, d_i^+)`` of a batch of ``B`` is scored against every document of the batch:
the ``B`` positives (in-batch negatives for the other queries) and ``hard_negatives`` documents sampled
per query from a ranking of the corpus, minus that query's positives. With ``M`` distinct documents,

.. math::
    \mathcal{L} = \frac{1}{B} \sum_{i=1}^{B} -\log
        \frac{\exp(s(q_i, d_i^+) / \tau)}{\sum_{j \in \mathcal{M}_i} \exp(s(q_i, d_j) / \tau)}

where :math:`\mathcal{M}_i` holds every batch document except ``q_i``'s *other* positives (a
relevant document is never a negative). Negatives come from BM25's top ``depth`` during the first half
of the epochs and from the model's own top ``depth``, ranked once with the half-way checkpoint, after it
(the paper's MS MARCO protocol).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from graphdoc.errors import GraphDocError
from graphdoc.fileio import atomic_write
from graphdoc.finetune.scoring import graph_scores
from graphdoc.outputs import GraphOutput

logger = logging.getLogger(__name__)

BM25, MODEL = "bm25", "model"


@dataclass(frozen=True)
class Pair:
    """A query and one of its relevant documents."""

    query_id: str
    doc_id: str


def training_pairs(qrels: Mapping[str, Mapping[str, int]], known_docs: set[str] | None = None) -> list[Pair]:
    """Every ``(query, relevant document)`` of ``qrels`` (relevance > 0), sorted; unknown documents dropped."""
    pairs = [Pair(q, d) for q, docs in qrels.items() for d, rel in docs.items()
             if rel > 0 and (known_docs is None or d in known_docs)]
    if not pairs:
        raise GraphDocError("the qrels hold no relevant document of the corpus to train on")
    return sorted(pairs, key=lambda p: (p.query_id, p.doc_id))


def negative_source(epoch: int, epochs: int) -> str:
    """``bm25`` for the first half of the epochs (rounded up), ``model`` after; one epoch: ``bm25``."""
    return BM25 if epoch < max(1, math.ceil(epochs / 2)) else MODEL


def switch_epoch(epochs: int) -> int | None:
    """The first epoch that takes the model's own negatives (``None``: never)."""
    first = max(1, math.ceil(epochs / 2))
    return first if first < epochs else None


def sample_negatives(ranking: Sequence[str], positives: set[str], k: int, rng: np.random.Generator,
                     depth: int = 100) -> list[str]:
    """``k`` documents drawn without replacement from the top ``depth`` of ``ranking``, positives excluded."""
    pool = [d for d in ranking[:depth] if d not in positives]
    if k <= 0 or not pool:
        return []
    picks = rng.choice(len(pool), size=min(k, len(pool)), replace=False)
    return [pool[i] for i in sorted(picks)]


def search_depth(depth: int, corpus_size: int, pool_size: int | None = None) -> int:
    """How deep to search for ``depth`` negatives from a pool of ``pool_size`` of the ``corpus_size`` documents
    (``None``: the whole corpus): as deep as the pool is sparse in the corpus, at most 10x ``depth``."""
    if pool_size is None:
        return depth
    return min(corpus_size, math.ceil(depth * corpus_size / max(1, pool_size)), 10 * depth)


def batch_documents(pairs: Sequence[Pair], negatives: Sequence[Sequence[str]],
                    positives: Mapping[str, set[str]]) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """The batch's distinct documents, each pair's target column, and the columns to leave out.

    Returns ``doc_ids`` (``M``), ``targets`` (``[B]``) and ``exclude`` (``[B, M]`` bool: the query's other
    positives). Positives come first, in pair order, then the negatives.
    """
    doc_ids: list[str] = list(dict.fromkeys([p.doc_id for p in pairs] + [d for neg in negatives for d in neg]))
    column = {d: j for j, d in enumerate(doc_ids)}
    targets = torch.tensor([column[p.doc_id] for p in pairs], dtype=torch.long)
    exclude = torch.zeros((len(pairs), len(doc_ids)), dtype=torch.bool)
    for i, pair in enumerate(pairs):
        for d in positives.get(pair.query_id, ()):
            if d != pair.doc_id and d in column:
                exclude[i, column[d]] = True
    return doc_ids, targets, exclude


def ranking_loss(queries: torch.Tensor, documents: GraphOutput, targets: torch.Tensor, exclude: torch.Tensor,
                 passage_weight: float = 0.0, similarity: str = "cosine", temperature: float = 1.0) -> torch.Tensor:
    """The contrastive loss of the module doc. Shapes: ``queries [B, d]``, ``M`` graphs, ``targets [B]``,
    ``exclude [B, M]`` -> scalar."""
    scores = graph_scores(queries, documents, passage_weight, similarity) / temperature  # [B, M]
    scores = scores.masked_fill(exclude.to(scores.device), float("-inf"))
    return F.cross_entropy(scores, targets.to(scores.device))


# ---------------------------------------------------------------------- kept ranking lists
def read_ranking_lists(path: Path, digest: str, legacy_ok: bool = False) -> dict[str, list[str]] | None:
    """The lists kept in ``path`` when they were made from what ``digest`` describes, else ``None`` (ranked again).

    The file is ``{"digest", "lists": {query id: [doc id, ...]}}``. A file written before digests were kept (a
    bare ``{query id: [...]}``) is taken only when ``legacy_ok`` (resuming after a checkpoint of its run).
    """
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        saved = None
    if isinstance(saved, dict) and isinstance(saved.get("digest"), str) and isinstance(saved.get("lists"), dict):
        if saved["digest"] == digest:
            return saved["lists"]
    elif legacy_ok and isinstance(saved, dict) and all(isinstance(v, list) for v in saved.values()):
        return saved
    logger.info("%s was ranked for other data or settings (an earlier run in this folder): ranking again", path)
    return None


def write_ranking_lists(path: Path, lists: Mapping[str, Sequence[str]], digest: str) -> None:
    """Keep ``lists`` in ``path`` (atomically), with the ``digest`` of what they were made from."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w", encoding="utf-8") as handle:
        json.dump({"digest": digest, "lists": {q: list(d) for q, d in lists.items()}}, handle)
