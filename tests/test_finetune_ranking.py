"""Ranking fine-tuning: exact loss values, hard negatives, the negative schedule, dev selection, resume, k folds."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch
from _finetune_helpers import ranking_files, ranking_interrupted_in_epoch

from graphdoc.corpus import read_qrels
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError
from graphdoc.finetune import RankingConfig, finetune_ranking
from graphdoc.finetune import ranking as rk
from graphdoc.finetune.scoring import graph_scores, max_passage_scores
from graphdoc.outputs import GraphOutput
from graphdoc.retrieval.evaluation import evaluate_per_query
from graphdoc.retrieval.trec import read_run


def _graphs(vectors: list[list[list[float]]]) -> GraphOutput:
    """Graphs given as lists of node vectors, the document node first."""
    nodes = torch.tensor([v for graph in vectors for v in graph], dtype=torch.float)
    ptr = torch.tensor(np.cumsum([0] + [len(g) for g in vectors]))
    return GraphOutput([], nodes[ptr[:-1]], nodes, ptr)


def test_ranking_loss_exact_values_on_hand_made_vectors():
    queries = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    docs = _graphs([[[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 1.0]]])
    none = torch.zeros((2, 3), dtype=torch.bool)
    loss = rk.ranking_loss(queries, docs, torch.tensor([0, 1]), none, similarity="dot")
    # each query scores its positive 1, the other positive 0, the third document 1
    expected = -math.log(math.e / (math.e + 1 + math.e))
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    exclude = none.clone()
    exclude[0, 2] = exclude[1, 2] = True  # the third document is another positive of both queries
    loss = rk.ranking_loss(queries, docs, torch.tensor([0, 1]), exclude, similarity="dot", temperature=0.5)
    assert loss.item() == pytest.approx(-math.log(math.e ** 2 / (math.e ** 2 + 1)), abs=1e-6)


def test_passage_weight_mixes_document_node_and_best_passage():
    docs = _graphs([[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], [[0.0, 2.0]]])
    q = torch.tensor([[0.0, 1.0]])
    assert max_passage_scores(q, docs.node_embeddings, docs.ptr).tolist() == [[1.0, float("-inf")]]
    scores = graph_scores(q, docs, passage_weight=0.75, similarity="dot")
    # graph 1: 0.25 * 0 + 0.75 * 1; graph 2 has no passage node: its document node alone
    assert scores.tolist() == [[pytest.approx(0.75), pytest.approx(2.0)]]


def test_hard_negatives_exclude_positives():
    ranking = [f"d{i}" for i in range(10)]
    positives = {"d0", "d3", "d7"}
    seen = set()
    for seed in range(50):
        picks = rk.sample_negatives(ranking, positives, 3, np.random.default_rng(seed), depth=8)
        assert len(picks) == 3 == len(set(picks))
        assert not set(picks) & positives and set(picks) <= set(ranking[:8])
        seen.update(picks)
    assert seen == set(ranking[:8]) - positives
    assert rk.sample_negatives(["d0"], {"d0"}, 2, np.random.default_rng(0)) == []


def test_batch_documents_masks_other_positives_only():
    pairs = [rk.Pair("q1", "a"), rk.Pair("q1", "b"), rk.Pair("q2", "c")]
    docs, targets, exclude = rk.batch_documents(pairs, [["x"], ["a"], ["x"]], {"q1": {"a", "b"}, "q2": {"c"}})
    assert docs == ["a", "b", "c", "x"] and targets.tolist() == [0, 1, 2]
    assert exclude.tolist() == [[False, True, False, False], [True, False, False, False], [False] * 4]


def test_negative_schedule_switches_at_half_way():
    assert [rk.negative_source(e, 4) for e in range(4)] == ["bm25", "bm25", "model", "model"]
    assert [rk.negative_source(e, 3) for e in range(3)] == ["bm25", "bm25", "model"]
    assert rk.negative_source(0, 1) == "bm25" and rk.switch_epoch(1) is None and rk.switch_epoch(4) == 2


def _config(**changes) -> RankingConfig:
    base = {"epochs": 2, "batch_size": 4, "hard_negatives": 2, "lr": 5e-3, "max_passages": 4, "temperature": 0.1}
    return RankingConfig(**{**base, **changes})


def _kept_lists(path) -> dict[str, list[str]]:
    """The ranking lists a run keeps in ``OUTPUT/negatives/`` (beside the digest of what they were made from)."""
    saved = json.loads(path.read_text())
    assert set(saved) == {"digest", "lists"}
    return saved["lists"]


def test_training_uses_bm25_then_the_half_way_models_negatives(tiny_bert, tmp_path):
    files = ranking_files(tmp_path)
    summary = finetune_ranking(files["corpus"], files["queries"], files["qrels"], tmp_path / "run",
                               config=_config(epochs=4), model=str(tiny_bert))
    assert [h["negatives"] for h in summary["history"]] == ["bm25", "bm25", "model", "model"]
    halfway = GraphDocEncoder.from_pretrained(tmp_path / "run" / "halfway")
    final = GraphDocEncoder.from_pretrained(tmp_path / "run" / "model")
    # the model's negatives were ranked with the weights of the end of epoch 2, not the final ones
    assert any(not torch.equal(a, b) for a, b in zip(halfway.graph.state_dict().values(),
                                                     final.graph.state_dict().values()))
    lists = _kept_lists(tmp_path / "run" / "negatives" / "model.json")
    assert sorted(lists) == sorted(read_qrels(files["qrels"])) and all(len(v) == 12 for v in lists.values())


def test_judged_pool_draws_negatives_only_from_documents_some_training_query_is_judged_relevant(tiny_bert, tmp_path):
    files = ranking_files(tmp_path)  # every "-a" document is judged relevant, "-b" only for odd topics
    pool = {d for docs in read_qrels(files["qrels"]).values() for d in docs}
    assert len(pool) == 9
    for name in ("corpus", "judged"):
        finetune_ranking(files["corpus"], files["queries"], files["qrels"], tmp_path / name,
                         config=_config(negative_pool=name), model=str(tiny_bert))
    everything = {source: _kept_lists(tmp_path / "corpus" / "negatives" / f"{source}.json")
                  for source in ("bm25", "model")}
    judged = {source: _kept_lists(tmp_path / "judged" / "negatives" / f"{source}-judged.json")
              for source in ("bm25", "model")}
    assert all(len(v) == 12 for v in everything["model"].values())  # the "-b" documents of even topics too
    assert all(sorted(v) == sorted(pool) for v in judged["model"].values())
    # BM25 lists only the documents sharing a word with the query: the same order, the pool's documents kept
    assert judged["bm25"] == {q: [d for d in v if d in pool] for q, v in everything["bm25"].items()}
    assert any(len(judged["bm25"][q]) < len(v) for q, v in everything["bm25"].items())


def test_search_depth_for_a_negative_pool():
    assert rk.search_depth(100, 197) == 100  # the whole corpus
    assert rk.search_depth(100, 197, 162) == 122  # ceil(100 * 197 / 162)
    assert rk.search_depth(100, 10_000, 100) == 1_000  # at most 10x
    assert rk.search_depth(100, 50, 40) == 50  # at most the corpus


def test_dev_evaluation_keeps_the_best_checkpoint(tiny_bert, tmp_path):
    from graphdoc.finetune.data import load_ranking_data
    from graphdoc.finetune.inputs import open_cache
    from graphdoc.finetune.ranking_trainer import RankingTrainer

    files = ranking_files(tmp_path)
    cfg = _config(epochs=4, lr=5e-2)
    summary = finetune_ranking(files["corpus"], files["queries"], files["qrels"], tmp_path / "run",
                               dev_qrels=files["qrels"], config=cfg, model=str(tiny_bert))
    devs = [h["dev"] for h in summary["history"]]
    assert summary["best"] == max(devs) and summary["best_epoch"] == devs.index(max(devs)) + 1
    best = GraphDocEncoder.from_pretrained(tmp_path / "run" / "model")
    data = load_ranking_data(best, files["corpus"], files["queries"], open_cache(best, True, None, tmp_path / "e"), 4)
    trainer = RankingTrainer(best, cfg, data, read_qrels(files["qrels"]), tmp_path / "e", read_qrels(files["qrels"]))
    assert trainer.evaluate_dev() == pytest.approx(summary["best"], abs=1e-6)


def test_resume_ends_where_an_uninterrupted_run_ends(tiny_bert, tmp_path, monkeypatch):
    from graphdoc.finetune.ranking_trainer import RankingTrainer

    files = ranking_files(tmp_path)
    args = (files["corpus"], files["queries"], files["qrels"])
    finetune_ranking(*args, tmp_path / "a", config=_config(epochs=3), model=str(tiny_bert))
    real = RankingTrainer._epoch

    def stop_in_epoch_2(self, epoch, source):
        if epoch == 1:
            raise KeyboardInterrupt
        return real(self, epoch, source)

    monkeypatch.setattr(RankingTrainer, "_epoch", stop_in_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        finetune_ranking(*args, tmp_path / "b", config=_config(epochs=3), model=str(tiny_bert))
    monkeypatch.setattr(RankingTrainer, "_epoch", real)
    with pytest.raises(GraphDocError, match="--resume"):
        finetune_ranking(*args, tmp_path / "b", config=_config(epochs=3), model=str(tiny_bert))
    summary = finetune_ranking(*args, tmp_path / "b", config=_config(epochs=3), model=str(tiny_bert), resume=True)
    assert summary["epochs"] == 3
    a = GraphDocEncoder.from_pretrained(tmp_path / "a" / "model").head_state_dict()
    b = GraphDocEncoder.from_pretrained(tmp_path / "b" / "model").head_state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_cross_validation_ranks_every_query_once_and_never_its_training_query(tiny_bert, tmp_path):
    files = ranking_files(tmp_path)
    result = finetune_ranking(files["corpus"], files["queries"], files["qrels"], tmp_path / "cv",
                              config=_config(epochs=2, fold_dev_fraction=0.25), model=str(tiny_bert), folds=3)
    qrels = read_qrels(files["qrels"])
    tested = [q for fold in result["folds"] for q in fold["test_queries"]]
    assert sorted(tested) == sorted(qrels) and len(tested) == len(set(tested))
    for fold in result["folds"]:
        train, dev, test = (set(fold[k]) for k in ("train_queries", "dev_queries", "test_queries"))
        assert len(test) == 2 and len(dev) == 1 and not (train & test or dev & test or train & dev)
        assert train | dev | test == set(qrels)
        assert 0.0 <= fold["alpha"] <= 1.0
    for name in ("dense", "hybrid"):
        run = read_run(tmp_path / "cv" / f"{name}.trec")
        assert sorted(run) == sorted(qrels)
        # the closing score is the written run's, over every query
        per_query = evaluate_per_query(run, qrels, ["nDCG@10"])
        assert result["scores"][name] == pytest.approx(sum(v["nDCG@10"] for v in per_query.values()) / len(qrels))
    assert result["measure"] == "nDCG@10"
    assert json.loads((tmp_path / "cv" / "crossval.json").read_text())["scores"] == result["scores"]


def test_config_errors_name_the_bad_value():
    with pytest.raises(GraphDocError, match="eval_mode"):
        RankingConfig(eval_mode="sparse")
    with pytest.raises(GraphDocError, match="negative_pool must be one of corpus, judged; got 'test'"):
        RankingConfig(negative_pool="test")
    with pytest.raises(GraphDocError,
                       match=r"^ranking\.fusion_normalization must be one of minmax, zscore, none; got 'zscor'$"):
        RankingConfig(fusion_normalization="zscor")  # before any training, not when the trainer first fuses
    with pytest.raises(GraphDocError, match="lr must be a number"):
        RankingConfig(lr="fast")
    assert RankingConfig(lr="5e-5").lr == 5e-5
    for settings, message in [({"max_grad_norm": -1.0}, "ranking.max_grad_norm must be > 0 or null (no clipping); got -1.0"),
                              ({"max_grad_norm": 0.0}, "ranking.max_grad_norm must be > 0 or null (no clipping); got 0.0"),
                              ({"lr": float("inf")}, "ranking.lr must be positive; got inf"),
                              ({"weight_decay": -0.1}, "ranking.weight_decay must be >= 0; got -0.1"),
                              ({"negative_depth": 0}, "ranking.negative_depth must be at least 1; got 0"),
                              ({"hard_negatives": -1}, "ranking.hard_negatives must be >= 0; got -1"),
                              ({"seed": -5}, "ranking.seed must be in [0, 2147483647]; got -5"),
                              ({"fold_seed": 2 ** 31}, "ranking.fold_seed must be in [0, 2147483647]; got 2147483648")]:
        with pytest.raises(GraphDocError) as info:
            RankingConfig(**settings)
        assert str(info.value) == message
    assert RankingConfig(max_grad_norm=None).max_grad_norm is None


def test_full_mode_trains_the_passage_encoder_too(tiny_bert, tmp_path):
    files = ranking_files(tmp_path)
    finetune_ranking(files["corpus"], files["queries"], files["qrels"], tmp_path / "full",
                     config=_config(epochs=1, frozen_encoder=False), model=str(tiny_bert))
    before = GraphDocEncoder.from_pretrained(str(tiny_bert)).passage_encoder.state_dict()
    after = GraphDocEncoder.from_pretrained(tmp_path / "full" / "model").passage_encoder.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert not (tmp_path / "full" / "passage_cache").exists()


def _interrupted_before_the_first_checkpoint(args, output, tiny_bert, monkeypatch) -> None:
    """A run stopped in its first epoch: BM25's lists are kept, no checkpoint is."""
    from graphdoc.finetune.ranking_trainer import RankingTrainer

    def stopped(self, epoch, source):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(RankingTrainer, "_epoch", stopped)
        with pytest.raises(KeyboardInterrupt):
            finetune_ranking(*args, output, config=_config(), model=str(tiny_bert))
    assert (output / "negatives" / "bm25.json").is_file() and not (output / "checkpoints").exists()


