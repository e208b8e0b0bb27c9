"""FlatEncoder on tiny random BERT, RoBERTa and Longformer encoders: FirstP, mean, save/load, the loader."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import graphdoc
from graphdoc.config import ChunkerConfig, ModelConfig, PassageEncoderConfig
from graphdoc.documents import Document
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError, ModelLoadError
from graphdoc.flat_config import FlatConfig, FlatModelConfig
from graphdoc.flat_encoder import FlatEncoder

SENTENCE = "Graph attention networks read long documents as graphs of passages."
DOCS = [
    Document("long", " ".join([SENTENCE] * 12), title="Graph attention"),
    Document.from_dict({"_id": "sections", "title": "Meeting", "sections": [
        {"title": "Intro", "text": "Meetings have topics. " * 4}, {"title": "Topic", "text": SENTENCE * 3}]}),
    Document("short", "A single short passage."),
]


def flat(path: Path, document: str = "first", max_words: int = 20) -> FlatEncoder:
    config = FlatModelConfig(chunker=ChunkerConfig(max_words=max_words), graph=FlatConfig(document=document))
    return FlatEncoder.from_pretrained(str(path), config=config, device="cpu").eval()


def encoder_vectors(model, texts: list[str], truncate: bool = False) -> torch.Tensor:
    """The passage encoder's own vectors of ``texts``."""
    with torch.no_grad():
        return model.passage_encoder.encode_ids(model.passage_encoder.tokenize(texts, truncate=truncate))


def passage_vectors(model, doc: Document) -> torch.Tensor:
    prepared = model.prepare(doc)
    return encoder_vectors(model, [model.passage_input(doc, p) for p in prepared.passages])


@pytest.fixture(params=["tiny_bert", "tiny_roberta"])
def model_path(request) -> Path:
    return request.getfixturevalue(request.param)


# ------------------------------------------------------------------ document modes
def test_first_mode_is_the_encoder_vector_of_the_truncated_title_and_text(model_path: Path) -> None:
    model = flat(model_path)
    assert model.dimension == 32 and model.backbone == "flat"
    texts = [f"{d.title} {d.text}" if d.title else d.text for d in DOCS]
    limit = model.passage_encoder.max_seq_length
    assert len(model.passage_encoder.tokenize(texts[:1])[0]) > limit  # the long document is cut
    got = model.encode(DOCS, convert_to_tensor=True)
    assert torch.allclose(got, encoder_vectors(model, texts, truncate=True), atol=1e-6)


def test_mean_mode_is_the_mean_of_passage_vectors(model_path: Path) -> None:
    model = flat(model_path, "mean")
    assert len(model.prepare(DOCS[0]).passages) > 2
    got = model.encode(DOCS, convert_to_tensor=True)
    for doc, vector in zip(DOCS, got):
        assert torch.allclose(vector, passage_vectors(model, doc).mean(dim=0), atol=1e-6)
    # the same as an untrained graph model over the same passages
    graph = GraphDocEncoder.from_pretrained(str(model_path), config=ModelConfig(chunker=ChunkerConfig(max_words=20)),
                                            device="cpu")
    assert torch.allclose(got, graph.encode(DOCS, convert_to_tensor=True), atol=1e-6)


@pytest.mark.parametrize("document", ["first", "mean"])
def test_queries_are_the_encoders_own_vectors(tiny_bert: Path, document: str) -> None:
    model = flat(tiny_bert, document)
    queries = ["graph attention", "Café naïve über résumé " * 20]
    expected = encoder_vectors(model, queries, truncate=True)
    assert torch.allclose(model.encode_queries(queries, convert_to_tensor=True), expected, atol=1e-6)
    assert model.encode_queries("q").shape == (32,)


