"""``graphdoc finetune`` and ``predict`` user review: a resume after the switch to the model's own negatives ends
as an uninterrupted run; bad inputs and unusable folders are one line before a model loads or a folder is made."""

from __future__ import annotations

import json

import pytest
import torch
from _finetune_helpers import labelled_files, ranking_files, ranking_interrupted_in_epoch, write_jsonl

from graphdoc.cli import main
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError
from graphdoc.finetune import ClassificationConfig, RankingConfig, finetune_ranking

RANKING = {"epochs": 4, "batch_size": 4, "hard_negatives": 2, "lr": 5e-3, "max_passages": 4, "temperature": 0.1}
NO_MODEL = "no/such/model"  # a call that loads a model fails on it: the errors below come before


@pytest.fixture(autouse=True)
def cli_state(restore_cli_state):
    yield


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no traceback
    return err.strip()


def finetune(*argv: str) -> int:
    return main(["-q", "finetune", *argv])


def test_a_resume_after_the_switch_to_the_models_negatives_keeps_its_lists_and_ends_as_uninterrupted(
        spread_bert, tmp_path, monkeypatch):
    from graphdoc.finetune.retriever import CorpusRanker

    files = ranking_files(tmp_path)
    args = (files["corpus"], files["queries"], files["qrels"])
    finetune_ranking(*args, tmp_path / "a", config=RankingConfig(**RANKING), model=str(spread_bert))
    # epochs 3 and 4 take the model's negatives: stopped as epoch 4 begins
    ranking_interrupted_in_epoch(monkeypatch, 3, lambda: finetune_ranking(
        *args, tmp_path / "b", config=RankingConfig(**RANKING), model=str(spread_bert)))
    kept = (tmp_path / "b" / "negatives" / "model.json").read_bytes()
    halfway = (tmp_path / "b" / "halfway" / "model.safetensors").read_bytes()
    ranked = []
    real_components = CorpusRanker.components
    monkeypatch.setattr(CorpusRanker, "components", lambda self, *a: ranked.append(a) or real_components(self, *a))
    summary = finetune_ranking(*args, tmp_path / "b", config=RankingConfig(**RANKING), model=str(spread_bert),
                               resume=True)
    assert summary["epochs"] == 4 and ranked == []  # the lists the interrupted run ranked, not ranked again
    assert (tmp_path / "b" / "negatives" / "model.json").read_bytes() == kept
    assert (tmp_path / "b" / "halfway" / "model.safetensors").read_bytes() == halfway
    a = GraphDocEncoder.from_pretrained(tmp_path / "a" / "model").head_state_dict()
    b = GraphDocEncoder.from_pretrained(tmp_path / "b" / "model").head_state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("task", ["ranking", "classification"])
@pytest.mark.parametrize("flag", ["--output", "--cache-dir"])
def test_a_folder_under_a_file_is_one_error_line(task, flag, tmp_path, capsys):
    files = ranking_files(tmp_path) if task == "ranking" else labelled_files(tmp_path)
    inputs = [f"--{name}={path}" for name, path in files.items()]
    (tmp_path / "file").write_text("kept\n")
    output = ["--output", str(tmp_path / "file" / "run")] if flag == "--output" else \
        ["--output", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "file" / "cache")]
    assert finetune("--task", task, *inputs, *output, "--model", NO_MODEL) == 1
    where = tmp_path / "file" / ("run" if flag == "--output" else "cache")
    assert error_line(capsys) == \
        f"graphdoc finetune: error: {flag} {where}: {tmp_path / 'file'} is a file, not a folder"
    assert (tmp_path / "file").read_text() == "kept\n" and not (tmp_path / "run").exists()


@pytest.mark.parametrize("task", ["ranking", "classification"])
@pytest.mark.parametrize("inside", ["model", "checkpoints/cache", "seed-42"])
def test_a_cache_folder_inside_what_the_run_writes_is_one_error_line(task, inside, tmp_path, capsys):
    files = ranking_files(tmp_path) if task == "ranking" else labelled_files(tmp_path)
    inputs = [f"--{name}={path}" for name, path in files.items()]
    run = tmp_path / "run"
    assert finetune("--task", task, *inputs, "--output", str(run), "--cache-dir", str(run / inside),
                    "--model", NO_MODEL) == 1
    assert error_line(capsys) == (f"graphdoc finetune: error: --cache-dir {run / inside} is inside "
                                  f"{run / inside.split('/')[0]}, which the run writes and replaces: put the passage "
                                  f"cache elsewhere (by default it is {run / 'passage_cache'})")
    assert not run.exists()


