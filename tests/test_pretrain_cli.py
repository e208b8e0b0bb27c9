"""``graphdoc pretrain`` in-process on a tiny encoder: outputs, the shipped configs, one-line errors."""

from __future__ import annotations

import json
import random
import sys
import types
from pathlib import Path

import pytest
import yaml

from graphdoc.cli import main
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError
from graphdoc.training import PretrainSetup, load_setup
from graphdoc.training.metrics import COLUMNS, read_log

ROOT = Path(__file__).resolve().parents[1]
WORDS = "graph attention passage document retrieval vector dense sparse meeting topic section fox dog".split()


@pytest.fixture(autouse=True)
def restore_global_state(restore_cli_state):
    """``main`` configures logging and quiets transformers for the process (see conftest)."""
    yield


@pytest.fixture
def corpus(tmp_path) -> Path:
    rng = random.Random(2)
    records = [{"_id": "blank", "text": ""}, {"_id": "short", "text": "One passage only."}]
    for i in range(10):
        sentences = [" ".join(rng.choice(WORDS) for _ in range(5)) + "." for _ in range(rng.randint(2, 6))]
        records.append({"_id": f"d{i}", "text": " ".join(sentences)})
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_config(path: Path, model: Path, **pretrain) -> Path:
    settings = {"batch_size": 4, "epochs": 1, "lr": 1e-3, "log_every": 1, "checkpoint_every": 2}
    settings.update(pretrain)
    config = {"model": {"chunker": {"max_words": 5}, "passage_encoder": {"model_name_or_path": str(model)}},
              "pretrain": settings}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def pretrain_cli(*argv: str) -> int:
    return main(["-q", "pretrain", *argv])


def error_line(capsys) -> str:
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("graphdoc pretrain: error: ")
    return lines[0]


@pytest.mark.parametrize("objective", ["half", "ict"])
def test_pretrain_writes_a_loadable_model_and_a_log(tiny_bert, corpus, tmp_path, objective):
    config = write_config(tmp_path / "c.yaml", tiny_bert)
    out = tmp_path / "run"
    assert pretrain_cli("--corpus", str(corpus), "--output", str(out), "--config", str(config),
                        "--objective", objective, "--frozen-encoder", "--device", "cpu") == 0
    summary = json.loads((out / "pretrain.json").read_text())
    # 12 records: the blank one dropped by the reader, the one-sentence one skipped, 10 used in 3 steps
    assert (summary["documents_used"], summary["empty_skipped"], summary["one_passage_skipped"]) == (10, 1, 1)
    assert summary["steps"] == 3 and summary["cache_misses"] > 0
    log = read_log(out)
    assert list(log[0]) == list(COLUMNS) and [int(r["step"]) for r in log] == [1, 2, 3]
    assert json.loads((out / "pretrain_config.json").read_text())["pretrain"]["objective"] == objective
    model = GraphDocEncoder.from_pretrained(out / "model", device="cpu")
    assert model.encode(["graph attention passage.", "dense vector"]).shape == (2, 32)
    assert model.graph.layers[0].out.weight.abs().sum() > 0  # trained away from the identity


