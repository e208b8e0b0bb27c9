"""PNG figures on a tiny model: an embedding map coloured by label and an attention heatmap."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="the plot extra is not installed (pip install 'graphdoc[plot]')")
pytest.importorskip("sklearn", reason="the plot extra is not installed (pip install 'graphdoc[plot]')")

from graphdoc.config import ChunkerConfig, ModelConfig, PassageEncoderConfig  # noqa: E402
from graphdoc.corpus import markdown_sections  # noqa: E402
from graphdoc.documents import Document  # noqa: E402
from graphdoc.encoder import GraphDocEncoder  # noqa: E402
from graphdoc.errors import GraphDocError  # noqa: E402
from graphdoc.explain.plot import (  # noqa: E402
    document_attention_layers,
    plot_attention,
    plot_embeddings,
    project_2d,
)

TEXT = ("# One\nGraph attention networks read documents. Passages become nodes.\n"
        "# Two\nDense vectors and BM25 are fused. The quick brown fox jumps over the lazy dog.\n"
        "# Three\nMeetings have topics and sections. Numbers 1 2 3 4 5 6 7 8 9 10.\n")


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def model(tiny_bert) -> GraphDocEncoder:
    config = ModelConfig(chunker=ChunkerConfig(max_words=8), passage_encoder=PassageEncoderConfig(pooling="mean"))
    return GraphDocEncoder.from_pretrained(str(tiny_bert), config=config, device="cpu")


def test_embedding_map_is_a_png_of_the_requested_size(model, tmp_path) -> None:
    texts = [f"{w} graph document passage {w} query." for w in ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]]
    vectors = model.encode(texts)
    path = plot_embeddings(vectors, ["a", "b"] * 4, tmp_path / "map.png", method="tsne", size=(4, 3), dpi=50)
    assert png_size(path) == (200, 150)


def test_projection_is_two_dimensional_and_seeded() -> None:
    vectors = np.random.default_rng(0).normal(size=(12, 16))
    coords, method = project_2d(vectors, "tsne", seed=1)
    assert coords.shape == (12, 2) and method == "tsne"
    np.testing.assert_allclose(project_2d(vectors, "tsne", seed=1)[0], coords)


def test_attention_has_one_row_per_layer_and_sums_to_at_most_one(model, tmp_path) -> None:
    doc = Document("d", TEXT, sections=markdown_sections(TEXT))
    weights, passages = document_attention_layers(model, doc)
    assert weights.shape == (model.config.graph.num_layers, len(passages)) and len(passages) >= 3
    assert np.all(weights >= 0) and np.all(weights.sum(axis=1) <= 1 + 1e-5)
    path = plot_attention(weights, tmp_path / "att.png", passages, size=(6, 2), dpi=100)
    assert png_size(path) == (600, 200)


def test_bad_requests_name_the_problem(tmp_path) -> None:
    with pytest.raises(GraphDocError, match="at least 3 documents"):
        project_2d(np.zeros((2, 4)))
    with pytest.raises(GraphDocError, match="valid: auto, tsne, umap"):
        project_2d(np.zeros((5, 4)), "pca")
    with pytest.raises(GraphDocError, match="2 labels for 4 documents"):
        plot_embeddings(np.random.default_rng(0).normal(size=(4, 3)), ["a", "b"], tmp_path / "x.png", "tsne")
