"""graphdoc: long-document embeddings that understand structure, and search over them.

``graphdoc.load_model()`` gives a model (:class:`GraphDocEncoder`, or :class:`FlatEncoder` for a flat
backbone) whose ``encode`` embeds documents and ``encode_queries`` queries; ``graphdoc.retrieval`` builds
and searches indexes (``build_index``, ``Searcher``) and evaluates runs. What graphdoc reports about input,
files, settings and models is a :class:`GraphDocError`; an argument of the wrong type is a TypeError.
"""

__version__ = "0.1.0"

from graphdoc.backbones import load_model  # noqa: E402
from graphdoc.documents import Document, Passage, Section  # noqa: E402
from graphdoc.errors import (  # noqa: E402
    DamagedIndexError, GraphDocError, IndexMismatchError, InputError, ModelLoadError)
from graphdoc.lazy import lazy_names  # noqa: E402

# the model classes import torch and transformers: loaded on first use, not by ``import graphdoc``
_LAZY = {"GraphDocEncoder": "graphdoc.encoder", "FlatEncoder": "graphdoc.flat_encoder"}

__all__ = ["DamagedIndexError", "Document", "FlatEncoder", "GraphDocEncoder", "GraphDocError", "IndexMismatchError",
           "InputError", "ModelLoadError", "Passage", "Section", "__version__", "load_model"]

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
