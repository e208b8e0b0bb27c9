"""Review fixes, chunker and corpus readers: title-only documents, an empty source, linear packing, long
"sentences" cut at line breaks, links in text folders, setext headings and front matter, JSON lines fields
and messages, and named corpora offline (fake ``ir_datasets``: no network, no optional package)."""

from __future__ import annotations

import bz2
import itertools
import json
import logging
import lzma
import os
import re
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from _chunker_reference import reference_pack

from graphdoc.chunker import _pack_sizes, chunk_document, sentence_word_spans
from graphdoc.cli import main
from graphdoc.corpus import ReadStats, corpus_files, markdown_sections, read_corpus, read_qrels, read_queries
from graphdoc.corpus.markup import markdown_title, wikitext_sections
from graphdoc.documents import Document, Section
from graphdoc.errors import InputError
from graphdoc.training import data

WORD = re.compile(r"\S+")


def words(text: str) -> list[str]:
    return WORD.findall(text)


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def error(call) -> str:
    """The message of the InputError that ``call()`` raises (reading a stream to its end); one line."""
    with pytest.raises(InputError) as info:
        result = call()
        if not isinstance(result, (dict, list)):
            list(result)
    message = str(info.value)
    assert message.splitlines() == [message]
    return message


@pytest.fixture
def restore_global_state(restore_cli_state):
    """``main`` configures logging and quiets transformers for the process (see conftest)."""
    yield


# ------------------------------------------------------------------ 1. title-only documents
def test_a_title_alone_is_a_document_and_only_a_blank_title_and_text_are_skipped(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [
        {"_id": "t", "title": "Only a title", "text": ""}, {"_id": "e", "title": " ", "text": "\n"},
        {"_id": "n", "title": None, "text": ""}, {"_id": "x", "text": "some text"}])
    stats = ReadStats()
    docs = list(read_corpus(path, stats=stats))
    assert [(d.id, d.title, d.text) for d in docs] == [("t", "Only a title", ""), ("x", "", "some text")]
    assert (stats.documents, stats.empty_skipped, stats.skipped_ids) == (2, 2, ["e", "n"])


def test_embed_embeds_a_title_only_document_as_encode_does(model_dir, model, tmp_path, restore_global_state):
    record = {"_id": "a", "title": "Only a title", "text": ""}
    corpus = write_jsonl(tmp_path / "title_only.jsonl", [record])
    output = tmp_path / "emb.npy"
    assert main(["-q", "embed", "--corpus", str(corpus), "--output", str(output), "--model", str(model_dir)]) == 0
    assert (tmp_path / "emb.ids.txt").read_text(encoding="utf-8") == "a\n"
    np.testing.assert_allclose(np.load(output), model.encode([record]), rtol=1e-5, atol=1e-6)
    # the title is what is embedded: another title gives another vector
    assert not np.allclose(model.encode([record]), model.encode([{**record, "title": "Something else entirely"}]))


def test_pretraining_skips_a_title_only_document_as_a_one_passage_one(model):
    stats = data.DataStats()
    docs = [Document("t", "", title="Only a title"),
            Document("long", " ".join(f"Sentence number {i} is here." for i in range(20)))]
    out = list(data.batches(docs, model.prepare, 1, 0, stats))
    assert [[e.prepared.document.id for e in b.examples] for b in out] == [["long"]]
    assert stats.one_passage_skipped == 1


def test_an_empty_text_file_stays_empty_its_name_is_no_title(tmp_path):
    (tmp_path / "empty.md").write_text("", encoding="utf-8")
    (tmp_path / "blank.txt").write_text(" \n\n", encoding="utf-8")
    (tmp_path / "full.md").write_text("words\n", encoding="utf-8")
    stats = ReadStats()
    assert [(d.id, d.title) for d in read_corpus(tmp_path, stats=stats)] == [("full", "full")]
    assert stats.skipped_ids == ["blank", "empty"]