def test_lists_an_interrupted_attempt_left_over_other_data_are_ranked_again(tiny_bert, tmp_path, monkeypatch):
    files = ranking_files(tmp_path)
    _interrupted_before_the_first_checkpoint((files["corpus"], files["queries"], files["qrels"]), tmp_path / "run",
                                             tiny_bert, monkeypatch)
    assert any("fox-b" in docs for docs in _kept_lists(tmp_path / "run" / "negatives" / "bm25.json").values())
    # a fresh run in the same folder over a corpus without fox-b (judged relevant to no query)
    lines = files["corpus"].read_text().splitlines(keepends=True)
    smaller = tmp_path / "smaller.jsonl"
    smaller.write_text("".join(line for line in lines if '"fox-b"' not in line))
    summary = finetune_ranking(smaller, files["queries"], files["qrels"], tmp_path / "run", config=_config(),
                               model=str(tiny_bert))
    assert summary["epochs"] == 2
    assert not any("fox-b" in docs for docs in _kept_lists(tmp_path / "run" / "negatives" / "bm25.json").values())


def test_lists_of_the_same_data_and_settings_are_reused(tiny_bert, tmp_path, monkeypatch):
    from graphdoc.finetune.retriever import CorpusRanker

    files = ranking_files(tmp_path)
    args = (files["corpus"], files["queries"], files["qrels"])
    _interrupted_before_the_first_checkpoint(args, tmp_path / "run", tiny_bert, monkeypatch)
    kept = (tmp_path / "run" / "negatives" / "bm25.json").read_text()
    calls = []
    real = CorpusRanker.bm25_run
    monkeypatch.setattr(CorpusRanker, "bm25_run", lambda self, *a: calls.append(a) or real(self, *a))
    finetune_ranking(*args, tmp_path / "run", config=_config(), model=str(tiny_bert))
    assert calls == [] and (tmp_path / "run" / "negatives" / "bm25.json").read_text() == kept
    # the same lists left where a run with another setting they depend on starts (an earlier attempt in that
    # folder, stopped before its first checkpoint: its record and its lists): ranked again
    (tmp_path / "deep" / "negatives").mkdir(parents=True)
    (tmp_path / "deep" / "negatives" / "bm25.json").write_text(kept)
    shutil.copy(tmp_path / "run" / "finetune_config.json", tmp_path / "deep")
    finetune_ranking(*args, tmp_path / "deep", config=_config(negative_depth=3), model=str(tiny_bert))
    assert len(calls) == 1
    assert all(len(v) <= 3 for v in _kept_lists(tmp_path / "deep" / "negatives" / "bm25.json").values())


