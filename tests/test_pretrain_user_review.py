"""Review of ``graphdoc pretrain``: an ``--output`` under a file, the last loss of a resumed run that takes no step,
the log's line endings, a config of flat model settings, and under torchrun the logging of processes other than 0
and the files left by an input error."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from test_pretrain_checkpoint import WORDS

from graphdoc.cli import main
from graphdoc.config import PassageEncoderConfig
from graphdoc.flat_config import FlatModelConfig
from graphdoc.training import PretrainConfig, PretrainSetup, pretrain
from graphdoc.training.metrics import LOG_NAME
from graphdoc.training.run_folder import SUMMARY_NAME

pytestmark = pytest.mark.usefixtures("restore_cli_state")  # main configures logging for the process


@pytest.fixture
def corpus(tmp_path) -> Path:
    """Six documents of 2 to 4 capitalised five-word sentences (each splits into two docsplit halves)."""
    rng = random.Random(0)
    records = [{"_id": f"d{i}", "text": " ".join(" ".join(rng.choice(WORDS) for _ in range(5)).capitalize() + "."
                                                for _ in range(rng.randint(2, 4)))} for i in range(6)]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def flat_config(path: Path, model: Path) -> Path:
    config = {"backbone": "flat", "model": {"passage_encoder": {"model_name_or_path": str(model), "pooling": "mean"}},
              "pretrain": {"objective": "docsplit", "batch_size": 3, "epochs": 1, "lr": 1e-3, "log_every": 1,
                           "gradient_checkpointing": False}}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def flat_setup(model: Path) -> PretrainSetup:
    encoder = PassageEncoderConfig(model_name_or_path=str(model), pooling="mean")
    return PretrainSetup(FlatModelConfig(passage_encoder=encoder),
                         PretrainConfig(objective="docsplit", batch_size=3, epochs=1, lr=1e-3, log_every=1,
                                        checkpoint_every=1, gradient_checkpointing=False), backbone="flat")


def test_an_output_under_a_file_is_one_line_before_anything_is_written(tiny_bert, corpus, tmp_path, capsys):
    (tmp_path / "a-file").write_text("mine", encoding="utf-8")
    config = flat_config(tmp_path / "flat.yaml", tiny_bert)
    output = tmp_path / "a-file" / "run"
    status = main(["-q", "pretrain", "--corpus", str(corpus), "--config", str(config), "--output", str(output),
                   "--device", "cpu"])
    assert status == 1
    assert capsys.readouterr().err.splitlines() == [
        f"graphdoc pretrain: error: --output {output}: {tmp_path / 'a-file'} is a file, not a folder"]
    assert (tmp_path / "a-file").read_text(encoding="utf-8") == "mine"


def test_resuming_a_finished_run_keeps_its_last_loss_and_the_log_ends_lines_alike(tiny_bert, corpus, tmp_path):
    """A resumed run with no step left re-writes pretrain.json: with the run's last loss and MLM loss, not null.
    log.csv ends every line with one newline, in a new run and after a resumption rewrote it."""
    first = pretrain(corpus, tmp_path / "run", flat_setup(tiny_bert), device="cpu", show_progress_bar=False)
    assert first.steps == 2 and first.loss is not None and first.mlm_loss is not None
    log = (tmp_path / "run" / LOG_NAME).read_bytes()
    assert b"\r" not in log and log.count(b"\n") == 3  # the header and two steps
    again = pretrain(corpus, tmp_path / "run", flat_setup(tiny_bert), resume=True, device="cpu",
                     show_progress_bar=False)
    assert (again.steps, again.loss, again.mlm_loss) == (2, first.loss, first.mlm_loss)
    summary = json.loads((tmp_path / "run" / SUMMARY_NAME).read_text(encoding="utf-8"))
    assert (summary["loss"], summary["mlm_loss"]) == (first.loss, first.mlm_loss)
    assert (tmp_path / "run" / LOG_NAME).read_bytes() == log


def test_a_process_other_than_0_logs_errors_only(tiny_bert, corpus, tmp_path, capsys, monkeypatch):
    """Under torchrun every process runs the CLI: process 0 logs, the others would repeat its lines (INFO, and
    warnings such as the unused --cache-dir one). RANK=1 without WORLD_SIZE runs alone, as rank 1 would log."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    config = flat_config(tmp_path / "flat.yaml", tiny_bert)
    status = main(["pretrain", "--corpus", str(corpus), "--config", str(config), "--output", str(tmp_path / "run"),
                   "--cache-dir", str(tmp_path / "cache"), "--device", "cpu"])
    assert status == 0 and (tmp_path / "run" / "model" / "config.json").is_file()
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith(("INFO", "WARNING"))] == []


