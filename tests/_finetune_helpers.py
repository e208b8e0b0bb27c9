"""Tiny ranking and classification data sets for the fine-tuning tests."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Callable

import pytest

TOPICS = {
    "fox": "the quick brown fox jumps over the lazy dog",
    "graph": "graph attention networks read documents as graphs of passages",
    "retrieval": "retrieval with dense vectors and bm25 can be fused",
    "unicode": "cafe naive uber resume unicode text is text too",
    "numbers": "numbers 1 2 3 4 5 6 7 8 9 10",
    "meeting": "meetings have topics and sections",
}


def ranking_interrupted_in_epoch(monkeypatch, epoch: int, start: Callable[[], Any]) -> None:
    """Run ``start()`` (a ranking fine-tuning) and interrupt it (KeyboardInterrupt) as epoch ``epoch`` (from 0)
    begins."""
    from graphdoc.finetune.ranking_trainer import RankingTrainer

    real_epoch = RankingTrainer._epoch

    def stop(self, at, source):
        if at == epoch:
            raise KeyboardInterrupt
        return real_epoch(self, at, source)

    with monkeypatch.context() as patch:
        patch.setattr(RankingTrainer, "_epoch", stop)
        with pytest.raises(KeyboardInterrupt):
            start()


@contextlib.contextmanager
def fine_tuning_killed_after_its_first_checkpoint(monkeypatch):
    """Within the block, a fine-tuning run (either task, any mode) is interrupted (KeyboardInterrupt) once its first
    epoch checkpoint is written: for k-fold and few-shot runs, in the first fold's or seed's run."""
    from graphdoc.finetune.loop import EpochLoop

    real_end_epoch = EpochLoop.end_epoch

    def end_epoch(self, row, score):
        real_end_epoch(self, row, score)
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(EpochLoop, "end_epoch", end_epoch)
        yield


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def ranking_files(folder: Path) -> dict[str, Path]:
    """Two documents per topic, one query per topic judging its first document relevant (and the second
    one for half of them)."""
    docs, queries, lines = [], [], ["query-id\tcorpus-id\tscore"]
    for i, (name, text) in enumerate(TOPICS.items()):
        docs.append({"_id": f"{name}-a", "title": name, "text": f"{text}. {text}. Long documents are split."})
        docs.append({"_id": f"{name}-b", "title": "", "text": f"{text} and something else entirely"})
        queries.append({"_id": f"q{i}", "text": text.split()[0] + " " + text.split()[-1]})
        lines.append(f"q{i}\t{name}-a\t1")
        if i % 2:
            lines.append(f"q{i}\t{name}-b\t1")
    return {"corpus": write_jsonl(folder / "corpus.jsonl", docs),
            "queries": write_jsonl(folder / "queries.jsonl", queries),
            "qrels": _write(folder / "qrels.tsv", "\n".join(lines) + "\n")}


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def labelled_files(folder: Path, per_class: int = 6) -> dict[str, Path]:
    """Two trivially separable classes (different words); dev repeats the training texts."""
    records = []
    for label, topic in (("animals", "fox"), ("numbers", "numbers")):
        for i in range(per_class):
            records.append({"_id": f"{label}{i}", "title": "", "text": f"{TOPICS[topic]} {i}", "label": label})
    return {"train": write_jsonl(folder / "train.jsonl", records),
            "dev": write_jsonl(folder / "dev.jsonl", [dict(r, _id="d" + r["_id"]) for r in records])}
