"""The chunker on arrays: word offsets, sentences and packing computed with numpy give exactly the passages of
the per-word Python reference (the chunker as it was before), and a book-length section is read by blingfire a
window at a time, so that chunking a large document takes a few bytes a character, not ~75."""

from __future__ import annotations

from types import SimpleNamespace

import blingfire
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from graphdoc import chunker  # noqa: E402
from graphdoc.chunker import (  # noqa: E402
    WORD,
    _blingfire_ends,
    _sentence_ends,
    _words,
    chunk_document,
    sentence_word_spans,
)
from graphdoc.documents import Document  # noqa: E402


from _chunker_reference import reference_chunks, reference_sentences  # noqa: E402


def chunks(doc, max_words):
    return [(p.section, p.start, p.end) for p in chunk_document(doc, max_words)]


# every kind of character the word and line rules tell apart: Latin words and punctuation, ideographs and kana
# (a word each, U+20000 beyond the BMP too), an emoji (not unspaced), spaces of several kinds, line breaks
PIECES = st.sampled_from(["graph", "Dr.", "end.", "why?", "3.14", "café", "(x)", "日本語", "カナ", "\U00020000",
                          "😀", " ", " ", "\t", "\u00a0", "\u3000", "\u2009", "\n", "\n\n", "\r\n", "\u2028", "\x85",
                          "\x1c", ". ", "! "])


@settings(max_examples=300, deadline=None, database=None)
@given(pieces=st.lists(PIECES, max_size=80), max_words=st.integers(1, 12))
def test_passages_are_the_reference_ones(pieces, max_words):
    text = "".join(pieces)
    doc = Document("d", text)
    assert chunks(doc, max_words) == reference_chunks(doc, max_words)
    assert sentence_word_spans(text) == reference_sentences(text, 0, len(text))


@settings(max_examples=100, deadline=None, database=None)
@given(parts=st.lists(st.lists(PIECES, max_size=30), min_size=1, max_size=4), max_words=st.integers(1, 12))
def test_sections_are_the_reference_ones(parts, max_words):
    doc = Document.from_dict({"_id": "s", "sections": [{"title": f"t{i}", "text": "".join(p)}
                                                      for i, p in enumerate(parts)]})
    assert chunks(doc, max_words) == reference_chunks(doc, max_words)


def test_words_match_the_word_pattern_on_every_character_class():
    text = "a\u00a0b\u3000日本 x\u200by 😀\U00020000z\x1c\u2028q"  # U+200B is no space to \\s: inside a word
    starts, ends = _words(chunker._code_points(text))
    assert list(zip(starts.tolist(), ends.tolist())) == [(m.start(), m.end()) for m in WORD.finditer(text)]
    assert [text[m.start():m.end()] for m in WORD.finditer(text)] == \
        ["a", "b", "日", "本", "x\u200by", "😀", "\U00020000", "z", "q"]


def test_real_documents_chunk_as_the_reference(data_dir):
    from graphdoc.corpus import read_corpus

    for i, doc in enumerate(read_corpus(data_dir / "qmsum" / "corpus.jsonl.gz")):
        if i == 3:
            break
        for max_words in (100, 7):
            assert chunks(doc, max_words) == reference_chunks(doc, max_words)


@settings(max_examples=300, deadline=None, database=None)
@given(pieces=st.lists(PIECES, min_size=1, max_size=60))
def test_blingfire_called_directly_gives_its_wrappers_sentence_ends(pieces):
    text = "".join(pieces)
    assume(WORD.search(text))  # a text without a word has no sentence to end (the wrapper makes up an offset)
    want = [end for _, end in blingfire.text_to_sentences_and_offsets(text)[1]]
    assert _blingfire_ends(text).tolist() == want


def test_without_blingfires_library_handle_its_wrapper_is_used(monkeypatch):
    text = "Café first. 日本語の文。 Last one"
    want = _blingfire_ends(text).tolist()
    monkeypatch.setattr(chunker, "blingfire", SimpleNamespace(  # a blingfire keeping its library elsewhere
        text_to_sentences_and_offsets=blingfire.text_to_sentences_and_offsets))
    assert _blingfire_ends(text).tolist() == want == [11, 18, 27]


