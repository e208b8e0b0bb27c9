"""Streaming training data: corpus -> shuffled documents -> prepared documents -> batches -> sub-documents.

The corpus is read again for every epoch and never held in memory (only a shuffle buffer of raw
documents). Documents whose text is empty (dropped by the corpus readers) or that make a single passage
cannot be split into two sub-documents (or, for the sentence and text objectives, have too few
sentences or words); they are skipped and counted in :class:`DataStats`.

Everything random is a pure function of the seed, the epoch and a document's position in the epoch's
stream, so a run resumed from :class:`DataPosition` (or split over several processes) sees exactly the
documents and splits an uninterrupted single-process run sees.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

import numpy as np
import torch

from graphdoc.corpus import Fields, ReadStats, read_corpus
from graphdoc.corpus.named import resolve
from graphdoc.documents import Document
from graphdoc.outputs import PreparedDocument
from graphdoc.training.objectives import make_split

logger = logging.getLogger(__name__)

T = TypeVar("T")
Prepare = Callable[[Document], Any]
Usable = Callable[[Any], bool]


def two_passages(prepared: PreparedDocument) -> bool:
    """A document the passage objectives can split: two passages or more."""
    return len(prepared.passages) >= 2


@dataclass
class DataPosition:
    """Where training stands in the data: the epoch, and the documents of its stream already used."""

    epoch: int = 0
    offset: int = 0


@dataclass
class DataStats:
    """Documents used and skipped (a resumed run restores the counts).

    ``used`` counts a document again every epoch it trains in (the documents the steps saw); the others
    count the documents of the corpus, once each, as the first epoch meets them: ``distinct`` those used,
    ``empty_skipped`` the empty ones, ``one_passage_skipped`` those too short for the objective: one passage
    (``half``, ``ict``), one sentence (``docsplit``) or no word (``simcse``, ``crop``).
    """

    used: int = 0
    empty_skipped: int = 0
    one_passage_skipped: int = 0
    distinct: int = 0


@dataclass
class Example:
    """A training document: its position in the epoch's stream and what the objective keeps of it (its
    prepared passages for ``half``/``ict``; its sentences or text for the others)."""

    position: int
    prepared: Any


@dataclass
class Batch:
    """One optimiser step's documents (all processes together) and the stream offset after them."""

    examples: list[Example]
    end: int


@dataclass
class SubDocument:
    """A sub-document (a subset of a document's passages) embedded as its own graph.

    ``vectors`` (``[n, hidden]``) holds cached passage vectors in frozen-encoder mode, else ``None``.
    """

    token_ids: list[list[int]]
    section_ids: list[int]
    vectors: torch.Tensor | None = None

    @property
    def num_passages(self) -> int:
        return len(self.section_ids)


def is_named_corpus(source: str) -> bool:
    return not os.path.exists(source) and resolve(source) is not None


def open_corpus(sources: Sequence[str], stats: ReadStats, fields: Fields | None = None) -> Iterator[Document]:
    """The documents of every source in turn, read with ``fields`` (empty ones skipped and counted by the
    readers)."""
    readers = [read_corpus(source, stats=stats, fields=fields) for source in sources]  # checks every source now
    for reader in readers:
        yield from reader


def shuffled(items: Iterable[T], buffer_size: int, rng: np.random.Generator) -> Iterator[T]:
    """Stream ``items`` in a random order drawn from a buffer of ``buffer_size`` (0: unchanged)."""
    if buffer_size <= 1:
        yield from items
        return
    buffer: list[T] = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        i = int(rng.integers(buffer_size))
        yield buffer[i]
        buffer[i] = item
    for i in rng.permutation(len(buffer)):
        yield buffer[i]


def epoch_stream(sources: Sequence[str], epoch: int, seed: int, buffer_size: int,
                 stats: ReadStats, fields: Fields | None = None) -> Iterator[Document]:
    """The documents of one epoch, in that epoch's shuffled order."""
    rng = np.random.default_rng([seed, epoch])
    return shuffled(open_corpus(sources, stats, fields), buffer_size, rng)