# ------------------------------------------------------------------ 2. an empty source
@pytest.mark.parametrize("source, shown", [("", "is empty ('')"), ("  ", "is only whitespace ('  ')")])
def test_an_empty_source_is_an_error_not_the_current_folder(tmp_path, monkeypatch, source, shown):
    (tmp_path / "stray.txt").write_text("a file of the current folder", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for call, what in ((lambda: read_corpus(source), "corpus"), (lambda: corpus_files(source), "corpus"),
                       (lambda: read_queries(source), "queries"), (lambda: read_qrels(source), "qrels")):
        assert error(call) == f"the {what} source {shown}: give a file, a folder or a corpus name"


def test_embed_with_an_empty_corpus_argument_is_one_error_line(tmp_path, monkeypatch, capsys, restore_global_state):
    (tmp_path / "stray.txt").write_text("a file of the current folder", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["-q", "embed", "--corpus", "", "--output", "emb.npy", "--model", "unused"]) == 1
    assert capsys.readouterr().err == ("graphdoc embed: error: the corpus source is empty (''): "
                                       "give a file, a folder or a corpus name\n")
    assert not (tmp_path / "emb.npy").exists()


# ------------------------------------------------------------------ 3. linear packing, same output
def _pack(units, max_words):
    """:func:`_pack_sizes` on units given as lists of word spans: the groups of spans."""
    words = [w for unit in units for w in unit]
    return [words[a:b] for a, b in _pack_sizes([len(u) for u in units], max_words)]


def spans(lengths: list[int]) -> list[list[tuple[int, int]]]:
    """Sentences of the given lengths, as consecutive one-character word spans."""
    out, pos = [], 0
    for n in lengths:
        out.append([(pos + 2 * i, pos + 2 * i + 1) for i in range(n)])
        pos += 2 * n
    return out


@settings(max_examples=200, deadline=None, database=None)
@given(lengths=st.lists(st.integers(1, 40), max_size=12), max_words=st.integers(1, 12))
def test_pack_gives_what_the_old_packing_gave(lengths, max_words):
    sentences = spans(lengths)
    assert _pack(sentences, max_words) == reference_pack(sentences, max_words)


def test_pack_is_linear_in_the_words():
    (sentence,) = spans([400_000])  # the old packing copied ~800 million spans for this: many seconds
    start = time.perf_counter()
    groups = _pack([sentence], 100)
    assert time.perf_counter() - start < 2.0
    assert groups == [sentence[i:i + 100] for i in range(0, 400_000, 100)]


PROSE_WORDS = st.sampled_from(["the", "graph", "reads", "long", "documents", "Dr.", "3.14", "(x)", "café",
                               "日本語"])


@st.composite
def prose(draw) -> str:
    """Sentences of 1 to 8 words ending in a period, some hard-wrapped, in paragraphs."""
    sentences = draw(st.lists(st.lists(PROSE_WORDS, min_size=1, max_size=8), min_size=1, max_size=15))
    out = []
    for sentence in sentences:
        out.append(draw(st.sampled_from([" ", "\n", "\n\n"])).join([" ".join(sentence[:4]), " ".join(sentence[4:])])
                   .strip() + ".")
        out.append(draw(st.sampled_from([" ", " ", "\n", "\n\n"])))
    return "".join(out)


@settings(max_examples=150, deadline=None, database=None)
@given(text=prose(), max_words=st.integers(9, 30))
def test_prose_within_the_limit_chunks_exactly_as_before(text, max_words):
    sentences = sentence_word_spans(text)
    # blingfire may join sentences; such a text is no test of unchanged prose
    assume(all(len(s) <= max_words for s in sentences))
    expected = [(g[0][0], g[-1][1]) for g in reference_pack(sentences, max_words)]
    assert [(p.start, p.end) for p in chunk_document(Document("p", text), max_words)] == expected


def test_ordinary_prose_chunks_exactly_as_before():
    text = ("Graph attention networks read long documents. Each passage is a node of the graph,\n"
            "and the document node attends to all of them. Sections keep their own passages!\n\n"
            "A second paragraph follows here. It has three sentences. This is the last one.\n") * 5
    sentences = sentence_word_spans(text)
    assert max(len(s) for s in sentences) == 17  # a hard-wrapped sentence: within all these limits
    for max_words in (17, 20, 40, 100):
        expected = [(g[0][0], g[-1][1]) for g in reference_pack(sentences, max_words)]
        assert [(p.start, p.end) for p in chunk_document(Document("p", text), max_words)] == expected


# ------------------------------------------------------------------ 4. long "sentences" cut at line breaks
def test_a_long_sentence_is_cut_at_line_breaks_before_words():
    got = [p.text for p in chunk_document(Document("d", "a b c\nd e f\ng h"), max_words=4)]
    assert got == ["a b c", "d e f", "g h"]  # before: "a b c\nd", "e f\ng h"


def test_a_line_longer_than_the_limit_is_still_cut_at_words():
    text = " ".join(f"w{i}" for i in range(10)) + "\nx y"
    got = [p.text for p in chunk_document(Document("d", text), max_words=4)]
    assert got == ["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9\nx y"]


def test_a_bullet_list_is_cut_between_items():
    text = "Steps to follow:\n" + "".join(f"- step {i} does one small thing\n" for i in range(30))
    passages = chunk_document(Document("d", text), max_words=20)
    assert [len(words(p.text)) for p in passages] == [17] + [14] * 14  # a 3-word line, then 7-word items
    for p in passages:  # whole lines: each passage starts and ends on a line's ends
        assert p.start == 0 or text[p.start - 1] == "\n"
        assert text[p.end] == "\n"
    assert [w for p in passages for w in words(p.text)] == words(text)


def test_a_fenced_code_block_is_cut_between_lines():
    code = "".join(f"    result_{i} = compute(value_{i}, factor={i})  # step {i}\n" for i in range(12))
    text = f"Example\n```python\n{code}```\n"
    passages = chunk_document(Document("d", text), max_words=25)
    assert all(text[p.end] == "\n" for p in passages)
    assert [w for p in passages for w in words(p.text)] == words(text)


LINE_WORDS = st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "x", "y2"]), max_size=10)


