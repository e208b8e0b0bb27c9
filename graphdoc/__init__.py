"""graphdoc: long-document embeddings that understand structure, and search over them."""

__version__ = "0.1.0"

from graphdoc.documents import Document, Passage, Section  # noqa: E402
from graphdoc.errors import GraphDocError  # noqa: E402

__all__ = ["Document", "GraphDocError", "Passage", "Section", "__version__"]
