"""sentence-transformers ``Dense`` modules: applied as sentence-transformers applies them, saved so that a
graphdoc model's passage encoder loads in sentence-transformers again, and bad folders refused in one line."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import graphdoc
from graphdoc.errors import ModelLoadError
from graphdoc.fingerprint import weights_fingerprint
from graphdoc.training.cache import encoder_identity

st = pytest.importorskip("sentence_transformers")
modules = pytest.importorskip("sentence_transformers.sentence_transformer.modules")

TEXTS = ["Graph attention networks read documents.", "A short one.", "Dense and sparse retrieval can be fused."]


def st_model(tiny_bert: Path, folder: Path, *layers, normalize: bool = True, pooling: str = "mean") -> Path:
    """A sentence-transformers model on ``tiny_bert`` with ``layers`` after its pooling, saved in ``folder``."""
    torch.manual_seed(1)
    transformer = modules.Transformer(str(tiny_bert), max_seq_length=48)
    pipeline = [transformer, modules.Pooling(32, pooling), *layers] + ([modules.Normalize()] if normalize else [])
    st.SentenceTransformer(modules=pipeline, device="cpu").save(str(folder))
    return folder


def st_vectors(folder: Path, texts: list[str] = TEXTS) -> np.ndarray:
    return st.SentenceTransformer(str(folder), device="cpu").encode(texts, convert_to_numpy=True)


def passage_vectors(model, texts: list[str] = TEXTS) -> np.ndarray:
    encoder = model.passage_encoder
    with torch.no_grad():
        return encoder.encode_ids(encoder.tokenize(texts, truncate=True)).numpy()


@pytest.fixture(scope="module")
def dense_folder(tiny_bert: Path, tmp_path_factory) -> Path:
    """Two Dense layers (32 -> 24, Tanh; 24 -> 16 without bias, Identity), then Normalize."""
    return st_model(tiny_bert, tmp_path_factory.mktemp("st") / "dense", modules.Dense(32, 24),
                    modules.Dense(24, 16, bias=False, activation_function=torch.nn.Identity()))


def test_dense_modules_are_applied_as_sentence_transformers_applies_them(dense_folder: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        model = graphdoc.load_model(str(dense_folder))
    assert not caplog.records  # nothing left unapplied
    encoder = model.passage_encoder
    assert encoder.hidden_size == model.dimension == 16 and encoder.normalize and encoder.pooling == "mean"
    assert [type(layer.activation_function).__name__ for layer in encoder.dense] == ["Tanh", "Identity"]
    np.testing.assert_allclose(passage_vectors(model), st_vectors(dense_folder), atol=1e-6)
    assert model.encode(TEXTS).shape == (3, 16)


def test_a_residual_dense_module_is_applied(tiny_bert: Path, tmp_path: Path) -> None:
    folder = st_model(tiny_bert, tmp_path / "residual", modules.Dense(32, 8, use_residual=True),
                      modules.Dense(8, 8, use_residual=True, activation_function=torch.nn.GELU()), normalize=False)
    model = graphdoc.load_model(str(folder))
    assert [layer.use_residual for layer in model.passage_encoder.dense] == [True, True]
    np.testing.assert_allclose(passage_vectors(model), st_vectors(folder), atol=1e-6)
    model.save_pretrained(tmp_path / "saved")  # saved and read back, by graphdoc and by sentence-transformers
    again = graphdoc.load_model(str(tmp_path / "saved"))
    assert [layer.use_residual for layer in again.passage_encoder.dense] == [True, True]
    np.testing.assert_array_equal(passage_vectors(again), passage_vectors(model))
    np.testing.assert_allclose(st_vectors(tmp_path / "saved" / "passage_encoder"), passage_vectors(model), atol=1e-6)


def test_a_saved_graphdoc_model_keeps_its_dense_modules_and_loads_in_sentence_transformers(
        dense_folder: Path, tmp_path: Path) -> None:
    model = graphdoc.load_model(str(dense_folder))
    model.save_pretrained(tmp_path / "saved")
    again = graphdoc.load_model(str(tmp_path / "saved"))
    assert weights_fingerprint(again.passage_encoder) == weights_fingerprint(model.passage_encoder)
    np.testing.assert_array_equal(again.encode(TEXTS), model.encode(TEXTS))
    np.testing.assert_allclose(st_vectors(tmp_path / "saved" / "passage_encoder"), passage_vectors(model), atol=1e-6)


def test_a_saved_model_without_dense_modules_loads_in_sentence_transformers(tiny_bert: Path, tmp_path: Path) -> None:
    model = graphdoc.load_model(str(tiny_bert))  # plain Hugging Face folder: CLS pooling, not normalised
    assert not any(key.startswith("dense.") for key in model.passage_encoder.state_dict())
    model.save_pretrained(tmp_path / "saved")
    folder = tmp_path / "saved" / "passage_encoder"
    assert [m["type"].rsplit(".", 1)[-1] for m in json.loads((folder / "modules.json").read_text())] == [
        "Transformer", "Pooling"]
    np.testing.assert_allclose(st_vectors(folder), passage_vectors(model), atol=1e-6)
    again = graphdoc.load_model(str(tmp_path / "saved"))
    assert encoder_identity(again.passage_encoder) == encoder_identity(model.passage_encoder)


@pytest.mark.parametrize(("layers", "normalize"), [
    ([modules.Normalize(), modules.Dense(32, 16)], False),  # after the normalisation: graphdoc normalises last
    ([modules.Dense(32, 16, module_input_name="token_embeddings")], True),  # on token vectors, not the pooled one
])
def test_a_dense_module_graphdoc_cannot_apply_is_named(tiny_bert: Path, tmp_path: Path, layers, normalize,
                                                         caplog) -> None:
    folder = st_model(tiny_bert, tmp_path / "other", *layers, normalize=normalize)
    with caplog.at_level(logging.WARNING):
        model = graphdoc.load_model(str(folder))
    assert len(model.passage_encoder.dense) == 0 and model.dimension == 32
    dense = next(m["path"] for m in json.loads((folder / "modules.json").read_text()) if "Dense" in m["type"])
    assert [r.getMessage() for r in caplog.records] == [
        f"{folder}: graphdoc does not apply its sentence-transformers module(s) Dense ({dense}); its passage "
        "vectors are the pooled and normalised transformer output"]


def dense_copy(dense_folder: Path, tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "copy"
    shutil.copytree(dense_folder, folder)
    return folder, folder / "2_Dense"


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: (d / "model.safetensors").rename(d / "pytorch_model.bin"),
     "2_Dense/pytorch_model.bin: graphdoc loads no pickled weights; re-save the model with sentence-transformers"),
    (lambda d: (d / "model.safetensors").unlink(),
     r"2_Dense has no model.safetensors \(the Dense module's weights; graphdoc loads no pickled pytorch_model.bin: "
     r"re-save"),
    (lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 12), r"cannot read .*2_Dense/model.safetensors"),
    (lambda d: (d / "config.json").unlink(), r"2_Dense/config.json is missing \(a Dense module's settings\)"),
    (lambda d: (d / "config.json").write_text("{"), r"2_Dense/config.json: cannot read it"),
    (lambda d: _edit(d, activation_function="os.system"),
     r"activation_function 'os.system' is not a torch.nn module class"),
    (lambda d: _edit(d, activation_function="torch.nn.modules.linear.Linear"),
     "activation_function torch.nn.modules.linear.Linear needs arguments"),
    (lambda d: _edit(d, out_features=0), "out_features must be a positive integer; got 0"),
    (lambda d: _edit(d, scale=2), r"unknown Dense setting\(s\) scale"),
    (lambda d: _edit(d, in_features=16, out_features=24),
     r"weights linear.bias \[24\], linear.weight \[24, 32\] do not fit .*expected linear.bias \[24\], "
     r"linear.weight \[24, 16\]"),
    (lambda d: save_file({"linear.weight": torch.zeros(24, 16), "linear.bias": torch.zeros(24)},
                         str(d / "model.safetensors")) or _edit(d, in_features=16),
     r"2_Dense/config.json: in_features 16 is not the transformer's hidden size \(32\)"),
])
def test_a_broken_dense_module_is_one_error_line(dense_folder: Path, tmp_path: Path, change, message) -> None:
    folder, dense = dense_copy(dense_folder, tmp_path)
    change(dense)
    with pytest.raises(ModelLoadError, match=message):
        graphdoc.load_model(str(folder))


@pytest.mark.parametrize("kind", ["Pooling", "Dense"])
@pytest.mark.parametrize("outside", ["../../elsewhere", "/tmp/elsewhere"])
def test_a_module_path_leaving_the_model_folder_is_refused(dense_folder: Path, tmp_path: Path, kind, outside):
    """modules.json paths were followed anywhere: a downloaded folder could have settings read from outside."""
    folder, _ = dense_copy(dense_folder, tmp_path)
    listed = json.loads((folder / "modules.json").read_text())
    module = next(m for m in listed if m["type"].endswith(kind))
    module["path"] = outside
    (folder / "modules.json").write_text(json.dumps(listed))
    with pytest.raises(ModelLoadError) as info:
        graphdoc.load_model(str(folder))
    assert str(info.value) == (f"{folder / 'modules.json'}: the {module['type']} module's path {outside!r} leaves "
                               "the model folder")


def test_dense_modules_that_do_not_chain_are_refused(dense_folder: Path, tmp_path: Path) -> None:
    folder, _ = dense_copy(dense_folder, tmp_path)
    save_file({"linear.weight": torch.zeros(16, 20)}, str(folder / "3_Dense" / "model.safetensors"))
    _edit(folder / "3_Dense", in_features=20)
    with pytest.raises(ModelLoadError, match=r"3_Dense/config.json: in_features 20 is not the Dense module before "
                                             r"it \(24\)"):
        graphdoc.load_model(str(folder))


def _edit(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def hub_cache(tmp_path: Path, monkeypatch, repo_id: str, source: Path) -> None:
    """``source`` as the Hugging Face cache's snapshot of ``repo_id`` (offline, as tests run)."""
    import huggingface_hub.constants as constants

    repo = tmp_path / "hub" / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(source, repo / "snapshots" / ("0" * 40))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def test_a_cached_hub_model_is_pooled_as_its_sentence_transformers_files_say(dense_folder: Path, tmp_path: Path,
                                                                            monkeypatch) -> None:
    hub_cache(tmp_path, monkeypatch, "acme/tiny-st", dense_folder)
    model = graphdoc.load_model("acme/tiny-st")  # read as a local folder's would be: mean, Dense, normalised
    encoder = model.passage_encoder
    assert (encoder.pooling, encoder.normalize, encoder.max_seq_length, encoder.hidden_size) == ("mean", True, 48, 16)
    np.testing.assert_allclose(passage_vectors(model), st_vectors(dense_folder), atol=1e-6)


