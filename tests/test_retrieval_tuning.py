import pytest

from graphdoc.errors import GraphDocError
from graphdoc.retrieval.evaluation import evaluate
from graphdoc.retrieval.fusion import FusionConfig, fuse
from graphdoc.retrieval.tuning import DEFAULT_ALPHAS, assign_folds, tune_alpha

QIDS = [f"q{i}" for i in range(10)]
QRELS = {q: {"A": 1, "B": 1, "X": 0, "Y": 0} for q in QIDS}
GOOD = {"A": 1.0, "B": 0.99, "X": 0.98, "Y": 0.0}  # perfect ranking
# X outranks B after fusion for every alpha < 0.99 (0.98a + (1 - a) > 0.99a), so only alpha 1 is perfect
BAD = {"X": 1.0, "Y": 0.5, "A": 0.0, "B": 0.0}


def test_perfect_dense_picks_alpha_one():
    dense, sparse = dict.fromkeys(QIDS, GOOD), dict.fromkeys(QIDS, BAD)
    result = tune_alpha(dense, sparse, QRELS, folds=5)
    assert result.alpha == 1.0
    assert [f.alpha for f in result.folds] == [1.0] * 5
    assert [(f.train_score, f.test_score) for f in result.folds] == [(1.0, 1.0)] * 5
    assert result.mean_test_score == 1.0 and result.scores_by_alpha[1.0] == 1.0
    assert max(s for a, s in result.scores_by_alpha.items() if a < 1) < 1.0
    assert list(result.scores_by_alpha) == list(DEFAULT_ALPHAS) == [i / 10 for i in range(11)]
    assert result.run == {q: fuse(GOOD, BAD, FusionConfig(alpha=1.0)) for q in QIDS}
    assert result.to_dict()["folds"][0]["alpha"] == 1.0


def test_perfect_sparse_picks_alpha_zero():
    result = tune_alpha(dict.fromkeys(QIDS, BAD), dict.fromkeys(QIDS, GOOD), QRELS, folds=2, measure="RR@100")
    assert result.alpha == 0.0 and [f.alpha for f in result.folds] == [0.0, 0.0]
    assert result.measure == "RR@100" and result.mean_test_score == 1.0


def test_cross_validated_run_matches_mean_test_score():
    # half of the queries favour dense, half sparse: folds disagree, the held-out estimate is honest
    dense = {q: GOOD if i % 2 else BAD for i, q in enumerate(QIDS)}
    sparse = {q: BAD if i % 2 else GOOD for i, q in enumerate(QIDS)}
    result = tune_alpha(dense, sparse, QRELS, folds=3, seed=1)
    assert result.mean_test_score == pytest.approx(evaluate(result.run, QRELS, ["nDCG@10"])["nDCG@10"], abs=1e-12)
    assert sorted(q for f in result.folds for q in f.query_ids) == sorted(QIDS)


def test_fold_assignment_is_deterministic():
    folds = assign_folds(QIDS, 5, seed=0)
    assert folds == assign_folds(list(reversed(QIDS)), 5, seed=0)
    assert sorted(q for f in folds for q in f) == sorted(QIDS) and [len(f) for f in folds] == [2] * 5
    assert folds != assign_folds(QIDS, 5, seed=1)
    with pytest.raises(GraphDocError, match=r"^cross-validation needs at least 2 judged queries; got 1$"):
        assign_folds(["q1"], 2)
    with pytest.raises(GraphDocError, match=r"^folds must be between 2 and the number of queries \(10\), got 11$"):
        assign_folds(QIDS, 11)
