"""The model API as a notebook user meets it (a second review): which encoder a config names, eval mode after
loading, sentence-transformers pooling, half precision, the passage cap, query inputs, similarity."""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import graphdoc
from graphdoc.config import ChunkerConfig, ModelConfig, PassageEncoderConfig
from graphdoc.documents import Document
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError, ModelLoadError
from graphdoc.flat_config import FlatModelConfig
from graphdoc.models.passage_encoder import pool

TEXTS = ["Graph attention networks read documents.", "A short one.", "Dense and sparse retrieval can be fused."]


# ------------------------------------------------------------------ which encoder, which mode
def test_a_config_naming_an_encoder_loads_that_encoder(tiny_bert: Path, caplog) -> None:
    config = ModelConfig(passage_encoder=PassageEncoderConfig(model_name_or_path=str(tiny_bert)))
    model = graphdoc.load_model(config=config)  # it loaded the default MiniLM before
    assert model.name_or_path == str(tiny_bert.resolve()) and model.dimension == 32
    assert GraphDocEncoder.from_pretrained(config=config).dimension == 32
    with caplog.at_level(logging.WARNING):
        graphdoc.load_model(str(tiny_bert), config=config)
    assert not caplog.records  # the same encoder: nothing to say


def test_a_name_given_with_a_config_naming_another_encoder_wins_with_a_warning(tiny_bert: Path, tiny_roberta: Path,
                                                                                caplog) -> None:
    config = ModelConfig(passage_encoder=PassageEncoderConfig(model_name_or_path=str(tiny_roberta)))
    with caplog.at_level(logging.WARNING):
        model = graphdoc.load_model(str(tiny_bert), config=config)
    assert model.name_or_path == str(tiny_bert.resolve())
    assert [r.getMessage() for r in caplog.records] == [
        f"loading {tiny_bert}, not the {tiny_roberta} the config's passage_encoder.model_name_or_path names"]


@pytest.mark.parametrize("backbone", ["graph", "flat"])
def test_models_come_back_in_eval_mode(tiny_bert: Path, tmp_path: Path, backbone: str) -> None:
    model = graphdoc.load_model(str(tiny_bert), backbone=backbone)
    assert not any(m.training for m in model.modules())
    model.train()
    model.save_pretrained(tmp_path / "saved")
    loaded = graphdoc.load_model(tmp_path / "saved")
    assert not any(m.training for m in loaded.modules())


def test_a_trained_models_forward_after_loading_is_deterministic(tiny_bert: Path, tmp_path: Path) -> None:
    model = graphdoc.load_model(str(tiny_bert), config=ModelConfig(chunker=ChunkerConfig(max_words=8)))
    with torch.no_grad():
        for p in model.graph.parameters():
            p.add_(0.1)  # GAT branches that are not zero, as after training: dropout would show
    model.save_pretrained(tmp_path / "trained")
    loaded = graphdoc.load_model(tmp_path / "trained")
    prepared = [loaded.prepare(Document("d", TEXTS[0] + " " + TEXTS[2]))]
    with torch.no_grad():
        first, second = (loaded(prepared).document_embeddings for _ in range(2))
    assert torch.equal(first, second)
    assert torch.allclose(first[0], torch.as_tensor(loaded.encode(TEXTS[0] + " " + TEXTS[2])), atol=1e-6)


# ------------------------------------------------------------------ sentence-transformers pooling
def test_pool_modes_on_a_small_case() -> None:
    hidden = torch.tensor([[[1.0], [2.0], [3.0]], [[4.0], [0.0], [-2.0]]])  # [2, 3, 1]
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    expected = {"cls": [1, 4], "mean": [1.5, 2 / 3], "max": [2, 4], "lasttoken": [2, -2],
                "mean_sqrt_len_tokens": [3 / math.sqrt(2), 2 / math.sqrt(3)],
                "weightedmean": [(1 + 4) / 3, (4 + 0 - 6) / 6]}
    for mode, values in expected.items():
        assert torch.allclose(pool(hidden, mask, mode)[:, 0], torch.tensor(values, dtype=torch.float)), mode


@pytest.mark.parametrize("mode", ["mean", "weightedmean", "mean_sqrt_len_tokens"])
def test_pooling_half_precision_vectors_sums_in_float32(mode: str) -> None:
    torch.manual_seed(0)
    hidden, mask = torch.randn(2, 400, 8), torch.ones(2, 400, dtype=torch.long)  # weights sum past fp16's 65,504
    mask[1, 300:] = 0
    expected = pool(hidden, mask, mode)
    for dtype in (torch.float16, torch.bfloat16):
        got = pool(hidden.to(dtype), mask, mode)
        assert got.dtype == dtype and torch.isfinite(got).all()
        assert torch.allclose(got.float(), expected, atol=0.02, rtol=0.02), (mode, dtype)