def test_blank_documents_are_named_once_not_once_a_pass(tiny_bert, corpus, tmp_path, capsys):
    """(stop 32: the counting pass and every epoch each logged "skipped 1 empty document(s)")"""
    config = write_config(tmp_path / "c.yaml", tiny_bert, epochs=3)
    capsys.readouterr()
    assert main(["pretrain", "--corpus", str(corpus), "--output", str(tmp_path / "run"), "--config", str(config),
                 "--frozen-encoder", "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert err.count("skipped 1 empty document(s) ('blank')") == 1, err
    assert json.loads((tmp_path / "run" / "pretrain.json").read_text())["empty_skipped"] == 1


def test_several_corpora_and_max_steps(tiny_bert, corpus, tmp_path):
    config = write_config(tmp_path / "c.yaml", tiny_bert)
    out = tmp_path / "run"
    second = tmp_path / "second.jsonl"
    second.write_bytes(corpus.read_bytes())
    assert pretrain_cli("--corpus", str(corpus), "--corpus", str(second), "--output", str(out), "--config",
                        str(config), "--max-steps", "4", "--no-frozen-encoder", "--device", "cpu") == 0
    summary = json.loads((out / "pretrain.json").read_text())
    assert summary["steps"] == summary["total_steps"] == 4 and summary["cache_hits"] is None
    assert not (out / "passage_cache").exists()


def test_shipped_configs_load():
    paper = load_setup(ROOT / "graphdoc" / "configs" / "pretrain-paper.yaml")
    assert paper.model.passage_encoder.model_name_or_path == "roberta-base"
    assert paper.model.passage_encoder.projection_dim == 512
    assert (paper.model.graph.num_layers, paper.model.graph.heads) == (2, 2)
    p = paper.pretrain
    assert (p.lr, p.warmup_ratio, p.batch_size, p.epochs, p.max_passages) == (5e-5, 0.1, 1536, 10, 50)
    assert not p.frozen_encoder
    default = load_setup(ROOT / "graphdoc" / "configs" / "pretrain-default.yaml")
    assert default.pretrain.frozen_encoder and default.model.passage_encoder.model_name_or_path == "all-MiniLM-L6-v2"
    assert PretrainSetup.from_dict(json.loads(json.dumps(default.to_dict()))) == default


def test_shipped_docsplit_configs_load():
    expected = {"bert": ("bert-base-uncased", 512), "longformer": ("allenai/longformer-base-4096", 4096),
                "minilm": ("all-MiniLM-L6-v2", None)}
    for name, (encoder, length) in expected.items():
        setup = load_setup(ROOT / "graphdoc" / "configs" / f"docsplit-{name}.yaml")
        assert setup.backbone == "flat" and setup.model.graph.document == "first"
        assert (setup.model.passage_encoder.model_name_or_path, setup.model.passage_encoder.max_seq_length) == \
            (encoder, length)
        p = setup.pretrain
        assert (p.objective, p.similarity, p.temperature, p.lr, p.mlm_probability) == \
            ("docsplit", "cosine", 0.05, 5e-5, 0.15)
        # 0.1 x MLM for docsplit; --objective simcse or crop gives the plain baselines
        assert p.effective_mlm_weight("flat") == 0.1
        assert setup.with_overrides(objective="simcse").pretrain.effective_mlm_weight("flat") == 0.0
        assert not p.frozen_encoder
        p.check_backbone(setup.backbone)  # a valid flat run
        assert PretrainSetup.from_dict(json.loads(json.dumps(setup.to_dict()))) == setup


@pytest.mark.parametrize("config, message", [
    ({"pretrain": {"objectve": "half"}}, "unknown config key pretrain.objectve; valid keys: pretrain.objective"),
    ({"pretrain": {"similarity": "l2"}}, "pretrain.similarity must be one of dot, cosine; got 'l2'"),
    ({"pretrain": {"lr": "fast"}}, "pretrain.lr must be a number; got 'fast'"),
    ({"training": {}}, "unknown config key training; valid keys: model, pretrain, backbone"),
    ({"backbone": "tree"}, "unknown backbone 'tree'; valid: graph, flat"),
    ({"backbone": "flat", "model": {"graph": {"num_layers": 2}}},
     "unknown config key model.graph.num_layers; valid keys: model.graph.graph_type, model.graph.document"),
    ({"pretrain": {"objective": "mlm"}}, "pretrain.objective must be one of half, ict, docsplit, simcse, crop; got 'mlm'"),
    ({"pretrain": {"mlm_weight": -1}}, "pretrain.mlm_weight must be >= 0 (0: off) or null; got -1"),
    ({"pretrain": {"mlm_probability": 0}}, "pretrain.mlm_probability must be in (0, 1); got 0"),
    ({"pretrain": {"crop_min_ratio": 0.6}}, "pretrain.crop_min_ratio and pretrain.crop_max_ratio must satisfy "
                                            "0 < min <= max <= 1; got 0.6, 0.5"),
    ({"pretrain": {"max_seconds": 0}}, "pretrain.max_seconds must be positive or null; got 0"),
    ({"pretrain": {"projection_head": 0}}, "pretrain.projection_head must be at least 1 or null; got 0"),
    ({"pretrain": {"projection_head": 1.5}}, "pretrain.projection_head must be an integer"),
])
def test_bad_config_is_one_line(tmp_path, corpus, capsys, config, message):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert pretrain_cli("--corpus", str(corpus), "--output", str(tmp_path / "o"), "--config", str(path)) == 1
    assert message in error_line(capsys)


def test_seed_flag_sets_the_runs_seed_and_its_weights(tiny_bert, corpus, tmp_path, capsys):
    config = write_config(tmp_path / "c.yaml", tiny_bert)

    def layer(out: Path, *extra: str):
        assert pretrain_cli("--corpus", str(corpus), "--output", str(out), "--config", str(config),
                            "--max-steps", "2", "--frozen-encoder", "--device", "cpu", *extra) == 0
        return GraphDocEncoder.from_pretrained(out / "model", device="cpu").graph.layers[0].out.weight

    seven, again, default = layer(tmp_path / "a", "--seed", "7"), layer(tmp_path / "b", "--seed", "7"), \
        layer(tmp_path / "c")
    assert json.loads((tmp_path / "a" / "pretrain_config.json").read_text())["pretrain"]["seed"] == 7
    assert json.loads((tmp_path / "c" / "pretrain_config.json").read_text())["pretrain"]["seed"] == 42
    assert (seven == again).all() and not (seven == default).all()
    capsys.readouterr()
    assert pretrain_cli("--corpus", str(corpus), "--output", str(tmp_path / "a"), "--config", str(config),
                        "--max-steps", "2", "--frozen-encoder", "--device", "cpu", "--seed", "8", "--resume") == 1
    assert "seed" in error_line(capsys)
    assert pretrain_cli("--corpus", str(corpus), "--output", str(tmp_path / "d"), "--config", str(config),
                        "--seed", "-1") == 1
    assert "pretrain.seed must be in [0, " in error_line(capsys)
    assert not (tmp_path / "d").exists()


def test_user_errors_are_one_line(tiny_bert, corpus, tmp_path, capsys):
    config = write_config(tmp_path / "c.yaml", tiny_bert)
    base = ["--output", str(tmp_path / "run"), "--config", str(config), "--device", "cpu"]
    assert pretrain_cli("--corpus", str(tmp_path / "missing.jsonl"), *base) == 1
    assert "missing.jsonl" in error_line(capsys)
    assert pretrain_cli("--corpus", "openwebtext", *base) == 1
    assert "'openwebtext' streams with no known length: set pretrain.max_steps (--max-steps)" in error_line(capsys)
    assert pretrain_cli("--corpus", str(corpus), *base, "--batch-size", "0") == 1
    assert "pretrain.batch_size must be at least 2 (the other documents of a batch are the negatives" \
        in error_line(capsys)
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"_id": "a", "text": "Just one."}) + "\n", encoding="utf-8")
    assert pretrain_cli("--corpus", str(one), *base) == 1
    assert "no document with two or more passages" in error_line(capsys)
    assert pretrain_cli("--corpus", str(corpus), *base, "--max-steps", "2") == 0
    capsys.readouterr()
    assert pretrain_cli("--corpus", str(corpus), *base, "--max-steps", "2") == 1
    assert "already holds a training run; pass --resume" in error_line(capsys)


