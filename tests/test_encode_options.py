"""encode's sentence-transformers options on tiny random encoders, for both backbones: ``truncate_dim`` (Matryoshka),
``precision`` (quantised outputs, as sentence-transformers' ``quantize_embeddings``) and a per-call ``prompt``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from graphdoc.config import ModelConfig, PassageEncoderConfig
from graphdoc.documents import Document
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import ArgumentTypeError, GraphDocError
from graphdoc.flat_config import FlatModelConfig
from graphdoc.flat_encoder import FlatEncoder
from graphdoc.quantization import OUTPUT_PRECISIONS, quantize_embeddings

try:  # sentence-transformers >= 5 keeps it in util; earlier releases (and 6, deprecated) in quantization
    from sentence_transformers.util.quantization import quantize_embeddings as st_quantize
except ImportError:
    st_quantize = pytest.importorskip("sentence_transformers.quantization").quantize_embeddings

DOCS = [Document("a", "Graph attention networks read documents as graphs of passages. " * 3, title="Graphs"),
        "The quick brown fox jumps over the lazy dog.", {"title": "Meeting", "text": "Meetings have topics."},
        "Dense and sparse retrieval can be fused."]
QUERIES = ["graph attention", "a lazy dog", "what do meetings have?"]
DTYPES = {"int8": np.int8, "uint8": np.uint8, "binary": np.int8, "ubinary": np.uint8}
PROMPTS = PassageEncoderConfig(query_prompt="query: ", passage_prompt="passage: ")


def load(path: Path, backbone: str):
    if backbone == "flat":
        return FlatEncoder.from_pretrained(str(path), FlatModelConfig(passage_encoder=PROMPTS), device="cpu")
    return GraphDocEncoder.from_pretrained(str(path), ModelConfig(passage_encoder=PROMPTS), device="cpu")


@pytest.fixture(scope="module", params=["graph", "flat"])
def model(request, spread_bert: Path):
    return load(spread_bert, request.param)


# ------------------------------------------------------------------ truncate_dim
def test_truncate_dim_keeps_the_first_dimensions_and_normalises_after(model) -> None:
    full = model.encode(DOCS, convert_to_tensor=True)
    assert np.array_equal(model.encode(DOCS, truncate_dim=8), full[:, :8].numpy())
    cut = model.encode(DOCS, truncate_dim=8, normalize_embeddings=True)
    assert cut.shape == (4, 8) and np.allclose(np.linalg.norm(cut, axis=1), 1.0, atol=1e-6)
    assert np.array_equal(cut, F.normalize(full[:, :8], dim=-1).numpy())  # not the full vector's first 8
    queries = model.encode_queries(QUERIES, truncate_dim=5, normalize_embeddings=True)
    assert np.array_equal(queries, F.normalize(model.encode_queries(QUERIES, convert_to_tensor=True)[:, :5],
                                               dim=-1).numpy())
    assert model.encode(DOCS[1], truncate_dim=model.dimension).shape == (32,)  # all of them
    assert model.encode_corpus([{"text": "A"}, {"text": "B"}], truncate_dim=3).shape == (2, 3)


@pytest.mark.parametrize("value", [0, -1, 33])
def test_truncate_dim_outside_the_model_s_dimension_is_one_error(model, value: int) -> None:
    message = f"truncate_dim must be from 1 to the model's dimension, 32; got {value}"
    for call in (model.encode, model.encode_queries):
        with pytest.raises(GraphDocError, match=f"^{message}$"):
            call(["a text"], truncate_dim=value)
    with pytest.raises(ArgumentTypeError, match="^truncate_dim must be an integer or None; got '8'$"):
        model.encode(["a text"], truncate_dim="8")


# ------------------------------------------------------------------ precision
@pytest.mark.parametrize("precision", OUTPUT_PRECISIONS)
def test_quantisation_equals_sentence_transformers(precision: str) -> None:
    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((150, 21)).astype(np.float32)  # 21: the last byte of bits half full
    embeddings[:, 3] = 0.25  # a constant dimension: a zero range
    calibration = rng.standard_normal((300, 21)).astype(np.float32) * 0.5  # values outside its range are clipped
    for ours, theirs in [(quantize_embeddings(embeddings, precision), st_quantize(embeddings, precision)),
                         (quantize_embeddings(embeddings, precision, calibration),
                          st_quantize(embeddings, precision, calibration_embeddings=calibration))]:
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape and np.array_equal(ours, theirs)


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_encode_quantises_its_output_as_sentence_transformers(model, precision: str) -> None:
    floats = model.encode(DOCS, normalize_embeddings=True, truncate_dim=20)
    quantised = model.encode(DOCS, normalize_embeddings=True, truncate_dim=20, precision=precision)
    assert np.array_equal(quantised, st_quantize(floats, precision)) and quantised.dtype == DTYPES[precision]
    tensor = model.encode(DOCS, normalize_embeddings=True, truncate_dim=20, precision=precision, convert_to_tensor=True)
    assert isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu"  # as sentence-transformers: on the CPU
    assert np.array_equal(tensor.numpy(), quantised)
    queries = model.encode_queries(QUERIES, precision=precision)
    assert np.array_equal(queries, st_quantize(model.encode_queries(QUERIES), precision))


def test_one_embedding_is_quantised_to_int8_with_calibration_embeddings(model) -> None:
    corpus = model.encode(DOCS)
    with pytest.raises(GraphDocError, match="^int8 quantisation of a single embedding needs calibration_embeddings "):
        model.encode_queries("graph attention", precision="int8")
    query = model.encode_queries("graph attention", precision="int8", calibration_embeddings=corpus)
    assert query.shape == (32,) and np.array_equal(
        query, st_quantize(model.encode_queries(["graph attention"]), "int8", calibration_embeddings=corpus)[0])
    assert model.encode("one text", precision="binary").shape == (4,)  # 32 sign bits, packed
    assert model.encode([], precision="ubinary").shape == (0, 4) and model.encode([], precision="int8").dtype == np.int8
    with pytest.raises(GraphDocError, match=r"^calibration_embeddings must be \[m, 8\] .*; got \[4, 32\]$"):
        model.encode(DOCS, precision="uint8", truncate_dim=8, calibration_embeddings=corpus)


@pytest.mark.parametrize("arithmetic", ["bf16", "fp16", "fp32", "auto", "float16"])
def test_an_arithmetic_as_precision_says_where_that_setting_lives(model, arithmetic: str) -> None:
    with pytest.raises(GraphDocError) as caught:
        model.encode_queries(["a query"], precision=arithmetic)
    assert str(caught.value) == (
        f"precision={arithmetic!r} is an arithmetic: encode's precision quantises the returned embeddings (one of "
        "float32, int8, uint8, binary, ubinary); the arithmetic the encoder computes in is the model config's "
        "passage_encoder.precision (auto, fp32, bf16, fp16; --precision on the command line)")
    with pytest.raises(GraphDocError, match="^precision must be one of float32, int8, uint8, binary, ubinary; got "
                                            "'int4'$"):
        model.encode(["a text"], precision="int4")


# ------------------------------------------------------------------ prompt
def test_a_prompt_replaces_the_configured_one_for_that_call(spread_bert: Path) -> None:
    for backbone in ("graph", "flat"):
        model = load(spread_bert, backbone)
        encoder = model.passage_encoder
        queries, documents = model.encode_queries(QUERIES), model.encode(DOCS)
        asked = model.encode_queries(QUERIES, prompt="search: "), model.encode(DOCS, prompt="text: ")
        unprompted = model.encode_queries(QUERIES, prompt=""), model.encode(DOCS, prompt="")
        assert (encoder.query_prompt, encoder.passage_prompt) == ("query: ", "passage: ")  # left as they were
        assert np.array_equal(model.encode_queries(QUERIES), queries) and not np.allclose(asked[0], queries)
        assert not np.allclose(asked[1], documents)
        # exactly what the model configured with that prompt gives
        encoder.query_prompt, encoder.passage_prompt = "search: ", "text: "
        assert np.array_equal(asked[0], model.encode_queries(QUERIES)) and np.array_equal(asked[1], model.encode(DOCS))
        encoder.query_prompt, encoder.passage_prompt = "", ""
        assert np.array_equal(unprompted[0], model.encode_queries(QUERIES))
        assert np.array_equal(unprompted[1], model.encode(DOCS))


def test_a_prompt_goes_before_every_passage_and_shortens_the_title_s_share(spread_bert: Path) -> None:
    model = load(spread_bert, "graph")
    prepared = model.prepare(DOCS[0], prompt="text: ")
    decode = model.passage_encoder.tokenizer.decode
    assert all(decode(ids, skip_special_tokens=True).startswith("text : ") for ids in prepared.token_ids)
    assert decode(prepared.token_ids[0], skip_special_tokens=True).startswith("text : graphs graph attention")
    title = model.title_input("graph " * 30, prompt="graph " * 20)
    assert title == " ".join(["graph"] * 22)  # half of the 64 tokens the prompt's 20 leave, as a configured one's
    model.passage_encoder.passage_prompt = "graph " * 20
    assert model.title_input("graph " * 30) == title


def test_a_prompt_too_long_or_not_a_str_is_one_error(model) -> None:
    message = (r"^prompt leaves 2 of the encoder's 64 tokens \(max_seq_length; the prompt takes 60, special tokens 2\) "
               r"for the text: at least 8 are needed$")
    with pytest.raises(GraphDocError, match=message):
        model.encode_queries(["a query"], prompt="graph " * 60)
    with pytest.raises(ArgumentTypeError, match="^prompt must be a str or None; got a bytes$"):
        model.encode(["a text"], prompt=b"query: ")
