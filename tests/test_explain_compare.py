"""Comparing two documents: exact matrices on hand-made vectors, a document against itself, sections."""

from __future__ import annotations

import numpy as np
import pytest

from graphdoc.config import ChunkerConfig, ModelConfig, PassageEncoderConfig
from graphdoc.corpus import markdown_sections
from graphdoc.documents import Document
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError
from graphdoc.explain import (
    PassagePair,
    SectionInfo,
    compare_documents,
    compare_vectors,
)
from graphdoc.explain.compare import top_pairs

MARKDOWN_A = ("# Graphs\nGraph attention networks read documents. Passages become nodes of a graph.\n"
              "## Retrieval\nDense vectors and BM25 are fused. The quick brown fox jumps over the lazy dog.\n"
              "## Meetings\nMeetings have topics and sections. Numbers 1 2 3 4 5 6 7 8 9 10.\n")
MARKDOWN_B = ("# Search\nBM25 and dense retrieval can be fused. Queries find documents.\n"
              "## Animals\nThe lazy dog sleeps. A quick brown fox jumps.\n")


def markdown_document(doc_id: str, text: str) -> Document:
    return Document(doc_id, text, title=doc_id, sections=markdown_sections(text))


@pytest.fixture(scope="module")
def model(tiny_bert) -> GraphDocEncoder:
    config = ModelConfig(chunker=ChunkerConfig(max_words=8), passage_encoder=PassageEncoderConfig(pooling="mean"))
    return GraphDocEncoder.from_pretrained(str(tiny_bert), config=config, device="cpu")


def test_compare_vectors_is_exact_on_hand_made_vectors() -> None:
    sections_a = [SectionInfo(0, "x", (0, 1))]
    sections_b = [SectionInfo(0, "y", (0,)), SectionInfo(1, "z", (1,))]
    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    b = np.array([[3.0, 0.0], [1.0, 1.0]])
    doc, passage, section, pairs = compare_vectors(np.array([1.0, 1.0]), np.array([1.0, 0.0]), a, b,
                                                   sections_a, sections_b, top=5)
    s = 1 / np.sqrt(2)
    assert doc == pytest.approx(s)
    np.testing.assert_allclose(passage, [[1.0, s], [0.0, s]], atol=1e-12)
    # section x: centroid of the unit passages (0.5, 0.5); y = (1, 0), z = (s, s)
    np.testing.assert_allclose(section, [[s, 1.0]], atol=1e-12)
    assert pairs == [PassagePair(0, 0, pytest.approx(1.0)), PassagePair(1, 1, pytest.approx(s))]


def test_top_pairs_are_one_to_one_and_best_first() -> None:
    similarity = np.array([[0.9, 0.8, 0.1], [0.85, 0.2, 0.3]])
    assert top_pairs(similarity, 5) == [PassagePair(0, 0, 0.9), PassagePair(1, 2, 0.3)]
    assert top_pairs(similarity, 1) == [PassagePair(0, 0, 0.9)]
    assert top_pairs(similarity, 0) == []


def test_a_document_compared_with_itself(model) -> None:
    doc = markdown_document("a", MARKDOWN_A)
    comparison = compare_documents(model, doc, doc, top=3)
    n = len(comparison.passages[0])
    assert n >= 6 and comparison.passage_similarity.shape == (n, n)
    assert comparison.document_similarity == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(np.diag(comparison.passage_similarity), 1.0, atol=1e-5)
    np.testing.assert_allclose(comparison.passage_similarity, comparison.passage_similarity.T, atol=1e-5)
    np.testing.assert_allclose(np.diag(comparison.section_similarity), 1.0, atol=1e-5)
    assert [p.score for p in comparison.pairs] == pytest.approx([1.0] * 3, abs=1e-5)
    assert all(p.a == p.b for p in comparison.pairs)


def test_two_documents_have_matrices_of_their_passages_and_sections(model) -> None:
    a, b = markdown_document("a", MARKDOWN_A), markdown_document("b", MARKDOWN_B)
    comparison = compare_documents(model, a, b, top=2)
    pa, pb = comparison.passages
    assert comparison.passage_similarity.shape == (len(pa), len(pb))
    assert [s.title for s in comparison.sections[0]] == ["Graphs", "Retrieval", "Meetings"]
    assert [s.title for s in comparison.sections[1]] == ["Search", "Animals"]
    assert comparison.section_similarity.shape == (3, 2)
    assert np.all(np.abs(comparison.passage_similarity) <= 1 + 1e-6)
    best = comparison.pairs[0]
    assert best.score == pytest.approx(comparison.passage_similarity.max())
    for p in pa:
        assert p.text == MARKDOWN_A[p.start:p.end]
    data = comparison.to_dict()
    assert data["a"]["id"] == "a" and len(data["b"]["passages"]) == len(pb)
    assert np.asarray(data["section_similarity"]).shape == (3, 2)


def test_a_negative_number_of_pairs_is_refused(model) -> None:
    with pytest.raises(GraphDocError, match="at least 0"):
        compare_documents(model, "one text", "another text", top=-1)
