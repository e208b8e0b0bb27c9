"""``predict``: labels and class probabilities of documents with a saved classifier, as JSON lines.

Each output line is ``{"id", "label", "probabilities": {label: p, ...}}``, in the input's order. Documents
whose title and text are both blank are left out (one warning counts them), as every reader of a corpus
leaves them out; a title alone is classified.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from pathlib import Path

from graphdoc.config import check_count
from graphdoc.corpus import Fields, ReadStats, read_corpus
from graphdoc.errors import GraphDocError
from graphdoc.fileio import atomic_write, is_stdio

logger = logging.getLogger(__name__)

#: How many ids of skipped empty documents the warning names.
SHOWN_IDS = 5


def predict(model_dir: str | Path, source: str | Path, output: str | Path, batch_size: int = 32,
            max_passages: int | None = None, device: str | None = None, show_progress_bar: bool = False,
            fields: Fields | None = None) -> int:
    """Classify every document of ``source`` into ``output`` (JSON lines; ``"-"``: standard output); returns the
    number written.

    ``max_passages``: passages kept per document; ``None`` keeps the classifier's own, the cap it was trained
    and scored with (a classifier saved before the cap was recorded: its encoder's chunker cap). ``fields``
    names the record fields of the documents' id, text and title (:class:`graphdoc.corpus.Fields`).
    """
    check_count("batch_size", batch_size)
    if max_passages is not None:
        check_count("max_passages", max_passages)
    to_stdout = is_stdio(output)
    if not to_stdout:
        check_output(model_dir, output, source=source)
    from graphdoc.finetune.classifier import DocumentClassifier  # (torch: not at import, which the CLI's parser does)

    classifier = DocumentClassifier.from_pretrained(model_dir, device=device)
    stats = ReadStats(log_skipped=False)  # reported below, once, as a warning
    docs = list(read_corpus(source, stats=stats, fields=fields))
    if not docs:
        blank = f": its {stats.empty_skipped} document(s) have no title or text" if stats.empty_skipped else ""
        raise GraphDocError(f"no documents in {source}{blank}")
    if stats.empty_skipped:
        shown = ", ".join(map(repr, stats.skipped_ids[:SHOWN_IDS]))
        more = ", ..." if stats.empty_skipped > SHOWN_IDS else ""
        logger.warning("%s: %d document(s) with no title or text left out of the predictions (%s%s)", source,
                       stats.empty_skipped, shown, more)
    probabilities = classifier.predict_proba(docs, batch_size, max_passages, show_progress_bar)  # [n, num_classes]
    with contextlib.nullcontext(sys.stdout) if to_stdout else atomic_write(Path(output), "w",
                                                                           encoding="utf-8") as handle:
        for doc, row in zip(docs, probabilities.tolist()):
            best = max(range(len(row)), key=row.__getitem__)
            record = {"id": doc.id, "label": classifier.labels[best],
                      "probabilities": dict(zip(classifier.labels, row))}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")  # UTF-8, as the corpus: ids read as given
    return len(docs)


def check_output(model_dir: str | Path, output: str | Path, flag: str = "output", source=None) -> None:
    """Refuse an output that is a folder, a file of the input corpus ``source`` (the predictions would replace the
    documents) or lies inside the model folder (it would replace the model's files)."""
    from graphdoc.corpus import corpus_files
    from graphdoc.fileio import check_not_an_input, check_output_file

    output = Path(output)
    if output.is_dir():
        raise GraphDocError(f"{flag} {output} is a folder")
    check_output_file(output, flag)  # a folder it cannot be written in: said now, not after predicting them all
    if isinstance(source, (str, Path)):
        check_not_an_input(output, corpus_files(source), flag, "the predictions")
    model = Path(model_dir).expanduser().resolve()
    if output.expanduser().resolve().is_relative_to(model):
        raise GraphDocError(f"{flag} {output} is inside the model folder {model_dir}; write the predictions "
                            "elsewhere")


def read_predictions(path: str | Path) -> list[dict]:
    """The records :func:`predict` wrote."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