@pytest.mark.parametrize("document", ["first", "mean"])
def test_queries_carry_the_query_prompt_and_documents_the_passage_prompt(tiny_bert: Path, document: str) -> None:
    prompts = PassageEncoderConfig(query_prompt="query: ", passage_prompt="passage: ")
    config = FlatModelConfig(passage_encoder=prompts, chunker=ChunkerConfig(max_words=20),
                             graph=FlatConfig(document=document))
    model = FlatEncoder.from_pretrained(str(tiny_bert), config=config, device="cpu").eval()
    queries = ["graph attention", "long documents"]  # FirstP read a query as a document: "passage: graph ..."
    expected = encoder_vectors(model, [f"query: {q}" for q in queries], truncate=True)
    assert torch.allclose(model.encode_queries(queries, convert_to_tensor=True), expected, atol=1e-6)
    if document == "first":
        doc = Document("d", "graph attention")
        assert torch.allclose(model.encode([doc], convert_to_tensor=True),
                              encoder_vectors(model, ["passage: graph attention"], truncate=True), atol=1e-6)
        mixed = model([model.prepare_query("graph attention"), model.prepare(doc)]).document_embeddings
        assert torch.allclose(mixed, encoder_vectors(model, ["query: graph attention", "passage: graph attention"],
                                                     truncate=True), atol=1e-6)


def test_first_mode_encodes_passages_only_when_the_index_asks(tiny_bert: Path, monkeypatch) -> None:
    model = flat(tiny_bert)
    counts = []
    encode_ids = model.passage_encoder.encode_ids
    monkeypatch.setattr(model.passage_encoder, "encode_ids", lambda ids: counts.append(len(ids)) or encode_ids(ids))
    out = next(model.iter_forward(DOCS))
    assert counts == [len(DOCS)] and out.node_embeddings.shape == (len(DOCS), 32)

    out = next(model.iter_forward(DOCS, return_attention_weights=True))  # as the index builder asks
    n_passages = [len(p.passages) for p in out.documents]
    assert counts[1] == len(DOCS) + sum(n_passages)
    assert torch.allclose(out.document_embeddings, model.encode(DOCS, convert_to_tensor=True), atol=1e-6)
    for i, doc in enumerate(DOCS):
        assert torch.allclose(out.passage_embeddings(i), passage_vectors(model, doc), atol=1e-6)
        assert torch.allclose(out.document_attention(i), torch.full((n_passages[i],), 1 / n_passages[i]))


def test_first_mode_encode_does_not_chunk_the_passages_it_never_encodes(tiny_bert: Path, monkeypatch) -> None:
    model = flat(tiny_bert)
    expected = next(model.iter_forward(DOCS)).document_embeddings  # prepared in full, as before
    chunked = []
    prepare = model.prepare
    monkeypatch.setattr(model, "prepare", lambda doc, *rest: chunked.append(doc.id) or prepare(doc, *rest))
    assert torch.equal(model.encode(DOCS, convert_to_tensor=True), expected)
    out = next(model.iter_forward(DOCS, document_only=True))
    assert chunked == [] and [p.passages for p in out.documents] == [[]] * len(DOCS)
    assert torch.equal(out.document_embeddings, expected)
    # passages are still there for callers that read them: attention (the index) or a mean model
    next(model.iter_forward(DOCS, return_attention_weights=True, document_only=True))
    assert chunked == [d.id for d in DOCS]


TRUNCATION_TEXTS = [
    " ".join([SENTENCE] * 400),                      # far past the limit
    "word " * 3 + "\u200b " * 200 + SENTENCE * 30,  # words that tokenize to nothing: whole text after all
    "spaces   and\ttabs\n\n between  words " * 60,
    "x" * 5_000,                                     # one long word
    "short text",
    "Ünïcödé ñames, émojis 🙂 and 数字 " * 80,
]


@pytest.mark.parametrize("name", ["tiny_bert", "tiny_roberta", "default"])
def test_truncating_tokenize_reads_a_prefix_and_matches_the_tokenizers_truncation(name: str, request) -> None:
    if name == "default":
        from graphdoc.default_model import default_model_path
        path = default_model_path()
    else:
        path = request.getfixturevalue(name)
    encoder = flat(path).passage_encoder
    expected = encoder.tokenizer(TRUNCATION_TEXTS, truncation=True, max_length=encoder.max_seq_length)["input_ids"]
    assert encoder.tokenize(TRUNCATION_TEXTS, truncate=True) == expected
    assert max(len(ids) for ids in expected) == encoder.max_seq_length
    read = []
    tokenize = encoder._tokenize_truncated
    encoder._tokenize_truncated = lambda texts: read.extend(texts) or tokenize(texts)
    encoder.tokenize(TRUNCATION_TEXTS[:1], truncate=True)
    assert len(read[0].split()) == encoder.max_seq_length  # the first words only


