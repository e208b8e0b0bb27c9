"""``graphdoc finetune``'s closing line: readable scores and where the details are, for every mode."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from _finetune_helpers import labelled_files

from graphdoc.cli import main
from graphdoc.cli.finetune import _report


@pytest.fixture(autouse=True)
def cli_state(restore_cli_state):
    yield


def test_classification_run_ends_with_its_best_dev_score_model_and_summary_file(tiny_bert, tmp_path, capsys):
    files = labelled_files(tmp_path)
    assert main(["finetune", "--task", "classification", "--train", str(files["train"]), "--dev",
                 str(files["dev"]), "--output", str(tmp_path / "run"), "--model", str(tiny_bert), "--epochs", "1"]) == 0
    summary = json.loads((tmp_path / "run" / "finetune.json").read_text())
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "{" not in last
    dev = summary["dev_scores"]
    assert (f"best dev accuracy {summary['best']:.4f} at epoch 1 of 1; dev accuracy {dev['accuracy']:.4f}, "
            f"macro-F1 {dev['macro_f1']:.4f}; model in {tmp_path / 'run' / 'model'}; ") in last
    assert re.search(rf"; \d+ s, peak RSS \d+ MiB; details in {re.escape(str(tmp_path / 'run' / 'finetune.json'))}$",
                     last)


def _messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "graphdoc.cli"]


def test_ranking_report_names_the_dev_measure(caplog):
    result = {"best": 0.51234, "best_epoch": 3, "epochs": 4, "model_dir": "out/model", "wall_s": 12.4,
              "peak_rss_mib": 900.2, "pairs": 40}
    with caplog.at_level(logging.INFO, logger="graphdoc.cli"):
        _report(result, "hybrid nDCG@10", Path("out"))
    assert _messages(caplog) == [f"best dev hybrid nDCG@10 0.5123 at epoch 3 of 4; model in out/model; 12 s, "
                                 f"peak RSS 900 MiB; details in {Path('out/finetune.json')}"]


def test_classification_report_gives_dev_and_test_scores(caplog):
    result = {"best": 0.75, "best_epoch": 2, "epochs": 2, "model_dir": "m", "wall_s": 3, "peak_rss_mib": 10,
              "dev_scores": {"accuracy": 0.75, "macro_f1": 0.7}, "test_scores": {"accuracy": 0.5, "macro_f1": 0.25}}
    with caplog.at_level(logging.INFO, logger="graphdoc.cli"):
        _report(result, "accuracy", Path("o"))
    assert _messages(caplog)[0].startswith("best dev accuracy 0.7500 at epoch 2 of 2; dev accuracy 0.7500, "
                                           "macro-F1 0.7000; test accuracy 0.5000, macro-F1 0.2500; model in m; ")


def test_run_without_dev_queries_says_so(caplog):
    result = {"best": None, "best_epoch": None, "epochs": 2, "model_dir": "m", "wall_s": 1, "peak_rss_mib": 1}
    with caplog.at_level(logging.INFO, logger="graphdoc.cli"):
        _report(result, "dense nDCG@10", Path("o"))
    assert _messages(caplog)[0].startswith("no dev score; model in m; 1 s")


def test_few_shot_and_cross_validation_reports(caplog):
    few = {"shots": 5, "repeats": 10, "runs": [], "accuracy": {"mean": 0.5, "std": 0.01},
           "macro_f1": {"mean": 0.4, "std": 0.02}}
    folds = {"folds": [{"alpha": 0.6}, {"alpha": 0.45}], "queries": 30, "measure": "nDCG@10",
             "scores": {"dense": 0.41234, "hybrid": 0.5}, "dense_run": "o/dense.trec", "hybrid_run": "o/hybrid.trec"}
    with caplog.at_level(logging.INFO, logger="graphdoc.cli"):
        _report(few, "accuracy", Path("o"))
        _report(folds, "dense nDCG@10", Path("o"))
    assert _messages(caplog) == [
        f"5-shot, 10 runs: accuracy 0.5000 +- 0.0100, macro-F1 0.4000 +- 0.0200; details in {Path('o/fewshot.json')}",
        "2-fold cross-validation over 30 queries: dense nDCG@10 0.4123, hybrid 0.5000 (fusion alpha per fold: "
        "0.60, 0.45); runs o/dense.trec and "
        f"o/hybrid.trec; details in {Path('o/crossval.json')}"]


@pytest.mark.parametrize("show", [True, False])
def test_python_api_shows_the_epoch_bar_when_asked(tiny_bert, tmp_path, capsys, show):
    from graphdoc.finetune import finetune_classification
    from graphdoc.finetune.config import ClassificationConfig

    files = labelled_files(tmp_path)
    finetune_classification(files["train"], files["dev"], tmp_path / "run", model=str(tiny_bert),
                            config=ClassificationConfig(epochs=1), show_progress_bar=show)
    bars = [line for line in capsys.readouterr().err.splitlines() if line.startswith("run: epoch 1/1: 100%")]
    assert len(bars) == (1 if show else 0)  # in a log (stderr is not a terminal here): one line as the epoch ends