@settings(max_examples=150, deadline=None, database=None)
@given(lines=st.lists(LINE_WORDS, max_size=12), breaks=st.lists(st.sampled_from(["\n", "\n\n", "\r\n", " \n "]),
                                                                  min_size=12, max_size=12),
       max_words=st.integers(1, 8))
def test_lines_keep_every_word_and_cut_only_inside_over_long_lines(lines, breaks, max_words):
    text = "".join(" ".join(line) + brk for line, brk in zip(lines, breaks))
    passages = chunk_document(Document("l", text), max_words)
    assert [w for p in passages for w in words(p.text)] == words(text)
    assert all(p.text == text[p.start:p.end] and 1 <= len(words(p.text)) <= max_words for p in passages)
    for a, b in itertools.pairwise(passages):
        if not re.search(r"[\r\n]", text[a.end:b.start]):  # cut inside a line: only a line over the limit
            line_start = max(text.rfind("\n", 0, a.end), text.rfind("\r", 0, a.end)) + 1
            line_end = re.compile(r"[\r\n]|\Z").search(text, b.start).start()
            assert len(words(text[line_start:line_end])) > max_words


# ------------------------------------------------------------------ 5. links in text folders
def symlink(link: Path, target: Path | str) -> None:
    try:
        os.symlink(target, link)
    except (OSError, NotImplementedError):
        pytest.skip("symbolic links cannot be made here")


def test_links_to_folders_are_followed_once_and_broken_links_named(tmp_path, caplog):
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "x.md").write_text("outside text\n", encoding="utf-8")
    (outside / "deep" / "y.txt").write_text("deeper text\n", encoding="utf-8")
    symlink(outside / "deep" / "back", outside)  # a loop inside the linked folder
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "real.md").write_text("real text\n", encoding="utf-8")
    (corpus / "sub" / "s.md").write_text("sub text\n", encoding="utf-8")
    symlink(corpus / "dirlink", outside)
    symlink(corpus / "again", outside)  # a second way into the same folder
    symlink(corpus / "sub" / "up", corpus)  # a loop
    symlink(corpus / "inner", corpus / "sub")  # a folder of the corpus itself: read under its own path
    symlink(corpus / "alias.md", corpus / "real.md")  # the same file twice: read once, under its own path
    symlink(corpus / "broken.md", corpus / "missing.md")
    symlink(corpus / "sub" / "gone", tmp_path / "nowhere")
    with caplog.at_level(logging.INFO, logger="graphdoc.corpus"):
        docs = list(read_corpus(corpus))
    assert [(d.id, d.text) for d in docs] == [
        ("again/deep/y", "deeper text\n"), ("again/x", "outside text\n"), ("real", "real text\n"),
        ("sub/s", "sub text\n")]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"{corpus}: 2 broken symbolic link(s) skipped: broken.md, sub/gone"]
    assert corpus_files(corpus) == [corpus / "again/deep/y.txt", corpus / "again/x.md", corpus / "real.md",
                                    corpus / "sub/s.md"]


def test_a_folder_of_broken_links_names_them_before_its_error(tmp_path, caplog):
    symlink(tmp_path / "a.md", tmp_path / "gone.md")
    with caplog.at_level(logging.WARNING, logger="graphdoc.corpus"):
        assert error(lambda: read_corpus(tmp_path)).endswith("folder has no .markdown/.md/.txt files "
                                                              "(and no corpus.jsonl[.gz] of a BEIR folder)")
    assert [r.getMessage() for r in caplog.records] == [f"{tmp_path}: 1 broken symbolic link(s) skipped: a.md"]


