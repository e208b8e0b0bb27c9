"""The chunker: every word in exactly one passage, in order, within its section, on sentence boundaries."""

from __future__ import annotations


import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from graphdoc.chunker import WORD, Chunker, chunk_document, fit_to_token_limit, split_passage  # noqa: E402
from graphdoc.config import ChunkerConfig  # noqa: E402
from graphdoc.documents import Document, Passage, Section  # noqa: E402


def words(text: str) -> list[str]:
    """The chunker's words: runs of non-space characters, each Chinese or Japanese character on its own."""
    return WORD.findall(text)


def visible(text: str) -> str:
    """The text without its white space: what passages must hold between them, all of it, once."""
    return "".join(text.split())


# ------------------------------------------------------------------ strategies
TOKENS = st.one_of(
    st.sampled_from(["the", "Graph", "attention", "Dr.", "e.g.", "U.S.A.", "3.14", "end.", "why?", "wow!",
                     "café", "naïve", "日本語", "Привет", "مرحبا", "😀", "—", "...", '"quoted"', "(x)", ".", "!?"]),
    st.text(min_size=1, max_size=8),
)
SEPARATORS = st.sampled_from([" ", " ", " ", "  ", "\n", "\n\n", "\t", ". ", "! ", "? ", "\xa0", "\u3000", "\r\n"])


@st.composite
def texts(draw, max_tokens: int = 60) -> str:
    tokens = draw(st.lists(TOKENS, max_size=max_tokens))
    out = []
    for token in tokens:
        out.append(token)
        out.append(draw(SEPARATORS))
    return "".join(out)


@st.composite
def sectioned_documents(draw) -> Document:
    """A document whose sections are arbitrary spans of its text (boundaries may fall inside words)."""
    text = draw(texts())
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=4)))
    bounds = [0, *cuts, len(text)]
    sections = [Section(f"S{i}", a, b) for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    return Document("doc", text, sections=sections)


@st.composite
def record_documents(draw) -> Document:
    """A document built the way corpus readers build one: section texts joined with newlines."""
    sections = draw(st.lists(st.tuples(st.sampled_from(["", "Intro", "Méthodes"]), texts(30)),
                             min_size=1, max_size=4))
    return Document.from_dict({"_id": "r", "sections": [{"title": t, "text": x} for t, x in sections]})


# ------------------------------------------------------------------ properties
@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=sectioned_documents(), max_words=st.integers(1, 12))
def test_passages_partition_each_section_in_order(doc: Document, max_words: int) -> None:
    passages = chunk_document(doc, max_words)
    assert [p.index for p in passages] == list(range(len(passages)))
    for p in passages:
        assert p.doc_id == doc.id
        assert p.text == doc.text[p.start:p.end]
        section = doc.sections[p.section]
        assert section.start <= p.start < p.end <= section.end  # never crosses a section
        assert p.section_title == section.title
        assert 1 <= len(words(p.text)) <= max_words
        assert p.text == p.text.strip()  # starts and ends on a word
    # section by section, the passages hold exactly the section's words, in order
    for s, section in enumerate(doc.sections):
        expected = words(doc.text[section.start:section.end])
        got = [w for p in passages if p.section == s for w in words(p.text)]
        assert got == expected
    # passages come in document order
    assert [p.start for p in passages] == sorted(p.start for p in passages)
    assert all(a.end <= b.start for a, b in zip(passages, passages[1:]))


@settings(max_examples=100, deadline=None, database=None)
@given(doc=record_documents(), max_words=st.integers(1, 8))
def test_every_word_of_the_text_is_in_exactly_one_passage(doc: Document, max_words: int) -> None:
    passages = chunk_document(doc, max_words)
    assert [w for p in passages for w in words(p.text)] == words(doc.text)
    for p in passages:
        assert p.section_title == doc.sections[p.section].title


@settings(max_examples=60, deadline=None, database=None)
@given(text=st.text(max_size=200), max_words=st.integers(1, 20))
def test_arbitrary_unicode_text_keeps_every_word(text: str, max_words: int) -> None:
    passages = chunk_document(Document("u", text), max_words)
    assert [w for p in passages for w in words(p.text)] == words(text)
    assert "".join(visible(p.text) for p in passages) == visible(text)
    assert all(p.text == text[p.start:p.end] for p in passages)
    assert all(len(words(p.text)) <= max_words for p in passages)


# ------------------------------------------------------------------ exact cases
TEXT = "One two three. Four five. Six seven eight nine ten eleven. Twelve."


