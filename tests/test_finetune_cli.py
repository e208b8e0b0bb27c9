"""``graphdoc finetune`` and ``graphdoc predict``: runs in-process, error lines."""

from __future__ import annotations

import json
import re

import pytest
import torch

from _finetune_helpers import labelled_files, ranking_files

from graphdoc.cli import main
from graphdoc.errors import GraphDocError


@pytest.fixture(autouse=True)
def cli_state(restore_cli_state):
    yield


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


def test_finetune_classification_with_a_label_field_of_another_name(tiny_bert, tmp_path, capsys):
    files = labelled_files(tmp_path)
    for split in ("train", "dev"):
        records = [json.loads(line) for line in files[split].read_text().splitlines()]
        renamed = [{"post": r.pop("_id"), "newsgroup": r.pop("label"), **r} for r in records]
        files[split].write_text("".join(json.dumps(r) + "\n" for r in renamed))
    args = ["-q", "finetune", "--task", "classification", "--train", str(files["train"]), "--dev", str(files["dev"]),
            "--output", str(tmp_path / "run"), "--model", str(tiny_bert), "--epochs", "1", "--id-field", "post"]
    assert main(args) == 1
    assert "has no 'label' field (a label field of another name: label_field, --label-field)" in \
        capsys.readouterr().err
    assert main([*args, "--label-field", "newsgroup"]) == 0
    summary = json.loads((tmp_path / "run" / "finetune.json").read_text())
    assert summary["epochs"] == 1 and "dev_scores" in summary


def test_finetune_ranking_cli(tiny_bert, tmp_path):
    files = ranking_files(tmp_path)
    assert main(["-q", "finetune", "--task", "ranking", "--corpus", str(files["corpus"]), "--queries",
                 str(files["queries"]), "--qrels", str(files["qrels"]), "--output", str(tmp_path / "r"),
                 "--model", str(tiny_bert), "--epochs", "1", "--batch-size", "4", "--negative-pool", "judged"]) == 0
    assert (tmp_path / "r" / "model" / "model.safetensors").is_file()
    saved = json.loads((tmp_path / "r" / "finetune_config.json").read_text())["ranking"]
    assert saved["negative_pool"] == "judged" and (tmp_path / "r" / "negatives" / "bm25-judged.json").is_file()