def test_a_folder_reached_only_through_a_link_is_read(tmp_path):
    target = tmp_path / "notes"
    target.mkdir()
    (target / "n.md").write_text("# Note\nbody\n", encoding="utf-8")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    symlink(corpus / "notes", target)
    assert [(d.id, d.title) for d in read_corpus(corpus)] == [("notes/n", "Note")]


# ------------------------------------------------------------------ 6. setext headings and front matter
def titled(text: str) -> list[tuple[str, str]]:
    return [(s.title, text[s.start:s.end]) for s in markdown_sections(text)]


def test_setext_headings_are_sections():
    text = "My Title\n========\n\nIntro.\n\nPart\n----\n\nBody.\n"
    assert titled(text) == [("My Title", "My Title\n========\n\nIntro.\n\n"), ("Part", "Part\n----\n\nBody.\n")]
    assert markdown_title(text) == "My Title"
    assert titled("Lead in.\n\nTwo line\nheading\n===\nx\n") == [
        ("", "Lead in.\n\n"), ("Two line heading", "Two line\nheading\n===\nx\n")]


@pytest.mark.parametrize("text", [
    "text\n\n---\nmore\n",  # after a blank line: a thematic break
    "- item\n---\nmore\n",  # after a list item
    "- item\nlazy line\n---\n",  # after a list item's lazy continuation
    "> quoted\n---\n",
    "    indented code\n---\n",
    "```\ncode\n---\n```\n",
    "a | b\n--- | ---\n1 | 2\n",  # a table's delimiter row
    "text\n- - -\n",
])
def test_underlines_that_are_no_setext_heading(text):
    assert titled(text) == [("", text)]


def test_front_matter_title_and_its_own_section(tmp_path):
    text = "---\ntitle: \"Front: Title\"\ntags: [a, b]\n---\n\nBody text without heading.\n"
    assert titled(text) == [("", "---\ntitle: \"Front: Title\"\ntags: [a, b]\n---\n"),
                            ("", "\nBody text without heading.\n")]
    assert markdown_title(text) == "Front: Title"
    (tmp_path / "a.md").write_text(text, encoding="utf-8")
    [doc] = read_corpus(tmp_path)
    assert (doc.id, doc.title, doc.text) == ("a", "Front: Title", text)  # the front matter is kept in the text
    assert [p.text for p in chunk_document(doc)] == [
        "---\ntitle: \"Front: Title\"\ntags: [a, b]\n---", "Body text without heading."]


def test_a_level_one_heading_wins_over_the_front_matter_title():
    text = "---\ntitle: Front\n---\n# Real\nBody.\n## Sub\nMore.\n"
    assert titled(text) == [("", "---\ntitle: Front\n---\n"), ("Real", "# Real\nBody.\n"), ("Sub", "## Sub\nMore.\n")]
    assert markdown_title(text) == "Real"


@pytest.mark.parametrize("text", ["---\n\ntitle: x\n---\n", "---\ntitle: x\nno closing line\n",
                                  "Intro\n---\ntitle: x\n---\n"])
def test_what_is_not_front_matter(text):
    assert markdown_title(text) != "x"
    assert titled(text)[0][1] != "---\ntitle: x\n---\n"


@pytest.mark.parametrize(("field", "title"), [("date: 2024-02-30", "Front Title"), ("date: 2024-13-01", "Front Title"),
                                              ("n: !!int 0xZZ", "Front Title"), ("t: " + "[" * 5000, "post")],
                         ids=["day", "month", "int", "nesting"])
def test_front_matter_values_yaml_cannot_build_are_read_as_text_and_give_no_traceback(tmp_path, field, title):
    # PyYAML raises ValueError on the first three (the title is still read) and RecursionError on the last
    # (no front matter title: the file name is the title)
    text = f"---\ntitle: Front Title\n{field}\n---\nBody text.\n"
    (tmp_path / "post.md").write_text(text, encoding="utf-8")
    [doc] = read_corpus(tmp_path)
    assert (doc.id, doc.title, doc.text) == ("post", title, text)