def test_whole_sentences_are_packed_up_to_the_limit() -> None:
    got = [p.text for p in chunk_document(Document("d", TEXT), max_words=5)]
    assert got == ["One two three. Four five.", "Six seven eight nine ten", "eleven. Twelve."]


def test_sentences_are_not_merged_past_the_limit() -> None:
    got = [p.text for p in chunk_document(Document("d", TEXT), max_words=4)]
    assert got == ["One two three.", "Four five.", "Six seven eight nine", "ten eleven. Twelve."]


def test_one_passage_when_everything_fits() -> None:
    (p,) = chunk_document(Document("d", TEXT), max_words=100)
    assert (p.start, p.end, p.text, p.section, p.section_title) == (0, len(TEXT), TEXT, 0, "")


def test_over_long_sentence_is_split_at_word_boundaries() -> None:
    text = " ".join(f"w{i}" for i in range(10)) + "."
    got = [p.text for p in chunk_document(Document("d", text), max_words=3)]
    assert got == ["w0 w1 w2", "w3 w4 w5", "w6 w7", "w8 w9."]  # no one-word stub: the last two runs share


def test_a_sentence_just_over_the_limit_is_halved_not_left_with_a_stub() -> None:
    sentence = " ".join(f"w{i}" for i in range(101)) + "."
    alone = chunk_document(Document("d", sentence), max_words=100)
    assert [len(p.text.split()) for p in alone] == [51, 50]  # before: 100 words, then "w100." alone
    # a short sentence after it joins the open end, which is then no stub: the cut stays at 100 words
    joined = chunk_document(Document("d", sentence + " Then a short one."), max_words=100)
    assert [len(p.text.split()) for p in joined] == [100, 5]
    # a long one after it does not fit: the stub is evened out, the next sentence is its own passage
    nxt = "The " + " ".join(f"x{i}" for i in range(99)) + "."
    following = chunk_document(Document("d", f"{sentence} {nxt}"), max_words=100)
    assert [len(p.text.split()) for p in following] == [51, 50, 100]
    assert "".join(p.text for p in following).replace(" ", "") == f"{sentence}{nxt}".replace(" ", "")


def test_sections_restart_packing_and_carry_titles() -> None:
    doc = Document.from_dict({"_id": "s", "sections": [
        {"title": "A", "text": "Alpha beta. Gamma."}, {"title": "B", "text": "Delta."}]})
    got = [(p.index, p.section, p.section_title, p.text) for p in chunk_document(doc, max_words=10)]
    assert got == [(0, 0, "A", "Alpha beta. Gamma."), (1, 1, "B", "Delta.")]


@pytest.mark.parametrize("text", ["", " ", "\n\n\t  \r\n", "\xa0\u3000"])
def test_empty_or_whitespace_text_gives_no_passages(text: str) -> None:
    assert chunk_document(Document("e", text)) == []


def test_empty_section_gives_no_passages_but_keeps_numbering() -> None:
    doc = Document("d", "a b\n\nc", sections=[Section("x", 0, 3), Section("empty", 3, 5), Section("z", 5, 6)])
    got = [(p.index, p.section, p.text) for p in chunk_document(doc, max_words=5)]
    assert got == [(0, 0, "a b"), (1, 2, "c")]


# ------------------------------------------------------------------ token limit
def char_tokenize(texts: list[str]) -> list[list[int]]:
    """A fake tokenizer: one token per character."""
    return [[ord(c) for c in t] for t in texts]


def with_title(p: Passage) -> str:
    return f"TITLE {p.text}" if p.index == 0 else p.text


@pytest.mark.parametrize("make_input", [lambda p: p.text, with_title])
@pytest.mark.parametrize("max_tokens", [12, 25, 40])
def test_fit_to_token_limit_resplits_until_everything_fits(make_input, max_tokens: int) -> None:
    text = "Graph attention networks read long documents as graphs of their passages. " * 3
    doc = Document("d", text)
    passages = chunk_document(doc, max_words=100)
    fitted, ids, _ = fit_to_token_limit(text, passages, make_input, char_tokenize, max_tokens)
    assert len(fitted) > len(passages)
    assert [p.index for p in fitted] == list(range(len(fitted)))
    # ids belong to the (renumbered) passages they sit beside
    assert ids == char_tokenize([make_input(p) for p in fitted])
    assert all(len(t) <= max_tokens for t in ids)
    assert all(p.text == text[p.start:p.end] for p in fitted)
    assert [w for p in fitted for w in words(p.text)] == words(text)