def test_batch_size_and_training_mode(tiny_roberta: Path) -> None:
    model = flat(tiny_roberta, "mean")
    assert np.allclose(model.encode(DOCS * 2, batch_size=1), model.encode(DOCS * 2, batch_size=4), atol=1e-5)
    model.train()
    model.encode(DOCS[:1])
    assert model.training
    assert repr(model).startswith("FlatEncoder(\n  document='mean', dimension=32")


# ------------------------------------------------------------------ Longformer
def test_longformer_gives_the_first_token_global_attention(tiny_longformer: Path, monkeypatch) -> None:
    model = flat(tiny_longformer)
    hf_model = model.passage_encoder.model
    assert hf_model.config.model_type == "longformer"
    calls = []
    forward = hf_model.forward
    monkeypatch.setattr(hf_model, "forward", lambda *a, **kw: calls.append(kw) or forward(*a, **kw))
    got = model.encode(DOCS, convert_to_tensor=True)
    mask = calls[0]["global_attention_mask"]
    assert mask.shape == calls[0]["input_ids"].shape
    assert mask.shape[1] > 4  # longer than the attention window: local attention alone sees part of it
    assert mask[:, 0].tolist() == [1] * len(DOCS) and int(mask.sum()) == len(DOCS)
    # the vectors are the model's CLS output under that mask, which does change them
    ids, attention = model.passage_encoder.pad(model.passage_encoder.tokenize(
        [model.first_input(d) for d in DOCS], truncate=True), torch.device("cpu"))
    with torch.no_grad():
        local = forward(input_ids=ids, attention_mask=attention).last_hidden_state[:, 0]
        glob = forward(input_ids=ids, attention_mask=attention, global_attention_mask=mask).last_hidden_state[:, 0]
    assert torch.allclose(got, glob, atol=1e-5) and not torch.allclose(got, local, atol=1e-3)


def test_other_encoders_get_no_global_attention_mask(tiny_bert: Path, monkeypatch) -> None:
    model = flat(tiny_bert)
    calls = []
    forward = model.passage_encoder.model.forward
    monkeypatch.setattr(model.passage_encoder.model, "forward", lambda *a, **kw: calls.append(kw) or forward(*a, **kw))
    model.encode(DOCS[:1])
    assert calls and "global_attention_mask" not in calls[0]


# ------------------------------------------------------------------ save / load
def test_save_load_round_trip(tiny_roberta: Path, tmp_path: Path) -> None:
    model = flat(tiny_roberta, "mean", max_words=12)
    with torch.no_grad():  # look trained: the saved encoder, not the original folder, must be loaded
        model.passage_encoder.model.embeddings.word_embeddings.weight.mul_(1.5)
    model.save_pretrained(tmp_path / "flat")
    config = json.loads((tmp_path / "flat" / "config.json").read_text(encoding="utf-8"))
    assert config["backbone"] == "flat" and config["model"]["graph"] == {"graph_type": "flat", "document": "mean"}
    assert (tmp_path / "flat" / "model.safetensors").is_file()
    assert (tmp_path / "flat" / "passage_encoder" / "config.json").is_file()

    for loaded in (FlatEncoder.from_pretrained(tmp_path / "flat", device="cpu"),
                   graphdoc.load_model(tmp_path / "flat", device="cpu")):
        assert isinstance(loaded, FlatEncoder) and loaded.config == model.config
        assert loaded.name_or_path == str((tmp_path / "flat").resolve())
        assert np.allclose(loaded.encode(DOCS), model.encode(DOCS), atol=1e-6)
        assert np.allclose(loaded.encode_queries(["a query"]), model.encode_queries(["a query"]), atol=1e-6)