@pytest.mark.parametrize(("value", "title"), [("1984", "1984"), ('"1984"', "1984"), ("yes", "yes"),
                                              ("2024-01-31", "2024-01-31"), ("3.0", "3.0"), ("null", "post"),
                                              ("~", "post"), ("[a, b]", "post")])
def test_a_front_matter_title_is_the_text_as_written(tmp_path, value, title):
    text = f"---\ntitle: {value}\n---\nBody text.\n"
    (tmp_path / "post.md").write_text(text, encoding="utf-8")
    [doc] = read_corpus(tmp_path)
    assert doc.title == title


@pytest.mark.parametrize("text", [
    "# Guide\n- ```bash\n  # install deps\n  pip install x\n  ```\n## Usage\nRun it.\n",  # a fence in a list item
    "# Guide\n> ```\n> # quoted code\n> ```\n## Usage\nRun it.\n",  # in a block quote
    "# Guide\n1. step\n   ```\n   # code\n   ```\n## Usage\nRun it.\n",  # indented under the item
    "# Guide\n```x = 1``` is code.\n## Usage\nRun it.\n",  # backticks in the info string: inline code
    "# Guide\n<!--\n# Draft notes\n-->\n## Usage\nRun it.\n",
    "# Guide\n<!-- one line --> text\n## Usage\nRun it.\n",
    "# Guide\n<div>\n# inside html\n</div>\n\n## Usage\nRun it.\n",  # a block-level tag: to a blank line
    "# Guide\n<pre>\n# shell prompt\n\n# more\n</pre>\n## Usage\nRun it.\n",  # <pre>: to its end tag
])
def test_headings_in_code_and_html_are_not_sections_and_later_ones_are(text):
    assert [title for title, _ in titled(text)] == ["Guide", "Usage"]
    assert titled(text)[1][1] == "## Usage\nRun it.\n"


@pytest.mark.parametrize("text, titles", [
    # a fence in a list item or quote ends with it (CommonMark), and the headings after it are headings
    ("# Syntax\n\n- ``` opens a code block\n- ~~~ does too\n\n## Headings\n\nText.\n\n## Lists\n\nMore.\n",
     ["Syntax", "Headings", "Lists"]),
    ("> ```\n# A\n", ["", "A"]),  # (the untitled section: what comes before the first heading)
    ("1. ```\n# A\n", ["", "A"]),
    ("# G\n- ```\n  a\n\n  # still code\n  ```\n## U\n", ["G", "U"]),  # a blank line does not end the item
    ("# A\n\n  ```\n  code\n     ```\n# B\n", ["A"]),  # 5 spaces: no closing fence, # B is code
    ("Para\n\t***\n# H\n", ["", "H"]),  # a tab-indented *** is code, no break (so no setext either)
    ("# A\n```\n- ```\n# not a heading\n```\n# B\n", ["A", "B"]),  # in code, "- ```" is code: no closing fence
    ("# A\n\n<span>\n# in html\n\n# B\n", ["A", "B"]),  # a lone tag line: an HTML block to the blank line
    ("# A\n- item\n<span>\n# B\n", ["A", "B"]),  # ... but not after a paragraph, or a list item's text
])
def test_fences_end_with_their_container_and_close_within_three_spaces(text, titles):
    assert [title for title, _ in titled(text)] == titles


def test_the_closing_hashes_of_an_atx_heading():
    from graphdoc.corpus.markup import _atx_heading

    assert _atx_heading("## Sub ##\n") == (2, "Sub")
    assert _atx_heading("# C#\n") == (1, "C#")
    assert _atx_heading("### ###\n") == (3, "")
    assert _atx_heading("#\n") == (1, "")
    assert _atx_heading("#hashtag\n") is None and _atx_heading("    # code\n") is None
    assert _atx_heading("# foo # bar #\t\r\n") == (1, "foo # bar")
    padded = "# a" + " \t" * 50_000 + "x\n"  # was quadratic in the run of spaces: minutes for this line
    assert _atx_heading(padded) == (1, padded[2:-1])
    assert markdown_title(padded) == padded[2:-1]


@pytest.mark.parametrize("line", ["-" + " " * 20_000 + "- -x", "> " * 20_000 + "x", "- " * 20_000 + "```",
                                  "1." + " " * 20_000 + "x", "== a" + " " * 20_000 + "x"])
def test_long_lines_of_markers_and_spaces_are_read_in_linear_time(line):
    # each took seconds to forever (backtracking regexes) before: this test would hang, not fail
    text = f"# A\n{line}\n"
    assert [s.title for s in markdown_sections(text)] == ["A"]
    assert len(wikitext_sections(text)) == 1


