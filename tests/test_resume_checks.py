"""``resume`` continues only the run it was given (same data, every few-shot seed, any fold); bad folds."""

from __future__ import annotations

import dataclasses
import json
import logging
import re

import pytest
from _finetune_helpers import labelled_files, ranking_files
from test_pretrain_checkpoint import tiny_setup, write_corpus

from graphdoc.errors import GraphDocError
from graphdoc.finetune import (
    ClassificationConfig,
    RankingConfig,
    finetune_classification,
    finetune_ranking,
)
from graphdoc.training import pretrain

RANKING = {"epochs": 2, "batch_size": 4, "hard_negatives": 1, "lr": 5e-3, "max_passages": 4, "temperature": 0.1}
CLASSIFICATION = {"epochs": 2, "batch_size": 4, "lr": 1e-2, "head_lr": 0.05, "dropout": 0.0, "max_passages": 2}


def _fewer_judgements(files, tmp_path):
    """The training judgements less the last line."""
    lines = files["qrels"].read_text(encoding="utf-8").splitlines()
    path = tmp_path / "fewer.tsv"
    path.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    return path


def test_ranking_resume_refuses_other_judgements_and_leaves_the_run_alone(tiny_bert, tmp_path):
    files = ranking_files(tmp_path)
    config = RankingConfig(**RANKING)
    finetune_ranking(files["corpus"], files["queries"], files["qrels"], tmp_path / "run", config=config,
                     model=str(tiny_bert))
    before = (tmp_path / "run" / "finetune.json").read_bytes()
    with pytest.raises(GraphDocError, match=r"^cannot resume .*run over different training data"):
        finetune_ranking(files["corpus"], files["queries"], _fewer_judgements(files, tmp_path), tmp_path / "run",
                         config=config, model=str(tiny_bert), resume=True)
    assert (tmp_path / "run" / "finetune.json").read_bytes() == before
    again = finetune_ranking(files["corpus"], files["queries"], files["qrels"], tmp_path / "run", config=config,
                             model=str(tiny_bert), resume=True)  # the same inputs: finished, nothing to do
    assert again["epochs"] == 2


def test_cross_validation_resume_with_other_folds_is_refused(tiny_bert, tmp_path, caplog):
    files = ranking_files(tmp_path)
    args = (files["corpus"], files["queries"], files["qrels"], tmp_path / "cv")
    config = RankingConfig(**RANKING, fold_dev_fraction=0.25)
    with caplog.at_level(logging.INFO, logger="graphdoc.finetune.crossval"):
        finetune_ranking(*args, config=config, model=str(tiny_bert), folds=3)
    assert [m for m in caplog.messages if m.startswith("fold ")] == [
        f"fold {f}/3: 3 training, 1 dev, 2 test queries" for f in (1, 2, 3)]
    before = (tmp_path / "cv" / "crossval.json").read_bytes()
    for fold in json.loads(before)["folds"]:  # each fold's model is indexed with the alpha it was scored with
        saved = json.loads((tmp_path / "cv" / f"fold-{fold['fold']}" / "model" / "config.json").read_text())
        assert saved["search"]["fusion"]["alpha"] == fold["alpha"]
    with pytest.raises(GraphDocError, match=r"fold-0 over different training data"):
        finetune_ranking(*args, config=config, model=str(tiny_bert), folds=2, resume=True)
    assert (tmp_path / "cv" / "crossval.json").read_bytes() == before


def test_classification_resume_refuses_other_training_documents(tiny_bert, tmp_path):
    files = labelled_files(tmp_path)
    config = ClassificationConfig(**CLASSIFICATION)
    finetune_classification(files["train"], files["dev"], tmp_path / "run", config=config, model=str(tiny_bert))
    before = (tmp_path / "run" / "finetune.json").read_bytes()
    (tmp_path / "other").mkdir()
    other = labelled_files(tmp_path / "other", per_class=4)
    with pytest.raises(GraphDocError, match=r"over different training data \(document ids, labels"):
        finetune_classification(other["train"], other["dev"], tmp_path / "run", config=config,
                                model=str(tiny_bert), resume=True)
    assert (tmp_path / "run" / "finetune.json").read_bytes() == before


