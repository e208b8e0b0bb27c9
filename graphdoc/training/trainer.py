"""The pretraining loop: batches of documents -> positive pairs -> vectors -> contrastive loss -> AdamW.

What a step does with the documents depends on the backbone: sub-document graphs
(:class:`~graphdoc.training.graph_pretraining.GraphPretraining`) or texts
(:class:`~graphdoc.training.flat_pretraining.FlatPretraining`); the loop, the data position, checkpoints,
the gather over processes and the log are the same for both.

Output folder layout::

    OUTPUT/pretrain_config.json     the settings of the run (model config resolved)
    OUTPUT/log.csv                  one row every ``log_every`` steps (see metrics.COLUMNS)
    OUTPUT/checkpoints/step-N/      resumable checkpoints, every checkpoint_every steps and at the last step
    OUTPUT/passage_cache/           frozen-encoder passage vectors (unless ``cache_dir`` is set)
    OUTPUT/model/                   the trained model: graphdoc.load_model(OUTPUT/model), either backbone
    OUTPUT/pretrain.json            what the run did: steps, documents used and skipped, throughput
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import random
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from graphdoc.backbones import FLAT, load_model
from graphdoc.config import check_precision
from graphdoc.corpus import ReadStats
from graphdoc.device import autocast_dtype
from graphdoc.errors import GraphDocError
from graphdoc.fileio import atomic_write, check_output_folder, recorded_path, writer_lock
from graphdoc.progress import logs_beside_bars, progress_bar, short_float
from graphdoc.serialization import backbone_of, saved_backbone
from graphdoc.training import checkpoint as ckpt
from graphdoc.training import data
from graphdoc.training.config import PretrainSetup
from graphdoc.training.distributed import (
    DistContext,
    average_gradients,
    barrier,
    from_main,
    gather_tensors,
    gather_with_grad,
)
from graphdoc.training.flat_pretraining import FlatPretraining
from graphdoc.training.graph_pretraining import GraphPretraining
from graphdoc.training.metrics import Throughput, TrainLog, peak_memory_mib
from graphdoc.training.objectives import LOSSES
from graphdoc.training.optim import build_optimizer, build_scheduler
from graphdoc.training.result import PretrainResult
from graphdoc.training.run_folder import (
    CONFIG_NAME,
    SUMMARY_NAME,
    RunFolder,
    check_resumable,
    corpus_identity,
)

logger = logging.getLogger(__name__)

#: The progress bar: steps, time left, loss, learning rate and documents/s (no steps/s), so that it fits 80
#: columns up to 99,999 steps, 99,999 documents/s and an hour's elapsed or remaining time.
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"


def bar_postfix(loss: float, lr: float, documents_per_s: float) -> str:
    """The progress bar's ``loss 2.371 lr 3.7e-4 1683 doc/s`` (``1.1 doc/s`` below 10, ``0.04 doc/s`` below 0.1:
    a slow run does not read as 0 documents/s)."""
    rate = (f"{documents_per_s:.0f}" if documents_per_s >= 9.95 else f"{documents_per_s:.1f}"
            if documents_per_s >= 0.095 else f"{documents_per_s:.2g}")
    return f"loss {loss:.3f} lr {short_float(lr)} {rate} doc/s"


class Trainer:
    """One pretraining run into ``output`` over ``sources``; see :func:`graphdoc.training.pretrain`."""

    def __init__(self, setup: PretrainSetup, sources: list[str], output: Path, ctx: DistContext,
                 device: torch.device, show_progress_bar: bool = False, fields=None) -> None:
        self.setup, self.cfg = setup, setup.pretrain
        self.sources, self.output, self.ctx, self.device = sources, output, ctx, device
        self.show_progress_bar = show_progress_bar and ctx.is_main
        self.step, self.total_steps = 0, 0
        self.position, self.stats = data.DataPosition(), data.DataStats()
        self.throughput = Throughput()
        self.last_loss: float | None = None
        self.last_mlm: float | None = None
        # [epoch, sum, steps] of the whole objective over the steps of the latest epoch that had a negative
        self.epoch_loss: list = [0, 0.0, 0]
        self.last_lr = self.last_grad_norm = 0.0
        self.seconds_before = 0.0  # training-loop seconds of the run before a resumption
        self.corpus: list[list] = []  # corpus_identity of the sources, set by start()
        self.time_up = False
        self.start_model: dict = {}  # checkpoint.start_identity of the weights the run started from
        self.precision: str | None = None  # the precision given (kept in checkpoints: the default of a resume)
        self.saved_step = 0  # the step of the latest checkpoint written or resumed from
        self.folder = RunFolder(setup, sources, output, ctx, fields)
        self.lock = contextlib.ExitStack()  # process 0's hold on the output folder, from start() to the end

    @property
    def cache(self):
        """The frozen-encoder passage vector cache (graph models in frozen mode), else ``None``."""
        return self.task.cache

    # ------------------------------------------------------------------ set-up
    def start(self, model: nn.Module | str | None, resume: bool, precision: str | None = None) -> None:
        """Build the model, optimiser and schedule, fresh or from the output's latest checkpoint.

        ``precision`` replaces the passage encoder's own (``passage_encoder.precision``), also on resume.
        """
        self.cfg.check_backbone(self.setup.backbone)
        self.precision = precision
        check_output_folder(self.output, "--output")  # (a file in the way: one line, before the lock's mkdir)
        if self.ctx.is_main:  # a second run into the same output stops here, before it looks at the folder (what
            # it finds may be the first run's), until pretrain() releases it; the lock removes a folder it made
            self.lock.enter_context(writer_lock(self.output))
        found = self.folder.check(resume)
        barrier(self.ctx)  # every process has checked the output before process 0 writes in it
        self.corpus = from_main(lambda: corpus_identity(self.sources), self.ctx)  # (its digest reads every byte)
        if self.ctx.is_main and self.output.is_dir():
            ckpt.remove_stale(self.output)
        latest = found[-1] if found else None
        state = ckpt.read_state(latest) if latest else None
        if state is not None:
            check_resumable(state, self.setup, self.ctx.world_size, self.corpus)
        self.model = self._start_model(model, precision, latest, state)
        if latest is None and self.ctx.is_main:  # first: a run stopped from here on is known as one
            self.setup = dataclasses.replace(self.setup, model=self.model.config)
            self.output.mkdir(parents=True, exist_ok=True)
            with atomic_write(self.output / CONFIG_NAME, "w", encoding="utf-8") as handle:
                json.dump(self.setup.to_dict(), handle, indent=2)
        self.task = self._new_task(resume=latest is not None)
        self.prepare = data.PreparedMemo(self.task.prepare, self.cfg.prepared_cache_mb)
        self.total_steps = state["total_steps"] if state else self._count_steps()
        self.optimizer = build_optimizer(self.task.trainable, self.cfg)
        self.scheduler = build_scheduler(self.optimizer, self.cfg, self.total_steps)
        fp16 = autocast_dtype(self.device, self.model.config.passage_encoder.precision) == torch.float16
        self.scaler = torch.amp.GradScaler("cuda") if fp16 and not self.cfg.frozen_encoder else None
        self._seed()
        if latest:
            self._restore(latest)
        barrier(self.ctx)
        self.log = TrainLog(self.output, self.step if latest else None, self.cfg.tensorboard) \
            if self.ctx.is_main else None

    def _new_task(self, resume: bool) -> FlatPretraining | GraphPretraining:
        """The backbone's side of the run. Process 0 opens the passage cache (making its folder in the output)
        before the others, which then only read it: when an error before the first step makes process 0 remove
        what the run wrote, no other process writes there afterwards."""
        if not self.ctx.is_main:
            barrier(self.ctx)
        task = (FlatPretraining(self.model, self.cfg, resume=resume, ctx=self.ctx) if self.setup.backbone == FLAT
                else GraphPretraining(self.model, self.cfg, self.output))
        if self.ctx.is_main:
            barrier(self.ctx)
        barrier(self.ctx)  # every process has opened it before any goes on
        return task

    def keep_cache(self) -> None:
        """Write the passage vectors encoded since the last checkpoint, for a run stopped by an error or Ctrl-C: the
        next run (or the resumed one) reads them instead of encoding them again. A failure to write them is
        logged, not raised over the run's own error."""
        task = getattr(self, "task", None)
        cache = task.cache if task is not None else None
        if cache is None:
            return
        try:
            cache.flush()
        except (OSError, GraphDocError) as err:
            logger.warning("could not write the passage cache's new vectors: %s", err)

    def discard_new_output(self) -> None:
        """After an error that left no checkpoint to resume from (a broken line found at step 7, before the first
        checkpoint): see :meth:`RunFolder.discard_new`, which keeps a folder holding one."""
        self.folder.discard_new(self.step)

    def _start_model(self, model: nn.Module | str | None, precision: str | None, latest: Path | None,
                     state: dict | None) -> nn.Module:
        """The model to train: a new one, or the latest checkpoint's once the model that today's ``model``,
        config and ``precision`` would start from is checked against the run's (on resume: one more load)."""
        start = self._new_model(model)
        if precision is not None:
            start.passage_encoder.config.precision = check_precision(precision)
        name = model if model is None or isinstance(model, nn.Module) else str(model)
        whole = isinstance(model, nn.Module) or saved_backbone(name or self._model_name()) is not None
        identity = ckpt.start_identity(start, whole)
        if latest is None:
            self.start_model = identity
            return start
        ckpt.check_start_model(latest, state, start, identity, self.device)
        self.start_model = state.get("start_model", identity)
        del start
        loaded = load_model(str(latest / ckpt.MODEL_DIR), backbone=self.setup.backbone, device=self.device)
        if precision is not None:
            loaded.passage_encoder.config.precision = check_precision(precision)
        return loaded

    def _model_name(self) -> str:
        return self.setup.model.passage_encoder.model_name_or_path

    def _new_model(self, model: nn.Module | str | None) -> nn.Module:
        backbone = self.setup.backbone
        if isinstance(model, nn.Module):
            if backbone_of(model) != backbone:
                raise GraphDocError(f"the model to train is a {backbone_of(model)} model; the setup's backbone "
                                    f"is {backbone}")
            return model.to(self.device)
        name = str(model) if model is not None else self._model_name()
        if saved_backbone(name) is None:
            return load_model(name, backbone=backbone, config=self.setup.model, device=self.device)
        given, default = self.setup.model.to_dict(), type(self.setup.model)().to_dict()
        for settings in (given, default):
            del settings["passage_encoder"]["model_name_or_path"]
        if given != default:  # model settings were given (a config's): say they go unused
            logger.warning("ignoring the given config's model settings: %s is a saved graphdoc model with its own",
                           name)
        return load_model(name, backbone=backbone, device=self.device)

    def _count_steps(self) -> int:
        """The length of the run and of its learning-rate schedule: ``epochs`` passes over the usable documents,
        cut to ``max_steps``; a streamed corpus, of unknown length, runs ``max_steps``."""
        cfg = self.cfg
        if any(data.is_named_corpus(s) for s in self.sources):
            return cfg.max_steps  # set: RunFolder.check refuses a streamed corpus without it
        # past `enough` usable documents the epochs hold max_steps: the rest of the corpus need not be read
        enough = None if cfg.max_steps is None else \
            max(2, (math.ceil(cfg.max_steps / cfg.epochs) - 1) * cfg.batch_size + 1)
        count = data.count_examples(self.sources, self.prepare, self.task.usable, limit=enough,
                                    fields=self.folder.fields)
        where = ", ".join(self.sources)
        if count == 0:
            raise GraphDocError(f"no document with {self.task.requirement} in {where}")
        if count == 1:  # the loss of a batch of one document is 0: it has no other document as a negative
            raise GraphDocError(f"pretrain needs at least 2 documents with {self.task.requirement} (each is a "
                                f"negative for the others); {where} has 1")
        if count == enough:
            return cfg.max_steps
        steps = cfg.epochs * math.ceil(count / cfg.batch_size)
        logger.info("%d documents with %s per epoch: %d steps", count, self.task.requirement, steps)
        if cfg.max_steps is not None and cfg.max_steps > steps:
            logger.info("pretrain.max_steps %d is more than pretrain.epochs %d take: the run and its learning-rate "
                        "schedule end at step %d", cfg.max_steps, cfg.epochs, steps)
        return min(steps, cfg.max_steps or steps)

    def _seed(self) -> None:
        torch.manual_seed(self.cfg.seed + self.ctx.rank)
        np.random.seed(self.cfg.seed + self.ctx.rank)
        random.seed(self.cfg.seed + self.ctx.rank)

    # ------------------------------------------------------------------ loop
    def train(self) -> PretrainResult:
        """Run until ``total_steps``, ``epochs`` or ``max_seconds``, checkpointing on the way; save the model.
        A streamed corpus (a named one, of unknown length) is read again until ``max_steps``, whatever ``epochs``
        says: its schedule was made for that many steps."""
        self.throughput = Throughput()  # the loop's own rates: model loading and counting are left out
        if 0 < self.step < self.total_steps:
            self._check_time()  # a resumed run whose budget is already spent takes no step (a finished one: none)
        if self.position.epoch == 0:  # (resumed inside the first epoch: it is read again from its start, and its
            self.stats.empty_skipped = 0  # empty documents counted again, not added to those counted before)
        streamed = any(data.is_named_corpus(s) for s in self.sources)
        with logs_beside_bars(self.show_progress_bar), progress_bar(
                total=self.total_steps, initial=self.step, desc="Pretraining", unit="step", bar_format=BAR_FORMAT,
                disable=not self.show_progress_bar) as bar:
            while self.step < self.total_steps and (streamed or self.position.epoch < self.cfg.epochs) \
                    and not self.time_up:
                for batch in self._epoch_batches():
                    self.last_loss, self.last_mlm = self._train_step(batch)
                    self._track_loss(len(batch.examples))
                    self.step += 1
                    self.position.offset = batch.end
                    self._after_step(len(batch.examples), bar)
                    if self.step >= self.total_steps or self._check_time():
                        break
                else:
                    self._end_epoch()
                    continue
                self._count_empty()  # stopped inside an epoch
        if self.step > self.saved_step:  # the last step too: a run stopped by max_seconds can go on from there
            self.save_checkpoint()
        return self._finish()

    def loop_seconds(self) -> float:
        """Seconds spent in the training loop, over the whole run (resumptions included)."""
        return self.seconds_before + self.throughput.elapsed

    def _check_time(self) -> bool:
        """Whether ``max_seconds`` is spent (decided by process 0, so every process stops at the same step)."""
        if self.cfg.max_seconds is None:
            return False
        spent = torch.tensor([float(self.loop_seconds() >= self.cfg.max_seconds)], device=self.device)
        self.time_up = bool(gather_tensors(spent, self.ctx)[0].item())
        if self.time_up:
            logger.info("time budget of %.0f s spent after step %d of %d", self.cfg.max_seconds, self.step,
                        self.total_steps)
        return self.time_up

    def _epoch_batches(self):
        # empty documents of this epoch, added to stats when it ends; named once, in the first epoch
        self._read_stats = ReadStats(log_skipped=self.position.epoch == 0)
        stream = data.epoch_stream(self.sources, self.position.epoch, self.cfg.seed, self.cfg.shuffle_buffer,
                                   self._read_stats, self.folder.fields)
        return data.batches(stream, self.prepare, self.cfg.batch_size, self.position.offset, self.stats,
                            self.task.usable, first_pass=self.position.epoch == 0)

    def _count_empty(self) -> None:
        """Add the epoch's empty documents to the stats in the first epoch only: they count the corpus's."""
        if self.position.epoch == 0:
            self.stats.empty_skipped += self._read_stats.empty_skipped

    def _end_epoch(self) -> None:
        if self.position.offset == 0:
            raise GraphDocError(f"no document with {self.task.requirement} in {', '.join(self.sources)}")
        if self.position.epoch == 0 and self.stats.used < 2:  # a streamed corpus: not counted before
            raise GraphDocError(f"pretrain needs at least 2 documents with {self.task.requirement} (each is a "
                                f"negative for the others); {', '.join(self.sources)} has {self.stats.used}")
        self._count_empty()
        logger.info("epoch %d done: %d documents used so far, %d empty and %d too short documents skipped",
                    self.position.epoch + 1, self.stats.used, self.stats.empty_skipped,
                    self.stats.one_passage_skipped)
        self.position = data.DataPosition(self.position.epoch + 1, 0)

    def _track_loss(self, documents: int) -> None:
        """Add the step's loss to its epoch's mean; a one-document step (no negative, its contrastive loss 0)
        counts in none."""
        if documents < 2 or self.last_loss is None:
            return
        if self.epoch_loss[0] != self.position.epoch:
            self.epoch_loss = [self.position.epoch, 0.0, 0]
        self.epoch_loss[1] += self.last_loss
        self.epoch_loss[2] += 1

    def mean_epoch_loss(self) -> float | None:
        """The mean loss over the steps of the latest epoch the run trained in (so far, if it stopped inside it)."""
        return self.epoch_loss[1] / self.epoch_loss[2] if self.epoch_loss[2] else None

    def _train_step(self, batch: data.Batch) -> tuple[float, float | None]:
        """One optimiser step over a global batch; returns its loss (and its MLM part, if any).

        A batch of one document (the end of an epoch) has no negative: its contrastive loss is 0 and, without
        an MLM loss, it has no gradient; the optimiser is not stepped (AdamW's momentum and weight decay would
        still move the weights), only the learning-rate schedule, so the run keeps its length.
        """
        cfg = self.cfg
        if len(batch.examples) == 1 and cfg.effective_mlm_weight(self.setup.backbone) == 0:
            logger.debug("step %d: one document, no negative: no optimiser step", self.step + 1)
            self.last_lr, self.last_grad_norm = self.scheduler.get_last_lr()[0], 0.0
            with warnings.catch_warnings():  # torch's hint that the optimiser has not stepped yet: here on purpose
                warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)`")
                self.scheduler.step()
            return 0.0, None
        local = data.shard(batch.examples, self.ctx.rank, self.ctx.world_size)
        loss_fn = LOSSES[cfg.objective]

        def global_loss(z: torch.Tensor) -> torch.Tensor:  # [2n_local, d] -> loss over the global batch
            return loss_fn(gather_with_grad(z, self.ctx), cfg.similarity, cfg.temperature)

        self.last_lr = self.scheduler.get_last_lr()[0]
        self.optimizer.zero_grad(set_to_none=True)
        loss, mlm = self.task.backward(local, self.position.epoch, global_loss,
                                       self.scaler.scale if self.scaler else None, self.device)
        params = [p for p in self.task.trainable.parameters() if p.requires_grad]
        average_gradients(params, self.ctx)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        # the norm before clipping is logged (inf: measure, do not clip)
        self.last_grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm or float("inf")))
        self._check_finite(loss)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        return loss, mlm

    def _check_finite(self, loss: float) -> None:
        """Stop before the optimiser applies a step whose loss or gradient norm is inf or nan: every step after it
        would be nan too. (With fp16 loss scaling an infinite gradient is normal: the scaler skips that step.)
        The loss and the norm are the same on every process, so all of them stop here."""
        norm = self.last_grad_norm
        if math.isfinite(loss) and (math.isfinite(norm) or self.scaler is not None):
            return
        clip = "" if self.cfg.max_grad_norm is not None else ", or set pretrain.max_grad_norm"
        raise GraphDocError(f"training diverged at step {self.step + 1}: loss {loss:.4g}, gradient norm {norm:.4g}; "
                            f"try a lower pretrain.lr (now {self.cfg.lr:g}) or a higher pretrain.temperature (now "
                            f"{self.cfg.temperature:g}){clip}; the model was not saved")

    def _after_step(self, documents: int, bar) -> None:
        self.throughput.update(documents)
        lr = self.last_lr
        rate = self.throughput.documents / max(self.throughput.elapsed, 1e-9)
        bar.set_postfix_str(bar_postfix(self.last_loss, lr, rate), refresh=False)
        bar.update(1)
        if self.log is not None and (self.step % self.cfg.log_every == 0 or self.step == self.total_steps):
            docs_s, steps_s = self.throughput.window()
            rss, cuda = peak_memory_mib(self.device)
            self.log.write({"step": self.step, "epoch": self.position.epoch, "loss": self.last_loss,
                            "mlm_loss": self.last_mlm, "grad_norm": self.last_grad_norm, "lr": lr,
                            "documents": self.stats.used, "docs_per_s": docs_s, "steps_per_s": steps_s,
                            "elapsed_s": self.loop_seconds(), "peak_rss_mib": rss, "peak_cuda_mib": cuda})
        if self.step % self.cfg.checkpoint_every == 0:
            self.save_checkpoint()

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> None:
        """Write a checkpoint of this step (process 0 writes; every process gives its random state)."""
        if self.cache is not None:
            self.cache.flush()
        rng = {f"torch_cpu.rank{r}": s.cpu() for r, s in
               enumerate(gather_tensors(torch.get_rng_state().to(self.device), self.ctx))}
        if self.device.type == "cuda":
            states = gather_tensors(torch.cuda.get_rng_state(self.device).to(self.device), self.ctx)
            rng.update({f"torch_cuda.rank{r}": s.cpu() for r, s in enumerate(states)})
        if self.ctx.is_main:
            ckpt.save_checkpoint(ckpt.checkpoint_dir(self.output, self.step), self.model, self.optimizer,
                                 self.scheduler, rng, self._state(), self.task.checkpoint_tensors())
            ckpt.prune_checkpoints(self.output, self.cfg.keep_checkpoints)
        barrier(self.ctx)
        self.saved_step = self.step
        if self.cache is not None:
            self.cache.refresh()

    def _state(self) -> dict:
        return {"step": self.step, "epoch": self.position.epoch, "offset": self.position.offset,
                "stats": dataclasses.asdict(self.stats), "total_steps": self.total_steps,
                "world_size": self.ctx.world_size, "backbone": self.setup.backbone,
                "loop_seconds": self.loop_seconds(), "corpus": self.corpus,
                "sources": [recorded_path(source) for source in self.sources],
                "fields": self.folder.fields.to_dict(), "pretrain": dataclasses.asdict(self.cfg),
                "start_model": self.start_model, "precision": self.precision,
                "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "loss": self.last_loss, "mlm_loss": self.last_mlm, "epoch_loss": self.epoch_loss}

    def _restore(self, folder: Path) -> None:
        rng, state = ckpt.load_checkpoint(folder, self.optimizer, self.scheduler)
        self.task.restore_tensors(folder)
        torch.set_rng_state(rng[f"torch_cpu.rank{self.ctx.rank}"])
        if self.device.type == "cuda" and f"torch_cuda.rank{self.ctx.rank}" in rng:
            torch.cuda.set_rng_state(rng[f"torch_cuda.rank{self.ctx.rank}"], self.device)
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.step = self.saved_step = state["step"]
        self.seconds_before = state.get("loop_seconds", 0.0)
        self.position = data.DataPosition(state["epoch"], state["offset"])
        stats = dict(state["stats"])
        if "distinct" not in stats:  # a checkpoint from before the distinct documents were counted: in the first
            stats["distinct"] = stats.get("used", 0) if state["epoch"] == 0 else 0  # epoch they are the used ones
        self.stats = data.DataStats(**stats)
        # a resumed run that takes no step (finished, or its time budget spent) still reports its last loss
        self.last_loss, self.last_mlm = state.get("loss"), state.get("mlm_loss")
        self.epoch_loss = list(state.get("epoch_loss") or [0, 0.0, 0])  # (none in a checkpoint before stop 28)
        logger.info("resumed from %s: step %d of %d, epoch %d, document %d of the epoch", folder, self.step,
                    self.total_steps, self.position.epoch + 1, self.position.offset)

    # ------------------------------------------------------------------ end
    def _cache_counts(self) -> tuple[int | None, int | None]:
        """The passage cache's hits and misses summed over the processes (each looks up its own documents'
        passages), or ``(None, None)`` without a cache."""
        if self.cache is None:
            return None, None
        counts = torch.tensor([self.cache.hits, self.cache.misses], dtype=torch.int64, device=self.device)
        hits, misses = torch.stack(gather_tensors(counts, self.ctx)).sum(0).tolist()
        return int(hits), int(misses)

    def _finish(self) -> PretrainResult:
        if self.cache is not None:
            self.cache.flush()
        rss, cuda = peak_memory_mib(self.device)
        result = PretrainResult.from_run(self, rss, cuda, self._cache_counts())
        if self.ctx.is_main:
            self.model.save_pretrained(self.output / ckpt.MODEL_DIR)
            with atomic_write(self.output / SUMMARY_NAME, "w", encoding="utf-8") as handle:
                json.dump(result.to_dict(), handle, indent=2)
            self.log.close()
        barrier(self.ctx)
        return result

