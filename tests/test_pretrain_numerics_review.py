"""Pretraining numerics: settings out of range, a diverging run, the schedule's length, too few documents and
the skip counts of a run of several epochs."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch
import yaml
from conftest import pretrain_killed_before_step_5
from test_pretrain_checkpoint import tiny_setup, weights, write_corpus
from test_pretrain_flat import flat_setup

from graphdoc.cli import main
from graphdoc.documents import Document
from graphdoc.errors import GraphDocError
from graphdoc.training import PretrainConfig, pretrain
from graphdoc.training import checkpoint as ckpt
from graphdoc.training import data, trainer
from graphdoc.training.metrics import read_log

BATCH_SIZE = ("pretrain.batch_size must be at least 2 (the other documents of a batch are the negatives; "
              "batch_size counts over all processes); got ")


@pytest.fixture
def corpus(tmp_path) -> Path:
    """14 documents (the blank one aside): 12 with two passages or more, 2 of one."""
    return write_corpus(tmp_path / "corpus.jsonl")


# ------------------------------------------------------------------ settings
@pytest.mark.parametrize("settings, message", [
    ({"max_grad_norm": -1}, "pretrain.max_grad_norm must be > 0 or null; got -1"),
    ({"max_grad_norm": 0}, "pretrain.max_grad_norm must be > 0 or null; got 0"),
    ({"adam_epsilon": 0}, "pretrain.adam_epsilon must be positive; got 0"),
    ({"lr": math.inf}, "pretrain.lr must be a finite number; got inf"),
    ({"temperature": math.nan}, "pretrain.temperature must be a finite number; got nan"),
    ({"weight_decay": math.nan}, "pretrain.weight_decay must be a finite number; got nan"),
    ({"prepared_cache_mb": math.inf}, "pretrain.prepared_cache_mb must be a finite number; got inf"),
    ({"max_seconds": math.inf}, "pretrain.max_seconds must be a finite number; got inf"),
    ({"weight_decay": -0.01}, "pretrain.weight_decay must be >= 0; got -0.01"),
    ({"shuffle_buffer": -1}, "pretrain.shuffle_buffer must be >= 0; got -1"),
    ({"prepared_cache_mb": -1}, "pretrain.prepared_cache_mb must be >= 0; got -1"),
    ({"batch_size": -3}, BATCH_SIZE + "-3"),
    ({"batch_size": 1}, BATCH_SIZE + "1"),
    ({"seed": -1}, "pretrain.seed must be in [0, 2147483647]; got -1"),
])
def test_a_setting_out_of_range_is_named_with_its_value(settings, message):
    with pytest.raises(GraphDocError) as caught:
        PretrainConfig(**settings)
    assert str(caught.value) == message


def test_null_max_grad_norm_turns_clipping_off():
    assert PretrainConfig(max_grad_norm=None).max_grad_norm is None


def test_a_negative_max_grad_norm_in_the_yaml_is_one_line(tmp_path, corpus, capsys, restore_cli_state):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"pretrain": {"max_grad_norm": -1}}), encoding="utf-8")
    assert main(["-q", "pretrain", "--corpus", str(corpus), "--output", str(tmp_path / "o"), "--config",
                 str(config)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"graphdoc pretrain: error: {config}: pretrain.max_grad_norm must be > 0 or null; got -1"]


# ------------------------------------------------------------------ divergence
DIVERGED = r"^training diverged at step 1: loss .*, gradient norm inf; try a lower pretrain.lr \(now 0.001\) or a " \
           r"higher pretrain.temperature \(now 1e-30\); the model was not saved$"


@pytest.mark.parametrize("frozen, chunk", [(True, 1024), (False, 1024), (False, 2)])  # 2: the gradient cache
def test_a_graph_run_whose_gradient_overflows_stops_unsaved(tiny_bert, corpus, tmp_path, frozen, chunk):
    setup = tiny_setup(tiny_bert, frozen_encoder=frozen, grad_cache_chunk=chunk, similarity="dot",
                       temperature=1e-30)
    with pytest.raises(GraphDocError, match=DIVERGED):
        pretrain(corpus, tmp_path / "run", setup, device="cpu")
    assert not (tmp_path / "run" / "model").exists()


@pytest.mark.parametrize("chunk", [1024, 3])
def test_a_flat_run_whose_gradient_overflows_stops_unsaved(tiny_bert, corpus, tmp_path, chunk):
    setup = flat_setup(tiny_bert, "simcse", similarity="dot", temperature=1e-30, grad_cache_chunk=chunk)
    with pytest.raises(GraphDocError, match=DIVERGED):
        pretrain(corpus, tmp_path / "run", setup, device="cpu")
    assert not (tmp_path / "run" / "model").exists()


def test_a_nan_loss_stops_before_the_optimiser_step_and_keeps_earlier_checkpoints(tiny_bert, corpus, tmp_path,
                                                                                   monkeypatch):
    calls, steps = [], []
    half = trainer.LOSSES["half"]

    def nan_at_step_3(z, similarity, temperature):
        calls.append(1)
        loss = half(z, similarity, temperature)
        return loss * math.nan if len(calls) == 3 else loss

    original_step = torch.optim.AdamW.step
    monkeypatch.setitem(trainer.LOSSES, "half", nan_at_step_3)
    monkeypatch.setattr(torch.optim.AdamW, "step",
                        lambda self, *args, **kwargs: steps.append(1) or original_step(self, *args, **kwargs))
    setup = tiny_setup(tiny_bert, frozen_encoder=True, max_grad_norm=None)
    with pytest.raises(GraphDocError, match=r"^training diverged at step 3: loss nan, gradient norm nan; .*, or set "
                                            r"pretrain.max_grad_norm; the model was not saved$"):
        pretrain(corpus, tmp_path / "run", setup, device="cpu")
    assert len(steps) == 2  # the nan step was not applied
    assert not (tmp_path / "run" / "model").exists()
    [kept] = ckpt.list_checkpoints(tmp_path / "run")
    assert kept.name == "step-00000002"
    assert all(torch.isfinite(w).all() for w in weights(kept / ckpt.MODEL_DIR).values())


# ------------------------------------------------------------------ the schedule's length
def test_max_steps_past_the_epochs_plans_the_schedule_for_the_epochs(tiny_bert, corpus, tmp_path, caplog):
    whole = pretrain(corpus, tmp_path / "whole", tiny_setup(tiny_bert, frozen_encoder=True), device="cpu")
    assert whole.total_steps == 6  # 12 usable documents, batches of 4, 2 epochs
    with caplog.at_level(logging.INFO, logger="graphdoc"):
        long = pretrain(corpus, tmp_path / "long", tiny_setup(tiny_bert, frozen_encoder=True, max_steps=20),
                        device="cpu")
    assert (long.steps, long.total_steps) == (6, 6)
    assert "pretrain.max_steps 20 is more than pretrain.epochs 2 take: the run and its learning-rate schedule end " \
           "at step 6" in caplog.text
    assert [r["lr"] for r in read_log(tmp_path / "long")] == [r["lr"] for r in read_log(tmp_path / "whole")]
    short = pretrain(corpus, tmp_path / "short", tiny_setup(tiny_bert, frozen_encoder=True, max_steps=4),
                     device="cpu")
    assert (short.steps, short.total_steps) == (4, 4)


def test_counting_for_max_steps_reads_only_what_the_steps_need(monkeypatch):
    docs = [Document(f"d{i}", "text") for i in range(10)]
    seen = []
    monkeypatch.setattr(data, "open_corpus", lambda sources, stats, fields=None: iter(docs))
    assert data.count_examples(["c"], lambda doc: seen.append(doc.id) or doc, lambda doc: True, limit=3) == 3
    assert seen == ["d0", "d1", "d2"]
    assert data.count_examples(["c"], lambda doc: doc, lambda doc: True) == 10


def test_resume_with_max_steps_past_the_epochs_equals_an_uninterrupted_run(tiny_bert, corpus, tmp_path,
                                                                           monkeypatch):
    setup = tiny_setup(tiny_bert, frozen_encoder=True, max_steps=50)
    whole = pretrain(corpus, tmp_path / "whole", setup, device="cpu")
    pretrain_killed_before_step_5(corpus, tmp_path / "run", setup, monkeypatch)
    resumed = pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu")
    assert (resumed.steps, resumed.total_steps) == (whole.steps, whole.total_steps) == (6, 6)
    expected, got = weights(whole.model_dir), weights(resumed.model_dir)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=1e-5, msg=name)


# ------------------------------------------------------------------ too few documents
def write_one_usable(path: Path) -> Path:
    records = [{"_id": "long", "text": "Graph attention passage document retrieval. Vector dense sparse meeting "
                                       "topic. Section fox dog graph attention."}]
    records += [{"_id": f"s{i}", "text": f"Short doc number {i}."} for i in range(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.parametrize("max_steps", [None, 5])
def test_one_usable_document_is_refused_before_training(tiny_bert, tmp_path, max_steps):
    corpus = write_one_usable(tmp_path / "one.jsonl")
    with pytest.raises(GraphDocError) as caught:
        pretrain(corpus, tmp_path / "run", tiny_setup(tiny_bert, frozen_encoder=True, max_steps=max_steps),
                 device="cpu")
    assert str(caught.value) == (f"pretrain needs at least 2 documents with two or more passages (each is a "
                                 f"negative for the others); {corpus} has 1")
    assert not (tmp_path / "run" / "log.csv").exists()


def test_one_usable_document_in_a_streamed_corpus_is_refused_after_its_first_epoch(tiny_bert, tmp_path,
                                                                                   monkeypatch):
    corpus = write_one_usable(tmp_path / "one.jsonl")
    monkeypatch.setattr(data, "is_named_corpus", lambda source: True)  # as a streamed corpus: not counted
    with pytest.raises(GraphDocError, match=r"pretrain needs at least 2 documents .*; .* has 1$"):
        pretrain(corpus, tmp_path / "run", tiny_setup(tiny_bert, frozen_encoder=True, max_steps=5), device="cpu")
    assert not (tmp_path / "run" / "model").exists()


# ------------------------------------------------------------------ what the run reports
def test_skip_counts_count_the_corpus_once_over_several_epochs(tiny_bert, corpus, tmp_path):
    result = pretrain(corpus, tmp_path / "run", tiny_setup(tiny_bert, frozen_encoder=True, epochs=3), device="cpu")
    # 15 records: the blank one dropped by the reader, 2 of one passage skipped, 12 used each epoch
    assert (result.empty_skipped, result.one_passage_skipped, result.distinct_documents) == (1, 2, 12)
    assert (result.documents_used, result.steps) == (36, 9)
    summary = json.loads((tmp_path / "run" / "pretrain.json").read_text())
    assert (summary["empty_skipped"], summary["one_passage_skipped"], summary["distinct_documents"]) == (1, 2, 12)


def test_a_streamed_corpus_is_read_again_until_max_steps(tiny_bert, corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(data, "is_named_corpus", lambda source: True)  # as a streamed corpus: not counted
    result = pretrain(corpus, tmp_path / "run", tiny_setup(tiny_bert, frozen_encoder=True, epochs=1, max_steps=7),
                      device="cpu")
    # 12 usable documents, batches of 4: 3 steps a pass; the schedule was made for 7 steps, and the run takes them
    assert (result.steps, result.total_steps) == (7, 7)
    assert [int(r["epoch"]) for r in read_log(tmp_path / "run")] == [0, 0, 0, 1, 1, 1, 2]
