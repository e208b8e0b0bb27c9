"""Few-shot classification: ``k`` training examples per class, repeated with different seeds.

As in the DocSplit evaluation: for each of ``repeats`` seeds, draw ``k`` documents of every class from the
training set, fine-tune a fresh copy of the starting classifier on them (no dev set: the last epoch is
kept), and score the whole test set; report the mean and standard deviation over the seeds.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from graphdoc.errors import GraphDocError
from graphdoc.fileio import atomic_write
from graphdoc.finetune.classification import (
    ClassificationTrainer,
    LabelledInputs,
    evaluate_classifier,
)
from graphdoc.finetune.classifier import DocumentClassifier
from graphdoc.finetune.config import ClassificationConfig

logger = logging.getLogger(__name__)


def sample_per_class(labels: Mapping[str, str], k: int, seed: int) -> list[str]:
    """Exactly ``k`` ids of every label, drawn with ``seed``; sorted. A class with fewer than ``k`` is an error."""
    by_label: dict[str, list[str]] = {}
    for key in sorted(labels):
        by_label.setdefault(labels[key], []).append(key)
    rng = np.random.default_rng(seed)
    picked = []
    for label in sorted(by_label):
        keys = by_label[label]
        if len(keys) < k:
            raise GraphDocError(f"class {label!r} has {len(keys)} training examples; {k}-shot needs {k}")
        picked += [keys[i] for i in rng.choice(len(keys), size=k, replace=False)]
    return sorted(picked)


def few_shot(classifier: DocumentClassifier, config: ClassificationConfig, data: LabelledInputs,
             train_keys: Sequence[str], test_keys: Sequence[str], output: Path, shots: int,
             repeats: int = 10, resume: bool = False, show_progress_bar: bool | None = None) -> dict:
    """Fine-tune ``repeats`` copies on ``shots`` examples per class; mean and std of test accuracy and macro-F1.

    ``resume``: continue each seed's run (``OUTPUT/seed-N``) from its latest checkpoint; seeds not begun start.
    """
    train_labels = {k: data.labels[k] for k in train_keys}
    runs = []
    for r in range(repeats):
        seed = config.seed + r
        keys = sample_per_class(train_labels, shots, seed)
        logger.info("few-shot run %d/%d (seed %d): %d training documents", r + 1, repeats, seed, len(keys))
        run_cfg = dataclasses.replace(config, seed=seed)
        trainer = ClassificationTrainer(copy.deepcopy(classifier), run_cfg, data, keys,
                                        Path(output) / f"seed-{seed}", show_progress_bar=show_progress_bar)
        summary = trainer.train(resume)
        scores = evaluate_classifier(trainer.classifier, data, list(test_keys))
        runs.append({"seed": seed, "train": keys, **scores, "wall_s": summary["wall_s"]})
    ours = {f"seed-{config.seed + r}" for r in range(repeats)}
    others = sorted((p.name for p in Path(output).glob("seed-*") if p.is_dir() and p.name not in ours
                     and re.fullmatch(r"seed-[0-9]+", p.name)), key=lambda name: int(name[5:]))
    if others:  # a resume with a smaller --repeats, or another seed
        logger.warning("%s: %d seed run(s) not among this run's seeds (%d to %d) left out of fewshot.json: %s",
                       output, len(others), config.seed, config.seed + repeats - 1, ", ".join(others))
    result = {"shots": shots, "repeats": repeats, "runs": runs}
    for name in ("accuracy", "macro_f1"):
        values = [run[name] for run in runs]
        result[name] = {"mean": float(np.mean(values)), "std": float(np.std(values))}
    with atomic_write(Path(output) / "fewshot.json", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    return result

