"""GraphDocEncoder on tiny random BERT and RoBERTa encoders: shapes, zero-shot equivalence, save/load, errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from graphdoc.config import ChunkerConfig, GraphConfig, ModelConfig
from graphdoc.corpus import read_corpus
from graphdoc.documents import Document
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import ModelLoadError

SENTENCES = [
    "Graph attention networks read documents as graphs of passages.",
    "The quick brown fox jumps over the lazy dog.",
    "Long documents are split into passages of about one hundred words on sentence boundaries.",
    "Retrieval with dense vectors and BM25 can be fused.",
    "Meetings have topics and sections.",
]


def long_text(n_sentences: int, offset: int = 0) -> str:
    return " ".join(SENTENCES[(i + offset) % len(SENTENCES)] for i in range(n_sentences))


DOCS = [
    Document("a", long_text(12), title="Graph attention"),
    Document.from_dict({"_id": "b", "title": "Meeting", "sections": [
        {"title": "Intro", "text": long_text(5, 1)}, {"title": "Topic", "text": long_text(9, 2)}]}),
    Document("c", "A single short passage."),
    Document("d", long_text(30, 3)),
]



def load(path: Path, **config) -> GraphDocEncoder:
    cfg = ModelConfig(chunker=ChunkerConfig(**config.pop("chunker", {})), graph=GraphConfig(**config.pop("graph", {})))
    assert not config
    return GraphDocEncoder.from_pretrained(str(path), config=cfg, device="cpu")


def perturb_graph_layers(model: GraphDocEncoder, seed: int = 0) -> None:
    """Make the model look trained: random residual-branch outputs in every GAT layer."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model.graph.layers:
            layer.out.weight.normal_(std=0.5, generator=generator)
            layer.out.bias.normal_(std=0.5, generator=generator)


def passage_vectors(model: GraphDocEncoder, doc: Document) -> torch.Tensor:
    """The passage encoder's own vectors of a document's passage inputs, tokenized independently."""
    prepared = model.prepare(doc)
    inputs = [model.passage_input(doc, p) for p in prepared.passages]
    with torch.no_grad():
        return model.passage_encoder.encode_ids(model.passage_encoder.tokenize(inputs))


@pytest.fixture(params=["tiny_bert", "tiny_roberta"])
def model_path(request) -> Path:
    return request.getfixturevalue(request.param)


@pytest.fixture
def model(model_path: Path) -> GraphDocEncoder:
    return load(model_path).eval()


# ------------------------------------------------------------------ shapes and input kinds
def test_encode_shapes_for_every_input_kind(model: GraphDocEncoder) -> None:
    d = model.dimension
    assert d == 32 == model.get_sentence_embedding_dimension()
    single = model.encode("some text here")
    assert isinstance(single, np.ndarray) and single.shape == (d,) and single.dtype == np.float32
    assert model.encode({"title": "T", "text": "some text"}).shape == (d,)
    assert model.encode(DOCS[0]).shape == (d,)
    batch = model.encode(["x y", {"text": "z"}, DOCS[1]])
    assert batch.shape == (3, d) and batch.dtype == np.float32
    assert model.encode([]).shape == (0, d)
    tensor = model.encode(DOCS, convert_to_tensor=True)
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (len(DOCS), d) and tensor.dtype == torch.float32
    assert model.encode_queries(["q one", "q two", "q three"]).shape == (3, d)
    assert model.encode_queries("q").shape == (d,)


def test_encode_rejects_other_types(model: GraphDocEncoder) -> None:
    with pytest.raises(TypeError, match="a document must be a str, a dict or a graphdoc.Document, got int"):
        model.encode([1])


def test_same_text_same_embedding_whatever_its_form(model: GraphDocEncoder) -> None:
    text = long_text(7)
    as_str, as_dict, as_doc = model.encode([text, {"text": text}, Document("z", text)])
    assert np.array_equal(as_str, as_dict) and np.array_equal(as_str, as_doc)


# ------------------------------------------------------------------ zero-shot equivalence
def test_untrained_document_embedding_is_the_mean_of_its_passage_vectors(model: GraphDocEncoder) -> None:
    embeddings = model.encode(DOCS, convert_to_tensor=True)
    assert len(model.prepare(DOCS[3]).passages) > 2  # a real graph, not a single node
    for doc, embedding in zip(DOCS, embeddings):
        assert torch.allclose(embedding, passage_vectors(model, doc).mean(dim=0), atol=1e-6)