def test_old_mac_line_endings_are_line_breaks(tmp_path):
    (tmp_path / "mac.md").write_bytes(b"# Release notes\rFixed the parser.\r")
    (tmp_path / "unix.md").write_bytes(b"# Release notes\nFixed the parser.\n")
    mac, unix = read_corpus(tmp_path)
    assert (mac.title, mac.text, mac.sections) == (unix.title, unix.text, unix.sections)


MD_LINES = st.lists(st.sampled_from(["# A", "Title", "===", "---", "- item", "> q", "text", "", "```", "    code",
                                     "title: x", "***", "- ```", "<!--", "-->", "<div>", "## B ##"]), max_size=14)


@settings(max_examples=200, deadline=None, database=None)
@given(MD_LINES, st.booleans())
def test_markdown_sections_still_tile_the_text(lines, trailing_newline):
    text = "\n".join(lines) + ("\n" if trailing_newline else "")
    sections = markdown_sections(text)
    if not text:
        assert sections == []
        return
    assert sections[0].start == 0 and sections[-1].end == len(text)
    assert all(a.end == b.start and a.start < a.end for a, b in itertools.pairwise(sections))
    assert sections[-1].start < sections[-1].end
    Document("md", text, sections=sections)  # a valid document: no text outside its sections


# ------------------------------------------------------------------ 7. JSON lines fields
@pytest.mark.parametrize("record, text", [
    ({"_id": "a", "text": "", "contents": "real text"}, "real text"),
    ({"_id": "a", "text": "real text", "contents": ""}, "real text"),
    ({"_id": "a", "text": " ", "body": "real text"}, "real text"),
    ({"_id": "a", "text": "same", "contents": "same"}, "same"),
    ({"_id": "a", "text": "", "contents": "  ", "title": "T"}, ""),
])
def test_the_text_field_that_is_not_blank_is_the_text(tmp_path, record, text):
    [doc] = read_corpus(write_jsonl(tmp_path / "c.jsonl", [record]))
    assert doc.text == text


def test_two_text_fields_that_differ_are_an_error_naming_the_line(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"_id": "ok", "text": "x"},
                                              {"_id": "a", "text": "one", "contents": "two"}])
    assert error(lambda: read_corpus(path)) == (f"{path}:2: document 'a': fields 'text' and 'contents' both hold text "
                                                "and differ (give the text once)")


@pytest.mark.parametrize("title, shown", [("0", "0"), ("false", "false"), ("[]", "[]"), ("5", "5"),
                                          ('{"a": 1}', '{"a": 1}')])
def test_a_title_that_is_not_a_string_is_one_error(tmp_path, title, shown):
    path = write_jsonl(tmp_path / "c.jsonl", [f'{{"_id": "a", "title": {title}, "text": "x"}}'])
    assert error(lambda: read_corpus(path)) == f"{path}:1: document 'a': 'title' must be a string or null, got {shown}"
    path = write_jsonl(tmp_path / "s.jsonl", [f'{{"_id": "a", "sections": [{{"title": {title}, "text": "A."}}]}}'])
    assert error(lambda: read_corpus(path)) == (f"{path}:1: document 'a': section 0 'title' must be a string or null, "
                                                f"got {shown}")


def test_null_titles_are_empty(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "title": None, "sections": [{"title": None, "text": "A."}]}])
    [doc] = read_corpus(path)
    assert (doc.title, doc.sections) == ("", [Section("", 0, 2)])


# ------------------------------------------------------------------ 8. error messages, more compressions
PRETTY = ("1: the object does not end on its line: the file looks like pretty-printed JSON, not JSON lines "
          "(one JSON object per line)")


@pytest.mark.parametrize("lines, message", [
    (['{"_id": "a" "text": "x"}'], "1: invalid JSON (Expecting ',' delimiter at column 13)"),
    (['{"_id": "a", "text": "x\ty"}'], "1: invalid JSON (Invalid control character at column 24)"),
    (['{"_id": "a", "text": "x"} {"_id": "b"}'],
     "1: invalid JSON (Extra data at column 27: '{\"_id\": \"b\"}'; JSON lines hold one object per line)"),
    (['{"_id": "a", "text": "x"}', '{"_id": "b",', '"text": "y"}'],
     ("2: invalid JSON (Expecting property name enclosed in double quotes at column 13; the object does not end "
      "on this line: JSON lines hold one object per line)")),
    (['[{"_id": "a", "text": "x"}]'], "1: the file is a JSON array, not JSON lines (one JSON object per line)"),
    (['', '[', '  {"_id": "a", "text": "x"}', ']'],
     "2: the file is a JSON array, not JSON lines (one JSON object per line)"),
    (['{', '  "_id": "a",', '  "text": "x"', '}'], PRETTY),
    (['{"_id": "a",', '  "text": "x"}'], PRETTY),
])
def test_json_errors_keep_the_column_and_say_what_the_file_is(tmp_path, lines, message):
    path = write_jsonl(tmp_path / "c.jsonl", lines)
    assert error(lambda: read_corpus(path)) == f"{path}:{message}"


