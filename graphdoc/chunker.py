"""Split documents into passages of about ``max_words`` words on sentence boundaries.

Sentences come from blingfire; passages never cross a section boundary; a sentence longer than the
limit is split at word boundaries. Every word of every section lands in exactly one passage, in order,
and each passage records its character offsets into the document text.
"""

from __future__ import annotations

import logging
import re
from typing import Callable, Sequence

import blingfire

from graphdoc.config import ChunkerConfig
from graphdoc.documents import Document, Passage, Section

logger = logging.getLogger(__name__)

_WORD = re.compile(r"\S+")


def sentence_word_spans(text: str, start: int = 0, end: int | None = None) -> list[list[tuple[int, int]]]:
    """The words of ``text[start:end]`` grouped by sentence, as absolute ``(start, end)`` spans.

    Sentence ends come from blingfire; every word is kept, whatever blingfire does with whitespace.
    """
    end = len(text) if end is None else end
    segment = text[start:end]
    words = [(m.start(), m.end()) for m in _WORD.finditer(segment)]
    if not words:
        return []
    _, offsets = blingfire.text_to_sentences_and_offsets(segment)
    ends = sorted({e for _, e in offsets})
    sentences: list[list[tuple[int, int]]] = [[]]
    boundary = 0
    for w_start, w_end in words:
        # a word starting at or past the current sentence's end opens a new sentence
        while boundary < len(ends) and w_start >= ends[boundary]:
            boundary += 1
            if sentences[-1]:
                sentences.append([])
        sentences[-1].append((start + w_start, start + w_end))
    return [s for s in sentences if s]


def _pack(sentences: list[list[tuple[int, int]]], max_words: int) -> list[list[tuple[int, int]]]:
    """Greedily pack whole sentences into groups of at most ``max_words`` words."""
    groups: list[list[tuple[int, int]]] = []
    current: list[tuple[int, int]] = []
    for sentence in sentences:
        if current and len(current) + len(sentence) > max_words:
            groups.append(current)
            current = []
        while len(sentence) > max_words:  # an over-long sentence: split at word boundaries
            if current:
                groups.append(current)
                current = []
            groups.append(sentence[:max_words])
            sentence = sentence[max_words:]
        current = current + sentence
    if current:
        groups.append(current)
    return groups


def chunk_section(doc: Document, section_index: int, section: Section, max_words: int) -> list[Passage]:
    """The passages of one section (indices restart at 0; :func:`chunk_document` renumbers them)."""
    sentences = sentence_word_spans(doc.text, section.start, section.end)
    return [
        Passage(doc.id, i, section_index, section.title, g[0][0], g[-1][1], doc.text[g[0][0]:g[-1][1]])
        for i, g in enumerate(_pack(sentences, max_words))
    ]


def chunk_document(doc: Document, max_words: int = 100) -> list[Passage]:
    """All passages of a document, section by section, numbered in order. No cap is applied."""
    passages: list[Passage] = []
    for s, section in enumerate(doc.section_spans()):
        passages.extend(chunk_section(doc, s, section, max_words))
    return renumber(passages)


def renumber(passages: Sequence[Passage]) -> list[Passage]:
    return [p if p.index == i else _replace(p, index=i) for i, p in enumerate(passages)]


def _replace(p: Passage, **changes) -> Passage:
    fields = dict(doc_id=p.doc_id, index=p.index, section=p.section, section_title=p.section_title,
                  start=p.start, end=p.end, text=p.text)
    fields.update(changes)
    return Passage(**fields)


def split_passage(doc_text: str, passage: Passage) -> tuple[Passage, Passage]:
    """Split a passage in two halves at a word boundary (at a character if it is a single word)."""
    words = [(m.start() + passage.start, m.end() + passage.start) for m in _WORD.finditer(passage.text)]
    if len(words) >= 2:
        mid = len(words) // 2
        cut_left, cut_right = words[mid - 1][1], words[mid][0]
    else:  # one long token (e.g. text without spaces): cut it in the middle
        cut_left = cut_right = passage.start + max(1, len(passage.text) // 2)
    left = _replace(passage, end=cut_left, text=doc_text[passage.start:cut_left])
    right = _replace(passage, start=cut_right, text=doc_text[cut_right:passage.end])
    return left, right


def fit_to_token_limit(
    doc_text: str,
    passages: list[Passage],
    make_input: Callable[[Passage], str],
    tokenize: Callable[[list[str]], list[list[int]]],
    max_tokens: int,
) -> tuple[list[Passage], list[list[int]]]:
    """Re-split passages whose encoder input has more than ``max_tokens`` tokens.

    Returns the passages (renumbered) and the token ids of each one's encoder input, so the caller
    tokenizes every passage once.
    """
    items = list(passages)
    ids = tokenize([make_input(p) for p in items])
    while True:
        over = [i for i, t in enumerate(ids) if len(t) > max_tokens and len(items[i].text) > 1]
        if not over:
            return renumber(items), ids
        over_set = set(over)
        new_items, new_ids, pending = [], [], []
        for i, (p, t) in enumerate(zip(items, ids)):
            if i in over_set:
                for half in split_passage(doc_text, p):
                    pending.append(len(new_items))
                    new_items.append(half)
                    new_ids.append([])
            else:
                new_items.append(p)
                new_ids.append(t)
        # number the halves before building their inputs: the input may depend on the index (the
        # title goes on the first passage only); the first passage stays first, so kept ids stay valid
        items = renumber(new_items)
        for j, t in zip(pending, tokenize([make_input(items[j]) for j in pending])):
            new_ids[j] = t
        ids = new_ids


class Chunker:
    """Chunks documents under a :class:`ChunkerConfig` and keeps count of what the cap cuts."""

    def __init__(self, config: ChunkerConfig | None = None) -> None:
        self.config = config or ChunkerConfig()
        self.passages_cut = 0
        self.documents_cut = 0

    def __call__(self, doc: Document) -> list[Passage]:
        return chunk_document(doc, self.config.max_words)

    def cap(self, doc: Document, passages: list[Passage], max_passages: int | None = None) -> list[Passage]:
        """Apply the per-document passage cap, counting and logging what it cuts."""
        limit = max_passages if max_passages is not None else self.config.max_passages
        if limit is None or len(passages) <= limit:
            return passages
        cut = len(passages) - limit
        self.passages_cut += cut
        self.documents_cut += 1
        logger.debug("document %r: %d passages beyond the cap of %d not encoded", doc.id, cut, limit)
        return passages[:limit]

    def counts(self) -> tuple[int, int]:
        """(documents, passages) the cap has cut so far."""
        return self.documents_cut, self.passages_cut

    def warn_cut(self, since: tuple[int, int] = (0, 0)) -> None:
        """Warn about what the cap cut since ``since`` (a :meth:`counts`): a long document's end is not in
        its embedding, which a user should hear of."""
        documents, passages = self.documents_cut - since[0], self.passages_cut - since[1]
        if documents:
            logger.warning("%d document(s) had more than %d passages: their first %d were embedded and %d passages "
                           "left out (chunker.max_passages sets the cap; null for none)", documents,
                           self.config.max_passages, self.config.max_passages, passages)

    def __repr__(self) -> str:
        c = self.config
        return f"Chunker(max_words={c.max_words}, max_passages={c.max_passages}, title={c.title!r})"
