"""Sections from heading lines in Markdown and raw wikitext, as character spans of the text.

Both functions return sections that tile the text: contiguous, in order, covering ``[0, len(text))``.
A heading line starts a new section (and stays in it); text before the first heading is an untitled
section, merged into the first heading's section when it is only whitespace.
"""

from __future__ import annotations

import re
from typing import Iterator

from graphdoc.documents import Section

# CommonMark ATX heading: up to 3 spaces, 1-6 '#', then a space or the end of the line; an optional
# closing run of '#' preceded by a space is not part of the title.
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*\r?\n?\Z")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_WIKI_HEADING = re.compile(r"^(={1,6})[ \t]*(.+?)[ \t]*\1[ \t]*\r?$", re.MULTILINE)


def markdown_headings(text: str) -> Iterator[tuple[int, int, str]]:
    """Yield ``(offset, level, title)`` for each ATX heading line outside fenced code blocks."""
    offset, fence = 0, ""
    for line in text.splitlines(keepends=True):
        fence_match = _FENCE.match(line)
        if fence_match:
            marker = fence_match.group(1)
            if not fence:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence) and not line.strip()[len(marker):]:
                fence = ""
        elif not fence:
            heading = _ATX.match(line)
            if heading:
                yield offset, len(heading.group(1)), (heading.group(2) or "").strip()
        offset += len(line)


def markdown_sections(text: str) -> list[Section]:
    """Sections of a Markdown text, one per ATX heading (``#`` to ``######``), titled with its text."""
    return tile_sections(text, [(start, title) for start, _, title in markdown_headings(text)])


def markdown_title(text: str) -> str:
    """The text of the first level-1 heading, or '' when there is none."""
    return next((title for _, level, title in markdown_headings(text) if level == 1), "")


def wikitext_headings(text: str) -> Iterator[tuple[int, int, int, str]]:
    """Yield ``(start, end, level, title)`` for each ``== Heading ==`` line; ``end`` excludes the line break."""
    for match in _WIKI_HEADING.finditer(text):
        yield match.start(), match.end(), len(match.group(1)), match.group(2)


def wikitext_sections(text: str) -> list[Section]:
    """Sections of raw wikitext, one per ``== Heading ==`` line (any level, ``=`` to ``======``)."""
    return tile_sections(text, [(start, title) for start, _, _, title in wikitext_headings(text)])


def tile_sections(text: str, headings: list[tuple[int, str]]) -> list[Section]:
    """Cut ``text`` at the heading offsets into sections covering all of it ([] for an empty text)."""
    if not text:
        return []
    if not headings:
        return [Section("", 0, len(text))]
    sections = []
    if text[: headings[0][0]].strip():
        sections.append(Section("", 0, headings[0][0]))
    else:
        headings = [(0, headings[0][1])] + headings[1:]
    ends = [start for start, _ in headings[1:]] + [len(text)]
    sections += [Section(title, start, end) for (start, title), end in zip(headings, ends)]
    return sections
