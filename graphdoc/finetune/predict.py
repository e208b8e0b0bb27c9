"""``predict``: labels and class probabilities of documents with a saved classifier, as JSON lines.

Each output line is ``{"id", "label", "probabilities": {label: p, ...}}``, in the input's order.
"""

from __future__ import annotations

import json
from pathlib import Path

from graphdoc.corpus import read_corpus
from graphdoc.errors import GraphDocError
from graphdoc.fileio import atomic_write
from graphdoc.finetune.classifier import DocumentClassifier


def predict(model_dir: str | Path, source: str | Path, output: str | Path, batch_size: int = 32,
            max_passages: int | None = None, device: str | None = None) -> int:
    """Classify every document of ``source`` into ``output`` (JSON lines); returns the number written."""
    if batch_size < 1 or (max_passages is not None and max_passages < 1):
        raise GraphDocError(f"batch_size and max_passages must be at least 1; got {batch_size}, {max_passages}")
    if Path(output).is_dir():
        raise GraphDocError(f"output {output} is a folder")
    classifier = DocumentClassifier.from_pretrained(model_dir, device=device)
    docs = list(read_corpus(source))
    if not docs:
        raise GraphDocError(f"no documents in {source}")
    probabilities = classifier.predict_proba(docs, batch_size, max_passages)  # [n, num_classes]
    with atomic_write(Path(output), "w", encoding="utf-8") as handle:
        for doc, row in zip(docs, probabilities.tolist()):
            best = max(range(len(row)), key=row.__getitem__)
            record = {"id": doc.id, "label": classifier.labels[best],
                      "probabilities": dict(zip(classifier.labels, row))}
            handle.write(json.dumps(record) + "\n")
    return len(docs)


def read_predictions(path: str | Path) -> list[dict]:
    """The records :func:`predict` wrote."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