def test_a_cached_hub_model_without_sentence_transformers_files_pools_by_cls(tiny_bert: Path, tmp_path: Path,
                                                                             monkeypatch) -> None:
    hub_cache(tmp_path, monkeypatch, "acme/tiny-bert", tiny_bert)
    encoder = graphdoc.load_model("acme/tiny-bert").passage_encoder
    assert (encoder.pooling, encoder.normalize, len(encoder.dense)) == ("cls", False, 0)


def test_a_cached_hub_model_s_files_are_fetched_at_its_snapshot(dense_folder: Path, tmp_path: Path,
                                                                monkeypatch) -> None:
    import transformers.utils as hub

    hub_cache(tmp_path, monkeypatch, "acme/tiny-st", dense_folder)
    asked = []

    def spy(repo_id, filename, subfolder="", revision=None, **kwargs):
        asked.append((filename, subfolder, revision))
        return cached_file(repo_id, filename, subfolder=subfolder, revision=revision, **kwargs)

    cached_file = hub.cached_file
    monkeypatch.setattr(hub, "cached_file", spy)
    graphdoc.load_model("acme/tiny-st")
    st_files = [a for a in asked if a[1] or a[0] in ("modules.json", "sentence_bert_config.json",
                                                     "config_sentence_transformers.json")]
    snapshot = "0" * 40  # after modules.json, every file at the snapshot's commit: no request where it is cached
    assert st_files == [("modules.json", "", None), ("config.json", "1_Pooling", snapshot),
                        ("config.json", "2_Dense", snapshot), ("model.safetensors", "2_Dense", snapshot),
                        ("config.json", "3_Dense", snapshot), ("model.safetensors", "3_Dense", snapshot),
                        ("config.json", "4_Normalize", snapshot),
                        ("sentence_bert_config.json", "", snapshot),
                        ("config_sentence_transformers.json", "", snapshot)]


