"""The ranking fine-tuning loop: pairs -> batches with hard negatives -> contrastive loss -> AdamW.

Output folder layout::

    OUTPUT/finetune_config.json     how the run started: settings, inputs, start model (graphdoc.finetune.record;
                                    written by finetune_ranking)
    OUTPUT/negatives/bm25.json      BM25's top ``negative_depth`` per training query, with a digest of the data
                                    and settings it was ranked for (another run's lists are ranked again)
    OUTPUT/negatives/model.json     the model's own top ``negative_depth``, ranked with the half-way weights
                                    (``negative_pool: judged``: bm25-judged.json, model-judged.json)
    OUTPUT/halfway/                 the half-way checkpoint's model
    OUTPUT/checkpoints/step-N/      the latest epoch checkpoint (resume)
    OUTPUT/model/                   the best model on the dev queries (the last one without dev queries)
    OUTPUT/finetune.json            history (loss, dev scores per epoch), best epoch, wall time, peak memory
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from graphdoc.finetune import ranking as rk
from graphdoc.finetune.config import RankingConfig
from graphdoc.finetune.data import RankingData
from graphdoc.finetune.loop import (
    HALFWAY_DIR,
    OPERATIONAL,
    EpochLoop,
    data_fingerprint,
    seed_everything,
)
from graphdoc.retrieval.evaluation import evaluate
from graphdoc.retrieval.fusion import FusionConfig

logger = logging.getLogger(__name__)

Qrels = Mapping[str, Mapping[str, int]]


class RankingTrainer:
    """One ranking fine-tuning run of ``model`` on ``qrels`` (training queries) into ``output``."""

    def __init__(self, model, config: RankingConfig, data: RankingData, qrels: Qrels, output: Path,
                 dev_qrels: Qrels | None = None, show_progress_bar: bool | None = None) -> None:
        self.model, self.cfg, self.data, self.output = model, config, data, Path(output)
        data.set_model(model)
        known = set(data.doc_ids)
        self.pairs = [p for p in rk.training_pairs(qrels, known) if p.query_id in data.queries]
        self.positives = {q: {d for d, r in docs.items() if r > 0} for q, docs in qrels.items()}
        self.pool = (None if config.negative_pool == "corpus"
                     else {d for docs in self.positives.values() for d in docs} & known)
        self.dev_qrels = {q: d for q, d in (dev_qrels or {}).items() if q in data.queries} or None
        self.steps_per_epoch = math.ceil(len(self.pairs) / config.batch_size)
        seed_everything(config.seed)
        used = sorted({p.query_id for p in self.pairs} | set(self.dev_qrels or {}))
        fingerprint = data_fingerprint({"pairs": [[p.query_id, p.doc_id] for p in self.pairs],
                                        "queries": {q: data.query_texts[q] for q in used},
                                        "dev": {q: dict(d) for q, d in (self.dev_qrels or {}).items()},
                                        "documents": list(data.doc_ids)})
        self.loop = EpochLoop(model, config, self.output, config.epochs * self.steps_per_epoch, data=fingerprint,
                              show_progress_bar=show_progress_bar)
        # an index of the saved model embeds and scores as training and dev selection did: the documents cut to
        # the same number of passages, and the passage weight the training graphs had (a flat FirstP document is
        # a single node: its vector alone; its index keeps passage vectors, for explaining hits)
        model.config.chunker.max_passages = config.max_passages
        single_node = getattr(model.config.graph, "document", None) == "first"
        model.search_defaults = {"dense": {"passage_weight": 0.0 if single_node else config.passage_weight},
                                 "fusion": self.fusion().to_dict(),
                                 "metric": "ip" if config.similarity == "dot" else "cosine"}
        self.negatives: dict[str, dict[str, list[str]]] = {}
        self.resumed = False  # continued after a checkpoint (lists kept without a digest are then its own)

    def fusion(self) -> FusionConfig:
        return FusionConfig(alpha=self.cfg.fusion_alpha, normalization=self.cfg.fusion_normalization)

    # ------------------------------------------------------------------ negatives
    def _ranking_lists(self, source: str) -> dict[str, list[str]]:
        """Top ``negative_depth`` per training query from ``source``, in the negative pool (computed once, kept
        in the output)."""
        name = source if self.pool is None else f"{source}-{self.cfg.negative_pool}"
        path = self.output / "negatives" / f"{name}.json"
        qids = sorted({p.query_id for p in self.pairs})
        digest = self._lists_digest(source, qids)
        kept = rk.read_ranking_lists(path, digest, legacy_ok=self.resumed)
        if kept is not None:
            return kept
        texts = [self.data.query_texts[q] for q in qids]
        ranker = self.data.ranker(self.cfg.passage_weight, self.cfg.similarity)
        depth = rk.search_depth(self.cfg.negative_depth, len(self.data.doc_ids),
                                None if self.pool is None else len(self.pool))
        if source == rk.BM25:
            run = ranker.bm25_run(qids, texts, depth)
        else:
            self.model.save_pretrained(self.output / HALFWAY_DIR)
            vectors = self.data.queries.embed_all(qids).document_embeddings
            run = ranker.components(qids, texts, vectors, depth).dense
        lists = {q: [d for d in run.get(q, {}) if self.pool is None or d in self.pool][:self.cfg.negative_depth]
                 for q in qids}
        rk.write_ranking_lists(path, lists, digest)
        return lists

    def _lists_digest(self, source: str, qids: list[str]) -> str:
        """What the lists of ``source`` are made from: kept lists are reused only when it is the same (a resume),
        never those an earlier attempt in the same folder left over other data or settings."""
        what = {"source": source, "queries": {q: self.data.query_texts[q] for q in qids},
                "corpus": self.data.corpus_digest, "depth": self.cfg.negative_depth,
                "pool": None if self.pool is None else sorted(self.pool)}
        if source == rk.MODEL:  # ranked with the half-way weights: their step, not the step a resumed run is at
            step = rk.switch_epoch(self.cfg.epochs) * self.steps_per_epoch
            what.update(run=self.loop.data, step=step,
                        config={k: v for k, v in dataclasses.asdict(self.cfg).items() if k not in OPERATIONAL})
        return data_fingerprint(what)

    # ------------------------------------------------------------------ loop
    def train(self, resume: bool = False) -> dict:
        """Run the remaining epochs; keep the best dev model in ``OUTPUT/model``; return the summary."""
        self.loop.start_or_resume(resume)
        self.resumed = self.loop.state["step"] > 0
        try:
            while self.loop.state["epoch"] < self.cfg.epochs:
                epoch = self.loop.state["epoch"]
                source = rk.negative_source(epoch, self.cfg.epochs)
                if self.cfg.hard_negatives and source not in self.negatives:
                    self.negatives[source] = self._ranking_lists(source)
                loss = self._epoch(epoch, source)
                score = self.evaluate_dev() if self.dev_qrels else None
                logger.info("epoch %d/%d: loss %.4f, negatives %s, dev %s", epoch + 1, self.cfg.epochs, loss, source,
                            "-" if score is None else f"{score:.4f}")
                if self.loop.keeps(score):
                    self.model.save_pretrained(self.output / "model")
                self.loop.end_epoch({"loss": loss, "negatives": source, "dev": score}, score)
        finally:
            self.loop.close_bar()
        return self.loop.summary({"pairs": len(self.pairs), "model_dir": str(self.output / "model")})

    def _epoch(self, epoch: int, source: str) -> float:
        self.model.train()
        if self.data.documents.cache is not None:
            self.model.passage_encoder.eval()
        order = np.random.default_rng([self.cfg.seed, epoch]).permutation(len(self.pairs))
        losses = []
        for b in range(self.steps_per_epoch):
            batch = [self.pairs[i] for i in order[b * self.cfg.batch_size:(b + 1) * self.cfg.batch_size]]
            rng = np.random.default_rng([self.cfg.seed, epoch, b])
            losses.append(self.loop.step(self._loss(batch, source, rng)))
        return float(np.mean(losses))

    def _loss(self, batch: list[rk.Pair], source: str, rng: np.random.Generator) -> torch.Tensor:
        lists = self.negatives.get(source, {})
        negatives = [rk.sample_negatives(lists.get(p.query_id, []), self.positives.get(p.query_id, set()),
                                         self.cfg.hard_negatives, rng, self.cfg.negative_depth) for p in batch]
        doc_ids, targets, exclude = rk.batch_documents(batch, negatives, self.positives)
        queries = self.data.queries.embed([p.query_id for p in batch]).document_embeddings  # [B, d]
        documents = self.data.documents.embed(doc_ids)  # M graphs
        return rk.ranking_loss(queries, documents, targets, exclude, self.cfg.passage_weight,
                               self.cfg.similarity, self.cfg.temperature)

    # ------------------------------------------------------------------ evaluation
    def evaluate_dev(self) -> float:
        """``eval_measure`` of ``eval_mode`` (dense or hybrid) on the dev queries with the current weights."""
        qids = sorted(self.dev_qrels)
        return evaluate(self.rank(qids)[self.cfg.eval_mode], self.dev_qrels, [self.cfg.eval_measure])[
            str(self.cfg.eval_measure)]

    def rank(self, qids: list[str], k: int = 100) -> dict[str, dict]:
        """``{"dense": run, "hybrid": run, "components": ComponentRuns}`` for ``qids`` (current weights)."""
        ranker = self.data.ranker(self.cfg.passage_weight, self.cfg.similarity)
        vectors = self.data.queries.embed_all(qids).document_embeddings
        parts = ranker.components(qids, [self.data.query_texts[q] for q in qids], vectors, max(k, 100))
        dense = {q: dict(list(r.items())[:k]) for q, r in parts.dense.items()}
        return {"dense": dense, "hybrid": parts.hybrid(self.fusion(), k), "components": parts}
