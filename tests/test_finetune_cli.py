"""``graphdoc finetune`` and ``graphdoc predict``: runs in-process, error lines."""

from __future__ import annotations

import json

from _finetune_helpers import labelled_files, ranking_files

from graphdoc.cli import main


def test_finetune_classification_then_predict(tiny_bert, tmp_path, capsys):
    files = labelled_files(tmp_path)
    assert main(["-q", "finetune", "--task", "classification", "--train", str(files["train"]), "--dev",
                 str(files["dev"]), "--output", str(tmp_path / "run"), "--model", str(tiny_bert),
                 "--epochs", "1"]) == 0
    summary = json.loads((tmp_path / "run" / "finetune.json").read_text())
    assert summary["epochs"] == 1 and "dev_scores" in summary
    assert main(["-q", "predict", "--model", str(tmp_path / "run" / "model"), "--input", str(files["dev"]),
                 "--output", str(tmp_path / "p.jsonl")]) == 0
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 12


def test_finetune_ranking_cli(tiny_bert, tmp_path):
    files = ranking_files(tmp_path)
    assert main(["-q", "finetune", "--task", "ranking", "--corpus", str(files["corpus"]), "--queries",
                 str(files["queries"]), "--qrels", str(files["qrels"]), "--output", str(tmp_path / "r"),
                 "--model", str(tiny_bert), "--epochs", "1", "--batch-size", "4"]) == 0
    assert (tmp_path / "r" / "model" / "model.safetensors").is_file()


def test_error_lines(tiny_bert, tmp_path, capsys):
    assert main(["finetune", "--task", "ranking", "--output", str(tmp_path / "x")]) == 1
    assert capsys.readouterr().err.strip() == \
        "graphdoc finetune: error: --task ranking needs --corpus, --queries, --qrels"
    assert main(["predict", "--model", str(tmp_path), "--input", "x", "--output", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("graphdoc predict: error:") and "not a saved classifier" in err and "\n" not in err
    (tmp_path / "bad.yaml").write_text("ranking:\n  epochs: 0\n")
    assert main(["finetune", "--task", "ranking", "--config", str(tmp_path / "bad.yaml"), "--corpus", "c",
                 "--queries", "q", "--qrels", "r", "--output", str(tmp_path / "y")]) == 1
    assert "epochs must be positive" in capsys.readouterr().err


def test_shipped_configs_load_and_unknown_keys_are_errors(tmp_path):
    from pathlib import Path

    import pytest

    from graphdoc.errors import GraphDocError
    from graphdoc.finetune import load_finetune_setup

    configs = Path(__file__).resolve().parents[1] / "configs"
    assert load_finetune_setup(configs / "finetune-ranking.yaml").ranking.hard_negatives == 4
    assert load_finetune_setup(configs / "finetune-classification.yaml").classification.max_passages == 4
    (tmp_path / "x.yaml").write_text("ranking:\n  hard_negative: 3\n")
    with pytest.raises(GraphDocError, match="unknown config key ranking.hard_negative; valid keys: ranking.lr"):
        load_finetune_setup(tmp_path / "x.yaml")
