"""Classification fine-tuning: a separable toy task, predict round trip, few-shot sampling, metrics, save/load."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from _finetune_helpers import TOPICS, labelled_files, write_jsonl

from graphdoc.errors import GraphDocError
from graphdoc.finetune import (
    ClassificationConfig,
    DocumentClassifier,
    finetune_classification,
    predict,
    read_predictions,
)
from graphdoc.finetune.classification import accuracy, macro_f1
from graphdoc.finetune.fewshot import sample_per_class
from graphdoc.models.classification_head import ClassificationHead

CONFIG = {"epochs": 15, "batch_size": 4, "lr": 1e-2, "head_lr": 0.05, "dropout": 0.0, "max_passages": 2}


@pytest.fixture(autouse=True)
def cli_state(restore_cli_state):
    """The CLI tests here configure logging; undo it for the tests that read log records after them."""
    yield


@pytest.fixture(scope="module")
def trained(spread_bert, tmp_path_factory):
    folder = tmp_path_factory.mktemp("classification")
    files = labelled_files(folder)
    summary = finetune_classification(files["train"], files["dev"], folder / "run",
                                      config=ClassificationConfig(**CONFIG), model=str(spread_bert))
    return files, summary, folder / "run" / "model"


def test_frozen_mode_learns_a_separable_task(trained):
    _, summary, model_dir = trained
    assert summary["dev_scores"] == {"accuracy": 1.0, "macro_f1": 1.0}
    assert summary["best"] == 1.0 and (model_dir / "head.safetensors").is_file()
    assert (model_dir.parent / "passage_cache").is_dir()  # the frozen mode's vectors


def test_predict_writes_labels_and_probabilities_that_round_trip(trained, tmp_path):
    files, _, model_dir = trained
    count = predict(model_dir, files["dev"], tmp_path / "pred.jsonl")
    records = read_predictions(tmp_path / "pred.jsonl")
    assert count == len(records) == 12
    classifier = DocumentClassifier.from_pretrained(model_dir)
    from graphdoc.corpus import read_corpus

    probs = classifier.predict_proba(list(read_corpus(files["dev"])))
    for record, row in zip(records, probs):
        assert list(record["probabilities"]) == classifier.labels == ["animals", "numbers"]
        assert sum(record["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        assert record["probabilities"] == pytest.approx(dict(zip(classifier.labels, row.tolist())), abs=1e-6)
        assert record["label"] == max(record["probabilities"], key=record["probabilities"].get)
        assert record["label"] == record["id"].lstrip("d").rstrip("0123456789")


def test_few_shot_sampling_takes_exactly_k_per_class_and_varies_with_the_seed():
    labels = {f"{c}{i}": c for c in "abc" for i in range(8)}
    picks = [sample_per_class(labels, 3, seed) for seed in range(5)]
    for keys in picks:
        assert sorted(labels[k] for k in keys) == sorted("abc" * 3) and len(set(keys)) == 9
    assert len({tuple(p) for p in picks}) > 1
    assert sample_per_class(labels, 3, 1) == picks[1]
    with pytest.raises(GraphDocError, match="class 'a' has 8 training examples; 9-shot"):
        sample_per_class(labels, 9, 0)


def test_few_shot_mode_reports_mean_and_std(tiny_bert, tmp_path):
    files = labelled_files(tmp_path)
    config = ClassificationConfig(**{**CONFIG, "epochs": 2}, shots=2, repeats=3)
    result = finetune_classification(files["train"], files["dev"], tmp_path / "fs", config=config, model=str(tiny_bert))
    assert [r["seed"] for r in result["runs"]] == [42, 43, 44]
    assert all(len(r["train"]) == 4 for r in result["runs"])
    assert set(result["accuracy"]) == {"mean", "std"} and 0 <= result["macro_f1"]["mean"] <= 1
    for seed in (42, 43, 44):  # each seed's classifier predicts with the passage cap it was trained with
        assert DocumentClassifier.from_pretrained(tmp_path / "fs" / f"seed-{seed}" / "model").max_passages == 2


def test_metrics_exact_values():
    gold, pred = ["a", "a", "b", "c"], ["a", "b", "b", "b"]
    assert accuracy(gold, pred) == 0.5
    # F1: a = 2/3, b = 2/3 (tp 1, fp 2, fn 0), c = 0
    # per-class F1: a = 2/3 (tp 1, fn 1), b = 1/2 (tp 1, fp 2), c = 0
    assert macro_f1(gold, pred) == pytest.approx((2 / 3 + 1 / 2 + 0) / 3)


def test_head_module_and_classifier_save_load(tiny_bert, tmp_path):
    head = ClassificationHead(8, 3, dropout=0.1)
    assert repr(head) == "ClassificationHead(8, 3, dropout=0.1)"
    assert head.eval()(torch.zeros(5, 8)).shape == (5, 3)
    from graphdoc.encoder import GraphDocEncoder

    classifier = DocumentClassifier(GraphDocEncoder.from_pretrained(str(tiny_bert)), ["x", "y"])
    classifier.save_pretrained(tmp_path / "clf")
    loaded = DocumentClassifier.from_pretrained(tmp_path / "clf")
    assert loaded.labels == ["x", "y"]
    assert torch.allclose(loaded.head.linear.weight, classifier.head.linear.weight)
    with pytest.raises(GraphDocError, match="two or more distinct labels"):
        DocumentClassifier(classifier.encoder, ["x"])


def long_documents(path, per_class: int = 3):
    """Labelled documents of many passages (100-word passages, ~600 words each)."""
    records = [{"_id": f"{label}{i}", "text": " ".join(f"{TOPICS[topic]} {i} {j}." for j in range(50)),
                "label": label}
               for label, topic in (("animals", "fox"), ("numbers", "numbers")) for i in range(per_class)]
    return write_jsonl(path, records)


def _probabilities(path) -> torch.Tensor:
    return torch.tensor([list(r["probabilities"].values()) for r in read_predictions(path)])


def _scored_as_in_training(classifier: DocumentClassifier, docs, max_passages: int) -> torch.Tensor:
    """Class probabilities of ``docs`` through the training inputs (each cut to ``max_passages`` passages)."""
    from graphdoc.finetune.inputs import GraphInputs

    inputs = GraphInputs(classifier.encoder)
    inputs.add_documents(docs, max_passages)
    vectors = inputs.embed_all([d.id for d in docs]).document_embeddings
    with torch.inference_mode():
        return torch.softmax(classifier.eval().logits(vectors), dim=-1)


def test_predict_keeps_the_passage_cap_the_classifier_was_trained_with(trained, tmp_path):
    from graphdoc.corpus import read_corpus

    _, _, model_dir = trained
    assert json.loads((model_dir / "head_config.json").read_text())["max_passages"] == 2
    classifier = DocumentClassifier.from_pretrained(model_dir)
    assert classifier.max_passages == 2 and "max_passages=2" in repr(classifier)
    source = long_documents(tmp_path / "long.jsonl")
    docs = list(read_corpus(source))
    assert min(len(classifier.encoder.prepare(d).passages) for d in docs) > 2
    expected = _scored_as_in_training(classifier, docs, 2)  # how finetune scored its dev set
    everything = _scored_as_in_training(classifier, docs, 100)
    assert not torch.allclose(expected, everything, atol=1e-3)
    predict(model_dir, source, tmp_path / "p.jsonl")
    assert torch.allclose(_probabilities(tmp_path / "p.jsonl"), expected, atol=1e-5)
    assert torch.allclose(classifier.predict_proba(docs), expected, atol=1e-5)
    # an explicit cap wins, in the API and the CLI
    predict(model_dir, source, tmp_path / "p100.jsonl", max_passages=100)
    assert torch.allclose(_probabilities(tmp_path / "p100.jsonl"), everything, atol=1e-5)
    assert torch.allclose(classifier.predict_proba(docs, max_passages=100), everything, atol=1e-5)
    from graphdoc.cli import main

    assert main(["-q", "predict", "--model", str(model_dir), "--input", str(source), "--output",
                 str(tmp_path / "c.jsonl"), "--max-passages", "100"]) == 0
    assert torch.allclose(_probabilities(tmp_path / "c.jsonl"), everything, atol=1e-5)


def test_a_classifier_saved_before_the_cap_was_recorded_keeps_the_encoders_cap(trained, tmp_path):
    from graphdoc.corpus import read_corpus

    _, _, model_dir = trained
    old = shutil.copytree(model_dir, tmp_path / "old")
    head = json.loads((old / "head_config.json").read_text())
    del head["max_passages"]
    (old / "head_config.json").write_text(json.dumps(head))
    classifier = DocumentClassifier.from_pretrained(old)
    assert classifier.max_passages is None and classifier.encoder.config.chunker.max_passages == 100
    docs = list(read_corpus(long_documents(tmp_path / "long.jsonl")))
    assert torch.allclose(classifier.predict_proba(docs), _scored_as_in_training(classifier, docs, 100), atol=1e-5)


def test_a_frozen_flat_classifier_predicts_what_it_was_scored_on(tiny_bert, tmp_path):
    """A frozen flat model trains its head over vectors computed once: with the training cap, as predict reads."""
    from graphdoc.corpus import read_corpus
    from graphdoc.finetune.classification import FixedFeatures
    from graphdoc.flat_config import FlatConfig, FlatModelConfig

    source = long_documents(tmp_path / "long.jsonl")
    config = ClassificationConfig(**{**CONFIG, "epochs": 1})
    finetune_classification(source, source, tmp_path / "run", config=config, model=str(tiny_bert), backbone="flat",
                            model_config=FlatModelConfig(graph=FlatConfig(document="mean")))
    classifier = DocumentClassifier.from_pretrained(tmp_path / "run" / "model")
    assert classifier.max_passages == 2
    docs = list(read_corpus(source))
    fixed = FixedFeatures.compute(classifier.encoder, docs, None, 2)
    vectors = torch.stack([fixed.vectors[d.id] for d in docs])
    with torch.inference_mode():
        expected = torch.softmax(classifier.eval().logits(vectors), dim=-1)
    uncapped = torch.stack(list(FixedFeatures.compute(classifier.encoder, docs, None, 100).vectors.values()))
    assert not torch.allclose(vectors, uncapped, atol=1e-4)  # the cap changes a mean-pooled vector
    predict(tmp_path / "run" / "model", source, tmp_path / "p.jsonl")
    assert torch.allclose(_probabilities(tmp_path / "p.jsonl"), expected, atol=1e-5)


@pytest.mark.parametrize("label, problem", [
    (["animals"], "has a 'label' that is an array"),
    ({"name": "animals"}, "has a 'label' that is an object"),
    (True, "has a 'label' that is true/false"),
    (1.5, "has a 'label' that is a JSON float (2.0, 1e3)"),
    (None, "has no 'label'"),
    (" ", "has no 'label'"),
    (2.0, "has a 'label' that is a JSON float (2.0, 1e3); a label is a string or an integer (write 2, not 2.0)"),
])
def test_a_label_that_is_not_a_string_or_an_integer_is_refused_naming_file_and_line(label, problem, tmp_path):
    from graphdoc.errors import InputError
    from graphdoc.finetune.classification import read_labelled

    records = [{"_id": "a", "text": "one", "label": "x"}, {"_id": "b", "text": "two", "label": label}]
    path = write_jsonl(tmp_path / "t.jsonl", records)
    suffix = "" if problem == "has no 'label'" or "(write" in problem else "; a label is a string or an integer"
    with pytest.raises(InputError) as err:
        read_labelled(path, "train")
    assert str(err.value) == f"{path}:2: document 'b' {problem}{suffix}"


def test_a_label_that_is_not_valid_unicode_is_refused_naming_file_and_line(tmp_path):
    from graphdoc.errors import InputError
    from graphdoc.finetune.classification import read_labelled

    path = tmp_path / "t.jsonl"  # JSON's escape of a lone surrogate: it crashed the run's fingerprint, after encoding
    path.write_text('{"_id": "a", "text": "one", "label": "x"}\n{"_id": "b", "text": "two", "label": "\\ud800"}\n',
                    encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_labelled(path, "train")
    assert str(err.value) == f"{path}:2: document 'b' has a 'label' that is not valid Unicode (lone surrogate \\ud800)"


def test_a_csv_row_without_a_label_is_named_by_its_line(tmp_path):
    """(stop 32: a CSV's error named the file only; a JSON lines file's named the line)"""
    from graphdoc.errors import InputError
    from graphdoc.finetune.classification import read_labelled

    path = tmp_path / "t.csv"
    path.write_text('id,text,label\na,one,x\nb,"two\nlines",y\nc,three,\n', encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_labelled(path, "train")
    assert str(err.value) == f"{path}:5: document 'c' has no 'label'"


def test_the_label_field_can_be_named(tmp_path):
    from graphdoc.corpus import Fields
    from graphdoc.errors import GraphDocError, InputError
    from graphdoc.finetune.classification import read_labelled

    path = write_jsonl(tmp_path / "t.jsonl", [{"_id": "a", "text": "one", "newsgroup": "sci", "label": "old"},
                                              {"_id": "b", "text": "two", "newsgroup": 3}])
    docs = read_labelled(path, "train", label_field="newsgroup")
    assert [(d.id, d.metadata["label"], d.metadata["newsgroup"]) for d in docs] == [("train/a", "sci", "sci"),
                                                                                    ("train/b", 3, 3)]
    with pytest.raises(InputError) as err:
        read_labelled(path, "train")  # the default field: b has none
    assert str(err.value) == (f"{path}:2: document 'b' has no 'label' field (a label field of another name: "
                              "label_field, --label-field)")
    table = tmp_path / "t.csv"
    table.write_text("post_id,body,newsgroup\np1,one,sci\np2,two,\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_labelled(table, "dev", fields=Fields(id="post_id", text="body"), label_field="newsgroup")
    assert str(err.value) == f"{table}:3: document 'p2' has no 'newsgroup'"
    with pytest.raises(GraphDocError, match=r"^field 'body' is named for the documents' text, not their label$"):
        read_labelled(table, "dev", fields=Fields(id="post_id", text="body"), label_field="body")


def test_predict_proba_can_show_a_bar(tiny_bert, monkeypatch):
    """(stop 32: graphdoc predict ran silently, however many documents)"""
    import io
    import sys

    from graphdoc import progress
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.finetune.classifier import DocumentClassifier

    classifier = DocumentClassifier(GraphDocEncoder.from_pretrained(str(tiny_bert)), ["x", "y"])
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    assert classifier.predict_proba(["one text", "two", "three"], batch_size=2, show_progress_bar=True).shape == (3, 2)
    assert log.getvalue().splitlines()[-1].startswith("Predicting: 100%|##########| 3/3")
    log.truncate(0)
    classifier.predict_proba(["one text"])
    assert log.getvalue() == ""


def test_integer_labels_are_their_string_form(tmp_path):
    from graphdoc.finetune.classification import labels_of, read_labelled

    path = write_jsonl(tmp_path / "t.jsonl", [{"_id": "a", "text": "one", "label": 0},
                                              {"_id": "b", "text": "two", "label": 1}])
    assert labels_of(read_labelled(path, "train")) == ["0", "1"]


def test_a_second_run_into_the_same_output_is_refused_while_the_first_writes(tiny_bert, tmp_path):
    import re

    from graphdoc.fileio import LOCK_NAME, writer_lock
    from graphdoc.finetune import finetune_ranking

    files, out = labelled_files(tmp_path), tmp_path / "run"
    config = ClassificationConfig(**{**CONFIG, "epochs": 1})
    with writer_lock(out):  # as a first `graphdoc finetune` into `out` holds it
        with pytest.raises(GraphDocError, match=f"^another graphdoc process is writing {re.escape(str(out))}$"):
            finetune_classification(files["train"], files["dev"], out, config=config, model=str(tiny_bert))
        with pytest.raises(GraphDocError, match="^another graphdoc process is writing"):
            finetune_ranking("corpus.jsonl", "queries.jsonl", "qrels.tsv", out, resume=True)
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]
    assert not out.exists()
    finetune_classification(files["train"], files["dev"], out, config=config, model=str(tiny_bert))
    assert (out / "model").is_dir() and not (out / LOCK_NAME).exists()  # released at the end


@pytest.mark.parametrize("task", ["classification", "ranking"])
def test_an_error_mid_epoch_closes_the_progress_bar(tiny_bert, tmp_path, monkeypatch, task):
    """The epoch's bar was closed at the epoch's end only: after an error (Ctrl-C) it stayed open, and its
    destructor wrote it to standard error again after the command's error line."""
    from tqdm.auto import tqdm

    from graphdoc.finetune.loop import EpochLoop

    real_step, steps = EpochLoop.step, []

    def stop_at_the_second_step(self, loss):
        steps.append(1)
        if len(steps) == 2:
            raise KeyboardInterrupt
        return real_step(self, loss)

    monkeypatch.setattr(EpochLoop, "step", stop_at_the_second_step)
    open_before = set(tqdm._instances)
    with pytest.raises(KeyboardInterrupt) as info:
        if task == "classification":
            files = labelled_files(tmp_path)
            finetune_classification(files["train"], files["dev"], tmp_path / "run", config=ClassificationConfig(
                **{**CONFIG, "epochs": 1, "batch_size": 2}), model=str(tiny_bert), show_progress_bar=True)
        else:
            from _finetune_helpers import ranking_files

            from graphdoc.finetune import RankingConfig, finetune_ranking

            files = ranking_files(tmp_path)
            finetune_ranking(files["corpus"], files["queries"], files["qrels"], tmp_path / "run",
                             config=RankingConfig(epochs=1, batch_size=1, max_passages=2), model=str(tiny_bert),
                             show_progress_bar=True)
    assert info.value is not None and len(steps) == 2  # the traceback keeps the trainer, and its bar, alive
    assert set(tqdm._instances) - open_before == set()
