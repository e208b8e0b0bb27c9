"""Backbones by name, and one loader for a saved model of any of them.

- ``graph``: :class:`~graphdoc.encoder.GraphDocEncoder`, residual GAT layers over the passage graph.
- ``flat``: :class:`~graphdoc.flat_encoder.FlatEncoder`, the Hugging Face encoder alone (FirstP or
  the mean of passages).

A saved model's ``config.json`` names its backbone, so :func:`load_model` needs no hint for one.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

from graphdoc.errors import GraphDocError, ModelLoadError

logger = logging.getLogger(__name__)
T = TypeVar("T")

GRAPH, FLAT = "graph", "flat"
DEFAULT_BACKBONE = GRAPH
BACKBONES = {GRAPH: "graphdoc.encoder:GraphDocEncoder", FLAT: "graphdoc.flat_encoder:FlatEncoder"}


def backbone_class(name: str) -> type:
    """The model class of a backbone name (imported on first use)."""
    if not isinstance(name, str) or name not in BACKBONES:  # a YAML list or mapping is no key either
        raise GraphDocError(f"unknown backbone {name!r}; valid: {', '.join(BACKBONES)}")
    module, attr = BACKBONES[name].split(":")
    return getattr(importlib.import_module(module), attr)


def model_config_class(backbone: str) -> type:
    """The configuration dataclass of a backbone: ``ModelConfig`` (graph) or ``FlatModelConfig`` (flat)."""
    from graphdoc.config import ModelConfig
    from graphdoc.flat_config import FlatModelConfig

    backbone_class(backbone)  # an unknown name is an error
    return FlatModelConfig if backbone == FLAT else ModelConfig


def config_backbone(config) -> str:
    """The backbone a model configuration is for."""
    return next(name for name in BACKBONES if isinstance(config, model_config_class(name)))


def convert_model_config(config, backbone: str):
    """``config`` for a model of ``backbone``: the chunker and passage encoder carry over, the ``graph``
    section becomes that backbone's default (its settings mean nothing to the other backbone)."""
    cls = model_config_class(backbone)
    return config if isinstance(config, cls) else cls(chunker=config.chunker, passage_encoder=config.passage_encoder)


def read_as_flat_if_not(read: Callable[[], T], path: str | Path, read_flat: Callable[[], T] | None,
                        model: Any = None) -> tuple[T, bool]:
    """``read()``; when it fails and ``read_flat`` is given, ``read_flat()`` instead, logged (a settings file that
    names no backbone but reads as flat settings only). Returns the result and whether it is the flat one; when
    both fail, ``read``'s error, or ``read_flat``'s when the model settings ``model`` say ``graph_type: flat`` (a
    flat file with a mistake in it is told of its mistake, not that ``flat`` is no graph type)."""
    from graphdoc.config import naming_file
    from graphdoc.flat_config import FLAT_GRAPH_TYPE

    try:
        with naming_file(path):
            return read(), False
    except GraphDocError as err:
        if read_flat is None:
            raise
        try:
            with naming_file(path):
                result = read_flat()
        except GraphDocError as flat_err:
            graph = model.get("graph") if isinstance(model, Mapping) else None
            if isinstance(graph, Mapping) and graph.get("graph_type") == FLAT_GRAPH_TYPE:
                raise flat_err from None
            raise err from None
    logger.info("%s reads as flat-backbone settings: building a flat model", path)
    return result, True