def batches(docs: Iterable[Document], prepare: Prepare, batch_size: int, start: int,
            stats: DataStats, usable: Usable = two_passages, first_pass: bool = True) -> Iterator[Batch]:
    """Group the documents from stream offset ``start`` on into batches of ``batch_size`` usable ones.

    The documents before ``start`` are passed over without being prepared; prepared documents that are
    not ``usable`` (default: one passage) are skipped, and counted in the ``first_pass`` over the corpus
    (as the documents used are in ``distinct``). The last batch of the stream may be smaller.
    """
    current: list[Example] = []
    position = start
    for position, doc in enumerate(docs):
        if position < start:
            continue
        prepared = prepare(doc)
        if not usable(prepared):
            stats.one_passage_skipped += first_pass
            continue
        stats.distinct += first_pass
        current.append(Example(position, prepared))
        if len(current) == batch_size:
            stats.used += len(current)
            yield Batch(current, position + 1)
            current = []
    if current:
        stats.used += len(current)
        yield Batch(current, position + 1)


class PreparedMemo:
    """``prepare`` with its results kept between epochs, within a memory budget.

    Chunking and tokenizing are most of an epoch's work in frozen-encoder mode, and a document prepares
    the same way every epoch, so each result is kept under a hash of the document's content (id, title,
    text, sections) until about ``max_mb`` MiB are held; documents past the budget are prepared anew each
    time. ``hits`` and ``misses`` count the calls.
    """

    def __init__(self, prepare: Prepare, max_mb: float) -> None:
        self.prepare = prepare
        self.budget = int(max_mb * 2 ** 20)
        self.held = self.hits = self.misses = 0
        self._memo: dict[bytes, Any] = {}
        self._full_logged = False

    def __call__(self, doc: Document) -> Any:
        key = content_key(doc)
        found = self._memo.get(key)
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        prepared = self.prepare(doc)
        size = approx_bytes(prepared)
        if self.held + size <= self.budget:
            self._memo[key] = prepared
            self.held += size
        elif not self._full_logged and self.budget:
            self._full_logged = True
            logger.info("prepared-document memo full (%d documents, about %.0f MiB): the rest are chunked and "
                        "tokenized every epoch", len(self._memo), self.held / 2 ** 20)
        return prepared

    def __len__(self) -> int:
        return len(self._memo)


def content_key(doc: Document) -> bytes:
    """A 128-bit hash of everything about a document that preparation reads."""
    digest = hashlib.blake2b(digest_size=16)
    sections = [(s.title, s.start, s.end) for s in doc.sections] if doc.sections else None
    for part in (doc.id, doc.title, repr(sections), doc.text):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.digest()


def approx_bytes(value: Any) -> int:
    """About what a prepared document holds in memory (Python lists of ints cost ~40 bytes a token)."""
    if isinstance(value, PreparedDocument):
        return (40 * sum(len(t) for t in value.token_ids) + sum(len(p.text) + 200 for p in value.passages)
                + len(value.document.text) + 200)
    if isinstance(value, str):
        return 50 + len(value)
    if isinstance(value, (list, tuple)):
        return 56 + sum(8 + approx_bytes(v) for v in value)
    return sys.getsizeof(value)


def count_examples(sources: Sequence[str], prepare: Prepare, usable: Usable = two_passages,
                   limit: int | None = None, fields: Fields | None = None) -> int:
    """The number of usable (default: two-passage or longer) documents in one pass over the corpus, or
    ``limit`` once that many are found (the rest of the corpus is not read)."""
    count = 0
    for doc in open_corpus(sources, ReadStats(log_skipped=False), fields):  # (named by the first epoch's pass)
        count += bool(usable(prepare(doc)))
        if limit is not None and count >= limit:
            break
    return count


def shard(examples: Sequence[Example], rank: int, world_size: int) -> list[Example]:
    """This process's contiguous block of a global batch (the blocks, concatenated, are the batch)."""
    bounds = np.linspace(0, len(examples), world_size + 1).round().astype(int)
    return list(examples[bounds[rank]:bounds[rank + 1]])


def sub_documents(examples: Sequence[Example], objective: str, seed: int, epoch: int,
                  ict_first_passage: float = 0.5) -> list[SubDocument]:
    """The two sub-documents (``half`` or ``ict``) of every example, in pairs: ``[a_1, b_1, a_2, b_2, ...]``.

    The split of a document depends only on ``(seed, epoch, position)``. Their passage vectors, in frozen
    mode, are looked up afterwards (:class:`~graphdoc.training.graph_pretraining.GraphPretraining`).
    """
    out: list[SubDocument] = []
    for example in examples:
        prepared = example.prepared
        rng = np.random.default_rng([seed, epoch, example.position])
        for part in make_split(objective, len(prepared.passages), rng, ict_first_passage):
            idx = part.tolist()
            out.append(SubDocument([prepared.token_ids[j] for j in idx], [prepared.passages[j].section for j in idx]))
    return out
