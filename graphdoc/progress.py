"""Progress bars that read well on a terminal and in a log.

On a terminal (or in a notebook) a bar is tqdm's own, redrawn in place. When standard error is redirected
to a file, redrawing in place would fill the log with carriage returns; there the bar writes its state as a
plain line of its own instead, at most every :data:`LOG_INTERVAL` seconds (and once more when it ends).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import IO, Any

from tqdm.auto import tqdm as auto_tqdm

LOG_INTERVAL = 30.0  # seconds between two progress lines in a log


def short_float(value: float) -> str:
    """A learning rate in few columns, as the progress bars show it: ``3.7e-4``, ``0``."""
    return "0" if value == 0 else f"{value:.1e}".replace("e-0", "e-").replace("e+0", "e")


@contextlib.contextmanager
def no_transformers_bar() -> Iterator[None]:
    """Leave out transformers' own "Loading weights" and "Writing model shards" bars while a checkpoint loads or
    saves (graphdoc's step, not a progress report the user asked for); the Hugging Face hub's download bars stay
    as they were, and the caller's settings come back afterwards."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    enabled, hub_enabled = hf_logging.is_progress_bar_enabled(), not hub_utils.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # (which turns the hub's download bars off too)
    if hub_enabled:  # a first download from the hub still shows its progress
        hub_utils.enable_progress_bars()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()
        if not hub_enabled:  # each as the caller had it
            hub_utils.disable_progress_bars()


class LineWriter:
    """A file for tqdm that turns each redraw of a bar into one line (no carriage returns, no blank clears)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.last = ""  # the counter part of the last line written ("Indexing: 100%|###| 301/301")

    @property
    def encoding(self) -> str | None:
        return getattr(self.stream, "encoding", None)

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        counter = line.rsplit(" [", 1)[0]  # (the timing is the last bracket: a description may hold one)
        if line and counter != self.last:  # (close() writes the last state again: once is enough in a log)
            self.stream.write(line + "\n")
            self.last = counter

    def flush(self) -> None:
        self.stream.flush()


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _in_notebook() -> bool:
    """Whether tqdm.auto chose notebook widgets (it imports ``tqdm.notebook`` only then)."""
    notebook = sys.modules.get("tqdm.notebook")
    return notebook is not None and issubclass(auto_tqdm, notebook.tqdm)


def complete(bar) -> None:
    """End a bar whose total was a count made beforehand (a corpus's lines, blank documents among them) at 100%
    (drawn by its close: a refresh here would draw a bar its delay still hides)."""
    if bar.total is not None and bar.n != bar.total:
        bar.total = bar.n


class _BesideBars(logging.StreamHandler):
    """A console handler whose records make way for the bars on its terminal (tqdm.write), not run into them."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            auto_tqdm.write(self.format(record), file=self.stream)
            self.flush()
        except Exception:  # as StreamHandler.emit
            self.handleError(record)


@contextlib.contextmanager
def logs_beside_bars(active: bool = True) -> Iterator[None]:
    """While a bar is drawn on a terminal, have the root logger's console handlers write their records on lines of
    their own (on a terminal a record was glued onto the bar line). Their level, formatter and filters stay; no
    handler is added where there is none; in a log file (plain lines) or with no bar nothing changes."""
    root = logging.getLogger()
    swapped = []
    if active and _is_terminal(sys.stderr) and not _in_notebook():
        for handler in list(root.handlers):
            if type(handler) is logging.StreamHandler and _is_terminal(handler.stream):
                beside = _BesideBars(handler.stream)
                beside.setLevel(handler.level)
                beside.setFormatter(handler.formatter)
                beside.filters = list(handler.filters)
                root.handlers[root.handlers.index(handler)] = beside  # in its place: the handlers' order stays
                swapped.append((handler, beside))
    try:
        yield
    finally:
        for handler, beside in swapped:
            if beside in root.handlers:
                root.handlers[root.handlers.index(beside)] = handler


def progress_bar(iterable: Any = None, *, disable: bool = False, **kwargs: Any):
    """A tqdm bar (same arguments) that writes plain lines when standard error is not a terminal."""
    if not (disable or "file" in kwargs or _in_notebook() or _is_terminal(sys.stderr)):
        interval = max(LOG_INTERVAL, kwargs.get("mininterval", 0.0))
        # maxinterval too: tqdm's monitor thread would otherwise redraw a slow bar every 10 s; leave: a bar that
        # clears itself on a terminal (leave=False) still writes its last state into the log
        # miniters=1: tqdm's monitor thread then leaves the bar alone (its refresh printed a line, and the next update
        # another at once)
        kwargs.update(file=LineWriter(sys.stderr), dynamic_ncols=False, mininterval=interval, maxinterval=interval,
                      leave=True, ascii=True, miniters=1)
    return auto_tqdm(iterable, disable=disable, **kwargs)
