"""Supervised contrastive fine-tuning: exact loss values, reproducible sub-documents, training, resume, CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from _finetune_helpers import labelled_files

from graphdoc.cli import main
from graphdoc.config import ChunkerConfig, ModelConfig
from graphdoc.documents import Document, Passage
from graphdoc.errors import GraphDocError
from graphdoc.finetune import ClassificationConfig, DocumentClassifier, finetune_classification, predict
from graphdoc.finetune.supcon import view_indices
from graphdoc.outputs import PreparedDocument
from graphdoc.training.data import Example, sub_documents
from graphdoc.training.objectives import supervised_contrastive_loss, symmetric_info_nce

#: 5-word passages: the toy documents (10-12 words) make 2-3 passages each
SHORT_PASSAGES = ModelConfig(chunker=ChunkerConfig(max_words=5))


@pytest.fixture(autouse=True)
def cli_state(restore_cli_state):
    """The CLI tests here configure logging; undo it for the tests that read log records after them."""
    yield


CONFIG = {"epochs": 6, "batch_size": 4, "lr": 1e-2, "head_lr": 0.05, "dropout": 0.0, "max_passages": 4,
          "objective": "supcon", "temperature": 0.5}


# ------------------------------------------------------------------ the loss
def test_loss_exact_value_with_several_positives_and_an_anchor_without_one():
    # cosine, tau 1: z0 = z1 (length ignored), z2 orthogonal, z3 opposite; labels 0, 0, 0, 1.
    z = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    loss = supervised_contrastive_loss(z, [0, 0, 0, 1], "cosine", 1.0)
    # anchors 0 and 1: scores 1, 0, -1 to the others; positives score 1 and 0 -> log D - (1 + 0) / 2
    # anchor 2: scores 0, 0, 0; positives 0 and 1 -> log 3; anchor 3 has no positive and is left out
    d = math.e + 1 + 1 / math.e
    assert loss.item() == pytest.approx((2 * (math.log(d) - 0.5) + math.log(3)) / 3, abs=1e-6)


def test_loss_exact_value_dot_product_any_layout():
    # dot, tau 0.5: each vector's one positive is two rows away; scores 2 (positive), 0, 0
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    loss = supervised_contrastive_loss(z, torch.tensor([0, 1, 0, 1]), "dot", 0.5)
    assert loss.item() == pytest.approx(math.log(math.exp(2) + 2) - 2, abs=1e-6)


@pytest.mark.parametrize("similarity,temperature", [("cosine", 0.1), ("cosine", 1.0), ("dot", 0.5)])
def test_one_positive_per_anchor_in_pairs_is_the_symmetric_info_nce(similarity, temperature):
    z = torch.randn(8, 5, generator=torch.Generator().manual_seed(0))
    supcon = supervised_contrastive_loss(z, [0, 0, 1, 1, 2, 2, 3, 3], similarity, temperature)
    assert supcon.item() == pytest.approx(symmetric_info_nce(z, similarity, temperature).item(), abs=1e-5)


def test_no_positive_pair_gives_a_zero_loss_that_backpropagates():
    z = torch.randn(3, 4, requires_grad=True)
    loss = supervised_contrastive_loss(z, [0, 1, 2])
    assert loss.item() == 0.0 and loss.grad_fn is not None
    loss.backward()
    assert torch.equal(z.grad, torch.zeros(3, 4))


def test_gradients_are_finite_with_an_anchor_left_out_and_shapes_are_checked():
    z = torch.randn(3, 4, requires_grad=True)
    supervised_contrastive_loss(z, [0, 0, 1]).backward()
    assert torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0
    with pytest.raises(ValueError, match=r"expected \[N, d\] vectors and \[N\] labels"):
        supervised_contrastive_loss(z, [0, 1])
    with pytest.raises(GraphDocError, match="unknown similarity"):
        supervised_contrastive_loss(z, [0, 0, 1], "l2")


# ------------------------------------------------------------------ config
def test_config_validation_lists_the_valid_values():
    assert ClassificationConfig().objective == "cross_entropy"
    assert ClassificationConfig(objective="supcon").temperature == 0.1
    with pytest.raises(GraphDocError, match="objective must be one of cross_entropy, supcon; got 'ce'"):
        ClassificationConfig(objective="ce")
    with pytest.raises(GraphDocError, match="similarity must be one of dot, cosine; got 'l2'"):
        ClassificationConfig(similarity="l2")
    with pytest.raises(GraphDocError, match="temperature must be positive and finite; got 0"):
        ClassificationConfig(temperature=0)


# ------------------------------------------------------------------ sub-documents
def _prepared(n: int) -> PreparedDocument:
    words = [f"w{i}" for i in range(n)]
    text = " ".join(words)
    passages = [Passage("d", i, i % 2, "", 3 * i, 3 * i + 2, w) for i, w in enumerate(words)]
    return PreparedDocument(Document("d", text, title="T"), passages, [[100 + i] for i in range(n)])


def test_views_are_pretrainings_half_split_reproducible_and_one_passage_is_one_view():
    for n, epoch, position in [(2, 0, 0), (5, 1, 7), (9, 3, 2)]:
        ours = view_indices(n, 42, epoch, position)
        theirs = sub_documents([Example(position, _prepared(n))], "half", 42, epoch)
        assert [idx.tolist() for idx in ours] == [[t - 100 for t, in s.token_ids] for s in theirs]
        assert all(np.array_equal(a, b) for a, b in zip(ours, view_indices(n, 42, epoch, position)))
    draws = {tuple(view_indices(10, 0, epoch, 3)[0]) for epoch in range(10)}
    assert len(draws) > 5  # a new split every epoch
    assert [v.tolist() for v in view_indices(1, 0, 0, 0)] == [[0]]


def test_subset_keeps_the_chosen_passages_and_their_text():
    sub = _prepared(4).subset([1, 3])
    assert sub.token_ids == [[101], [103]] and sub.section_ids == [1, 1]
    assert sub.document.text == "w1\nw3" and sub.document.title == "T"
    assert [sub.document.text[p.start:p.end] for p in sub.passages] == ["w1", "w3"]


def test_frozen_views_equal_the_encoder_run_on_the_sub_document(tiny_bert, tmp_path):
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.finetune.inputs import GraphInputs, open_cache

    model = GraphDocEncoder.from_pretrained(str(tiny_bert), config=SHORT_PASSAGES).eval()
    doc = Document("d", "one two three four five. six seven eight nine ten. eleven twelve thirteen")
    frozen, full = GraphInputs(model, open_cache(model, True, tmp_path / "cache", tmp_path)), GraphInputs(model)
    for inputs in (frozen, full):
        inputs.add_documents([doc])
    assert len(full.prepared["d"].passages) == 3
    with torch.no_grad():
        a = frozen.embed_views([("d", [0, 2]), ("d", None)]).document_embeddings
        b = full.embed_views([("d", [0, 2]), ("d", None)]).document_embeddings
        c = model([full.prepared["d"].subset([0, 2])]).document_embeddings
    assert torch.allclose(a, b, atol=1e-5) and torch.allclose(a[:1], c, atol=1e-5)
    assert torch.allclose(b[1:], full.embed(["d"]).document_embeddings.detach(), atol=1e-6)


# ------------------------------------------------------------------ training
@pytest.fixture(scope="module")
def trained(spread_bert, tmp_path_factory):
    folder = tmp_path_factory.mktemp("supcon")
    files = labelled_files(folder)
    summary = finetune_classification(files["train"], files["dev"], folder / "run",
                                      config=ClassificationConfig(**CONFIG), model=str(spread_bert),
                                      model_config=SHORT_PASSAGES)
    return files, summary, folder / "run" / "model"


def test_supcon_loss_falls_and_the_probe_head_classifies(trained, tmp_path):
    files, summary, model_dir = trained
    history = summary["history"]
    assert all({"supcon", "probe", "loss", "accuracy"} <= set(row) for row in history)
    assert history[-1]["supcon"] < history[0]["supcon"] and history[-1]["probe"] < history[0]["probe"]
    assert all(row["loss"] == pytest.approx(row["supcon"] + row["probe"], abs=1e-5) for row in history)
    assert summary["dev_scores"] == {"accuracy": 1.0, "macro_f1": 1.0}
    assert predict(model_dir, files["dev"], tmp_path / "pred.jsonl") == 12
    for line in (tmp_path / "pred.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["label"] == record["id"].lstrip("d").rstrip("0123456789")


def test_resume_ends_where_an_uninterrupted_run_ends(spread_bert, tmp_path, monkeypatch):
    from graphdoc.finetune.classification import ClassificationTrainer
    from graphdoc.training import checkpoint as ckpt

    files = labelled_files(tmp_path)
    config = ClassificationConfig(**{**CONFIG, "epochs": 3})
    run = dict(config=config, model=str(spread_bert), model_config=SHORT_PASSAGES)
    full = finetune_classification(files["train"], files["dev"], tmp_path / "a", **run)
    real = ClassificationTrainer._loss

    def stop_in_epoch_2(self, positions, epoch):
        if epoch == 1:
            raise KeyboardInterrupt
        return real(self, positions, epoch)

    monkeypatch.setattr(ClassificationTrainer, "_loss", stop_in_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        finetune_classification(files["train"], files["dev"], tmp_path / "b", **run)
    monkeypatch.setattr(ClassificationTrainer, "_loss", real)
    resumed = finetune_classification(files["train"], files["dev"], tmp_path / "b", resume=True, **run)
    assert [r["supcon"] for r in resumed["history"]] == pytest.approx([r["supcon"] for r in full["history"]], abs=1e-6)
    a, b = (DocumentClassifier.from_pretrained(ckpt.list_checkpoints(tmp_path / x)[-1] / ckpt.MODEL_DIR)
            for x in "ab")
    assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def test_full_mode_flat_model_and_few_shot(tiny_bert, tmp_path):
    from graphdoc.flat_config import FlatModelConfig
    from graphdoc.flat_encoder import FlatEncoder

    files = labelled_files(tmp_path)
    flat = FlatEncoder.from_pretrained(str(tiny_bert), config=FlatModelConfig(chunker=ChunkerConfig(max_words=5)))
    with pytest.raises(GraphDocError, match="objective supcon trains layers over sub-documents, and a flat model"):
        finetune_classification(files["train"], files["dev"], tmp_path / "x", model=flat,
                                config=ClassificationConfig(**CONFIG))
    config = ClassificationConfig(**{**CONFIG, "epochs": 1, "frozen_encoder": False})
    before = flat.passage_encoder.model.embeddings.word_embeddings.weight.clone()
    summary = finetune_classification(files["train"], files["dev"], tmp_path / "flat", model=flat, config=config)
    assert summary["epochs"] == 1 and math.isfinite(summary["history"][0]["supcon"])
    assert not torch.equal(before, flat.passage_encoder.model.embeddings.word_embeddings.weight)  # trained
    shots = ClassificationConfig(**{**CONFIG, "epochs": 1}, shots=2, repeats=2)
    result = finetune_classification(files["train"], files["dev"], tmp_path / "fs", model=str(tiny_bert),
                                     model_config=SHORT_PASSAGES, config=shots)
    assert [len(r["train"]) for r in result["runs"]] == [4, 4] and 0 <= result["accuracy"]["mean"] <= 1


# ------------------------------------------------------------------ CLI
def test_cli_objective_and_temperature_override_the_config(spread_bert, tmp_path, capsys):
    files = labelled_files(tmp_path)
    (tmp_path / "cfg.yaml").write_text("model:\n  chunker:\n    max_words: 5\nclassification:\n  max_passages: 4\n"
                                       "  lr: 0.01\n  head_lr: 0.05\n  batch_size: 4\n  dropout: 0.0\n")
    common = ["finetune", "--task", "classification", "--train", str(files["train"]), "--dev", str(files["dev"]),
              "--config", str(tmp_path / "cfg.yaml"), "--model", str(spread_bert), "--epochs", "2"]
    assert main(["-q", *common, "--output", str(tmp_path / "run"), "--objective", "supcon",
                 "--temperature", "0.2"]) == 0
    summary = json.loads((tmp_path / "run" / "finetune.json").read_text())
    assert summary["epochs"] == 2 and all("supcon" in row for row in summary["history"])
    from graphdoc.training import checkpoint as ckpt

    state = json.loads((ckpt.list_checkpoints(tmp_path / "run")[-1] / ckpt.STATE_NAME).read_text())
    assert (state["config"]["objective"], state["config"]["temperature"]) == ("supcon", 0.2)
    assert main(["-q", "predict", "--model", str(tmp_path / "run" / "model"), "--input", str(files["dev"]),
                 "--output", str(tmp_path / "p.jsonl")]) == 0
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 12
    assert main([*common, "--output", str(tmp_path / "r2"), "--objective", "supcon", "--temperature", "0"]) == 1
    assert capsys.readouterr().err.strip() == "graphdoc finetune: error: classification.temperature must be positive and finite; got 0.0"
