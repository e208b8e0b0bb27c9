"""Pretraining flat backbones (docsplit + MLM, simcse, crop) and graph docsplit on tiny random encoders."""

from __future__ import annotations

import json
import logging
import math
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import pretrain_killed_before_step_5
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from graphdoc.backbones import load_model
from graphdoc.config import ChunkerConfig, GraphConfig, ModelConfig, PassageEncoderConfig
from graphdoc.documents import Document
from graphdoc.flat_config import FlatModelConfig
from graphdoc.flat_encoder import FlatEncoder
from graphdoc.training import PretrainConfig, PretrainSetup, pretrain
from graphdoc.training import checkpoint as ckpt
from graphdoc.training.data import Example
from graphdoc.training.flat_objectives import IGNORE_INDEX, crop_texts, docsplit_pair, mask_tokens
from graphdoc.training.flat_pretraining import FlatPretraining, masked_lm_backward
from graphdoc.training.graph_pretraining import GraphPretraining
from graphdoc.training.masked_lm_head import MaskedLMHead
from graphdoc.training.metrics import read_log

WORDS = "graph attention passage document retrieval vector dense sparse meeting topic section fox dog".split()


def write_corpus(path: Path, n: int = 14, seed: int = 0) -> Path:
    """``n`` titled documents of 1 to 6 five-word sentences (capitalised, so blingfire splits them)."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        sentences = [" ".join(rng.choice(WORDS) for _ in range(5)).capitalize() + "." for _ in range(rng.randint(1, 6))]
        records.append({"_id": f"d{i}", "title": f"T{i}", "text": " ".join(sentences)})
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def flat_setup(model: Path, objective: str = "docsplit", **pretrain) -> PretrainSetup:
    settings = dict(objective=objective, batch_size=4, max_steps=3, lr=1e-3, temperature=0.1, log_every=1,
                    checkpoint_every=2, shuffle_buffer=5, gradient_checkpointing=False)
    settings.update(pretrain)
    # mean pooling: a random BERT's CLS vectors are nearly the same for every text
    model_config = FlatModelConfig(passage_encoder=PassageEncoderConfig(model_name_or_path=str(model), pooling="mean"))
    return PretrainSetup(model_config, PretrainConfig(**settings), backbone="flat")


def encoder_weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl")


# ------------------------------------------------------------------ the three flat objectives
@pytest.mark.parametrize("objective", ["docsplit", "simcse", "crop"])
def test_flat_objectives_train_the_encoder(tiny_bert, corpus, tmp_path, objective):
    result = pretrain(corpus, tmp_path / "run", flat_setup(tiny_bert, objective), device="cpu")
    assert result.steps == 3 and math.isfinite(result.loss)
    log = read_log(tmp_path / "run")
    assert [int(r["step"]) for r in log] == [1, 2, 3]
    mlm = [r["mlm_loss"] for r in log]
    if objective == "docsplit":  # 0.1 x MLM by default: logged every step, near log(vocab) for a fresh head
        assert all(abs(float(x) - math.log(242)) < 1.0 for x in mlm) and result.mlm_loss == pytest.approx(float(mlm[-1]), rel=1e-5)
    else:
        assert mlm == ["", "", ""] and result.mlm_loss is None
    model = load_model(str(result.model_dir))
    assert isinstance(model, FlatEncoder)  # OUTPUT/model is the flat encoder alone
    trained = encoder_weights(result.model_dir / "passage_encoder")
    assert not any(k.startswith("cls.") for k in trained)  # no MLM head in the saved model
    start = encoder_weights(tiny_bert)
    assert any(not torch.equal(trained[k], start[k]) for k in start)  # the encoder trained
    assert model.encode(["Dense vectors.", {"title": "T", "text": "A graph."}]).shape == (2, 32)


def test_docsplit_loss_is_contrastive_plus_a_tenth_of_mlm(tiny_bert, corpus, tmp_path):
    with_mlm = pretrain(corpus, tmp_path / "mlm", flat_setup(tiny_bert, max_steps=1), device="cpu")
    without = pretrain(corpus, tmp_path / "plain", flat_setup(tiny_bert, max_steps=1, mlm_weight=0.0), device="cpu")
    assert without.mlm_loss is None
    # the first step's contrastive term is the same in both runs (same views, weights and dropout)
    assert with_mlm.loss == pytest.approx(without.loss + 0.1 * with_mlm.mlm_loss, rel=1e-5)


def test_flat_docsplit_resume_after_a_kill_equals_an_uninterrupted_run(tiny_bert, corpus, tmp_path, monkeypatch):
    setup = flat_setup(tiny_bert, max_steps=6, epochs=2)  # 3 steps per epoch
    whole = pretrain(corpus, tmp_path / "whole", setup, device="cpu")
    pretrain_killed_before_step_5(corpus, tmp_path / "run", setup, monkeypatch)
    folder = ckpt.list_checkpoints(tmp_path / "run")[-1]
    head = load_file(str(folder / "mlm_head.safetensors"))
    # the head's own weights (the output layer is the encoder's embedding matrix: not saved twice)
    assert set(head) == {"predictions.bias", "predictions.transform.dense.weight", "predictions.transform.dense.bias",
                         "predictions.transform.LayerNorm.weight", "predictions.transform.LayerNorm.bias"}
    resumed = pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu")

    assert resumed.steps == whole.steps == 6
    expected, got = encoder_weights(whole.model_dir / "passage_encoder"), encoder_weights(resumed.model_dir / "passage_encoder")
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=1e-5, msg=name)
    final = [load_file(str(ckpt.list_checkpoints(tmp_path / r)[-1] / "mlm_head.safetensors")) for r in ("whole", "run")]
    for name in final[0]:
        torch.testing.assert_close(final[1][name], final[0][name], atol=1e-6, rtol=1e-5, msg=name)
    rows = [[(float(r["loss"]), float(r["mlm_loss"])) for r in read_log(tmp_path / name)] for name in ("whole", "run")]
    assert np.allclose(rows[1], rows[0], rtol=1e-5)


def test_flat_projection_head_is_checkpointed_and_resumed_and_not_saved(tiny_bert, corpus, tmp_path, monkeypatch):
    setup = flat_setup(tiny_bert, "simcse", max_steps=6, epochs=2, projection_head=8)
    whole = pretrain(corpus, tmp_path / "whole", setup, device="cpu")
    pretrain_killed_before_step_5(corpus, tmp_path / "run", setup, monkeypatch)
    resumed = pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu")
    heads = [load_file(str(ckpt.list_checkpoints(tmp_path / r)[-1] / "projection_head.safetensors"))
             for r in ("whole", "run")]
    assert heads[0]["2.weight"].shape == (8, 32)
    for name in heads[0]:
        torch.testing.assert_close(heads[1][name], heads[0][name], atol=1e-6, rtol=1e-5, msg=name)
    expected = encoder_weights(whole.model_dir / "passage_encoder")
    got = encoder_weights(resumed.model_dir / "passage_encoder")
    assert set(got) == set(encoder_weights(tiny_bert))  # the saved model is the encoder alone
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=1e-5, msg=name)
    assert load_model(str(resumed.model_dir)).encode(["Dense vectors."]).shape == (1, 32)


def test_an_empty_share_has_the_width_of_the_projection_head(tiny_bert):
    """A process with no share of a tiny last batch joins the gather with a ``[0, head]`` tensor, as wide as
    the other processes' vectors."""
    from graphdoc.encoder import GraphDocEncoder

    cfg = PretrainConfig(objective="simcse", projection_head=8)
    flat = FlatPretraining(FlatEncoder.from_pretrained(tiny_bert, device="cpu"), cfg)
    assert flat.embed([]).shape == (0, 8) and flat.embed([[2, 5, 3]]).shape == (1, 8)
    graph = GraphPretraining(GraphDocEncoder.from_pretrained(tiny_bert, device="cpu"),
                             PretrainConfig(objective="half", projection_head=8), Path("/nonexistent"))
    assert graph.embed([]).shape == (0, 8)


