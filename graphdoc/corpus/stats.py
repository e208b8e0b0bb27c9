"""Counting what a corpus reader yields and skips."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from graphdoc.documents import Document

logger = logging.getLogger(__name__)

#: How many ids of skipped documents :class:`ReadStats` keeps (the count is always exact).
MAX_SKIPPED_IDS = 1000


@dataclass
class ReadStats:
    """What :func:`graphdoc.corpus.read_corpus` read: documents yielded and empty documents (blank title
    and text) skipped.

    Pass one in to have it filled as the corpus is consumed; counts add up over several reads.
    ``skipped_ids`` holds the ids of the first :data:`MAX_SKIPPED_IDS` skipped documents. ``log_skipped``:
    whether the reader logs the skipped ones (INFO); False for a caller that reports them itself.
    """

    documents: int = 0
    empty_skipped: int = 0
    skipped_ids: list[str] = field(default_factory=list)
    log_skipped: bool = True

    def skip(self, doc_id: str) -> None:
        """Count one skipped document."""
        self.empty_skipped += 1
        if len(self.skipped_ids) < MAX_SKIPPED_IDS:
            self.skipped_ids.append(doc_id)


def is_empty(doc: Document) -> bool:
    """Whether a document has nothing to embed: its title and its text are both blank."""
    return not (doc.title.strip() or doc.text.strip())


def skip_empty(docs: Iterable[Document], stats: ReadStats, source: str) -> Iterator[Document]:
    """Yield the documents with a non-blank title or text, counting the others in ``stats``.

    A title alone is a document (the encoder embeds the title); the skipped ones are logged once, at INFO,
    when the corpus has been read to the end (unless ``stats.log_skipped`` is False).
    """
    skipped, examples = 0, []
    for doc in docs:
        if not is_empty(doc):
            stats.documents += 1
            yield doc
            continue
        stats.skip(doc.id)
        skipped += 1
        if len(examples) < 3:
            examples.append(doc.id)
    if skipped and stats.log_skipped:
        shown = ", ".join(repr(i) for i in examples) + (", ..." if skipped > len(examples) else "")
        logger.info("%s: skipped %d empty document(s) (%s)", source, skipped, shown)
