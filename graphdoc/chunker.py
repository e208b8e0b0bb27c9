"""Split documents into passages of about ``max_words`` words on sentence boundaries.

Sentences come from blingfire; passages never cross a section boundary. A word is a run of non-space
characters, or one Chinese or Japanese character (those scripts put no spaces between words). A "sentence"
longer than the limit (a list, a table, code: blingfire ends sentences at punctuation, not at line breaks) is
cut at line breaks first, its lines packed like sentences, and a line longer than the limit is cut at words
(its last run, if nothing joins it and it is under half the limit, shares the words of the run before it).
Every word of every section lands in exactly one passage, in order, and each passage records its character
offsets into the document text.

Words, sentences and lines are found as numpy arrays of offsets, and blingfire's library reads a section
:data:`SENTENCE_WINDOW` characters at a time: a 20 MB document chunks in ~1.5 s and ~240 MiB, where a Python tuple
a word and blingfire's Python wrapper took ~22 s and ~1.3 GB (``benchmarks/chunk_scale.py``).
"""

from __future__ import annotations

import ctypes
import logging
import re
from itertools import accumulate, pairwise
from typing import Callable, Iterable, Sequence

import blingfire
import numpy as np

from graphdoc.config import ChunkerConfig
from graphdoc.documents import Document, Passage, Section

logger = logging.getLogger(__name__)

# Chinese and Japanese are written without spaces between words: each of their characters (ideographs, kana)
# counts as a word, so that a passage of them holds about max_words characters and ends on a sentence end; a
# run of them as one "word" would span sentences and be cut anywhere to fit the encoder.
UNSPACED = "\u3040-\u3098\u309b-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
# combining marks stay with the character before them: the voicing marks of decomposed (NFD) kana (か + U+3099
# is が), variation selectors of ideographs, and the combining diacritics blocks
MARKS = ("\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\u3099\u309a\ufe00-\ufe0f\ufe20-\ufe2f"
         "\U000e0100-\U000e01ef")
WORD = re.compile(f"[{UNSPACED}][{MARKS}]*|[^\\s{UNSPACED}]+")
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines splits on

Span = tuple[int, int]

#: which chunking an index or a run's saved part was made with (recorded in its model identity; none recorded is
#: 1): 2 since stop 32, when a cut sentence's short last run stopped being a passage of its own
CHUNKER_VERSION = 2


def _table(ranges: Iterable[tuple[int, int]]) -> np.ndarray:
    """A lookup table over all code points: ``True`` in the given ``(first, last)`` ranges."""
    table = np.zeros(0x110000, dtype=bool)
    for first, last in ranges:
        table[first:last + 1] = True
    return table


# what WORD and the line-break search see, as tables: ``\s`` (str.isspace's characters, all below U+3001),
# the unspaced characters and the line breaks
_SPACE = _table((m.start(), m.start()) for m in re.finditer(r"\s", "".join(map(chr, range(0x3001)))))
_UNSPACED = _table((ord(first), ord(last)) for first, last in re.findall("(.)-(.)", UNSPACED))
_MARK = _table((ord(first), ord(last)) for first, last in re.findall("(.)(?:-(.))?", MARKS)
               for first, last in [(first, last or first)])
