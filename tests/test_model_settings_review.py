"""Findings of the review of the Python embedding API: a model's settings have one home (its config), so what
encodes, what is saved and what an index records agree; config sections of the wrong type, corpora and model names
that are not one are refused in one line."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import graphdoc
from graphdoc.config import ChunkerConfig, GraphConfig, ModelConfig
from graphdoc.documents import Document
from graphdoc.encoder import GraphDocEncoder, starts_with_title
from graphdoc.errors import GraphDocError
from graphdoc.flat_config import FlatModelConfig
from graphdoc.flat_encoder import FlatEncoder

DOCS = [{"_id": "a", "title": "Graphs", "text": " ".join(["Graph attention networks read documents."] * 12)},
        {"_id": "b", "title": "Search", "text": " ".join(["Dense retrieval finds passages fast."] * 12)}]


@pytest.fixture
def fresh(model_dir) -> GraphDocEncoder:
    """A model of its own: these tests change its settings."""
    return GraphDocEncoder.from_pretrained(str(model_dir), device="cpu")


def test_a_setting_changed_on_the_passage_encoder_is_in_the_config_saved(fresh, tmp_path) -> None:
    fresh.passage_encoder.max_seq_length = 16
    assert fresh.config.passage_encoder.max_seq_length == 16
    before = fresh.encode(DOCS)
    fresh.save_pretrained(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "config.json").read_text(encoding="utf-8"))
    assert saved["model"]["passage_encoder"]["max_seq_length"] == 16
    loaded = graphdoc.load_model(str(tmp_path / "m"), device="cpu")
    assert loaded.passage_encoder.max_seq_length == 16
    np.testing.assert_allclose(loaded.encode(DOCS), before, atol=1e-6)


def test_a_setting_changed_in_the_config_is_the_one_that_encodes(fresh) -> None:
    mean = fresh.encode(DOCS)
    fresh.config.passage_encoder.pooling = "cls"
    assert fresh.passage_encoder.pooling == "cls"
    assert not np.allclose(fresh.encode(DOCS), mean)
    fresh.passage_encoder.normalize = True
    assert fresh.config.passage_encoder.normalize is True


def test_a_bad_setting_is_refused_and_changes_nothing(fresh) -> None:
    with pytest.raises(GraphDocError, match="passage_encoder.pooling must be one of"):
        fresh.passage_encoder.pooling = "median"
    with pytest.raises(GraphDocError, match="passage_encoder.max_seq_length must be at least"):
        fresh.passage_encoder.max_seq_length = 2
    fresh.passage_encoder.max_seq_length = 16
    with pytest.raises(GraphDocError, match="passage_encoder.passage_prompt leaves"):
        fresh.passage_encoder.passage_prompt = "a very long prompt " * 4
    assert (fresh.passage_encoder.pooling, fresh.passage_encoder.max_seq_length,
            fresh.passage_encoder.passage_prompt) == ("mean", 16, "")
    fresh.passage_encoder.passage_prompt = "doc: "
    assert fresh.passage_encoder.passage_prompt_tokens > 0
    assert fresh.config.passage_encoder.passage_prompt == "doc: "


def test_an_index_records_the_setting_that_encoded_it(fresh, tmp_path) -> None:
    from graphdoc.retrieval.builder import build_index

    fresh.passage_encoder.max_seq_length = 16
    manifest = build_index(fresh, DOCS, tmp_path / "index")
    assert manifest.model["passage_encoder"]["max_seq_length"] == 16


@pytest.mark.parametrize("cls, config_class", [(GraphDocEncoder, ModelConfig), (FlatEncoder, FlatModelConfig)])
def test_a_config_assigned_gives_the_chunker_its_section(tiny_bert, cls, config_class) -> None:
    model = cls.from_pretrained(str(tiny_bert), config=config_class(), device="cpu")
    doc = Document.from_dict({"_id": "x", "text": " ".join(f"Sentence number {i} has six words." for i in range(40))})
    assert len(model.chunker(doc)) == 3  # 100-word passages: 16 sentences of 6 words
    model.config = dataclasses.replace(model.config, chunker=ChunkerConfig(max_words=20))
    assert model.chunker.config is model.config.chunker
    assert len(model.chunker(doc)) == 14  # 3 sentences


def test_config_sections_are_their_own_dataclasses() -> None:
    assert ModelConfig(chunker={"max_words": 50}).chunker == ChunkerConfig(max_words=50)
    with pytest.raises(GraphDocError, match="unknown config key chunker.words"):
        ModelConfig(chunker={"words": 50})
    with pytest.raises(GraphDocError, match="^config section graph must be a FlatConfig .* got a GraphConfig$"):
        FlatModelConfig(graph=GraphConfig())
    with pytest.raises(GraphDocError, match="^config section passage_encoder must be a PassageEncoderConfig"):
        ModelConfig(passage_encoder="roberta-base")


def test_encode_corpus_refuses_one_text_and_reads_a_dict_of_texts(model) -> None:
    with pytest.raises(TypeError, match="got a str \\(embed one text with encode\\)"):
        model.encode_corpus("hello world")
    with pytest.raises(TypeError, match="^corpus must be a \\{'title', 'text'\\} dict or an iterable of them; got "
                                        "NoneType$"):
        model.encode_corpus(None)
    with pytest.raises(TypeError, match="^corpus\\['d1'\\] must be a \\{'title', 'text'\\} dict or a str; got a int$"):
        model.encode_corpus({"d1": 5})
    np.testing.assert_allclose(model.encode_corpus({"d1": "hello world"}), model.encode(["hello world"]), atol=1e-6)


def test_encode_refuses_a_dict_of_documents(model) -> None:
    with pytest.raises(TypeError, match="documents is a dict of dicts, not one document: embed documents by id "
                                        "with encode_corpus"):
        model.encode({"a": {"text": "x"}, "b": {"text": "y"}})


@pytest.mark.parametrize("name, error, message", [
    ("", GraphDocError, "the model is an empty name: give a model folder or a Hugging Face id"),
    ("  ", GraphDocError, "the model is an empty name"),
    (5, TypeError, "a model is named by a str or a path \\(a Hugging Face id or a folder\\); got a int"),
])
def test_a_model_name_that_is_no_name_is_refused(name, error, message) -> None:
    with pytest.raises(error, match=message):
        graphdoc.load_model(name)
    with pytest.raises(error, match=message):
        GraphDocEncoder.from_pretrained(name)


def test_load_model_takes_a_built_in_config_by_name(tiny_bert) -> None:
    model = graphdoc.load_model(str(tiny_bert), config="section-graph", device="cpu")
    assert model.config.graph.graph_type == "section"


def test_query_ids_that_are_one_as_text_are_refused() -> None:
    from graphdoc.retrieval.queries import split_queries

    with pytest.raises(GraphDocError, match="^query ids 1 and '1' are both '1' as text, as a run names them"):
        split_queries({1: "graphs", "1": "search"})


@pytest.mark.parametrize("text, title, expected", [
    ("C#\nrest", "C#", True), ("# C#\nrest", "C#", True), ("#1 hits\nx", "#1 hits", True),
    ("## Title ##\nx", "Title", True), ("#Title\nx", "Title", True), ("Title and more\nx", "Title", False),
])
def test_a_title_holding_hash_marks_is_known_on_the_first_line(text, title, expected) -> None:
    assert starts_with_title(text, title) is expected




def test_a_setting_is_stored_as_its_check_converts_it(fresh) -> None:
    fresh.passage_encoder.max_seq_length = "32"  # (as a YAML config file's "32" is read)
    assert fresh.config.passage_encoder.max_seq_length == 32 and fresh.passage_encoder.max_seq_length == 32
    assert fresh.encode(DOCS).shape == (2, 32)


def test_a_config_assigned_must_be_the_models_own_kind(fresh) -> None:
    with pytest.raises(TypeError, match="^GraphDocEncoder takes a ModelConfig as config; got a dict"):
        fresh.config = {"chunker": {"max_words": 20}}
    assert isinstance(fresh.config, ModelConfig)
