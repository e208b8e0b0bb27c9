"""Configuration of contrastive pretraining: the model to build and the training hyperparameters.

A YAML file in ``configs/pretrain-*.yaml`` has two sections that map one to one onto
:class:`PretrainSetup`: ``model`` (a :class:`~graphdoc.config.ModelConfig`: chunker, passage_encoder,
graph) and ``pretrain`` (a :class:`PretrainConfig`). Unknown keys are an error that lists the valid ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from graphdoc.config import ModelConfig, _check_choice, coerce_numbers, from_dict, load_config_file
from graphdoc.errors import GraphDocError

OBJECTIVES = ("half", "ict")
SIMILARITIES = ("dot", "cosine")


@dataclass
class PretrainConfig:
    """Hyperparameters of contrastive pretraining.

    Args:
        objective: ``half`` (two random halves of a document are positives) or ``ict`` (one passage
            against the rest of its document).
        similarity: ``dot`` or ``cosine`` between sub-document vectors, divided by ``temperature``.
        lr, warmup_ratio, weight_decay: AdamW learning rate, linear warm-up over this fraction of the
            steps then linear decay to zero, decoupled weight decay (not on biases and norms).
        adam_epsilon: AdamW's epsilon (a larger one damps the steps of near-zero gradients).
        batch_size: documents per optimiser step, over all processes (``2 * batch_size``
            sub-documents: every one is a negative for every other pair).
        epochs: passes over the corpus; ``max_steps`` stops earlier and, when set, is the length of the
            learning-rate schedule (a streamed corpus of unknown size needs it).
        frozen_encoder: train the graph layers only, over passage vectors cached on disk.
        gradient_checkpointing: recompute the passage encoder's activations in backward (full training).
        grad_cache_chunk: passages embedded per sub-batch with gradient caching; a batch whose passages
            fit in one chunk takes plain backprop.
        max_passages: passages kept per document (its first ones), as in the paper.
        ict_first_passage: in ``ict``, how often the single passage is the first one (else a random one).
        shuffle_buffer: documents held to shuffle the stream (0: corpus order), reshuffled every epoch.
        max_grad_norm: gradient clipping (``None``: none).
        checkpoint_every, keep_checkpoints: save a resumable checkpoint every N steps; keep the last K.
        log_every: steps between rows of the CSV log (and TensorBoard when ``tensorboard``).
        cache_dir: the passage vector cache of the frozen mode (default ``OUTPUT/passage_cache``).
        seed: seeds the weights' dropout, the shuffle and the positive construction.
    """

    objective: str = "half"
    similarity: str = "cosine"
    temperature: float = 0.05
    lr: float = 5e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    adam_epsilon: float = 1e-8
    batch_size: int = 64
    epochs: int = 1
    max_steps: int | None = None
    frozen_encoder: bool = False
    gradient_checkpointing: bool = True
    grad_cache_chunk: int = 1024
    max_passages: int = 50
    ict_first_passage: float = 0.5
    shuffle_buffer: int = 10000
    max_grad_norm: float | None = 1.0
    checkpoint_every: int = 1000
    keep_checkpoints: int = 2
    log_every: int = 10
    tensorboard: bool = False
    cache_dir: str | None = None
    seed: int = 42

    def __post_init__(self) -> None:
        coerce_numbers(self, "pretrain")
        _check_choice("pretrain.objective", self.objective, OBJECTIVES)
        _check_choice("pretrain.similarity", self.similarity, SIMILARITIES)
        positive = {"temperature": self.temperature, "lr": self.lr, "batch_size": self.batch_size,
                    "epochs": self.epochs, "grad_cache_chunk": self.grad_cache_chunk,
                    "checkpoint_every": self.checkpoint_every, "log_every": self.log_every,
                    "keep_checkpoints": self.keep_checkpoints}
        for name, value in positive.items():
            if not value > 0:
                raise GraphDocError(f"pretrain.{name} must be positive; got {value!r}")
        if self.max_passages < 2:
            raise GraphDocError(f"pretrain.max_passages must be at least 2; got {self.max_passages}")
        if self.max_steps is not None and self.max_steps < 1:
            raise GraphDocError(f"pretrain.max_steps must be at least 1 or null; got {self.max_steps}")
        for name in ("warmup_ratio", "ict_first_passage"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise GraphDocError(f"pretrain.{name} must be in [0, 1]; got {getattr(self, name)!r}")
        if self.weight_decay < 0 or self.shuffle_buffer < 0:
            raise GraphDocError("pretrain.weight_decay and pretrain.shuffle_buffer must be >= 0")


@dataclass
class PretrainSetup:
    """A pretraining run: the model to build (``model``) and how to train it (``pretrain``)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PretrainSetup":
        return from_dict(cls, data)

    def with_overrides(self, **changes: Any) -> "PretrainSetup":
        """A copy with some ``pretrain`` settings changed (``None`` values are ignored), checked again."""
        changes = {k: v for k, v in changes.items() if v is not None}
        return dataclasses.replace(self, pretrain=dataclasses.replace(self.pretrain, **changes))


def load_setup(path: str | Path | None) -> PretrainSetup:
    """Read a pretraining YAML/JSON file (``None``: all defaults)."""
    return PretrainSetup() if path is None else load_config_file(path, PretrainSetup)