def test_lists_kept_before_digests_are_taken_only_on_resume(tmp_path):
    path = tmp_path / "bm25.json"
    path.write_text(json.dumps({"q0": ["d1", "d2"]}))  # the bare format of earlier versions
    assert rk.read_ranking_lists(path, "abc") is None
    assert rk.read_ranking_lists(path, "abc", legacy_ok=True) == {"q0": ["d1", "d2"]}
    rk.write_ranking_lists(path, {"q0": ["d3"]}, "abc")
    assert rk.read_ranking_lists(path, "abc") == {"q0": ["d3"]}
    assert rk.read_ranking_lists(path, "xyz") is None and rk.read_ranking_lists(path, "xyz", legacy_ok=True) is None
    path.write_text("{broken")
    assert rk.read_ranking_lists(path, "abc", legacy_ok=True) is None


def test_an_empty_queries_file_is_one_error_line(tiny_bert, tmp_path):
    files = ranking_files(tmp_path)
    (tmp_path / "none.jsonl").write_text("")
    with pytest.raises(GraphDocError) as err:
        finetune_ranking(files["corpus"], tmp_path / "none.jsonl", files["qrels"], tmp_path / "run",
                         config=_config(), model=str(tiny_bert))
    assert str(err.value) == f"the queries file {tmp_path / 'none.jsonl'} holds no queries"


