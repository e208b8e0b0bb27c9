"""Configuration of supervised fine-tuning: one dataclass per task, YAML files in ``graphdoc/configs/finetune-*.yaml``.

A YAML file has up to four sections that map one to one onto :class:`FinetuneSetup`: ``backbone``
(``graph`` or ``flat``), ``model`` (that backbone's configuration, a :class:`~graphdoc.config.ModelConfig`
or :class:`~graphdoc.flat_config.FlatModelConfig`, used when the model is built on a plain encoder),
``ranking`` (:class:`RankingConfig`) and ``classification`` (:class:`ClassificationConfig`). Unknown keys
are an error.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphdoc.backbones import GRAPH, BackboneSetup
from graphdoc.config import MAX_SEED, NEGATIVE_POOLS, ModelConfig, _check_choice, check_types
from graphdoc.errors import GraphDocError
from graphdoc.flat_config import FlatModelConfig

SIMILARITIES = ("dot", "cosine")
EVAL_MODES = ("dense", "hybrid")
CLASSIFICATION_OBJECTIVES = ("cross_entropy", "supcon")


@dataclass
class TrainingConfig:
    """Settings shared by both tasks.

    Args:
        lr, weight_decay, warmup_ratio: AdamW and its linear warm-up / linear decay schedule.
        epochs, batch_size: passes over the training examples; examples per optimiser step.
        frozen_encoder: train the graph layers (and head) only, over passage vectors cached on disk.
        max_passages: passages kept per document (its first ones).
        cache_dir: the passage vector cache of the frozen mode (default ``OUTPUT/passage_cache``).
        max_grad_norm: gradient clipping (``None``: none).
        seed: seeds the weights' dropout, the example order and the negative sampling.
    """

    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    epochs: int = 4
    batch_size: int = 32
    frozen_encoder: bool = True
    max_passages: int = 100
    cache_dir: str | None = None
    max_grad_norm: float | None = 1.0
    seed: int = 42
    section = ""  # the YAML section, naming the keys in errors (a class attribute, not a field)

    def _key(self, name: str) -> str:
        """A setting's name as errors give it: ``ranking.lr``, as the config file's section holds it."""
        return f"{self.section}.{name}" if self.section else name

    def __post_init__(self) -> None:
        check_types(self, self.section)
        for name in ("lr", "epochs", "batch_size", "max_passages"):
            if not 0 < getattr(self, name) < math.inf:
                raise GraphDocError(f"{self._key(name)} must be positive; got {getattr(self, name)!r}")
        if not 0.0 <= self.warmup_ratio <= 1.0:
            raise GraphDocError(f"{self._key('warmup_ratio')} must be in [0, 1]; got {self.warmup_ratio!r}")
        if not 0.0 <= self.weight_decay < math.inf:
            raise GraphDocError(f"{self._key('weight_decay')} must be >= 0; got {self.weight_decay!r}")
        if self.max_grad_norm is not None and not 0 < self.max_grad_norm < math.inf:
            raise GraphDocError(f"{self._key('max_grad_norm')} must be > 0 or null (no clipping); "
                                f"got {self.max_grad_norm!r}")
        _check_seed(self._key("seed"), self.seed)


def _check_seed(key: str, value: int) -> None:
    """A seed NumPy takes (``np.random.seed``: below 2**32), with room for the few-shot and fold seeds added to it."""
    if not 0 <= value <= MAX_SEED:
        raise GraphDocError(f"{key} must be in [0, {MAX_SEED}]; got {value!r}")


@dataclass
class RankingConfig(TrainingConfig):
    """Contrastive ranking: a query against its positive document, in-batch and hard negatives.

    Args:
        similarity, temperature: ``s(q, d) / temperature`` with cosine or dot product.
        passage_weight: training and dense scores are ``(1 - w) s(q, doc node) + w max_p s(q, passage node)``,
            as the index's dense search scores (0: the document node alone).
        hard_negatives: negatives sampled per query from the top ``negative_depth`` of BM25 (first half of
            the epochs) and then of the model's own ranking with the half-way checkpoint.
        negative_pool: where hard negatives come from: ``corpus`` (any document) or ``judged`` (only documents
            judged relevant to some training query). ``judged`` is for collections whose documents are split
            between training and test queries (QMSum's meetings): with ``corpus``, the test queries' documents
            are only ever negatives in training, and the model learns to push them down. The lists are then
            the pool's documents among a deeper search (``negative_depth * corpus / pool``, at most 10x).
        eval_mode, eval_measure, fusion_alpha, fusion_normalization: the dev score that picks the best
            checkpoint, and the hybrid fusion used for it and for hybrid runs.
        fold_seed, fold_dev_fraction: k-fold cross-validation over queries (``graphdoc finetune --folds``):
            the fold order's seed, and the share of each fold's training queries held out of training to
            pick the best epoch and the fusion alpha (a model scores its own training queries too well).
    """

    section = "ranking"
    similarity: str = "cosine"
    temperature: float = 0.05
    passage_weight: float = 0.9
    hard_negatives: int = 4
    negative_depth: int = 100
    negative_pool: str = "corpus"
    eval_mode: str = "dense"
    eval_measure: str = "nDCG@10"
    fusion_alpha: float = 0.6
    fusion_normalization: str = "zscore"
    fold_seed: int = 0
    fold_dev_fraction: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_choice(self._key("similarity"), self.similarity, SIMILARITIES)
        _check_choice(self._key("eval_mode"), self.eval_mode, EVAL_MODES)
        _check_choice(self._key("negative_pool"), self.negative_pool, NEGATIVE_POOLS)
        from graphdoc.retrieval.fusion import NORMALIZERS

        _check_choice(self._key("fusion_normalization"), self.fusion_normalization, tuple(NORMALIZERS))
        if not 0 < self.temperature < math.inf:
            raise GraphDocError(f"{self._key('temperature')} must be positive; got {self.temperature!r}")
        if self.negative_depth < 1:
            raise GraphDocError(f"{self._key('negative_depth')} must be at least 1; got {self.negative_depth!r}")
        if self.hard_negatives < 0:
            raise GraphDocError(f"{self._key('hard_negatives')} must be >= 0; got {self.hard_negatives!r}")
        _check_seed(self._key("fold_seed"), self.fold_seed)
        from graphdoc.retrieval.evaluation import check_computable, parse_measures

        try:  # before any training: the dev score of the first epoch needs it
            check_computable(parse_measures([self.eval_measure]))
        except GraphDocError as exc:
            raise GraphDocError(f"{self._key('eval_measure')}: {exc}") from None
        for name in ("passage_weight", "fusion_alpha", "fold_dev_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise GraphDocError(f"{self._key(name)} must be in [0, 1]; got {getattr(self, name)!r}")


@dataclass
class ClassificationConfig(TrainingConfig):
    """A linear head on the document node; cross-entropy, or supervised contrastive training.

    Args:
        dropout: dropout on the document vector before the head.
        head_lr: learning rate of the head (the graph layers take ``lr``).
        shots, repeats: few-shot mode: ``shots`` examples per class, ``repeats`` seeds (``shots`` null: off).
        objective: ``cross_entropy`` (the head's loss trains the model) or ``supcon``: every training
            document is split into two random passage halves, each its own graph, and the supervised
            contrastive loss over the batch's sub-documents (same label: positive) trains the model while
            the head learns from the detached document vectors (an online linear probe).
        similarity, temperature: ``s(a, b) / temperature`` of the ``supcon`` loss (cosine or dot product).
    """

    section = "classification"
    lr: float = 1e-4
    head_lr: float = 1e-2
    dropout: float = 0.1
    epochs: int = 10
    batch_size: int = 16
    max_passages: int = 16
    shots: int | None = None
    repeats: int = 10
    objective: str = "cross_entropy"
    similarity: str = "cosine"
    temperature: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_choice(self._key("objective"), self.objective, CLASSIFICATION_OBJECTIVES)
        _check_choice(self._key("similarity"), self.similarity, SIMILARITIES)
        if not 0 < self.temperature < math.inf:  # inf: every logit the same, a supcon loss with no gradient
            raise GraphDocError(f"{self._key('temperature')} must be positive and finite; got {self.temperature!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise GraphDocError(f"{self._key('dropout')} must be in [0, 1); got {self.dropout!r}")
        for name, value in (("shots", self.shots), ("repeats", self.repeats), ("head_lr", self.head_lr)):
            if value is not None and not 0 < value < math.inf:
                raise GraphDocError(f"{self._key(name)} must be positive{' or null' if name == 'shots' else ''}; "
                                    f"got {value!r}")


@dataclass
class FinetuneSetup(BackboneSetup):
    """A fine-tuning run: the model to build on a plain encoder (of ``backbone``), and each task's settings."""

    model: ModelConfig | FlatModelConfig = field(default_factory=ModelConfig)
    ranking: RankingConfig = field(default_factory=RankingConfig)
    classification: ClassificationConfig = field(default_factory=ClassificationConfig)
    backbone: str = GRAPH

    def with_overrides(self, task: str, **changes: Any) -> FinetuneSetup:
        """A copy with some settings of ``task`` (``ranking`` or ``classification``) changed; ``None`` ignored."""
        changes = {k: v for k, v in changes.items() if v is not None}
        return dataclasses.replace(self, **{task: dataclasses.replace(getattr(self, task), **changes)})


def load_finetune_setup(path: str | Path | None, backbone: str | None = None) -> FinetuneSetup:
    """Read a fine-tuning YAML/JSON file (``None``: all defaults); see :meth:`BackboneSetup.read`."""
    return FinetuneSetup.read(path, backbone)