def test_graph_models_save_their_backbone_and_both_load_through_one_loader(tiny_bert: Path, tmp_path: Path) -> None:
    GraphDocEncoder.from_pretrained(str(tiny_bert), device="cpu").save_pretrained(tmp_path / "graph")
    assert json.loads((tmp_path / "graph" / "config.json").read_text(encoding="utf-8"))["backbone"] == "graph"
    assert isinstance(graphdoc.load_model(tmp_path / "graph"), GraphDocEncoder)
    assert isinstance(graphdoc.load_model(str(tiny_bert)), GraphDocEncoder)  # a plain encoder: graph by default
    config = FlatModelConfig(graph=FlatConfig(document="mean"))
    built = graphdoc.load_model(str(tiny_bert), backbone="flat", config=config)
    assert isinstance(built, FlatEncoder) and built.config.graph.document == "mean"


def test_loading_the_wrong_backbone_is_refused(tiny_bert: Path, tmp_path: Path) -> None:
    flat(tiny_bert).save_pretrained(tmp_path / "flat")
    with pytest.raises(ModelLoadError, match=r"flat is a saved flat model, not a graph one: load it with "
                                             r"graphdoc.load_model \(or --backbone flat\)"):
        GraphDocEncoder.from_pretrained(tmp_path / "flat")
    with pytest.raises(ModelLoadError, match="is a saved flat model; it cannot be loaded as a graph one"):
        graphdoc.load_model(tmp_path / "flat", backbone="graph")
    with pytest.raises(GraphDocError, match="unknown backbone 'tree'; valid: graph, flat"):
        graphdoc.load_model(tmp_path / "flat", backbone="tree")
    with pytest.raises(GraphDocError, match="^a flat model takes a FlatModelConfig, or a config file or built-in "
                                            "config's name; got a ModelConfig$"):
        graphdoc.load_model(str(tiny_bert), backbone="flat", config=ModelConfig())
    # the classes' own loaders check it too: a flat model built on a ModelConfig saved a folder no loader read
    with pytest.raises(TypeError, match=r"^FlatEncoder takes a FlatModelConfig as config; got a ModelConfig$"):
        FlatEncoder.from_pretrained(str(tiny_bert), config=ModelConfig())
    with pytest.raises(TypeError, match=r"^GraphDocEncoder takes a ModelConfig as config; got a FlatModelConfig$"):
        GraphDocEncoder.from_pretrained(str(tiny_bert), config=FlatModelConfig())
    with pytest.raises(TypeError, match=r"^GraphDocEncoder takes a ModelConfig as config; got a dict \(build one with "
                                        r"ModelConfig.from_dict\)$"):
        GraphDocEncoder.from_config({"chunker": {"max_words": 50}})
    # a config file, or a built-in config by name: its model settings (a pretrain config's model section)
    flat_model = FlatEncoder.from_pretrained(str(tiny_bert), config="docsplit-minilm", device="cpu")
    assert (flat_model.config.graph.document, flat_model.config.chunker.max_words) == ("first", 100)
    assert GraphDocEncoder.from_pretrained(str(tiny_bert), config="section-graph",
                                           device="cpu").config.graph.graph_type == "section"
    with pytest.raises(TypeError, match=r"^FlatEncoder takes a FlatModelConfig as config; got a int$"):
        FlatEncoder.from_pretrained(str(tiny_bert), config=3)


def test_config_errors_name_the_setting() -> None:
    with pytest.raises(GraphDocError, match="graph.document must be one of first, mean; got 'max'"):
        FlatConfig(document="max")
    with pytest.raises(GraphDocError, match="graph.graph_type must be 'flat'; got 'full'"):
        FlatModelConfig.from_dict({"graph": {"graph_type": "full"}})
    with pytest.raises(GraphDocError, match="unknown config key graph.num_layers"):
        FlatModelConfig.from_dict({"graph": {"num_layers": 2}})
    with pytest.raises(GraphDocError, match="no projection: passage_encoder.projection_dim must be null; got 16"):
        FlatModelConfig(passage_encoder=PassageEncoderConfig(projection_dim=16))
