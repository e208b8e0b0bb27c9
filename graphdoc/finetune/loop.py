"""What both fine-tuning tasks share: seeding, the optimiser, epoch checkpoints, the run summary.

Checkpoints are :mod:`graphdoc.training.checkpoint` folders (safetensors and JSON, no pickle) written at
the end of every epoch; ``resume`` restarts after the latest one with the same weights, optimiser,
schedule and random states, so a resumed run ends where an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphdoc.config import TRANSIENT_ENCODER_SETTINGS
from graphdoc.device import autocast_dtype
from graphdoc.errors import GraphDocError
from graphdoc.fileio import atomic_write
from graphdoc.fingerprint import weights_fingerprint
from graphdoc.progress import progress_bar, short_float
from graphdoc.training import checkpoint as ckpt
from graphdoc.training.metrics import peak_memory_mib
from graphdoc.training.optim import build_optimizer, build_scheduler

logger = logging.getLogger(__name__)

SUMMARY_NAME = "finetune.json"
RUN_CONFIG_NAME = "finetune_config.json"  # OUTPUT/finetune_config.json: a ranking run's settings, written first
MODEL_DIR = "model"  # OUTPUT/model: the run's best model, as the trainers save it
HALFWAY_DIR = "halfway"  # OUTPUT/halfway: a ranking run's model half-way through its epochs
#: settings that may change on resume: they do not change what is learned (``repeats``: how many few-shot
#: seeds run, each in its own folder; a resume with more runs the new seeds after the finished ones)
OPERATIONAL = ("cache_dir", "repeats")


def data_fingerprint(data: Any) -> str:
    """A digest of what a run trains on (ids, labels, judgements: anything JSON), checked on resume."""
    text = json.dumps(data, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def model_identity(model: torch.nn.Module) -> dict[str, Any]:
    """The name and weights fingerprint of the model a run starts from (a classifier's encoder: its new head
    is drawn from the seed), checked on resume."""
    encoder = getattr(model, "encoder", model)
    return {"name": getattr(encoder, "name_or_path", None), "fingerprint": weights_fingerprint(encoder)}


def _check_encoder_settings(saved: torch.nn.Module, model: torch.nn.Module) -> None:
    """Refuse to resume a run whose passage encoder settings (pooling, prompts, ...) differ from its checkpoint's
    model's (one from before prompts existed has none): the weights would be trained on other vectors from
    then on, as only the weights are loaded into ``model``."""
    was, now = (dataclasses.asdict(getattr(m, "encoder", m).passage_encoder.config) for m in (saved, model))
    for key, value in now.items():
        if key not in TRANSIENT_ENCODER_SETTINGS and was.get(key) != value:
            raise GraphDocError(f"cannot resume with model.passage_encoder.{key}={value!r}: the run was started "
                                f"with {was.get(key)!r}")
    # the chunker and graph settings too: the weights would go on training over other passages or another graph
    was_all, now_all = (dataclasses.asdict(getattr(m, "encoder", m).config) for m in (saved, model))
    for section, values in now_all.items():
        if section == "passage_encoder":
            continue
        pairs = values.items() if isinstance(values, dict) else [(None, values)]
        for key, value in pairs:
            before = was_all.get(section) if key is None else (was_all.get(section) or {}).get(key)
            if before != value:
                name = section if key is None else f"{section}.{key}"
                raise GraphDocError(f"cannot resume with model.{name}={value!r}: the run was started with {before!r}")
    # a precision of other numerics on this device: other (cached) passage vectors from then on, as in pretraining
    device = next(model.parameters()).device
    started, wanted = was.get("precision") or "auto", now.get("precision") or "auto"
    if autocast_dtype(device, started) != autocast_dtype(device, wanted):
        raise GraphDocError(f"cannot resume with precision {wanted} (--precision or model.passage_encoder."
                            f"precision): the run was started with {started}, which computes other numbers")


def run_kind(task: str, folds: int | None = None, shots: int | None = None) -> dict[str, Any]:
    """What a fine-tuning run is: its task, and k-fold's ``folds`` or few-shot's ``shots`` when it is one."""
    mode = "k-fold" if folds is not None else "few-shot" if shots is not None else "plain"
    return {"task": task, "mode": mode, "folds": folds, "shots": shots}


def describe_run(kind: dict[str, Any]) -> str:
    """``"k-fold ranking run (--folds 3)"``, ``"classification run"``, ..."""
    flag = (f" (--folds {kind['folds']})" if kind.get("folds") else
            f" (--few-shot {kind['shots']})" if kind.get("shots") else "")
    mode = "" if kind["mode"] == "plain" else kind["mode"] + " "
    return f"{mode}{kind['task']} run{flag}"


def check_run_folder(output: Path, wanted: dict[str, Any], resume: bool, cache_dir: str | Path | None = None) -> None:
    """Refuse, in one line and before a model loads, a run into a folder holding a fine-tuning run (without
    ``resume``, or of another kind: the other task; plain, k-fold or few-shot), into a folder holding other files
    and no fine-tuning run (see :func:`_check_no_other_files`), and resuming a k-fold run with another number of
    folds. Resuming a run of the same kind is left to :meth:`EpochLoop.start_or_resume` (settings, data)."""
    held = held_run(Path(output))
    if held is not None and held["task"] == "pretraining":
        raise GraphDocError(f"{output} holds a pretraining run, not a fine-tuning run: choose another --output")
    if held is None:
        from graphdoc.serialization import is_graphdoc_model

        # a saved model no run of this folder wrote (a run writes its record first, then may save its best model
        # before its first checkpoint): it would be replaced by this run's
        if is_graphdoc_model(Path(output) / MODEL_DIR) and not (Path(output) / RUN_CONFIG_NAME).is_file():
            raise GraphDocError(f"{output} holds a saved model in {Path(output) / MODEL_DIR} and no fine-tuning run: "
                                "the run would replace it; choose another --output (or move the model)")
        _check_no_other_files(Path(output), cache_dir)
        if resume and wanted["mode"] != "plain":  # a plain run's EpochLoop says so; k-fold and few-shot runs here
            logger.warning("nothing to resume in %s: starting from scratch", output)
        return
    same = (held["task"], held["mode"]) == (wanted["task"], wanted["mode"])
    if same and not resume:  # now, before a model loads and the passages are encoded
        raise GraphDocError(f"{output} already holds a {describe_run(held)}; pass --resume to continue it or choose "
                            "another --output")
    if not same:
        if resume:
            raise GraphDocError(f"cannot resume {output} as a {describe_run(wanted)}: it holds a "
                                f"{describe_run(held)}")
        raise GraphDocError(f"{output} already holds a {describe_run(held)}; choose another --output for a "
                            f"{describe_run(wanted)}")
    if resume and held["folds"] is not None and held["folds"] != wanted["folds"]:
        raise GraphDocError(f"cannot resume {held['folder']} over different training data: the run was started "
                            f"with --folds {held['folds']}, not --folds {wanted['folds']}")


def _check_no_other_files(output: Path, cache_dir: str | Path | None) -> None:
    """A run writes into a folder that is new, empty or a fine-tuning run's (its record written first, see
    :mod:`graphdoc.finetune.record`), as ``graphdoc pretrain`` does: refuse one holding anything else but the
    writer's lock and a passage cache (``passage_cache``, or the ``cache_dir`` given), whose vectors a run stopped
    before its first checkpoint leaves for the next."""
    from graphdoc.fileio import LOCK_NAME
    from graphdoc.training.cache import CACHE_NAME

    if not output.is_dir() or (output / RUN_CONFIG_NAME).is_file():
        return
    caches = [(output / CACHE_NAME).resolve()] + ([Path(cache_dir).resolve()] if cache_dir is not None else [])
    for entry in output.iterdir():
        if entry.name != LOCK_NAME and not (entry.is_dir() and any(c.is_relative_to(entry.resolve()) for c in caches)):
            raise GraphDocError(f"--output {output} holds other files and no fine-tuning run: choose a new or empty "
                                "folder")


def held_run(output: Path) -> dict[str, Any] | None:
    """The :func:`run_kind` of what ``output`` holds (``folder``: where it was read), from the latest checkpoint
    of its run or its first fold or seed, else from its summary; ``None`` for no fine-tuning run."""
    found = latest_state(output)
    if found is not None:
        folder, state, mode = found
        kind = state.get("run") or _kind_of_state(state, mode)  # a run saved before "run" was kept
        return dict(kind, folder=str(folder))
    for name, read in (("crossval.json", lambda s: run_kind("ranking", folds=len(s["folds"]))),
                       ("fewshot.json", lambda s: run_kind("classification", shots=s["shots"])),
                       (SUMMARY_NAME, lambda s: run_kind("ranking" if "pairs" in s else "classification"))):
        try:
            return dict(read(json.loads((output / name).read_text(encoding="utf-8"))), folder=str(output))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def latest_state(output: Path) -> tuple[Path, dict[str, Any], str] | None:
    """``(run folder, trainer state, mode)`` of the latest checkpoint in ``output`` or, for a k-fold or few-shot
    run, in its first fold or seed that has one; ``None`` when there is none."""
    places = [(output, "plain")] + [(p, mode) for prefix, mode in (("fold-", "k-fold"), ("seed-", "few-shot"))
                                    for p in sorted(output.glob(f"{prefix}*")) if p.is_dir()]
    for folder, mode in places:
        found = ckpt.list_checkpoints(folder)
        if found:
            return folder, ckpt.read_state(found[-1]), mode
    return None


def check_start_model(output: Path, model: torch.nn.Module, resume: bool) -> None:
    """Refuse resuming ``output`` from another start model than its run's, before any passage is encoded."""
    found = latest_state(Path(output)) if resume else None
    if found is not None and "start_model" in found[1]:
        ckpt.compare_start_models(found[1]["start_model"], model_identity(model))


