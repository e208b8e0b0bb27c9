"""Model folders that loaded wrongly or crashed: pickle-only weights (refused, not unpickled), a folder without
tokenizer files (transformers made an empty tokenizer: every word [UNK]), a tokenizer bigger than the model's
embedding table, a config.json that is not an object, graph weights of another shape than the config says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError, ModelLoadError


def copy_of(folder: Path, tmp_path: Path, name: str = "copy") -> Path:
    return Path(shutil.copytree(folder, tmp_path / name))


def test_weights_only_as_pickle_are_refused_not_unpickled(tiny_bert: Path, tmp_path: Path) -> None:
    folder = copy_of(tiny_bert, tmp_path)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(str(folder), device="cpu")
    assert str(info.value) == (f"{folder} holds its weights only as pickle (pytorch_model.bin), which graphdoc does "
                               "not load: save them as safetensors (a model's save_pretrained writes "
                               "model.safetensors)")


def test_a_saved_model_whose_encoder_weights_are_pickle_is_refused(tiny_bert: Path, tmp_path: Path) -> None:
    saved = tmp_path / "saved"
    GraphDocEncoder.from_pretrained(str(tiny_bert), device="cpu").save_pretrained(saved)
    encoder = saved / "passage_encoder"
    torch.save(load_file(encoder / "model.safetensors"), encoder / "pytorch_model.bin")
    (encoder / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match=r"holds its weights only as pickle \(pytorch_model.bin\)"):
        GraphDocEncoder.from_pretrained(saved, device="cpu")


def test_a_pickle_next_to_safetensors_is_left_alone(tiny_bert: Path, tmp_path: Path) -> None:
    folder = copy_of(tiny_bert, tmp_path)
    torch.save({"step": 1}, folder / "training_args.bin")  # as a trainer leaves one
    assert GraphDocEncoder.from_pretrained(str(folder), device="cpu").dimension == 32


def test_a_folder_without_tokenizer_files_is_refused(tiny_bert: Path, tmp_path: Path) -> None:
    folder = copy_of(tiny_bert, tmp_path)
    for file in folder.iterdir():
        if file.name not in ("config.json", "model.safetensors"):
            file.unlink()
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(str(folder), device="cpu")
    assert str(info.value).startswith(f"{folder}: its tokenizer knows ")
    assert str(info.value).endswith(": its tokenizer files are missing or are not the model's")


def test_a_tokenizer_past_the_embedding_table_is_one_error_line(tiny_bert: Path, tmp_path: Path) -> None:
    folder = copy_of(tiny_bert, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    rows = config["vocab_size"]
    state = load_file(folder / "model.safetensors")
    from safetensors.torch import save_file

    small = 100  # more than a tenth of the tokenizer: loads; most words' ids lie past it
    state["embeddings.word_embeddings.weight"] = state["embeddings.word_embeddings.weight"][:small].contiguous()
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": small}))
    assert small * 10 >= rows
    model = GraphDocEncoder.from_pretrained(str(folder), device="cpu")
    with pytest.raises(GraphDocError, match=r"^the tokenizer gave token id \d+, past the 100 rows of the encoder's "
                                            r"token embeddings: the tokenizer is not the model's$"):
        model.encode(["graph attention networks read long documents"])


@pytest.mark.parametrize("text", ["[1, 2]", "{not json", '["graphdoc_version"]', '"graphdoc_version"'])
def test_a_config_json_that_is_not_an_object_is_one_error_line(tiny_bert: Path, tmp_path: Path, text: str) -> None:
    """(A list or string holding "graphdoc_version" was taken for a saved graphdoc model: AttributeError.)"""
    import graphdoc

    folder = copy_of(tiny_bert, tmp_path)
    (folder / "config.json").write_text(text)
    for load in (lambda: GraphDocEncoder.from_pretrained(str(folder), device="cpu"),
                 lambda: graphdoc.load_model(str(folder), device="cpu")):
        with pytest.raises(ModelLoadError, match=f"^cannot load local folder {str(folder)!r}: "):
            load()


def test_graph_weights_of_another_shape_are_one_error_line(tiny_bert: Path, tmp_path: Path) -> None:
    saved = tmp_path / "saved"
    GraphDocEncoder.from_pretrained(str(tiny_bert), device="cpu").save_pretrained(saved)
    payload = json.loads((saved / "config.json").read_text())
    payload["model"]["graph"]["heads"] = 4
    (saved / "config.json").write_text(json.dumps(payload))
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(saved, device="cpu")
    assert str(info.value).startswith(f"{saved / 'model.safetensors'} does not match its config.json: size mismatch "
                                      "for graph.")
    assert "\n" not in str(info.value)



@pytest.mark.parametrize(("section", "key", "value", "error"), [
    ("graph", "bogus", 1, "unknown config key graph.bogus; valid keys: graph.graph_type, graph.num_layers, "
                          "graph.heads, graph.dropout, graph.attention_dropout"),
    ("chunker", "max_passages", -3, "chunker.max_passages must be at least 1 or null; got -3"),
])
def test_a_bad_setting_in_a_saved_models_config_json_names_the_file(tiny_bert: Path, tmp_path: Path, section: str,
                                                                     key: str, value, error: str) -> None:
    """(the error gave the setting alone, as if the code had set it: a --model folder's edited file went unnamed;
    graph.heads: test_model_input_review)"""
    saved = tmp_path / "saved"
    GraphDocEncoder.from_pretrained(str(tiny_bert), device="cpu").save_pretrained(saved)
    payload = json.loads((saved / "config.json").read_text())
    payload["model"][section][key] = value
    (saved / "config.json").write_text(json.dumps(payload))
    with pytest.raises(GraphDocError) as info:
        GraphDocEncoder.from_pretrained(saved, device="cpu")
    assert str(info.value) == f"{saved / 'config.json'}: {error}"

def _without(folder: Path, keep) -> None:
    from safetensors.torch import save_file

    weights = load_file(folder / "model.safetensors")
    save_file({k: v for k, v in weights.items() if keep(k)}, folder / "model.safetensors", metadata={"format": "pt"})


def test_a_checkpoint_without_a_pooler_loads_the_same_model_every_time(tiny_roberta: Path, tmp_path: Path) -> None:
    """roberta-base is a masked-LM checkpoint: no pooler, which transformers initialised at random on each load,
    so the weights fingerprint changed and an index built with the model refused it at search time."""
    from graphdoc.fingerprint import weights_fingerprint

    folder = copy_of(tiny_roberta, tmp_path)
    _without(folder, lambda name: not name.startswith("pooler."))
    first, again = (GraphDocEncoder.from_pretrained(str(folder), device="cpu") for _ in range(2))
    assert weights_fingerprint(first) == weights_fingerprint(again)
    assert first.passage_encoder.model.pooler is None
    whole = GraphDocEncoder.from_pretrained(str(tiny_roberta), device="cpu")
    texts = ["graph attention networks read documents", "a second text"]
    assert torch.equal(torch.as_tensor(first.encode(texts)), torch.as_tensor(whole.encode(texts)))  # never ran
    saved = tmp_path / "saved"
    first.save_pretrained(saved)  # saved without it, loaded without it
    assert weights_fingerprint(GraphDocEncoder.from_pretrained(saved, device="cpu")) == weights_fingerprint(first)


def test_weights_missing_from_the_checkpoint_are_refused_not_made_up(tiny_bert: Path, tmp_path: Path) -> None:
    folder = copy_of(tiny_bert, tmp_path)
    _without(folder, lambda name: name != "encoder.layer.1.output.dense.weight")
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(str(folder), device="cpu")
    assert str(info.value) == (f"cannot load {str(folder)!r}: its weights file lacks 1 of the BertModel's tensors "
                               "(encoder.layer.1.output.dense.weight), which would be random on every load: the "
                               "file is damaged or is another architecture's")
    renamed = copy_of(tiny_bert, tmp_path, "renamed")
    from safetensors.torch import save_file

    save_file({f"zz.{k}": v for k, v in load_file(renamed / "model.safetensors").items()},
              renamed / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"lacks \d+ of the BertModel's tensors \(embeddings\."):
        GraphDocEncoder.from_pretrained(str(renamed), device="cpu")


def test_a_config_whose_sizes_are_not_the_weights_is_one_error(tiny_bert: Path, tmp_path: Path) -> None:
    folder = copy_of(tiny_bert, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": 48}))
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(str(folder), device="cpu")
    assert str(info.value) == (f"cannot load local folder {str(folder)!r}: its weights do not have the sizes its "
                               "config.json gives (the config or the weights file is another model's)")


@pytest.mark.parametrize("model_type", ["evilbert", "bert"])
def test_a_model_folder_with_its_own_code_is_refused_and_the_code_not_run(tiny_bert: Path, tmp_path: Path,
                                                                        monkeypatch, model_type) -> None:
    """transformers asked "Do you wish to run the custom code? [y/N]" and, answered y, imported the folder's
    Python file: a downloaded model folder ran its code."""
    folder = copy_of(tiny_bert, tmp_path)
    ran = tmp_path / "ran"
    (folder / "evil.py").write_text(f"import pathlib\npathlib.Path({str(ran)!r}).write_text('x')\n"
                                    "from transformers import BertConfig, BertModel\n"
                                    "class Cfg(BertConfig):\n    model_type = 'evilbert'\n"
                                    "class Model(BertModel):\n    config_class = Cfg\n", encoding="utf-8")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config.update(model_type=model_type, auto_map={"AutoConfig": "evil.Cfg", "AutoModel": "evil.Model"})
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("y\ny\n"))  # as a user answering the prompt
    if model_type == "bert":  # transformers' own class: the code is not needed, and not run
        GraphDocEncoder.from_pretrained(str(folder), device="cpu")
    else:
        with pytest.raises(ModelLoadError) as info:
            GraphDocEncoder.from_pretrained(str(folder), device="cpu")
        assert str(info.value) == (f"cannot load {str(folder)!r}: it needs its own Python code (auto_map in its "
                                   "config), which graphdoc does not run; use a model transformers supports itself")
    assert not ran.exists()


def test_a_config_value_of_the_wrong_type_is_one_error_line(tiny_bert: Path, tmp_path: Path) -> None:
    """transformers' own check of config.json values (StrictDataclassFieldValidationError) was a traceback."""
    folder = copy_of(tiny_bert, tmp_path)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": "32"}), encoding="utf-8")
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(str(folder), device="cpu")
    assert str(info.value) == (f"cannot load local folder {str(folder)!r}: Validation error for field 'hidden_size': "
                               "TypeError: Field 'hidden_size' expected int, got str (value: '32')")