# ------------------------------------------------------------------ views
def test_simcse_views_differ_only_by_dropout(tiny_bert):
    model = FlatEncoder.from_pretrained(tiny_bert, FlatModelConfig(
        passage_encoder=PassageEncoderConfig(pooling="mean")), device="cpu")
    cfg = PretrainConfig(objective="simcse")
    task = FlatPretraining(model, cfg)
    docs = [Document("a", "Graph attention over passages. Dense vectors.", "Title"), Document("b", "A fox.")]
    examples = [Example(i, task.prepare(d)) for i, d in enumerate(docs)]
    ids = task.views(examples, epoch=0)
    assert ids[0] == ids[1] and ids[2] == ids[3]  # the same text twice
    assert model.training  # dropout on
    torch.manual_seed(0)
    with torch.no_grad():
        z = task.embed(ids)  # [4, 32]
    assert not torch.allclose(z[0], z[1], atol=1e-4) and not torch.allclose(z[2], z[3], atol=1e-4)
    model.eval()
    with torch.no_grad():
        z = task.embed(ids)
    torch.testing.assert_close(z[0], z[1])
    # a view is what FlatEncoder embeds for the document (FirstP: title and text)
    torch.testing.assert_close(z[0::2], model.encode(docs, convert_to_tensor=True))


