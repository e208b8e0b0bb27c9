"""The training log: a CSV file (and TensorBoard event files when asked for), throughput, peak memory."""

from __future__ import annotations

import csv
import io
import resource
import sys
import time
from pathlib import Path

import torch

from graphdoc.errors import GraphDocError
from graphdoc.fileio import atomic_write

LOG_NAME = "log.csv"
#: ``loss`` is the whole objective; ``mlm_loss`` its masked-language-model term before weighting (empty when off)
COLUMNS = ("step", "epoch", "loss", "mlm_loss", "grad_norm", "lr", "documents", "docs_per_s", "steps_per_s", "elapsed_s",
           "peak_rss_mib", "peak_cuda_mib")


def peak_memory_mib(device: torch.device) -> tuple[float, float | None]:
    """The process's peak resident memory, and the peak CUDA memory allocated on ``device``, in MiB."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_mib = rss / (1 << 20) if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB on Linux
    cuda = torch.cuda.max_memory_allocated(device) / (1 << 20) if device.type == "cuda" else None
    return rss_mib, cuda


class Throughput:
    """Documents and steps per second, over the whole run and since the last :meth:`window` call."""

    def __init__(self) -> None:
        self.start = self._mark = time.perf_counter()
        self.documents = self.steps = 0
        self._mark_docs = self._mark_steps = 0

    def update(self, documents: int) -> None:
        self.documents += documents
        self.steps += 1

    def window(self) -> tuple[float, float]:
        """``(documents/s, steps/s)`` since the previous call."""
        now = time.perf_counter()
        seconds = max(now - self._mark, 1e-9)
        rates = ((self.documents - self._mark_docs) / seconds, (self.steps - self._mark_steps) / seconds)
        self._mark, self._mark_docs, self._mark_steps = now, self.documents, self.steps
        return rates

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


class TrainLog:
    """Rows of :data:`COLUMNS` appended to ``OUTPUT/log.csv``; on resume, rows past the checkpoint go."""

    def __init__(self, output: Path, resume_step: int | None = None, tensorboard: bool = False) -> None:
        self.path = output / LOG_NAME
        if resume_step is None or not self.path.is_file():
            self.path.write_text(",".join(COLUMNS) + "\n", encoding="utf-8")
        else:
            self._truncate(resume_step)
        self.writer = _tensorboard_writer(output) if tensorboard else None

    def _truncate(self, step: int) -> None:
        """Keep the rows up to the checkpoint's ``step``. A last line without its line end is a row that a kill cut
        short (its step may read as an earlier one: ``1`` of ``12,...``): it goes too. Replaced atomically, so a kill
        here loses no row."""
        data = self.path.read_bytes()
        complete = data[:data.rfind(b"\n") + 1].decode("utf-8")
        rows = [r for r in csv.DictReader(io.StringIO(complete, newline="")) if int(r["step"]) <= step]
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        with atomic_write(self.path, "wb") as handle:
            handle.write(text.getvalue().encode("utf-8"))

    def write(self, row: dict) -> None:
        with open(self.path, "a", newline="", encoding="utf-8") as handle:
            csv.DictWriter(handle, COLUMNS, lineterminator="\n").writerow({k: _fmt(row.get(k)) for k in COLUMNS})
        if self.writer is not None:
            for key in ("loss", "mlm_loss", "grad_norm", "lr", "docs_per_s"):
                if row.get(key) is not None:
                    self.writer.add_scalar(f"pretrain/{key}", row[key], row["step"])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def read_log(output: Path) -> list[dict[str, str]]:
    """The rows of a run's CSV log."""
    with open(output / LOG_NAME, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _fmt(value) -> str:
    if value is None:
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _tensorboard_writer(output: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise GraphDocError("pretrain.tensorboard needs the tensorboard package: pip install tensorboard") from None
    return SummaryWriter(str(output / "tensorboard"))