def test_untrained_query_embedding_is_the_passage_encoders_own(model: GraphDocEncoder) -> None:
    queries = ["what is a graph attention network", "fox", "Café naïve über résumé " * 20]
    got = model.encode_queries(queries, convert_to_tensor=True)
    with torch.no_grad():
        expected = model.passage_encoder.encode_ids(model.passage_encoder.tokenize(queries, truncate=True))
    assert torch.allclose(got, expected, atol=1e-6)
    # a one-passage document is a one-node graph too: its embedding is its passage vector
    doc = Document("q", queries[0])
    assert torch.allclose(model.encode(doc, convert_to_tensor=True), passage_vectors(model, doc)[0], atol=1e-6)


def test_trained_graph_layers_break_the_equivalence(model: GraphDocEncoder) -> None:
    perturb_graph_layers(model)
    embedding = model.encode(DOCS[0], convert_to_tensor=True)
    assert not torch.allclose(embedding, passage_vectors(model, DOCS[0]).mean(dim=0), atol=1e-3)


# ------------------------------------------------------------------ batching
def test_batch_size_does_not_change_results(model: GraphDocEncoder) -> None:
    perturb_graph_layers(model)
    docs = DOCS * 3
    one = model.encode(docs, batch_size=1)
    eight = model.encode(docs, batch_size=8)
    assert np.allclose(one, eight, atol=1e-5)
    assert np.allclose(model.encode_queries(SENTENCES, batch_size=1), model.encode_queries(SENTENCES, batch_size=8),
                       atol=1e-5)


def test_encode_restores_training_mode(model: GraphDocEncoder) -> None:
    model.train()
    model.encode(DOCS[:2])
    model.encode_queries(["q"])
    assert model.training


# ------------------------------------------------------------------ long documents, token limit, titles
def test_long_document_is_capped_and_the_cut_is_counted(tiny_bert: Path) -> None:
    model = load(tiny_bert, chunker={"max_words": 10, "max_passages": 5}).eval()
    doc = Document("long", " ".join(f"word{i % 97}." if i % 9 == 8 else f"word{i % 97}" for i in range(3000)))
    prepared = model.prepare(doc)
    assert len(prepared.passages) == len(prepared.token_ids) == 5
    total = len(model.prepare(doc, max_passages=10_000).passages)
    assert total >= 150
    model.chunker.passages_cut = model.chunker.documents_cut = 0
    assert model.encode([doc, "short"]).shape == (2, model.dimension)
    assert (model.chunker.passages_cut, model.chunker.documents_cut) == (total - 5, 1)
    out = next(model.iter_forward([doc], max_passages=3))
    assert len(out.documents[0].passages) == 3
    assert out.node_embeddings.shape == (3 + 1, model.dimension)


def test_a_capped_document_with_a_huge_token_keeps_the_first_fitted_passages(tiny_roberta: Path) -> None:
    model = load(tiny_roberta, chunker={"max_passages": 3}).eval()
    doc = Document("blob", "Intro words. " + "a-b-" * 5_000 + " Outro.", title="T")
    whole = model.prepare(doc, max_passages=10_000)
    model.chunker.passages_cut = model.chunker.documents_cut = 0
    capped = model.prepare(doc)
    assert capped.passages == whole.passages[:3] and capped.token_ids == whole.token_ids[:3]
    assert len(whole.passages) > 100
    # the pieces past the cap are dropped before they are split further: each counts once
    assert model.chunker.documents_cut == 1 and 1 <= model.chunker.passages_cut <= len(whole.passages) - 3