def test_a_resumed_run_keeps_the_lists_an_earlier_version_saved_without_a_digest(tiny_bert, tmp_path, monkeypatch):
    from graphdoc.finetune.retriever import CorpusRanker

    files = ranking_files(tmp_path)
    args = (files["corpus"], files["queries"], files["qrels"], tmp_path / "run")
    ranking_interrupted_in_epoch(monkeypatch, 1,
                                 lambda: finetune_ranking(*args, config=_config(epochs=4), model=str(tiny_bert)))
    path = tmp_path / "run" / "negatives" / "bm25.json"
    path.write_text(json.dumps(_kept_lists(path)))  # as versions before digests wrote it
    calls = []
    real_run = CorpusRanker.bm25_run
    monkeypatch.setattr(CorpusRanker, "bm25_run", lambda self, *a: calls.append(a) or real_run(self, *a))
    assert finetune_ranking(*args, config=_config(epochs=4), model=str(tiny_bert), resume=True)["epochs"] == 4
    assert calls == []


def test_a_fold_holds_out_at_least_one_dev_query_when_asked_to():
    from graphdoc.finetune.crossval import split_off

    qrels = {f"q{i}": {"d": 1} for i in range(4)}
    rest, held = split_off(qrels, 0.1, seed=0)  # round(0.4) is 0: alpha would be picked on training queries
    assert len(held) == 1 and len(rest) == 3 and set(rest) | set(held) == set(qrels)
    assert split_off(qrels, 0.0, seed=0) == (qrels, {})
    assert split_off({"q0": {"d": 1}}, 0.5, seed=0) == ({"q0": {"d": 1}}, {})  # nothing would be left to train on
    assert len(split_off({f"q{i}": {"d": 1} for i in range(30)}, 0.1, seed=0)[1]) == 3


