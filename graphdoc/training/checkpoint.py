"""Resumable training checkpoints as plain files: safetensors and JSON, no pickle.

A checkpoint is a folder ``OUTPUT/checkpoints/step-NNNNNNNN/`` written atomically (a killed save leaves
no partial folder behind)::

    model/                    the model, as GraphDocEncoder.save_pretrained writes it
    optimizer.safetensors     every optimiser state tensor, as "state.<param>.<name>"
    optimizer.json            parameter groups and non-tensor state values
    scheduler.json            the learning-rate scheduler's state
    rng.safetensors           torch random states (CPU, and CUDA where used) of every process
    rng.json                  numpy's and Python's global random states (of process 0)
    trainer_state.json        step, data position, data counts, schedule length, loss scaler, settings, corpus
                              (paths, sizes, digests), start model and precision given: what a resume checks
                              and, with only --output given, goes on with
    NAME.safetensors          weights trained beside the model, if any (mlm_head: a flat model's MLM head;
                              projection_head: the head of pretrain.projection_head)
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from graphdoc.config import LEGACY_PASSAGE_ENCODER
from graphdoc.device import autocast_dtype
from graphdoc.errors import GraphDocError
from graphdoc.fileio import atomic_directory, remove_stale_temporaries
from graphdoc.fingerprint import weights_fingerprint

logger = logging.getLogger(__name__)

CHECKPOINTS_DIR = "checkpoints"
MODEL_DIR = "model"
STATE_NAME = "trainer_state.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def checkpoint_dir(output: Path, step: int) -> Path:
    return output / CHECKPOINTS_DIR / f"step-{step:08d}"


def list_checkpoints(output: Path) -> list[Path]:
    """Complete checkpoints under ``output``, oldest first."""
    root = output / CHECKPOINTS_DIR
    found = [p for p in root.iterdir() if _STEP_DIR.match(p.name) and (p / STATE_NAME).is_file()] \
        if root.is_dir() else []
    return sorted(found, key=lambda p: int(_STEP_DIR.match(p.name).group(1)))


def optimizer_files(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split an optimiser's state into tensors (for safetensors) and JSON values."""
    state = optimizer.state_dict()
    tensors, scalars = {}, {}
    for param, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{param}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{param}.{name}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def optimizer_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    """The optimiser state dict rebuilt from :func:`optimizer_files`' two parts."""
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, param, name = key.split(".", 2)
        state.setdefault(int(param), {})[name] = value
    for key, value in meta["scalars"].items():
        param, name = key.split(".", 1)
        state.setdefault(int(param), {})[name] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def global_rng_json() -> dict[str, Any]:
    """numpy's and Python's global random states as JSON values."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    return {"numpy": [name, keys.tolist(), pos, has_gauss, cached], "python": [version, list(internal), gauss]}


def set_global_rng_json(data: dict[str, Any]) -> None:
    name, keys, pos, has_gauss, cached = data["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, internal, gauss = data["python"]
    random.setstate((version, tuple(internal), gauss))


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=1) + "\n", encoding="utf-8")


def save_checkpoint(folder: Path, model, optimizer: torch.optim.Optimizer, scheduler,
                    rng_states: dict[str, torch.Tensor], state: dict[str, Any],
                    extra: dict[str, dict[str, torch.Tensor]] | None = None) -> None:
    """Write one checkpoint folder atomically (``rng_states``: name -> uint8 tensor, per process;
    ``extra``: name -> weights trained beside the model, written as ``NAME.safetensors``)."""
    with atomic_directory(folder) as tmp:
        model.save_pretrained(tmp / MODEL_DIR, shown_as=folder / MODEL_DIR)
        for name, tensors in (extra or {}).items():
            save_file(tensors, str(tmp / f"{name}.safetensors"))
        tensors, meta = optimizer_files(optimizer)
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        _write_json(tmp / "optimizer.json", meta)
        _write_json(tmp / "scheduler.json", scheduler.state_dict())
        save_file({k: v.cpu().contiguous() for k, v in rng_states.items()}, str(tmp / "rng.safetensors"))
        _write_json(tmp / "rng.json", global_rng_json())
        _write_json(tmp / STATE_NAME, state)


def load_checkpoint(folder: Path, optimizer: torch.optim.Optimizer,
                    scheduler) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Restore the optimiser, scheduler and global random states; returns the torch RNG states and the
    trainer state. The model is loaded separately from ``folder / MODEL_DIR``. A damaged or missing file is
    one :class:`GraphDocError` line."""
    with unreadable_as_error(folder):
        meta = json.loads((folder / "optimizer.json").read_text(encoding="utf-8"))
        optimizer.load_state_dict(optimizer_state(load_file(str(folder / "optimizer.safetensors")), meta))
        scheduler.load_state_dict(json.loads((folder / "scheduler.json").read_text(encoding="utf-8")))
        set_global_rng_json(json.loads((folder / "rng.json").read_text(encoding="utf-8")))
        rng_states = load_file(str(folder / "rng.safetensors"))
        state = read_state(folder)
    return rng_states, state


