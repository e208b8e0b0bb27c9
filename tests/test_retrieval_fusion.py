import math

import numpy as np
import pytest

from graphdoc.errors import GraphDocError
from graphdoc.retrieval.fusion import (
    FusionConfig,
    fuse,
    fuse_runs,
    normalize,
    reciprocal_rank_fusion,
    weighted_fusion,
)
from graphdoc.retrieval.runs import hits_to_run, ranked, top_k, top_k_array, truncate_run


def test_normalize():
    assert normalize(np.array([1.0, 2.0, 3.0]), "minmax").tolist() == [0.0, 0.5, 1.0]
    assert normalize(np.array([4.0, 4.0]), "minmax").tolist() == [0.0, 0.0]
    z = 1 / math.sqrt(2 / 3)
    np.testing.assert_allclose(normalize(np.array([1.0, 2.0, 3.0]), "zscore"), [-z, 0.0, z], rtol=1e-15)
    assert normalize(np.array([7.0, 7.0, 7.0]), "zscore").tolist() == [0.0, 0.0, 0.0]
    assert normalize(np.array([3.0, -1.0]), "none").tolist() == [3.0, -1.0]
    assert normalize(np.array([]), "minmax").tolist() == []
    with pytest.raises(GraphDocError, match=r"^unknown normalization 'l2'; valid: 'minmax', 'zscore', 'none'$"):
        normalize(np.array([1.0]), "l2")
    with pytest.raises(GraphDocError, match=r"^cannot normalise non-finite scores: \[nan\]$"):
        normalize(np.array([1.0, np.nan]))


def test_weighted_fusion_exact():
    dense = {"a": 3.0, "b": 2.0, "c": 1.0}  # minmax -> a 1, b .5, c 0
    sparse = {"a": 0.0, "b": 10.0, "d": 5.0}  # minmax -> a 0, b 1, d .5
    fused = weighted_fusion(dense, sparse, alpha=0.3)
    # a missing score is filled with that side's minimum normalised score, 0 after minmax
    assert fused == {"b": 0.3 * 0.5 + 0.7 * 1.0, "d": 0.3 * 0.0 + 0.7 * 0.5, "a": 0.3 * 1.0 + 0.7 * 0.0, "c": 0.0}
    assert list(fused) == ["b", "d", "a", "c"]  # rank order
    assert weighted_fusion(dense, {}, alpha=0.3) == {"a": 0.3, "b": 0.3 * 0.5, "c": 0.0}
    assert list(weighted_fusion({"x": 1.0, "y": 1.0}, {}, alpha=1.0)) == ["x", "y"]
    with pytest.raises(GraphDocError, match="^alpha must be between 0 and 1, got 1.5$"):
        weighted_fusion(dense, sparse, alpha=1.5)


def test_weighted_fusion_zscore_fills_with_minimum():
    fused = weighted_fusion({"a": 1.0, "b": 3.0}, {"a": 2.0}, alpha=0.5, normalization="zscore")
    # dense z-scores: a -1, b 1; sparse: a 0 (constant); b missing on the sparse side -> min = 0
    assert fused == {"b": 0.5, "a": -0.5}


def test_reciprocal_rank_fusion_exact():
    run1 = {"a": 3.0, "b": 2.0, "c": 1.0}
    run2 = {"a": 0.9, "c": 0.8, "b": 0.1}
    fused = reciprocal_rank_fusion([run1, run2], k=60)
    assert fused == {"a": 1 / 61 + 1 / 61, "b": 1 / 62 + 1 / 63, "c": 1 / 63 + 1 / 62}
    assert list(fused) == ["a", "b", "c"]
    # ties inside a ranking are ordered by doc id
    assert reciprocal_rank_fusion([{"y": 1.0, "x": 1.0}], k=0) == {"x": 1.0, "y": 0.5}
    with pytest.raises(GraphDocError, match="^RRF k must be >= 0, got -1$"):
        reciprocal_rank_fusion([run1], k=-1)


