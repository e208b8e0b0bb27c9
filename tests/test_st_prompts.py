"""Query and passage prompts (E5's "query: " / "passage: "): read from a sentence-transformers checkpoint as
its encode_query / encode_document choose them, set in the config, applied to every passage and query, saved."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

import graphdoc
from graphdoc.config import ModelConfig, PassageEncoderConfig
from graphdoc.documents import Document
from graphdoc.errors import GraphDocError, ModelLoadError
from graphdoc.flat_config import FlatModelConfig

st = pytest.importorskip("sentence_transformers")
modules = pytest.importorskip("sentence_transformers.sentence_transformer.modules")

TEXTS = ["Graph attention networks read documents.", "A short one.", "Dense and sparse retrieval can be fused."]
PROMPTS = {"query": "query: ", "passage": "passage: "}


def st_model(tiny_bert: Path, folder: Path, prompts: dict, default: str | None = None, **pooling) -> Path:
    """A sentence-transformers model with ``prompts`` as its file holds them (sentence-transformers 6 would add
    empty ``query`` and ``document`` prompts; E5's, saved by earlier releases, has ``query`` and ``passage``)."""
    pipeline = [modules.Transformer(str(tiny_bert), max_seq_length=48), modules.Pooling(32, "mean", **pooling),
                modules.Normalize()]
    st.SentenceTransformer(modules=pipeline, device="cpu").save(str(folder))
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps({**config, "prompts": prompts, "default_prompt_name": default}))
    return folder


def st_passages(folder: Path, prompt: str, texts: list[str] = TEXTS) -> np.ndarray:
    return st.SentenceTransformer(str(folder), device="cpu").encode(texts, prompt=prompt)


@pytest.fixture(scope="module")
def e5_like(spread_bert: Path, tmp_path_factory) -> Path:
    return st_model(spread_bert, tmp_path_factory.mktemp("st") / "e5", PROMPTS)


def test_prompts_are_read_and_applied_as_sentence_transformers_applies_them(e5_like: Path) -> None:
    model = graphdoc.load_model(str(e5_like))
    encoder = model.passage_encoder
    assert (encoder.query_prompt, encoder.passage_prompt) == ("query: ", "passage: ")
    reference = st.SentenceTransformer(str(e5_like), device="cpu")
    # untrained, a one-passage document's vector is its passage's, and a query is a one-node graph
    np.testing.assert_allclose(model.encode(TEXTS), st_passages(e5_like, "passage: "), atol=1e-6)
    np.testing.assert_allclose(model.encode_queries(TEXTS), reference.encode_query(TEXTS), atol=1e-6)
    assert not np.allclose(model.encode(TEXTS), model.encode_queries(TEXTS), atol=1e-3)  # the prompts matter
    prepared = model.prepare(Document("d", TEXTS[0], title="A title"))
    assert encoder.tokenizer.decode(prepared.token_ids[0], skip_special_tokens=True).startswith("passage : a title")


def test_a_flat_encoder_prompts_its_firstp_input_too(e5_like: Path) -> None:
    model = graphdoc.load_model(str(e5_like), backbone="flat", config=FlatModelConfig())
    np.testing.assert_allclose(model.encode(TEXTS), st_passages(e5_like, "passage: "), atol=1e-6)


def test_the_config_overrides_the_checkpoint_s_prompts(e5_like: Path) -> None:
    config = ModelConfig(passage_encoder=PassageEncoderConfig(query_prompt="", passage_prompt="doc: "))
    encoder = graphdoc.load_model(str(e5_like), config=config).passage_encoder
    assert (encoder.query_prompt, encoder.passage_prompt) == ("", "doc: ")


