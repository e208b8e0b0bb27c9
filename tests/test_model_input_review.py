"""Bad model input is one clear error line: titles too long for the encoder, out-of-range settings, batch
sizes, broken model folders, unavailable devices and empty documents to compare."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from graphdoc.cli import main
from graphdoc.config import ModelConfig, PassageEncoderConfig
from graphdoc.device import resolve_device
from graphdoc.documents import Document
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError, InputError, ModelLoadError
from graphdoc.explain import compare_documents
from graphdoc.flat_encoder import FlatEncoder
from graphdoc.models.passage_encoder import PassageEncoder, position_limit, resolve_settings

TEXT = "This is a normal sentence about foxes. " * 30
CJK_TITLE = "汉字" * 200  # no spaces: the word cap leaves it whole; 400 tokens for tiny_bert ([UNK] each)


def load(path: Path, backbone: type = GraphDocEncoder, **sections) -> GraphDocEncoder:
    config_class = ModelConfig if backbone is GraphDocEncoder else backbone.config_class
    return backbone.from_pretrained(str(path), config=config_class.from_dict(sections), device="cpu")


def error_line(capsys, command: str) -> str:
    """The whole of stderr, which must be exactly one ``graphdoc COMMAND: error: ...`` line (no traceback)."""
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"graphdoc {command}: error: ")
    return lines[0]


@pytest.fixture
def cli(restore_cli_state, tmp_path, monkeypatch, capsys):
    """Run ``graphdoc ARGS`` in ``tmp_path``; it must fail with one error line, which is returned."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> str:
        capsys.readouterr()  # what came before, e.g. progress bars of models loaded in the test
        assert main(["-q", *args]) == 1
        return error_line(capsys, args[0])
    return run


