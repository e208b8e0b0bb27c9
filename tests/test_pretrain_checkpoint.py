"""Checkpoints without pickle, and ``resume`` after a kill ending where an uninterrupted run ends."""

from __future__ import annotations

import json
import shutil
import logging
import random
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import pretrain_killed_before_step_5
import torch
from safetensors.torch import load_file

from graphdoc.config import ChunkerConfig, GraphConfig, ModelConfig, PassageEncoderConfig
from graphdoc.errors import GraphDocError
from graphdoc.training import PretrainConfig, PretrainSetup, pretrain
from graphdoc.training import checkpoint as ckpt
from graphdoc.training.metrics import TrainLog, read_log

WORDS = "graph attention passage document retrieval vector dense sparse meeting topic section fox dog".split()


def write_corpus(path: Path, n: int = 14, seed: int = 0) -> Path:
    """``n`` documents of 1 to 6 short sentences, plus an empty one."""
    rng = random.Random(seed)
    records = [{"_id": "empty", "text": "  "}]
    for i in range(n):
        sentences = [" ".join(rng.choice(WORDS) for _ in range(5)) + "." for _ in range(rng.randint(1, 6))]
        records.append({"_id": f"d{i}", "title": f"T{i}", "text": " ".join(sentences)})
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def tiny_setup(model: Path, **pretrain) -> PretrainSetup:
    settings = dict(batch_size=4, epochs=2, lr=1e-3, grad_cache_chunk=6, checkpoint_every=2, log_every=1,
                    shuffle_buffer=5, temperature=0.1)
    settings.update(pretrain)
    return PretrainSetup(ModelConfig(chunker=ChunkerConfig(max_words=5),
                                     passage_encoder=PassageEncoderConfig(model_name_or_path=str(model)),
                                     graph=GraphConfig(dropout=0.1, attention_dropout=0.1)),
                         PretrainConfig(**settings))


def weights(folder: Path) -> dict[str, torch.Tensor]:
    tensors = load_file(str(folder / "model.safetensors"))
    encoder = load_file(str(folder / "passage_encoder" / "model.safetensors"))
    tensors.update({f"encoder.{k}": v for k, v in encoder.items()})
    return tensors


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_optimizer_state_round_trips_through_plain_files():
    param = torch.nn.Parameter(torch.randn(3, 2))
    opt = torch.optim.AdamW([param], lr=0.1)
    param.grad = torch.ones(3, 2)
    opt.step()
    tensors, meta = ckpt.optimizer_files(opt)
    assert set(tensors) == {"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq"}
    json.dumps(meta)  # plain JSON
    other = torch.optim.AdamW([torch.nn.Parameter(param.detach().clone())], lr=0.5)
    other.load_state_dict(ckpt.optimizer_state(tensors, json.loads(json.dumps(meta))))
    assert other.param_groups[0]["lr"] == 0.1
    torch.testing.assert_close(other.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


def test_global_random_states_round_trip_through_json():
    saved = json.loads(json.dumps(ckpt.global_rng_json()))
    expected = (np.random.random(), random.random())
    ckpt.set_global_rng_json(saved)
    assert (np.random.random(), random.random()) == expected


@pytest.mark.parametrize("frozen,head", [(False, None), (True, None), (True, 6)],
                         ids=["full", "frozen", "frozen-projection-head"])
def test_resume_after_a_kill_equals_an_uninterrupted_run(tiny_bert, tmp_path, monkeypatch, frozen, head):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    setup = tiny_setup(tiny_bert, frozen_encoder=frozen, projection_head=head)
    whole = pretrain(corpus, tmp_path / "whole", setup, device="cpu")
    assert whole.steps == whole.total_steps == 6 and whole.epoch == 1  # 3 steps per epoch, 2 epochs

    pretrain_killed_before_step_5(corpus, tmp_path / "run", setup, monkeypatch)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "run")] == ["step-00000002", "step-00000004"]
    head_file = ckpt.list_checkpoints(tmp_path / "run")[-1] / "projection_head.safetensors"
    assert head_file.is_file() == (head is not None)
    resumed = pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu")

    assert resumed.steps == 6
    assert (resumed.documents_used, resumed.empty_skipped, resumed.one_passage_skipped) == \
        (whole.documents_used, whole.empty_skipped, whole.one_passage_skipped)
    expected, got = weights(whole.model_dir), weights(resumed.model_dir)
    assert set(got) == set(expected)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=1e-5, msg=name)
    assert expected["graph.layers.0.out.weight"].abs().sum() > 0  # trained: no longer the zero init
    losses = [float(r["loss"]) for r in read_log(tmp_path / "run")]
    assert losses == pytest.approx([float(r["loss"]) for r in read_log(tmp_path / "whole")], rel=1e-5)
    assert resumed.epoch_loss == pytest.approx(whole.epoch_loss, rel=1e-5)  # its sum is in the checkpoint


