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

import logging
import threading
from collections import OrderedDict
from typing import Sequence

import torch
from torch_geometric.data import Data

from graphdoc.errors import GraphDocError

logger = logging.getLogger(__name__)


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

# graphs of at most this many edges are cached: training rebuilds the same documents' graphs every step (100
# passages, the default cap, make 10,100 edges and 160 kB on the full graph)
CACHE_EDGES = 40_000
CACHE_SIZE = 256
# a graph with more edges than this is logged once: its attention needs GBs (1,000 passages on the full graph,
# 1M edges: ~3.5 GB for two 384-wide GAT layers)
LARGE_EDGES = 1_000_000

_cache: OrderedDict[tuple[tuple[int, ...], str], torch.Tensor] = OrderedDict()
_cache_lock = threading.Lock()
_warned_large = False


def edge_index(section_ids: Sequence[int], graph_type: str = "full") -> torch.Tensor:
    """The ``[2, E]`` edge index of a document graph (sorted, no duplicates, no self-loops).

    The same edges as :func:`full_edges` and :func:`section_edges`, built with tensor operations: a document
    of 2,000 passages (no cap) took 9.7 s as Python pairs, 0.08 s so."""
    if graph_type not in GRAPH_BUILDERS:
        raise GraphDocError(f"unknown graph type {graph_type!r}; valid: {', '.join(GRAPH_BUILDERS)}")
    key = (tuple(section_ids), graph_type)
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None:
            _cache.move_to_end(key)
            return cached.clone()
    edges = _full_edge_index(len(key[0])) if graph_type == "full" else _section_edge_index(key[0])
    if edges.size(1) <= CACHE_EDGES:
        with _cache_lock:
            _cache[key] = edges
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
        return edges.clone()
    _warn_large(len(key[0]), edges.size(1), graph_type)
    return edges


def _clique_index(nodes: torch.Tensor) -> torch.Tensor:
    """Every ordered pair of distinct ``nodes``, ``[2, n * (n - 1)]``, sorted when ``nodes`` is."""
    source, target = nodes.repeat_interleave(len(nodes)), nodes.repeat(len(nodes))
    keep = source != target
    return torch.stack([source[keep], target[keep]])


def _full_edge_index(passages: int) -> torch.Tensor:
    if passages <= 1:
        return torch.empty((2, 0), dtype=torch.long)
    return _clique_index(torch.arange(passages + 1))


def _section_edge_index(section_ids: tuple[int, ...]) -> torch.Tensor:
    if len(section_ids) <= 1:
        return torch.empty((2, 0), dtype=torch.long)
    sections = torch.tensor(section_ids, dtype=torch.long)
    zero = torch.zeros(1, dtype=torch.long)
    pairs = []
    for section in torch.unique(sections):
        members = torch.nonzero(sections == section).flatten() + 1  # passage i is node i + 1
        first = members[:1]
        pairs += [_clique_index(members), torch.stack([torch.cat([zero, first]), torch.cat([first, zero])])]
    edges = torch.cat(pairs, dim=1)
    nodes = len(section_ids) + 1
    keys = torch.unique(edges[0] * nodes + edges[1])  # sorted, as the pairs are listed
    return torch.stack([keys // nodes, keys % nodes])


def _warn_large(passages: int, edges: int, graph_type: str) -> None:
    global _warned_large
    if _warned_large or edges <= LARGE_EDGES:
        return
    _warned_large = True
    hint = "the full graph grows with the square of the passages: set chunker.max_passages (the default caps " \
        "at 100) or use the section graph" if graph_type == "full" else "set chunker.max_passages"
    logger.warning("a document of %d passages makes a %s graph of %d edges, whose attention needs GBs of "
                   "memory (%s); logged once", passages, graph_type, edges, hint)


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
