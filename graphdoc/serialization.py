"""Save and load graphdoc models: ``config.json`` + ``model.safetensors`` + ``passage_encoder/``.

``config.json`` names the model's ``backbone`` (``graph``, or ``flat`` for :class:`FlatEncoder`); a
folder saved before backbones existed is a graph model.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import save_file

from graphdoc.backbones import GRAPH
from graphdoc.config import ModelConfig, naming_file
from graphdoc.default_model import DEFAULT_MODEL_ALIASES, DEFAULT_MODEL_NAME, resolve_model_name
from graphdoc.errors import ModelLoadError
from graphdoc.fileio import atomic_directory, atomic_write, check_replaceable, read_safetensors
from graphdoc.model_card import CARD_NAME, is_graphdoc_card, model_card
from graphdoc.models.passage_encoder import PassageEncoder

if TYPE_CHECKING:
    from graphdoc.encoder import GraphDocEncoder

logger = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
PASSAGE_ENCODER_DIR = "passage_encoder"


def backbone_of(cls_or_model) -> str:
    """The backbone a model class declares (``GraphDocEncoder`` predates the attribute: graph)."""
    return getattr(cls_or_model, "backbone", GRAPH)


def config_class_of(cls) -> type:
    """The configuration dataclass of a model class (``GraphDocEncoder``'s is :class:`ModelConfig`)."""
    return getattr(cls, "config_class", ModelConfig)


def saved_backbone(path: str | Path | None) -> str | None:
    """The backbone of a saved graphdoc model folder; ``None`` for anything else (a hub id, a plain encoder)."""
    if path is None or str(path) in DEFAULT_MODEL_ALIASES or not is_graphdoc_model(Path(path)):
        return None
    return json.loads((Path(path) / CONFIG_NAME).read_text(encoding="utf-8")).get("backbone", GRAPH)


def versions() -> dict[str, str]:
    import transformers

    from graphdoc import __version__

    return {"graphdoc_version": __version__, "torch_version": torch.__version__,
            "transformers_version": transformers.__version__}


def is_graphdoc_model(path: Path) -> bool:
    config = path / CONFIG_NAME
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and "graphdoc_version" in data


def check_save_target(path: str | Path) -> None:
    """Refuse, in one line, a ``path`` that a model save would not replace: a folder of other files (see
    :func:`graphdoc.fileio.check_replaceable`)."""
    # (a README.md file is the model card: graphdoc's is written again, the user's is carried over; a folder of
    # that name is the user's, and refused as any other)
    card = Path(path) / CARD_NAME
    ours = (CONFIG_NAME, WEIGHTS_NAME, PASSAGE_ENCODER_DIR) + ((CARD_NAME,) if card.is_file() else ())
    check_replaceable(path, is_graphdoc_model, "a saved graphdoc model", ours)


def save(model: "GraphDocEncoder", path: str | Path, shown_as: str | Path | None = None) -> None:
    """Write the model folder atomically: an interrupted save leaves any earlier one intact.

    ``path`` must be new, empty, or an earlier saved graphdoc model (it is replaced whole). Its model card,
    ``README.md``, is written anew, unless the one there is the user's (it lacks graphdoc's mark): that one is kept.
    """
    check_save_target(path)
    card = Path(shown_as or path) / CARD_NAME  # (where the model ends up: a classifier saves its encoder elsewhere)
    users_card = card.read_bytes() if card.is_file() and not is_graphdoc_card(card) else None
    with atomic_directory(path) as tmp:
        model.passage_encoder.save(tmp / PASSAGE_ENCODER_DIR)
        tensors = {k: v.detach().cpu().contiguous() for k, v in model.head_state_dict().items()}
        save_file(tensors, str(tmp / WEIGHTS_NAME), metadata={"format": "pt"})
        payload = {**versions(), "backbone": backbone_of(model), "dimension": model.dimension,
                   "model": model.config.to_dict()}
        if getattr(model, "search_defaults", None):
            payload["search"] = model.search_defaults
        (tmp / CONFIG_NAME).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        if users_card is not None:
            (tmp / CARD_NAME).write_bytes(users_card)
        else:
            (tmp / CARD_NAME).write_text(model_card(payload, str(shown_as or path)), encoding="utf-8")


def save_search_defaults(path: str | Path, search: dict) -> None:
    """Replace the search settings (``"search"``) a saved model's ``config.json`` holds, atomically; the
    weights stay as they are (k-fold fine-tuning picks each fold's fusion alpha after saving its model)."""
    config = Path(path) / CONFIG_NAME
    payload = json.loads(config.read_text(encoding="utf-8"))
    payload["search"] = search
    with atomic_write(config, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(payload, indent=2) + "\n")
    card = Path(path) / CARD_NAME
    if is_graphdoc_card(card):  # (none is added to a model saved before graphdoc wrote cards; a user's is kept)
        with atomic_write(card, "w", encoding="utf-8") as handle:
            handle.write(model_card(payload, str(path)))


def load(cls: type["GraphDocEncoder"], name_or_path, config: ModelConfig | None, device) -> "GraphDocEncoder":
    """A saved model, or an untrained one on the encoder ``name_or_path`` names (``None``: the one
    ``config`` names, else the built-in default). The model comes back in eval mode, as Hugging Face
    models do: call ``train()`` to train it."""
    name = str(name_or_path) if name_or_path is not None else _configured_name(config)
    if name in DEFAULT_MODEL_ALIASES:
        name = DEFAULT_MODEL_NAME
    path = Path(resolve_model_name(name))
    if path.is_dir() and is_graphdoc_model(path):
        if config is not None:
            logger.warning("ignoring the given config: %s is a saved graphdoc model with its own", path)
        model = _load_saved(cls, path, device)
        model.name_or_path = str(path.resolve())
        return model.eval()
    if config is not None and name_or_path is not None:
        _warn_other_encoder(config, name)
    config = config or config_class_of(cls)()
    pe_config = replace(config.passage_encoder, model_name_or_path=name)
    passage_encoder = PassageEncoder.load(resolve_model_name(name), pe_config)  # as typed: ./x names a folder
    model = cls(passage_encoder, replace(config, passage_encoder=passage_encoder.config), device=device)
    model.name_or_path = str(path.resolve()) if path.is_dir() and name not in DEFAULT_MODEL_ALIASES else name
    return model.eval()


def _configured_name(config) -> str:
    """The encoder a model configuration names; the built-in default without one."""
    return config.passage_encoder.model_name_or_path if config is not None else DEFAULT_MODEL_NAME


def _same_model(a: str, b: str) -> bool:
    """Whether two names are one model folder (``./x`` and its absolute path)."""
    first, second = Path(resolve_model_name(a)), Path(resolve_model_name(b))
    return first.is_dir() and second.is_dir() and first.resolve() == second.resolve()


def _warn_other_encoder(config, name: str) -> None:
    """A configuration naming another encoder than the one asked for: the name asked for wins, said once."""
    configured = _configured_name(config)
    if configured in DEFAULT_MODEL_ALIASES or _same_model(configured, name):
        return
    if configured != name:
        logger.warning("loading %s, not the %s the config's passage_encoder.model_name_or_path names", name,
                       configured)


def _load_saved(cls, path: Path, device) -> "GraphDocEncoder":
    payload = json.loads((path / CONFIG_NAME).read_text(encoding="utf-8"))
    if not isinstance(payload.get("model"), dict):
        raise ModelLoadError(f"{path / CONFIG_NAME} has no 'model' settings: not a complete graphdoc model")
    saved, wanted = payload.get("backbone", GRAPH), backbone_of(cls)
    if saved != wanted:
        raise ModelLoadError(f"{path} is a saved {saved} model, not a {wanted} one: "
                             f"load it with graphdoc.load_model (or --backbone {saved})")
    with naming_file(path / CONFIG_NAME):  # a setting edited there: the error names the file
        config = config_class_of(cls).from_dict(payload["model"])
    passage_encoder = PassageEncoder.load(str(path / PASSAGE_ENCODER_DIR), config.passage_encoder)
    with naming_file(path / CONFIG_NAME):  # (graph.heads, say, checked against the encoder's size)
        model = cls(passage_encoder, config, device="cpu")
    search = payload.get("search")
    if search is not None and not isinstance(search, dict):
        raise ModelLoadError(f"{path / CONFIG_NAME}: 'search' must be an object; got {search!r}")
    model.search_defaults = search
    weights = path / WEIGHTS_NAME
    if not weights.is_file():
        raise ModelLoadError(f"{path} has no {WEIGHTS_NAME}")
    state = read_safetensors(weights)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a weight of another shape (strict=False still refuses those)
        shapes = [line.strip() for line in str(exc).splitlines() if "size mismatch" in line]
        raise ModelLoadError(f"{weights} does not match its config.json: "
                             f"{shapes[0] if shapes else str(exc).strip().splitlines()[0]}") from None
    missing = [k for k in missing if not k.startswith("passage_encoder.")]
    if missing or unexpected:
        raise ModelLoadError(f"{weights} does not match its config.json: "
                             f"missing {missing[:3]}, unexpected {unexpected[:3]}")
    from graphdoc.device import resolve_device

    return model.to(resolve_device(device))