def _log_of_10_steps(output: Path) -> Path:
    log = TrainLog(output)
    for step in range(1, 11):
        log.write({"step": step, "epoch": 0, "loss": 1.0 / step, "lr": 1e-3, "documents": 4 * step})
    return log.path


def test_a_log_row_a_kill_cut_short_goes_on_resume(tmp_path):
    path = _log_of_10_steps(tmp_path)
    with open(path, "ab") as handle:  # the kill came after the first character of step 11's row: it reads as step 1
        handle.write(b"1")
    TrainLog(tmp_path, resume_step=10)
    assert [int(r["step"]) for r in read_log(tmp_path)] == list(range(1, 11))
    assert path.read_bytes().endswith(b"\n") and len(path.read_bytes().splitlines()) == 11


def test_a_failure_while_the_log_is_cut_to_the_checkpoint_loses_no_row(tmp_path, monkeypatch):
    import csv

    path = _log_of_10_steps(tmp_path)
    before = path.read_bytes()

    def killed(self, rows):
        raise KeyboardInterrupt

    monkeypatch.setattr(csv.DictWriter, "writerows", killed)
    with pytest.raises(KeyboardInterrupt):
        TrainLog(tmp_path, resume_step=4)
    assert path.read_bytes() == before  # (it was emptied first, and the kill left it so)


@pytest.mark.parametrize("kept", ["step-00000002", "step-00000004"])
def test_a_checkpoint_from_before_distinct_documents_were_counted_resumes_without_a_wrong_count(
        tiny_bert, tmp_path, monkeypatch, kept):
    from graphdoc.cli.pretrain import describe_run

    corpus = write_corpus(tmp_path / "corpus.jsonl")
    setup = tiny_setup(tiny_bert, frozen_encoder=True)
    whole = pretrain(corpus, tmp_path / "whole", setup, device="cpu")
    pretrain_killed_before_step_5(corpus, tmp_path / "run", setup, monkeypatch)
    for folder in ckpt.list_checkpoints(tmp_path / "run"):
        if folder.name != kept:
            shutil.rmtree(folder)
    state = json.loads((tmp_path / "run" / "checkpoints" / kept / ckpt.STATE_NAME).read_text(encoding="utf-8"))
    del state["stats"]["distinct"]  # as graphdoc wrote it before it counted them
    (tmp_path / "run" / "checkpoints" / kept / ckpt.STATE_NAME).write_text(json.dumps(state), encoding="utf-8")
    resumed = pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu")
    assert (resumed.steps, resumed.documents_used) == (whole.steps, whole.documents_used)
    if kept == "step-00000002":  # in the first epoch the documents used so far are the distinct ones
        assert resumed.distinct_documents == whole.distinct_documents
        assert describe_run(resumed) == describe_run(whole) == f"6 steps, 2 epochs over {whole.distinct_documents} documents"
    else:  # past it, unknown: not a count of the documents after the resume point
        assert resumed.distinct_documents == 0
        assert describe_run(resumed) == f"6 steps over {whole.documents_used} documents"