def test_passages_never_exceed_the_token_limit(tiny_roberta: Path) -> None:
    model = load(tiny_roberta).eval()
    word = "".join(chr(ord("a") + (i * 7) % 26) for i in range(500))  # one 500-character word
    doc = Document("w", f"Before. {word} after it.", title="A title")
    prepared = model.prepare(doc)
    limit = model.passage_encoder.max_seq_length
    assert limit == 64
    assert len(prepared.passages) > 5
    assert all(len(ids) <= limit for ids in prepared.token_ids)
    # the token ids are those of each passage's own input
    inputs = [model.passage_input(doc, p) for p in prepared.passages]
    assert prepared.token_ids == model.passage_encoder.tokenize(inputs)
    assert "".join(p.text for p in prepared.passages).replace(" ", "") == doc.text.replace(" ", "")
    assert model.encode(doc).shape == (model.dimension,)  # no position-embedding overflow


def test_a_title_longer_than_the_limit_is_truncated(tiny_roberta: Path) -> None:
    model = load(tiny_roberta).eval()
    doc = Document("t", "short text", title="word " * 200)
    prepared = model.prepare(doc)
    assert all(len(ids) <= model.passage_encoder.max_seq_length for ids in prepared.token_ids)
    assert np.isfinite(model.encode(doc)).all()


@pytest.mark.parametrize("mode, expected", [
    ("first", ["T A b.", "C d."]),
    ("all", ["T A b.", "T C d."]),
    ("none", ["A b.", "C d."]),
])
def test_title_is_prepended_per_chunker_setting(tiny_bert: Path, mode: str, expected: list[str]) -> None:
    model = load(tiny_bert, chunker={"max_words": 2, "title": mode})
    doc = Document("t", "A b. C d.", title="T")
    prepared = model.prepare(doc)
    assert [model.passage_input(doc, p) for p in prepared.passages] == expected
    assert [p.text for p in prepared.passages] == ["A b.", "C d."]


def test_a_passage_that_opens_with_the_title_does_not_get_it_twice(tiny_bert: Path, tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# Graph  Attention\n\nA b. C d.\n\n## Graph attention again\n\nE f.\n")
    doc = next(iter(read_corpus(tmp_path)))
    model = load(tiny_bert, chunker={"title": "all"})
    assert doc.title == "Graph  Attention"
    assert [model.passage_input(doc, p) for p in model.prepare(doc).passages] == [
        "# Graph  Attention\n\nA b. C d.", "Graph Attention ## Graph attention again\n\nE f."]
    prose = Document("p", "Graph attention networks read graphs. More.", title="Graph attention")
    assert model.passage_input(prose, model.prepare(prose).passages[0]).startswith("Graph attention Graph")


def test_title_changes_the_embedding(model: GraphDocEncoder) -> None:
    text = long_text(3)
    with_title, without = model.encode([{"title": "Graph attention", "text": text}, {"text": text}])
    assert not np.allclose(with_title, without)


def test_empty_text_embeds_its_title(model: GraphDocEncoder) -> None:
    empty, title_only, title_as_text = model.encode(["", {"title": "Meeting", "text": ""}, "Meeting"])
    assert np.isfinite(empty).all()
    assert np.allclose(title_only, title_as_text, atol=1e-6)


# ------------------------------------------------------------------ output options
def test_normalize_embeddings_gives_unit_norms(model: GraphDocEncoder) -> None:
    raw = model.encode(DOCS)
    unit = model.encode(DOCS, normalize_embeddings=True)
    assert np.allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-6)
    assert np.allclose(unit, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)
    assert np.allclose(np.linalg.norm(model.encode_queries(["a", "b"], normalize_embeddings=True), axis=1), 1.0)


def test_encode_corpus_beir_style(model: GraphDocEncoder) -> None:
    corpus = [{"title": "Graph attention", "text": long_text(12)}, {"title": "", "text": "A single short passage."}]
    expected = model.encode([DOCS[0], DOCS[2]])
    assert np.allclose(model.encode_corpus(corpus, batch_size=1), expected, atol=1e-6)
    by_id = {"a": corpus[0], "c": corpus[1]}
    assert np.allclose(model.encode_corpus(by_id), expected, atol=1e-6)
    assert isinstance(model.encode_corpus(corpus, convert_to_tensor=True), torch.Tensor)