def test_unreachable_named_corpus_stops_before_anything_is_written(tiny_bert, tmp_path, capsys, monkeypatch):
    def load_dataset(path: str, split: str, streaming: bool):
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (LocalEntryNotFoundError)")

    module = types.ModuleType("datasets")
    module.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", module)
    out = tmp_path / "run"
    assert pretrain_cli("--corpus", "openwebtext", "--output", str(out), "--model", str(tiny_bert),
                        "--frozen-encoder", "--max-steps", "2", "--device", "cpu") == 1
    assert ("named corpus 'openwebtext' could not be downloaded (Couldn't reach 'Skylion007/openwebtext' on the "
            "Hub") in error_line(capsys)
    assert not out.exists()


def test_api_rejects_no_corpus(tmp_path):
    from graphdoc.training import pretrain

    with pytest.raises(GraphDocError, match="no corpus"):
        pretrain([], tmp_path / "o")


def test_tensorboard_without_its_package_is_one_line(tiny_bert, corpus, tmp_path, capsys):
    try:
        import tensorboard  # noqa: F401
        pytest.skip("tensorboard is installed")
    except ImportError:
        pass
    config = write_config(tmp_path / "c.yaml", tiny_bert, tensorboard=True)
    assert pretrain_cli("--corpus", str(corpus), "--output", str(tmp_path / "run"), "--config", str(config),
                        "--max-steps", "1", "--device", "cpu") == 1
    assert "pretrain.tensorboard needs the tensorboard package: pip install tensorboard" in error_line(capsys)


