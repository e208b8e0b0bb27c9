"""``graphdoc finetune`` resume and option checks: another start model, a folder holding another kind of run,
an empty --output, damaged checkpoints, a missing best model, options that would be ignored, --help defaults."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from _finetune_helpers import labelled_files, ranking_files

from graphdoc.cli import main
from graphdoc.errors import GraphDocError
from graphdoc.finetune import (
    ClassificationConfig,
    RankingConfig,
    finetune_classification,
    finetune_ranking,
)
from graphdoc.training import checkpoint as ckpt

RANKING = {"epochs": 1, "batch_size": 4, "hard_negatives": 1, "max_passages": 4, "fold_dev_fraction": 0.25}
CLASSIFICATION = {"epochs": 1, "batch_size": 4, "max_passages": 2}  # what the CLI calls below give


def _files(folder) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes: a refused call must leave the run as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _state(run) -> tuple:
    path = ckpt.list_checkpoints(run)[-1] / ckpt.STATE_NAME
    return path, json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(autouse=True)
def cli_state(restore_cli_state):
    """The CLI tests here configure logging; undo it for the tests that read log records after them."""
    yield


@pytest.fixture(scope="module")
def runs(tiny_bert, tmp_path_factory):
    """A finished run of each kind (all from tiny_bert): ranking, 2-fold ranking, classification, 2-shot."""
    root = tmp_path_factory.mktemp("runs")
    rank, labelled = ranking_files(root), labelled_files(root)
    ranking_args = (rank["corpus"], rank["queries"], rank["qrels"])
    finetune_ranking(*ranking_args, root / "ranking", config=RankingConfig(**RANKING), model=str(tiny_bert))
    finetune_ranking(*ranking_args, root / "kfold", config=RankingConfig(**RANKING), model=str(tiny_bert), folds=2)
    cls_args = (labelled["train"], labelled["dev"])
    finetune_classification(*cls_args, root / "classification", config=ClassificationConfig(**CLASSIFICATION),
                            model=str(tiny_bert))
    finetune_classification(*cls_args, root / "fewshot", model=str(tiny_bert),
                            config=ClassificationConfig(**CLASSIFICATION, shots=2, repeats=1))
    return {"root": root, "ranking": ranking_args, "classification": cls_args}


# the call, as (task, folds, shots, resume); the folder; the one line expected
KIND_CASES = [
    (("ranking", 2, None, False), "ranking",
     "{out} already holds a ranking run; choose another --output for a k-fold ranking run (--folds 2)"),
    (("ranking", None, None, False), "kfold",
     "{out} already holds a k-fold ranking run (--folds 2); choose another --output for a ranking run"),
    (("classification", None, None, False), "kfold",
     "{out} already holds a k-fold ranking run (--folds 2); choose another --output for a classification run"),
    (("classification", None, 2, False), "classification",
     ("{out} already holds a classification run; choose another --output for a few-shot classification run "
      "(--few-shot 2)")),
    (("ranking", 3, None, True), "ranking",
     "cannot resume {out} as a k-fold ranking run (--folds 3): it holds a ranking run"),
    (("ranking", None, None, True), "kfold",
     "cannot resume {out} as a ranking run: it holds a k-fold ranking run (--folds 2)"),
    (("classification", None, None, True), "ranking",
     "cannot resume {out} as a classification run: it holds a ranking run"),
    (("ranking", None, None, True), "classification",
     "cannot resume {out} as a ranking run: it holds a classification run"),
    (("ranking", 3, None, True), "kfold",
     "cannot resume {out}/fold-0 over different training data: the run was started with --folds 2, not --folds 3"),
    (("classification", None, None, True), "fewshot",
     "cannot resume {out} as a classification run: it holds a few-shot classification run (--few-shot 2)"),
]


@pytest.mark.parametrize(("call", "folder", "message"), KIND_CASES)
def test_a_folder_holding_another_kind_of_run_is_refused_before_a_model_loads(runs, call, folder, message):
    task, folds, shots, resume = call
    out = runs["root"] / folder
    before = _files(out)
    missing_model = str(runs["root"] / "no-such-model")  # never loaded: the folder is checked first
    with pytest.raises(GraphDocError) as err:
        if task == "ranking":
            finetune_ranking(*runs["ranking"], out, config=RankingConfig(**RANKING), model=missing_model,
                             folds=folds, resume=resume)
        else:
            finetune_classification(*runs["classification"], out, model=missing_model, resume=resume,
                                    config=ClassificationConfig(**CLASSIFICATION, shots=shots, repeats=1))
    assert str(err.value) == message.format(out=out)
    assert _files(out) == before


def test_a_run_kept_before_its_kind_was_recorded_is_still_recognised(runs, tmp_path):
    shutil.copytree(runs["root"] / "ranking", tmp_path / "old")
    path, state = _state(tmp_path / "old")
    del state["run"]
    path.write_text(json.dumps(state), encoding="utf-8")
    with pytest.raises(GraphDocError, match=r"already holds a ranking run; choose another --output for a k-fold"):
        finetune_ranking(*runs["ranking"], tmp_path / "old", config=RankingConfig(**RANKING), model="x", folds=2)


def test_resume_from_another_start_model_is_refused_in_one_line(runs, tiny_bert, tiny_roberta, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    train, dev = runs["classification"]
    shutil.copytree(runs["root"] / "classification", tmp_path / "run")
    before = _files(tmp_path / "run")
    # tiny_bert's copy with one weight changed: the same shapes, other weights
    other = shutil.copytree(tiny_bert, tmp_path / "other")
    weights = load_file(str(other / "model.safetensors"))
    weights["pooler.dense.bias"] = weights["pooler.dense.bias"] + 1.0
    save_file(weights, str(other / "model.safetensors"), metadata={"format": "pt"})
    base = ["-q", "finetune", "--task", "classification", "--train", str(train), "--dev", str(dev), "--epochs",
            "1", "--batch-size", "4", "--max-passages", "2", "--output", str(tmp_path / "run"), "--resume"]
    for model in (other, tiny_roberta):  # tiny_roberta: other shapes (a 24-line state_dict error before)
        assert main([*base, "--model", str(model)]) == 1
        assert capsys.readouterr().err.strip() == (
            f"graphdoc finetune: error: cannot resume with model={str(model)!r}: the run was started from "
            f"{str(tiny_bert)!r} (other weights)")
    assert _files(tmp_path / "run") == before  # refused before a passage was encoded into its cache
    # the run's own model folder, changed since the run started
    path, state = _state(tmp_path / "run")
    path.write_text(json.dumps(dict(state, start_model=dict(state["start_model"], name=str(other)))),
                    encoding="utf-8")
    with pytest.raises(GraphDocError, match=rf"^cannot resume with model='{other}': its weights are not the ones "
                                            r"the run was started from \(the model has changed since\)$"):
        finetune_classification(train, dev, tmp_path / "run", config=ClassificationConfig(**CLASSIFICATION),
                                model=str(other), resume=True)
    path.write_text(json.dumps(state), encoding="utf-8")
    assert main([*base, "--model", str(tiny_bert)]) == 0  # the run's own model: finished, nothing to do


def test_an_empty_output_is_refused(runs, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    train, dev = runs["classification"]
    assert main(["finetune", "--task", "classification", "--train", str(train), "--dev", str(dev),
                 "--output", ""]) == 1
    assert capsys.readouterr().err.strip() == "graphdoc finetune: error: --output is empty: name the run's folder"
    with pytest.raises(GraphDocError, match="^the output folder name is empty"):
        finetune_classification(train, dev, "")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("task", ["ranking", "classification"])
def test_a_model_folder_of_the_users_files_is_refused_before_training(runs, tiny_bert, tmp_path, monkeypatch, task):
    import graphdoc.finetune as finetune_module

    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "run" / "model" / "mine.txt").write_text("precious\n", encoding="utf-8")
    (tmp_path / "run" / "finetune_config.json").write_text("{}", encoding="utf-8")  # a run's folder (its record)

    def no_model(*args, **kwargs):
        raise AssertionError("the start model was loaded")

    monkeypatch.setattr(finetune_module, "load_start_model", no_model)
    what = "a saved graphdoc model" if task == "ranking" else "a saved classifier"
    with pytest.raises(GraphDocError, match=rf"^{tmp_path / 'run' / 'model'} is a folder of other files, not {what}: "):
        if task == "ranking":
            finetune_ranking(*runs["ranking"], tmp_path / "run", config=RankingConfig(**RANKING), model=str(tiny_bert))
        else:
            finetune_classification(*runs["classification"], tmp_path / "run",
                                    config=ClassificationConfig(**CLASSIFICATION), model=str(tiny_bert))
    assert _files(tmp_path / "run") == {"finetune_config.json": b"{}", "model/mine.txt": b"precious\n"}


def test_an_output_inside_a_text_folder_corpus_is_refused(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\nSome text.\n", encoding="utf-8")
    # refused before anything is read: the saved model's vocab.txt would be a document the next time
    with pytest.raises(GraphDocError, match=r"^--output .*docs/run is inside the corpus folder .*docs: the run's files "
                                            r"would be read as documents$"):
        finetune_ranking(folder, tmp_path / "queries.jsonl", tmp_path / "qrels.tsv", folder / "run")
    assert sorted(p.name for p in folder.iterdir()) == ["a.md"]


@pytest.mark.parametrize("name", ["optimizer.safetensors", "trainer_state.json", "rng.safetensors", "optimizer.json",
                                  "scheduler.json", "rng.json"])
def test_a_damaged_checkpoint_file_is_one_error_line(runs, tiny_bert, tmp_path, capsys, name):
    train, dev = runs["classification"]
    shutil.copytree(runs["root"] / "classification", tmp_path / "run")
    damaged = ckpt.list_checkpoints(tmp_path / "run")[-1]
    data = (damaged / name).read_bytes()
    (damaged / name).write_bytes(data[:len(data) // 2])
    assert main(["-q", "finetune", "--task", "classification", "--train", str(train), "--dev", str(dev), "--epochs",
                 "1", "--batch-size", "4", "--max-passages", "2", "--output", str(tmp_path / "run"), "--resume",
                 "--model", str(tiny_bert)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"graphdoc finetune: error: checkpoint {damaged} is unreadable (") and "\n" not in err


def test_a_damaged_pretraining_checkpoint_is_one_error_line(tiny_bert, tmp_path):
    from test_pretrain_checkpoint import tiny_setup, write_corpus

    from graphdoc.training import pretrain

    corpus, setup = write_corpus(tmp_path / "c.jsonl"), tiny_setup(tiny_bert, max_steps=2)
    pretrain(corpus, tmp_path / "run", setup, device="cpu")
    damaged = ckpt.list_checkpoints(tmp_path / "run")[-1]
    for name in ("optimizer.safetensors", "rng.safetensors"):
        (damaged / name).write_bytes((damaged / name).read_bytes()[:100])
        with pytest.raises(GraphDocError, match=rf"^checkpoint {damaged} is unreadable \(SafetensorError: "):
            pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu")
        shutil.copy(damaged / "optimizer.json", damaged / name)  # not safetensors at all


def test_a_missing_best_model_is_rebuilt_from_the_checkpoint_or_refused(runs, tiny_bert, tmp_path, monkeypatch,
                                                                         caplog):
    from graphdoc.finetune import DocumentClassifier, classification

    # no dev queries: the model is the last epoch's, which the checkpoint holds
    shutil.copytree(runs["root"] / "ranking", tmp_path / "ranking")
    shutil.rmtree(tmp_path / "ranking" / "model")
    with caplog.at_level("WARNING", logger="graphdoc.finetune.loop"):
        summary = finetune_ranking(*runs["ranking"], tmp_path / "ranking", config=RankingConfig(**RANKING),
                                   model=str(tiny_bert), resume=True)
    assert (tmp_path / "ranking" / "model" / "model.safetensors").is_file() and summary["epochs"] == 1
    assert f"{tmp_path / 'ranking' / 'model'} was missing: saved again from the checkpoint of epoch 1" in \
        caplog.messages
    # dev accuracy best at epoch 1 of 2: the checkpoint holds epoch 2's weights only
    scores = iter([0.9, 0.5, 0.5, 0.5])
    monkeypatch.setattr(classification, "evaluate_classifier",
                        lambda *args, **kwargs: {"accuracy": next(scores), "macro_f1": 0.0})
    train, dev = runs["classification"]
    config = ClassificationConfig(**dict(CLASSIFICATION, epochs=2))
    finetune_classification(train, dev, tmp_path / "cls", config=config, model=str(tiny_bert))
    assert isinstance(DocumentClassifier.from_pretrained(tmp_path / "cls" / "model"), DocumentClassifier)
    shutil.rmtree(tmp_path / "cls" / "model")
    with pytest.raises(GraphDocError, match=(rf"^the run's best model {tmp_path / 'cls' / 'model'} \(epoch 1\) is "
                                             r"missing and cannot be rebuilt: the checkpoint holds epoch 2's")):
        finetune_classification(train, dev, tmp_path / "cls", config=config, model=str(tiny_bert), resume=True)


def test_options_the_run_would_ignore_are_refused_and_a_saved_models_config_warned(runs, model_dir, tmp_path,
                                                                                   capsys):
    train, dev = runs["classification"]
    base = ["finetune", "--task", "classification", "--train", str(train), "--dev", str(dev), "--epochs", "1",
            "--batch-size", "4", "--max-passages", "2"]
    assert main([*base, "--output", str(tmp_path / "a"), "--temperature", "0.5"]) == 1
    assert capsys.readouterr().err.strip() == ("graphdoc finetune: error: --temperature is the supcon loss's; the "
                                               "objective is cross_entropy (add --objective supcon)")
    assert main([*base, "--output", str(tmp_path / "a"), "--repeats", "3"]) == 1
    assert capsys.readouterr().err.strip() == \
        "graphdoc finetune: error: --repeats counts few-shot runs; it needs --few-shot K"
    assert not (tmp_path / "a").exists()
    # a config's model section does not apply to a saved graphdoc model: warned, as graphdoc embed warns
    (tmp_path / "model.yaml").write_text("model:\n  graph:\n    num_layers: 3\n", encoding="utf-8")
    (tmp_path / "plain.yaml").write_text("classification:\n  seed: 1\n", encoding="utf-8")
    warning = f"ignoring the given config's model settings: {model_dir} is a saved graphdoc model with its own"
    for config, warned in (("model.yaml", True), ("plain.yaml", False)):
        out = tmp_path / config.replace(".yaml", "")
        assert main(["-q", *base, "--output", str(out), "--model", str(model_dir), "--config",
                     str(tmp_path / config)]) == 0
        assert (warning in capsys.readouterr().err) is warned
    saved = json.loads((tmp_path / "model" / "model" / "encoder" / "config.json").read_text(encoding="utf-8"))
    assert saved["model"]["graph"]["num_layers"] != 3


def test_help_shows_the_training_defaults_and_max_passages_applies(runs, tiny_bert, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "without --config, the defaults of graphdoc.finetune.RankingConfig or ClassificationConfig apply" in text
    for flag, defaults in (("--epochs N", "4 / 10"), ("--batch-size N", "32 / 16"), ("--lr LR", "0.0001)"),
                           ("--max-passages N", "100 / 16")):
        assert f"without --config {defaults}" in text.split(f" {flag} ", 1)[1][:120], flag
    train, dev = runs["classification"]
    assert main(["-q", "finetune", "--task", "classification", "--train", str(train), "--dev", str(dev), "--epochs",
                 "1", "--max-passages", "3", "--model", str(tiny_bert), "--output", str(tmp_path / "run")]) == 0
    assert _state(tmp_path / "run")[1]["config"]["max_passages"] == 3


def test_resume_with_other_passage_encoder_settings_is_refused(runs, tiny_bert, tmp_path):
    from graphdoc.config import ModelConfig, PassageEncoderConfig

    shutil.copytree(runs["root"] / "ranking", tmp_path / "run")
    prompted = ModelConfig(passage_encoder=PassageEncoderConfig(query_prompt="query: "))
    with pytest.raises(GraphDocError, match=r"^cannot resume with model.passage_encoder.query_prompt='query: ': the "
                                            r"run was started with ''$"):
        finetune_ranking(*runs["ranking"], tmp_path / "run", config=RankingConfig(**RANKING), model=str(tiny_bert),
                         model_config=prompted, resume=True)
    pooled = ModelConfig(passage_encoder=PassageEncoderConfig(pooling="mean"))  # any vector setting, not prompts only
    with pytest.raises(GraphDocError, match=r"^cannot resume with model.passage_encoder.pooling='mean': the run was "
                                            r"started with 'cls'$"):
        finetune_ranking(*runs["ranking"], tmp_path / "run", config=RankingConfig(**RANKING), model=str(tiny_bert),
                         model_config=pooled, resume=True)
    from graphdoc.config import ChunkerConfig, GraphConfig

    for changed, expected in ((ModelConfig(chunker=ChunkerConfig(max_words=30)), "chunker.max_words=30"),
                              (ModelConfig(graph=GraphConfig(dropout=0.5)), "graph.dropout=0.5")):
        # they were taken silently: the weights went on training over other passages, or another graph
        with pytest.raises(GraphDocError, match=rf"^cannot resume with model\.{re.escape(expected)}: the run was "
                                                r"started with "):
            finetune_ranking(*runs["ranking"], tmp_path / "run", config=RankingConfig(**RANKING),
                             model=str(tiny_bert), model_config=changed, resume=True)