@pytest.mark.parametrize(("prompts", "default", "expected"), [
    ({"query": "q: ", "document": "d: ", "passage": "p: "}, None, ("q: ", "d: ")),  # document before passage
    ({"query": "q: ", "corpus": "c: "}, None, ("q: ", "c: ")),
    ({"query": "q: ", "classification": "x: "}, "classification", ("q: ", "x: ")),  # default where none named
    ({"classification": "x: "}, None, ("", "")),
    ({"query": "q: ", "document": "", "passage": "p: "}, None, ("q: ", "p: ")),  # sentence-transformers 6's empty one
    ({"query": "", "x": "x: "}, "x", ("", "x: ")),  # an empty query prompt is kept, as encode_query keeps it
    ({}, None, ("", "")),
])
def test_prompt_choice_follows_sentence_transformers(spread_bert: Path, tmp_path: Path, prompts, default,
                                                     expected) -> None:
    folder = st_model(spread_bert, tmp_path / "st", prompts, default)
    encoder = graphdoc.load_model(str(folder)).passage_encoder
    assert (encoder.query_prompt, encoder.passage_prompt) == expected
    model = graphdoc.load_model(str(folder))
    np.testing.assert_allclose(model.encode_queries(TEXTS), st_passages(folder, expected[0]), atol=1e-6)
    np.testing.assert_allclose(model.encode(TEXTS), st_passages(folder, expected[1]), atol=1e-6)


def test_prompts_are_saved_and_read_back_by_graphdoc_and_sentence_transformers(e5_like: Path, tmp_path: Path) -> None:
    model = graphdoc.load_model(str(e5_like))
    model.save_pretrained(tmp_path / "saved")
    again = graphdoc.load_model(str(tmp_path / "saved"))
    assert (again.passage_encoder.query_prompt, again.passage_encoder.passage_prompt) == ("query: ", "passage: ")
    reference = st.SentenceTransformer(str(tmp_path / "saved" / "passage_encoder"), device="cpu")
    assert reference.prompts["query"] == "query: " and reference.prompts["document"] == "passage: "
    np.testing.assert_allclose(again.encode_queries(TEXTS), reference.encode_query(TEXTS), atol=1e-6)
    np.testing.assert_allclose(again.encode(TEXTS), reference.encode_document(TEXTS), atol=1e-6)


def test_a_pooling_that_leaves_the_prompt_out_is_named(tiny_bert: Path, tmp_path: Path, caplog) -> None:
    folder = st_model(tiny_bert, tmp_path / "instructor", PROMPTS, include_prompt=False)
    with caplog.at_level(logging.WARNING):
        graphdoc.load_model(str(folder))
    assert [r.getMessage() for r in caplog.records] == [
        f"{folder}: its pooling leaves the prompt's tokens out (include_prompt false); graphdoc pools them with "
        "the text's"]