def test_models_load_with_a_huggingface_hub_that_has_no_strict_dataclass_error() -> None:
    """(review: importing StrictDataclassError failed every model load on huggingface_hub before 0.32, which
    setup.cfg allows)"""
    import types

    from graphdoc.models.passage_encoder import _strict_dataclass_errors

    assert _strict_dataclass_errors(types.SimpleNamespace()) == ()
    error = type("StrictDataclassError", (Exception,), {})
    assert _strict_dataclass_errors(types.SimpleNamespace(StrictDataclassError=error)) == (error,)


def _poison(weights: Path, pick) -> str:
    """Set one value of the first tensor ``pick`` accepts to NaN; its name."""
    from safetensors.torch import save_file

    tensors = load_file(weights)
    name = next(k for k in sorted(tensors) if pick(k) and tensors[k].is_floating_point())
    tensors[name].view(-1)[0] = float("nan")
    save_file(tensors, weights, metadata={"format": "pt"})
    return name


def test_encoder_weights_holding_nan_are_one_error_line_not_nan_vectors(tiny_bert: Path, tmp_path: Path) -> None:
    """(stop 32: a folder whose weights held NaN loaded without a word, and every vector was NaN)"""
    folder = copy_of(tiny_bert, tmp_path)
    name = _poison(folder / "model.safetensors", lambda k: "attention" in k)
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(str(folder), device="cpu")
    shown = name.removeprefix("bert.")  # transformers names the parameters without the checkpoint's prefix
    assert str(info.value) == (f"{folder}: weight {shown} holds NaN or infinite values (a training run that diverged, "
                               "or a damaged file); its vectors would be NaN")


