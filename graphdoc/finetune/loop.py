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
from tqdm.auto import tqdm

from graphdoc.errors import GraphDocError
from graphdoc.fileio import atomic_write
from graphdoc.training import checkpoint as ckpt
from graphdoc.training.metrics import peak_memory_mib
from graphdoc.training.optim import build_optimizer, build_scheduler

logger = logging.getLogger(__name__)

SUMMARY_NAME = "finetune.json"
#: settings that may change on resume: they do not change what is learned
OPERATIONAL = ("cache_dir",)


def data_fingerprint(data: Any) -> str:
    """A digest of what a run trains on (ids, labels, judgements: anything JSON), checked on resume."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


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
                 clip_per_group: bool = False, data: str | None = None) -> None:
        self.model, self.config, self.output, self.clip_per_group = model, config, output, clip_per_group
        self.data = data
        self.optimizer = (torch.optim.AdamW(param_groups) if param_groups is not None
                          else build_optimizer(model, config))
        self.scheduler = build_scheduler(self.optimizer, config, total_steps)
        self.start = time.perf_counter()
        self.state: dict[str, Any] = {"epoch": 0, "step": 0, "best": None, "history": []}
        self.steps_per_epoch = max(1, total_steps // max(1, config.epochs))
        self.bar = None  # this epoch's progress bar (shown on a terminal only)

    def start_or_resume(self, resume: bool) -> None:
        """Continue after the latest checkpoint (``resume``), or refuse to overwrite an existing run."""
        found = ckpt.list_checkpoints(self.output)
        if found and not resume:
            raise GraphDocError(f"{self.output} already holds a fine-tuning run; pass --resume to continue it "
                                "or choose another --output")
        self.output.mkdir(parents=True, exist_ok=True)
        ckpt.remove_stale(self.output)
        if resume and not found:
            logger.warning("nothing to resume in %s: starting from scratch", self.output)
        if not (resume and found):
            return
        saved = json.loads((found[-1] / ckpt.STATE_NAME).read_text(encoding="utf-8"))  # checked before loading
        if saved.get("data", self.data) != self.data:
            raise GraphDocError(f"cannot resume {self.output} over different training data (document ids, "
                                "labels, queries or judgements): use the run's inputs or another --output")
        now = dataclasses.asdict(self.config)
        for key in now:
            if key not in OPERATIONAL and saved["config"].get(key) != now[key]:
                raise GraphDocError(f"cannot resume with {key}={now[key]!r}: the run was started with "
                                    f"{saved['config'].get(key)!r}")
        loaded = type(self.model).from_pretrained(found[-1] / ckpt.MODEL_DIR, device=self.model.device)
        self.model.load_state_dict(loaded.state_dict())
        rng, state = ckpt.load_checkpoint(found[-1], self.optimizer, self.scheduler)
        torch.set_rng_state(rng["torch_cpu.rank0"])
        self.state = state
        if state["history"]:  # wall time counts the epochs before the interruption
            self.start -= state["history"][-1]["elapsed_s"]

    def step(self, loss: torch.Tensor) -> float:
        """Backward, clip, optimiser and schedule step; returns the loss."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        groups = ([g["params"] for g in self.optimizer.param_groups] if self.clip_per_group
                  else [[p for p in self.model.parameters() if p.requires_grad]])
        for params in groups:
            torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm or float("inf"))
        self.optimizer.step()
        self.scheduler.step()
        self.state["step"] += 1
        value = float(loss.detach())
        if self.bar is None:
            self.bar = tqdm(total=self.steps_per_epoch, unit="step", leave=False, disable=None,
                            desc=f"{self.output.name}: epoch {self.state['epoch'] + 1}/{self.config.epochs}")
        self.bar.set_postfix(loss=f"{value:.4f}", lr=f"{self.scheduler.get_last_lr()[0]:.2e}", refresh=False)
        self.bar.update()
        if self.bar.n >= self.steps_per_epoch:  # closed before the epoch's dev score and log line
            self._close_bar()
        return value

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def end_epoch(self, row: dict[str, Any], score: float | None) -> bool:
        """Record the epoch, checkpoint it (only the latest is kept); True when ``score`` is the best yet."""
        self._close_bar()
        improved = score is not None and (self.state["best"] is None or score > self.state["best"])
        if improved:
            self.state["best"] = score
            self.state["best_epoch"] = self.state["epoch"] + 1
        self.state["history"].append(dict(row, epoch=self.state["epoch"] + 1, step=self.state["step"],
                                          elapsed_s=round(time.perf_counter() - self.start, 2)))
        self.state["epoch"] += 1
        self.state["config"] = dataclasses.asdict(self.config)
        self.state["data"] = self.data
        ckpt.save_checkpoint(ckpt.checkpoint_dir(self.output, self.state["step"]), self.model, self.optimizer,
                             self.scheduler, {"torch_cpu.rank0": torch.get_rng_state()}, self.state)
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


def write_summary(output: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """``OUTPUT/finetune.json``; returns ``summary``."""
    with atomic_write(output / SUMMARY_NAME, "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=2)
    return summary
