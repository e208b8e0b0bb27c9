"""A fingerprint of a module's weights: what identifies a model in indexes and passage caches."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def weights_fingerprint(module: "torch.nn.Module") -> str:
    """sha256 over every weight tensor of ``module`` (names, shapes, dtypes and bytes).

    Computed afresh on each call (about 0.3 s for MiniLM): weights change during training, so a
    cached value could go stale.
    """
    import torch  # here: an index's manifest needs no torch to be read

    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        digest.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
