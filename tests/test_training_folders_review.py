"""Findings of the review of ``graphdoc pretrain | finetune``: a run folder of the other kind of training, a saved
model a run would replace and a passage cache inside a folder a run replaces are refused in one line before
training; a finished run resumed with a time budget is not 'stopped by it'; empty documents are counted once
across a resume in the first epoch."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from _finetune_helpers import labelled_files, ranking_files

from graphdoc.cli import main

WORDS = "graph attention passage document node edge vector dense sparse query".split()


@pytest.fixture(autouse=True)
def cli_state(restore_cli_state):
    yield


def error_line(capsys, command: str) -> str:
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines  # one line, no traceback
    return lines[0].removeprefix(f"graphdoc {command}: error: ")


@pytest.fixture
def corpus(tmp_path) -> Path:
    rng = random.Random(3)
    records = [{"_id": f"e{i}", "text": ""} for i in range(3)]
    for i in range(10):
        sentences = [" ".join(rng.choice(WORDS) for _ in range(5)) + "." for _ in range(rng.randint(2, 5))]
        records.append({"_id": f"d{i}", "text": " ".join(sentences)})
    rng.shuffle(records)
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def config(tmp_path: Path, tiny_bert: Path, **pretrain) -> Path:
    settings = {"batch_size": 4, "epochs": 2, "lr": 1e-3, "log_every": 1, "checkpoint_every": 1, **pretrain}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": {"chunker": {"max_words": 5},
                                              "passage_encoder": {"model_name_or_path": str(tiny_bert)}},
                                    "pretrain": settings}), encoding="utf-8")
    return path


def fake_checkpoint(run: Path, state: dict) -> Path:
    folder = run / "checkpoints" / "step-00000001"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps(state), encoding="utf-8")
    return run


def test_pretrain_into_a_fine_tuning_run_is_refused(tiny_bert, corpus, tmp_path, capsys) -> None:
    run = fake_checkpoint(tmp_path / "ft", {"config": {"lr": 1e-4}, "epoch": 1})
    for extra in ([], ["--resume"]):
        assert main(["-q", "pretrain", "--corpus", str(corpus), "--output", str(run), "--config",
                     str(config(tmp_path, tiny_bert)), *extra]) == 1
        assert error_line(capsys, "pretrain") == f"{run} holds a fine-tuning run, not a pretraining run: choose " \
                                                 "another --output"


@pytest.mark.parametrize("task", ["ranking", "classification"])
def test_finetune_into_a_pretraining_run_is_refused(task, tmp_path, capsys) -> None:
    run = fake_checkpoint(tmp_path / "pt", {"pretrain": {"lr": 1e-3}, "world_size": 1, "step": 1})
    files = ranking_files(tmp_path) if task == "ranking" else labelled_files(tmp_path)
    inputs = (["--corpus", str(files["corpus"]), "--queries", str(files["queries"]), "--qrels", str(files["qrels"])]
              if task == "ranking" else ["--train", str(files["train"]), "--dev", str(files["dev"])])
    for extra in ([], ["--resume"]):
        assert main(["-q", "finetune", "--task", task, *inputs, "--output", str(run), "--model", "no/such/model",
                     *extra]) == 1
        assert error_line(capsys, "finetune") == f"{run} holds a pretraining run, not a fine-tuning run: choose " \
                                                 "another --output"


@pytest.mark.parametrize("task", ["ranking", "classification"])
def test_finetune_into_a_folder_of_other_files_is_refused_and_writes_nothing(task, tmp_path, capsys) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n", encoding="utf-8")
    files = ranking_files(tmp_path) if task == "ranking" else labelled_files(tmp_path)
    inputs = (["--corpus", str(files["corpus"]), "--queries", str(files["queries"]), "--qrels", str(files["qrels"])]
              if task == "ranking" else ["--train", str(files["train"]), "--dev", str(files["dev"])])
    for extra in ([], ["--resume"]):  # (refused before the model named is loaded)
        assert main(["-q", "finetune", "--task", task, *inputs, "--output", str(out), "--model", "no/such/model",
                     *extra]) == 1
        assert error_line(capsys, "finetune") == f"--output {out} holds other files and no fine-tuning run: choose a " \
                                                 "new or empty folder"
        assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_finetune_refuses_to_replace_a_saved_model_it_did_not_train(model_dir, tmp_path, capsys) -> None:
    import shutil

    shutil.copytree(model_dir, tmp_path / "out" / "model")
    files = ranking_files(tmp_path)
    assert main(["-q", "finetune", "--task", "ranking", "--corpus", str(files["corpus"]), "--queries",
                 str(files["queries"]), "--qrels", str(files["qrels"]), "--output", str(tmp_path / "out"),
                 "--model", str(tmp_path / "out" / "model")]) == 1
    assert error_line(capsys, "finetune") == (
        f"{tmp_path / 'out'} holds a saved model in {tmp_path / 'out' / 'model'} and no fine-tuning run: the run "
        "would replace it; choose another --output (or move the model)")
    assert (tmp_path / "out" / "model" / "config.json").read_bytes() == (model_dir / "config.json").read_bytes()


def test_a_passage_cache_inside_a_folder_the_run_replaces_is_refused(tiny_bert, corpus, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["-q", "pretrain", "--corpus", str(corpus), "--output", str(out), "--config",
                 str(config(tmp_path, tiny_bert)), "--frozen-encoder", "--cache-dir", str(out / "model")]) == 1
    assert error_line(capsys, "pretrain") == (
        f"--cache-dir {out / 'model'} is inside {out / 'model'}, which the run writes and replaces: put the passage "
        f"cache elsewhere (by default it is {out / 'passage_cache'})")
    files = ranking_files(tmp_path)
    assert main(["-q", "finetune", "--task", "ranking", "--corpus", str(files["corpus"]), "--queries",
                 str(files["queries"]), "--qrels", str(files["qrels"]), "--output", str(out), "--model",
                 "no/such/model", "--cache-dir", str(out / "halfway" / "c")]) == 1
    assert error_line(capsys, "finetune").startswith(f"--cache-dir {out / 'halfway' / 'c'} is inside "
                                                     f"{out / 'halfway'}, which the run writes and replaces")


def test_a_finished_run_resumed_with_a_time_budget_is_not_stopped_by_it(tiny_bert, corpus, tmp_path) -> None:
    out, cfg = tmp_path / "run", config(tmp_path, tiny_bert)
    assert main(["-q", "pretrain", "--corpus", str(corpus), "--output", str(out), "--config", str(cfg)]) == 0
    before = json.loads((out / "pretrain.json").read_text(encoding="utf-8"))
    assert main(["-q", "pretrain", "--corpus", str(corpus), "--output", str(out), "--config", str(cfg),
                 "--resume", "--max-seconds", "0.000001"]) == 0  # (a budget the finished run spent)
    after = json.loads((out / "pretrain.json").read_text(encoding="utf-8"))
    assert not after.get("time_up") and after["steps"] == before["steps"]


def test_empty_documents_are_counted_once_across_a_resume_in_the_first_epoch(tiny_bert, corpus, tmp_path) -> None:
    out, cfg = tmp_path / "run", config(tmp_path, tiny_bert, checkpoint_every=100)  # saved when the budget stops it
    assert main(["-q", "pretrain", "--corpus", str(corpus), "--output", str(out), "--config", str(cfg),
                 "--max-seconds", "0.000001"]) == 0  # stopped by its budget after step 1, inside the first epoch
    assert json.loads((out / "pretrain.json").read_text(encoding="utf-8"))["steps"] == 1
    assert main(["-q", "pretrain", "--corpus", str(corpus), "--output", str(out), "--config", str(cfg),
                 "--resume", "--max-seconds", "1000"]) == 0
    assert json.loads((out / "pretrain.json").read_text(encoding="utf-8"))["empty_skipped"] == 3


def test_a_ranking_run_stopped_after_saving_its_model_before_its_checkpoint_is_not_refused(model_dir, tmp_path,
                                                                                         capsys) -> None:
    import shutil

    out = tmp_path / "out"
    shutil.copytree(model_dir, out / "model")
    (out / "finetune_config.json").write_text("{}", encoding="utf-8")  # the run's own settings, written first
    files = ranking_files(tmp_path)
    assert main(["-q", "finetune", "--task", "ranking", "--corpus", str(files["corpus"]), "--queries",
                 str(files["queries"]), "--qrels", str(files["qrels"]), "--output", str(out), "--model",
                 "no/such/model", "--resume"]) == 1
    assert "holds a saved model" not in error_line(capsys, "finetune")  # (it fails on loading the model named)
