"""``graphdoc pretrain``'s run folder: what a resume compares, what an --output may hold, what an error leaves."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from conftest import pretrain_killed_before_step_5
from test_pretrain_checkpoint import WORDS, tiny_setup, weights, write_corpus

from graphdoc.errors import GraphDocError
from graphdoc.training import checkpoint as ckpt
from graphdoc.training import pretrain
from graphdoc.training import trainer as trainer_module
from graphdoc.training.metrics import read_log
from graphdoc.training.trainer import Trainer


def with_model(setup, **sections):
    """``setup`` with some model settings changed: ``chunker={"max_words": 7}``."""
    model = setup.model
    for section, changes in sections.items():
        model = dataclasses.replace(model, **{section: dataclasses.replace(getattr(model, section), **changes)})
    return dataclasses.replace(setup, model=model)


@pytest.fixture
def corpus(tmp_path) -> Path:
    return write_corpus(tmp_path / "corpus.jsonl")


@pytest.fixture
def stopped_run(tiny_bert, corpus, tmp_path, monkeypatch):
    """A run of 6 steps killed before step 5 (checkpoints at steps 2 and 4), and its setup."""
    setup = tiny_setup(tiny_bert)
    pretrain_killed_before_step_5(corpus, tmp_path / "run", setup, monkeypatch)
    return tmp_path / "run", setup


# ------------------------------------------------------------------ 1. resume compares the model and precision
@pytest.mark.parametrize("sections,message", [
    ({"chunker": {"max_words": 7}}, "cannot resume with model.chunker.max_words=7: the run was started with 5"),
    ({"graph": {"num_layers": 1}}, "cannot resume with model.graph.num_layers=1: the run was started with 2"),
    ({"graph": {"graph_type": "section"}},
     "cannot resume with model.graph.graph_type='section': the run was started with 'full'"),
    ({"passage_encoder": {"pooling": "mean"}},
     "cannot resume with model.passage_encoder.pooling='mean': the run was started with 'cls'"),
])
def test_resume_refuses_other_model_settings(stopped_run, corpus, sections, message):
    run, setup = stopped_run
    with pytest.raises(GraphDocError, match=f"^{message}$"):
        pretrain(corpus, run, with_model(setup, **sections), resume=True, device="cpu")


def test_resume_refuses_another_start_model_and_accepts_a_moved_copy(stopped_run, corpus, tiny_bert, tiny_roberta,
                                                                    tmp_path):
    run, setup = stopped_run
    with pytest.raises(GraphDocError, match=rf"^cannot resume with model='{tiny_roberta}': the run was started from "
                                            rf"'{tiny_bert}' \(other weights\)$"):
        pretrain(corpus, run, setup, model=str(tiny_roberta), resume=True, device="cpu")
    moved = shutil.copytree(tiny_bert, tmp_path / "moved")  # the same weights elsewhere: the same model
    assert pretrain(corpus, run, setup, model=str(moved), resume=True, device="cpu").steps == 6


def test_resume_refuses_a_precision_of_other_numerics(stopped_run, corpus, monkeypatch):
    run, setup = stopped_run
    monkeypatch.setattr("graphdoc.device.cpu_supports_bf16", lambda: True)
    with pytest.raises(GraphDocError, match=r"^cannot resume with precision bf16 \(--precision or model\."
                                            r"passage_encoder\.precision\): the run was started with auto"):
        pretrain(corpus, run, setup, resume=True, device="cpu", precision="bf16")
    # fp32 computes what auto computes on a CPU: trivially the same
    assert pretrain(corpus, run, setup, resume=True, device="cpu", precision="fp32").steps == 6


# ------------------------------------------------------------------ 2. a run without a checkpoint is still a run
def test_a_finished_run_is_never_overwritten(tiny_bert, corpus, tmp_path):
    setup = tiny_setup(tiny_bert, max_steps=1, checkpoint_every=5)
    pretrain(corpus, tmp_path / "run", setup, device="cpu")
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "run")] == ["step-00000001"]  # the last step's
    other = write_corpus(tmp_path / "other.jsonl", n=10, seed=1)
    with pytest.raises(GraphDocError, match="run already holds a training run; pass --resume"):
        pretrain(other, tmp_path / "run", setup.with_overrides(objective="ict"), device="cpu")
    shutil.rmtree(tmp_path / "run" / "checkpoints")  # as a run written before the last step was checkpointed
    with pytest.raises(GraphDocError, match="run already holds a training run; pass --resume"):
        pretrain(corpus, tmp_path / "run", setup, device="cpu")
    with pytest.raises(GraphDocError, match=r"run holds a finished run with no checkpoint to continue from"):
        pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu")
    assert json.loads((tmp_path / "run" / "pretrain.json").read_text())["steps"] == 1


def test_a_run_stopped_by_its_time_budget_resumes_where_it_stopped(tiny_bert, corpus, tmp_path, monkeypatch):
    setup = tiny_setup(tiny_bert, checkpoint_every=4)
    whole = pretrain(corpus, tmp_path / "whole", setup, device="cpu")
    with monkeypatch.context() as patch:  # one "second" a step: the budget of 3 is spent after step 3
        patch.setattr(Trainer, "loop_seconds", lambda self: float(self.step))
        budget = dataclasses.replace(setup, pretrain=dataclasses.replace(setup.pretrain, max_seconds=3.0))
        stopped = pretrain(corpus, tmp_path / "run", budget, device="cpu")
    assert stopped.time_up and stopped.steps == 3
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "run")] == ["step-00000003"]
    resumed = pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu")
    assert resumed.steps == whole.steps == 6
    expected, got = weights(whole.model_dir), weights(resumed.model_dir)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=1e-5, msg=name)


# ------------------------------------------------------------------ 3, 4. --output and --cache-dir, before loading
@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the output was checked")
    monkeypatch.setattr(trainer_module, "load_model", refuse)


@pytest.mark.parametrize("layout,frozen,message", [
    ({"model/notes.txt": "mine", "log.csv": "my,own,csv"}, False,
     "--output {out} holds other files and no pretraining run: choose a new or empty folder"),
    ({"model": "a file"}, False,
     "{out}/model is a file, where the run keeps its model folder: move it away or choose another --output"),
    ({"pretrain_config.json": "{}", "log.csv/x": "x"}, False,
     "{out}/log.csv is a folder, where the run keeps its log.csv file: move it away or choose another --output"),
    ({"pretrain_config.json": "{}", "passage_cache": "x"}, True,
     ("{out}/passage_cache is a file, where the run keeps its passage_cache folder: move it away or choose "
      "another --output")),
], ids=["other-files", "model-file", "log-folder", "cache-file"])
def test_an_output_that_is_no_run_or_has_a_wrong_entry_is_refused_first(tiny_bert, corpus, tmp_path, no_model_load,
                                                                        layout, frozen, message):
    out = tmp_path / "out"
    for name, text in layout.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    before = {p: p.read_text() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(GraphDocError, match=f"^{message.format(out=out)}$".replace("(", r"\(").replace(")", r"\)")):
        pretrain(corpus, out, tiny_setup(tiny_bert, frozen_encoder=frozen), resume="pretrain_config.json" in layout,
                 device="cpu")
    assert {p: p.read_text() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("cache_dir", ["afile.txt", "afile.txt/sub"])
def test_a_cache_dir_that_cannot_be_a_folder_is_one_line(tiny_bert, corpus, tmp_path, no_model_load, cache_dir):
    (tmp_path / "afile.txt").write_text("x")
    setup = tiny_setup(tiny_bert, frozen_encoder=True, cache_dir=str(tmp_path / cache_dir))
    with pytest.raises(GraphDocError, match=f"^--cache-dir {tmp_path / cache_dir}: {tmp_path / 'afile.txt'} is a "
                                            "file, not a folder$"):
        pretrain(corpus, tmp_path / "out", setup, device="cpu")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ 5. an input error leaves nothing behind
@pytest.mark.parametrize("make,message", [
    (lambda d: d / "missing.jsonl", "no such file or folder"),
    (lambda d: Path("no-such-corpus-name"), "not a named corpus"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "folder has no .markdown/.md/.txt files"),
    (lambda d: (d / "bad.jsonl").write_text("not json\n") and d / "bad.jsonl", "invalid JSON"),
    (lambda d: (d / "none.jsonl").write_text("") or d / "none.jsonl", "no document with two or more passages"),
    (lambda d: (d / "short.jsonl").write_text('{"_id": "a", "text": "One."}\n') and d / "short.jsonl",
     "no document with two or more passages"),
], ids=["missing", "unknown-name", "empty-folder", "broken-json", "empty-corpus", "no-usable-document"])
@pytest.mark.parametrize("max_steps", [None, 3])
def test_an_input_error_leaves_no_output_behind(tiny_bert, tmp_path, make, message, max_steps):
    source = make(tmp_path)
    setup = tiny_setup(tiny_bert, frozen_encoder=True, max_steps=max_steps, cache_dir=str(tmp_path / "cache"))
    with pytest.raises(GraphDocError, match=message):
        pretrain(source, tmp_path / "new" / "out", setup, device="cpu")
    assert not (tmp_path / "new" / "out").exists() and not (tmp_path / "cache").exists()
    (tmp_path / "empty-out").mkdir()
    with pytest.raises(GraphDocError, match=message):
        pretrain(source, tmp_path / "empty-out", setup, device="cpu")
    assert (tmp_path / "empty-out").is_dir() and not any((tmp_path / "empty-out").iterdir())  # kept, still empty


# ------------------------------------------------------------------ 6. counts that go on across a resumption
def test_log_and_summary_count_the_whole_run_across_a_resumption(stopped_run, corpus, tmp_path, tiny_bert):
    run, setup = stopped_run
    whole = pretrain(corpus, tmp_path / "whole", setup, device="cpu")
    resumed = pretrain(corpus, run, setup, resume=True, device="cpu")
    rows, expected = read_log(run), read_log(tmp_path / "whole")
    assert [r["documents"] for r in rows] == [r["documents"] for r in expected]
    assert int(rows[-1]["documents"]) == resumed.documents_used == whole.documents_used
    elapsed = [float(r["elapsed_s"]) for r in rows]
    assert elapsed == sorted(elapsed) and elapsed[4] >= elapsed[3]  # step 5, after the resumption, goes on
    assert resumed.seconds == pytest.approx(resumed.loop_seconds)
    assert resumed.steps_per_s == pytest.approx(6 / resumed.loop_seconds)
    assert resumed.documents_per_s == pytest.approx(resumed.documents_used / resumed.loop_seconds)


# ------------------------------------------------------------------ 7, 8. warnings only when they apply
def test_a_saved_start_model_warns_about_a_config_only_when_one_was_given(tiny_bert, corpus, tmp_path, caplog):
    from graphdoc.training import PretrainSetup

    first = pretrain(corpus, tmp_path / "first", tiny_setup(tiny_bert, max_steps=1), device="cpu")
    plain = PretrainSetup(pretrain=tiny_setup(tiny_bert, max_steps=1).pretrain)
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        pretrain(corpus, tmp_path / "plain", plain, model=str(first.model_dir), device="cpu")
    assert not [r for r in caplog.records if "ignoring" in r.getMessage()]
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        pretrain(corpus, tmp_path / "configured", tiny_setup(tiny_bert, max_steps=1), model=str(first.model_dir),
                 device="cpu")
    assert [r.getMessage() for r in caplog.records if "ignoring" in r.getMessage()] == [
        f"ignoring the given config's model settings: {first.model_dir} is a saved graphdoc model with its own"]


@pytest.mark.parametrize("backbone", ["graph", "flat"])
def test_an_unused_cache_dir_is_one_warning(tiny_bert, corpus, tmp_path, caplog, backbone):
    setup = tiny_setup(tiny_bert, max_steps=1, frozen_encoder=False, cache_dir=str(tmp_path / "cache"))
    if backbone == "flat":
        setup = setup.with_backbone("flat").with_overrides(objective="simcse")
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        pretrain(corpus, tmp_path / "out", setup, device="cpu")
    warning = (f"ignoring pretrain.cache_dir (--cache-dir) {tmp_path / 'cache'}: only a graph model with a frozen "
               "encoder caches passage vectors")
    assert [r.getMessage() for r in caplog.records if "cache_dir" in r.getMessage()] == [warning]
    assert not (tmp_path / "cache").exists()


# ------------------------------------------------------------------ 9. the CLI's summary line
def test_the_summary_counts_epochs_over_the_corpus_and_pluralises(tiny_bert, corpus, tmp_path):
    from graphdoc.cli.pretrain import describe_run

    three = pretrain(corpus, tmp_path / "three", tiny_setup(tiny_bert, epochs=3, frozen_encoder=True), device="cpu")
    assert three.distinct_documents == three.documents_used / 3
    assert describe_run(three) == f"{three.steps} steps, 3 epochs over {three.distinct_documents} documents"
    one = pretrain(corpus, tmp_path / "one", tiny_setup(tiny_bert, max_steps=1, frozen_encoder=True), device="cpu")
    assert describe_run(one) == "1 step over 4 documents"


def broken_after_24(path: Path) -> tuple[Path, str]:
    """40 documents of 4 sentences (2+ passages each), a broken line after the 24th; and the corpus unbroken.
    With ``max_steps`` 6 of 4 documents, counting stops after 21 documents and training meets the line."""
    lines = [json.dumps({"_id": f"d{i}", "text": " ".join(f"{WORDS[(i + j) % len(WORDS)]} one two three four."
                                                          for j in range(4))}) + "\n" for i in range(40)]
    path.write_text("".join(lines[:24]) + "{broken\n" + "".join(lines[24:]), encoding="utf-8")
    return path, "".join(lines)


def test_a_broken_line_found_after_some_steps_but_before_a_checkpoint_leaves_nothing(tiny_bert, tmp_path,
                                                                                    monkeypatch, caplog):
    """The same command runs again once the line is fixed: no '--resume' asked of a run with nothing to resume."""
    corpus, good = broken_after_24(tmp_path / "corpus.jsonl")
    steps = []
    original = Trainer._train_step
    monkeypatch.setattr(Trainer, "_train_step", lambda self, batch: (steps.append(self.step), original(self, batch))[1])
    setup = tiny_setup(tiny_bert, checkpoint_every=100, epochs=1, max_steps=6)
    with caplog.at_level(logging.WARNING, logger="graphdoc"), pytest.raises(GraphDocError, match="invalid JSON"):
        pretrain(corpus, tmp_path / "out", setup, device="cpu")
    assert len(steps) >= 3  # the line was met well into the epoch
    assert not (tmp_path / "out").exists()
    assert [r.getMessage() for r in caplog.records if "removing" in r.getMessage()] == [
        f"removing {tmp_path / 'out'}: the run stopped at step {len(steps)}, before its first checkpoint, so it "
        "cannot be resumed"]
    corpus.write_text(good, encoding="utf-8")
    assert pretrain(corpus, tmp_path / "out", setup, device="cpu").steps == 6


def test_a_broken_line_met_after_a_checkpoint_keeps_the_run_to_resume(tiny_bert, tmp_path):
    corpus, _ = broken_after_24(tmp_path / "corpus.jsonl")
    setup = tiny_setup(tiny_bert, checkpoint_every=2, epochs=1, max_steps=6)
    with pytest.raises(GraphDocError, match="invalid JSON"):
        pretrain(corpus, tmp_path / "out", setup, device="cpu")
    assert ckpt.list_checkpoints(tmp_path / "out") and (tmp_path / "out" / "pretrain_config.json").is_file()
