"""Configuration of contrastive pretraining: the model to build and the training hyperparameters.

A YAML file in ``graphdoc/configs/pretrain-*.yaml`` or ``graphdoc/configs/docsplit-*.yaml`` maps one to one onto
:class:`PretrainSetup`: ``backbone`` (``graph`` or ``flat``), ``model`` (that backbone's configuration:
a :class:`~graphdoc.config.ModelConfig` or a :class:`~graphdoc.flat_config.FlatModelConfig`) and
``pretrain`` (a :class:`PretrainConfig`). Unknown keys are an error that lists the valid ones.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphdoc.backbones import BACKBONES, FLAT, GRAPH, BackboneSetup
from graphdoc.config import MAX_SEED, ModelConfig, _check_choice, check_types
from graphdoc.errors import GraphDocError
from graphdoc.flat_config import FlatModelConfig

#: objective -> the backbones it trains
OBJECTIVE_BACKBONES = {"half": (GRAPH,), "ict": (GRAPH,), "docsplit": (GRAPH, FLAT), "simcse": (FLAT,),
                       "crop": (FLAT,)}
OBJECTIVES = tuple(OBJECTIVE_BACKBONES)
SIMILARITIES = ("dot", "cosine")
#: the masked-language-model weight of docsplit (DocSplit / SimDE); the other objectives default to none
DOCSPLIT_MLM_WEIGHT = 0.1


@dataclass
class PretrainConfig:
    """Hyperparameters of contrastive pretraining.

    Args:
        objective: graph models: ``half`` (two random halves of a document's passages are positives),
            ``ict`` (one passage against the rest of its document); flat models: ``simcse`` (a text
            against itself, the views differing by dropout), ``crop`` (two random word spans,
            Contriever); both: ``docsplit`` (each sentence goes at random to one of two halves, order
            kept; a flat model embeds each half as one text, a graph model chunks each into a graph).
        mlm_weight: weight of the masked-language-model loss added to the contrastive one (flat models;
            ``None``: 0.1 for ``docsplit``, else 0 = off). Its language-model head is loaded from the
            encoder's checkpoint (freshly initialised if the checkpoint has none).
        mlm_probability: share of tokens masked (BERT's 80/10/10 replacement).
        crop_min_ratio, crop_max_ratio: a ``crop`` view keeps ``r`` of the document's words,
            ``r ~ U(min, max)``.
        similarity: ``dot`` or ``cosine`` between sub-document vectors, divided by ``temperature``.
        projection_head: compare the vectors through a two-layer MLP head of this output size that is
            trained with the model and not saved with it (SimCLR; ``None``: compare the vectors themselves).
        lr, warmup_ratio, weight_decay: AdamW learning rate, linear warm-up over this fraction of the
            steps then linear decay to zero, decoupled weight decay (not on biases and norms).
        adam_epsilon: AdamW's epsilon (a larger one damps the steps of near-zero gradients).
        batch_size: documents per optimiser step, over all processes (``2 * batch_size``
            sub-documents: every one is a negative for every other pair).
        epochs: passes over the corpus; ``max_steps`` stops earlier. The learning-rate schedule spans the
            run: the fewer of ``max_steps`` and the epochs' steps (a local corpus is counted first), or
            ``max_steps`` over a streamed corpus of unknown size (which needs it).
        max_seconds: also stop once the training loop has run this long (a time budget, as in benchmarks
            that give every model the same time); checked after each step, the model saved as at the end.
            The schedule still spans ``max_steps``/``epochs``. May change on resume.
        frozen_encoder: train the graph layers only, over passage vectors cached on disk.
        gradient_checkpointing: recompute the passage encoder's activations in backward (full training).
        grad_cache_chunk: passages (graph) or texts (flat) embedded per sub-batch with gradient caching;
            a batch that fits in one chunk takes plain backprop.
        max_passages: passages kept per document (its first ones), as in the paper; graph ``docsplit``
            splits the sentences of these passages, and keeps as many passages per half.
        ict_first_passage: in ``ict``, how often the single passage is the first one (else a random one).
        shuffle_buffer: documents held to shuffle the stream (0: corpus order), reshuffled every epoch.
        prepared_cache_mb: memory for prepared (chunked and tokenized) documents kept between epochs, so
            later epochs skip that work (0: prepare every document every epoch).
        max_grad_norm: clip the gradients' global norm to this (> 0; ``None``: no clipping).
        checkpoint_every, keep_checkpoints: save a resumable checkpoint every N steps; keep the last K.
        log_every: steps between rows of the CSV log (and TensorBoard when ``tensorboard``).
        cache_dir: the passage vector cache of the frozen mode (default ``OUTPUT/passage_cache``).
        seed: seeds the weights' dropout, the shuffle and the positive construction.
    """

    objective: str = "half"
    mlm_weight: float | None = None
    mlm_probability: float = 0.15
    crop_min_ratio: float = 0.1
    crop_max_ratio: float = 0.5
    similarity: str = "cosine"
    temperature: float = 0.05
    projection_head: int | None = None
    lr: float = 5e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    adam_epsilon: float = 1e-8
    batch_size: int = 64
    epochs: int = 1
    max_steps: int | None = None
    max_seconds: float | None = None
    frozen_encoder: bool = False
    gradient_checkpointing: bool = True
    grad_cache_chunk: int = 1024
    max_passages: int = 50
    ict_first_passage: float = 0.5
    shuffle_buffer: int = 10000
    prepared_cache_mb: float = 2048
    max_grad_norm: float | None = 1.0
    checkpoint_every: int = 1000
    keep_checkpoints: int = 2
    log_every: int = 10
    tensorboard: bool = False
    cache_dir: str | None = None
    seed: int = 42

    def __post_init__(self) -> None:
        check_types(self, "pretrain")
        _check_choice("pretrain.objective", self.objective, OBJECTIVES)
        _check_choice("pretrain.similarity", self.similarity, SIMILARITIES)
        for f in dataclasses.fields(self):  # inf or nan in any number is an error, null aside
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise GraphDocError(f"pretrain.{f.name} must be a finite number; got {_show(value)}")
        self._check_ranges()
        if not 0.0 < self.mlm_probability < 1.0:
            raise GraphDocError(f"pretrain.mlm_probability must be in (0, 1); got {self.mlm_probability!r}")
        if not 0.0 < self.crop_min_ratio <= self.crop_max_ratio <= 1.0:
            raise GraphDocError("pretrain.crop_min_ratio and pretrain.crop_max_ratio must satisfy "
                                f"0 < min <= max <= 1; got {self.crop_min_ratio!r}, {self.crop_max_ratio!r}")

    def _check_ranges(self) -> None:
        """One line naming the first setting out of its range, and its value."""
        for name in ("temperature", "lr", "adam_epsilon", "grad_cache_chunk", "checkpoint_every", "log_every",
                     "keep_checkpoints", "epochs"):
            _check_bound(name, getattr(self, name), "positive", lambda v: v > 0)
        for name in ("weight_decay", "shuffle_buffer", "prepared_cache_mb"):
            _check_bound(name, getattr(self, name), ">= 0", lambda v: v >= 0)
        for name in ("warmup_ratio", "ict_first_passage"):
            _check_bound(name, getattr(self, name), "in [0, 1]", lambda v: 0 <= v <= 1)
        # every objective is contrastive: a document's negatives are the batch's other documents
        _check_bound("batch_size", self.batch_size, "at least 2 (the other documents of a batch are the "
                     "negatives; batch_size counts over all processes)", lambda v: v >= 2)
        _check_bound("max_passages", self.max_passages, "at least 2", lambda v: v >= 2)
        _check_bound("seed", self.seed, f"in [0, {MAX_SEED}]", lambda v: 0 <= v <= MAX_SEED)
        _check_bound("max_steps", self.max_steps, "at least 1 or null", lambda v: v >= 1)
        _check_bound("projection_head", self.projection_head, "at least 1 or null", lambda v: v >= 1)
        _check_bound("max_seconds", self.max_seconds, "positive or null", lambda v: v > 0)
        # null turns clipping off; a norm of 0 would zero every gradient, a negative one flips them
        _check_bound("max_grad_norm", self.max_grad_norm, "> 0 or null", lambda v: v > 0)
        _check_bound("mlm_weight", self.mlm_weight, ">= 0 (0: off) or null", lambda v: v >= 0)

    def effective_mlm_weight(self, backbone: str) -> float:
        """The MLM weight a run uses: ``mlm_weight``, or the objective's default when it is ``None``."""
        if self.mlm_weight is not None:
            return self.mlm_weight
        return DOCSPLIT_MLM_WEIGHT if self.objective == "docsplit" and backbone == FLAT else 0.0

    def check_backbone(self, backbone: str) -> None:
        """One clear error when these settings cannot train a model of ``backbone``."""
        _check_choice("backbone", backbone, tuple(BACKBONES))
        allowed = OBJECTIVE_BACKBONES[self.objective]
        if backbone not in allowed:
            valid = [o for o, b in OBJECTIVE_BACKBONES.items() if backbone in b]
            raise GraphDocError(f"pretrain.objective {self.objective!r} needs a {allowed[0]} model (--backbone "
                                f"{allowed[0]}); a {backbone} model trains with {', '.join(valid)}")
        if backbone == FLAT and self.frozen_encoder:
            raise GraphDocError("a flat model is its encoder: with pretrain.frozen_encoder there is nothing to "
                                "train (use --no-frozen-encoder)")
        if backbone == GRAPH and self.effective_mlm_weight(backbone) > 0:
            raise GraphDocError("pretrain.mlm_weight needs a flat model (a graph model embeds passages, not "
                                "texts, and its frozen encoder has nothing to learn); set it to 0")


@dataclass
class PretrainSetup(BackboneSetup):
    """A pretraining run: the model to build (``model``, the configuration of ``backbone``: graph or flat) and
    how to train it (``pretrain``)."""

    model: ModelConfig | FlatModelConfig = field(default_factory=ModelConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    backbone: str = GRAPH

    def with_overrides(self, **changes: Any) -> "PretrainSetup":
        """A copy with some ``pretrain`` settings changed (``None`` values are ignored), checked again."""
        changes = {k: v for k, v in changes.items() if v is not None}
        return dataclasses.replace(self, pretrain=dataclasses.replace(self.pretrain, **changes))


def _check_bound(name: str, value: float | None, wanted: str, ok) -> None:
    """``pretrain.NAME must be WANTED; got VALUE`` unless ``value`` is ``None`` or ``ok(value)``."""
    if value is not None and not ok(value):
        raise GraphDocError(f"pretrain.{name} must be {wanted}; got {_show(value)}")


def _show(value: float) -> str:
    """A number as the user wrote it: ``-1``, not the ``-1.0`` it became as a float setting."""
    return f"{value:.15g}" if isinstance(value, float) else str(value)


def load_setup(path: str | Path | None, backbone: str | None = None) -> PretrainSetup:
    """Read a pretraining YAML/JSON file (``None``: all defaults); see :meth:`BackboneSetup.read`."""
    return PretrainSetup.read(path, backbone)