class BackboneSetup:
    """What training setups (pretraining, fine-tuning) share: a ``backbone`` field and a ``model`` field holding
    that backbone's configuration. A dataclass subclass declares both fields; its YAML ``model`` section is
    parsed as the configuration of its ``backbone`` key (default ``graph``)."""

    def __post_init__(self) -> None:
        expected = model_config_class(self.backbone)
        if not isinstance(self.model, expected):
            raise GraphDocError(f"a {self.backbone} backbone takes a {expected.__name__} as its model; "
                                f"got a {type(self.model).__name__}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        from graphdoc.config import from_dict

        fields = {f.name: f for f in dataclasses.fields(cls)}
        if not isinstance(data, Mapping):
            raise GraphDocError(f"a {cls.__name__} config must be a mapping with sections {', '.join(fields)}")
        unknown = sorted(set(data) - set(fields), key=str)
        if unknown:
            raise GraphDocError(f"unknown config key {unknown[0]}; valid keys: {', '.join(fields)}")
        backbone = data.get("backbone", DEFAULT_BACKBONE)
        kwargs = {"backbone": backbone, "model": from_dict(model_config_class(backbone), data.get("model", {}), "model")}
        for name, f in fields.items():
            if name not in kwargs and name in data:
                kwargs[name] = from_dict(f.default_factory, data[name], name)
        return cls(**kwargs)

    @classmethod
    def read(cls, path: str | Path | None, backbone: str | None = None):
        """A setup from a YAML/JSON file (``None``: all defaults).

        A file that names no ``backbone`` holds a graph model's settings, or a flat one's when its ``model``
        section reads as flat settings only (``graph: {graph_type: flat}``) and ``backbone`` (the one asked
        for, if any) is not ``graph``, as ``graphdoc embed`` reads a model config file.
        """
        from graphdoc.config import read_config_file

        if path is None:
            return cls()
        data = read_config_file(path)
        may_be_flat = isinstance(data, Mapping) and "backbone" not in data and backbone != GRAPH
        setup, _ = read_as_flat_if_not(lambda: cls.from_dict(data), path,
                                       (lambda: cls.from_dict({**data, "backbone": FLAT})) if may_be_flat else None,
                                       data.get("model") if may_be_flat else None)
        return setup

    def with_backbone(self, backbone: str):
        """This setup for a model of ``backbone`` (see :func:`convert_model_config`)."""
        if backbone == self.backbone:
            return self
        return dataclasses.replace(self, model=convert_model_config(self.model, backbone), backbone=backbone)


def load_model(name_or_path: str | None = None, backbone: str | None = None, config=None, device=None):
    """Load a saved graphdoc model of any backbone, or build an untrained one on a Hugging Face encoder.

    A saved folder is loaded as the backbone its ``config.json`` names (asking for another is an error);
    anything else (``None`` for the built-in default, a hub id, an encoder folder) is built as
    ``backbone`` (default ``graph``) with ``config``: that backbone's configuration dataclass, a YAML/JSON config
    file, or a built-in config's name (``"section-graph"``).
    """
    from graphdoc.encoder import check_model_name
    from graphdoc.serialization import config_class_of, saved_backbone

    check_model_name(name_or_path)
    if backbone is not None:
        backbone_class(backbone)  # an unknown name is an error, saved folder or not
    saved = saved_backbone(name_or_path)
    if saved is not None and backbone is not None and saved != backbone:
        raise ModelLoadError(f"{name_or_path} is a saved {saved} model; it cannot be loaded as a {backbone} one")
    if saved is None and name_or_path is not None:
        _refuse_classifier(Path(name_or_path))
    name = saved or backbone or DEFAULT_BACKBONE
    cls = backbone_class(name)
    expected = config_class_of(cls)
    if config is not None and not isinstance(config, (expected, str, os.PathLike)):
        raise GraphDocError(f"a {name} model takes a {expected.__name__}, or a config file or built-in config's "
                            f"name; got a {type(config).__name__}")
    return cls.from_pretrained(name_or_path, config=config, device=device)


def _refuse_classifier(path: Path) -> None:
    """A saved classifier (``graphdoc finetune --task classification``) holds its encoder in a subfolder."""
    from graphdoc.finetune.classifier import ENCODER_DIR, HEAD_WEIGHTS

    if (path / HEAD_WEIGHTS).is_file() and (path / ENCODER_DIR).is_dir():
        raise ModelLoadError(f"{path} is a saved classifier; use {path / ENCODER_DIR} for its encoder")


def load_index_model(identity: Mapping[str, Any], device=None, name_or_path: str | None = None,
                     searching: bool = False):
    """The model an index was built with, from the ``model`` identity in its manifest.

    A saved model is loaded from its folder. A plain Hugging Face encoder is rebuilt with the settings
    the index recorded (chunker, pooling, graph or flat mode), so either backbone comes back as built.
    ``name_or_path`` names the model in another place (a folder moved since, a copy, its hub id): it is loaded
    from there with the index's settings (whether its weights are the index's is for the caller to check).
    ``searching``: the model is to search with, which BM25 can do without it (an error says so; adding documents
    cannot).
    """
    from graphdoc.flat_config import FLAT_GRAPH_TYPE
    from graphdoc.serialization import config_class_of, saved_backbone

    if name_or_path is not None:
        if os.path.isabs(name_or_path) and not os.path.exists(name_or_path):
            raise ModelLoadError(f"model folder not found: {name_or_path}")
        identity = {**identity, "path": str(name_or_path), "name": str(name_or_path)}
    path = identity.get("path")
    graph = identity.get("graph", {})
    if path and os.path.isabs(path) and not os.path.exists(path):  # a local folder, moved or deleted since
        raise ModelLoadError(f"the index's model folder {path} is gone (moved or deleted): pass it from its new "
                             "place with --model (its weights are checked against the index; an index run with it "
                             f"records the new place){', or search with --mode bm25' if searching else ''}")
    saved = saved_backbone(path)
    if saved is not None:
        model = load_model(path, device=device)
        document = graph.get("document")
        if saved == FLAT and document is not None and document != model.config.graph.document:
            # built with --flat-document: the mode is the index's, not the saved model's (no weights depend on it)
            model.config = dataclasses.replace(model.config,
                                               graph=dataclasses.replace(model.config.graph, document=document))
        chunker = identity.get("chunker", {})
        if "max_passages" in chunker:  # built with --max-passages: the cap is the index's (no weights depend on it)
            model.config.chunker.max_passages = chunker["max_passages"]
        return model
    backbone = FLAT if graph.get("graph_type") == FLAT_GRAPH_TYPE else GRAPH
    cls = backbone_class(backbone)
    # a local folder by the path the index recorded (its name may be relative to where the index was built)
    name = path if path is not None and Path(path).is_dir() else identity.get("name", path)
    chunker = {key: value for key, value in identity.get("chunker", {}).items() if key != "version"}
    sections = {"chunker": chunker, "graph": graph,
                "passage_encoder": {**identity.get("passage_encoder", {}), "model_name_or_path": name}}
    return cls.from_pretrained(path, config=config_class_of(cls).from_dict(sections), device=device)
