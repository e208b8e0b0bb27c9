"""Split documents into passages of about ``max_words`` words on sentence boundaries.

Sentences come from blingfire; passages never cross a section boundary. A word is a run of non-space
characters, or one Chinese or Japanese character (those scripts put no spaces between words). A "sentence"
longer than the limit (a list, a table, code: blingfire ends sentences at punctuation, not at line breaks) is
cut at line breaks first, its lines packed like sentences, and a line longer than the limit is cut at words.
Every word of every section lands in exactly one passage, in order, and each passage records its character
offsets into the document text.
"""

from __future__ import annotations

import logging
import re
from itertools import pairwise
from typing import Callable, Sequence

import blingfire

from graphdoc.config import ChunkerConfig
from graphdoc.documents import Document, Passage, Section

logger = logging.getLogger(__name__)

# Chinese and Japanese are written without spaces between words: each of their characters (ideographs, kana)
# counts as a word, so that a passage of them holds about max_words characters and ends on a sentence end; a
# run of them as one "word" would span sentences and be cut anywhere to fit the encoder.
UNSPACED = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
WORD = re.compile(f"[{UNSPACED}]|[^\\s{UNSPACED}]+")
# what str.splitlines splits on
_LINE_BREAK = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")

Span = tuple[int, int]


def sentence_word_spans(text: str, start: int = 0, end: int | None = None) -> list[list[Span]]:
    """The words of ``text[start:end]`` grouped by sentence, as absolute ``(start, end)`` spans.

    Sentence ends come from blingfire; every word is kept, whatever blingfire does with whitespace.
    """
    end = len(text) if end is None else end
    segment = text[start:end]
    words = [(m.start(), m.end()) for m in WORD.finditer(segment)]
    if not words:
        return []
    _, offsets = blingfire.text_to_sentences_and_offsets(segment)
    ends = sorted({e for _, e in offsets})
    sentences: list[list[Span]] = [[]]
    boundary = 0
    for w_start, w_end in words:
        # a word starting at or past the current sentence's end opens a new sentence
        while boundary < len(ends) and w_start >= ends[boundary]:
            boundary += 1
            if sentences[-1]:
                sentences.append([])
        sentences[-1].append((start + w_start, start + w_end))
    return [s for s in sentences if s]


def split_lines(text: str, sentence: list[Span]) -> list[list[Span]]:
    """The words of a sentence grouped by the line they are on (a line break between two words cuts)."""
    lines = [[sentence[0]]]
    for (_, prev_end), word in pairwise(sentence):
        if _LINE_BREAK.search(text, prev_end, word[0]):
            lines.append([])
        lines[-1].append(word)
    return lines


def packing_units(text: str, sentences: list[list[Span]], max_words: int) -> list[list[Span]]:
    """The units :func:`_pack` keeps whole where it can: the sentences, each one over ``max_words`` words
    replaced by its lines (blingfire runs list items, table rows and code lines together)."""
    units: list[list[Span]] = []
    for sentence in sentences:
        units.extend(split_lines(text, sentence) if len(sentence) > max_words else [sentence])
    return units


def _pack(units: list[list[Span]], max_words: int) -> list[list[Span]]:
    """Greedily pack whole units into groups of at most ``max_words`` words; a unit over the limit is cut
    into runs of ``max_words`` words, its last run left open for what follows. Linear in the words."""
    groups: list[list[Span]] = []
    current: list[Span] = []
    for unit in units:
        if current and len(current) + len(unit) > max_words:
            groups.append(current)
            current = []
        if len(unit) > max_words:  # current is empty here
            last = (len(unit) - 1) // max_words * max_words  # start of the last run (1 to max_words words)
            groups.extend(unit[i:i + max_words] for i in range(0, last, max_words))
            current = unit[last:]
        else:
            current.extend(unit)
    if current:
        groups.append(current)
    return groups


def chunk_section(doc: Document, section_index: int, section: Section, max_words: int) -> list[Passage]:
    """The passages of one section (indices restart at 0; :func:`chunk_document` renumbers them)."""
    sentences = sentence_word_spans(doc.text, section.start, section.end)
    groups = _pack(packing_units(doc.text, sentences, max_words), max_words)
    return [
        Passage(doc.id, i, section_index, section.title, g[0][0], g[-1][1], doc.text[g[0][0]:g[-1][1]])
        for i, g in enumerate(groups)
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
    """Split a passage in two at a word boundary: at the sentence end nearest its middle word when one lies in
    the middle half of its words (a passage of whole sentences stays one of whole sentences), else at the middle
    word; at the middle character if it is a single word."""
    words = [(m.start() + passage.start, m.end() + passage.start) for m in WORD.finditer(passage.text)]
    if len(words) >= 2:
        mid = len(words) // 2
        sentences = sentence_word_spans(doc_text, passage.start, passage.end)
        ends = [sum(map(len, sentences[:i])) for i in range(1, len(sentences))]  # words before each sentence
        near = [n for n in ends if len(words) / 4 <= n <= 3 * len(words) / 4]
        if near:
            mid = min(near, key=lambda n: (abs(n - mid), n))
        cut_left, cut_right = words[mid - 1][1], words[mid][0]
    else:  # one long token (e.g. a URL): cut it in the middle
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

    def limit(self, max_passages: int | None = None) -> int | None:
        """The passage cap: ``max_passages`` when given, else the config's (``None``: no cap)."""
        return max_passages if max_passages is not None else self.config.max_passages

    def cap(self, doc: Document, passages: list[Passage], max_passages: int | None = None,
            cut_before: int = 0) -> list[Passage]:
        """Apply the per-document passage cap, counting and logging what it cuts (with ``cut_before``
        passages the caller already left out past the cap)."""
        limit = self.limit(max_passages)
        if limit is None or len(passages) + cut_before <= limit:
            return passages
        cut = max(len(passages) - limit, 0) + cut_before
        self.passages_cut += cut
        self.documents_cut += 1
        logger.debug("document %r: %d passages beyond the cap of %d not encoded", doc.id, cut, limit)
        return passages[:limit]

    def counts(self) -> tuple[int, int]:
        """(documents, passages) the cap has cut so far."""
        return self.documents_cut, self.passages_cut

    def warn_cut(self, since: tuple[int, int] = (0, 0), max_passages: int | None = None,
                 done: str = "embedded") -> None:
        """Warn about what the cap (``max_passages`` when given, else the config's) cut since ``since`` (a
        :meth:`counts`): a long document's end is not in what was ``done`` with it, which a user should hear of."""
        documents, passages = self.documents_cut - since[0], self.passages_cut - since[1]
        if documents:
            limit = self.limit(max_passages)
            hint = "chunker.max_passages sets the cap; null for none" if max_passages is None else \
                "the max_passages argument set the cap"
            logger.warning("%d document(s) had more than %d passages: their first %d were %s and %d passages "
                           "left out (%s)", documents, limit, limit, done, passages, hint)

    def __repr__(self) -> str:
        c = self.config
        return f"Chunker(max_words={c.max_words}, max_passages={c.max_passages}, title={c.title!r})"