_BREAK = _table((ord(c), ord(c)) for c in LINE_BREAKS)


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _words(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``[start, end)`` character offsets of :data:`WORD`'s matches in a text given as code points, as two
    arrays: what ``WORD.finditer`` finds, at a few bytes a character instead of a Python tuple a word."""
    if not len(points):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    unspaced = _UNSPACED[points]
    other = ~(unspaced | _SPACE[points])
    unspaced_ends = unspaced  # where a word of an unspaced character ends: after it, or after its marks
    mark = _MARK[points]
    if mark.any():  # the marks of a run of them right after an unspaced character are that character's
        first_mark = mark & ~_before(mark)
        owned = (first_mark & _before(unspaced))[first_mark]
        attached = mark & np.concatenate(([False], owned))[np.cumsum(first_mark)]
        other &= ~attached
        unspaced_ends = (unspaced | attached) & ~_after(attached)
    starts = np.flatnonzero(unspaced | (other & ~_before(other)))
    ends = np.flatnonzero(unspaced_ends | (other & ~_after(other))) + 1
    return starts, ends


def _before(flags: np.ndarray) -> np.ndarray:
    """Whether the character before each one is flagged (``False`` for the first)."""
    return np.concatenate(([False], flags[:-1]))


def _after(flags: np.ndarray) -> np.ndarray:
    return np.concatenate((flags[1:], [False]))


# blingfire is run on windows of this many characters (it takes ~35 bytes a character): a book-length section
# is read a window at a time, each window ending where its last whole sentence ends
SENTENCE_WINDOW = 1_000_000


def _sentence_ends(text: str, window: int | None = None) -> np.ndarray:
    """The offsets where blingfire ends the sentences of ``text`` (ascending, unique), found ``window``
    characters (default :data:`SENTENCE_WINDOW`) at a time.

    A window's last sentence may run on past it, so each window but the last keeps the sentences before its
    last one and the next window starts where they end; a window of one sentence ends at its last line break
    (else at its last space, else at the next space) without a sentence end there. A text within one window
    gets blingfire's answer for the whole text; a longer one may get a sentence end moved near a window's
    start or end, as blingfire's answer depends on the text around (on the real data sets with 3,000-character
    windows: 8 of 26,036 chunkings differ from the whole-text ones).
    """
    window = window or SENTENCE_WINDOW
    ends: list[np.ndarray] = []
    position = 0
    while True:
        stop = position + window
        if stop >= len(text):
            ends.append(position + _blingfire_ends(text[position:]))
            return np.unique(np.concatenate(ends))
        found = _blingfire_ends(text[position:stop])
        if len(found) > 1:
            ends.append(position + found[:-1])
            position += int(found[-2])
            continue
        cut = _LAST_LINE_BREAK(text, position, stop)
        if cut <= position:
            cut = _LAST_SPACE(text, position, stop)
        if cut <= position:
            found = _SPACE_CHARACTER.search(text, stop)
            cut = found.start() if found else len(text)
        position = cut


def _blingfire_ends(text: str) -> np.ndarray:
    """Where blingfire ends the sentences of ``text`` (character offsets, in order): the ends of
    ``blingfire.text_to_sentences_and_offsets``, from the library's own function, without that wrapper's Python
    loop over every byte (a third of indexing time on QMSum) and its lists of offsets."""
    function = getattr(getattr(blingfire, "blingfire", None), "TextToSentencesWithOffsets", None)
    if function is None:  # a blingfire without its library handle where 0.1.8 keeps it: the public wrapper
        return np.array([end for _, end in blingfire.text_to_sentences_and_offsets(text)[1]], dtype=np.int64)
    data = text.encode("utf-8")
    size = 2 * len(data)  # the wrapper's sizes: blingfire writes the sentences, one a line, and two offsets each
    out = ctypes.create_string_buffer(size)
    starts, last_bytes = (ctypes.c_int32 * size)(), (ctypes.c_int32 * size)()
    written = function(ctypes.c_char_p(data), ctypes.c_int(len(data)), ctypes.byref(out), ctypes.byref(starts),
                       ctypes.byref(last_bytes), ctypes.c_int(size))
    sentences = out.value if written != -1 and written <= size else b""
    if not sentences.strip():  # an error, or a text without a word: no sentences
        return np.zeros(0, dtype=np.int64)
    last = np.frombuffer(last_bytes, dtype=np.int32, count=sentences.count(b"\n") + 1).astype(np.int64)
    if len(data) == len(text):  # ASCII: a byte a character
        return last + 1
    # a sentence ends after the character whose last byte blingfire gives: count the characters up to it
    return np.cumsum((np.frombuffer(data, dtype=np.uint8) & 0xC0) != 0x80)[last]


def _last(table: np.ndarray) -> Callable[[str, int, int], int]:
    """The offset just past the last character of ``text[start:stop]`` that ``table`` marks (``start`` if none),
    in linear time: a ``(?s:.*)[...]`` regex search tries every start when there is none, which took hours on a
    million characters with no line break (an unpunctuated transcript, a blob)."""
    def last(text: str, start: int, stop: int) -> int:
        found = np.flatnonzero(table[_code_points(text[start:stop])])
        return start + int(found[-1]) + 1 if len(found) else start
    return last


_SPACE_CHARACTER = re.compile(r"\s")
_LAST_LINE_BREAK = _last(_BREAK)
_LAST_SPACE = _last(_SPACE)


class _Words:
    """The words of ``text[start:end]`` and where its sentences and over-long sentences' lines begin.

    ``starts``/``ends``: absolute character offsets of the words; ``sentences``: the index of each sentence's
    first word (ascending, starting at 0); ``line_breaks[i]``: a line break lies between words ``i`` and ``i + 1``.
    """

    def __init__(self, text: str, start: int = 0, end: int | None = None) -> None:
        end = len(text) if end is None else end
        segment = text[start:end]
        points = _code_points(segment)
        starts, ends = _words(points)
        breaks = np.flatnonzero(_BREAK[points])
        del points
        self.line_breaks = np.searchsorted(breaks, starts[1:]) > np.searchsorted(breaks, ends[:-1])
        # a word starting at or past a sentence's end opens a new sentence (sentences without words vanish)
        sentence_of = np.searchsorted(_sentence_ends(segment), starts, side="right") if len(starts) else starts
        self.sentences = np.flatnonzero(np.diff(sentence_of, prepend=-1))
        starts += start  # absolute offsets
        ends += start
        self.starts, self.ends = starts, ends

    def __len__(self) -> int:
        return len(self.starts)

    def spans(self, first: int, last: int) -> list[Span]:
        return list(zip(self.starts[first:last].tolist(), self.ends[first:last].tolist()))

    def sentence_spans(self) -> list[list[Span]]:
        bounds = self.sentences.tolist() + [len(self)]
        return [self.spans(a, b) for a, b in pairwise(bounds)]

    def units(self, max_words: int) -> list[int]:
        """The first word of each packing unit: the sentences, each one over ``max_words`` words cut at its
        line breaks (blingfire runs list items, table rows and code lines together)."""
        bounds = self.sentences.tolist() + [len(self)]
        units: list[int] = []
        for a, b in pairwise(bounds):
            units.append(a)
            if b - a > max_words:
                units.extend((np.flatnonzero(self.line_breaks[a:b - 1]) + a + 1).tolist())
        return units


def sentence_word_spans(text: str, start: int = 0, end: int | None = None) -> list[list[Span]]:
    """The words of ``text[start:end]`` grouped by sentence, as absolute ``(start, end)`` spans.

    Sentence ends come from blingfire; every word is kept, whatever blingfire does with whitespace.
    """
    return _Words(text, start, end).sentence_spans()


def _pack_sizes(sizes: Sequence[int], max_words: int) -> list[tuple[int, int]]:
    """Greedily pack consecutive units of the given sizes (in words) into runs of at most ``max_words`` words:
    whole units where they fit; a unit over the limit is cut into runs of ``max_words`` words, its last run left
    open for what follows. A last run that nothing joined and that is under half the limit (the "hosts." after
    100 words of a 101-word sentence) shares the words of the run before it, so that neither is a stub.
    Returns each run's ``[first, last)`` word index. Linear in the units."""
    groups: list[tuple[int, int]] = []
    first = length = position = 0
    stub = False  # the open run is only the end of a cut unit
    for size in sizes:
        if length and length + size > max_words:
            _close(groups, first, length, stub, max_words)
            length = 0
        if size > max_words:  # nothing is open here
            last = (size - 1) // max_words * max_words  # start of the last run (1 to max_words words)
            groups.extend((position + i, position + i + max_words) for i in range(0, last, max_words))
            first, length, stub = position + last, size - last, True
        else:
            if not length:
                first = position
            length += size
            stub = False
        position += size
    if length:
        _close(groups, first, length, stub, max_words)
    return groups


