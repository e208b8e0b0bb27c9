"""What a pretraining run returns (and writes as ``OUTPUT/pretrain.json``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphdoc.training.trainer import Trainer


@dataclass
class PretrainResult:
    """A finished (or stopped) pretraining run.

    ``seconds`` (the same as ``loop_seconds``), ``documents_per_s`` and ``steps_per_s`` cover this process's
    training loop (not model loading or the counting pass) over the whole run, resumptions included, as
    ``documents_used`` and ``steps`` do. ``loss`` is the last step's whole
    objective, ``mlm_loss`` its masked-language-model term (``None`` without one); ``epoch_loss`` the mean of
    the whole objective over the steps of the last epoch the run trained in (so far, when it stopped inside
    it), leaving out a step of one document (an epoch's last batch can be one), which has no negative and a
    contrastive loss of 0. ``loop_seconds`` is
    the training loop's time over the whole run, resumptions included (what ``max_seconds`` limits);
    ``time_up`` says the run stopped because that budget was spent. ``peak_rss_mib`` is the process's
    peak resident memory, ``peak_cuda_mib`` the peak CUDA memory allocated (``None`` on the CPU).
    ``documents_used`` counts a document again every epoch it trains in; ``distinct_documents``,
    ``empty_skipped`` and ``one_passage_skipped`` count the corpus's documents once each (as far as the run
    read it), so ``documents_used / distinct_documents`` is the number of epochs run.
    """

    model_dir: Path
    steps: int
    total_steps: int
    epoch: int
    documents_used: int
    empty_skipped: int
    one_passage_skipped: int
    loss: float | None
    seconds: float
    documents_per_s: float
    steps_per_s: float
    peak_rss_mib: float
    peak_cuda_mib: float | None
    cache_hits: int | None = None
    cache_misses: int | None = None
    mlm_loss: float | None = None
    loop_seconds: float | None = None
    time_up: bool = False
    distinct_documents: int = 0
    epoch_loss: float | None = None

    @classmethod
    def from_run(cls, trainer: "Trainer", peak_rss_mib: float, peak_cuda_mib: float | None,
                 cache_counts: tuple[int | None, int | None]) -> "PretrainResult":
        """The run's figures; ``cache_counts``: the passage cache's (hits, misses) over every process (the trainer's
        cache counts its own process's), ``(None, None)`` without one."""
        seconds = trainer.loop_seconds()  # the steps and documents before a resumption count, and their time
        hits, misses = cache_counts
        return cls(trainer.output / "model", trainer.step, trainer.total_steps, trainer.position.epoch,
                   trainer.stats.used, trainer.stats.empty_skipped, trainer.stats.one_passage_skipped,
                   trainer.last_loss, seconds, trainer.stats.used / max(seconds, 1e-9),
                   trainer.step / max(seconds, 1e-9),
                   peak_rss_mib, peak_cuda_mib, hits, misses,
                   trainer.last_mlm, seconds, trainer.time_up, trainer.stats.distinct, trainer.mean_epoch_loss())

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["model_dir"] = str(self.model_dir)
        return out