def test_fit_to_token_limit_leaves_fitting_passages_alone() -> None:
    doc = Document("d", TEXT)
    passages = chunk_document(doc, max_words=4)
    fitted, ids, _ = fit_to_token_limit(TEXT, passages, lambda p: p.text, char_tokenize, 100)
    assert fitted == passages
    assert ids == char_tokenize([p.text for p in passages])


def test_a_single_long_word_is_cut_at_characters() -> None:
    text = "x" * 50
    passages = chunk_document(Document("d", text), max_words=100)
    fitted, ids, _ = fit_to_token_limit(text, passages, lambda p: p.text, char_tokenize, 16)
    assert "".join(p.text for p in fitted) == text
    assert [len(t) for t in ids] == [12, 13, 12, 13]


def halving(text: str, passage: Passage, max_tokens: int) -> list[Passage]:
    """What fitting does, one level at a time: a passage over the limit (by characters) split in two, and so on."""
    if len(passage.text) <= max_tokens or len(passage.text) <= 1:
        return [passage]
    return [piece for half in split_passage(text, passage) for piece in halving(text, half, max_tokens)]


@pytest.mark.parametrize("text", ["x" * 100_000, "a-b- " * 5_000, "One two three. " * 3_000 + "z" * 20_000])
def test_a_passage_far_over_the_limit_is_tokenized_a_few_times(text: str) -> None:
    tokenized: list[int] = []

    def counting_tokenize(texts: list[str]) -> list[list[int]]:
        tokenized.append(sum(map(len, texts)))
        return char_tokenize(texts)

    passages = chunk_document(Document("d", text), max_words=100_000)
    fitted, ids, left_out = fit_to_token_limit(text, passages, lambda p: p.text, counting_tokenize, 16)
    # the same passages as halving level by level (13 levels and 13 tokenizations of the whole for "x" * 100,000)
    assert [(p.start, p.end) for p in fitted] == [(p.start, p.end) for p in halving(text, passages[0], 16)]
    assert all(len(t) <= 16 for t in ids) and left_out == 0
    assert len(tokenized) <= 4 and sum(tokenized) <= 4 * len(text)


@pytest.mark.parametrize("limit", [1, 3, 100, 5000])
def test_a_limit_keeps_the_first_passages_and_counts_what_it_leaves_out(limit: int) -> None:
    text = "Graph attention networks read long documents. " * 200 + "y" * 3_000 + " The end."
    passages = chunk_document(Document("d", text), max_words=50)
    whole, whole_ids, none_out = fit_to_token_limit(text, passages, with_title, char_tokenize, 24)
    fitted, ids, left_out = fit_to_token_limit(text, passages, with_title, char_tokenize, 24, limit)
    assert none_out == 0
    assert fitted == whole[:limit] and ids == whole_ids[:limit]
    # what is left out counts at least once however many passages it would have made
    assert (left_out > 0) == (len(whole) > limit) and len(fitted) + left_out <= len(whole)


def test_split_passage_halves_at_a_word_boundary() -> None:
    text = "zero one two three four"
    (p,) = chunk_document(Document("d", text), max_words=10)
    left, right = split_passage(text, p)
    assert (left.text, right.text) == ("zero one", "two three four")
    assert (left.start, left.end, right.start, right.end) == (0, 8, 9, 23)


def test_split_passage_cuts_at_the_sentence_end_nearest_the_middle() -> None:
    text = "One two three. Four five six seven eight. Nine ten."  # the middle word, "six", is mid-sentence
    (p,) = chunk_document(Document("d", text), max_words=20)
    assert [h.text for h in split_passage(text, p)] == ["One two three.", "Four five six seven eight. Nine ten."]
    text = "One two three four five six seven eight nine ten. Eleven."  # no sentence end in the middle half
    (p,) = chunk_document(Document("d", text), max_words=20)
    assert [h.text for h in split_passage(text, p)] == ["One two three four five", "six seven eight nine ten. Eleven."]


JAPANESE = "# 東京の歴史\n\n" + "".join(f"東京は第{i}の時代に長い間にわたって大きく発展してきました。" for i in range(40))