def read_state(folder: Path) -> dict[str, Any]:
    """The checkpoint's ``trainer_state.json`` (read before anything is loaded, to check a resume)."""
    with unreadable_as_error(folder):
        state = json.loads((folder / STATE_NAME).read_text(encoding="utf-8"))
        if not isinstance(state, dict):
            raise TypeError(f"{STATE_NAME} holds no JSON object")
    return state


def load_tensors(folder: Path, name: str) -> dict[str, torch.Tensor]:
    """The tensors of the checkpoint's ``name`` file (weights trained beside the model); a damaged file is one
    error line."""
    with unreadable_as_error(folder):
        return load_file(str(folder / name))


@contextmanager
def unreadable_as_error(folder: Path) -> Iterator[None]:
    """Turn what a damaged checkpoint file raises (truncated JSON or safetensors, a missing key or file, tensors
    of another shape) into one line: ``checkpoint FOLDER is unreadable (...)``."""
    try:
        yield
    except GraphDocError:
        raise
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise GraphDocError(f"checkpoint {folder} is unreadable ({type(exc).__name__}: {reason})") from None


def remove_stale(output: Path) -> None:
    """Delete what writes killed mid-way left in a run's folder and its checkpoints (temporary copies)."""
    stale = remove_stale_temporaries(output) + remove_stale_temporaries(output / CHECKPOINTS_DIR)
    if stale:
        logger.info("removed %d unfinished write(s) of an interrupted run: %s", len(stale),
                    ", ".join(str(p) for p in stale))


def prune_checkpoints(output: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints."""
    import shutil

    for old in list_checkpoints(output)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def check_slots(output: Path, slots: Mapping[str, bool]) -> None:
    """Refuse, before anything is written, a run folder entry of the wrong kind (``slots``: name -> whether the
    run keeps a folder there, else a file)."""
    for name, folder in slots.items():
        path = output / name
        if path.exists() and path.is_dir() != folder:
            found, wanted = ("a folder", "file") if path.is_dir() else ("a file", "folder")
            raise GraphDocError(f"{path} is {found}, where the run keeps its {name} {wanted}: move it away or "
                                "choose another --output")


def start_identity(model: torch.nn.Module, whole: bool) -> dict[str, Any]:
    """The name and weights fingerprint of the model a run starts from: ``whole`` for a saved graphdoc model
    (graph layers and all), else its passage encoder alone (new graph layers are drawn at random)."""
    return {"name": getattr(model, "name_or_path", None),
            "fingerprint": weights_fingerprint(model if whole else model.passage_encoder)}


def compare_start_models(started: dict[str, Any], now: dict[str, Any]) -> None:
    """One error line when ``now`` (a :func:`start_identity` or finetune's ``model_identity``) has other weights than the run ``started`` from."""
    if started.get("fingerprint") == now["fingerprint"]:
        return
    if started.get("name") == now["name"]:
        raise GraphDocError(f"cannot resume with model={now['name']!r}: its weights are not the ones the run was "
                            "started from (the model has changed since)")
    raise GraphDocError(f"cannot resume with model={now['name']!r}: the run was started from "
                        f"{started.get('name')!r} (other weights)")


def check_start_model(folder: Path, state: dict[str, Any], start: torch.nn.Module, identity: dict[str, Any],
                      device: torch.device) -> None:
    """Refuse resuming from checkpoint ``folder`` when ``start`` (the model a new run with today's ``--model``,
    config and ``--precision`` would start from; ``identity``: its :func:`start_identity`) differs from the run's:
    other weights, another model setting, or a precision of other numerics on ``device``."""
    with unreadable_as_error(folder):
        saved = json.loads((folder / MODEL_DIR / "config.json").read_text(encoding="utf-8"))["model"]
        saved_encoder = saved["passage_encoder"]
    now = start.config.to_dict()
    if "start_model" in state:  # a checkpoint written before the start model was kept: its name is compared
        compare_start_models(state["start_model"], identity)
        saved_encoder.pop("model_name_or_path", None)  # the weights decide: a moved folder is the same model
        now["passage_encoder"].pop("model_name_or_path", None)
    was, wanted = saved_encoder.pop("precision", "auto"), now["passage_encoder"].pop("precision")
    if autocast_dtype(device, was) != autocast_dtype(device, wanted):
        raise GraphDocError(f"cannot resume with precision {wanted} (--precision or model.passage_encoder."
                            f"precision): the run was started with {was}, which computes other numbers")
    saved["passage_encoder"] = {**LEGACY_PASSAGE_ENCODER, **saved_encoder}  # a run from before those settings
    difference = _first_difference(saved, now, "model")
    if difference is not None:
        key, value, old = difference
        raise GraphDocError(f"cannot resume with {key}={value!r}: the run was started with {old!r}")


def _first_difference(saved: Mapping[str, Any], now: Mapping[str, Any], prefix: str) -> tuple[str, Any, Any] | None:
    """The first setting of ``now`` (dotted name, value, saved value) that ``saved`` holds otherwise."""
    for key, value in now.items():
        old = saved.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            found = _first_difference(old, value, f"{prefix}.{key}")
            if found is not None:
                return found
        elif value != old:
            return f"{prefix}.{key}", value, old
    return None