UTF16_MESSAGE = "; graphdoc reads UTF-8: convert it (e.g. iconv -f UTF-16 -t UTF-8)"


@pytest.mark.parametrize("encoding, why", [
    ("utf-16", "it starts with a UTF-16 byte order mark"),  # with a BOM, in the machine's order
    ("utf-16-be", "many of its bytes are NUL, as in UTF-16 text"),
    ("utf-16-le", "many of its bytes are NUL, as in UTF-16 text"),
])
def test_utf16_is_named(tmp_path, encoding, why):
    line = '{"_id": "a", "text": "Some text."}\n'
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_bytes(line.encode(encoding))
    assert error(lambda: read_corpus(jsonl)) == f"{jsonl}: the file looks like UTF-16 ({why}){UTF16_MESSAGE}"
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "n.md").write_bytes("# Note\nSome text.\n".encode(encoding))
    assert error(lambda: read_corpus(folder)) == f"{folder / 'n.md'}: the file looks like UTF-16 ({why}){UTF16_MESSAGE}"
    topics = tmp_path / "queries.tsv"
    topics.write_bytes("q1\tsome query\n".encode(encoding))
    assert error(lambda: read_queries(topics)) == f"{topics}: the file looks like UTF-16 ({why}){UTF16_MESSAGE}"


