"""graphdoc: long-document embeddings that understand structure, and search over them.

``graphdoc.load_model()`` gives a model (:class:`GraphDocEncoder`, or :class:`FlatEncoder` for a flat
backbone) whose ``encode`` embeds documents and ``encode_queries`` queries; ``graphdoc.retrieval`` builds
and searches indexes (``build_index``, ``Searcher``) and evaluates runs. What graphdoc reports about input,
files, settings and models is a :class:`GraphDocError`; an argument of the wrong type is a TypeError.
"""

__version__ = "0.1.0"

import importlib  # noqa: E402

from graphdoc.backbones import load_model  # noqa: E402
from graphdoc.documents import Document, Passage, Section  # noqa: E402
from graphdoc.errors import (  # noqa: E402
    DamagedIndexError, GraphDocError, IndexMismatchError, InputError, ModelLoadError)

# the model classes import torch and transformers: loaded on first use, not by ``import graphdoc``
_LAZY = {"GraphDocEncoder": "graphdoc.encoder", "FlatEncoder": "graphdoc.flat_encoder"}

__all__ = ["DamagedIndexError", "Document", "FlatEncoder", "GraphDocEncoder", "GraphDocError", "IndexMismatchError",
           "InputError", "ModelLoadError", "Passage", "Section", "__version__", "load_model"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'graphdoc' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy classes too, for ``dir()`` and tab completion."""
    return sorted(set(globals()) | set(_LAZY))
