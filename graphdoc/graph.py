"""Document graphs: a document node (node 0) plus one node per passage.

Pure functions from passage section ids to edge sets, and the PyTorch Geometric ``Data`` built from
them. Graph types, as in the paper:

- ``full``: every node connected to every other node.
- ``section``: passages of the same section connected to each other; the document node connected to
  the first passage of every section.

A text with a single passage (or a query) is a single-node graph: that node is both the passage and
the document. Edges are directed pairs listed both ways; self-loops are left to the GAT layers.
"""

from __future__ import annotations

import functools
from typing import Sequence

import torch
from torch_geometric.data import Data

from graphdoc.errors import GraphDocError


def _clique(nodes: Sequence[int]) -> list[tuple[int, int]]:
    return [(a, b) for a in nodes for b in nodes if a != b]


def full_edges(section_ids: Sequence[int]) -> list[tuple[int, int]]:
    """All ordered pairs of distinct nodes among the document node and its passages."""
    if len(section_ids) <= 1:
        return []
    return _clique(range(len(section_ids) + 1))


def section_edges(section_ids: Sequence[int]) -> list[tuple[int, int]]:
    """Passages within a section form a clique; the document node links each section's first passage."""
    if len(section_ids) <= 1:
        return []
    groups: dict[int, list[int]] = {}
    for i, section in enumerate(section_ids):
        groups.setdefault(section, []).append(i + 1)  # passage i is node i + 1
    edges: list[tuple[int, int]] = []
    for members in groups.values():
        edges.extend(_clique(members))
        edges.extend([(0, members[0]), (members[0], 0)])
    return edges


GRAPH_BUILDERS = {"full": full_edges, "section": section_edges}


def edge_index(section_ids: Sequence[int], graph_type: str = "full") -> torch.Tensor:
    """The ``[2, E]`` edge index of a document graph (sorted, no duplicates, no self-loops)."""
    return _edge_index(tuple(section_ids), graph_type).clone()


@functools.lru_cache(maxsize=256)  # training rebuilds the same documents' graphs every step (<= ~1 MB each)
def _edge_index(section_ids: tuple[int, ...], graph_type: str) -> torch.Tensor:
    try:
        builder = GRAPH_BUILDERS[graph_type]
    except KeyError:
        raise GraphDocError(
            f"unknown graph type {graph_type!r}; valid: {', '.join(GRAPH_BUILDERS)}") from None
    edges = sorted(set(builder(section_ids)))
    if not edges:
        return torch.empty((2, 0), dtype=torch.long)
    return torch.tensor(edges, dtype=torch.long).t().contiguous()


def num_nodes(num_passages: int) -> int:
    """A document of ``n`` passages has ``n + 1`` nodes, except a one-passage text, which has one."""
    return 1 if num_passages <= 1 else num_passages + 1


def document_graph(passage_vectors: torch.Tensor, section_ids: Sequence[int],
                   graph_type: str = "full") -> Data:
    """Build the graph of one document from its ``[n, d]`` passage vectors.

    Node 0 is the document node, initialised as the mean of the passage vectors; nodes ``1..n`` are
    the passages. With one passage the graph is that single node.

    Shapes: ``x``: ``[n + 1, d]`` (``[1, d]`` for one passage); ``edge_index``: ``[2, E]``.
    """
    if passage_vectors.dim() != 2 or passage_vectors.size(0) == 0:
        raise ValueError("a document graph needs a [n >= 1, d] tensor of passage vectors")
    if passage_vectors.size(0) != len(section_ids):
        raise ValueError("one section id is needed per passage vector")
    if passage_vectors.size(0) == 1:
        x = passage_vectors
    else:
        x = torch.cat([passage_vectors.mean(dim=0, keepdim=True), passage_vectors], dim=0)
    return Data(x=x, edge_index=edge_index(section_ids, graph_type).to(x.device))
