"""A fine-tuning run's record of how it started, ``OUTPUT/finetune_config.json``: the task and its settings, the
inputs, the start model and the options given. ``graphdoc finetune --resume`` takes from it each option that is
not given again; what the run then checks (settings, start model, training data) is checked as before.

The record is written before anything else of a run that starts (a folder holding no checkpoint), kept as it is
by a resume (a refused one leaves it alone) and written again when a run ends. Paths are absolute, so a resume finds the inputs from any
working folder; data given in memory (the Python API) is recorded as ``null``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from graphdoc.fileio import atomic_write, recorded_path
from graphdoc.finetune.loop import RUN_CONFIG_NAME, latest_state

TASKS = ("ranking", "classification")


def input_path(source: Any) -> str | None:
    """A path or name as a resume finds it again (:func:`~graphdoc.fileio.recorded_path`); ``None`` for anything
    else (data or a model given in memory)."""
    return recorded_path(source) if isinstance(source, (str, os.PathLike)) else None


def config_record(model_config: Any) -> dict[str, Any] | None:
    """The model settings a run built its start model with (``None``: none given, or not a settings object); the
    encoder they name, a local folder, by its absolute path."""
    from graphdoc.backbones import config_backbone
    from graphdoc.default_model import DEFAULT_MODEL_ALIASES

    if not hasattr(model_config, "to_dict"):
        return None
    settings = model_config.to_dict()
    encoder = settings.get("passage_encoder") or {}
    name = encoder.get("model_name_or_path")
    if isinstance(name, str) and name not in DEFAULT_MODEL_ALIASES:  # (those name the packaged model, not a folder)
        encoder["model_name_or_path"] = recorded_path(name)
    return {"backbone": config_backbone(model_config), "settings": settings}


def record_run(output: Path, config: Any, run: dict[str, Any], inputs: dict[str, Any], *, ended: bool, model: Any,
               model_config: Any, backbone: str | None, precision: str | None, fields: Any,
               label_field: str | None = None) -> None:
    """Write the record of the run in ``output`` as it starts (not over a checkpoint: until it ends, a resume
    keeps the record of how the run started) and, ``ended``, as it ends (a later resume goes on with what it
    ended with: a larger ``repeats``, another ``cache_dir``, inputs given from where they moved). ``config``: the
    task's settings; ``run``: its :func:`~graphdoc.finetune.loop.run_kind`; ``inputs``: name -> path (or data);
    the rest: the API's arguments of those names (``model``: the one given, a name or path)."""
    from graphdoc.corpus import Fields

    if not ended and latest_state(output) is not None:
        return
    task = run["task"]
    record = {"task": task, task: dataclasses.asdict(config), "run": run,
              "inputs": {name: input_path(source) for name, source in inputs.items()}, "model": input_path(model),
              "model_config": config_record(model_config), "backbone": backbone, "precision": precision,
              "fields": fields.to_dict() if isinstance(fields, Fields) else None, "label_field": label_field}
    output.mkdir(parents=True, exist_ok=True)
    with atomic_write(output / RUN_CONFIG_NAME, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2)


def read_record(output: Path) -> dict[str, Any] | None:
    """The record of the run in ``output``; ``None`` when there is none (or one from before records held the
    task: a ranking run's settings alone)."""
    try:
        record = json.loads((Path(output) / RUN_CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("task") not in TASKS \
            or not all(isinstance(record.get(key), dict) for key in (record["task"], "inputs", "run")):
        return None
    return record