def test_few_shot_resume_continues_every_seed(tiny_bert, tmp_path, monkeypatch, caplog):
    from graphdoc.finetune.classification import ClassificationTrainer

    files = labelled_files(tmp_path)
    config = ClassificationConfig(**CLASSIFICATION, shots=2, repeats=3)
    whole = finetune_classification(files["train"], files["dev"], tmp_path / "a", config=config, model=str(tiny_bert))
    real, calls = ClassificationTrainer.train, []

    def killed_in_the_second_seed(self, resume=False):
        calls.append(self.output.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, resume)

    monkeypatch.setattr(ClassificationTrainer, "train", killed_in_the_second_seed)
    with pytest.raises(KeyboardInterrupt):
        finetune_classification(files["train"], files["dev"], tmp_path / "b", config=config, model=str(tiny_bert))
    monkeypatch.setattr(ClassificationTrainer, "train", real)
    with pytest.raises(GraphDocError, match=r"b already holds a few-shot classification run \(--few-shot \d+\); "
                                            "pass --resume"):
        finetune_classification(files["train"], files["dev"], tmp_path / "b", config=config, model=str(tiny_bert))
    with caplog.at_level(logging.INFO, logger="graphdoc.finetune.fewshot"):
        resumed = finetune_classification(files["train"], files["dev"], tmp_path / "b", config=config,
                                          model=str(tiny_bert), resume=True)
    assert [m for m in caplog.messages if m.startswith("few-shot")] == [
        f"few-shot run {r}/3 (seed {41 + r}): 4 training documents" for r in (1, 2, 3)]
    assert [r["seed"] for r in resumed["runs"]] == [42, 43, 44]
    for a, b in zip(whole["runs"], resumed["runs"]):
        assert (a["train"], a["accuracy"], a["macro_f1"]) == (b["train"], b["accuracy"], b["macro_f1"])
    saved = json.loads((tmp_path / "b" / "fewshot.json").read_text(encoding="utf-8"))
    assert saved["accuracy"] == whole["accuracy"]


def test_few_shot_resume_with_more_repeats_adds_seeds_and_keeps_the_finished_ones(tiny_bert, tmp_path, caplog):
    files = labelled_files(tmp_path)
    config = ClassificationConfig(**CLASSIFICATION, shots=2, repeats=2)
    two = finetune_classification(files["train"], files["dev"], tmp_path / "run", config=config, model=str(tiny_bert))
    finished = {p.name: p.read_bytes() for p in (tmp_path / "run" / "seed-42" / "model").glob("*.safetensors")}
    with caplog.at_level(logging.INFO, logger="graphdoc.finetune.fewshot"):
        three = finetune_classification(files["train"], files["dev"], tmp_path / "run", resume=True,
                                        config=dataclasses.replace(config, repeats=3), model=str(tiny_bert))
    assert [r["seed"] for r in three["runs"]] == [42, 43, 44]
    scores = [{k: v for k, v in run.items() if k != "wall_s"} for run in three["runs"]]
    assert scores[:2] == [{k: v for k, v in run.items() if k != "wall_s"} for run in two["runs"]]
    assert finished and finished == {p.name: p.read_bytes()
                                     for p in (tmp_path / "run" / "seed-42" / "model").glob("*.safetensors")}
    assert [m for m in caplog.messages if m.startswith("few-shot")] == [
        f"few-shot run {r}/3 (seed {41 + r}): 4 training documents" for r in (1, 2, 3)]
    saved = json.loads((tmp_path / "run" / "fewshot.json").read_text(encoding="utf-8"))
    assert saved["repeats"] == 3 and len(saved["runs"]) == 3
    with pytest.raises(GraphDocError, match=r"cannot resume with lr=0.5: the run was started with 0.01"):
        finetune_classification(files["train"], files["dev"], tmp_path / "run", resume=True,
                                config=dataclasses.replace(config, repeats=4, lr=0.5), model=str(tiny_bert))
    assert not (tmp_path / "run" / "seed-45").exists()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="graphdoc.finetune.fewshot"):
        one = finetune_classification(files["train"], files["dev"], tmp_path / "run", resume=True,
                                      config=dataclasses.replace(config, repeats=1), model=str(tiny_bert))
    assert [r["seed"] for r in one["runs"]] == [42]
    assert caplog.messages == [f"{tmp_path / 'run'}: 2 seed run(s) not among this run's seeds (42 to 42) left "
                               "out of fewshot.json: seed-43, seed-44"]