def test_k_fold_alpha_ties_go_to_the_configured_alpha_not_to_bm25_alone():
    from graphdoc.finetune.crossval import choose_alpha
    from graphdoc.finetune.retriever import ComponentRuns

    # both sides rank the relevant document first: every alpha scores nDCG@10 1.0
    dense = {"q1": {"d1": 0.9, "d2": 0.1}, "q2": {"d3": 0.8, "d1": 0.2}}
    sparse = {"q1": {"d1": 5.0, "d2": 1.0}, "q2": {"d3": 4.0, "d1": 0.5}}
    parts = ComponentRuns(dense, dense, sparse)
    qrels = {"q1": {"d1": 1}, "q2": {"d3": 1}}
    assert choose_alpha(parts, qrels, "zscore", "nDCG@10", prefer=0.6) == (0.6, 1.0)  # was 0.0, the first
    assert choose_alpha(parts, qrels, "zscore", "nDCG@10", prefer=0.65)[0] == 0.6  # nearest, first of two
    # a real difference still decides: the dense side ranks q2's document last
    dense["q2"] = {"d3": 0.1, "d1": 0.9}
    assert choose_alpha(ComponentRuns(dense, dense, sparse), qrels, "zscore", "nDCG@10", prefer=0.6)[0] < 0.5
