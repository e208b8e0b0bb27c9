"""Document graphs: exact edge sets for hand-built documents, node features, errors."""

from __future__ import annotations

import logging

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graphdoc import graph
from graphdoc.errors import GraphDocError
from graphdoc.graph import document_graph, edge_index, full_edges, num_nodes, section_edges


def edges(index: torch.Tensor) -> list[tuple[int, int]]:
    return [tuple(e) for e in index.t().tolist()]


def test_full_graph_connects_every_pair_of_nodes() -> None:
    # document node 0 and passages 1, 2, 3
    assert edges(edge_index([0, 0, 1], "full")) == [
        (0, 1), (0, 2), (0, 3),
        (1, 0), (1, 2), (1, 3),
        (2, 0), (2, 1), (2, 3),
        (3, 0), (3, 1), (3, 2),
    ]


def test_section_graph_cliques_sections_and_links_their_first_passages() -> None:
    # passages 1, 2 in section 0; passages 3, 4, 5 in section 1
    assert edges(edge_index([0, 0, 1, 1, 1], "section")) == [
        (0, 1), (0, 3),
        (1, 0), (1, 2),
        (2, 1),
        (3, 0), (3, 4), (3, 5),
        (4, 3), (4, 5),
        (5, 3), (5, 4),
    ]


def test_section_graph_with_one_passage_per_section_is_a_star() -> None:
    assert edges(edge_index([0, 1, 2], "section")) == [(0, 1), (0, 2), (0, 3), (1, 0), (2, 0), (3, 0)]


def test_section_graph_of_a_single_section_is_the_passage_clique_plus_the_document_link() -> None:
    assert sorted(section_edges([4, 4])) == [(0, 1), (1, 0), (1, 2), (2, 1)]


@pytest.mark.parametrize("graph_type", ["full", "section"])
def test_edges_are_symmetric_sorted_and_loop_free(graph_type: str) -> None:
    index = edge_index([0, 0, 1, 2, 2, 2, 3], graph_type)
    pairs = edges(index)
    assert pairs == sorted(set(pairs))
    assert all(a != b for a, b in pairs)
    assert set(pairs) == {(b, a) for a, b in pairs}
    assert index.dtype == torch.long and index.shape == (2, len(pairs))


@pytest.mark.parametrize("graph_type", ["full", "section"])
def test_single_passage_is_one_node_without_edges(graph_type: str) -> None:
    vector = torch.tensor([[1.0, 2.0, 3.0]])
    data = document_graph(vector, [0], graph_type)
    assert data.num_nodes == 1 == num_nodes(1)
    assert data.edge_index.shape == (2, 0)
    assert torch.equal(data.x, vector)
    assert full_edges([0]) == [] and section_edges([0]) == []


def test_document_node_is_the_mean_of_the_passages() -> None:
    vectors = torch.tensor([[1.0, 0.0], [3.0, 2.0], [2.0, 7.0]])
    data = document_graph(vectors, [0, 1, 1], "section")
    assert data.num_nodes == 4 == num_nodes(3)
    assert torch.equal(data.x[0], torch.tensor([2.0, 3.0]))
    assert torch.equal(data.x[1:], vectors)
    assert edges(data.edge_index) == [(0, 1), (0, 2), (1, 0), (2, 0), (2, 3), (3, 2)]


def test_unknown_graph_type_names_the_valid_ones() -> None:
    with pytest.raises(GraphDocError, match=r"^unknown graph type 'star'; valid: full, section$"):
        edge_index([0, 0], "star")


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="one section id is needed per passage vector"):
        document_graph(torch.zeros(3, 2), [0, 0])
    with pytest.raises(ValueError, match=r"\[n >= 1, d\]"):
        document_graph(torch.zeros(0, 2), [])


@pytest.mark.parametrize("graph_type", ["full", "section"])
@given(section_ids=st.lists(st.integers(-2, 5), max_size=25))
@settings(max_examples=150, deadline=None)
def test_tensor_built_edges_are_the_pairs_of_the_definitions(graph_type: str, section_ids: list[int]) -> None:
    definition = {"full": full_edges, "section": section_edges}[graph_type]
    assert edges(edge_index(section_ids, graph_type)) == sorted(set(definition(section_ids)))


def test_a_large_graph_is_built_quickly_logged_once_and_not_cached(monkeypatch, caplog) -> None:
    monkeypatch.setattr(graph, "_warned_large", False)
    monkeypatch.setattr(graph, "LARGE_EDGES", 10_000)
    graph._cache.clear()
    with caplog.at_level(logging.WARNING, logger="graphdoc.graph"):
        index = edge_index([0] * 2_000, "full")  # 4,002,000 edges: 30 s and 1 GB as Python pairs
        edge_index([0] * 300, "full")
    assert index.shape == (2, 2_001 * 2_000)
    assert torch.equal(index[:, :3], torch.tensor([[0, 0, 0], [1, 2, 3]]))
    assert torch.equal(index[:, -2:], torch.tensor([[2_000, 2_000], [1_998, 1_999]]))
    assert [r.getMessage() for r in caplog.records] == [
        "a document of 2000 passages makes a full graph of 4002000 edges, whose attention needs GBs of memory "
        "(the full graph grows with the square of the passages: set chunker.max_passages (the default caps at "
        "100) or use the section graph); logged once"]
    assert len(graph._cache) == 0
    small = edge_index([0, 0, 1], "section")
    small[0, 0] = 99  # callers get their own copy of a cached graph
    assert edge_index([0, 0, 1], "section")[0, 0] == 0 and len(graph._cache) == 1