def test_rrf_leaves_documents_bm25_did_not_match_out_of_the_bm25_ranking():
    # the searcher scores the union of both lists with both retrievers: "a" and "z" share no term with the query
    dense = {"z": 0.9, "m": 0.8, "a": 0.1}
    bm25 = {"z": 0.0, "m": 2.5, "a": 0.0}
    fused = fuse(dense, bm25, FusionConfig(method="rrf", rrf_k=60))
    assert fused == {"m": 1 / 62 + 1 / 61, "z": 1 / 61, "a": 1 / 63}  # not "a" ranked 2nd in BM25 by its name
    renamed = fuse({"a": 0.9, "m": 0.8, "z": 0.1}, {"a": 0.0, "m": 2.5, "z": 0.0}, FusionConfig(method="rrf"))
    assert list(renamed.values()) == list(fused.values())  # the same ranking whatever the documents are called
    # rank_bm25's idf floor can make every match negative in a small corpus: a negative score is still a match
    assert fuse({"a": 0.2, "b": 0.1}, {"a": -0.03, "b": -0.05}, FusionConfig(method="rrf", rrf_k=60)) == \
        {"a": 2 / 61, "b": 2 / 62}


def test_fuse_dispatch_and_config():
    dense, sparse = {"a": 2.0, "b": 1.0}, {"b": 4.0, "c": 2.0}
    assert fuse(dense, sparse, FusionConfig(alpha=0.3)) == weighted_fusion(dense, sparse, 0.3)
    assert fuse(dense, sparse, FusionConfig(method="rrf", rrf_k=1), k=2) == {"b": 1 / 3 + 1 / 2, "a": 1 / 2}
    config = FusionConfig(method="rrf", alpha=0.2)
    assert FusionConfig.from_dict(config.to_dict()) == config
    with pytest.raises(GraphDocError, match=r"^unknown fusion method 'max'; valid: 'weighted', 'rrf'$"):
        FusionConfig(method="max")
    with pytest.raises(GraphDocError, match=r"^unknown FusionConfig key\(s\) 'beta'; valid keys: method, alpha, "):
        FusionConfig.from_dict({"beta": 1})


def test_fuse_runs_union_of_queries():
    dense_run = {"q1": {"a": 1.0, "b": 0.0}}
    sparse_run = {"q2": {"c": 1.0}, "q1": {"a": 1.0, "b": 3.0}}
    fused = fuse_runs(dense_run, sparse_run, FusionConfig(alpha=0.25))
    # a one-document list is constant, so minmax maps it to 0
    assert fused == {"q1": {"b": 0.75, "a": 0.25}, "q2": {"c": 0.0}}


def test_ranking_helpers():
    scores = {"b": 1.0, "a": 1.0, "c": 2.0}
    assert ranked(scores) == [("c", 2.0), ("a", 1.0), ("b", 1.0)]
    assert ranked(scores, 2) == [("c", 2.0), ("a", 1.0)]
    assert list(top_k(scores, 1)) == ["c"]
    assert truncate_run({"q": scores}, 2) == {"q": {"c": 2.0, "a": 1.0}}


def test_top_k_array_and_hits_to_run():
    scores = np.array([0.5, 0.0, 2.0, 0.5, 0.5, -1.0], dtype=np.float32)
    indices, values = top_k_array(scores, 3)
    assert indices.tolist() == [2, 0, 3] and values.tolist() == [2.0, 0.5, 0.5]
    indices, values = top_k_array(scores, 10)  # 0 is "no match"; a negative score is a match, ranked last
    assert indices.tolist() == [2, 0, 3, 4, 5, -1] and values.tolist() == [2.0, 0.5, 0.5, 0.5, -1.0, 0]
    run = hits_to_run(["q1", "q2"], np.array([[1, 0], [-1, -1]]), np.array([[3.0, 2.0], [0, 0]]), ["d0", "d1"])
    assert run == {"q1": {"d1": 3.0, "d0": 2.0}, "q2": {}}