@pytest.mark.parametrize("backbone", [None, "flat"])
def test_a_config_of_flat_model_settings_without_a_backbone_trains_a_flat_model(tiny_bert, tmp_path, backbone):
    """As ``graphdoc embed`` reads a model config: ``graph: {graph_type: flat}`` is a flat model's section."""
    from graphdoc.training import load_setup

    path = tmp_path / "flat-model.yaml"
    path.write_text(yaml.safe_dump({"model": {"passage_encoder": {"model_name_or_path": str(tiny_bert)},
                                              "graph": {"graph_type": "flat", "document": "mean"}},
                                    "pretrain": {"objective": "simcse"}}), encoding="utf-8")
    setup = load_setup(path, backbone)
    assert setup.backbone == "flat" and setup.model.graph.document == "mean"
    assert setup.pretrain.objective == "simcse"


def test_a_config_of_flat_model_settings_is_refused_for_a_graph_model(tiny_bert, corpus, tmp_path, capsys):
    path = tmp_path / "flat-model.yaml"
    path.write_text(yaml.safe_dump({"model": {"graph": {"graph_type": "flat"}}}), encoding="utf-8")
    status = main(["-q", "pretrain", "--corpus", str(corpus), "--config", str(path), "--backbone", "graph",
                   "--output", str(tmp_path / "run")])
    assert status == 1
    assert capsys.readouterr().err.splitlines() == [
        f"graphdoc pretrain: error: {path}: model.graph.graph_type must be one of full, section; got 'flat'"]
    assert not (tmp_path / "run").exists()


SLOW_RANKS = '''
import os, sys, time
from graphdoc.training import trainer
from graphdoc.training.graph_pretraining import GraphPretraining

init, discard = GraphPretraining.__init__, trainer.Trainer.discard_new_output

def late_init(self, *args, **kwargs):  # process 1 opens the passage cache late
    if os.environ["RANK"] == "1":
        time.sleep(0.5)
    init(self, *args, **kwargs)

def discard_then_wait(self):  # process 0 stays alive a while after removing the run's files
    discard(self)
    time.sleep(3)

GraphPretraining.__init__, trainer.Trainer.discard_new_output = late_init, discard_then_wait
from graphdoc.cli import main
sys.exit(main(sys.argv[1:]))
'''


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH")
def test_an_input_error_under_torchrun_leaves_no_passage_cache_behind(tiny_bert, tmp_path):
    """Process 0 removes what a new run wrote after an input error; process 1 must not make the frozen mode's
    passage cache folder after that (a re-run would find an --output that holds other files)."""
    (tmp_path / "one.jsonl").write_text(json.dumps({"_id": "a", "text": "One two. Three four."}) + "\n",
                                        encoding="utf-8")
    (tmp_path / "slow_ranks.py").write_text(SLOW_RANKS, encoding="utf-8")
    config = tmp_path / "graph.yaml"
    config.write_text(yaml.safe_dump({"model": {"chunker": {"max_words": 2},
                                                "passage_encoder": {"model_name_or_path": str(tiny_bert)}},
                                      "pretrain": {"frozen_encoder": True, "batch_size": 2}}), encoding="utf-8")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    command = ["torchrun", "--standalone", "--nproc_per_node", "2", str(tmp_path / "slow_ranks.py"), "-q", "pretrain",
               "--corpus", str(tmp_path / "one.jsonl"), "--output", str(tmp_path / "run"), "--config", str(config),
               "--device", "cpu"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0
    assert "error: pretrain needs at least 2 documents with two or more passages" in done.stderr
    assert not (tmp_path / "run").exists()
