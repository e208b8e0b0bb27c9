"""The neural modules of graphdoc, one per file."""

from graphdoc.models.classification_head import ClassificationHead
from graphdoc.models.graph_encoder import DocumentGraphEncoder
from graphdoc.models.passage_encoder import PassageEncoder
from graphdoc.models.projection import Projection
from graphdoc.models.residual_gat import ResidualGATLayer

__all__ = ["ClassificationHead", "DocumentGraphEncoder", "PassageEncoder", "Projection", "ResidualGATLayer"]
