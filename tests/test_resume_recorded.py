"""``--resume`` with ``--output`` alone: pretrain goes on with the settings, inputs, start model and
precision the run recorded; an option given on top that differs from the run's is still refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from conftest import pretraining_killed_before_step_5
from safetensors.torch import load_file
from test_pretrain_checkpoint import write_corpus

from graphdoc.cli import main


@pytest.fixture(autouse=True)
def cli_state(restore_cli_state):
    yield


def error_line(capsys, command: str) -> str:
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines  # one line, no traceback
    return lines[0].removeprefix(f"graphdoc {command}: error: ")


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes: a refused call must leave the run as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def same_weights(a: Path, b: Path) -> None:
    """The safetensors files of two saved models (a classifier's head and encoder included) hold the same
    weights."""
    names = sorted(str(p.relative_to(a)) for p in a.rglob("*.safetensors"))
    assert names and names == sorted(str(p.relative_to(b)) for p in b.rglob("*.safetensors"))
    for name in names:
        expected, got = load_file(str(a / name)), load_file(str(b / name))
        assert set(got) == set(expected), name
        for key in expected:
            torch.testing.assert_close(got[key], expected[key], atol=1e-6, rtol=1e-5, msg=f"{name}: {key}")


# ---------------------------------------------------------------------------------------------------- pretrain
def pretrain_config(tmp_path: Path, model_section: dict | None) -> Path:
    """A config whose pretrain section checkpoints every 2 steps (no option sets that)."""
    config = {"pretrain": {"lr": 1e-3, "log_every": 1, "checkpoint_every": 2, "shuffle_buffer": 5,
                           "temperature": 0.1}}
    if model_section is not None:
        config["model"] = model_section
    path = tmp_path / "pretrain.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.mark.parametrize("backbone", ["graph", "flat"])
def test_a_pretraining_run_resumed_with_its_output_alone_ends_as_the_uninterrupted_one(
        backbone, tiny_bert, model_dir, tmp_path, monkeypatch, capsys):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    if backbone == "graph":  # a saved graphdoc model, a config of pretrain settings only, the frozen mode in bf16
        options = ["--model", str(model_dir), "--config", str(pretrain_config(tmp_path, None)), "--objective", "ict",
                   "--frozen-encoder", "--precision", "bf16", "--max-steps", "6"]
    else:  # a plain encoder built with the config's model settings
        options = ["--model", str(tiny_bert), "--backbone", "flat", "--no-frozen-encoder", "--objective", "simcse",
                   "--config", str(pretrain_config(tmp_path, {"chunker": {"max_words": 5}}))]
    options += ["--corpus", str(corpus), "--seed", "7", "--batch-size", "4", "--epochs", "2", "--device", "cpu"]
    assert main(["-q", "pretrain", "--output", str(tmp_path / "whole"), *options]) == 0
    with pretraining_killed_before_step_5(monkeypatch):
        assert main(["-q", "pretrain", "--output", str(tmp_path / "run"), *options]) == 130
    capsys.readouterr()
    before = files(tmp_path / "run")
    assert main(["-q", "pretrain", "--output", str(tmp_path / "run"), "--resume", "--seed", "8"]) == 1
    assert error_line(capsys, "pretrain") == "cannot resume with pretrain.seed=8: the run was started with 7"
    original = corpus.read_bytes()  # the corpus read from its recorded path is checked as one given
    corpus.write_bytes(original.replace(b"graph", b"GRAPH"))
    assert main(["-q", "pretrain", "--output", str(tmp_path / "run"), "--resume"]) == 1
    assert error_line(capsys, "pretrain") == ("cannot resume over a different corpus: corpus.jsonl was edited since "
                                              "the run read it (the same size, other content)")
    corpus.write_bytes(original)
    assert files(tmp_path / "run") == before

    assert main(["-q", "pretrain", "--output", str(tmp_path / "run"), "--resume", "--device", "cpu"]) == 0
    assert capsys.readouterr().err == ""  # no warning either (a saved model's own settings are not "ignored")
    steps = [json.loads((tmp_path / name / "pretrain.json").read_text(encoding="utf-8"))["steps"]
             for name in ("whole", "run")]
    assert steps[0] == steps[1] > 4
    same_weights(tmp_path / "whole" / "model", tmp_path / "run" / "model")


def test_a_pretraining_resume_without_a_corpus_it_can_find_says_what_is_needed(tiny_bert, tmp_path, capsys):
    assert main(["-q", "pretrain", "--output", str(tmp_path / "new")]) == 1
    assert error_line(capsys, "pretrain") == "--corpus is needed: the documents to pretrain on"
    assert main(["-q", "pretrain", "--output", str(tmp_path / "new"), "--resume"]) == 1
    assert error_line(capsys, "pretrain") == (f"--corpus is needed: {tmp_path / 'new'} holds no checkpoint of a "
                                              "pretraining run to take it from")
    assert not (tmp_path / "new").exists()

