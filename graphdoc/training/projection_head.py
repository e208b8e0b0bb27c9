"""A projection head for contrastive pretraining (SimCLR): the loss compares ``head(vector)``, not the vector.

``pretrain.projection_head: N`` puts a two-layer MLP (``d -> d -> N``, ReLU between) on top of the
document vectors while training; the saved model is the encoder without it, so the vectors a user gets
are the ones *before* the head. SimCLR (Chen et al., 2020) found those to transfer better than the
contrastively trained output itself, which the loss shapes to tell the training documents apart. The
head's weights are checkpointed beside the model (``projection_head.safetensors``) so that a resumed run
continues with them.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from graphdoc.errors import GraphDocError
from graphdoc.training import checkpoint as ckpt

PROJECTION_HEAD = "projection_head"  # its weights in a checkpoint: projection_head.safetensors


def projection_head(model: nn.Module, out_dim: int | None, seed: int) -> nn.Sequential | None:
    """``Linear(d, d) -> ReLU -> Linear(d, out_dim)`` on ``model``'s vectors and device, initialised from
    ``seed`` alone; ``None`` when ``out_dim`` is (no head)."""
    if not out_dim:
        return None
    d = model.dimension
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        return nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, out_dim)).to(model.device)


def restore_head(head: nn.Module, folder: Path) -> None:
    """Load the head's weights from checkpoint ``folder``."""
    path = folder / f"{PROJECTION_HEAD}.safetensors"
    if not path.is_file():
        raise GraphDocError(f"checkpoint {folder} has no {path.name}: it was not written by a run with "
                            "pretrain.projection_head")
    with ckpt.unreadable_as_error(folder):  # a damaged file or weights of another size: one line
        head.load_state_dict(ckpt.load_tensors(folder, path.name))