def test_a_classifier_without_its_head_config_says_so(tmp_path):
    from graphdoc.finetune.classifier import DocumentClassifier

    (tmp_path / "clf" / "encoder").mkdir(parents=True)
    for name in ("head.safetensors", "labels.json"):
        (tmp_path / "clf" / name).write_text("{}")
    with pytest.raises(GraphDocError, match=r"^\S+clf is not a saved classifier \(no head_config.json\)$"):
        DocumentClassifier.from_pretrained(tmp_path / "clf")


def test_an_infinite_supcon_temperature_is_refused():
    with pytest.raises(GraphDocError, match=r"^classification.temperature must be positive and finite; got inf$"):
        ClassificationConfig(objective="supcon", temperature=float("inf"))


RANKING_INPUT_CASES = [
    ("qrels", "query-id\tcorpus-id\tscore\nq0\tfox-a\t0\n",
     "{path}: no relevant judgement of a query in the queries and a document in the corpus to train on"),
    ("dev-qrels", "query-id\tcorpus-id\tscore\n",
     "{path}: no relevant judgement of a query in the queries and a document in the corpus to score the epochs on"),
    ("corpus", "", "the corpus {path} holds no document"),
    ("queries", '{"_id": "q0", "text": "fox"}\n{"_id": "q0", "text": "dog"}\n',
     "{path}:2: duplicate query id 'q0' (first seen on line 1)"),
]


@pytest.mark.parametrize(("which", "content", "message"), RANKING_INPUT_CASES,
                         ids=[case[0] for case in RANKING_INPUT_CASES])
def test_bad_ranking_inputs_are_one_line_before_a_model_loads_or_a_folder_is_made(which, content, message,
                                                                                 tmp_path, capsys):
    files = {**ranking_files(tmp_path), "dev-qrels": None}
    files[which] = tmp_path / f"bad-{which}{'.tsv' if 'qrels' in which else '.jsonl'}"
    files[which].write_text(content)
    inputs = [f"--{name}={path}" for name, path in files.items() if path is not None]
    assert finetune("--task", "ranking", *inputs, "--output", str(tmp_path / "run"), "--model", NO_MODEL) == 1
    assert error_line(capsys) == f"graphdoc finetune: error: {message.format(path=files[which])}"
    assert not (tmp_path / "run").exists()


def test_more_folds_than_judged_queries_is_refused_before_a_model_loads(tmp_path, capsys):
    files = ranking_files(tmp_path)  # six judged queries
    inputs = [f"--{name}={path}" for name, path in files.items()]
    assert finetune("--task", "ranking", *inputs, "--folds", "7", "--output", str(tmp_path / "run"),
                    "--model", NO_MODEL) == 1
    assert error_line(capsys) == \
        "graphdoc finetune: error: folds must be between 2 and the number of queries (6), got 7"
    assert not (tmp_path / "run").exists()


def test_a_training_set_of_one_class_is_refused_before_a_model_loads(tmp_path, capsys):
    files = labelled_files(tmp_path)
    one = write_jsonl(tmp_path / "one.jsonl", [dict(json.loads(line), label="animals")
                                               for line in files["train"].read_text().splitlines()])
    assert finetune("--task", "classification", "--train", str(one), "--dev", str(one), "--output",
                    str(tmp_path / "run"), "--model", NO_MODEL) == 1
    assert error_line(capsys) == (f"graphdoc finetune: error: {one}: every training document has the label "
                                  "'animals'; a classifier needs two or more classes")
    assert not (tmp_path / "run").exists()


