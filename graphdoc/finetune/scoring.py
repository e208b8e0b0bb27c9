r"""Query-document scores over graph outputs, as the index's dense search scores them.

.. math::
    s(q, d) = (1 - w)\, \mathrm{sim}(q, \mathbf{d}) + w \max_{p \in d} \mathrm{sim}(q, \mathbf{p})

where :math:`\mathbf{d}` is the document node, :math:`\mathbf{p}` its passage nodes and :math:`w` the
passage weight (``w = 0``: the document node alone). ``sim`` is cosine or the dot product.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from graphdoc.errors import GraphDocError
from graphdoc.outputs import GraphOutput


def _prepare(x: torch.Tensor, similarity: str) -> torch.Tensor:
    if similarity == "cosine":
        return F.normalize(x.float(), dim=-1)
    if similarity != "dot":
        raise GraphDocError(f"unknown similarity {similarity!r}; valid: dot, cosine")
    return x.float()


def max_passage_scores(queries: torch.Tensor, nodes: torch.Tensor, ptr: torch.Tensor) -> torch.Tensor:
    """``max`` over each graph's passage nodes (rows ``ptr[i] + 1 : ptr[i + 1]``) of ``queries @ nodes.T``.

    Shapes: ``queries [Q, d]``, ``nodes [N, d]``, ``ptr [B + 1]`` -> ``[Q, B]``. Vectors already prepared.
    """
    graph = torch.repeat_interleave(torch.arange(len(ptr) - 1, device=nodes.device), ptr.diff())  # [N]
    is_passage = torch.ones(len(nodes), dtype=torch.bool, device=nodes.device)
    is_passage[ptr[:-1]] = False  # the document node comes first in every graph
    sims = queries @ nodes[is_passage].T  # [Q, N - B]
    index = graph[is_passage].expand(len(queries), -1)
    empty = torch.full((len(queries), len(ptr) - 1), float("-inf"), device=nodes.device, dtype=sims.dtype)
    return empty.scatter_reduce(1, index, sims, "amax", include_self=False)


def graph_scores(queries: torch.Tensor, documents: GraphOutput, passage_weight: float = 0.0,
                 similarity: str = "cosine") -> torch.Tensor:
    """Scores of every query against every document graph. Shapes: ``[Q, d]`` x ``B`` graphs -> ``[Q, B]``."""
    q = _prepare(queries, similarity)
    doc = q @ _prepare(documents.document_embeddings, similarity).T  # [Q, B]
    if passage_weight == 0:
        return doc
    best = max_passage_scores(q, _prepare(documents.node_embeddings, similarity), documents.ptr)
    best = torch.where(torch.isfinite(best), best, doc)  # a graph of one node: its document node
    return (1 - passage_weight) * doc + passage_weight * best