@pytest.mark.parametrize(("config", "message"), [
    ({"prompts": {"query": 3}}, r"'prompts' must map prompt names to strings; got \{'query': 3\}"),
    ({"prompts": {"query": "q: "}, "default_prompt_name": "doc"},
     r"default_prompt_name 'doc' is not among its prompts \(query\)"),
])
def test_broken_prompts_are_one_error_line(tiny_bert: Path, tmp_path: Path, config, message) -> None:
    folder = st_model(tiny_bert, tmp_path / "st", {})
    (folder / "config_sentence_transformers.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=message):
        graphdoc.load_model(str(folder))


# ------------------------------------------------------------------ indexes and checkpoints written before prompts
def as_read_from_an_older_index(identity: dict, folder: Path) -> dict:
    """``identity`` saved in a manifest without the prompt settings, as an index built before them holds it,
    and read back (``Manifest.load``)."""
    from graphdoc.retrieval.manifest import MANIFEST_NAME, Manifest

    folder.mkdir()
    Manifest(model=identity, dimension=32).save(folder)
    data = json.loads((folder / MANIFEST_NAME).read_text())
    for key in ("query_prompt", "passage_prompt"):
        data["model"]["passage_encoder"].pop(key, None)
    (folder / MANIFEST_NAME).write_text(json.dumps(data))
    return Manifest.load(folder).model


def test_an_index_built_before_prompts_existed_is_compared_as_built_without_them(tmp_path: Path) -> None:
    from graphdoc.retrieval.manifest import first_difference

    old = as_read_from_an_older_index({"passage_encoder": {"pooling": "mean"}}, tmp_path / "idx")
    assert first_difference(old, {"passage_encoder": {"pooling": "mean", "query_prompt": "", "passage_prompt": ""}}) \
        is None
    assert first_difference(old, {"passage_encoder": {"pooling": "mean", "query_prompt": "query: ",
                                                      "passage_prompt": ""}}) == (
        "passage_encoder.query_prompt", "", "query: ")
    assert first_difference(old, {"passage_encoder": {"pooling": "cls", "query_prompt": "query: "}}) == (
        "passage_encoder.pooling", "mean", "cls")  # a real difference is named first


def test_a_checkpoint_written_before_prompts_existed_resumes_only_without_them(tiny_bert: Path, tmp_path: Path) -> None:
    import torch

    from graphdoc.training.checkpoint import MODEL_DIR, check_start_model

    start = graphdoc.load_model(str(tiny_bert))
    saved = start.config.to_dict()
    for key in ("query_prompt", "passage_prompt"):
        del saved["passage_encoder"][key]
    (tmp_path / MODEL_DIR).mkdir()
    (tmp_path / MODEL_DIR / "config.json").write_text(json.dumps({"model": saved}))
    check_start_model(tmp_path, {}, start, {}, torch.device("cpu"))  # the same settings: resumes
    prompted = graphdoc.load_model(str(tiny_bert), config=ModelConfig(
        passage_encoder=PassageEncoderConfig(query_prompt="query: ")))
    with pytest.raises(GraphDocError, match=r"cannot resume with model.passage_encoder.query_prompt='query: ': the run "
                                            r"was started with ''"):
        check_start_model(tmp_path, {}, prompted, {}, torch.device("cpu"))


def test_an_index_built_before_prompts_existed_gets_its_model_back_without_them(e5_like: Path,
                                                                               tmp_path: Path) -> None:
    from graphdoc.backbones import load_index_model
    from graphdoc.retrieval.manifest import check_identity, model_identity

    built = as_read_from_an_older_index(model_identity(graphdoc.load_model(str(e5_like), config=ModelConfig(
        passage_encoder=PassageEncoderConfig(query_prompt="", passage_prompt="")))), tmp_path / "idx")
    model = load_index_model(built, "cpu")
    assert (model.passage_encoder.query_prompt, model.passage_encoder.passage_prompt) == ("", "")
    check_identity(built, model_identity(model), Path("idx"))  # searched with its own model: accepted


def test_a_fine_tuning_run_resumes_only_with_its_prompts(e5_like: Path) -> None:
    from graphdoc.finetune.loop import _check_encoder_settings

    unprompted = graphdoc.load_model(str(e5_like), config=ModelConfig(
        passage_encoder=PassageEncoderConfig(query_prompt="", passage_prompt="")))
    prompted = graphdoc.load_model(str(e5_like))
    _check_encoder_settings(prompted, graphdoc.load_model(str(e5_like)))
    with pytest.raises(GraphDocError, match=r"cannot resume with model.passage_encoder.query_prompt='query: ': the "
                                            r"run was started with ''"):
        _check_encoder_settings(unprompted, prompted)


@pytest.mark.parametrize("key", ["query_prompt", "passage_prompt"])
def test_a_prompt_that_leaves_no_room_for_the_text_is_refused(tiny_bert: Path, key: str) -> None:

    def load(words: int):  # tiny_bert takes 64 tokens, [CLS] and [SEP] included; "word" is one token
        return graphdoc.load_model(str(tiny_bert),
                                   config=ModelConfig(passage_encoder=PassageEncoderConfig(**{key: "word " * words})))

    assert getattr(load(54).passage_encoder, key) == "word " * 54  # 8 tokens left: enough
    with pytest.raises(GraphDocError, match=rf"passage_encoder.{key} leaves 7 of the encoder's 64 tokens "
                                            r"\(max_seq_length; the prompt takes 55, special tokens 2\) for the text: "
                                            r"at least 8 are needed"):
        load(55)


def test_a_title_gets_half_of_what_the_passage_prompt_leaves(tiny_bert: Path) -> None:
    prompt = "word " * 20
    model = graphdoc.load_model(str(tiny_bert), config=ModelConfig(
        passage_encoder=PassageEncoderConfig(passage_prompt=prompt)))
    assert model.passage_encoder.passage_prompt_tokens == 20
    title = model.title_input("word " * 30)
    assert len(title.split()) == (64 - 20) // 2  # one token a word
