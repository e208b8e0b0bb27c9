"""``--resume`` with ``--output`` alone: pretrain and finetune go on with the settings, inputs, start model and
precision the run recorded; an option given on top that differs from the run's is still refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from _finetune_helpers import fine_tuning_killed_after_its_first_checkpoint, labelled_files, ranking_files
from conftest import pretraining_killed_before_step_5
from safetensors.torch import load_file
from test_pretrain_checkpoint import write_corpus
from test_training_folders_review import cli_state, error_line  # noqa: F401 (cli_state: an autouse fixture)

from graphdoc.cli import main


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


def test_a_pretraining_run_started_with_relative_paths_resumes_from_another_folder(tiny_bert, tmp_path, monkeypatch,
                                                                                   capsys):
    """The corpus and model recorded are found from any working folder; one moved since is named in one line, and
    given from its new place it goes on (without a warning that the recorded settings name another encoder)."""
    import shutil

    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    elsewhere.mkdir(parents=True)
    work.mkdir()
    write_corpus(work / "corpus.jsonl")
    shutil.copytree(tiny_bert, work / "encoder")
    monkeypatch.chdir(work)
    options = ["--model", "encoder", "--backbone", "flat", "--no-frozen-encoder", "--objective", "simcse",
               "--config", str(pretrain_config(tmp_path, {"chunker": {"max_words": 5}})), "--corpus", "corpus.jsonl",
               "--seed", "7", "--batch-size", "4", "--epochs", "2", "--device", "cpu"]
    with pretraining_killed_before_step_5(monkeypatch):
        assert main(["-q", "pretrain", "--output", "run", *options]) == 130
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    run, before = work / "run", files(work / "run")
    (work / "moved").mkdir()
    (work / "corpus.jsonl").rename(work / "moved" / "corpus.jsonl")
    (work / "encoder").rename(work / "moved" / "encoder")
    assert main(["-q", "pretrain", "--output", str(run), "--resume"]) == 1
    assert error_line(capsys, "pretrain") == (f"--corpus {work / 'corpus.jsonl'}, which the run in {run} recorded, is "
                                              "gone (moved or deleted): pass it from its new place with --corpus")
    assert main(["-q", "pretrain", "--output", str(run), "--resume", "--corpus", "../work/moved/corpus.jsonl"]) == 1
    assert error_line(capsys, "pretrain") == (f"--model {work / 'encoder'}, which the run in {run} recorded, is gone "
                                              "(moved or deleted): pass it from its new place with --model")
    assert files(run) == before
    assert main(["-q", "pretrain", "--output", str(run), "--resume", "--corpus", "../work/moved/corpus.jsonl",
                 "--model", "../work/moved/encoder"]) == 0
    assert capsys.readouterr().err == ""
    assert json.loads((run / "pretrain.json").read_text(encoding="utf-8"))["steps"] > 4


def test_a_pretraining_resume_without_a_corpus_it_can_find_says_what_is_needed(tiny_bert, tmp_path, capsys):
    assert main(["-q", "pretrain", "--output", str(tmp_path / "new")]) == 1
    assert error_line(capsys, "pretrain") == "--corpus is needed: the documents to pretrain on"
    assert main(["-q", "pretrain", "--output", str(tmp_path / "new"), "--resume"]) == 1
    assert error_line(capsys, "pretrain") == (f"--corpus is needed: {tmp_path / 'new'} holds no checkpoint of a "
                                              "pretraining run to take it from")
    assert not (tmp_path / "new").exists()


# ---------------------------------------------------------------------------------------------------- finetune
def finetune_options(tmp_path: Path, tiny_bert: Path, task: str, mode: str) -> list[str]:
    """A command with settings from a config file and from options, the run's inputs and field options."""
    config = tmp_path / "finetune.yaml"
    config.write_text(yaml.safe_dump({"ranking": {"hard_negatives": 1, "temperature": 0.1, "fold_dev_fraction": 0.25},
                                      "classification": {"head_lr": 0.05, "dropout": 0.0}}), encoding="utf-8")
    options = ["--task", task, "--model", str(tiny_bert), "--config", str(config), "--epochs", "2", "--batch-size",
               "4", "--lr", "5e-3", "--seed", "7", "--device", "cpu"]
    if task == "ranking":
        rank = ranking_files(tmp_path)
        options += ["--corpus", str(rank["corpus"]), "--queries", str(rank["queries"]), "--qrels", str(rank["qrels"]),
                    "--max-passages", "4", "--negative-pool", "judged"]
        return options + (["--folds", "2"] if mode == "k-fold" else ["--dev-qrels", str(rank["qrels"])])
    labelled = labelled_files(tmp_path)
    for split in ("train", "dev"):  # ids and labels under other names: --id-field, --label-field
        records = [json.loads(line) for line in labelled[split].read_text(encoding="utf-8").splitlines()]
        labelled[split].write_text("".join(json.dumps({"post": r.pop("_id"), "topic": r.pop("label"), **r}) + "\n"
                                           for r in records), encoding="utf-8")
    options += ["--train", str(labelled["train"]), "--dev", str(labelled["dev"]), "--max-passages", "2",
                "--id-field", "post", "--label-field", "topic", "--precision", "bf16"]
    return options + (["--few-shot", "2", "--repeats", "2"] if mode == "few-shot" else ["--test", str(labelled["dev"])])


def same_models(whole: Path, run: Path) -> None:
    """Every model the two runs saved (each fold's or seed's) holds the same weights."""
    models = sorted(str(p.relative_to(whole)) for p in whole.rglob("model") if p.is_dir() and
                    "checkpoints" not in p.parts)
    assert models
    for model in models:
        same_weights(whole / model, run / model)


