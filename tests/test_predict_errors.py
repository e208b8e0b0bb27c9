"""``graphdoc predict`` and model loading: bad arguments, broken classifier folders and wrong model paths are
one error line (exit 1), and nothing is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from _finetune_helpers import labelled_files
from safetensors.torch import save_file

from graphdoc.cli import main

KEPT = '{"id": "earlier"}\n'


@pytest.fixture(autouse=True)
def restore_global_state(restore_cli_state):
    """``main`` configures logging and quiets transformers for the process (see conftest)."""
    yield


@pytest.fixture(scope="module")
def classifier_dir(tiny_bert, tmp_path_factory) -> Path:
    """An untrained two-label classifier on tiny_bert, saved as ``graphdoc finetune`` saves one."""
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.finetune import DocumentClassifier

    folder = tmp_path_factory.mktemp("classifier") / "model"
    DocumentClassifier(GraphDocEncoder.from_pretrained(str(tiny_bert)), ["animals", "numbers"]).save_pretrained(folder)
    return folder


@pytest.fixture
def docs(tmp_path) -> Path:
    return labelled_files(tmp_path)["dev"]


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no traceback
    return err.strip()


def predict(model, source, output, *extra: str) -> int:
    return main(["-q", "predict", "--model", str(model), "--input", str(source), "--output", str(output), *extra])


@pytest.mark.parametrize("flag, value", [("--batch-size", "-1"), ("--batch-size", "0"),
                                         ("--max-passages", "0"), ("--max-passages", "-2")])
def test_non_positive_sizes_are_refused_before_the_model_loads(flag, value, docs, tmp_path, capsys):
    # the model folder does not exist: the argument is checked first
    assert predict(tmp_path / "nomodel", docs, tmp_path / "p.jsonl", flag, value) == 1
    assert error_line(capsys) == f"graphdoc predict: error: {flag} must be a positive integer; got {value}"
    assert not (tmp_path / "p.jsonl").exists()


def test_output_folder_is_refused(docs, tmp_path, capsys):
    (tmp_path / "out").mkdir()
    assert predict(tmp_path / "nomodel", docs, tmp_path / "out") == 1
    assert error_line(capsys) == f"graphdoc predict: error: --output {tmp_path / 'out'} is a folder"
    assert list((tmp_path / "out").iterdir()) == []


def broken_copy(classifier_dir: Path, tmp_path: Path, file: str, content: bytes) -> Path:
    folder = shutil.copytree(classifier_dir, tmp_path / "broken")
    (folder / file).write_bytes(content)
    return folder


@pytest.mark.parametrize("file, content, problem", [
    ("head.safetensors", b"\xff" * 64, ("head.safetensors: unreadable safetensors file (Error while deserializing "
                                        "header: header too large)")),
    ("labels.json", b'["animals",\n', "labels.json: invalid JSON (Expecting value at line 2)"),
    ("labels.json", b'{"animals": 0}', "labels.json: not a JSON list of label strings"),
    ("labels.json", b'["a", "b", "c"]', "labels.json lists 3 labels; {dir}/head_config.json has num_classes 2"),
    ("head_config.json", b'{"in_channels": 32, "num_classes": 2, "dropout": 0.0, "max_passages": 0}',
     "head_config.json: max_passages must be a positive integer or null; got 0"),
    # (a traceback at the first batch; "labels.json lists 2 labels; ... num_classes None")
    ("head_config.json", b'{"in_channels": 32, "num_classes": 2, "dropout": 5, "max_passages": 16}',
     "head_config.json: dropout must be a number from 0 to below 1; got 5"),
    ("head_config.json", b'{"in_channels": 32, "num_classes": 2, "dropout": "x", "max_passages": 16}',
     "head_config.json: dropout must be a number from 0 to below 1; got 'x'"),
    ("head_config.json", b'[]', "head_config.json: not a JSON object"),
], ids=["garbage-weights", "invalid-json", "not-a-list", "more-labels-than-outputs", "bad-max-passages",
        "dropout-5", "dropout-string", "head-not-an-object"])
def test_broken_classifier_files_are_one_line(file, content, problem, classifier_dir, docs, tmp_path, capsys):
    folder = broken_copy(classifier_dir, tmp_path, file, content)
    (tmp_path / "p.jsonl").write_text(KEPT)
    assert predict(folder, docs, tmp_path / "p.jsonl") == 1
    assert error_line(capsys) == f"graphdoc predict: error: {folder}/{problem.format(dir=folder)}"
    assert (tmp_path / "p.jsonl").read_text() == KEPT


def test_head_weights_that_do_not_fit_the_head(classifier_dir, docs, tmp_path, capsys):
    import torch

    weights = {"linear.weight": torch.zeros(2, 7), "linear.bias": torch.zeros(2)}  # a 7-d head on a 32-d encoder
    save_file(weights, str(tmp_path / "w.safetensors"))
    folder = broken_copy(classifier_dir, tmp_path, "head.safetensors", (tmp_path / "w.safetensors").read_bytes())
    assert predict(folder, docs, tmp_path / "p.jsonl") == 1
    assert error_line(capsys) == (f"graphdoc predict: error: {folder}/head.safetensors does not fit "
                                  f"{folder}/head_config.json: not the weights of a 32 -> 2 head")
    assert not (tmp_path / "p.jsonl").exists()


def test_empty_input_is_an_error(classifier_dir, tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "p.jsonl").write_text(KEPT)
    assert predict(classifier_dir, tmp_path / "empty.jsonl", tmp_path / "p.jsonl") == 1
    assert error_line(capsys) == f"graphdoc predict: error: no documents in {tmp_path / 'empty.jsonl'}"
    assert (tmp_path / "p.jsonl").read_text() == KEPT


def test_the_api_checks_its_arguments_too(docs, tmp_path):
    from graphdoc.errors import GraphDocError
    from graphdoc.finetune import predict as predict_api

    with pytest.raises(GraphDocError, match=r"^batch_size must be at least 1; got 0$"):
        predict_api(tmp_path / "nomodel", docs, tmp_path / "p.jsonl", batch_size=0)
    with pytest.raises(TypeError, match=r"^batch_size must be an integer; got '2'$"):  # not '<' between str and int
        predict_api(tmp_path / "nomodel", docs, tmp_path / "p.jsonl", batch_size="2")
    with pytest.raises(GraphDocError, match=r"^max_passages must be at least 1; got 0$"):
        predict_api(tmp_path / "nomodel", docs, tmp_path / "p.jsonl", max_passages=0)
    with pytest.raises(GraphDocError, match=r"is a folder$"):
        predict_api(tmp_path / "nomodel", docs, tmp_path)


def test_predict_proba_takes_one_document_and_checks_its_arguments(classifier_dir):
    from graphdoc.errors import GraphDocError
    from graphdoc.finetune import DocumentClassifier

    classifier = DocumentClassifier.from_pretrained(classifier_dir)
    text = "The quick brown fox jumps."
    one = classifier.predict_proba(text)  # one document, not one per character
    assert one.shape == (2,)
    assert torch.allclose(one, classifier.predict_proba([text, "Seven numbers."], batch_size=1)[0])
    assert classifier.predict_proba(iter([text, text])).shape == (2, 2)  # any iterable
    for kwargs, message in (({"batch_size": 0}, r"^batch_size must be at least 1; got 0$"),
                            ({"batch_size": -1}, r"^batch_size must be at least 1; got -1$"),
                            ({"max_passages": 0}, r"^max_passages must be a positive integer or None; got 0$")):
        with pytest.raises(GraphDocError, match=message):
            classifier.predict_proba([text, text], **kwargs)
    with pytest.raises(TypeError, match=r"^documents must be a str, a dict, a Document or an iterable of them; got "
                                        r"int$"):
        classifier.predict_proba(3)


def test_a_classifier_folder_without_its_encoder_is_named(classifier_dir, docs, tmp_path, capsys):
    model = shutil.copytree(classifier_dir, tmp_path / "model")
    shutil.rmtree(model / "encoder")
    assert predict(model, docs, tmp_path / "p.jsonl") == 1  # was a hub look-up of 'model/encoder'
    assert error_line(capsys) == f"graphdoc predict: error: {model} has no encoder/ folder (the classifier's encoder)"


def test_predict_still_writes_one_line_per_document(classifier_dir, docs, tmp_path):
    assert predict(classifier_dir, docs, tmp_path / "p.jsonl", "--batch-size", "5", "--max-passages", "1") == 0
    records = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(records) == 12 and {r["label"] for r in records} <= {"animals", "numbers"}


def test_predict_output_dash_writes_the_predictions_to_stdout(classifier_dir, docs, tmp_path, capsys,
                                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert predict(classifier_dir, docs, tmp_path / "p.jsonl") == 0
    capsys.readouterr()
    assert predict(classifier_dir, docs, "-") == 0
    assert capsys.readouterr().out == (tmp_path / "p.jsonl").read_text(encoding="utf-8")
    assert not (tmp_path / "-").exists()


def test_predict_writes_ids_and_labels_as_utf_8_text(tiny_bert, tmp_path):
    """Non-ASCII ids and labels are written as they are (not as \\u escapes), in UTF-8, and read back."""
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.finetune import DocumentClassifier

    model = tmp_path / "model"
    DocumentClassifier(GraphDocEncoder.from_pretrained(str(tiny_bert)), ["Tiere", "Zahlen (ü)"]).save_pretrained(model)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"_id": "straße-1", "text": "Ein Hund läuft."}, ensure_ascii=False) + "\n",
                      encoding="utf-8")
    assert predict(model, corpus, tmp_path / "p.jsonl") == 0
    text = (tmp_path / "p.jsonl").read_text(encoding="utf-8")
    assert '"id": "straße-1"' in text and '"Zahlen (ü)": ' in text and "\\u" not in text
    assert set(json.loads(text)["probabilities"]) == {"Tiere", "Zahlen (ü)"}


def embed_error(model: str, tmp_path: Path, capsys) -> str:
    corpus = labelled_files(tmp_path)["dev"]
    assert main(["-q", "embed", "--corpus", str(corpus), "--output", str(tmp_path / "e.npy"), "--model", model]) == 1
    assert not (tmp_path / "e.npy").exists()
    return error_line(capsys)


@pytest.mark.parametrize("name", ["{tmp}/nomodel", "./nomodel", "../nomodel", "~/graphdoc-no-such-model",
                                  "runs/a/nomodel"])
def test_a_missing_model_path_is_not_a_hub_id(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    name = name.format(tmp=tmp_path)
    assert embed_error(name, tmp_path, capsys) == f"graphdoc embed: error: no model folder at {name}"


def test_a_hub_id_keeps_the_hub_message(tmp_path, capsys):
    err = embed_error("graphdoc-test/no-such-model", tmp_path, capsys)
    assert err.startswith("graphdoc embed: error: cannot load Hugging Face hub model 'graphdoc-test/no-such-model': ")


def test_a_classifier_folder_is_not_an_encoder(classifier_dir, tmp_path, capsys):
    assert embed_error(str(classifier_dir), tmp_path, capsys) == \
        f"graphdoc embed: error: {classifier_dir} is a saved classifier; use {classifier_dir / 'encoder'} for its encoder"
    assert main(["-q", "pretrain", "--model", str(classifier_dir), "--corpus", str(labelled_files(tmp_path)["train"]),
                 "--output", str(tmp_path / "pt")]) == 1
    assert error_line(capsys) == \
        f"graphdoc pretrain: error: {classifier_dir} is a saved classifier; use {classifier_dir / 'encoder'} for its encoder"


def test_a_missing_model_folder_is_not_found(docs, tmp_path, capsys):
    assert predict(tmp_path / "nomodel", docs, tmp_path / "p.jsonl") == 1
    assert error_line(capsys) == f"graphdoc predict: error: no model folder at {tmp_path / 'nomodel'}"
    assert not (tmp_path / "p.jsonl").exists()


@pytest.mark.parametrize("inside", ["labels.json", "head.safetensors", "encoder/config.json", "new.jsonl",
                                    "sub/../labels.json"])
def test_output_inside_the_model_folder_is_refused(inside, classifier_dir, docs, tmp_path, capsys):
    model = shutil.copytree(classifier_dir, tmp_path / "model")
    before = {p: p.read_bytes() for p in model.rglob("*") if p.is_file()}
    assert predict(model, docs, model / inside) == 1
    assert error_line(capsys) == (f"graphdoc predict: error: --output {model / inside} is inside the model folder "
                                  f"{model}; write the predictions elsewhere")
    assert {p: p.read_bytes() for p in model.rglob("*") if p.is_file()} == before
    from graphdoc.errors import GraphDocError
    from graphdoc.finetune import predict as predict_api

    with pytest.raises(GraphDocError, match=r"^output .* is inside the model folder"):
        predict_api(model, docs, model / inside)
    # a sibling whose name starts like the folder's is not inside it
    assert predict(model, docs, tmp_path / "model.jsonl") == 0


def test_output_that_is_the_input_file_is_refused(classifier_dir, docs, tmp_path, capsys):
    before = docs.read_bytes()
    assert predict(classifier_dir, docs, docs) == 1  # the predictions would replace the documents and their labels
    assert error_line(capsys) == (f"graphdoc predict: error: --output {docs} is the input file {docs}; name another "
                                  "file for the predictions")
    assert docs.read_bytes() == before
    from graphdoc.errors import GraphDocError
    from graphdoc.finetune import predict as predict_api

    with pytest.raises(GraphDocError, match=r"^output .* is the input file"):
        predict_api(classifier_dir, docs, tmp_path / "." / docs.name)
    assert docs.read_bytes() == before


def test_empty_documents_left_out_are_a_warning_with_their_count_and_ids(classifier_dir, tmp_path, capsys):
    from _finetune_helpers import write_jsonl

    records = [{"_id": f"d{i}", "text": "" if i % 2 else f"text {i}"} for i in range(12)]
    source = write_jsonl(tmp_path / "docs.jsonl", records)
    assert predict(classifier_dir, source, tmp_path / "p.jsonl") == 0
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 6
    err = capsys.readouterr().err.strip()  # -q: warnings only
    assert err == (f"WARNING graphdoc.finetune.predict: {source}: 6 document(s) with no title or text left out of the "
                   "predictions ('d1', 'd3', 'd5', 'd7', 'd9', ...)")
    # without -q too, the reader does not report them a second time
    assert main(["predict", "--model", str(classifier_dir), "--input", str(source), "--output",
                 str(tmp_path / "p.jsonl")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert [line for line in lines if "d1" in line] == [
        f"WARNING graphdoc.finetune.predict: {source}: 6 document(s) with no title or text left out of the "
        "predictions ('d1', 'd3', 'd5', 'd7', 'd9', ...)"]


def test_an_output_that_cannot_be_written_is_refused_before_the_model_loads(docs, tmp_path, capsys, monkeypatch):
    """It was found only after every document had been classified, and named a hidden temporary file."""
    import os

    from graphdoc import fileio

    (tmp_path / "a-file").write_text("x")
    assert predict(tmp_path / "nomodel", docs, tmp_path / "a-file" / "p.jsonl") == 1
    assert error_line(capsys).startswith(f"graphdoc predict: error: --output {tmp_path / 'a-file' / 'p.jsonl'}: ")
    (tmp_path / "ro").mkdir()
    monkeypatch.setattr(fileio.os, "access", lambda path, mode: os.fspath(path) != str(tmp_path / "ro"))
    assert predict(tmp_path / "nomodel", docs, tmp_path / "ro" / "p.jsonl") == 1  # (root passes chmod 0555)
    assert error_line(capsys) == (f"graphdoc predict: error: --output {tmp_path / 'ro' / 'p.jsonl'}: cannot write "
                                  f"in {tmp_path / 'ro'}")


def test_predictions_into_a_device_need_no_writable_folder(classifier_dir, docs, monkeypatch):
    """/dev is not a user's to write in, but /dev/null is written into, never replaced."""
    import os

    from graphdoc import fileio

    monkeypatch.setattr(fileio.os, "access", lambda path, mode: os.fspath(path) != "/dev")
    assert predict(classifier_dir, docs, "/dev/null") == 0
