"""Input checks: config value types, unknown labels and qrels ids, options of the other task, bm25s's debug
lines, pretraining batches too small to have negatives."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from _finetune_helpers import labelled_files, ranking_files, write_jsonl
from _retrieval_helpers import error_line

from graphdoc.cli import main
from graphdoc.errors import GraphDocError
from graphdoc.finetune.config import load_finetune_setup
from graphdoc.finetune.data import read_known_qrels
from graphdoc.training.config import PretrainConfig, load_setup

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "graphdoc" / "configs").glob("*.yaml"))


@pytest.fixture(autouse=True)
def _restore(restore_cli_state):
    yield


def _yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# A. config values of the wrong type

@pytest.mark.parametrize("text, message", [
    ('classification: {frozen_encoder: "no"}', "classification.frozen_encoder must be a boolean (true or false); got 'no'"),
    ("ranking: {frozen_encoder: 1}", "ranking.frozen_encoder must be a boolean (true or false); got 1"),
    ("classification: {cache_dir: 5}", "classification.cache_dir must be a string; got 5"),
    ("ranking: {eval_measure: [1]}", "ranking.eval_measure must be a string; got [1]"),
    ("classification: {epochs: null}", "classification.epochs must be an integer; got None"),
    ("model: {graph: {dropout: high}}", "model.graph.dropout must be a number; got 'high'"),
    ("model: {graph: {num_layers: 2.5}}", "model.graph.num_layers must be an integer; got 2.5"),
    ("model: {passage_encoder: {normalize: 'yes'}}",
     "model.passage_encoder.normalize must be a boolean (true or false); got 'yes'"),
    ("model: {passage_encoder: {model_name_or_path: 7}}",
     "model.passage_encoder.model_name_or_path must be a string; got 7"),
    ("model: {chunker: {title: false}}", "model.chunker.title must be a string; got False"),
    ("backbone: flat\nmodel: {graph: {document: 3}}", "model.graph.document must be a string; got 3"),
])
def test_finetune_config_values_of_the_wrong_type(tmp_path, text, message):
    with pytest.raises(GraphDocError) as info:
        load_finetune_setup(_yaml(tmp_path, text))
    assert str(info.value) == f"{tmp_path / 'config.yaml'}: {message}"  # the file, and the key within it


def test_numbers_still_accept_ints_and_yaml_strings(tmp_path):
    setup = load_finetune_setup(_yaml(tmp_path, "ranking: {lr: 1, temperature: 5e-2, frozen_encoder: false}\n"
                                                "classification: {shots: null, cache_dir: cache}\n"
                                                "model: {graph: {dropout: 0}, passage_encoder: {normalize: null}}"))
    assert (setup.ranking.lr, setup.ranking.temperature, setup.ranking.frozen_encoder) == (1.0, 0.05, False)
    assert isinstance(setup.ranking.lr, float) and isinstance(setup.model.graph.dropout, float)
    assert (setup.classification.shots, setup.classification.cache_dir) == (None, "cache")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_still_load(path):
    from graphdoc.config import load_config_file

    loader = load_setup if path.name.startswith(("pretrain-", "docsplit-")) else \
        load_finetune_setup if path.name.startswith("finetune-") else load_config_file
    assert loader(path) is not None


def test_cli_rejects_a_string_for_a_bool(tmp_path, capsys):
    config = _yaml(tmp_path, 'classification: {frozen_encoder: "no"}\n')
    assert main(["finetune", "--task", "classification", "--train", "t", "--dev", "d", "--config", str(config),
                 "--output", str(tmp_path / "run")]) == 1
    assert error_line(capsys, "finetune") == \
        f"graphdoc finetune: error: {config}: classification.frozen_encoder must be a boolean (true or false); got 'no'"
    config = _yaml(tmp_path, 'pretrain: {frozen_encoder: "no"}\n')
    assert main(["pretrain", "--corpus", "c", "--config", str(config), "--output", str(tmp_path / "run")]) == 1
    assert error_line(capsys, "pretrain") == \
        f"graphdoc pretrain: error: {config}: pretrain.frozen_encoder must be a boolean (true or false); got 'no'"


# B. classification labels missing from the training set

@pytest.mark.parametrize("split", ["dev", "test"])
def test_unknown_labels_are_an_error_before_any_model_is_loaded(tmp_path, capsys, monkeypatch, split):
    from graphdoc import finetune

    files = labelled_files(tmp_path)
    records = [json.loads(line) for line in files["dev"].read_text().splitlines()]
    records[0]["label"], records[1]["label"] = "plants", "minerals"
    other = write_jsonl(tmp_path / "other.jsonl", records)
    monkeypatch.setattr(finetune, "load_start_model", lambda *a, **k: pytest.fail("the model was loaded"))
    argv = ["finetune", "--task", "classification", "--train", str(files["train"]), "--output", str(tmp_path / "run"),
            "--dev", str(other if split == "dev" else files["dev"])]
    assert main(argv + (["--test", str(other)] if split == "test" else [])) == 1
    assert error_line(capsys, "finetune") == \
        f"graphdoc finetune: error: {other}: labels not in the training set: 'minerals', 'plants'"


# C. qrels ids that the queries or the corpus do not hold

def _data(queries=("q0", "q1"), docs=("a", "b")):
    return SimpleNamespace(query_texts={q: q for q in queries}, doc_ids=list(docs))


def test_unknown_qrels_ids_are_dropped_with_one_warning(tmp_path, caplog):
    path = tmp_path / "qrels.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq0\ta\t1\nq0\tnodoc\t1\nq99\ta\t1\nq99\tb\t0\nq1\tgone\t1\n")
    with caplog.at_level(logging.WARNING, logger="graphdoc.finetune.data"):
        assert read_known_qrels(path, _data(), train=True) == {"q0": {"a": 1}}
    assert [r.getMessage() for r in caplog.records] == [
        (f"{path}: 2 judgements of a query not in the queries (q99), 2 of a document not in the corpus (nodoc); "
         "ignored")]


def test_known_qrels_pass_silently_and_dev_qrels_in_memory_are_named(caplog):
    with caplog.at_level(logging.WARNING, logger="graphdoc.finetune.data"):
        assert read_known_qrels({"q0": {"a": 1, "b": 0}}, _data()) == {"q0": {"a": 1, "b": 0}}
        assert not caplog.records
        with pytest.raises(GraphDocError) as info:
            read_known_qrels({"q0": {"c": 1}}, _data())
    assert [r.getMessage() for r in caplog.records] == [
        "the dev qrels: 1 judgement of a document not in the corpus (c); ignored"]
    assert str(info.value) == ("the dev qrels: no relevant judgement of a query in the queries and a document in "
                               "the corpus to score the epochs on")


def test_training_qrels_with_nothing_known_left_are_an_error(tmp_path):
    path = tmp_path / "qrels.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq9\ta\t1\nq0\tb\t0\n")
    with pytest.raises(GraphDocError) as info:
        read_known_qrels(path, _data(), train=True)
    assert str(info.value) == (f"{path}: no relevant judgement of a query in the queries and a document in the "
                               "corpus to train on")


# C + E. a ranking run at default verbosity: the qrels warning and graphdoc's INFO lines, no bm25s DEBUG

def test_ranking_cli_warns_of_dropped_judgements_and_keeps_bm25s_debug_out(tiny_bert, tmp_path, capsys,
                                                                          monkeypatch):
    files = ranking_files(tmp_path)
    with files["qrels"].open("a") as f:
        f.write("q99\tfox-a\t1\nq0\tnodoc\t1\n")
    # bm25s is imported lazily, after main sets up logging, and sets its logger to DEBUG then
    monkeypatch.delitem(sys.modules, "bm25s", raising=False)
    level = logging.getLogger("bm25s").level
    try:
        assert main(["finetune", "--task", "ranking", "--corpus", str(files["corpus"]), "--queries",
                     str(files["queries"]), "--qrels", str(files["qrels"]), "--dev-qrels", str(files["qrels"]),
                     "--output", str(tmp_path / "run"), "--model", str(tiny_bert), "--epochs", "1",
                     "--batch-size", "4"]) == 0
    finally:
        logging.getLogger("bm25s").setLevel(level)
    lines = capsys.readouterr().err.splitlines()
    warning = (f"WARNING graphdoc.finetune.data: {files['qrels']}: 1 judgement of a query not in the queries (q99), "
               "1 of a document not in the corpus (nodoc); ignored")
    assert lines.count(warning) == 2  # training and dev qrels
    assert not [line for line in lines if "bm25s" in line or line.startswith("DEBUG")]
    assert any(line.startswith("INFO graphdoc.finetune.ranking_trainer: epoch 1/1") for line in lines)


# D. options of the other task, bad --folds

@pytest.mark.parametrize("argv, message", [
    (["--task", "classification", "--train", "t", "--dev", "d", "--folds", "3"],
     "--task classification does not take --folds (for --task ranking only)"),
    (["--task", "classification", "--train", "t", "--dev", "d", "--corpus", "c", "--queries", "q", "--qrels", "r",
      "--dev-qrels", "r", "--negative-pool", "judged"],
     ("--task classification does not take --corpus, --queries, --qrels, --dev-qrels, --negative-pool "
      "(for --task ranking only)")),
    (["--task", "ranking", "--corpus", "c", "--queries", "q", "--qrels", "r", "--train", "t", "--dev", "d",
      "--test", "e", "--few-shot", "2", "--repeats", "2", "--objective", "supcon", "--temperature", "0.2"],
     ("--task ranking does not take --train, --dev, --test, --few-shot, --repeats, --objective, --temperature "
      "(for --task classification only)")),
    (["--task", "ranking", "--corpus", "c", "--queries", "q", "--qrels", "r", "--folds", "0"],
     "--folds must be at least 2; got 0"),
    (["--task", "ranking", "--corpus", "c", "--queries", "q", "--qrels", "r", "--folds", "1"],
     "--folds must be at least 2; got 1"),
    (["--task", "ranking", "--corpus", "c", "--queries", "q", "--qrels", "r", "--folds", "-2"],
     "--folds must be at least 2; got -2"),
    (["--task", "ranking", "--corpus", "c", "--queries", "q", "--qrels", "r", "--folds", "3", "--dev-qrels", "r"],
     ("--folds does not take --dev-qrels: k-fold cross-validation holds out its own dev share of each fold's "
      "training queries (ranking.fold_dev_fraction)")),
])
def test_finetune_options_that_would_be_ignored_are_errors(tmp_path, capsys, argv, message):
    assert main(["finetune", *argv, "--output", str(tmp_path / "run")]) == 1
    assert error_line(capsys, "finetune") == f"graphdoc finetune: error: {message}"
    assert not (tmp_path / "run").exists()


# F. pretraining needs two documents per step for in-batch negatives

def test_pretrain_batch_of_one_document_is_an_error(tmp_path, capsys):
    message = ("pretrain.batch_size must be at least 2 (the other documents of a batch are the negatives; "
               "batch_size counts over all processes); got 1")
    with pytest.raises(GraphDocError) as info:
        PretrainConfig(batch_size=1)
    assert str(info.value) == message
    assert main(["pretrain", "--corpus", "c", "--batch-size", "1", "--output", str(tmp_path / "run")]) == 1
    assert error_line(capsys, "pretrain") == f"graphdoc pretrain: error: {message}"
    assert PretrainConfig(batch_size=2).batch_size == 2


def test_path_settings_accept_a_path_object(tmp_path):
    from graphdoc.config import PassageEncoderConfig
    from graphdoc.finetune.config import RankingConfig

    assert RankingConfig(cache_dir=tmp_path / "cache").cache_dir == str(tmp_path / "cache")
    assert PassageEncoderConfig(model_name_or_path=tmp_path).model_name_or_path == str(tmp_path)


@pytest.mark.parametrize("which", ["qrels", "dev_qrels", "queries", "corpus"])
def test_missing_ranking_inputs_are_reported_before_the_model_loads(tmp_path, which):
    from graphdoc.finetune import finetune_ranking

    files = ranking_files(tmp_path)
    args = {"corpus": files["corpus"], "queries": files["queries"], "qrels": files["qrels"], "dev_qrels": None,
            which: tmp_path / "missing.tsv"}
    with pytest.raises(GraphDocError, match=r"missing\.tsv: no such file or folder, and not a named corpus"):
        finetune_ranking(args["corpus"], args["queries"], args["qrels"], tmp_path / "run",
                         dev_qrels=args["dev_qrels"], model=str(tmp_path / "no-model"))  # never loaded
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["config.yaml", "labels.json"])
def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path, name):
    from graphdoc.config import read_config_file

    path = tmp_path / name
    path.write_bytes("epochs: 3 # é\n".encode("utf-16"))
    with pytest.raises(GraphDocError, match=rf"^{re.escape(str(path))}: not UTF-8 text \(byte 0\)$"):
        read_config_file(path)


def test_embed_names_a_setup_files_model_settings_by_their_key_in_it(tmp_path, capsys):
    from graphdoc.encoder import GraphDocEncoder, config_from_file

    config = _yaml(tmp_path, "model: {graph: {heads: 0}}\npretrain: {epochs: 1}\n")  # a pretrain setup
    expected = f"{config}: model.graph.heads must be >= 1; got 0"
    with pytest.raises(GraphDocError) as info:
        config_from_file(GraphDocEncoder, config)
    assert str(info.value) == expected
    corpus = str(write_jsonl(tmp_path / "c.jsonl", [{"_id": "d1", "text": "One short document."}]))
    assert main(["-q", "embed", "--corpus", corpus, "--output", str(tmp_path / "e.npy"), "--config", str(config)]) == 1
    assert error_line(capsys, "embed") == f"graphdoc embed: error: {expected}"
    config = _yaml(tmp_path, "graph: {heads: 0}\n")  # a model config: its keys are at the top
    assert main(["-q", "embed", "--corpus", corpus, "--output", str(tmp_path / "e.npy"), "--config", str(config)]) == 1
    assert error_line(capsys, "embed") == f"graphdoc embed: error: {config}: graph.heads must be >= 1; got 0"
