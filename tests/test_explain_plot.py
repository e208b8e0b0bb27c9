"""PNG figures on a tiny model: an embedding map coloured by label and an attention heatmap."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="the plot extra is not installed (pip install 'graphdoc[plot]')")
pytest.importorskip("sklearn", reason="the plot extra is not installed (pip install 'graphdoc[plot]')")

import sklearn.manifold  # noqa: E402
from _retrieval_helpers import cli, error_line, write_jsonl  # noqa: E402

from graphdoc.cli import build_parser  # noqa: E402
from graphdoc.config import ChunkerConfig, ModelConfig, PassageEncoderConfig  # noqa: E402
from graphdoc.corpus import markdown_sections  # noqa: E402
from graphdoc.documents import Document  # noqa: E402
from graphdoc.encoder import GraphDocEncoder  # noqa: E402
from graphdoc.errors import GraphDocError  # noqa: E402
from graphdoc.explain.plot import (  # noqa: E402
    document_attention_layers,
    label_of,
    plot_attention,
    plot_embeddings,
    project_2d,
    sort_labels,
)
from graphdoc.flat_config import FlatModelConfig  # noqa: E402
from graphdoc.flat_encoder import FlatEncoder  # noqa: E402

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


# --- the CLI's one-line refusals and the edge cases of a map ------------------------------------------------

RECORDS = [{"_id": f"n{i}", "title": f"Title {i}", "text": f"{w} graph document passage {w} query."}
           for i, w in enumerate(["alpha", "beta", "gamma", "delta", "eps", "zeta"])]


@pytest.fixture
def cli_state(restore_cli_state):
    """``main`` configures logging and quiets transformers for the process (see conftest)."""
    yield


@pytest.fixture
def no_tsne(monkeypatch):
    """t-SNE that fails the test when reached: a refused map must stop before scikit-learn (which segfaults
    on identical rows)."""
    def reached(*args, **kwargs):
        raise AssertionError("t-SNE was reached")

    monkeypatch.setattr(sklearn.manifold, "TSNE", reached)


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_a_seed_out_of_range_is_one_line(model_dir, tmp_path, capsys, cli_state, seed) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    assert cli("plot", "embeddings", "--corpus", corpus, "--output", tmp_path / "m.png", "--model", model_dir,
               "--method", "tsne", "--seed", seed) == 1
    assert f"--seed must be in 0..4294967295; got {seed}" in error_line(capsys, "plot embeddings")
    with pytest.raises(GraphDocError, match="seed must be in 0..4294967295"):
        project_2d(np.random.default_rng(0).normal(size=(5, 4)), "tsne", seed=seed)


@pytest.mark.parametrize("vectors", [np.ones((4, 32)), np.zeros((5, 8)),
                                     np.ones((4, 32)) + np.arange(32) * 1e-9,  # equal to float32 precision
                                     # one text encoded in other batches: its vectors differ in their last bits
                                     np.full((3, 32), 0.05) + np.random.default_rng(0).normal(0, 2e-7, (3, 32))])
def test_identical_embeddings_are_refused_before_tsne(no_tsne, vectors) -> None:
    with pytest.raises(GraphDocError, match=f"all {len(vectors)} document embeddings are identical"):
        project_2d(vectors, "tsne")


def test_near_identical_embeddings_still_map() -> None:
    vectors = np.ones((4, 32), dtype=np.float32)
    vectors[0, 0] += 1e-4
    assert project_2d(vectors, "tsne")[0].shape == (4, 2)
    with pytest.raises(GraphDocError, match="NaN or infinite"):
        project_2d(np.where(np.eye(4, 6) > 0, np.nan, 1.0), "tsne")


def test_a_corpus_of_identical_documents_is_one_line(model_dir, tmp_path, capsys, cli_state, no_tsne) -> None:
    corpus = write_jsonl(tmp_path / "same.jsonl", [{"_id": c, "text": "same text"} for c in "abcd"])
    assert cli("plot", "embeddings", "--corpus", corpus, "--output", tmp_path / "m.png", "--model", model_dir,
               "--method", "tsne") == 1
    assert "all 4 document embeddings are identical" in error_line(capsys, "plot embeddings")
    assert not (tmp_path / "m.png").exists()


def test_labels_from_titles_all_blank_say_so(model_dir, tmp_path, capsys, cli_state) -> None:
    corpus = write_jsonl(tmp_path / "blank.jsonl", [{"_id": c, "title": "", "text": f"text {c}"} for c in "abc"])
    assert cli("plot", "embeddings", "--corpus", corpus, "--output", tmp_path / "m.png", "--model", model_dir,
               "--labels-field", "title") == 1
    assert error_line(capsys, "plot embeddings") == f"graphdoc plot embeddings: error: no document of {corpus} has a title"


@pytest.mark.parametrize("n", [1, 2, 3])
def test_few_documents_map_or_say_why(model_dir, tmp_path, capsys, cli_state, n) -> None:
    corpus = write_jsonl(tmp_path / "few.jsonl", RECORDS[:n])
    status = cli("plot", "embeddings", "--corpus", corpus, "--output", tmp_path / "m.png", "--model", model_dir,
                 "--method", "tsne", "--labels-field", "title")
    if n < 3:
        assert status == 1
        assert f"a map needs at least 3 documents; {corpus} has {n}" in error_line(capsys, "plot embeddings")
    else:
        assert status == 0 and png_size(tmp_path / "m.png")


@pytest.mark.parametrize("figure", ["embeddings", "attention"])
@pytest.mark.parametrize("flag, dest", [("-q", "quiet"), ("--quiet", "quiet"), ("-v", "verbose")])
def test_log_options_also_after_the_figure(figure, flag, dest) -> None:
    args = build_parser().parse_args(["plot", figure, "--corpus", "c", "--id", "d", "--output", "o.png", flag]
                                     if figure == "attention" else
                                     ["plot", figure, "--corpus", "c", "--output", "o.png", flag])
    assert getattr(args, dest) is True
    assert build_parser().parse_args(["plot", "embeddings", "--corpus", "c", "--output", "o.png"]).quiet is False


def test_a_flat_model_has_no_attention_to_plot(tiny_bert, model_dir, tmp_path, capsys, cli_state) -> None:
    flat = FlatEncoder.from_pretrained(str(tiny_bert), FlatModelConfig(), device="cpu")
    with pytest.raises(GraphDocError, match="backbone is flat .* no graph attention"):
        document_attention_layers(flat, Document("d", TEXT, sections=markdown_sections(TEXT)))
    capsys.readouterr()  # transformers' loading bar
    corpus = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    assert cli("plot", "attention", "--corpus", corpus, "--id", "n1", "--output", tmp_path / "att.png",
               "--model", tiny_bert, "--backbone", "flat") == 1
    assert "no graph attention" in error_line(capsys, "plot attention")
    assert not (tmp_path / "att.png").exists()


def test_title_and_id_are_label_fields(model_dir, tmp_path, capsys, cli_state) -> None:
    doc = Document.from_dict({"_id": "x1", "title": "T", "text": "t", "label": 3})
    assert [label_of(doc, f) for f in ("_id", "id", "docid", "title", "label", "colour")] == ["x1", "x1", "x1", "T",
                                                                                            3, None]
    assert label_of(Document.from_dict({"id": 7, "text": "t"}), "title") is None
    with pytest.raises(GraphDocError, match="'text' is a document's text, not a label"):
        label_of(doc, "text")
    corpus = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    for field in ("title", "_id", "id"):
        assert cli("plot", "embeddings", "--corpus", corpus, "--output", tmp_path / f"{field}.png",
                   "--model", model_dir, "--method", "tsne", "--labels-field", field) == 0
    assert capsys.readouterr().err == ""


def test_labels_past_the_palette_warn_and_numbers_sort_by_value(tmp_path, caplog) -> None:
    assert sort_labels(["10", "b", "4", "", "1", "a", "4", "2.5", "nan"]) == ["1", "2.5", "4", "10", "a", "b", "nan",
                                                                             ""]
    vectors = np.random.default_rng(0).normal(size=(22, 8))
    with caplog.at_level(logging.WARNING, logger="graphdoc.explain.plot"):
        plot_embeddings(vectors, [str(i) for i in range(20)] + ["0", "1"], tmp_path / "a.png", "tsne", dpi=20)
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="graphdoc.explain.plot"):
        plot_embeddings(vectors, [str(i) for i in range(22)], tmp_path / "b.png", "tsne", dpi=20)
    assert [r.getMessage() for r in caplog.records] == [
        "22 distinct labels: past 20 the colours repeat and the map has no legend"]


def test_blank_labels_are_no_label(model_dir, tmp_path, caplog, capsys, cli_state) -> None:
    vectors = np.random.default_rng(0).normal(size=(22, 8))
    labels = [f"c{i}" for i in range(19)] + [" ", "\t\n", None]  # 19 classes and "(no label)": no more colours
    with caplog.at_level(logging.WARNING, logger="graphdoc.explain.plot"):
        plot_embeddings(vectors, labels, tmp_path / "a.png", "tsne", dpi=20)
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="graphdoc.explain.plot"):
        plot_embeddings(vectors, labels[:19] + ["x", "y", None], tmp_path / "b.png", "tsne", dpi=20)
    assert [r.getMessage() for r in caplog.records] == [
        "22 distinct labels: past 20 the colours repeat and the map has no legend"]
    corpus = write_jsonl(tmp_path / "blank.jsonl", [{"_id": c, "text": f"text {c}", "topic": " "} for c in "abc"])
    assert cli("plot", "embeddings", "--corpus", corpus, "--output", tmp_path / "m.png", "--model", model_dir,
               "--labels-field", "topic") == 1
    assert error_line(capsys, "plot embeddings") == (f"graphdoc plot embeddings: error: no document of {corpus} has "
                                                     "a 'topic' field")
