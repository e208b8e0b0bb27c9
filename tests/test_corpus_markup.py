"""Sections from Markdown and wikitext headings: exact spans, and that they always tile the text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from graphdoc.corpus import markdown_sections, wikitext_sections
from graphdoc.corpus.markup import markdown_title
from graphdoc.documents import Section

MD = "Intro line.\n# Title\nbody\n```\n# not a heading\n```\n## Sub ##\nmore\n#hashtag\n"


def titled_texts(text: str, sections: list[Section]) -> list[tuple[str, str]]:
    return [(s.title, text[s.start:s.end]) for s in sections]


def test_markdown_sections_exact():
    assert titled_texts(MD, markdown_sections(MD)) == [
        ("", "Intro line.\n"),
        ("Title", "# Title\nbody\n```\n# not a heading\n```\n"),
        ("Sub", "## Sub ##\nmore\n#hashtag\n"),
    ]
    assert markdown_title(MD) == "Title"


def test_markdown_whitespace_before_first_heading_joins_it():
    text = "\n\n# A\nx\n   ### B\ny"
    assert markdown_sections(text) == [Section("A", 0, 8), Section("B", 8, len(text))]


def test_markdown_without_headings_is_one_untitled_section():
    assert markdown_sections("just text") == [Section("", 0, 9)]
    assert markdown_sections("") == []
    assert markdown_title("just text") == ""


def test_wikitext_sections_exact():
    text = "Lead.\n== History ==\nold\n=== Early ===  \nolder\n==not closed\n"
    assert titled_texts(text, wikitext_sections(text)) == [
        ("", "Lead.\n"),
        ("History", "== History ==\nold\n"),
        ("Early", "=== Early ===  \nolder\n==not closed\n"),
    ]


LINES = st.lists(st.sampled_from(["# A", "## B c", "text", "", "   ", "```", "== W ==", "x # y", "#"]), max_size=12)


@settings(max_examples=150, deadline=None)
@given(LINES, st.booleans())
def test_sections_tile_the_text(lines, trailing_newline):
    text = "\n".join(lines) + ("\n" if trailing_newline else "")
    for sections in (markdown_sections(text), wikitext_sections(text)):
        if not text:
            assert sections == []
            continue
        assert sections[0].start == 0 and sections[-1].end == len(text)
        assert all(a.end == b.start for a, b in zip(sections, sections[1:]))
        assert all(s.start < s.end for s in sections)