def _kind_of_state(state: dict[str, Any], mode: str) -> dict[str, Any]:
    if "pretrain" in state:  # (a graphdoc pretrain checkpoint)
        return {"task": "pretraining", "mode": mode, "folds": None, "shots": None}
    config = state.get("config", {})
    task = "classification" if "head_lr" in config else "ranking"
    return {"task": task, "mode": mode, "folds": None, "shots": config.get("shots")}


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


class EpochLoop:
    """Optimiser, schedule and epoch checkpoints of one run into ``output``.

    ``clip_per_group`` clips each parameter group's gradients on its own (a probe head trained alongside
    must not scale the model's gradients); else all of them together. ``data``: the
    :func:`data_fingerprint` of the training data; a run resumes only over the same data.
    """

    def __init__(self, model: torch.nn.Module, config, output: Path, total_steps: int, param_groups=None,
                 clip_per_group: bool = False, data: str | None = None, show_progress_bar: bool | None = None) -> None:
        self.model, self.config, self.output, self.clip_per_group = model, config, output, clip_per_group
        self.data = data
        # None: shown when the logger shows INFO (as the CLI's does unless -q), like pretrain's and encode's bars
        self.show_progress_bar = logger.isEnabledFor(logging.INFO) if show_progress_bar is None else show_progress_bar
        self.optimizer = (torch.optim.AdamW(param_groups) if param_groups is not None
                          else build_optimizer(model, config))
        self.scheduler = build_scheduler(self.optimizer, config, total_steps)
        self.start = time.perf_counter()
        self.state: dict[str, Any] = {"epoch": 0, "step": 0, "best": None, "history": []}
        self.steps_per_epoch = max(1, total_steps // max(1, config.epochs))
        self.bar = None  # this epoch's progress bar
        #: what kind of run this is (see :func:`run_kind`; a k-fold driver sets its ``folds``), kept in checkpoints
        self.run = run_kind(config.section, shots=getattr(config, "shots", None))
        self.start_model: dict[str, Any] = {}  # model_identity of the weights the run starts from
        self.device = next(model.parameters()).device
        #: fp16 autocast through a trained encoder: its small gradients underflow without loss scaling
        self.scaler = torch.amp.GradScaler(self.device.type) if _scaled(model, self.device) else None

    def start_or_resume(self, resume: bool) -> None:
        """Continue after the latest checkpoint (``resume``), or refuse to overwrite an existing run."""
        found = ckpt.list_checkpoints(self.output)
        if found and not resume:
            raise GraphDocError(f"{self.output} already holds a fine-tuning run; pass --resume to continue it "
                                "or choose another --output")
        self.output.mkdir(parents=True, exist_ok=True)
        ckpt.remove_stale(self.output)
        self.start_model = model_identity(self.model)  # before any step: the weights the run starts from
        if resume and not found:  # a fold or few-shot seed the interrupted run had not begun is simply started
            logger.log(logging.WARNING if self.run["mode"] == "plain" else logging.INFO,
                       "nothing to resume in %s: starting from scratch", self.output)
        if not (resume and found):
            return
        self._check_resumable(ckpt.read_state(found[-1]))  # checked before loading
        with ckpt.unreadable_as_error(found[-1]):  # e.g. weights of another shape in an older run's checkpoint
            loaded = type(self.model).from_pretrained(found[-1] / ckpt.MODEL_DIR, device=self.model.device)
        _check_encoder_settings(loaded, self.model)
        with ckpt.unreadable_as_error(found[-1]):
            self.model.load_state_dict(loaded.state_dict())
        rng, state = ckpt.load_checkpoint(found[-1], self.optimizer, self.scheduler)
        with ckpt.unreadable_as_error(found[-1]):
            torch.set_rng_state(rng["torch_cpu.rank0"])
            if self.device.type == "cuda" and "torch_cuda.rank0" in rng:  # the GPU's dropout masks
                torch.cuda.set_rng_state(rng["torch_cuda.rank0"], self.device)
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.state = state
        if state["history"]:  # wall time counts the epochs before the interruption
            self.start -= state["history"][-1]["elapsed_s"]
        self._check_best_model()

    def _check_resumable(self, saved: dict[str, Any]) -> None:
        """Refuse a resume with other settings, another start model or other training data (in that order)."""
        now = dataclasses.asdict(self.config)
        for key in now:
            if key not in OPERATIONAL and saved.get("config", {}).get(key) != now[key]:
                raise GraphDocError(f"cannot resume with {key}={now[key]!r}: the run was started with "
                                    f"{saved.get('config', {}).get(key)!r}")
        ckpt.compare_start_models(saved.get("start_model", self.start_model), self.start_model)
        if saved.get("data", self.data) != self.data:
            raise GraphDocError(f"cannot resume {self.output} over different training data (document ids, "
                                "labels, queries or judgements): use the run's inputs or another --output")

    def _check_best_model(self) -> None:
        """After a resume: the run's best model must still be in ``OUTPUT/model``; rebuilt when the checkpoint
        holds its weights (no dev set, or the latest epoch was the best)."""
        folder = self.output / MODEL_DIR
        epoch, best_epoch = self.state["epoch"], self.state.get("best_epoch")
        if epoch == 0 or folder.exists():
            return
        if self.state["best"] is None or best_epoch == epoch:
            logger.warning("%s was missing: saved again from the checkpoint of epoch %d", folder, epoch)
            self.model.save_pretrained(folder)
            return
        raise GraphDocError(f"the run's best model {folder} (epoch {best_epoch}) is missing and cannot be rebuilt: "
                            f"the checkpoint holds epoch {epoch}'s weights only; train again into another --output")

    def step(self, loss: torch.Tensor) -> float:
        """Backward, clip, optimiser and schedule step; returns the loss."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)  # clipped at their true size
        else:
            loss.backward()
        groups = ([g["params"] for g in self.optimizer.param_groups] if self.clip_per_group
                  else [[p for p in self.model.parameters() if p.requires_grad]])
        for params in groups:
            torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm or float("inf"))  # None: no clipping
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skipped when a gradient overflowed
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.state["step"] += 1
        value = float(loss.detach())
        if self.bar is None:
            self.bar = progress_bar(total=self.steps_per_epoch, unit="step", leave=False,
                                    disable=not self.show_progress_bar,
                                    desc=f"{self.output.name}: epoch {self.state['epoch'] + 1}/{self.config.epochs}")
        self.bar.set_postfix(loss=f"{value:.4f}", lr=short_float(self.scheduler.get_last_lr()[0]), refresh=False)
        self.bar.update()
        if self.bar.n >= self.steps_per_epoch:  # closed before the epoch's dev score and log line
            self.close_bar()
        return value

    def close_bar(self) -> None:
        """Close this epoch's progress bar; the trainers call it however training ends, so that an error's line
        is the last on standard error (the bar's destructor wrote it again at exit)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def keeps(self, score: float | None) -> bool:
        """Whether the epoch that scored ``score`` (``None``: no dev set) is the model to keep in ``OUTPUT/model``:
        the best yet, or the latest without a dev set. The trainer saves it *before* :meth:`end_epoch`
        checkpoints the epoch: a run killed between the two redoes the epoch on resume and saves it again,
        where the other order left an older model behind as the run's own."""
        return score is None or self.state["best"] is None or score > self.state["best"]

    def end_epoch(self, row: dict[str, Any], score: float | None) -> bool:
        """Record the epoch, checkpoint it (only the latest is kept); True when ``score`` is the best yet."""
        self.close_bar()
        improved = score is not None and self.keeps(score)
        if improved:
            self.state["best"] = score
            self.state["best_epoch"] = self.state["epoch"] + 1
        self.state["history"].append(dict(row, epoch=self.state["epoch"] + 1, step=self.state["step"],
                                          elapsed_s=round(time.perf_counter() - self.start, 2)))
        self.state["epoch"] += 1
        self.state["config"] = dataclasses.asdict(self.config)
        self.state["data"] = self.data
        self.state["start_model"] = self.start_model
        self.state["run"] = self.run
        self.state["scaler"] = self.scaler.state_dict() if self.scaler is not None else None
        rng = {"torch_cpu.rank0": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["torch_cuda.rank0"] = torch.cuda.get_rng_state(self.device)
        ckpt.save_checkpoint(ckpt.checkpoint_dir(self.output, self.state["step"]), self.model, self.optimizer,
                             self.scheduler, rng, self.state)
        ckpt.prune_checkpoints(self.output, 1)
        return improved

    def summary(self, extra: dict[str, Any]) -> dict[str, Any]:
        """Write ``OUTPUT/finetune.json``: history, best score, wall time and peak memory of this process."""
        rss, cuda = peak_memory_mib(next(self.model.parameters()).device)
        out = {"epochs": self.state["epoch"], "steps": self.state["step"], "best": self.state["best"],
               "best_epoch": self.state.get("best_epoch"), "history": self.state["history"],
               "wall_s": round(time.perf_counter() - self.start, 2), "peak_rss_mib": round(rss, 1),
               "peak_cuda_mib": cuda, **extra}
        return write_summary(self.output, out)


def _scaled(model: torch.nn.Module, device: torch.device) -> bool:
    """Whether ``model`` (a graphdoc or flat model, or a classifier around one) trains its passage encoder under
    fp16 autocast: gradients then need loss scaling (bf16 and fp32 need none)."""
    encoder = getattr(model, "passage_encoder", None) or getattr(getattr(model, "encoder", None), "passage_encoder",
                                                                   None)
    if encoder is None or not any(p.requires_grad for p in encoder.parameters()):
        return False
    return autocast_dtype(device, encoder.config.precision) == torch.float16


def write_summary(output: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """``OUTPUT/finetune.json``; returns ``summary``."""
    with atomic_write(output / SUMMARY_NAME, "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=2)
    return summary
