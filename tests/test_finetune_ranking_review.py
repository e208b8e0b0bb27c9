"""Ranking fine-tuning, review fixes: a run killed between its epoch's checkpoint and saving its model no longer
resumes to an older model; the saved model carries the passage cap training used and, for a flat FirstP model,
the passage weight its one-node graphs had; a corpus id no TREC run can hold and a bad eval_measure are refused
before training."""

from __future__ import annotations

import pytest
import torch
from _finetune_helpers import ranking_files

from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError
from graphdoc.finetune import RankingConfig, finetune_ranking
from graphdoc.flat_config import FlatConfig, FlatModelConfig

BASE = {"epochs": 3, "batch_size": 4, "hard_negatives": 1, "lr": 5e-3, "max_passages": 4, "temperature": 0.1}


def test_a_kill_between_checkpoint_and_model_save_resumes_to_the_last_epochs_model(tiny_bert, tmp_path,
                                                                                    monkeypatch):
    files = ranking_files(tmp_path)
    args = (files["corpus"], files["queries"], files["qrels"])
    finetune_ranking(*args, tmp_path / "whole", config=RankingConfig(**BASE), model=str(tiny_bert))
    real_save, saves = GraphDocEncoder.save_pretrained, []

    def killed_on_the_third_save(self, path, **kwargs):
        saves.extend([path] if path == tmp_path / "killed" / "model" else [])  # not a checkpoint's own copy
        if len(saves) == 3:  # the last epoch's: in the old order its checkpoint was written already
            raise KeyboardInterrupt
        return real_save(self, path, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(GraphDocEncoder, "save_pretrained", killed_on_the_third_save)
        with pytest.raises(KeyboardInterrupt):
            finetune_ranking(*args, tmp_path / "killed", config=RankingConfig(**BASE), model=str(tiny_bert))
    finetune_ranking(*args, tmp_path / "killed", config=RankingConfig(**BASE), model=str(tiny_bert), resume=True)
    whole = GraphDocEncoder.from_pretrained(tmp_path / "whole" / "model").head_state_dict()
    resumed = GraphDocEncoder.from_pretrained(tmp_path / "killed" / "model").head_state_dict()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)


def test_the_saved_model_embeds_with_the_passage_cap_training_used(tiny_bert, tmp_path):
    files = ranking_files(tmp_path)
    finetune_ranking(files["corpus"], files["queries"], files["qrels"], tmp_path / "run",
                     config=RankingConfig(**{**BASE, "epochs": 1, "max_passages": 2}), model=str(tiny_bert))
    model = GraphDocEncoder.from_pretrained(tmp_path / "run" / "model")
    assert model.config.chunker.max_passages == 2
    assert model.search_defaults["dense"] == {"passage_weight": 0.9}


def test_a_flat_firstp_model_is_searched_by_its_document_vector_as_trained(tiny_bert, tmp_path):
    files = ranking_files(tmp_path)
    flat = FlatModelConfig(graph=FlatConfig(document="first"))
    finetune_ranking(files["corpus"], files["queries"], files["qrels"], tmp_path / "run", model=str(tiny_bert),
                     config=RankingConfig(**{**BASE, "epochs": 1, "frozen_encoder": False}), model_config=flat,
                     backbone="flat")
    from graphdoc.backbones import load_model

    # its training graphs were single nodes: (1 - w) d + w max(d) = d whatever w; its index keeps passages
    assert load_model(str(tmp_path / "run" / "model")).search_defaults["dense"] == {"passage_weight": 0.0}


def test_cross_validation_refuses_a_corpus_id_no_run_can_hold_before_training(tiny_bert, tmp_path):
    files = ranking_files(tmp_path)
    records = files["corpus"].read_text(encoding="utf-8").splitlines()
    records[-1] = records[-1].replace('"_id": "', '"_id": "with space ', 1)
    corpus = tmp_path / "spaced.jsonl"
    corpus.write_text("\n".join(records) + "\n", encoding="utf-8")
    with pytest.raises(GraphDocError, match=rf"^{corpus}: 1 document id\(s\) cannot go into the TREC runs "
                                            r"cross-validation writes \(empty or with whitespace\), e\.g\. 'with space "):
        finetune_ranking(corpus, files["queries"], files["qrels"], tmp_path / "run", config=RankingConfig(**BASE),
                         model=str(tmp_path / "no-model-needed"), folds=2)
    assert not (tmp_path / "run").exists()


def test_a_bad_eval_measure_is_a_config_error():
    with pytest.raises(GraphDocError, match=r"^ranking.eval_measure: unknown measure 'nDGC@10'; use ir_measures names"):
        RankingConfig(eval_measure="nDGC@10")
    assert RankingConfig(eval_measure="RR@10").eval_measure == "RR@10"


def test_a_resume_with_a_precision_of_other_numerics_is_refused(tiny_bert, tmp_path, monkeypatch):
    """Pretraining refused it already; fine-tuning resumed, its epochs then training on other cached vectors."""
    from _finetune_helpers import ranking_interrupted_in_epoch

    monkeypatch.setattr("graphdoc.device.cpu_supports_bf16", lambda: True)  # bf16 computes other numbers here
    files = ranking_files(tmp_path)
    args = (files["corpus"], files["queries"], files["qrels"], tmp_path / "run")
    config = RankingConfig(**{**BASE, "epochs": 2})
    ranking_interrupted_in_epoch(monkeypatch, 1, lambda: finetune_ranking(*args, config=config, model=str(tiny_bert),
                                                                          precision="fp32"))
    with pytest.raises(GraphDocError, match=r"^cannot resume with precision bf16 \(--precision or model\."
                                            r"passage_encoder\.precision\): the run was started with fp32, which "
                                            r"computes other numbers$"):
        finetune_ranking(*args, config=config, model=str(tiny_bert), precision="bf16", resume=True)
    # fp16 on a CPU runs in fp32: the same numbers, so it resumes
    assert finetune_ranking(*args, config=config, model=str(tiny_bert), precision="fp16", resume=True)["epochs"] == 2


def test_the_training_retrievers_bm25_ranks_ties_by_document_id():
    """Hard negatives and dev scores come from the training-time ranker: it ranked BM25 ties by row."""
    from graphdoc.finetune.retriever import CorpusRanker
    from graphdoc.retrieval.bm25 import BM25Index

    texts = ["alpha beta gamma", "alpha beta gamma", "something else"]
    ranker = CorpusRanker(None, ["zz", "aa", "mm"], BM25Index.build(texts))
    run = ranker.bm25_run(["q"], ["alpha"], depth=1)
    assert list(run["q"]) == ["aa"]
    assert list(ranker.bm25_run(["q"], ["alpha"], depth=5)["q"]) == ["aa", "zz"]  # "mm" does not match
