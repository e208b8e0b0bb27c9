"""Checkpoints that are not plain encoders: a decoder-only model (its first token sees nothing after it, so
CLS pooling gave every text one vector), a sentence-transformers model asking for lowercased text
(``do_lower_case``, ignored before), and an older sentence-transformers folder (``0_Transformer/``)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError, ModelLoadError

TEXTS = ["graph attention reads documents", "the quick brown fox", "Long documents are split into passages"]


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory) -> Path:
    from conftest import _tiny_tokenizer
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("gpt2")
    tokenizer = _tiny_tokenizer("roberta")  # adds <s> first: the token CLS pooling would take
    GPT2Model(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2, n_positions=64)).save_pretrained(
        folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_decoder_only_model_is_pooled_by_its_last_token_with_a_warning(tiny_gpt2: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        model = GraphDocEncoder.from_pretrained(str(tiny_gpt2), device="cpu")
    assert model.passage_encoder.config.pooling == "lasttoken"
    assert [r.getMessage() for r in caplog.records] == [
        f"{tiny_gpt2} is a decoder-only model (gpt2), not an encoder: its passages are pooled by their last token "
        "(passage_encoder.pooling sets another)"]
    vectors = model.encode_queries(TEXTS)
    assert np.abs(vectors - vectors[0]).max() > 1e-3  # before: cls pooling, every vector the same (to 5e-7)


def test_cls_pooling_on_a_decoder_only_model_is_refused(tiny_gpt2: Path) -> None:
    from graphdoc.config import ModelConfig

    config = ModelConfig.from_dict({"passage_encoder": {"model_name_or_path": str(tiny_gpt2), "pooling": "cls"}})
    with pytest.raises(GraphDocError) as info:
        GraphDocEncoder.from_pretrained(str(tiny_gpt2), config=config, device="cpu")
    assert str(info.value) == (f"{tiny_gpt2} is a decoder-only model (gpt2), whose first token sees no other: cls "
                               "pooling gives every passage the same vector; set passage_encoder.pooling to lasttoken "
                               "or mean")


def test_encoders_are_not_taken_for_decoders() -> None:
    from transformers import AutoConfig

    from graphdoc.models.passage_encoder import is_causal

    for kind in ("bert", "roberta", "xlm-roberta", "electra", "distilbert", "mpnet", "deberta-v2", "t5", "xlnet"):
        assert not is_causal(AutoConfig.for_model(kind)), kind
    for kind in ("gpt2", "llama", "qwen2"):
        assert is_causal(AutoConfig.for_model(kind)), kind


def _sentence_transformers_folder(tiny_bert: Path, folder: Path, lower: bool) -> Path:
    """tiny_bert with a cased tokenizer, mean pooling, and ``do_lower_case`` as given."""
    shutil.copytree(tiny_bert, folder)
    tokenizer_file = folder / "tokenizer.json"
    spec = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    spec["normalizer"]["lowercase"] = False  # BertNormalizer: a cased tokenizer
    tokenizer_file.write_text(json.dumps(spec), encoding="utf-8")
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                  "pooling_mode_mean_tokens": True}))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64, "do_lower_case": lower}))
    return folder


def test_do_lower_case_lowercases_the_text_as_sentence_transformers_does(tiny_bert: Path, tmp_path: Path) -> None:
    """(stop 32: sentence_bert_config.json's do_lower_case was ignored: 'Graph' was [UNK] to the cased tokenizer)"""
    cased = GraphDocEncoder.from_pretrained(str(_sentence_transformers_folder(tiny_bert, tmp_path / "c", False)))
    lower = GraphDocEncoder.from_pretrained(str(_sentence_transformers_folder(tiny_bert, tmp_path / "l", True)))
    texts = ["graph fox", "Graph Fox", "GRAPH FOX"]
    assert not np.allclose(cased.encode_queries(texts)[0], cased.encode_queries(texts)[1])
    vectors = lower.encode_queries(texts)
    np.testing.assert_array_equal(vectors[1], vectors[0])
    np.testing.assert_array_equal(vectors[2], vectors[0])
    np.testing.assert_array_equal(vectors[0], cased.encode_queries(texts)[0])  # lowercase text: as it was
    lower.save_pretrained(tmp_path / "saved")  # the tokenizer saved lowercases too
    np.testing.assert_array_equal(GraphDocEncoder.from_pretrained(tmp_path / "saved").encode_queries(texts), vectors)


def test_a_sentence_transformers_folder_of_the_old_layout_says_so(tiny_bert: Path, tmp_path: Path) -> None:
    folder = tmp_path / "old"
    shutil.copytree(tiny_bert, folder / "0_Transformer")
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"}]))
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(str(folder))
    assert str(info.value) == (f"no model in {folder} (no config.json); its modules.json puts the transformer in "
                               "0_Transformer/, as older sentence-transformers saved models: load it with "
                               "SentenceTransformer and save it again to have the current layout")
