"""Classification fine-tuning: a separable toy task, predict round trip, few-shot sampling, metrics, save/load."""

from __future__ import annotations

import pytest
import torch
from _finetune_helpers import labelled_files

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
