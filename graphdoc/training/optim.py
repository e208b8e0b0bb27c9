"""The optimiser and learning-rate schedule of pretraining: AdamW, linear warm-up then linear decay."""

from __future__ import annotations

import functools

import torch
from torch.optim.lr_scheduler import LambdaLR

from graphdoc.training.config import PretrainConfig


def linear_warmup_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    """The learning-rate factor at ``step``: 0 -> 1 over the warm-up, then 1 -> 0 at ``total_steps``."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def build_optimizer(model: torch.nn.Module, config: PretrainConfig) -> torch.optim.AdamW:
    """AdamW over the trainable weights; no weight decay on biases and normalisation weights (1-D)."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for _, p in params if p.ndim >= 2], "weight_decay": config.weight_decay},
              {"params": [p for _, p in params if p.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=config.lr, eps=getattr(config, "adam_epsilon", 1e-8))


def build_scheduler(optimizer: torch.optim.Optimizer, config: PretrainConfig, total_steps: int) -> LambdaLR:
    """Linear warm-up over ``warmup_ratio`` of ``total_steps``, then linear decay to zero."""
    warmup = int(round(config.warmup_ratio * total_steps))
    return LambdaLR(optimizer, functools.partial(linear_warmup_decay, warmup_steps=warmup, total_steps=total_steps))