# ------------------------------------------------------------------ attention weights
def test_attention_weights_and_document_attention(model: GraphDocEncoder) -> None:
    perturb_graph_layers(model)
    out = next(model.iter_forward(DOCS, batch_size=len(DOCS), return_attention_weights=True))
    assert len(out.attention) == model.config.graph.num_layers
    n_passages = [len(d.passages) for d in out.documents]
    assert out.ptr.tolist() == np.cumsum([0] + [n + 1 if n > 1 else 1 for n in n_passages]).tolist()
    for layer in range(len(out.attention)):
        att_index, alpha = out.attention[layer]
        assert alpha.shape == (att_index.size(1), model.config.graph.heads)
        for i, n in enumerate(n_passages):
            weights = out.document_attention(i, layer)
            assert weights.shape == (n,)
            assert (weights >= 0).all()
            if n == 1:
                assert weights.tolist() == [1.0]
                continue
            # the document node's weights over its passages plus its self-loop sum to one
            doc_node = int(out.ptr[i])
            self_loop = (att_index[0] == doc_node) & (att_index[1] == doc_node)
            assert torch.allclose(weights.sum() + alpha[self_loop].mean(), torch.tensor(1.0), atol=1e-5)
    assert out.passage_embeddings(0).shape == (n_passages[0], model.dimension)
    assert out.passage_embeddings(2).shape == (1, model.dimension)


def test_document_attention_needs_attention_weights(model: GraphDocEncoder) -> None:
    out = next(model.iter_forward(DOCS[:1]))
    with pytest.raises(ValueError, match="return_attention_weights=True"):
        out.document_attention(0)


# ------------------------------------------------------------------ save / load
@pytest.mark.parametrize("trained", [False, True])
def test_save_and_load_round_trip(model: GraphDocEncoder, tmp_path: Path, trained: bool) -> None:
    if trained:
        perturb_graph_layers(model, seed=4)
    expected = model.encode(DOCS)
    expected_queries = model.encode_queries(SENTENCES)
    folder = tmp_path / "saved"
    model.save_pretrained(folder)

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert {"graphdoc_version", "torch_version", "transformers_version"} <= set(config)
    assert config["torch_version"] == torch.__version__
    assert config["model"] == model.config.to_dict()
    assert (folder / "model.safetensors").is_file()
    assert (folder / "passage_encoder" / "tokenizer.json").is_file()
    assert (folder / "passage_encoder" / "config.json").is_file()

    loaded = GraphDocEncoder.from_pretrained(folder, device="cpu")
    assert loaded.config == model.config
    assert np.allclose(loaded.encode(DOCS), expected, atol=1e-6)
    assert np.allclose(loaded.encode_queries(SENTENCES), expected_queries, atol=1e-6)
    for key, value in model.head_state_dict().items():
        assert torch.equal(loaded.head_state_dict()[key], value)


def test_saving_over_an_existing_model_replaces_it(model: GraphDocEncoder, tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    perturb_graph_layers(model, seed=5)
    model.save_pretrained(folder)
    assert np.allclose(GraphDocEncoder.from_pretrained(folder, device="cpu").encode(DOCS[0]), model.encode(DOCS[0]),
                       atol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved"]  # no temporary folders left behind


def test_uncached_hub_id_is_a_one_line_error() -> None:
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained("no-such-org/no-such-model")
    message = str(info.value)
    assert "no-such-org/no-such-model" in message
    assert "\n" not in message


def test_missing_weights_file_is_refused(model: GraphDocEncoder, tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="has no model.safetensors") as info:
        GraphDocEncoder.from_pretrained(folder)
    assert "\n" not in str(info.value)


def test_missing_passage_encoder_is_refused(model: GraphDocEncoder, tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    shutil.rmtree(folder / "passage_encoder")
    with pytest.raises(ModelLoadError, match="passage_encoder") as info:
        GraphDocEncoder.from_pretrained(folder)
    assert "\n" not in str(info.value)


def test_weights_of_another_shape_are_refused(tiny_bert: Path, tmp_path: Path) -> None:
    load(tiny_bert, graph={"num_layers": 2}).save_pretrained(tmp_path / "two")
    load(tiny_bert, graph={"num_layers": 1}).save_pretrained(tmp_path / "one")
    shutil.copy(tmp_path / "one" / "model.safetensors", tmp_path / "two" / "model.safetensors")
    with pytest.raises(ModelLoadError, match="does not match its config.json"):
        GraphDocEncoder.from_pretrained(tmp_path / "two")