def test_checkpoint_folder_holds_no_pickle(tiny_bert, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    pretrain(corpus, tmp_path / "run", tiny_setup(tiny_bert, max_steps=2, frozen_encoder=True), device="cpu")
    folder = ckpt.list_checkpoints(tmp_path / "run")[-1]
    suffixes = {p.suffix for p in folder.rglob("*") if p.is_file()}
    assert suffixes <= {".json", ".safetensors", ".txt", ".md"}  # (.md: the model card)
    state = json.loads((folder / ckpt.STATE_NAME).read_text())
    assert (state["step"], state["epoch"]) == (2, 0) and 8 <= state["offset"] <= 14  # 2 batches of 4 used
    assert load_file(str(folder / "rng.safetensors"))["torch_cpu.rank0"].dtype == torch.uint8


def test_existing_run_needs_resume_and_the_same_settings(tiny_bert, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    setup = tiny_setup(tiny_bert, max_steps=2, frozen_encoder=True)
    pretrain(corpus, tmp_path / "run", setup, device="cpu")
    with pytest.raises(GraphDocError, match="already holds a training run; pass --resume"):
        pretrain(corpus, tmp_path / "run", setup, device="cpu")
    with pytest.raises(GraphDocError, match=r"cannot resume with pretrain.lr=0.5: the run was started with 0.001"):
        pretrain(corpus, tmp_path / "run", setup.with_overrides(lr=0.5), resume=True, device="cpu")
    done = pretrain(corpus, tmp_path / "run", setup.with_overrides(log_every=5), resume=True, device="cpu")
    assert done.steps == 2  # already finished: nothing more to do


def test_projection_head_trains_with_the_model_and_is_left_out_of_it(tiny_bert, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    plain = pretrain(corpus, tmp_path / "plain", tiny_setup(tiny_bert, frozen_encoder=True), device="cpu")
    headed = pretrain(corpus, tmp_path / "head", tiny_setup(tiny_bert, frozen_encoder=True, projection_head=3),
                      device="cpu")
    expected, got = weights(plain.model_dir), weights(headed.model_dir)
    assert set(got) == set(expected)  # the saved model is the encoder alone, loadable as any other
    assert not torch.allclose(got["graph.layers.0.out.weight"], expected["graph.layers.0.out.weight"])
    head = load_file(str(ckpt.list_checkpoints(tmp_path / "head")[-1] / "projection_head.safetensors"))
    dim = expected["graph.layers.0.out.weight"].shape[0]
    assert {k: tuple(v.shape) for k, v in head.items()} == {"0.weight": (dim, dim), "0.bias": (dim,),
                                                            "2.weight": (3, dim), "2.bias": (3,)}
    with pytest.raises(GraphDocError, match=r"cannot resume with pretrain.projection_head=None: the run was "
                                            r"started with 3"):
        pretrain(corpus, tmp_path / "head", tiny_setup(tiny_bert, frozen_encoder=True), resume=True, device="cpu")


def test_documents_are_prepared_once_per_run_and_the_memo_changes_nothing(tiny_bert, tmp_path, monkeypatch):
    from graphdoc.training.graph_pretraining import GraphPretraining

    corpus = write_corpus(tmp_path / "corpus.jsonl")
    prepared = []
    original = GraphPretraining.prepare
    monkeypatch.setattr(GraphPretraining, "prepare", lambda self, doc: prepared.append(doc.id) or original(self, doc))
    memo = pretrain(corpus, tmp_path / "memo", tiny_setup(tiny_bert, frozen_encoder=True, epochs=3), device="cpu")
    assert sorted(prepared) == sorted(f"d{i}" for i in range(14))  # counting pass + 3 epochs: once each
    prepared.clear()
    plain = pretrain(corpus, tmp_path / "plain", tiny_setup(tiny_bert, frozen_encoder=True, epochs=3,
                                                             prepared_cache_mb=0), device="cpu")
    assert len(prepared) == 4 * 14
    expected, got = weights(plain.model_dir), weights(memo.model_dir)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=0, rtol=0, msg=name)


def test_a_last_batch_of_one_document_moves_no_weight(tiny_bert, tmp_path):
    """Its loss is 0 and it has no gradient; an optimiser step would still move the weights (AdamW's momentum
    and weight decay), so none is taken, while the learning-rate schedule goes on."""
    records = [{"_id": f"d{i}", "text": " ".join(f"{w} {w} graph passage." for w in WORDS[3 * i:3 * i + 3])}
               for i in range(3)]
    corpus = tmp_path / "three.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    setup = tiny_setup(tiny_bert, batch_size=2, epochs=1, checkpoint_every=1, keep_checkpoints=5)
    result = pretrain(corpus, tmp_path / "run", setup, device="cpu")
    assert result.steps == result.total_steps == 2
    first, last = (weights(folder / ckpt.MODEL_DIR) for folder in ckpt.list_checkpoints(tmp_path / "run"))
    assert first.keys() == last.keys()
    assert all(torch.equal(first[name], last[name]) for name in first)
    log = read_log(tmp_path / "run")
    assert float(log[0]["loss"]) > 0 and float(log[1]["loss"]) == 0.0
    # the run's mean loss leaves the one-document step out: it is the first step's
    assert result.loss == 0.0 and result.epoch_loss == pytest.approx(float(log[0]["loss"]), rel=1e-6)


def test_progress_bar_shows_loss_learning_rate_and_documents_per_second(tiny_bert, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    pretrain(corpus, tmp_path / "run", tiny_setup(tiny_bert, max_steps=2, frozen_encoder=True), device="cpu",
             show_progress_bar=True)
    last = float(read_log(tmp_path / "run")[-1]["lr"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("Pretraining: 100%")]
    assert len(lines) == 1  # stderr is not a terminal here: one plain line as the run ends
    assert re.search(r"2/2 \[[0-9:]+<[0-9:]+, loss \d+\.\d{3} lr (\S+) \d+(\.\d+)? doc/s\]$", lines[0])
    shown = re.search(r"lr (\S+) ", lines[0]).group(1)
    assert float(shown) == pytest.approx(last, rel=0.05)


def test_progress_bar_fits_80_columns_at_its_stated_limits():
    from tqdm import tqdm

    from graphdoc.training.trainer import BAR_FORMAT, bar_postfix

    for steps, total, seconds in ((540, 1_200, 30.0), (5_000, 9_000, 1_800.0), (50_000, 99_999, 3_500.0),
                                  (99_999, 99_999, 3_599.0)):  # elapsed and remaining under an hour
        line = tqdm.format_meter(steps, total, seconds, ncols=80, prefix="Pretraining", bar_format=BAR_FORMAT,
                                 postfix=bar_postfix(2.371, 3.7e-4, 99_999))
        assert len(line) <= 80 and line.endswith(", loss 2.371 lr 3.7e-4 99999 doc/s]"), line


@pytest.mark.parametrize("rate, shown", [(1683.4, "1683"), (10.2, "10"), (9.96, "10"), (9.94, "9.9"), (1.1, "1.1"),
                                         (0.4, "0.4"), (0.096, "0.1"), (0.042, "0.042"), (0.0, "0")])
def test_progress_bar_shows_a_slow_rate_with_its_decimals(rate, shown):
    from graphdoc.training.trainer import bar_postfix

    assert bar_postfix(2.371, 3.7e-4, rate) == f"loss 2.371 lr 3.7e-4 {shown} doc/s"


def test_a_second_run_into_the_same_output_is_refused_while_the_first_writes(tiny_bert, tmp_path):
    from graphdoc.fileio import LOCK_NAME, writer_lock

    corpus, out = write_corpus(tmp_path / "corpus.jsonl"), tmp_path / "run"
    setup = tiny_setup(tiny_bert, max_steps=2, frozen_encoder=True)
    with writer_lock(out):  # as a first `graphdoc pretrain` into `out` holds it
        with pytest.raises(GraphDocError, match=f"^another graphdoc process is writing {re.escape(str(out))}$"):
            pretrain(corpus, out, setup, device="cpu", resume=True)
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing of the second run's
    assert not out.exists()
    (out).mkdir()
    (out / LOCK_NAME).write_text("")  # what a run killed before its first file leaves: no other run holds it
    pretrain(corpus, out, setup, device="cpu")
    assert (out / "model").is_dir() and not (out / LOCK_NAME).exists()  # released at the end
    pretrain(corpus, out, setup, device="cpu", resume=True)  # and the same folder takes the next run


def test_a_refused_second_run_leaves_what_the_first_wrote_meanwhile(tiny_bert, tmp_path, monkeypatch):
    from graphdoc.fileio import writer_lock
    from graphdoc.training import trainer

    corpus, out = write_corpus(tmp_path / "corpus.jsonl"), tmp_path / "run"
    cache = tmp_path / "cache"
    setup = tiny_setup(tiny_bert, max_steps=2, frozen_encoder=True, cache_dir=str(cache))

    def first_run_goes_on(folder):  # the first run writes its first files while the second one starts
        (out / "pretrain_config.json").write_text("{}", encoding="utf-8")
        cache.mkdir()
        return writer_lock(folder)

    monkeypatch.setattr(trainer, "writer_lock", first_run_goes_on)
    with writer_lock(out):  # the first run holds the folder
        with pytest.raises(GraphDocError, match="^another graphdoc process is writing"):
            pretrain(corpus, out, setup, device="cpu")
        assert (out / "pretrain_config.json").is_file() and cache.is_dir()  # the second run removed nothing


@pytest.mark.parametrize("stop, cache_dir", [("diverged", False), ("diverged", True), ("ctrl-c", False)])
def test_a_run_stopped_before_its_first_checkpoint_keeps_the_passage_vectors_it_encoded(tiny_bert, tmp_path,
                                                                                      monkeypatch, caplog, stop,
                                                                                      cache_dir):
    """The frozen mode's vectors were written at checkpoints only, and an error before the first removed the new
    run folder with its cache (and a --cache-dir the run made): the next run encoded everything again."""
    from graphdoc.training.trainer import Trainer

    corpus = write_corpus(tmp_path / "corpus.jsonl")
    cache = tmp_path / "shared-cache" if cache_dir else None
    setup = tiny_setup(tiny_bert, frozen_encoder=True, checkpoint_every=100, max_steps=2, cache_dir=cache)
    output = tmp_path / "run"
    original = Trainer._check_finite

    def stopped(self, loss):
        if stop == "ctrl-c":
            raise KeyboardInterrupt
        raise GraphDocError("training diverged at step 1: loss nan")

    monkeypatch.setattr(Trainer, "_check_finite", stopped)
    with caplog.at_level(logging.WARNING, logger="graphdoc"), \
            pytest.raises(KeyboardInterrupt if stop == "ctrl-c" else GraphDocError):
        pretrain(corpus, output, setup, device="cpu")
    monkeypatch.setattr(Trainer, "_check_finite", original)
    folder = cache if cache_dir else output / "passage_cache"
    assert list(folder.rglob("vectors-*.npy"))
    if stop == "diverged":  # the run's other files go: the same command runs again
        assert (not output.exists()) if cache_dir else [p.name for p in output.iterdir()] == ["passage_cache"]
        assert [r.getMessage() for r in caplog.records if "removing" in r.getMessage()] == [
            f"removing {output}: the run stopped at step 0, before its first checkpoint, so it cannot be resumed; "
            f"the passage vectors it encoded stay in {folder} for the next run"]
    result = pretrain(corpus, output, setup, device="cpu", resume=stop == "ctrl-c")
    assert result.steps == 2 and result.cache_hits > 0


def test_a_run_with_no_vector_encoded_leaves_no_passage_cache(tiny_bert, tmp_path, monkeypatch):
    from graphdoc.training.trainer import Trainer

    corpus = write_corpus(tmp_path / "corpus.jsonl")
    setup = tiny_setup(tiny_bert, frozen_encoder=True, checkpoint_every=100, max_steps=2)

    def broken(self, batch):
        raise GraphDocError("corpus.jsonl:3: invalid JSON")

    monkeypatch.setattr(Trainer, "_train_step", broken)
    with pytest.raises(GraphDocError):
        pretrain(corpus, tmp_path / "run", setup, device="cpu")
    assert not (tmp_path / "run").exists()


def test_a_failed_run_leaves_what_another_run_wrote_into_the_cache_folder_it_made(tiny_bert, tmp_path, monkeypatch):
    """A failed run removed the whole --cache-dir it made while a second run was writing into it: the second run's
    encoder.json vanished and its next shard had no folder. Now only folders with no vectors go, and a run whose
    folder went makes it again when it writes vectors."""
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.training.cache import PassageVectorCache
    from graphdoc.training.trainer import Trainer

    corpus = write_corpus(tmp_path / "corpus.jsonl")
    cache = tmp_path / "shared-cache"
    setup = tiny_setup(tiny_bert, frozen_encoder=True, checkpoint_every=100, max_steps=2, cache_dir=cache)
    encoder = GraphDocEncoder.from_pretrained(tiny_bert, device="cpu").passage_encoder
    other = {}

    def broken(self, batch):  # a second run opens the cache while this one runs
        other["cache"] = PassageVectorCache(cache, encoder, shard_size=1)
        raise GraphDocError("corpus.jsonl:3: invalid JSON")

    monkeypatch.setattr(Trainer, "_train_step", broken)
    with pytest.raises(GraphDocError, match="invalid JSON"):
        pretrain(corpus, tmp_path / "run", setup, device="cpu")
    assert not (tmp_path / "run").exists()
    other["cache"].encode(encoder.tokenize(["graph attention networks"]))  # its next shard
    folder = other["cache"].folder
    assert folder.parent == cache and (folder / "encoder.json").is_file()
    assert len(list(folder.glob("vectors-*.npy"))) == 1