def test_precision_flag_replaces_the_configs_and_keys_the_cache(tiny_bert, corpus, tmp_path, monkeypatch, capsys):
    """``--precision`` replaces the YAML's ``passage_encoder.precision``: the run is encoded, cached and saved
    with it."""
    from graphdoc import device as device_module

    monkeypatch.setattr(device_module, "cpu_supports_bf16", lambda: True)
    config = write_config(tmp_path / "c.yaml", tiny_bert)
    cache = tmp_path / "cache"
    runs = {}
    for precision in ("fp32", "bf16"):
        out = runs[precision] = tmp_path / precision
        assert pretrain_cli("--corpus", str(corpus), "--output", str(out), "--config", str(config), "--frozen-encoder",
                            "--cache-dir", str(cache), "--device", "cpu", "--precision", precision) == 0
        saved = json.loads((out / "model" / "config.json").read_text())
        assert saved["backbone"] == "graph" and saved["model"]["passage_encoder"]["precision"] == precision
        assert json.loads((out / "pretrain_config.json").read_text())["model"]["passage_encoder"]["precision"] \
            == precision
    identities = sorted(json.loads(p.read_text()).get("autocast", "none") for p in cache.glob("*/encoder.json"))
    assert identities == ["bfloat16", "none"]  # bf16 vectors kept apart from the fp32 ones
    with pytest.raises(SystemExit):
        pretrain_cli("--corpus", str(corpus), "--output", str(tmp_path / "x"), "--precision", "int8")
    assert "argument --precision: invalid choice: 'int8'" in capsys.readouterr().err


def test_pretrain_api_refuses_arguments_of_the_wrong_type_before_writing(corpus, tmp_path):
    from graphdoc.training import pretrain

    with pytest.raises(TypeError, match=r"^setup must be a PretrainSetup; got a dict \(build one with "
                                        r"PretrainSetup.from_dict\)$"):
        pretrain(corpus, tmp_path / "run", {"pretrain": {"max_steps": 1}})
    with pytest.raises(TypeError, match=r"^setup must be a PretrainSetup; got a str \(read a file or a built-in "
                                        r"config with load_setup\)$"):
        pretrain(corpus, tmp_path / "run", "pretrain-default")
    with pytest.raises(TypeError, match=r"^corpus must be a path or name, or a list of them; got a NoneType$"):
        pretrain(None, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_pretrain_api_refuses_an_unknown_precision_before_writing(corpus, tmp_path):
    from graphdoc.training import pretrain

    with pytest.raises(GraphDocError, match=r"^precision must be one of auto, fp32, fp16, bf16; got 'int8'$"):
        pretrain(corpus, tmp_path / "run", precision="int8")
    assert not (tmp_path / "run").exists()