# ------------------------------------------------------------------ encoder-decoder checkpoints
@pytest.fixture(scope="module")
def tiny_t5(tiny_bert: Path, tmp_path_factory) -> Path:
    """A tiny random T5 saved whole (encoder and decoder), as GTR / sentence-T5 checkpoints' Transformer is,
    with the tiny BERT tokenizer (the architecture is what is tested)."""
    from transformers import AutoTokenizer, T5Config, T5Model

    folder = tmp_path_factory.mktemp("tiny-t5")
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    torch.manual_seed(0)
    T5Model(T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=2,
                     pad_token_id=tokenizer.pad_token_id, decoder_start_token_id=tokenizer.pad_token_id)
            ).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_t5_checkpoint_encodes_with_its_encoder_as_sentence_transformers_does(tiny_t5: Path,
                                                                                tmp_path: Path) -> None:
    folder = st_model(tiny_t5, tmp_path / "st-t5", modules.Dense(32, 16, bias=False,
                                                                 activation_function=torch.nn.Identity()))
    model = graphdoc.load_model(str(folder))
    assert type(model.passage_encoder.model).__name__ == "T5EncoderModel" and model.dimension == 16
    np.testing.assert_allclose(passage_vectors(model), st_vectors(folder), atol=1e-6)
    model.save_pretrained(tmp_path / "saved")  # the encoder alone is saved, and loads again as itself
    np.testing.assert_array_equal(graphdoc.load_model(str(tmp_path / "saved")).encode(TEXTS), model.encode(TEXTS))


def test_another_encoder_decoder_model_is_refused_in_one_line(tiny_bert: Path, tmp_path: Path) -> None:
    from transformers import BartConfig, BartModel

    torch.manual_seed(0)
    BartModel(BartConfig(vocab_size=128, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                         decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                         max_position_embeddings=64)).save_pretrained(tmp_path / "bart")
    shutil.copy(tiny_bert / "tokenizer.json", tmp_path / "bart")
    shutil.copy(tiny_bert / "tokenizer_config.json", tmp_path / "bart")
    with pytest.raises(ModelLoadError, match=r"bart is an encoder-decoder model \(bart\): use an encoder-only "
                                             r"model, or a T5-family one \(mt5, t5, umt5\), whose encoder graphdoc "
                                             r"runs alone"):
        graphdoc.load_model(str(tmp_path / "bart"))
