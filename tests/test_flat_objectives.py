"""Flat-backbone objectives: positive construction properties, exact loss values, MLM masking conventions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graphdoc.documents import Document, Section
from graphdoc.errors import GraphDocError
from graphdoc.training.flat_objectives import (
    IGNORE_INDEX,
    crop_texts,
    docsplit_halves,
    docsplit_loss,
    docsplit_texts,
    document_sentences,
    info_nce_pairs,
    mask_tokens,
    random_crop,
    simcse_pairs,
)


@pytest.fixture(scope="module")
def tokenizer():
    from conftest import _tiny_tokenizer

    return _tiny_tokenizer("bert")


# --- docsplit -------------------------------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(n=st.integers(2, 60), seed=st.integers(0, 2**32 - 1))
def test_docsplit_halves_partition_the_sentences_in_order(n, seed):
    a, b = docsplit_halves([f"s{i}." for i in range(n)], np.random.default_rng(seed))
    assert not set(a) & set(b)  # no sentence in both halves
    assert sorted(a + b) == list(range(n))  # nothing lost
    assert a == sorted(a) and b == sorted(b)  # document order kept
    assert a and b  # both halves non-empty


def test_docsplit_halves_have_random_sizes_and_are_reproducible():
    sizes = {len(docsplit_halves(["s"] * 10, np.random.default_rng(s))[0]) for s in range(50)}
    assert len(sizes) > 3  # a coin per sentence, not a fixed half
    draw = docsplit_halves(["s"] * 10, np.random.default_rng(7))
    assert draw == docsplit_halves(["s"] * 10, np.random.default_rng(7))
    # two sentences: always one each
    assert docsplit_halves(["x.", "y."], np.random.default_rng(0)) in (([0], [1]), ([1], [0]))
    with pytest.raises(ValueError, match="at least 2 sentences"):
        docsplit_halves(["only one."], np.random.default_rng(0))


def test_document_sentences_stay_within_sections():
    text = "Alpha one. Beta two\nGamma three. Delta four."
    doc = Document("d", text, title="T", sections=[Section("A", 0, 19), Section("B", 20, len(text))])
    # "Beta two" has no full stop but the section ends there
    assert document_sentences(doc) == ["Alpha one.", "Beta two", "Gamma three.", "Delta four."]


def test_docsplit_texts_hold_every_sentence_once_without_the_title():
    doc = Document("d", "One is here. Two is there. Three is far. Four is near.", title="Title")
    first, second = docsplit_texts(doc, np.random.default_rng(1))
    assert first and second and "Title" not in first + second
    words = (first + " " + second).split()
    assert sorted(words) == sorted(doc.text.split())
    with pytest.raises(ValueError):
        docsplit_texts(Document("d", "Just one sentence here."), np.random.default_rng(0))


# --- simcse and crop ------------------------------------------------------------------------------

def test_simcse_pairs_are_the_identity():
    assert simcse_pairs(["a b", "c"]) == [("a b", "a b"), ("c", "c")]
    assert simcse_pairs([]) == []


@settings(max_examples=120, deadline=None)
@given(n=st.integers(1, 3000), seed=st.integers(0, 2**32 - 1),
       low=st.floats(0.01, 1.0), width=st.floats(0.0, 1.0))
def test_crop_span_is_within_bounds_and_ratios(n, seed, low, width):
    high = min(1.0, low + width)
    start, end = random_crop(n, np.random.default_rng(seed), low, high)
    assert 0 <= start < end <= n
    assert max(1, int(low * n)) <= end - start <= max(1, int(high * n))


def test_crops_are_independent_and_reject_bad_arguments():
    text = " ".join(f"w{i}" for i in range(200))
    a, b = crop_texts(text, np.random.default_rng(0))
    assert a != b and a in text and b in text
    assert 20 <= len(a.split()) <= 100 and 20 <= len(b.split()) <= 100
    assert random_crop(1, np.random.default_rng(0)) == (0, 1)
    with pytest.raises(ValueError, match="at least 1 word"):
        random_crop(0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="min_ratio <= max_ratio"):
        random_crop(10, np.random.default_rng(0), 0.6, 0.5)


# --- losses ---------------------------------------------------------------------------------------

def test_info_nce_pairs_exact_value_2x2():
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    b = torch.tensor([[1.0, 1.0], [0.0, 2.0]])
    e = math.e
    # rows a1, b1, a2, b2; dot scores with every other row, the partner in the numerator
    a1 = -math.log(e / (e + 1 + 1))            # a1.b1 = 1, a1.a2 = 0, a1.b2 = 0
    b1 = -math.log(e / (e + e + e ** 2))       # b1.a1 = 1, b1.a2 = 1, b1.b2 = 2
    a2 = -math.log(e ** 2 / (1 + e + e ** 2))  # a2.a1 = 0, a2.b1 = 1, a2.b2 = 2
    b2 = -math.log(e ** 2 / (1 + e ** 2 + e ** 2))  # b2.a1 = 0, b2.b1 = 2, b2.a2 = 2
    expected = (a1 + b1 + a2 + b2) / 4
    assert info_nce_pairs(a, b, temperature=1.0, similarity="dot").item() == pytest.approx(expected, rel=1e-6)


def test_info_nce_pairs_exact_value_3x3_with_temperature_and_cosine():
    a, b = torch.eye(3), 2 * torch.eye(3)
    # dot / 0.5: the partner scores 2 * 2 = 4, the four other rows 0
    expected = -math.log(math.e ** 4 / (math.e ** 4 + 4))
    assert info_nce_pairs(a, b, 0.5, "dot").item() == pytest.approx(expected, rel=1e-6)
    # cosine / 0.5: the partner scores 1 / 0.5 = 2 whatever the lengths
    assert info_nce_pairs(a, b, 0.5).item() == pytest.approx(-math.log(math.e ** 2 / (math.e ** 2 + 4)), rel=1e-6)


def test_info_nce_pairs_rejects_mismatched_views():
    with pytest.raises(ValueError, match="same shape"):
        info_nce_pairs(torch.ones(2, 3), torch.ones(3, 3))
    with pytest.raises(GraphDocError, match="valid: dot, cosine"):
        info_nce_pairs(torch.ones(2, 3), torch.ones(2, 3), similarity="l2")


def test_docsplit_loss_weights_the_mlm_term():
    assert docsplit_loss(torch.tensor(2.0), torch.tensor(3.0)).item() == pytest.approx(2.3)
    assert docsplit_loss(torch.tensor(2.0), torch.tensor(3.0), mlm_weight=0.0).item() == pytest.approx(2.0)
    with pytest.raises(ValueError):
        docsplit_loss(torch.tensor(1.0), torch.tensor(1.0), mlm_weight=-1.0)


# --- masked language modelling --------------------------------------------------------------------

def test_mask_tokens_labels_and_special_tokens(tokenizer):
    batch = tokenizer(["The quick brown fox jumps over the lazy dog.", "Graphs."], padding=True,
                      return_tensors="pt")
    ids = batch["input_ids"]
    original = ids.clone()
    masked, labels = mask_tokens(ids, tokenizer, np.random.default_rng(0), probability=1.0)
    assert torch.equal(ids, original)  # input left alone
    special = torch.isin(ids, torch.tensor(tokenizer.all_special_ids))
    assert special.any() and (~special).any()
    # special tokens (CLS, SEP, padding) are never selected: ignored label, id unchanged
    assert (labels[special] == IGNORE_INDEX).all() and torch.equal(masked[special], ids[special])
    # every other token is selected (probability 1): its label is the original id
    assert torch.equal(labels[~special], ids[~special])
    none_masked, none_labels = mask_tokens(ids, tokenizer, np.random.default_rng(0), probability=0.0)
    assert torch.equal(none_masked, ids) and (none_labels == IGNORE_INDEX).all()


@pytest.mark.parametrize("gen", [np.random.default_rng(0), torch.Generator().manual_seed(0)],
                         ids=["numpy", "torch"])
def test_mask_tokens_follows_the_80_10_10_rule(tokenizer, gen):
    plain = [i for i in range(len(tokenizer)) if i not in tokenizer.all_special_ids]
    ids = torch.tensor(np.random.default_rng(1).choice(plain, size=(4, 5000)))
    masked, labels = mask_tokens(ids, tokenizer, gen)
    selected = labels != IGNORE_INDEX
    assert torch.equal(labels[selected], ids[selected]) and torch.equal(masked[~selected], ids[~selected])
    n = selected.sum().item()
    assert abs(n / ids.numel() - 0.15) < 0.01
    as_mask = (masked[selected] == tokenizer.mask_token_id).sum().item() / n
    unchanged = (masked[selected] == ids[selected]).sum().item() / n
    assert abs(as_mask - 0.8) < 0.02
    assert abs(unchanged - 0.1) < 0.02  # (plus the ~1/vocab random draws that hit the same token)
    assert abs(1 - as_mask - unchanged - 0.1) < 0.02  # replaced by a random token


def test_mask_tokens_is_reproducible_and_needs_a_mask_token(tokenizer):
    ids = torch.tensor(np.random.default_rng(2).integers(5, len(tokenizer), size=(2, 300)))
    first = mask_tokens(ids, tokenizer, np.random.default_rng(3))
    again = mask_tokens(ids, tokenizer, np.random.default_rng(3))
    assert all(torch.equal(x, y) for x, y in zip(first, again))

    class NoMask:
        mask_token_id = None

    with pytest.raises(GraphDocError, match="mask token"):
        mask_tokens(ids, NoMask(), np.random.default_rng(0))


def test_docsplit_loss_with_a_masked_lm_forward(tokenizer):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=64, max_position_embeddings=64))
    batch = tokenizer(["Graph attention networks read documents.", "A second sentence follows here!"],
                      padding=True, return_tensors="pt")
    masked, labels = mask_tokens(batch["input_ids"], tokenizer, np.random.default_rng(0), probability=0.5)
    assert (labels != IGNORE_INDEX).any()
    mlm = model(input_ids=masked, attention_mask=batch["attention_mask"], labels=labels).loss
    contrastive = info_nce_pairs(torch.randn(2, 8), torch.randn(2, 8))
    loss = docsplit_loss(contrastive, mlm)
    assert torch.isfinite(loss) and loss.item() == pytest.approx(contrastive.item() + 0.1 * mlm.item(), rel=1e-5)
    loss.backward()
    assert model.bert.embeddings.word_embeddings.weight.grad is not None
