"""Gradient caching: in-batch-negative losses over batches too large to embed with gradients at once.

Gao et al. (2021), "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup":

1. embed the batch chunk by chunk without gradients, recording the random state before each chunk;
2. compute the loss over all the vectors and its gradient with respect to them, ``dL/dz``;
3. embed each chunk again with gradients (same random state, so the same dropout) and back-propagate
   its slice of ``dL/dz`` into the weights.

The weight gradients equal those of one plain forward and backward over the whole batch, with the
memory of a single chunk. A batch that fits in one chunk takes the plain path.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

import torch

T = TypeVar("T")
EmbedFn = Callable[[Sequence[T]], torch.Tensor]
LossFn = Callable[[torch.Tensor], torch.Tensor]


def chunk_bounds(sizes: Sequence[int], max_size: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, end)`` groups of items whose sizes sum to at most ``max_size``.

    An item larger than ``max_size`` gets a group of its own. Every item is in exactly one group.
    """
    bounds: list[tuple[int, int]] = []
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if i > start and total + size > max_size:
            bounds.append((start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        bounds.append((start, len(sizes)))
    return bounds


def _rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def grad_cache_backward(embed: EmbedFn, items: Sequence[T], sizes: Sequence[int], max_chunk: int,
                        loss_fn: LossFn, scale: Callable[[torch.Tensor], torch.Tensor] | None = None,
                        device: torch.device | None = None) -> torch.Tensor:
    """Back-propagate ``loss_fn(embed(items))`` into the weights, ``max_chunk`` passages at a time.

    Args:
        embed: ``items[a:b] -> [b - a, d]`` vectors, differentiable with respect to the weights.
        sizes: each item's cost (its number of passages), to form the chunks.
        loss_fn: ``[len(items), d] -> scalar``; it may gather vectors from other processes.
        scale: applied to the loss before backward (a mixed-precision loss scaler).

    Returns the (unscaled) loss, detached.
    """
    scale = scale or (lambda loss: loss)
    device = device or torch.device("cpu")
    bounds = chunk_bounds(sizes, max_chunk)
    if len(bounds) <= 1:
        loss = loss_fn(embed(items))
        scale(loss).backward()
        return loss.detach()
    states, parts = [], []
    with torch.no_grad():
        for start, end in bounds:
            states.append(_rng_state(device))
            parts.append(embed(items[start:end]))
    z = torch.cat(parts).detach().requires_grad_()  # [len(items), d]
    loss = loss_fn(z)
    scale(loss).backward()
    for (start, end), state in zip(bounds, states):
        _set_rng_state(state, device)
        embed(items[start:end]).backward(z.grad[start:end])
    return loss.detach()
