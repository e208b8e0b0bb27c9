"""``torchrun`` with 2 CPU processes (gloo) trains exactly as one process over the same global batch."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from graphdoc.training import load_setup, pretrain
from graphdoc.training.metrics import read_log

WORDS = "graph attention passage document retrieval vector dense sparse meeting topic section fox dog".split()

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


def no_dropout_copy(tiny_bert: Path, folder: Path) -> Path:
    """The tiny encoder without dropout: one process and two then see the very same network."""
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(tiny_bert, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(folder)
    return folder


def write_inputs(tmp_path: Path, model: Path) -> tuple[Path, Path]:
    rng = random.Random(1)
    records = []
    for i in range(9):
        sentences = [" ".join(rng.choice(WORDS) for _ in range(5)) + "." for _ in range(rng.randint(2, 6))]
        records.append({"_id": f"d{i}", "text": " ".join(sentences)})
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    encoder = {"model_name_or_path": str(model), "pooling": "mean"}  # mean: vectors that differ more than CLS
    config = {"model": {"chunker": {"max_words": 5}, "passage_encoder": encoder,
                        "graph": {"dropout": 0.0, "attention_dropout": 0.0}},
              # adam_epsilon 1e-3: Adam would turn float noise in near-zero gradients (GAT's att_dst)
              # into full-size steps, so ranks summing in another order could move those weights apart
              "pretrain": {"batch_size": 5, "epochs": 1, "lr": 1e-2, "adam_epsilon": 1e-3, "warmup_ratio": 0.0,
                           "grad_cache_chunk": 4,
                           "log_every": 1, "shuffle_buffer": 4, "temperature": 0.1}}
    path = tmp_path / "pretrain.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return corpus, path


def run_two_processes_and_one(corpus, config, tmp_path):
    """Pretrain over 2 gloo processes (torchrun, into tmp_path/ddp) and in this process (tmp_path/single)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    command = ["torchrun", "--standalone", "--nproc_per_node", "2", "-m", "graphdoc", "-q", "pretrain",
               "--corpus", str(corpus), "--output", str(tmp_path / "ddp"), "--config", str(config), "--device", "cpu"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = pretrain(corpus, tmp_path / "single", load_setup(config), device="cpu", show_progress_bar=False)
    finally:
        torch.set_num_threads(threads)
    return single


def test_two_gloo_processes_equal_one(tiny_bert, tmp_path):
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun not on PATH")
    model = no_dropout_copy(tiny_bert, tmp_path / "encoder")
    corpus, config = write_inputs(tmp_path, model)
    single = run_two_processes_and_one(corpus, config, tmp_path)
    assert single.steps == 2  # 9 documents, 5 per step: the second step's batch splits 2 + 2 (or 3 + 1)
    ddp_log, single_log = read_log(tmp_path / "ddp"), read_log(tmp_path / "single")
    for column in ("loss", "grad_norm"):  # Adam is blind to a wrong gradient scale; the norm is not
        assert [float(r[column]) for r in ddp_log] == pytest.approx([float(r[column]) for r in single_log], rel=1e-4)
    for name in ("model.safetensors", "passage_encoder/model.safetensors"):
        got, expected = load_file(str(tmp_path / "ddp" / "model" / name)), load_file(str(single.model_dir / name))
        assert set(got) == set(expected)
        for key in expected:
            torch.testing.assert_close(got[key], expected[key], atol=1e-4, rtol=1e-4, msg=f"{name}: {key}")
    assert load_file(str(single.model_dir / "model.safetensors"))["graph.layers.0.out.weight"].abs().sum() > 0


def test_two_gloo_processes_equal_one_for_flat_docsplit_with_mlm(tiny_bert, tmp_path):
    """The flat texts are gathered like sub-document graphs; the MLM term is the mean over every process's
    masked tokens, so it too equals the single-process run; the projection head's gradients are averaged
    like the model's."""
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun not on PATH")
    model = no_dropout_copy(tiny_bert, tmp_path / "encoder")
    rng = random.Random(2)
    records = [{"_id": f"d{i}", "text": " ".join(" ".join(rng.choice(WORDS) for _ in range(5)).capitalize() + "."
                                                 for _ in range(rng.randint(2, 6)))} for i in range(9)]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    config = tmp_path / "flat.yaml"
    config.write_text(yaml.safe_dump({
        "backbone": "flat", "model": {"passage_encoder": {"model_name_or_path": str(model), "pooling": "mean"}},
        "pretrain": {"objective": "docsplit", "batch_size": 5, "epochs": 1, "lr": 1e-3, "adam_epsilon": 1e-3,
                     "warmup_ratio": 0.0, "grad_cache_chunk": 4, "gradient_checkpointing": False, "log_every": 1,
                     "shuffle_buffer": 4, "temperature": 0.1, "projection_head": 16}}), encoding="utf-8")
    single = run_two_processes_and_one(corpus, config, tmp_path)
    assert single.steps == 2 and single.mlm_loss is not None
    ddp_log, single_log = read_log(tmp_path / "ddp"), read_log(tmp_path / "single")
    for column in ("loss", "mlm_loss", "grad_norm"):
        assert [float(r[column]) for r in ddp_log] == pytest.approx([float(r[column]) for r in single_log], rel=1e-4)
    name = "passage_encoder/model.safetensors"
    got, expected = load_file(str(tmp_path / "ddp" / "model" / name)), load_file(str(single.model_dir / name))
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], atol=1e-4, rtol=1e-4, msg=key)


def test_two_gloo_processes_in_frozen_mode_count_every_processes_cache_lookups(tiny_bert, tmp_path):
    """Each process looks up the passages of its own documents: pretrain.json sums both (it gave process 0's)."""
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun not on PATH")
    corpus, config = write_inputs(tmp_path, no_dropout_copy(tiny_bert, tmp_path / "encoder"))
    setup = yaml.safe_load(config.read_text(encoding="utf-8"))
    setup["pretrain"].update(frozen_encoder=True, epochs=2)
    config.write_text(yaml.safe_dump(setup), encoding="utf-8")
    single = run_two_processes_and_one(corpus, config, tmp_path)
    ddp = json.loads((tmp_path / "ddp" / "pretrain.json").read_text(encoding="utf-8"))
    assert single.cache_misses > 0 and single.cache_hits > 0  # each passage a miss, then a hit
    # every lookup counted once (a process misses what the other cached during the run: the split differs)
    assert ddp["cache_hits"] + ddp["cache_misses"] == single.cache_hits + single.cache_misses