# ------------------------------------------------------------------ blingfire a window at a time
def test_a_text_within_one_window_gets_blingfires_whole_answer():
    text = "First sentence here. Second one follows! And a third? Yes. " * 20
    _, offsets = blingfire.text_to_sentences_and_offsets(text)
    assert _sentence_ends(text, window=len(text)).tolist() == sorted({e for _, e in offsets})


def test_windows_end_where_their_last_whole_sentence_ends():
    text = "".join(f"Sentence number {i} is here. " for i in range(200))
    whole = _sentence_ends(text, window=len(text)).tolist()
    assert len(whole) == 200
    assert _sentence_ends(text, window=100).tolist() == whole  # ~3 sentences a window


def test_a_window_without_a_sentence_end_is_cut_at_a_line_break_and_adds_no_end():
    lines = [" ".join(f"w{i}x{j}" for j in range(9)) for i in range(300)]  # no punctuation: one sentence
    text = "\n".join(lines)
    assert len(_sentence_ends(text, window=len(text))) == 1
    assert _sentence_ends(text, window=500).tolist() == [len(text)]
    doc = Document("lines", text)
    chunker_window = chunker.SENTENCE_WINDOW
    try:
        chunker.SENTENCE_WINDOW = 500
        windowed = chunks(doc, 20)
    finally:
        chunker.SENTENCE_WINDOW = chunker_window
    assert windowed == chunks(doc, 20) == reference_chunks(doc, 20)
    assert windowed[:2] == [(0, 0, len("\n".join(lines[:2]))), (0, len("\n".join(lines[:2])) + 1,
                                                                 len("\n".join(lines[:4])))]


def test_a_window_of_one_token_is_cut_at_the_next_space_never_inside_a_word():
    token = "x" * 5_000
    text = f"{token} tail words here. More text follows."
    assert _sentence_ends(text, window=1_000).tolist() == _sentence_ends(text, window=len(text)).tolist()
    assert _sentence_ends(text, window=1_000).tolist()[-1] == len(text)


def test_every_word_lands_in_one_passage_when_sections_are_read_in_windows(monkeypatch):
    text = " ".join(f"Word{i} and more{i}." if i % 7 == 0 else f"word{i}" for i in range(5_000))
    monkeypatch.setattr(chunker, "SENTENCE_WINDOW", 997)
    passages = chunk_document(Document("w", text), 50)
    assert [w for p in passages for w in p.text.split()] == text.split()
    assert all(len(p.text.split()) <= 50 for p in passages)
    assert [p.index for p in passages] == list(range(len(passages)))


@settings(max_examples=300, deadline=None, database=None)
@given(pieces=st.lists(PIECES, max_size=60), data=st.data())
def test_a_windows_last_line_break_and_space_are_found_as_rfind_finds_them(pieces, data):
    """The window cut's scans (a table lookup over the code points, linear where a '(?s:.*)\\s' search took
    hours on a million characters with no line break) find what a reverse search finds."""
    text = "".join(pieces)
    start = data.draw(st.integers(0, len(text)))
    stop = data.draw(st.integers(start, len(text)))

    def reference(characters):
        found = max((text.rfind(c, start, stop) for c in characters), default=-1)
        return found + 1 if found >= 0 else start

    assert chunker._LAST_LINE_BREAK(text, start, stop) == reference(chunker.LINE_BREAKS)
    assert chunker._LAST_SPACE(text, start, stop) == reference({c for c in text if c.isspace()})


def test_a_section_over_a_window_without_sentence_ends_or_line_breaks_is_read_in_windows(monkeypatch):
    text = "so um yeah we should talk about the budget " * 300  # an unpunctuated transcript on one line
    assert _sentence_ends(text, window=1_000).tolist() == _sentence_ends(text, window=len(text)).tolist()
    doc = Document("asr", text)
    monkeypatch.setattr(chunker, "SENTENCE_WINDOW", 1_000)
    assert chunks(doc, 100) == reference_chunks(doc, 100)