@pytest.mark.parametrize(("task", "mode"), [("ranking", "plain"), ("ranking", "k-fold"), ("classification", "plain"),
                                            ("classification", "few-shot")])
def test_a_fine_tuning_run_resumed_with_its_output_alone_ends_as_the_uninterrupted_one(
        task, mode, tiny_bert, tmp_path, monkeypatch, capsys):
    options = finetune_options(tmp_path, tiny_bert, task, mode)
    assert main(["-q", "finetune", "--output", str(tmp_path / "whole"), *options]) == 0
    with fine_tuning_killed_after_its_first_checkpoint(monkeypatch):
        assert main(["-q", "finetune", "--output", str(tmp_path / "run"), *options]) == 130
    capsys.readouterr()
    before = files(tmp_path / "run")
    assert main(["-q", "finetune", "--output", str(tmp_path / "run"), "--resume", "--lr", "0.5"]) == 1
    assert error_line(capsys, "finetune") == "cannot resume with lr=0.5: the run was started with 0.005"
    assert files(tmp_path / "run") == before

    assert main(["-q", "finetune", "--output", str(tmp_path / "run"), "--resume"]) == 0
    summary = {"plain": "finetune.json", "k-fold": "crossval.json", "few-shot": "fewshot.json"}[mode]
    scores = [json.loads((tmp_path / name / summary).read_text(encoding="utf-8")) for name in ("whole", "run")]
    for key in ("scores", "accuracy", "dev_scores", "test_scores", "best"):
        assert scores[0].get(key) == scores[1].get(key), key
    same_models(tmp_path / "whole", tmp_path / "run")
    if mode == "few-shot":  # what a resume that ended was given is what the next one goes on with
        assert main(["-q", "finetune", "--output", str(tmp_path / "run"), "--resume", "--repeats", "3"]) == 0
        assert main(["finetune", "--output", str(tmp_path / "run"), "--resume"]) == 0
        assert "WARNING" not in capsys.readouterr().err  # (none about seed runs left out of fewshot.json)
        saved = json.loads((tmp_path / "run" / "fewshot.json").read_text(encoding="utf-8"))
        assert [run["seed"] for run in saved["runs"]] == [7, 8, 9]


def test_a_fine_tuning_resume_reads_the_recorded_inputs_as_given_ones(tiny_bert, tmp_path, monkeypatch, capsys):
    options = finetune_options(tmp_path, tiny_bert, "classification", "plain")
    with fine_tuning_killed_after_its_first_checkpoint(monkeypatch):
        assert main(["-q", "finetune", "--output", str(tmp_path / "run"), *options]) == 130
    capsys.readouterr()
    train = tmp_path / "train.jsonl"
    original = train.read_text(encoding="utf-8")
    train.write_text(original.replace('"topic": "numbers"', '"topic": "animals"', 1), encoding="utf-8")
    assert main(["-q", "finetune", "--output", str(tmp_path / "run"), "--resume"]) == 1
    assert error_line(capsys, "finetune") == (
        f"cannot resume {tmp_path / 'run'} over different training data (document ids, labels, queries or "
        "judgements): use the run's inputs or another --output")
    train.write_text(original, encoding="utf-8")
    train.rename(tmp_path / "moved.jsonl")  # a recorded input gone: named, and taken from its new place
    assert main(["-q", "finetune", "--output", str(tmp_path / "run"), "--resume"]) == 1
    assert error_line(capsys, "finetune") == (f"--train {train}, which the run in {tmp_path / 'run'} recorded, is "
                                              "gone (moved or deleted): pass it from its new place with --train")
    assert main(["-q", "finetune", "--output", str(tmp_path / "run"), "--resume", "--train",
                 str(tmp_path / "moved.jsonl")]) == 0
    assert main(["-q", "finetune", "--output", str(tmp_path / "new"), "--resume"]) == 1
    assert error_line(capsys, "finetune") == f"--task is needed: ranking or classification ({tmp_path / 'new'} " \
                                             "records no run to resume)"
    assert main(["-q", "finetune", "--output", str(tmp_path / "new"), "--resume", "--task", "ranking"]) == 1
    assert error_line(capsys, "finetune") == (f"--task ranking needs --corpus, --queries, --qrels ({tmp_path / 'new'} "
                                              "records none of them to resume with)")
    assert not (tmp_path / "new").exists()


def test_a_fine_tuning_run_whose_config_names_a_relative_model_folder_resumes_from_another_folder(
        tiny_bert, tmp_path, monkeypatch, capsys):
    """The record names the config's encoder folder by its absolute path (as given, ``encoder``, a resume elsewhere
    looked it up on the hub)."""
    import shutil

    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copytree(tiny_bert, work / "encoder")
    labelled_files(work)
    (work / "model.yaml").write_text(yaml.safe_dump({"model": {"passage_encoder": {"model_name_or_path": "encoder"}}}),
                                     encoding="utf-8")
    monkeypatch.chdir(work)
    options = ["--task", "classification", "--config", "model.yaml", "--backbone", "flat", "--epochs", "2",
               "--batch-size", "4", "--train", "train.jsonl", "--dev", "dev.jsonl", "--max-passages", "2",
               "--device", "cpu"]
    with fine_tuning_killed_after_its_first_checkpoint(monkeypatch):
        assert main(["-q", "finetune", "--output", "run", *options]) == 130
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert main(["-q", "finetune", "--output", str(work / "run"), "--resume"]) == 0
    assert capsys.readouterr().err == ""
    assert len(json.loads((work / "run" / "finetune.json").read_text(encoding="utf-8"))["history"]) == 2