def test_utf8_with_a_nul_here_and_there_is_not_utf16(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": "a\x00b"}\n')
    assert "invalid JSON (Invalid control character at column 24)" in error(lambda: read_corpus(path))


@pytest.mark.parametrize("suffix, compress", [(".jsonl.bz2", bz2.compress), (".jsonl.xz", lzma.compress),
                                              (".JSONL.XZ", lzma.compress)])
def test_bzip2_and_xz_json_lines_are_read(tmp_path, suffix, compress):
    path = tmp_path / f"c{suffix}"
    path.write_bytes(compress(b'{"_id": "a", "text": "packed"}\n{"_id": "b", "text": "too"}\n'))
    assert [(d.id, d.text) for d in read_corpus(path)] == [("a", "packed"), ("b", "too")]
    queries = tmp_path / f"q{suffix}"
    queries.write_bytes(compress(b'{"_id": "q1", "text": "what"}\n'))
    assert list(read_queries(queries)) == [("q1", "what")]


# ------------------------------------------------------------------ 9. named corpora offline
class Offline(Exception):
    """What requests raises: a long message holding its cause's, with a host in the middle one."""


class StderrHandler(logging.Handler):
    """As ir_datasets' TqdmHandler: writes to whatever ``sys.stderr`` is when a record comes."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(self.format(record) + "\n")


@pytest.fixture
def irds_logger():
    """ir_datasets' logger as ir_datasets sets it up: its own stderr handler, INFO, not propagating."""
    log = logging.getLogger("ir_datasets")
    saved = (log.handlers[:], log.level, log.propagate, log.disabled)
    handler = StderrHandler()
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    log.handlers[:], log.propagate = [handler], False
    log.setLevel(logging.INFO)
    yield log
    log.handlers[:], log.level, log.propagate, log.disabled = saved


def offline_error() -> Exception:
    try:
        try:
            try:
                raise OSError(-2, "Name or service not known")
            except OSError as gai:
                raise ConnectionError("HTTPSConnection(host='zenodo.org', port=443): Failed to resolve "
                                      "'zenodo.org' ([Errno -2] Name or service not known)") from gai
        except ConnectionError as resolve:
            raise ConnectionError(f"HTTPSConnectionPool(host='zenodo.org', port=443): Max retries exceeded with "
                                  f"url: /record/3557342/files/wikIR59k.zip (Caused by NameResolutionError"
                                  f"(\"{resolve}\"))") from resolve
    except ConnectionError as retries:
        try:  # requests raises its own ConnectionError while handling urllib3's (a context, not a cause)
            raise Offline(str(retries))
        except Offline as err:
            return err


@pytest.fixture
def offline_ir_datasets(monkeypatch, irds_logger):
    class Dataset:
        def docs_iter(self):
            irds_logger.info("If you have a local copy of https://zenodo.org/record/3557342/files/wikIR59k.zip ...")
            irds_logger.warning("Download failed: HTTPSConnectionPool(host='zenodo.org', port=443): ...")
            raise offline_error()

    class Robust:
        def docs_iter(self):
            irds_logger.info("The TREC Robust document collection is from TREC disks 4 and 5. ...")
            raise FileNotFoundError(str(Path.home() / ".ir_datasets" / "disks45" / "corpus"))

    module = types.ModuleType("ir_datasets")
    module.load = lambda name: Robust() if name.startswith("disks45") else Dataset()
    monkeypatch.setitem(sys.modules, "ir_datasets", module)
    return module


HOST_REASON = ("HTTPSConnection(host='zenodo.org', port=443): Failed to resolve 'zenodo.org' ([Errno -2] Name or "
               "service not known)")


def test_offline_named_corpus_is_one_line_without_ir_datasets_notices(offline_ir_datasets, model_dir, tmp_path,
                                                                       capsys, restore_global_state):
    status = main(["-q", "embed", "--corpus", "wikir/en59k", "--output", str(tmp_path / "o.npy"),
                   "--model", str(model_dir)])
    assert status == 1
    assert capsys.readouterr().err == (
        f"graphdoc embed: error: named corpus 'wikir/en59k' could not be downloaded ({HOST_REASON}); to use local "
        "files instead, export it to JSON lines ({\"_id\", \"title\", \"text\"} per line) or a BEIR folder and pass "
        "that path\n")
    assert logging.getLogger("ir_datasets").disabled is False  # silenced while graphdoc read, not for good


def test_ir_datasets_notices_show_with_graphdoc_debug_logging(offline_ir_datasets, capsys):
    graphdoc_logger = logging.getLogger("graphdoc")
    level = graphdoc_logger.level
    graphdoc_logger.setLevel(logging.DEBUG)  # as ``graphdoc -v`` has it
    try:
        with pytest.raises(InputError):
            list(read_corpus("wikir/en59k"))
    finally:
        graphdoc_logger.setLevel(level)
    assert "[WARNING] Download failed" in capsys.readouterr().err


def test_robust04_says_it_needs_the_licensed_disks(offline_ir_datasets, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds"))
    message = error(lambda: read_corpus("robust04"))
    assert message.startswith(
        f"named corpus 'robust04' needs the licensed TREC disks 4 and 5, uncompressed at "
        f"{tmp_path / 'irds' / 'disks45' / 'corpus'} (FileNotFoundError: {Path.home()}/.ir_datasets/disks45/corpus); "
        "to get them see https://ir-datasets.com/trec-robust04.html#DataAccess; to use local files instead")
    assert "could not be downloaded" not in message
    assert capsys.readouterr().err == ""


def test_a_long_reason_is_cut_at_a_word(monkeypatch):
    class Broken:
        def docs_iter(self):
            raise RuntimeError("checksum mismatch for " + " ".join(f"part{i:03d}.tar.gz" for i in range(40)))

    module = types.ModuleType("ir_datasets")
    module.load = lambda name: Broken()
    monkeypatch.setitem(sys.modules, "ir_datasets", module)
    message = error(lambda: read_corpus("msmarco-document"))
    reason = re.fullmatch(r"named corpus 'msmarco-document' could not be downloaded \((.*)\); to use local files .*",
                          message).group(1)
    assert reason.endswith(".tar.gz ...") and len(reason) <= 160
    assert reason.startswith("checksum mismatch for part000.tar.gz part001.tar.gz")


def test_a_blank_text_beside_sections_is_no_text() -> None:
    sections = [{"title": "A", "text": "First part."}, {"title": "B", "text": "Second part."}]
    for record in ({"_id": "a", "text": "", "sections": sections}, {"_id": "a", "text": " ", "sections": sections},
                   {"_id": "a", "sections": sections}):
        doc = Document.from_dict(record)
        assert doc.text == "First part.\nSecond part." and [s.title for s in doc.sections] == ["A", "B"]
    with pytest.raises(InputError, match="section texts joined with '\\\\n' do not equal 'text'"):
        Document.from_dict({"_id": "a", "text": "Other.", "sections": sections})