@pytest.fixture(scope="module")
def saved_model(tiny_bert, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("saved") / "model"
    GraphDocEncoder.from_pretrained(str(tiny_bert), device="cpu").save_pretrained(folder)
    return folder


def copy_of(folder: Path, tmp_path: Path, name: str = "copy") -> Path:
    return Path(shutil.copytree(folder, tmp_path / name))


# ----------------------------------------------------------------- a title longer than the token limit
def test_a_title_without_spaces_is_cut_to_half_the_token_limit(tiny_bert: Path) -> None:
    model = load(tiny_bert)
    assert model.passage_encoder.max_seq_length == 64
    assert model.title_input(CJK_TITLE) == "汉字" * 16  # 32 tokens
    assert model.title_input("A short title") == "A short title"
    assert model.title_input(" ".join(["a"] * 40)) == " ".join(["a"] * 32)  # the word cap still holds
    per_word = len(model.passage_encoder.tokenize(["okapi"])[0]) - 2  # an unknown word: several pieces
    assert per_word > 1
    assert model.title_input(" ".join(["okapi"] * 30)) == " ".join(["okapi"] * (32 // per_word))


class CharTokenizer:
    """One token a character and no offsets, as a Python (not Rust) tokenizer: transformers 4 refuses to
    give offsets, transformers 5 leaves them out."""

    pad_token_id = 0

    def __init__(self, refuse_offsets: bool) -> None:
        self.refuse_offsets = refuse_offsets

    def __call__(self, text: str, add_special_tokens: bool = True, verbose: bool = True, **kwargs) -> dict:
        if kwargs.get("return_offsets_mapping") and self.refuse_offsets:
            raise NotImplementedError("return_offset_mapping is not available when using Python tokenizers")
        return {"input_ids": [ord(c) for c in text]}


@pytest.mark.parametrize("refuse_offsets", [True, False])
@pytest.mark.parametrize("text, max_tokens, expected", [
    ("abcdefgh", 3, "abc"),  # no spaces: cut between tokens
    ("ab cd efgh", 8, "ab cd"),  # never inside a word after the first
    ("abcdef gh", 3, "abc"),
    ("ab cd", 10, "ab cd"),
])
def test_a_tokenizer_without_offsets_clips_too(text: str, max_tokens: int, expected: str, refuse_offsets) -> None:
    encoder = PassageEncoder(torch.nn.Linear(1, 1), CharTokenizer(refuse_offsets), PassageEncoderConfig())
    assert encoder.clip(text, max_tokens) == expected


@pytest.mark.parametrize("mode", ["first", "all"])
def test_a_long_title_leaves_the_passages_their_size(tiny_bert: Path, mode: str) -> None:
    model = load(tiny_bert, chunker={"title": mode})
    prepared = model.prepare(Document("d", TEXT, title=CJK_TITLE))
    assert all(p.text.endswith("foxes.") for p in prepared.passages)  # whole sentences, not shredded characters
    assert all(len(ids) <= 64 for ids in prepared.token_ids)
    inputs = [model.passage_input(prepared.document, p) for p in prepared.passages]
    assert prepared.token_ids == model.passage_encoder.tokenize(inputs)
    titled = inputs if mode == "all" else inputs[:1]
    assert all(text.startswith("汉字" * 16 + " ") for text in titled)
    if mode == "first":  # only the first passage is shorter than without a title
        untitled = model.prepare(Document("d", TEXT)).passages
        assert [p.text for p in prepared.passages[-len(untitled) + 1:]] == [p.text for p in untitled[1:]]


def test_a_flat_model_cuts_a_long_title_too(tiny_bert: Path) -> None:
    model = load(tiny_bert, FlatEncoder)
    document = Document("d", TEXT, title=CJK_TITLE)
    assert model.first_input(document).startswith("汉字" * 16 + " This is a normal sentence")
    assert all(p.text.endswith("foxes.") for p in model.prepare(document).passages)  # whole sentences


# ----------------------------------------------------------------- settings out of range
SEQ_MIN = "passage_encoder.max_seq_length must be at least 8 (tokens, special ones included) or null; got "


@pytest.mark.parametrize("data, expected", [
    ({"graph": {"dropout": 2.0}}, "graph.dropout must be at least 0 and below 1; got 2.0"),
    ({"graph": {"dropout": -0.1}}, "graph.dropout must be at least 0 and below 1; got -0.1"),
    ({"graph": {"attention_dropout": 1}}, "graph.attention_dropout must be at least 0 and below 1; got 1.0"),
    ({"passage_encoder": {"projection_dim": -4}}, "passage_encoder.projection_dim must be at least 1 or null; got -4"),
    ({"passage_encoder": {"projection_dim": 0}}, "passage_encoder.projection_dim must be at least 1 or null; got 0"),
    ({"passage_encoder": {"max_seq_length": -3}}, SEQ_MIN + "-3"),
    ({"passage_encoder": {"max_seq_length": 0}}, SEQ_MIN + "0"),
    ({"passage_encoder": {"max_seq_length": 4}}, SEQ_MIN + "4"),  # would cut text into characters
])
def test_out_of_range_settings_are_one_line_errors(data: dict, expected: str) -> None:
    with pytest.raises(GraphDocError) as info:
        ModelConfig.from_dict(data)
    assert str(info.value) == expected


HEADS_3 = ("graph.heads must divide the node size 32 (the encoder's hidden size): one of 1, 2, 4, 8, 16, 32; "
           "got 3")


def test_heads_must_divide_the_node_size(tiny_bert: Path) -> None:
    with pytest.raises(GraphDocError) as info:
        load(tiny_bert, graph={"heads": 3})
    assert str(info.value) == HEADS_3
    with pytest.raises(GraphDocError) as info:
        load(tiny_bert, graph={"heads": 4}, passage_encoder={"projection_dim": 6})
    assert str(info.value) == ("graph.heads must divide the node size 6 (passage_encoder.projection_dim): "
                               "one of 1, 2, 3, 6; got 4")
    assert load(tiny_bert, graph={"heads": 3}, passage_encoder={"projection_dim": 6}).dimension == 6


def test_heads_of_a_saved_model_are_checked(saved_model: Path, tmp_path: Path, cli) -> None:
    folder = copy_of(saved_model, tmp_path)
    payload = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    payload["model"]["graph"]["heads"] = 3
    (folder / "config.json").write_text(json.dumps(payload), encoding="utf-8")
    with pytest.raises(GraphDocError) as info:
        GraphDocEncoder.from_pretrained(folder, device="cpu")
    assert str(info.value) == f"{folder / 'config.json'}: {HEADS_3}"  # the file edited is named
    (tmp_path / "c.jsonl").write_text('{"_id": "a", "text": "x"}\n', encoding="utf-8")
    assert cli("embed", "--corpus", "c.jsonl", "--output", "e.npy", "--model", str(folder)) == \
        f"graphdoc embed: error: {folder / 'config.json'}: {HEADS_3}"


def test_max_seq_length_is_checked_against_the_positions(tiny_bert: Path, tiny_roberta: Path, cli) -> None:
    with pytest.raises(GraphDocError) as info:
        load(tiny_bert, passage_encoder={"max_seq_length": 100_000})
    assert str(info.value) == ("passage_encoder.max_seq_length must be at most 64, the token positions of "
                               f"{tiny_bert}; got 100000")
    # RoBERTa's 66 position rows hold 64 tokens: positions start after the padding index
    with pytest.raises(GraphDocError, match="must be at most 64, the token positions of"):
        load(tiny_roberta, passage_encoder={"max_seq_length": 65})
    model = load(tiny_roberta, passage_encoder={"max_seq_length": 64})
    assert model.encode("word " * 500).shape == (model.dimension,)  # the whole limit is usable
    assert load(tiny_bert, passage_encoder={"max_seq_length": 8}).passage_encoder.max_seq_length == 8
    Path("big.yaml").write_text("passage_encoder: {max_seq_length: 100000}\n", encoding="utf-8")
    Path("c.jsonl").write_text('{"_id": "a", "text": "x"}\n', encoding="utf-8")
    assert cli("embed", "--corpus", "c.jsonl", "--output", "e.npy", "--model", str(tiny_bert), "--config",
               "big.yaml").endswith("passage_encoder.max_seq_length must be at most 64, the token positions of "
                                    f"{tiny_bert}; got 100000")


def test_the_default_length_never_exceeds_the_positions(tiny_roberta: Path) -> None:
    from transformers import AutoModel

    encoder = AutoModel.from_pretrained(tiny_roberta)
    assert position_limit(encoder) == 64

    class NoLimit:  # a tokenizer that states no length: the config's 66 position rows would be taken as is
        model_max_length = int(1e30)

    resolved = resolve_settings(str(tiny_roberta), PassageEncoderConfig(), NoLimit(), encoder.config, 64)
    assert resolved.max_seq_length == 64


# ----------------------------------------------------------------- batch sizes of the Python API
@pytest.mark.parametrize("backbone", [GraphDocEncoder, FlatEncoder])
@pytest.mark.parametrize("batch_size, expected", [
    (0, "batch_size must be at least 1; got 0"),
    (-1, "batch_size must be at least 1; got -1"),
    (2.5, "batch_size must be an integer; got 2.5"),
])
def test_batch_size_is_checked_by_every_encode_method(tiny_bert, backbone, batch_size, expected) -> None:
    model = load(tiny_bert, backbone)
    calls = [lambda: model.encode(["a", "b"], batch_size=batch_size),
             lambda: model.encode_queries(["q1", "q2"], batch_size=batch_size),
             lambda: model.encode_corpus([{"text": "a"}], batch_size=batch_size),
             lambda: next(iter(model.iter_forward(["a"], batch_size=batch_size)))]
    for call in calls:
        with pytest.raises(GraphDocError) as info:
            call()
        assert str(info.value) == expected
        assert isinstance(info.value, TypeError) == ("integer" in expected)  # a wrong type is a TypeError too


# ----------------------------------------------------------------- broken model folders
def test_broken_sentence_transformers_files_are_named(tiny_bert: Path, tmp_path: Path) -> None:
    folder = copy_of(tiny_bert, tmp_path)
    modules = folder / "modules.json"
    modules.write_text('[{"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}', encoding="utf-8")
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(folder, device="cpu")
    assert str(info.value) == f"{modules}: invalid JSON (Expecting ',' delimiter at line 1)"
    modules.write_text('[{"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}]', encoding="utf-8")
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(folder, device="cpu")
    assert str(info.value) == f"{folder / '1_Pooling' / 'config.json'} is missing (named in {modules})"
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}', encoding="utf-8")
    assert GraphDocEncoder.from_pretrained(folder, device="cpu").passage_encoder.pooling == "mean"
    modules.write_text('{"type": "Pooling"}', encoding="utf-8")
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(folder, device="cpu")
    assert str(info.value) == f"{modules}: expected a JSON array"


def test_a_truncated_weights_file_is_one_line(saved_model: Path, tmp_path: Path) -> None:
    folder = copy_of(saved_model, tmp_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(folder, device="cpu")
    assert str(info.value).startswith(f"cannot read {weights}: ")
    assert "\n" not in str(info.value)


def test_damaged_passage_encoder_weights_are_one_line(saved_model: Path, tmp_path: Path) -> None:
    folder = copy_of(saved_model, tmp_path)
    weights = folder / "passage_encoder" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(folder, device="cpu")
    assert str(info.value).startswith(f"cannot load local folder '{folder / 'passage_encoder'}': Error while "
                                      "deserializing header")
    assert "\n" not in str(info.value)


def test_what_is_not_a_model_folder_says_why(saved_model: Path, tmp_path: Path, cli) -> None:
    Path("corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n', encoding="utf-8")
    Path("data").mkdir()
    embed = ("embed", "--corpus", "corpus.jsonl", "--output", "e.npy", "--model")
    assert cli(*embed, "corpus.jsonl") == "graphdoc embed: error: corpus.jsonl is a file, not a model folder"
    assert cli(*embed, "data") == "graphdoc embed: error: no model in data (no config.json)"
    run = Path("run")  # a pretraining run's folder: its model is in run/model
    run.mkdir()
    shutil.copytree(saved_model, run / "model")
    assert cli(*embed, "run") == "graphdoc embed: error: no model in run (no config.json); did you mean run/model?"
    tuned = Path("tuned")  # a classification fine-tune's folder: its encoder is in tuned/model/encoder
    shutil.copytree(saved_model, tuned / "model" / "encoder")
    assert cli(*embed, "tuned") == ("graphdoc embed: error: no model in tuned (no config.json); did you mean "
                                    "tuned/model/encoder?")
    folder = copy_of(saved_model, tmp_path, "s_npe")
    shutil.rmtree(folder / "passage_encoder")
    assert cli(*embed, "s_npe") == ("graphdoc embed: error: s_npe is a saved graphdoc model without its "
                                    "passage_encoder/ folder (copy the whole model folder)")
    with pytest.raises(ModelLoadError, match="is a file, not a model folder"):
        GraphDocEncoder.from_pretrained("corpus.jsonl")


# ----------------------------------------------------------------- devices
@pytest.mark.parametrize("device, expected", [
    ("meta", "device 'meta' is not supported; use cpu, cuda, cuda:N or mps"),
    (torch.device("meta"), "device 'meta' is not supported; use cpu, cuda, cuda:N or mps"),
    ("tpu0", "unknown device 'tpu0'; use cpu, cuda, cuda:N or mps"),
])
def test_unsupported_devices_are_one_line_errors(device, expected) -> None:
    with pytest.raises(GraphDocError) as info:
        resolve_device(device)
    assert str(info.value) == expected


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_mps_without_mps_is_one_line(tiny_bert: Path, cli) -> None:
    with pytest.raises(GraphDocError) as info:
        resolve_device("mps")
    assert str(info.value) == "device 'mps' requested but MPS is not available on this machine"
    Path("c.jsonl").write_text('{"_id": "a", "text": "x"}\n', encoding="utf-8")
    assert cli("embed", "--corpus", "c.jsonl", "--output", "e.npy", "--model", str(tiny_bert), "--device",
               "mps") == "graphdoc embed: error: device 'mps' requested but MPS is not available on this machine"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_device_beyond_the_count_is_one_line() -> None:
    count = torch.cuda.device_count()
    with pytest.raises(GraphDocError) as info:
        resolve_device(f"cuda:{count}")
    assert str(info.value) == (f"device 'cuda:{count}' requested but this machine has {count} CUDA device(s) "
                               f"(cuda:0 to cuda:{count - 1})")
    assert resolve_device(f"cuda:{count - 1}") == torch.device(f"cuda:{count - 1}")


# ----------------------------------------------------------------- comparing an empty document
def test_compare_refuses_an_empty_document(tiny_bert: Path) -> None:
    model = load(tiny_bert)
    for empty in ("", "   \n\n", {"_id": "e", "title": "Only a title", "text": " "}):
        with pytest.raises(InputError) as info:
            compare_documents(model, "Some text about foxes.", empty)
        expected_id = "e" if isinstance(empty, dict) else "1"
        assert str(info.value) == f"document {expected_id!r} has no text"


def test_compare_cli_names_the_empty_file_before_loading_a_model(cli) -> None:
    Path("empty.md").write_text("", encoding="utf-8")
    Path("ws.md").write_text("   \n\n", encoding="utf-8")
    # the model does not exist: the empty file is found first
    assert cli("compare", "ws.md", "empty.md", "--json", "--model", "./no-model") == \
        "graphdoc compare: error: ws.md: document has no text"
    Path("a.md").write_text("# A\n\nSome text about foxes.\n", encoding="utf-8")
    assert cli("compare", "a.md", "empty.md", "--model", "./no-model") == \
        "graphdoc compare: error: empty.md: document has no text"


@pytest.mark.parametrize("queries, message", [
    (["fine", None], "query 1 (counting from 0) is of type NoneType, not str: None"),
    ([5], "query 0 (counting from 0) is of type int, not str: 5"),
    (["q\ud800"], "query 0 (counting from 0) is not valid Unicode (lone surrogate \\ud800)"),
    ({"q1": "fine", "q2": None}, "query 'q2' is of type NoneType, not str: None"),
])
def test_encode_queries_checks_its_input(tiny_bert, queries, message):
    model = GraphDocEncoder.from_pretrained(tiny_bert, device="cpu")
    with pytest.raises(GraphDocError) as info:
        model.encode_queries(queries)
    assert str(info.value) == message
    # a query of the wrong type is a TypeError, as a document of the wrong type is in encode()
    assert isinstance(info.value, TypeError) == ("of type" in message)


@pytest.mark.parametrize("cls", ["GraphDocEncoder", "FlatEncoder"])
def test_a_model_constructed_from_a_name_points_to_from_pretrained(cls):
    import graphdoc

    with pytest.raises(TypeError, match=rf"^{cls} is built on a graphdoc PassageEncoder, got str; to load "
                                        rf"'all-MiniLM-L6-v2' use {cls}.from_pretrained\('all-MiniLM-L6-v2'\)$"):
        getattr(graphdoc, cls)("all-MiniLM-L6-v2")
    with pytest.raises(TypeError, match=rf"^{cls} is built on a graphdoc PassageEncoder, got NoneType$"):
        getattr(graphdoc, cls)(None)


def test_encode_refuses_a_0_d_array(tiny_bert):
    model = GraphDocEncoder.from_pretrained(tiny_bert, device="cpu")
    with pytest.raises(TypeError, match="^documents must be a str, a dict, a Document or an iterable of them; "
                                        "got a 0-d array$"):
        model.encode(np.array("text"))
    assert model.encode(np.array(["text", "more"])).shape == (2, model.dimension)


@pytest.mark.parametrize("value", ['"abc"', "[1]", "3.5", "0"])
def test_a_bad_max_seq_length_in_sentence_bert_config_is_one_line(tiny_bert, tmp_path, value):
    folder = Path(shutil.copytree(tiny_bert, tmp_path / "st"))
    (folder / "modules.json").write_text(
        '[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]', encoding="utf-8")
    (folder / "sentence_bert_config.json").write_text(f'{{"max_seq_length": {value}}}', encoding="utf-8")
    with pytest.raises(ModelLoadError) as info:
        GraphDocEncoder.from_pretrained(folder, device="cpu")
    assert str(info.value) == f"{folder / 'sentence_bert_config.json'}: max_seq_length must be a positive integer; " \
                              f"got {json.loads(value)!r}"
