"""Backbones by name, and one loader for a saved model of any of them.

- ``graph``: :class:`~graphdoc.encoder.GraphDocEncoder`, residual GAT layers over the passage graph.
- ``flat``: :class:`~graphdoc.flat_encoder.FlatEncoder`, the Hugging Face encoder alone (FirstP or
  the mean of passages).

A saved model's ``config.json`` names its backbone, so :func:`load_model` needs no hint for one.
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping

from graphdoc.errors import GraphDocError, ModelLoadError

GRAPH, FLAT = "graph", "flat"
DEFAULT_BACKBONE = GRAPH
BACKBONES = {GRAPH: "graphdoc.encoder:GraphDocEncoder", FLAT: "graphdoc.flat_encoder:FlatEncoder"}


def backbone_class(name: str) -> type:
    """The model class of a backbone name (imported on first use)."""
    try:
        module, attr = BACKBONES[name].split(":")
    except KeyError:
        raise GraphDocError(f"unknown backbone {name!r}; valid: {', '.join(BACKBONES)}") from None
    return getattr(importlib.import_module(module), attr)


def load_model(name_or_path: str | None = None, backbone: str | None = None, config=None, device=None):
    """Load a saved graphdoc model of any backbone, or build an untrained one on a Hugging Face encoder.

    A saved folder is loaded as the backbone its ``config.json`` names (asking for another is an error);
    anything else (``None`` for the built-in default, a hub id, an encoder folder) is built as
    ``backbone`` (default ``graph``) with ``config``, that backbone's configuration dataclass.
    """
    from graphdoc.serialization import config_class_of, saved_backbone

    if backbone is not None:
        backbone_class(backbone)  # an unknown name is an error, saved folder or not
    saved = saved_backbone(name_or_path)
    if saved is not None and backbone is not None and saved != backbone:
        raise ModelLoadError(f"{name_or_path} is a saved {saved} model; it cannot be loaded as a {backbone} one")
    name = saved or backbone or DEFAULT_BACKBONE
    cls = backbone_class(name)
    expected = config_class_of(cls)
    if config is not None and not isinstance(config, expected):
        raise GraphDocError(f"a {name} model takes a {expected.__name__}; got a {type(config).__name__}")
    return cls.from_pretrained(name_or_path, config=config, device=device)


def load_index_model(identity: Mapping[str, Any], device=None):
    """The model an index was built with, from the ``model`` identity in its manifest.

    A saved model is loaded from its folder. A plain Hugging Face encoder is rebuilt with the settings
    the index recorded (chunker, pooling, graph or flat mode), so either backbone comes back as built.
    """
    from graphdoc.flat_config import FLAT_GRAPH_TYPE
    from graphdoc.serialization import config_class_of, saved_backbone

    path = identity.get("path")
    if saved_backbone(path) is not None:
        return load_model(path, device=device)
    graph = identity.get("graph", {})
    backbone = FLAT if graph.get("graph_type") == FLAT_GRAPH_TYPE else GRAPH
    cls = backbone_class(backbone)
    sections = {"chunker": identity.get("chunker", {}), "graph": graph,
                "passage_encoder": {**identity.get("passage_encoder", {}),
                                    "model_name_or_path": identity.get("name", path)}}
    return cls.from_pretrained(path, config=config_class_of(cls).from_dict(sections), device=device)
