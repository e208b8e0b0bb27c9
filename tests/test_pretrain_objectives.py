"""Contrastive objectives: positive construction properties and exact loss values on hand-made vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graphdoc.errors import GraphDocError
from graphdoc.training.objectives import (LOSSES, ict_info_nce, make_split, similarity_matrix, split_halves,
                                          split_ict, symmetric_info_nce)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 120), seed=st.integers(0, 2**32 - 1))
def test_halves_partition_the_passages_in_order(n, seed):
    a, b = split_halves(n, np.random.default_rng(seed))
    assert not set(a) & set(b)  # no passage in both halves
    assert sorted(np.concatenate([a, b]).tolist()) == list(range(n))  # nothing lost
    assert list(a) == sorted(a) and list(b) == sorted(b)  # document order kept
    assert (len(a), len(b)) == (n // 2, n - n // 2)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 120), seed=st.integers(0, 2**32 - 1), first=st.sampled_from([0.0, 0.5, 1.0]))
def test_ict_is_one_passage_against_the_rest(n, seed, first):
    single, rest = split_ict(n, np.random.default_rng(seed), first)
    assert len(single) == 1 and len(rest) == n - 1
    assert sorted(np.concatenate([single, rest]).tolist()) == list(range(n))
    assert list(rest) == sorted(rest)
    if first == 1.0:
        assert single[0] == 0


def test_ict_takes_the_first_passage_about_half_the_time():
    rng = np.random.default_rng(0)
    firsts = sum(split_ict(10, rng)[0][0] == 0 for _ in range(4000))
    # 0.5 (first) + 0.5 * 1/10 (a random one that happens to be the first)
    assert abs(firsts / 4000 - 0.55) < 0.03


def test_splits_are_random_but_reproducible():
    draws = {tuple(split_halves(10, np.random.default_rng(s))[0]) for s in range(20)}
    assert len(draws) > 10
    again = split_halves(10, np.random.default_rng(3))[0]
    assert np.array_equal(again, split_halves(10, np.random.default_rng(3))[0])


def test_splits_need_two_passages_and_a_known_objective():
    with pytest.raises(ValueError):
        split_halves(1, np.random.default_rng(0))
    with pytest.raises(GraphDocError, match="unknown objective 'mlm'; valid: half, ict"):
        make_split("mlm", 4, np.random.default_rng(0))
    from graphdoc.training.config import OBJECTIVES

    assert set(LOSSES) == set(OBJECTIVES) == {"half", "ict", "docsplit", "simcse", "crop"}
    # the two-view objectives share the passage objectives' symmetric loss
    assert LOSSES["docsplit"] is LOSSES["simcse"] is LOSSES["crop"] is symmetric_info_nce


def test_symmetric_loss_exact_value():
    # two documents; each half equals its partner, the documents are orthogonal
    z = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    # row k: partner scores 1, the two other sub-documents 0, itself excluded
    expected = -math.log(math.e / (math.e + 2))
    assert symmetric_info_nce(z, "dot", 1.0).item() == pytest.approx(expected, rel=1e-6)
    # temperature 0.5 doubles every score
    expected_t = -math.log(math.e ** 2 / (math.e ** 2 + 2))
    assert symmetric_info_nce(z, "dot", 0.5).item() == pytest.approx(expected_t, rel=1e-6)


def test_symmetric_loss_uses_every_other_sub_document_as_negative():
    z = torch.tensor([[2.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    scores = z @ z.T
    expected = 0.0
    for k in range(4):
        others = [j for j in range(4) if j != k]
        expected += -(scores[k, k ^ 1] - torch.logsumexp(scores[k, others], 0)).item()
    assert symmetric_info_nce(z, "dot", 1.0).item() == pytest.approx(expected / 4, rel=1e-6)


def test_cosine_ignores_vector_length():
    z = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 0.5]])
    assert symmetric_info_nce(z, "cosine", 1.0).item() == pytest.approx(-math.log(math.e / (math.e + 2)), rel=1e-6)
    assert similarity_matrix(z, z, "cosine", 0.1)[0, 1].item() == pytest.approx(10.0)


def test_ict_loss_exact_value_over_the_long_sub_documents():
    # rows: q1, d1, q2, d2; the softmax of each query runs over d1, d2 only
    z = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    q1 = -math.log(math.exp(2) / (math.exp(2) + math.exp(1)))  # q1.d1 = 2, q1.d2 = 1
    q2 = -math.log(math.exp(1) / (math.exp(0) + math.exp(1)))  # q2.d1 = 0, q2.d2 = 1
    assert ict_info_nce(z, "dot", 1.0).item() == pytest.approx((q1 + q2) / 2, rel=1e-6)


def test_losses_reject_unpaired_input_and_unknown_similarity():
    with pytest.raises(ValueError, match="pairs"):
        symmetric_info_nce(torch.ones(3, 2))
    with pytest.raises(GraphDocError, match="valid: dot, cosine"):
        similarity_matrix(torch.ones(2, 2), torch.ones(2, 2), "l2")