def test_docsplit_and_crop_views_come_from_the_position_and_epoch(tiny_bert):
    model = FlatEncoder.from_pretrained(tiny_bert, device="cpu")
    text = " ".join(f"Sentence number {w} here." for w in WORDS)
    doc = Document("a", text, "A title")
    docsplit = FlatPretraining(model, PretrainConfig(objective="docsplit", mlm_weight=0, seed=3))
    sentences = docsplit.prepare(doc)
    assert len(sentences) == len(WORDS) and docsplit.usable(sentences)
    assert not docsplit.usable(docsplit.prepare(Document("b", "Only one sentence here.")))
    ids = docsplit.views([Example(7, sentences)], epoch=1)
    expected = docsplit_pair(sentences, np.random.default_rng([3, 1, 7]))  # seed, epoch, position
    assert ids == model.passage_encoder.tokenize(list(expected), truncate=True)
    assert ids != docsplit.views([Example(7, sentences)], epoch=2)
    crop = FlatPretraining(model, PretrainConfig(objective="crop", crop_min_ratio=0.2, crop_max_ratio=0.2, seed=3))
    assert crop.prepare(doc) == text  # crops come from the text, without the title
    ids = crop.views([Example(0, text)], epoch=0)
    expected = crop_texts(text, np.random.default_rng([3, 0, 0]), 0.2, 0.2)
    assert ids == model.passage_encoder.tokenize(list(expected), truncate=True)
    assert [len(c.split()) for c in expected] == [int(0.2 * len(text.split()))] * 2 and expected[0] != expected[1]
    assert not crop.usable("   ")


@pytest.mark.parametrize("objective", ["docsplit", "crop", "simcse"])
def test_views_carry_the_passage_prompt_once(tiny_bert, objective):
    config = FlatModelConfig(passage_encoder=PassageEncoderConfig(passage_prompt="passage: "))
    model = FlatEncoder.from_pretrained(tiny_bert, config, device="cpu")
    task = FlatPretraining(model, PretrainConfig(objective=objective, mlm_weight=0, seed=3))
    doc = Document("a", " ".join(f"Sentence number {w} here." for w in WORDS), "A title")
    views = task.views([Example(0, task.prepare(doc))], epoch=0)
    texts = [model.passage_encoder.tokenizer.decode(ids, skip_special_tokens=True) for ids in views]
    assert all(text.startswith("passage : ") and text.count("passage :") == 1 for text in texts), texts


# ------------------------------------------------------------------ MLM head and loss
def test_mlm_head_shares_the_encoder_embeddings(tiny_bert, caplog):
    model = FlatEncoder.from_pretrained(tiny_bert, device="cpu")
    with caplog.at_level(logging.INFO, logger="graphdoc.training.masked_lm_head"):
        head = MaskedLMHead.load(model.passage_encoder, tiny_bert, seed=0)
    assert [r.message for r in caplog.records] == \
        [f"{tiny_bert} has no masked-language-model head: the MLM loss trains a freshly initialised one"]
    assert head.head.predictions.decoder.weight is model.passage_encoder.model.get_input_embeddings().weight
    assert "predictions.decoder.weight" not in head.own_parameters()
    again = MaskedLMHead.load(model.passage_encoder, tiny_bert, seed=0)
    for name, value in head.own_state_dict().items():  # a fresh head is the same on every run
        torch.testing.assert_close(again.own_state_dict()[name], value)