def test_too_few_examples_for_few_shot_is_refused_before_a_model_loads(tmp_path, capsys):
    files = labelled_files(tmp_path)  # six documents per class
    assert finetune("--task", "classification", "--train", str(files["train"]), "--dev", str(files["dev"]),
                    "--few-shot", "7", "--output", str(tmp_path / "run"), "--model", NO_MODEL) == 1
    assert error_line(capsys) == "graphdoc finetune: error: class 'animals' has 6 training examples; 7-shot needs 7"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("changes", "message"), [
    ({"shots": 0}, "classification.shots must be positive or null; got 0"),
    ({"repeats": 0}, "classification.repeats must be positive; got 0"),
    ({"head_lr": float("nan")}, "classification.head_lr must be positive; got nan"),
    ({"seed": -1}, "classification.seed must be in [0, 2147483647]; got -1"),  # was NumPy's traceback
    ({"seed": 2 ** 32}, "classification.seed must be in [0, 2147483647]; got 4294967296"),
])
def test_classification_settings_name_the_bad_value(changes, message):
    with pytest.raises(GraphDocError) as info:
        ClassificationConfig(**changes)
    assert str(info.value) == message


def test_predict_input_of_blank_documents_only_says_so(tiny_bert, tmp_path, capsys):
    from graphdoc.finetune import DocumentClassifier

    DocumentClassifier(GraphDocEncoder.from_pretrained(str(tiny_bert)), ["a", "b"]).save_pretrained(tmp_path / "m")
    blank = write_jsonl(tmp_path / "blank.jsonl", [{"_id": "x", "title": "", "text": " "}, {"_id": "y", "text": ""}])
    (tmp_path / "p.jsonl").write_text("kept\n")
    capsys.readouterr()
    assert main(["-q", "predict", "--model", str(tmp_path / "m"), "--input", str(blank), "--output",
                 str(tmp_path / "p.jsonl")]) == 1
    assert error_line(capsys) == \
        f"graphdoc predict: error: no documents in {blank}: its 2 document(s) have no title or text"
    assert (tmp_path / "p.jsonl").read_text() == "kept\n"


def test_resuming_a_k_fold_or_few_shot_run_in_a_folder_holding_none_warns_once(tmp_path, caplog):
    """Its folds or seeds say it at INFO only (one not begun before an interruption is simply started)."""
    import logging

    from graphdoc.finetune.loop import check_run_folder, run_kind

    with caplog.at_level(logging.INFO, logger="graphdoc.finetune.loop"):
        check_run_folder(tmp_path / "typo", run_kind("ranking", folds=3), resume=True)
        check_run_folder(tmp_path / "typo2", run_kind("classification", shots=5), resume=True)
        check_run_folder(tmp_path / "plain", run_kind("classification"), resume=True)  # its EpochLoop warns
        check_run_folder(tmp_path / "new", run_kind("ranking", folds=3), resume=False)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"nothing to resume in {tmp_path / 'typo'}: starting from scratch"),
        ("WARNING", f"nothing to resume in {tmp_path / 'typo2'}: starting from scratch")]


def test_a_second_run_without_resume_is_refused_before_a_model_loads(tiny_bert, tmp_path, capsys):
    files = ranking_files(tmp_path)
    inputs = [f"--{name}={path}" for name, path in files.items()]
    assert finetune("--task", "ranking", *inputs, "--epochs", "1", "--batch-size", "4", "--output",
                    str(tmp_path / "run"), "--model", str(tiny_bert)) == 0
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "run").rglob("*"))
    capsys.readouterr()
    assert finetune("--task", "ranking", *inputs, "--output", str(tmp_path / "run"), "--model", NO_MODEL) == 1
    assert error_line(capsys) == (f"graphdoc finetune: error: {tmp_path / 'run'} already holds a ranking run; pass "
                                  "--resume to continue it or choose another --output")
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "run").rglob("*")) == before


def test_a_cache_dir_without_a_frozen_encoder_is_said_to_be_ignored(tiny_bert, tmp_path, capsys):
    inputs = [f"--{name}={path}" for name, path in labelled_files(tmp_path).items()]
    assert finetune("--task", "classification", *inputs, "--output", str(tmp_path / "run"), "--model", str(tiny_bert),
                    "--epochs", "1", "--no-frozen-encoder", "--cache-dir", str(tmp_path / "cache")) == 0
    assert (f"ignoring cache_dir (--cache-dir) {tmp_path / 'cache'}: only a frozen encoder caches passage vectors"
            in capsys.readouterr().err)
    assert not (tmp_path / "cache").exists()
