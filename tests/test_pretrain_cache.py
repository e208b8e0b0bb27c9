"""The frozen-encoder passage vector cache: hits and misses, keying, shards on disk."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from graphdoc.config import ModelConfig, PassageEncoderConfig
from graphdoc.encoder import GraphDocEncoder
from graphdoc.training.cache import PassageVectorCache, passage_key


@pytest.fixture(scope="module")
def encoder(tiny_bert):
    torch.set_num_threads(1)
    return GraphDocEncoder.from_pretrained(tiny_bert, device="cpu").passage_encoder


def ids_of(encoder, texts):
    return encoder.tokenize(texts)


def test_vectors_equal_the_encoder_and_count_hits(encoder, tmp_path):
    cache = PassageVectorCache(tmp_path, encoder)
    ids = ids_of(encoder, ["graph attention networks", "dense vectors", "graph attention networks"])
    vectors = cache.encode(ids)
    with torch.inference_mode():
        expected = encoder.eval().encode_ids(ids)
    assert vectors.shape == (3, encoder.hidden_size)
    torch.testing.assert_close(vectors, expected, atol=1e-5, rtol=1e-5)
    assert (cache.misses, cache.hits) == (2, 1)  # the repeated passage is encoded once
    cache.encode(ids[:2])
    assert (cache.misses, cache.hits) == (2, 3)


def test_flushed_vectors_are_read_back_without_encoding(encoder, tmp_path, monkeypatch):
    ids = ids_of(encoder, ["one passage here", "another passage there"])
    first = PassageVectorCache(tmp_path, encoder)
    vectors = first.encode(ids)
    first.flush()
    shards = list(first.folder.glob("vectors-*.json"))
    assert len(shards) == 1 and json.loads(shards[0].read_text())["keys"] == [passage_key(t) for t in ids]
    assert np.load(shards[0].with_suffix(".npy"), allow_pickle=False).dtype == np.float32

    def fail(*_):
        raise AssertionError("a cached vector was encoded again")

    monkeypatch.setattr(encoder, "encode_ids", fail)
    again = PassageVectorCache(tmp_path, encoder)
    assert len(again) == 2
    torch.testing.assert_close(again.encode(ids[::-1]), vectors.flip(0))
    assert (again.hits, again.misses) == (2, 0)


def test_shards_are_written_every_shard_size_rows(encoder, tmp_path):
    cache = PassageVectorCache(tmp_path, encoder, shard_size=2)
    cache.encode(ids_of(encoder, ["a b", "c d", "e f"]))
    assert len(list(cache.folder.glob("vectors-*.npy"))) == 1  # 3 pending >= 2: one shard
    cache.flush()
    cache.flush()  # nothing pending: no empty shard
    assert len(list(cache.folder.glob("vectors-*.json"))) == 1
    assert len(PassageVectorCache(tmp_path, encoder)) == 3


def test_an_incomplete_shard_is_ignored(encoder, tmp_path):
    cache = PassageVectorCache(tmp_path, encoder)
    np.save(cache.folder / "vectors-deadbeef.npy", np.zeros((1, encoder.hidden_size), np.float32))
    assert len(PassageVectorCache(tmp_path, encoder)) == 0


def test_keyed_by_encoder_identity_and_token_ids(tiny_bert, encoder, tmp_path):
    mean_pooled = GraphDocEncoder.from_pretrained(
        tiny_bert, config=ModelConfig(passage_encoder=PassageEncoderConfig(pooling="mean")), device="cpu")
    a = PassageVectorCache(tmp_path, encoder)
    b = PassageVectorCache(tmp_path, mean_pooled.passage_encoder)
    assert a.folder != b.folder  # other pooling: other vectors, other folder
    identity = json.loads((a.folder / "encoder.json").read_text())
    assert identity["pooling"] == "cls" and len(identity["fingerprint"]) == 64
    assert passage_key([1, 2, 3]) != passage_key([1, 2, 3, 4])
    assert passage_key([1, 2, 3]) == passage_key(np.array([1, 2, 3], dtype=np.int32))


def test_bf16_vectors_are_kept_apart_from_fp32_ones(tiny_bert, encoder, tmp_path, monkeypatch):
    from graphdoc import device as device_module

    monkeypatch.setattr(device_module, "cpu_supports_bf16", lambda: True)
    bf16 = GraphDocEncoder.from_pretrained(
        tiny_bert, config=ModelConfig(passage_encoder=PassageEncoderConfig(precision="bf16")), device="cpu")
    full, half = PassageVectorCache(tmp_path, encoder), PassageVectorCache(tmp_path, bf16.passage_encoder)
    assert full.folder != half.folder
    assert "autocast" not in json.loads((full.folder / "encoder.json").read_text())  # fp32 keys stay as they were
    assert json.loads((half.folder / "encoder.json").read_text())["autocast"] == "bfloat16"
    ids = ids_of(encoder, ["graph attention networks"])
    assert not torch.equal(full.encode(ids), half.encode(ids))


def test_a_model_read_from_another_folder_shares_the_cache(tiny_bert, encoder, tmp_path):
    import shutil

    copy = GraphDocEncoder.from_pretrained(shutil.copytree(tiny_bert, tmp_path / "copy"), device="cpu")
    first = PassageVectorCache(tmp_path / "cache", encoder)
    first.encode(ids_of(encoder, ["graph attention networks"]))
    first.flush()
    second = PassageVectorCache(tmp_path / "cache", copy.passage_encoder)
    assert second.folder == first.folder and len(second) == 1  # the same weights: not encoded again
    assert json.loads((first.folder / "encoder.json").read_text())["model"] == str(tiny_bert)  # shown, not keyed


def test_the_same_weights_under_another_architecture_setting_do_not_share_it(tiny_bert, encoder, tmp_path):
    """A copy whose config.json says another layer_norm_eps computes other vectors from the same weights."""
    import shutil

    copy = shutil.copytree(tiny_bert, tmp_path / "copy")
    config = json.loads((copy / "config.json").read_text())
    config["layer_norm_eps"] = 0.5
    (copy / "config.json").write_text(json.dumps(config))
    other = GraphDocEncoder.from_pretrained(copy, device="cpu").passage_encoder
    first = PassageVectorCache(tmp_path / "cache", encoder)
    ids = ids_of(encoder, ["graph attention networks"])
    vector = first.encode(ids)
    first.flush()
    second = PassageVectorCache(tmp_path / "cache", other)
    assert second.folder != first.folder and len(second) == 0
    with torch.inference_mode():
        expected = other.eval().encode_ids(ids)
    torch.testing.assert_close(second.encode(ids), expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(vector, expected, atol=1e-3)


def test_a_cache_keyed_by_the_model_path_is_still_read(encoder, tmp_path):
    from graphdoc.training.cache import _legacy_key, encoder_identity

    cache = PassageVectorCache(tmp_path / "cache", encoder)
    cache.encode(ids_of(encoder, ["graph attention networks"]))
    cache.flush()
    old = tmp_path / "cache" / _legacy_key(encoder_identity(encoder), encoder)
    cache.folder.rename(old)  # as a cache written before the key left the path out
    again = PassageVectorCache(tmp_path / "cache", encoder)
    assert again.folder == old and len(again) == 1