def test_seed_flag_sets_the_runs_seed_and_its_weights(tiny_bert, tmp_path, capsys):
    files = ranking_files(tmp_path)

    def run(out: str, *extra: str) -> dict:
        assert main(["-q", "finetune", "--task", "ranking", "--corpus", str(files["corpus"]), "--queries",
                     str(files["queries"]), "--qrels", str(files["qrels"]), "--output", str(tmp_path / out),
                     "--model", str(tiny_bert), "--epochs", "1", "--batch-size", "4", *extra]) == 0
        from safetensors.torch import load_file
        return load_file(tmp_path / out / "model" / "model.safetensors")

    seven, again, default = run("a", "--seed", "7"), run("b", "--seed", "7"), run("c")
    assert json.loads((tmp_path / "a" / "finetune_config.json").read_text())["ranking"]["seed"] == 7
    assert json.loads((tmp_path / "c" / "finetune_config.json").read_text())["ranking"]["seed"] == 42
    assert all(torch.equal(seven[k], again[k]) for k in seven)
    assert not all(torch.equal(seven[k], default[k]) for k in seven)
    capsys.readouterr()
    assert main(["-q", "finetune", "--task", "ranking", "--corpus", str(files["corpus"]), "--queries",
                 str(files["queries"]), "--qrels", str(files["qrels"]), "--output", str(tmp_path / "d"),
                 "--model", str(tiny_bert), "--seed", "-1"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "seed" in err[0], err
    assert not (tmp_path / "d").exists()


def test_error_lines(tiny_bert, tmp_path, capsys):
    assert main(["finetune", "--task", "ranking", "--output", str(tmp_path / "x")]) == 1
    assert capsys.readouterr().err.strip() == \
        "graphdoc finetune: error: --task ranking needs --corpus, --queries, --qrels"
    (tmp_path / "m").mkdir()
    assert main(["predict", "--model", str(tmp_path / "m"), "--input", "x", "--output", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("graphdoc predict: error:") and "not a saved classifier" in err and "\n" not in err
    (tmp_path / "bad.yaml").write_text("ranking:\n  epochs: 0\n")
    assert main(["finetune", "--task", "ranking", "--config", str(tmp_path / "bad.yaml"), "--corpus", "c",
                 "--queries", "q", "--qrels", "r", "--output", str(tmp_path / "y")]) == 1
    assert "epochs must be positive" in capsys.readouterr().err


def test_finetune_under_torchrun_stops_before_writing(tiny_bert, tmp_path, capsys, monkeypatch):
    from graphdoc.finetune import finetune_classification

    files = labelled_files(tmp_path)
    train, dev = files["train"], files["dev"]
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun --nproc_per_node 2 sets it: each process would run it all
    expected = ("fine-tuning runs in one process, not data-parallel (WORLD_SIZE is 2): run graphdoc finetune "
                "without torchrun (only pretrain runs under torchrun)")
    assert main(["finetune", "--task", "classification", "--model", str(tiny_bert), "--train", str(train),
                 "--dev", str(dev), "--output", str(tmp_path / "run")]) == 1
    assert capsys.readouterr().err.strip() == f"graphdoc finetune: error: {expected}"
    with pytest.raises(GraphDocError, match=re.escape(expected)):
        finetune_classification(train, dev, tmp_path / "run", model=str(tiny_bert))
    assert not (tmp_path / "run").exists()
    monkeypatch.setenv("WORLD_SIZE", "1")  # torchrun --nproc_per_node 1: one process, as without torchrun
    assert main(["finetune", "--task", "classification", "--model", str(tiny_bert), "--train", str(train),
                 "--dev", str(dev), "--output", str(tmp_path / "run"), "--epochs", "1"]) == 0


def test_a_config_for_the_other_task_only_is_a_warning(tiny_bert, tmp_path, capsys):
    files = labelled_files(tmp_path)
    config = tmp_path / "ranking.yaml"
    config.write_text("ranking:\n  hard_negatives: 2\n", encoding="utf-8")
    assert main(["-q", "finetune", "--task", "classification", "--train", str(files["train"]), "--dev",
                 str(files["dev"]), "--output", str(tmp_path / "run"), "--model", str(tiny_bert), "--epochs", "1",
                 "--config", str(config)]) == 0
    assert capsys.readouterr().err.strip() == (f"WARNING graphdoc.cli: {config} has settings for ranking and none for "
                                               "classification: --task classification runs with the built-in "
                                               "classification settings")


def test_shipped_configs_load_and_unknown_keys_are_errors(tmp_path):
    from pathlib import Path

    import pytest

    from graphdoc.errors import GraphDocError
    from graphdoc.finetune import load_finetune_setup

    configs = Path(__file__).resolve().parents[1] / "graphdoc" / "configs"
    assert load_finetune_setup(configs / "finetune-ranking.yaml").ranking.hard_negatives == 4
    assert load_finetune_setup(configs / "finetune-classification.yaml").classification.max_passages == 4
    (tmp_path / "x.yaml").write_text("ranking:\n  hard_negative: 3\n")
    with pytest.raises(GraphDocError, match="unknown config key ranking.hard_negative; valid keys: ranking.lr"):
        load_finetune_setup(tmp_path / "x.yaml")


def test_finetune_backbone_flat_classification_and_ranking(tiny_bert, tmp_path, capsys):
    from graphdoc.backbones import load_model
    from graphdoc.finetune import DocumentClassifier
    from graphdoc.flat_encoder import FlatEncoder

    files = labelled_files(tmp_path)
    base = ["-q", "finetune", "--backbone", "flat", "--model", str(tiny_bert), "--epochs", "1"]
    # frozen: the head alone over fixed FirstP vectors; not frozen: the encoder trains too
    for mode in ("--frozen-encoder", "--no-frozen-encoder"):
        out = tmp_path / f"cls{mode}"
        assert main([*base, "--task", "classification", "--train", str(files["train"]), "--dev", str(files["dev"]),
                     "--output", str(out), mode]) == 0
        assert set(json.loads((out / "finetune.json").read_text())["dev_scores"]) == {"accuracy", "macro_f1"}
        assert isinstance(DocumentClassifier.from_pretrained(out / "model").encoder, FlatEncoder)
    rank = ranking_files(tmp_path)
    args = ["--task", "ranking", "--corpus", str(rank["corpus"]), "--queries", str(rank["queries"]), "--qrels",
            str(rank["qrels"]), "--batch-size", "4"]
    assert main([*base, *args, "--output", str(tmp_path / "r"), "--no-frozen-encoder"]) == 0
    trained = load_model(str(tmp_path / "r" / "model"))
    assert isinstance(trained, FlatEncoder)
    start = load_model(str(tiny_bert), backbone="flat")
    changed = [not torch.equal(a, b) for a, b in zip(trained.state_dict().values(), start.state_dict().values())]
    assert any(changed)  # the encoder itself was fine-tuned
    # a flat model over a frozen encoder has nothing to rank with; a saved flat model is not a graph one
    assert main([*base, *args, "--output", str(tmp_path / "r2")]) == 1
    assert "a flat model has nothing to train over a frozen encoder" in capsys.readouterr().err
    assert main(["-q", "finetune", "--backbone", "graph", "--model", str(tmp_path / "r" / "model"), *args,
                 "--output", str(tmp_path / "r3")]) == 1
    assert capsys.readouterr().err.strip() == (f"graphdoc finetune: error: {tmp_path / 'r' / 'model'} is a saved flat "
                                               "model; it cannot be loaded as a graph one")


def test_finetune_setup_reads_a_flat_model_section(tmp_path):
    from graphdoc.finetune import load_finetune_setup
    from graphdoc.flat_config import FlatModelConfig

    (tmp_path / "f.yaml").write_text("backbone: flat\nmodel:\n  graph: {document: mean}\n")
    setup = load_finetune_setup(tmp_path / "f.yaml")
    assert isinstance(setup.model, FlatModelConfig) and setup.model.graph.document == "mean"
    graph = setup.with_backbone("graph")
    assert graph.backbone == "graph" and graph.model.passage_encoder == setup.model.passage_encoder


def test_finetune_setup_without_a_backbone_reads_flat_model_settings_as_flat(tmp_path, capsys):
    """As ``graphdoc embed`` and ``pretrain`` read them: ``graph: {graph_type: flat}`` is a flat model's section."""
    from graphdoc.finetune import load_finetune_setup
    from graphdoc.flat_config import FlatModelConfig

    path = tmp_path / "f.yaml"
    path.write_text("model:\n  graph: {graph_type: flat, document: mean}\nclassification: {epochs: 2}\n")
    for backbone in (None, "flat"):
        setup = load_finetune_setup(path, backbone)
        assert isinstance(setup.model, FlatModelConfig) and setup.model.graph.document == "mean"
        assert (setup.backbone, setup.classification.epochs) == ("flat", 2)
    path.write_text("model:\n  graph: {graph_type: flat}\n")
    assert main(["-q", "finetune", "--task", "classification", "--train", "t", "--dev", "d", "--config", str(path),
                 "--backbone", "graph", "--output", str(tmp_path / "run")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"graphdoc finetune: error: {path}: model.graph.graph_type must be one of full, section; got 'flat'"]
    assert not (tmp_path / "run").exists()


def test_finetune_precision_flag_is_the_saved_models(tiny_bert, tmp_path, monkeypatch):
    """``--precision`` replaces the start model's ``passage_encoder.precision``; the fine-tuned model keeps it.
    A precision that does not exist is one error line from the API too."""
    import pytest

    from graphdoc import device as device_module
    from graphdoc.errors import GraphDocError
    from graphdoc.finetune import finetune_classification

    monkeypatch.setattr(device_module, "cpu_supports_bf16", lambda: True)
    files = labelled_files(tmp_path)
    for precision in ("bf16", "fp32"):
        out = tmp_path / precision
        assert main(["-q", "finetune", "--task", "classification", "--train", str(files["train"]), "--dev",
                     str(files["dev"]), "--output", str(out), "--model", str(tiny_bert), "--epochs", "1",
                     "--precision", precision]) == 0
        saved = json.loads((out / "model" / "encoder" / "config.json").read_text())
        assert saved["model"]["passage_encoder"]["precision"] == precision
    with pytest.raises(GraphDocError, match=r"^precision must be one of auto, fp32, fp16, bf16; got 'int8'$"):
        finetune_classification(files["train"], files["dev"], tmp_path / "bad", model=str(tiny_bert),
                                precision="int8")
    assert not (tmp_path / "bad").exists()


def test_an_index_of_a_fine_tuned_ranker_scores_as_it_was_trained(tiny_bert, tmp_path, capsys):
    """The passage weight, fusion and similarity of the fine-tuning travel with the model into a new index
    (the index defaults, passage_weight 1.0 and cosine, would score it otherwise than training selected it)."""
    files = ranking_files(tmp_path)
    (tmp_path / "ft.yaml").write_text("ranking:\n  passage_weight: 0.7\n  fusion_alpha: 0.3\n  similarity: dot\n"
                                      "  fusion_normalization: minmax\n", encoding="utf-8")
    assert main(["-q", "finetune", "--task", "ranking", "--corpus", str(files["corpus"]), "--queries",
                 str(files["queries"]), "--qrels", str(files["qrels"]), "--output", str(tmp_path / "r"),
                 "--model", str(tiny_bert), "--config", str(tmp_path / "ft.yaml"), "--epochs", "1",
                 "--batch-size", "4"]) == 0
    saved = json.loads((tmp_path / "r" / "model" / "config.json").read_text())["search"]
    assert saved == {"dense": {"passage_weight": 0.7}, "metric": "ip",
                     "fusion": {"method": "weighted", "alpha": 0.3, "normalization": "minmax", "rrf_k": 60}}
    index = ["index", "--corpus", str(files["corpus"]), "--model", str(tmp_path / "r" / "model")]
    capsys.readouterr()
    assert main([*index, "--index-dir", str(tmp_path / "idx")]) == 0
    assert "searching as the model was fine-tuned: passage_weight 0.7, weighted fusion alpha 0.3 (minmax), ip" \
        in capsys.readouterr().err
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert (manifest["dense"], manifest["fusion"]["alpha"], manifest["metric"]) == ({"passage_weight": 0.7}, 0.3, "ip")
    assert main([*index, "--index-dir", str(tmp_path / "cos"), "--metric", "cosine"]) == 0  # a flag still wins
    assert json.loads((tmp_path / "cos" / "manifest.json").read_text())["metric"] == "cosine"
    err = capsys.readouterr().err  # (the log named the model's metric, ip, not the index's)
    assert "searching as the model was fine-tuned: passage_weight 0.7, weighted fusion alpha 0.3 (minmax), cosine" \
        in err
    assert main([*index, "--index-dir", str(tmp_path / "nopass"), "--no-passages"]) == 0
    assert ("the model was fine-tuned to score with passage_weight 0.7, but --no-passages keeps no passage vectors: "
            "dense search scores by the document vector alone") in capsys.readouterr().err
    assert main(["-q", "index", "--corpus", str(files["corpus"]), "--model", str(tiny_bert), "--index-dir",
                 str(tmp_path / "plain")]) == 0
    plain = json.loads((tmp_path / "plain" / "manifest.json").read_text())
    assert (plain["dense"], plain["fusion"]["alpha"], plain["metric"]) == ({"passage_weight": 1.0}, 0.6, "cosine")
