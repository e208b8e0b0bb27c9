"""Sections from heading lines in Markdown and raw wikitext, as character spans of the text.

Both functions return sections that tile the text: contiguous, in order, covering ``[0, len(text))``.
A heading starts a new section (and stays in it); text before the first heading is an untitled
section, merged into the first heading's section when it is only whitespace. Markdown headings are ATX
(``# Title``) and setext (a paragraph underlined with ``===`` or ``---``); YAML front matter at the start
of a Markdown text is a section of its own (untitled), so that it never shares a passage with the prose.
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
# A setext underline: '=' or '-' only (no inner spaces), under a paragraph.
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*\r?\n?\Z")
# A thematic break ('***', '- - -'; a '---' under no paragraph is one too): it ends what came before.
_BREAK = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*\r?\n?\Z")
# A list item or block quote: its lines, lazy continuations included, are no paragraph to underline.
_CONTAINER = re.compile(r" {0,3}(?:[-+*]|\d{1,9}[.)])(?:[ \t]|\r?\n?\Z)| {0,3}>")
_FRONT_MATTER = re.compile(r"---[ \t]*\r?\n(?![ \t]*\r?\n)(.*?\n)(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def front_matter_end(text: str) -> int:
    """The offset just past a YAML front matter block (``---`` lines around it, at the very start), or 0."""
    match = _FRONT_MATTER.match(text)
    return match.end() if match else 0


def front_matter_title(text: str) -> str:
    """The ``title:`` of the text's YAML front matter, or '' when there is none (or it is not YAML)."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return ""
    import yaml

    try:
        try:
            fields = yaml.safe_load(match.group(1))
        except ValueError:  # a value PyYAML cannot build (a date such as 2024-02-30): read every value as text
            fields = yaml.load(match.group(1), Loader=yaml.BaseLoader)  # strings only
    except (yaml.YAMLError, RecursionError):  # not YAML, or nested past Python's recursion limit
        return ""
    title = fields.get("title") if isinstance(fields, dict) else None
    return title.strip() if isinstance(title, str) else ""


def markdown_headings(text: str) -> Iterator[tuple[int, int, str]]:
    """Yield ``(offset, level, title)`` for each ATX or setext heading outside fenced code blocks and front
    matter; a setext heading's offset is that of its paragraph's first line.

    A setext underline counts under a paragraph only: not under a blank line (``---`` is then a thematic
    break), a list item or block quote (and their lazy continuation lines), a heading or indented code.
    """
    offset = front_matter_end(text)
    fence, paragraph, paragraph_start, in_container = "", [], 0, False
    for line in text[offset:].splitlines(keepends=True):
        fence_match = _FENCE.match(line)
        if fence_match:
            marker = fence_match.group(1)
            if not fence:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence) and not line.strip()[len(marker):]:
                fence = ""
            paragraph, in_container = [], False
        elif not fence:
            heading, underline = _ATX.match(line), _SETEXT.match(line)
            if underline and paragraph:
                yield paragraph_start, 1 if underline.group(1)[0] == "=" else 2, " ".join(paragraph)
                paragraph = []
            elif heading:
                yield offset, len(heading.group(1)), (heading.group(2) or "").strip()
                paragraph, in_container = [], False
            elif not line.strip() or _BREAK.match(line):
                paragraph, in_container = [], False
            elif _CONTAINER.match(line):
                paragraph, in_container = [], True
            elif paragraph:
                paragraph.append(line.strip())
            elif not in_container and not line.startswith(("    ", "\t")):  # else lazy continuation, or code
                paragraph, paragraph_start = [line.strip()], offset
        offset += len(line)


def markdown_sections(text: str) -> list[Section]:
    """Sections of a Markdown text, one per heading (ATX ``#`` to ``######``, or setext), titled with its
    text; front matter, when there is some, is an untitled first section."""
    start = front_matter_end(text)
    headings = [(offset - start, title) for offset, _, title in markdown_headings(text)]
    body = [Section(s.title, s.start + start, s.end + start) for s in tile_sections(text[start:], headings)]
    if not start:
        return body
    if not text[start:].strip():  # front matter and whitespace: one section
        return [Section("", 0, len(text))]
    return [Section("", 0, start)] + body


def markdown_title(text: str) -> str:
    """The text of the first level-1 heading, else the front matter's ``title:``, else ''."""
    heading = next((title for _, level, title in markdown_headings(text) if level == 1), "")
    return heading or front_matter_title(text)


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