def test_graph_weights_holding_inf_are_one_error_line(tiny_bert: Path, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    saved = tmp_path / "saved"
    GraphDocEncoder.from_pretrained(str(tiny_bert), device="cpu").save_pretrained(saved)
    tensors = load_file(saved / "model.safetensors")
    name = sorted(k for k in tensors if tensors[k].is_floating_point())[0]
    tensors[name].view(-1)[-1] = float("-inf")
    save_file(tensors, saved / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(saved, device="cpu")
    assert str(info.value) == (f"{saved / 'model.safetensors'}: weight {name} holds NaN or infinite values (a "
                               "training run that diverged, or a damaged file); its vectors would be NaN")


def test_a_classifier_head_holding_nan_is_one_error_line(tiny_bert: Path, tmp_path: Path) -> None:
    from graphdoc.finetune.classifier import DocumentClassifier

    DocumentClassifier(GraphDocEncoder.from_pretrained(str(tiny_bert)), ["a", "b"]).save_pretrained(tmp_path / "m")
    name = _poison(tmp_path / "m" / "head.safetensors", lambda k: True)
    with pytest.raises(ModelLoadError, match=rf"^{tmp_path / 'm' / 'head.safetensors'}: weight {name} holds NaN"):
        DocumentClassifier.from_pretrained(tmp_path / "m", device="cpu")


def test_a_missing_pooler_named_with_the_base_model_prefix_is_dropped(tiny_bert: Path) -> None:
    """transformers before 4.50 named a masked-LM checkpoint's missing pooler ``bert.pooler.dense.weight``, which
    was refused as missing weights (setup.cfg allows those versions)."""
    from transformers import AutoModel

    from graphdoc.models.passage_encoder import _check_missing_weights

    model = AutoModel.from_pretrained(str(tiny_bert))
    _check_missing_weights("ckpt", model, [f"{model.base_model_prefix}.pooler.dense.weight",
                                           f"{model.base_model_prefix}.pooler.dense.bias"])
    assert model.pooler is None
    model = AutoModel.from_pretrained(str(tiny_bert))
    with pytest.raises(ModelLoadError, match=r"^cannot load 'ckpt': its weights file lacks 1 of the BertModel's "
                                             r"tensors \(encoder\.layer\.0\.output\.dense\.bias\)"):
        _check_missing_weights("ckpt", model, ["bert.encoder.layer.0.output.dense.bias"])  # not a pooler: refused