def test_resume_with_nothing_to_resume_says_so(tiny_bert, tmp_path, caplog):
    files = ranking_files(tmp_path)
    with caplog.at_level(logging.WARNING, logger="graphdoc.finetune.loop"):
        summary = finetune_ranking(files["corpus"], files["queries"], files["qrels"], tmp_path / "new",
                                   config=RankingConfig(**RANKING), model=str(tiny_bert), resume=True)
    assert summary["epochs"] == 2
    assert f"nothing to resume in {tmp_path / 'new'}: starting from scratch" in caplog.messages


def test_pretrain_resume_refuses_another_corpus(tiny_bert, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    other = write_corpus(tmp_path / "other.jsonl", n=10, seed=1)
    setup = tiny_setup(tiny_bert, max_steps=2, frozen_encoder=True)
    pretrain(corpus, tmp_path / "run", setup, device="cpu")
    size, other_size = corpus.stat().st_size, other.stat().st_size
    with pytest.raises(GraphDocError, match=rf"^cannot resume over a different corpus: the run read corpus.jsonl "
                                            rf"\({size:,} bytes\), now other.jsonl \({other_size:,} bytes\)$"):
        pretrain(other, tmp_path / "run", setup, resume=True, device="cpu")
    assert pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu").steps == 2


def test_pretrain_resume_refuses_a_corpus_edited_in_place_to_the_same_size(tiny_bert, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    setup = tiny_setup(tiny_bert, max_steps=2, frozen_encoder=True)
    pretrain(corpus, tmp_path / "run", setup, device="cpu")
    text = corpus.read_text(encoding="utf-8")
    word = next(w for w in text.split() if w.isalpha() and len(w) > 3)
    corpus.write_text(text.replace(word, word[::-1], 1), encoding="utf-8")  # same bytes count, other content
    with pytest.raises(GraphDocError, match=r"^cannot resume over a different corpus: corpus.jsonl was edited since "
                                            r"the run read it \(the same size, other content\)$"):
        pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu")
    corpus.write_text(text, encoding="utf-8")  # as it was: the run resumes
    assert pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu").steps == 2


def test_a_checkpoint_from_before_the_content_digest_still_resumes():
    from graphdoc.training.config import PretrainSetup
    from graphdoc.training.run_folder import check_resumable

    setup = PretrainSetup()
    state = {"world_size": 1, "pretrain": dataclasses.asdict(setup.pretrain), "corpus": [["c.jsonl", 120]]}
    check_resumable(state, setup, 1, [["c.jsonl", 120, "0" * 32]])
    with pytest.raises(GraphDocError, match=r"the run read c.jsonl \(120 bytes\), now c.jsonl \(121 bytes\)$"):
        check_resumable(state, setup, 1, [["c.jsonl", 121, "0" * 32]])


@pytest.mark.parametrize("folds", [0, 1])
def test_fewer_than_two_folds_is_an_error_before_anything_loads(tmp_path, folds):
    with pytest.raises(GraphDocError, match=rf"^folds must be at least 2; got {folds}$"):
        finetune_ranking(tmp_path / "missing-corpus", tmp_path / "q", tmp_path / "r", tmp_path / "run", folds=folds)
    assert not (tmp_path / "run").exists()


def test_pretrain_refuses_a_corpus_twice_and_an_output_inside_the_corpus(tiny_bert, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    setup = tiny_setup(tiny_bert, max_steps=2, frozen_encoder=True)
    with pytest.raises(GraphDocError, match=r"^corpus .*corpus.jsonl is given twice: its documents would be read"):
        pretrain([str(corpus), str(tmp_path / "." / "corpus.jsonl")], tmp_path / "run", setup, device="cpu")
    folder = tmp_path / "texts"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.txt").write_text("A first sentence here. A second one there.\n", encoding="utf-8")
    with pytest.raises(GraphDocError, match=r"^--output .*texts/run is inside the corpus folder .*texts: the run's"):
        pretrain(folder, folder / "run", setup, device="cpu")
    assert not (tmp_path / "run").exists() and not (folder / "run").exists()


def test_unfinished_writes_of_a_killed_run_are_removed_on_resume(tiny_bert, tmp_path, caplog):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    setup = tiny_setup(tiny_bert, max_steps=2, frozen_encoder=True)
    pretrain(corpus, tmp_path / "run", setup, device="cpu")
    stale = [tmp_path / "run" / "checkpoints" / ".step-00000003.k2x_9q.tmp", tmp_path / "run" / ".model.old-77"]
    for path in stale:
        (path / "passage_encoder").mkdir(parents=True)
    (tmp_path / "run" / ".pretrain.json.ab12cd.tmp").write_text("{", encoding="utf-8")
    kept = tmp_path / "run" / ".notes"  # not something a write leaves
    kept.write_text("mine", encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="graphdoc.training.checkpoint"):
        pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu")
    assert not any(p.exists() for p in stale) and not (tmp_path / "run" / ".pretrain.json.ab12cd.tmp").exists()
    assert kept.read_text(encoding="utf-8") == "mine"
    assert any(m.startswith("removed 3 unfinished write(s) of an interrupted run") for m in caplog.messages)


def test_a_spent_time_budget_stops_a_resumed_run_before_any_step(tiny_bert, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    setup = tiny_setup(tiny_bert, max_steps=6, frozen_encoder=True, max_seconds=1e-6)
    first = pretrain(corpus, tmp_path / "run", setup, device="cpu")
    assert (first.steps, first.time_up) == (1, True)  # the budget is checked after each step
    assert json.loads((tmp_path / "run" / "pretrain.json").read_text(encoding="utf-8"))["time_up"] is True
    again = pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu")
    assert (again.steps, again.time_up) == (1, True)


@pytest.mark.parametrize("name", ["trainer_state.json", "projection_head.safetensors", "optimizer.safetensors"])
def test_pretrain_resume_from_a_damaged_checkpoint_file_is_one_line(tiny_bert, tmp_path, name):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    setup = tiny_setup(tiny_bert, max_steps=2, frozen_encoder=True, projection_head=8)
    pretrain(corpus, tmp_path / "run", setup, device="cpu")
    [step] = (tmp_path / "run" / "checkpoints").glob("step-*")
    with open(step / name, "r+b") as handle:
        handle.truncate(10)
    with pytest.raises(GraphDocError, match=rf"^checkpoint {re.escape(str(step))} is unreadable \(\w+: .*\)$"):
        pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu")


def test_pretrain_refuses_an_empty_output(tiny_bert, tmp_path, monkeypatch, capsys, restore_cli_state):
    from graphdoc.cli import main

    monkeypatch.chdir(tmp_path)
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    assert main(["-q", "pretrain", "--corpus", str(corpus), "--output", "", "--model", str(tiny_bert),
                 "--frozen-encoder", "--max-steps", "1", "--device", "cpu"]) == 1
    assert capsys.readouterr().err.strip() == "graphdoc pretrain: error: --output is empty: name the run's folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl"]


def test_pretrain_resume_over_a_beir_folder_counts_only_its_corpus_file(tiny_bert, tmp_path):
    folder = tmp_path / "beir"
    folder.mkdir()
    write_corpus(folder / "corpus.jsonl")
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("q1\td0\t1\n", encoding="utf-8")
    setup = tiny_setup(tiny_bert, max_steps=4, frozen_encoder=True)
    pretrain(folder, tmp_path / "run", setup, device="cpu")
    (folder / "qrels" / "dev.tsv").write_text("q2\td1\t1\n", encoding="utf-8")  # not read by pretraining
    assert pretrain(folder, tmp_path / "run", setup, resume=True, device="cpu").steps == 4
    with open(folder / "corpus.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"_id": "new", "text": "One more. And more."}) + "\n")
    with pytest.raises(GraphDocError, match=r"^cannot resume over a different corpus: the run read beir "):
        pretrain(folder, tmp_path / "run", setup, resume=True, device="cpu")