def test_mlm_head_of_a_checkpoint_that_has_one_is_loaded(tiny_bert, tmp_path, caplog):
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    torch.manual_seed(1)
    mlm = BertForMaskedLM(BertConfig.from_pretrained(tiny_bert))
    mlm.save_pretrained(tmp_path / "mlm")
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(tmp_path / "mlm")
    model = FlatEncoder.from_pretrained(tmp_path / "mlm", device="cpu")
    with caplog.at_level(logging.INFO, logger="graphdoc.training.masked_lm_head"):
        head = MaskedLMHead.load(model.passage_encoder, tmp_path / "mlm")
    assert not caplog.records
    torch.testing.assert_close(head.head.predictions.transform.dense.weight, mlm.cls.predictions.transform.dense.weight)
    # the encoder is the FlatEncoder's own, loaded once: the head reads its embeddings
    assert head.head.predictions.decoder.weight is model.passage_encoder.model.get_input_embeddings().weight


def test_masked_lm_backward_is_the_mean_cross_entropy_over_masked_tokens(tiny_bert):
    model = FlatEncoder.from_pretrained(tiny_bert, device="cpu").eval()  # no dropout: comparable passes
    encoder = model.passage_encoder
    head = MaskedLMHead.load(encoder, tiny_bert)
    ids = encoder.tokenize(["Graph attention networks read documents.", "A quick brown fox jumps over the dog."])
    rng = np.random.default_rng(0)
    pairs = [mask_tokens(torch.tensor(t), encoder.tokenizer, rng, probability=0.5) for t in ids]
    masked, labels = [m for m, _ in pairs], [lab for _, lab in pairs]
    got = masked_lm_backward(encoder, head, masked, labels, weight=0.1)
    grad = encoder.model.get_input_embeddings().weight.grad.clone()
    encoder.zero_grad()
    input_ids, mask = encoder.pad([m.tolist() for m in masked], torch.device("cpu"))
    target = torch.full_like(input_ids, IGNORE_INDEX)
    for row, lab in enumerate(labels):
        target[row, :len(lab)] = lab
    logits = head(encoder.hidden_states(input_ids, mask))  # [B, L, vocab], every position
    expected = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=IGNORE_INDEX)
    (0.1 * expected).backward()
    assert got == pytest.approx(expected.item(), rel=1e-5)
    torch.testing.assert_close(grad, encoder.model.get_input_embeddings().weight.grad, atol=1e-6, rtol=1e-4)
    assert masked_lm_backward(encoder, head, masked, [torch.full_like(lab, IGNORE_INDEX) for lab in labels], 0.1) == 0.0


# ------------------------------------------------------------------ graph docsplit
def test_graph_docsplit_makes_each_sentence_half_a_graph(tiny_bert):
    from graphdoc.encoder import GraphDocEncoder

    model = GraphDocEncoder.from_pretrained(tiny_bert, ModelConfig(chunker=ChunkerConfig(max_words=3)), device="cpu")
    cfg = PretrainConfig(objective="docsplit", max_passages=2, seed=5)
    task = GraphPretraining(model, cfg, Path("/nonexistent"))  # full mode: no cache folder
    doc = Document("a", "One two three. Four five six. Seven eight nine. Ten eleven twelve.")
    sentences = task.prepare(doc)
    assert sentences == ["One two three.", "Four five six."]  # those of the first 2 passages (3 words each)
    assert task.usable(sentences) and not task.usable(task.prepare(Document("b", "Just one.")))
    # a one-passage document of two sentences can be split (half could not)
    assert task.usable(task.prepare(Document("c", "A b. C d.")))
    subdocs = task.sub_documents([Example(4, sentences)], epoch=1)
    halves = docsplit_pair(sentences, np.random.default_rng([5, 1, 4]))
    assert [s.token_ids for s in subdocs] == [model.prepare(Document("4", h), 2).token_ids for h in halves]


def test_graph_docsplit_trains_the_graph_layers_over_the_passage_cache(tiny_bert, corpus, tmp_path):
    setup = PretrainSetup(ModelConfig(chunker=ChunkerConfig(max_words=5),
                                      passage_encoder=PassageEncoderConfig(model_name_or_path=str(tiny_bert)),
                                      graph=GraphConfig(dropout=0.1, attention_dropout=0.1)),
                          PretrainConfig(objective="docsplit", batch_size=4, epochs=2, lr=1e-3, temperature=0.1,
                                         frozen_encoder=True, max_passages=3, log_every=1, checkpoint_every=100))
    result = pretrain(corpus, tmp_path / "run", setup, device="cpu")
    # 14 documents, 2 of them a single sentence: 12 used per epoch in 3 steps (skips count the corpus's, once)
    assert (result.steps, result.documents_used, result.one_passage_skipped) == (6, 24, 2)
    assert result.cache_misses > 0 and result.mlm_loss is None and math.isfinite(result.loss)
    head = load_file(str(result.model_dir / "model.safetensors"))
    assert head["graph.layers.0.out.weight"].abs().sum() > 0  # trained away from the zero init
    start = encoder_weights(tiny_bert)
    frozen = encoder_weights(result.model_dir / "passage_encoder")
    assert all(torch.equal(frozen[k], start[k]) for k in start)