def test_chinese_and_japanese_characters_are_words_and_passages_end_on_sentences() -> None:
    text = "机器学习很有趣。我们研究图神经网络。"
    assert words(text)[:4] == ["机", "器", "学", "习"] and len(words(text)) == len(text)
    assert words("abc日本def 42") == ["abc", "日", "本", "def", "42"]
    doc = Document("ja", JAPANESE)
    passages = chunk_document(doc, max_words=100)
    assert passages[0].text.startswith("# 東京の歴史\n\n東京は第0")  # the heading stays with its text
    assert all(p.text.endswith("。") for p in passages) and len(passages) > 10
    assert all(len(words(p.text)) <= 100 for p in passages)
    assert "".join(visible(p.text) for p in passages) == visible(JAPANESE)


def test_decomposed_kana_and_variation_selectors_stay_with_their_character() -> None:
    import unicodedata

    assert words("か\u3099き 葛\U000e0100城 e\u0301") == ["か\u3099", "き", "葛\U000e0100", "城", "e\u0301"]
    composed = "がぎぐげご" * 30 + "。" + "ぱぴぷぺぽ" * 30 + "。"
    decomposed = unicodedata.normalize("NFD", composed)
    assert len(decomposed) == 2 * len(composed) - 2
    for text in (composed, decomposed):
        passages = chunk_document(Document("ja", text), max_words=40)
        # 150 characters a sentence, cut into 40-word runs: a voicing mark counts in its kana's word
        assert [len(words(p.text)) for p in passages] == [40, 40, 40, 31, 40, 40, 40, 31]
        assert all(unicodedata.normalize("NFC", p.text)[0] in "がぎぐげごぱぴぷぺぽ" for p in passages)
        assert "".join(p.text for p in passages) == text


def test_an_over_long_japanese_passage_is_halved_at_a_sentence_end() -> None:
    doc = Document("ja", JAPANESE)
    passages = chunk_document(doc, max_words=1000)  # 1,019 and 180 characters before fitting
    fitted, ids, _ = fit_to_token_limit(JAPANESE, passages, lambda p: p.text, char_tokenize, 200)
    assert len(fitted) > len(passages) and all(len(t) <= 200 for t in ids)
    assert all(p.text.endswith("。") for p in fitted)
    assert "".join(visible(p.text) for p in fitted) == visible(JAPANESE)


# ------------------------------------------------------------------ Chunker
def test_chunker_cap_counts_and_cuts() -> None:
    chunker = Chunker(ChunkerConfig(max_words=1, max_passages=3))
    doc = Document("d", "a b c d e")
    passages = chunker(doc)
    assert len(passages) == 5
    kept = chunker.cap(doc, passages)
    assert kept == passages[:3]
    assert (chunker.passages_cut, chunker.documents_cut) == (2, 1)
    assert chunker.cap(doc, passages, max_passages=4) == passages[:4]
    assert (chunker.passages_cut, chunker.documents_cut) == (3, 2)
    assert chunker.cap(doc, passages[:2]) == passages[:2]  # under the cap: nothing counted
    assert (chunker.passages_cut, chunker.documents_cut) == (3, 2)


def test_chunker_without_cap_keeps_everything() -> None:
    chunker = Chunker(ChunkerConfig(max_words=1, max_passages=None))
    doc = Document("d", "a b c d e")
    assert len(chunker.cap(doc, chunker(doc))) == 5
    assert chunker.passages_cut == 0


def test_chunker_repr() -> None:
    assert repr(Chunker(ChunkerConfig(max_words=7, max_passages=None, title="all"))) == \
        "Chunker(max_words=7, max_passages=None, title='all')"


@pytest.mark.parametrize("token", [
    "👨\u200d👩\u200d👧\u200d👦" * 9,  # a family emoji: four people joined by ZWJs
    "👍🏽" * 21,  # with a skin tone modifier
    "हिन्दीवाक्य" * 13,  # Devanagari with vowel signs and viramas
    "e\u0301" * 51,  # decomposed accents
])
@pytest.mark.parametrize("lead", ["", "a", "ab", "abc"])
def test_a_single_token_is_halved_between_grapheme_clusters(token, lead) -> None:
    """A passage of one long token was cut at its middle code point: between a letter and its vowel sign, or
    inside an emoji sequence (the right half starting with a ZWJ or a skin tone)."""
    import regex

    text = lead + token
    passage = Passage(doc_id="d", index=0, section=0, section_title="", text=text, start=0, end=len(text))
    left, right = split_passage(text, passage)
    assert left.text + right.text == text and left.text and right.text
    boundaries = {m.end() for m in regex.finditer(r"\X", text)}
    assert left.end == right.start and left.end in boundaries
    assert abs(left.end - len(text) // 2) <= 32
