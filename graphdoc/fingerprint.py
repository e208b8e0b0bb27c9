"""A fingerprint of a module's weights: what identifies a model in indexes and passage caches."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

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


#: configuration entries that say where a model was read from or which library wrote it, not what it computes
_PROVENANCE = frozenset({"_name_or_path", "transformers_version", "_commit_hash"})


def architecture_fingerprint(config: Any) -> str:
    """sha256 over a Hugging Face model configuration (``config.to_dict()``), less where it was read from.

    Two copies of a model in different folders share it; the same weights under another architecture setting
    (``layer_norm_eps``, ``hidden_act``, ...) do not. A transformers release that adds a configuration entry
    changes it too, which errs on the safe side (what is keyed by it is computed again).
    """
    entries = {key: value for key, value in config.to_dict().items() if key not in _PROVENANCE}
    return hashlib.sha256(json.dumps(entries, sort_keys=True, default=str).encode()).hexdigest()