# ------------------------------------------------------------------ Longformer, time budget
def test_tiny_longformer_flat_docsplit_step(tiny_longformer, corpus, tmp_path):
    result = pretrain(corpus, tmp_path / "run", flat_setup(tiny_longformer, max_steps=2), device="cpu")
    # a fresh LM head (initialised here: transformers 5 leaves Longformer's output bias uninitialised)
    assert result.steps == 2 and math.isfinite(result.loss) and abs(result.mlm_loss - math.log(400)) < 1.0
    trained = encoder_weights(result.model_dir / "passage_encoder")
    start = encoder_weights(tiny_longformer)
    assert any(not torch.equal(trained[k], start[k]) for k in start)
    assert load_model(str(result.model_dir)).passage_encoder.model.config.model_type == "longformer"


def test_max_seconds_stops_the_run_and_saves_the_model(tiny_bert, corpus, tmp_path):
    result = pretrain(corpus, tmp_path / "run", flat_setup(tiny_bert, "simcse", max_steps=50, max_seconds=1e-6),
                      device="cpu")
    assert (result.steps, result.total_steps) == (1, 4)  # max_steps 50 cut to the 4 steps of the epochs
    assert isinstance(load_model(str(result.model_dir)), FlatEncoder)


# ------------------------------------------------------------------ command line
@pytest.fixture
def cli(restore_cli_state):
    from graphdoc.cli import main

    return lambda *argv: main(["-q", "pretrain", *argv])


def test_pretrain_backbone_flat_through_the_cli(tiny_bert, corpus, tmp_path, cli):
    out = tmp_path / "run"
    assert cli("--corpus", str(corpus), "--output", str(out), "--model", str(tiny_bert), "--backbone", "flat",
               "--objective", "crop", "--no-frozen-encoder", "--max-steps", "2", "--batch-size", "4",
               "--device", "cpu") == 0
    saved = json.loads((out / "pretrain_config.json").read_text())
    assert (saved["backbone"], saved["pretrain"]["objective"], saved["model"]["graph"]["graph_type"]) == \
        ("flat", "crop", "flat")
    assert json.loads((out / "model" / "config.json").read_text())["backbone"] == "flat"
    # a saved flat model trains on as a flat model without --backbone
    assert cli("--corpus", str(corpus), "--output", str(tmp_path / "again"), "--model", str(out / "model"),
               "--objective", "simcse", "--no-frozen-encoder", "--max-steps", "1", "--device", "cpu") == 0


@pytest.mark.parametrize("argv, message", [
    (["--backbone", "flat", "--objective", "half", "--no-frozen-encoder"],
     "pretrain.objective 'half' needs a graph model (--backbone graph); a flat model trains with docsplit, simcse, "
     "crop"),
    (["--objective", "simcse"],
     "pretrain.objective 'simcse' needs a flat model (--backbone flat); a graph model trains with half, ict, docsplit"),
    (["--backbone", "flat", "--objective", "docsplit", "--frozen-encoder"],
     "a flat model is its encoder: with pretrain.frozen_encoder there is nothing to train (use --no-frozen-encoder)"),
])
def test_backbone_and_objective_errors_are_one_line(tiny_bert, corpus, tmp_path, capsys, cli, argv, message):
    assert cli("--corpus", str(corpus), "--output", str(tmp_path / "o"), "--model", str(tiny_bert), *argv,
               "--device", "cpu") == 1
    assert capsys.readouterr().err.strip() == f"graphdoc pretrain: error: {message}"
    assert not (tmp_path / "o").exists()


def test_mlm_weight_on_a_graph_model_is_an_error(tiny_bert, corpus, tmp_path):
    from graphdoc.errors import GraphDocError

    setup = PretrainSetup(pretrain=PretrainConfig(objective="docsplit", mlm_weight=0.1))
    with pytest.raises(GraphDocError, match="pretrain.mlm_weight needs a flat model"):
        pretrain(corpus, tmp_path / "o", setup, model=str(tiny_bert), device="cpu")
