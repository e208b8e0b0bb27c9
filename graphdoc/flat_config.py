"""Configuration of the flat backbone: a Hugging Face encoder that embeds a document without a graph.

A flat model's config has the same three sections as a graph model's (``chunker``, ``passage_encoder``,
``graph``), so an index's model identity compares the two backbones section by section: the ``graph``
section of a flat model says ``graph_type: flat``, and a graph index refuses a flat model (and the
other way round) by naming that setting.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from graphdoc.config import ChunkerConfig, PassageEncoderConfig, _check_choice, check_sections, check_types, from_dict
from graphdoc.errors import GraphDocError

FLAT_GRAPH_TYPE = "flat"
#: ``first``: FirstP, the title and text as one sequence truncated to the encoder's limit;
#: ``mean``: the mean of the document's passage vectors
DOCUMENT_MODES = ("first", "mean")


@dataclass
class FlatConfig:
    """How a flat backbone makes a document's vector; it builds no graph.

    Args:
        graph_type: always ``flat`` (kept so that model identities of both backbones line up).
        document: ``first`` (FirstP: title and text as one sequence, truncated to the encoder's
            ``max_seq_length``: 512 tokens for BERT, 4,096 for Longformer) or ``mean`` (the mean of
            the passage vectors, as an untrained graph model gives).
    """

    graph_type: str = FLAT_GRAPH_TYPE
    document: str = "first"

    def __post_init__(self) -> None:
        check_types(self, "graph")
        if self.graph_type != FLAT_GRAPH_TYPE:
            raise GraphDocError(f"a flat backbone builds no graph: graph.graph_type must be "
                                f"{FLAT_GRAPH_TYPE!r}; got {self.graph_type!r}")
        _check_choice("graph.document", self.document, DOCUMENT_MODES)


@dataclass
class FlatModelConfig:
    """Everything that defines a flat model (YAML: sections ``chunker``, ``passage_encoder``, ``graph``).

    The chunker still splits documents into passages: they give the ``mean`` mode its vector and the
    index its passage vectors (MaxP scoring); ``passage_encoder.projection_dim`` must stay unset.
    """

    chunker: ChunkerConfig = field(default_factory=ChunkerConfig)
    passage_encoder: PassageEncoderConfig = field(default_factory=PassageEncoderConfig)
    graph: FlatConfig = field(default_factory=FlatConfig)

    def __post_init__(self) -> None:
        check_sections(self)
        if self.passage_encoder.projection_dim:
            raise GraphDocError("a flat backbone has no projection: passage_encoder.projection_dim must be "
                                f"null; got {self.passage_encoder.projection_dim}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FlatModelConfig":
        return from_dict(cls, data)
