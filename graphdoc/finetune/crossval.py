"""k-fold cross-validation over queries (the paper's Robust04 protocol).

The judged queries are split into ``k`` folds (:func:`graphdoc.retrieval.tuning.assign_folds`). For each
fold a fresh copy of the starting model is fine-tuned on the other ``k - 1`` folds, less a share
(``fold_dev_fraction``) of them held out to pick the best epoch and the hybrid fusion weight alpha (alpha
chosen on the very queries a model was trained on would favour the dense side); then the held-out fold
is ranked. The runs of the
``k`` held-out folds together cover every query exactly once, and no query is ranked by a model (or an
alpha) that saw it. Output: ``OUTPUT/fold-N/`` (each fold's run folder), ``OUTPUT/dense.trec``,
``OUTPUT/hybrid.trec`` and ``OUTPUT/crossval.json`` (with ``eval_measure`` of both runs over all the queries:
each query scored by a model that never saw it).
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from graphdoc.fileio import atomic_write
from graphdoc.finetune.config import RankingConfig
from graphdoc.finetune.data import RankingData
from graphdoc.finetune.loop import run_kind
from graphdoc.finetune.ranking_trainer import RankingTrainer
from graphdoc.finetune.retriever import ComponentRuns
from graphdoc.retrieval.evaluation import evaluate, evaluate_per_query
from graphdoc.retrieval.fusion import FusionConfig
from graphdoc.retrieval.trec import write_run
from graphdoc.retrieval.tuning import DEFAULT_ALPHAS, assign_folds, best_alpha
from graphdoc.serialization import save_search_defaults

Qrels = Mapping[str, Mapping[str, int]]
logger = logging.getLogger(__name__)


def choose_alpha(parts: ComponentRuns, qrels: Qrels, normalization: str, measure: str, prefer: float,
                 alphas: Sequence[float] = DEFAULT_ALPHAS) -> tuple[float, float]:
    """The alpha with the best mean ``measure`` over ``qrels``' queries, and that mean; of alphas that tie, the
    one nearest ``prefer`` (the configured ``fusion_alpha``), as ``graphdoc tune-fusion`` chooses, not 0.0
    (BM25 alone) for coming first."""
    per_query = []
    for alpha in alphas:
        run = parts.hybrid(FusionConfig(alpha=alpha, normalization=normalization))
        per_query.append({q: v[measure] for q, v in evaluate_per_query(run, qrels, [measure]).items()})
    best, mean = best_alpha(list(alphas), per_query, sorted(per_query[0]), prefer)
    return float(alphas[best]), mean


def split_off(qrels: Qrels, fraction: float, seed: int) -> tuple[dict, dict]:
    """``(rest, held out)``: ``round(fraction * n)`` queries, at least one when ``fraction`` > 0, drawn with
    ``seed`` held out (none when that would leave nothing to train on). At least one: with no held-out query,
    the best epoch and alpha would be picked on the training queries, which the model ranks too well."""
    qids = sorted(qrels)
    n = max(round(fraction * len(qids)), 1 if fraction > 0 else 0)
    held = set(np.random.default_rng(seed).permutation(qids)[:n].tolist()) if 0 < n < len(qids) else set()
    return {q: qrels[q] for q in qids if q not in held}, {q: qrels[q] for q in qids if q in held}


def cross_validate(model, config: RankingConfig, data: RankingData, qrels: Qrels, output: Path,
                   folds: int = 5, resume: bool = False, k: int = 100, show_progress_bar: bool | None = None) -> dict:
    """Fine-tune ``folds`` times and write one run over all judged queries; returns the summary."""
    output = Path(output)
    qids = sorted(q for q, docs in qrels.items() if any(r > 0 for r in docs.values()) and q in data.queries)
    groups = assign_folds(qids, folds, config.fold_seed)
    dense_run, hybrid_run, fold_info = {}, {}, []
    for f, test in enumerate(groups):
        train_q = {q: qrels[q] for g, group in enumerate(groups) if g != f for q in group}
        fit, dev = split_off(train_q, config.fold_dev_fraction, config.fold_seed + f)
        logger.info("fold %d/%d: %d training, %d dev, %d test queries", f + 1, folds, len(fit), len(dev), len(test))
        trainer = RankingTrainer(copy.deepcopy(model), config, data, fit, output / f"fold-{f}", dev or None,
                                 show_progress_bar)
        trainer.loop.run = run_kind("ranking", folds=folds)  # kept in the fold's checkpoints, checked on resume
        summary = trainer.train(resume)
        if dev:  # the best epoch's weights, as saved
            best = type(model).from_pretrained(output / f"fold-{f}" / "model",
                                               device=next(trainer.model.parameters()).device)
            trainer.model.load_state_dict(best.state_dict())
        name = str(config.eval_measure)
        alpha, train_score = choose_alpha(trainer.rank(sorted(dev or fit), k)["components"], dev or fit,
                                          config.fusion_normalization, name, config.fusion_alpha)
        # the fold's model is searched with the alpha its test queries were scored with
        trainer.model.search_defaults["fusion"]["alpha"] = alpha
        save_search_defaults(output / f"fold-{f}" / "model", trainer.model.search_defaults)
        test_parts: ComponentRuns = trainer.rank(test, k)["components"]
        dense_run.update({q: dict(list(r.items())[:k]) for q, r in test_parts.dense.items()})
        hybrid_run.update(test_parts.hybrid(FusionConfig(alpha=alpha, normalization=config.fusion_normalization), k))
        fold_info.append({"fold": f, "test_queries": test, "train_queries": sorted(fit), "dev_queries": sorted(dev),
                          "alpha": alpha, "alpha_score": train_score, "wall_s": summary["wall_s"]})
    write_run(dense_run, output / "dense.trec", tag="graphdoc-finetune-dense")
    write_run(hybrid_run, output / "hybrid.trec", tag="graphdoc-finetune-hybrid")
    judged = {q: qrels[q] for q in qids}
    measure = str(config.eval_measure)
    scores = {name: evaluate(run, judged, [measure])[measure] for name, run in (("dense", dense_run),
                                                                              ("hybrid", hybrid_run))}
    result = {"folds": fold_info, "queries": len(qids), "measure": measure, "scores": scores,
              "dense_run": str(output / "dense.trec"), "hybrid_run": str(output / "hybrid.trec")}
    with atomic_write(output / "crossval.json", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    return dict(result, dense=dense_run, hybrid=hybrid_run)
