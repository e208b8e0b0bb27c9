"""graphdoc: long-document embeddings that understand structure, and search over them."""

__version__ = "0.1.0"

import importlib  # noqa: E402

from graphdoc.backbones import load_model  # noqa: E402
from graphdoc.documents import Document, Passage, Section  # noqa: E402
from graphdoc.errors import GraphDocError  # noqa: E402

# the model classes import torch and transformers: loaded on first use, not by ``import graphdoc``
_LAZY = {"GraphDocEncoder": "graphdoc.encoder", "FlatEncoder": "graphdoc.flat_encoder"}

__all__ = ["Document", "FlatEncoder", "GraphDocEncoder", "GraphDocError", "Passage", "Section", "__version__",
           "load_model"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'graphdoc' has no attribute {name!r}")