def _close(groups: list[tuple[int, int]], first: int, length: int, stub: bool, max_words: int) -> None:
    """Append the run ``[first, first + length)``; a stub under half the limit is evened out with the run before
    it (a full run of the same cut unit), the first of the two taking the odd word."""
    if not stub or 2 * length >= max_words:
        groups.append((first, first + length))
        return
    start = groups[-1][0]
    middle = start + (first + length - start + 1) // 2
    groups[-1] = (start, middle)
    groups.append((middle, first + length))


def chunk_section(doc: Document, section_index: int, section: Section, max_words: int) -> list[Passage]:
    """The passages of one section (indices restart at 0; :func:`chunk_document` renumbers them)."""
    words = _Words(doc.text, section.start, section.end)
    units = words.units(max_words)
    groups = _pack_sizes(np.diff(units + [len(words)]).tolist(), max_words)
    if not groups:
        return []
    first, last = np.array(groups, dtype=np.int64).T
    return [Passage(doc.id, i, section_index, section.title, start, end, doc.text[start:end])
            for i, (start, end) in enumerate(zip(words.starts[first].tolist(), words.ends[last - 1].tolist()))]


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
        ends = list(accumulate(map(len, sentences)))[:-1]  # words before each sentence but the first
        near = [n for n in ends if len(words) / 4 <= n <= 3 * len(words) / 4]
        if near:
            mid = min(near, key=lambda n: (abs(n - mid), n))
        cut_left, cut_right = words[mid - 1][1], words[mid][0]
    else:  # one long token (e.g. a URL): cut it in the middle, between two grapheme clusters
        cut_left = cut_right = passage.start + _cluster_cut(passage.text, max(1, len(passage.text) // 2))
    left = _replace(passage, end=cut_left, text=doc_text[passage.start:cut_left])
    right = _replace(passage, start=cut_right, text=doc_text[cut_right:passage.end])
    return left, right


def _cluster_cut(text: str, at: int, reach: int = 32) -> int:
    """``at`` moved to the nearest grapheme cluster boundary (``regex``'s ``\\X``) within ``reach`` characters
    and inside ``text``, so that a letter keeps its combining marks and an emoji sequence its joiners; ``at``
    when there is none (a cluster longer than that)."""
    import regex  # a dependency of transformers and of graphdoc; only a token with no space needs it

    low = max(0, at - 2 * reach)
    ends = [low + m.end() for m in regex.finditer(r"\X", text[low:at + 2 * reach])][:-1]  # the last may run on
    near = [end for end in ends if abs(end - at) <= reach and 0 < end < len(text)]
    return min(near, key=lambda end: (abs(end - at), end)) if near else at


def fit_to_token_limit(
    doc_text: str,
    passages: list[Passage],
    make_input: Callable[[Passage], str],
    tokenize: Callable[[list[str]], list[list[int]]],
    max_tokens: int,
    limit: int | None = None,
) -> tuple[list[Passage], list[list[int]], int]:
    """Re-split passages whose encoder input has more than ``max_tokens`` tokens.

    Returns the passages (renumbered), the token ids of each one's encoder input (so the caller tokenizes every
    passage once), and how many passages were left out past ``limit`` (``None``: none are). Re-splitting only
    splits, so the first ``limit`` passages come from the first ``limit`` pieces of every round: what lies past
    them is dropped as soon as it is known to, before it is tokenized again, and counts once however many
    passages it would have made.

    A passage over the limit is halved, and a piece of it halved again without tokenizing it while its share of
    the passage's tokens (by characters) is over :data:`PRESPLIT` times the limit (a long token with no space in
    it: a base64 blob, a hyphenated string): re-tokenizing the whole once a level took 13 tokenizations and
    7.0 s for 1M characters of "a-b-", against 4 and 2.7 s (``benchmarks/token_fit.py``). Text of even density
    splits as halving one level at a time would.
    """
    items = list(passages)
    ids = tokenize([make_input(p) for p in items])
    left_out = 0
    while True:
        over = {i for i, t in enumerate(ids) if len(t) > max_tokens and len(items[i].text) > 1}
        if not over:
            return renumber(items), ids, left_out
        new_items, new_ids, pending = [], [], []
        for i, (p, t) in enumerate(zip(items, ids)):
            room = None if limit is None else limit - len(new_items)
            if room is not None and room <= 0:
                left_out += len(items) - i
                break
            if i in over:
                pieces, dropped = _halve(doc_text, p, len(t) / len(p.text), max_tokens, room)
                left_out += dropped
                pending.extend(range(len(new_items), len(new_items) + len(pieces)))
                new_items.extend(pieces)
                new_ids.extend([] for _ in pieces)
            else:
                new_items.append(p)
                new_ids.append(t)
        # number the pieces before building their inputs: the input may depend on the index (the
        # title goes on the first passage only); the first passage stays first, so kept ids stay valid
        items = renumber(new_items)
        for j, t in zip(pending, tokenize([make_input(items[j]) for j in pending])):
            new_ids[j] = t
        ids = new_ids


# a piece is split without tokenizing it while its estimated tokens are over this many times the limit: it would
# be split anyway unless its tokens a character are under 1/PRESPLIT of its passage's
PRESPLIT = 4


def _halve(doc_text: str, passage: Passage, density: float, max_tokens: int,
           room: int | None) -> tuple[list[Passage], int]:
    """``passage`` split in two, and each piece whose estimated tokens (``density`` tokens a character) are over
    :data:`PRESPLIT` times ``max_tokens`` split again, first pieces first, until ``room`` pieces are made
    (``None``: no limit). Returns the pieces in order and how many pieces past ``room`` were dropped unsplit."""
    pieces: list[Passage] = []
    stack = list(reversed(split_passage(doc_text, passage)))
    while stack and (room is None or len(pieces) < room):
        piece = stack.pop()
        if len(piece.text) > 1 and len(piece.text) * density > PRESPLIT * max_tokens:
            stack.extend(reversed(split_passage(doc_text, piece)))
        else:
            pieces.append(piece)
    return pieces, len(stack)


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
            hint = ("--max-passages N sets the cap, 0 for none; or chunker.max_passages, null for none"
                    if max_passages is None else "the max_passages argument set the cap")
            logger.warning("%d document(s) had more than %d passages: their first %d were %s and %d passages "
                           "left out (%s)", documents, limit, limit, done, passages, hint)

    def __repr__(self) -> str:
        c = self.config
        return f"Chunker(max_words={c.max_words}, max_passages={c.max_passages}, title={c.title!r})"