def st_folder(tiny_bert: Path, folder: Path, pooling: dict, extra_modules: tuple[str, ...] = ()) -> Path:
    """``tiny_bert`` as a sentence-transformers folder with the ``pooling`` config (and other modules)."""
    shutil.copytree(tiny_bert, folder)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    modules += [{"idx": i, "name": str(i), "path": f"{i}_{kind}", "type": f"sentence_transformers.models.{kind}"}
                for i, kind in enumerate(extra_modules, start=2)]
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **pooling}))
    return folder


@pytest.mark.parametrize(("pooling", "mode"), [
    ({"pooling_mode": "lasttoken"}, "lasttoken"),  # sentence-transformers >= 6 names the mode
    ({"pooling_mode": ["weightedmean"]}, "weightedmean"),
    ({"pooling_mode_mean_sqrt_len_tokens": True}, "mean_sqrt_len_tokens"),  # the older flags
    ({"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False}, "mean"),  # none set: mean, as there
])
def test_sentence_transformers_pooling_is_read_and_applied(tiny_bert: Path, tmp_path: Path, pooling: dict,
                                                           mode: str) -> None:
    model = graphdoc.load_model(str(st_folder(tiny_bert, tmp_path / "st", pooling)))
    assert model.passage_encoder.pooling == mode
    encoder = model.passage_encoder
    ids = encoder.tokenize(TEXTS, truncate=True)
    input_ids, mask = encoder.pad(ids, torch.device("cpu"))
    with torch.no_grad():
        expected = pool(encoder.model(input_ids=input_ids, attention_mask=mask).last_hidden_state, mask, mode)
    assert torch.allclose(torch.as_tensor(model.encode_queries(TEXTS)), expected, atol=1e-5)


def test_concatenated_or_unknown_pooling_is_refused(tiny_bert: Path, tmp_path: Path) -> None:
    both = st_folder(tiny_bert, tmp_path / "both", {"pooling_mode": ["cls", "mean"]})
    with pytest.raises(ModelLoadError, match=r"pools by cls \+ mean, concatenated; graphdoc pools one way"):
        graphdoc.load_model(str(both))
    chosen = ModelConfig(passage_encoder=PassageEncoderConfig(pooling="mean"))
    assert graphdoc.load_model(str(both), config=chosen).passage_encoder.pooling == "mean"
    unknown = st_folder(tiny_bert, tmp_path / "unknown", {"pooling_mode": "median"})
    with pytest.raises(ModelLoadError, match="unknown pooling_mode 'median'"):
        graphdoc.load_model(str(unknown))


def test_modules_graphdoc_does_not_apply_are_named(tiny_bert: Path, tmp_path: Path, caplog) -> None:
    # (Dense modules are applied: tests/test_st_dense.py)
    folder = st_folder(tiny_bert, tmp_path / "layernorm", {"pooling_mode": "mean"}, ("LayerNorm", "Normalize"))
    with caplog.at_level(logging.WARNING):
        model = graphdoc.load_model(str(folder))
    assert model.passage_encoder.normalize
    assert [r.getMessage() for r in caplog.records] == [
        f"{folder}: graphdoc does not apply its sentence-transformers module(s) LayerNorm (2_LayerNorm); its "
        "passage vectors are the pooled and normalised transformer output"]


# ------------------------------------------------------------------ precision, cap
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_model_cast_whole_to_half_precision_encodes(tiny_bert: Path, dtype: torch.dtype) -> None:
    reference = graphdoc.load_model(str(tiny_bert))
    model = graphdoc.load_model(str(tiny_bert)).to(dtype)
    vectors, queries = model.encode(TEXTS), model.encode_queries(TEXTS)
    assert vectors.dtype == queries.dtype == np.float32
    assert np.allclose(vectors, reference.encode(TEXTS), atol=0.05)
    assert np.allclose(queries, reference.encode_queries(TEXTS), atol=0.05)


def test_encode_warns_when_the_passage_cap_cuts_a_document(tiny_bert: Path, caplog) -> None:
    model = graphdoc.load_model(str(tiny_bert), config=ModelConfig(chunker=ChunkerConfig(max_words=8,
                                                                                         max_passages=2)))
    long = " ".join(["One two three four five six seven."] * 5)  # 5 passages of 7 words
    with caplog.at_level(logging.WARNING):
        model.encode(["Short text.", long])
    assert [r.getMessage() for r in caplog.records] == [
        "1 document(s) had more than 2 passages: their first 2 were embedded and 3 passages left out "
        "(--max-passages N sets the cap, 0 for none; or chunker.max_passages, null for none)"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        model.encode(["Short text."])  # counted per call
    assert not caplog.records


# ------------------------------------------------------------------ inputs, similarity, discovery
def test_query_and_document_inputs(tiny_bert: Path, caplog) -> None:
    model = graphdoc.load_model(str(tiny_bert))
    assert np.array_equal(model.encode_queries({"q1": TEXTS[0], "q2": TEXTS[1]}), model.encode_queries(TEXTS[:2]))
    with caplog.at_level(logging.WARNING):
        plain = model.encode_queries(TEXTS[:1], normalise_embeddings=True)
    assert np.array_equal(plain, model.encode_queries(TEXTS[:1]))
    assert [r.getMessage() for r in caplog.records] == ["encode_queries ignores the argument(s) normalise_embeddings"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        corpus = model.encode_corpus([{"title": "T", "text": TEXTS[0]}], prompt_name="doc", convert_to_tensor=True)
    assert torch.equal(corpus, model.encode([{"title": "T", "text": TEXTS[0]}], convert_to_tensor=True))
    assert [r.getMessage() for r in caplog.records] == ["encode_corpus ignores the argument(s) prompt_name"]
    for bad, name in [(None, "NoneType"), (5, "int"), (b"bytes", "bytes")]:
        with pytest.raises(TypeError, match=f"documents must be a str, a dict, a Document or an iterable of them; "
                                            f"got {name}"):
            model.encode(bad)
        with pytest.raises(TypeError, match=f"queries must be a str or an iterable of them; got {name}"):
            model.encode_queries(bad)


class Table:
    """What matters here of a pandas DataFrame (pandas is no dependency): iterating it gives its column names."""

    def __init__(self, columns: dict[str, list]) -> None:
        self.data = columns
        self.columns = list(columns)

    def __iter__(self):
        return iter(self.columns)

    def iterrows(self):
        return enumerate({name: values[i] for name, values in self.data.items()} for i in range(len(self)))

    def __len__(self) -> int:
        return len(next(iter(self.data.values())))


def _tables():
    columns = {"title": ["A", "B", "C"], "text": [TEXTS[0], TEXTS[1], TEXTS[2]]}
    yield Table(columns)
    try:
        import pandas
    except ImportError:  # (not a dependency: the stand-in above still runs)
        return
    yield pandas.DataFrame(columns)


def test_a_table_is_refused_not_embedded_as_its_column_names(tiny_bert: Path) -> None:
    """(encode, encode_corpus and encode_queries of a 3-row DataFrame gave 2 vectors: its column names')"""
    model = graphdoc.load_model(str(tiny_bert))
    for table in _tables():
        message = (f"is a table ({type(table).__name__}), whose items are its column names: pass one column "
                   "(df['text']) or its rows as dicts (df.to_dict('records'))")
        for call, name in [(model.encode, "documents"), (model.encode_corpus, "corpus"),
                           (model.encode_queries, "queries")]:
            with pytest.raises(TypeError, match=f"^{re.escape(f'{name} {message}')}$"):
                call(table)


@pytest.mark.parametrize("backbone", ["graph", "flat"])
def test_similarity_is_the_cosine_matrix(tiny_bert: Path, backbone: str) -> None:
    model = graphdoc.load_model(str(tiny_bert), backbone=backbone)
    a, b = model.encode(TEXTS), model.encode_queries(TEXTS[:2])
    expected = (a / np.linalg.norm(a, axis=1, keepdims=True)) @ (b / np.linalg.norm(b, axis=1, keepdims=True)).T
    got = model.similarity(a, b)
    assert got.shape == (3, 2) and got.dtype == torch.float32
    assert np.allclose(got.numpy(), expected, atol=1e-6)
    assert model.similarity(a[0], torch.as_tensor(b)).shape == (1, 2)
    with pytest.raises(GraphDocError, match=r"similarity needs \[n, d\] and \[m, d\] embeddings; got \[3, 32\] "
                                            r"and \[1, 5\]"):
        model.similarity(a, np.ones(5))
    # (texts were torch's "too many dimensions 'str'", an object array its "can't convert np.ndarray of type ...")
    for texts, shown in [(["a text"], "a list of str"), (np.array([[1.0, None]]), "an array of object")]:
        message = ("similarity takes embeddings, an array or tensor of numbers as encode returns them (texts: encode "
                   f"them first); got {shown}")
        with pytest.raises(GraphDocError, match=f"^{re.escape(message)}$"):
            model.similarity(texts, b)


def test_the_package_lists_its_classes_and_errors() -> None:
    names = dir(graphdoc)
    assert {"GraphDocEncoder", "FlatEncoder", "load_model", "InputError", "ModelLoadError"} <= set(names)
    assert issubclass(graphdoc.IndexMismatchError, graphdoc.GraphDocError)
    assert "GraphDocEncoder" in graphdoc.__doc__
    assert FlatModelConfig  # the flat backbone's config class stays importable where the docs say


def test_passages_past_the_cap_are_not_tokenized_and_the_kept_ones_are_unchanged(tiny_bert: Path) -> None:
    model = graphdoc.load_model(str(tiny_bert), config=ModelConfig(chunker=ChunkerConfig(max_words=30)))
    # 30-word passages of long words: over the tiny encoder's 64 tokens, so fitting splits them
    text = " ".join(f"Supercalifragilistic{i} antidisestablishment{i}." for i in range(2000))
    doc = Document("d", text, title="A title")
    chunked = model.chunker(doc)
    tokenized = []
    tokenize = model.passage_encoder.tokenize
    model.passage_encoder.tokenize = lambda texts, truncate=False: tokenized.extend(texts) or tokenize(texts, truncate)
    whole = model.prepare(doc, max_passages=10_000)
    assert len(whole.passages) > len(chunked)  # fitting did split
    whole_inputs, before = len(tokenized), model.chunker.counts()
    capped = model.prepare(doc, max_passages=5)
    assert capped.passages == whole.passages[:5] and capped.token_ids == whole.token_ids[:5]
    assert len(tokenized) - whole_inputs < whole_inputs / 2  # the first 5 chunked passages, not all of them
    from_first_five = sum(p.end <= chunked[4].end for p in whole.passages)
    cut = [after - b for after, b in zip(model.chunker.counts(), before)]
    # the chunked passages past the cap, and the pieces of the first five past it: dropped before they were split
    # further, each counts once however many passages it would have made
    assert from_first_five > 5 and cut[0] == 1
    assert (len(chunked) - 5) + 1 <= cut[1] <= (len(chunked) - 5) + (from_first_five - 5)


def test_a_title_only_document_is_its_title_in_every_title_mode(tiny_bert: Path) -> None:
    for mode in ("first", "all", "none"):
        model = graphdoc.load_model(str(tiny_bert), config=ModelConfig(chunker=ChunkerConfig(title=mode)))
        assert np.allclose(model.encode({"title": "Graph attention", "text": ""}),
                           model.encode_queries("Graph attention"), atol=1e-6), mode


def test_index_warns_when_the_passage_cap_cuts_a_document(tiny_bert: Path, tmp_path: Path, caplog) -> None:
    from graphdoc.retrieval import build_index

    model = graphdoc.load_model(str(tiny_bert), config=ModelConfig(chunker=ChunkerConfig(max_words=8,
                                                                                         max_passages=2)))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"_id": "long", "text": " ".join(["One two three four five six seven."] * 5)})
                      + "\n" + json.dumps({"_id": "short", "text": "Short text."}) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        build_index(model, str(corpus), tmp_path / "idx")
    assert [r.getMessage() for r in caplog.records] == [
        "1 document(s) had more than 2 passages: their first 2 were embedded and 3 passages left out "
        "(--max-passages N sets the cap, 0 for none; or chunker.max_passages, null for none)"]


@pytest.mark.parametrize("backbone", ["graph", "flat"])
def test_overlapping_inference_calls_run_in_eval_mode_and_give_back_train_mode(tiny_bert: Path, backbone: str) -> None:
    """Two threads encoding with one model in train mode overlap as the generators below do: A enters, B
    enters, A leaves, B runs on. B must still run without dropout, and the model ends in train mode."""
    cls = GraphDocEncoder if backbone == "graph" else graphdoc.FlatEncoder
    model = cls.from_pretrained(str(tiny_bert), device="cpu")
    docs = [f"Sentence number {i} is here. " * (3 + 5 * i) for i in range(4)]
    reference = torch.cat([out.document_embeddings for out in model.iter_forward(docs, batch_size=1)])
    model.train()
    a, b = model.iter_forward(docs, batch_size=1), model.iter_forward(docs, batch_size=1)
    next(a)
    first_b = next(b).document_embeddings
    list(a)
    rest_b = [out.document_embeddings for out in b]
    torch.testing.assert_close(torch.cat([first_b, *rest_b]), reference, rtol=0, atol=0)
    assert model.training
    assert model.passage_encoder.training
    # the model switched to train mode while a call runs: a call starting then still runs in eval mode
    a = model.iter_forward(docs, batch_size=1)
    next(a)
    model.train()
    torch.testing.assert_close(torch.cat([out.document_embeddings for out in model.iter_forward(docs, batch_size=1)]),
                               reference, rtol=0, atol=0)
    list(a)
    assert model.training
