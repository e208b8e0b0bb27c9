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

# CommonMark ATX heading: up to 3 spaces, 1-6 '#', then a space or the end of the line (the title and an
# optional closing run of '#' are taken apart in Python: a regex doing it backtracks quadratically on spaces)
_ATX = re.compile(r" {0,3}(#{1,6})(?=[ \t]|\r?\n?\Z)")
# A code fence: (indent, ``` or ~~~, the rest of the line), after the markers of the list items and block
# quotes it is in (:func:`_fence` strips those one at a time: one regex for both backtracks exponentially)
_FENCE = re.compile(r"( *)(`{3,}|~{3,})(.*)", re.DOTALL)
_FENCE_CONTAINER = re.compile(r" {0,3}(?:>[ \t]?|(?:[-+*]|\d{1,9}[.)])[ \t]+)")
# HTML blocks hide the headings in them: a comment (to "-->"), <pre>/<script>/<style>/<textarea> (to their end
# tag), or a block-level tag (to a blank line)
_HTML_COMMENT = re.compile(r" {0,3}<!--")
_HTML_RAW = re.compile(r" {0,3}<(pre|script|style|textarea)(?:[\s>]|\Z)", re.IGNORECASE)
_HTML_BLOCK = re.compile(
    r" {0,3}</?(?:address|article|aside|blockquote|body|caption|center|col|colgroup|dd|details|dialog|dir|div|dl|"
    r"dt|fieldset|figcaption|figure|footer|form|frame|frameset|h[1-6]|head|header|hr|html|iframe|legend|li|link|"
    r"main|menu|menuitem|nav|noframes|ol|optgroup|option|p|param|search|section|summary|table|tbody|td|tfoot|th|"
    r"thead|title|tr|track|ul)(?:[\s/>]|\Z)", re.IGNORECASE)
# any other tag alone on its line (CommonMark's HTML block 7: to a blank line; it cannot interrupt a paragraph)
_HTML_TAG_LINE = re.compile(r" {0,3}(?:<[A-Za-z][A-Za-z0-9-]*(?:[ \t]+[^<>]*)?/?>|</[A-Za-z][A-Za-z0-9-]*[ \t]*>)"
                            r"[ \t]*\r?\n?\Z")
_WIKI_HEADING = re.compile(r"^(={1,6})(.+?)\1[ \t]*\r?$", re.MULTILINE)  # the title is stripped in Python
# A setext underline: '=' or '-' only (no inner spaces), under a paragraph.
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*\r?\n?\Z")
# A list item or block quote: its lines, lazy continuations included, are no paragraph to underline.
_CONTAINER = re.compile(r" {0,3}(?:[-+*]|\d{1,9}[.)])(?:[ \t]|\r?\n?\Z)| {0,3}>")
_FRONT_MATTER = re.compile(r"---[ \t]*\r?\n(?![ \t]*\r?\n)(.*?\n)(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def front_matter_end(text: str) -> int:
    """The offset just past a YAML front matter block (``---`` lines around it, at the very start), or 0."""
    match = _FRONT_MATTER.match(text)
    return match.end() if match else 0


def front_matter_title(text: str) -> str:
    """The ``title:`` of the text's YAML front matter as written (``title: 1984`` is "1984", not a number), or ''
    when there is none (or it is not YAML, or null)."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return ""
    import yaml

    try:
        fields = yaml.load(match.group(1), Loader=yaml.BaseLoader)  # every value as text: a title is text
    except (yaml.YAMLError, RecursionError):  # not YAML, or nested past Python's recursion limit
        return ""
    title = fields.get("title") if isinstance(fields, dict) else None
    return title.strip() if isinstance(title, str) and title not in ("~", "null", "Null", "NULL") else ""


def _is_break(line: str) -> bool:
    """Whether ``line`` is a thematic break ('***', '- - -'; a '---' under no paragraph is one too): it ends what
    came before. (In Python: a regex backtracks quadratically on a long line of spaces between dashes.)"""
    body = line.rstrip("\r\n").expandtabs(4)  # (a tab indents 4 columns: "\t***" is code)
    if len(body) - len(body.lstrip(" ")) > 3:
        return False
    marks = body.replace(" ", "")
    return len(marks) >= 3 and marks[0] in "-*_" and marks == marks[0] * len(marks)


def _fence(line: str) -> tuple[int, int, str, str, bool] | None:
    """``(content column, indent, marker, rest of the line, quoted)`` of a line that may be a code fence, in list
    items and block quotes too: the column where their markers end, the spaces after it, and whether a ``>`` is
    among them; or None."""
    pos = 0
    while (container := _FENCE_CONTAINER.match(line, pos)) is not None and container.end() > pos:
        pos = container.end()
    match = _FENCE.match(line, pos)
    if match is None:
        return None
    indent, marker, rest = match.groups()
    return pos, len(indent), marker, rest, ">" in line[:pos]


def _continues(line: str, content: int, quoted: bool) -> bool:
    """Whether ``line`` (not blank) goes on with the list item or block quote whose content starts at column
    ``content``: a quote's lines start with ``>``, a list item's are indented to its content."""
    if quoted:
        return line.lstrip(" ")[:1] == ">" and len(line) - len(line.lstrip(" ")) <= 3
    return len(line) - len(line.lstrip(" ")) >= content


def _atx_heading(line: str) -> tuple[int, str] | None:
    """``(level, title)`` of an ATX heading line, or None: the title without its closing run of '#'."""
    match = _ATX.match(line)
    if match is None:
        return None
    title = line[match.end():].strip(" \t\r\n")
    closed = title.rstrip("#")
    if closed != title and (not closed or closed[-1] in " \t"):  # "## Sub ##" and "## ##", not "# C#"
        title = closed.rstrip(" \t")
    return len(match.group(1)), title


def markdown_headings(text: str) -> Iterator[tuple[int, int, str]]:
    """Yield ``(offset, level, title)`` for each ATX or setext heading outside fenced code blocks and front
    matter; a setext heading's offset is that of its paragraph's first line.

    A setext underline counts under a paragraph only: not under a blank line (``---`` is then a thematic
    break), a list item or block quote (and their lazy continuation lines), a heading or indented code.
    """
    offset = front_matter_end(text)
    fence, fence_content, fence_quoted, html_end, paragraph, paragraph_start, in_container = \
        "", 0, False, None, [], 0, False
    for line in text[offset:].splitlines(keepends=True):
        if fence and (fence_content or fence_quoted) and line.strip() \
                and not _continues(line, fence_content, fence_quoted):
            fence = ""  # the list item or quote the fence was in has ended, and the fence with it
        content, indent, marker, rest, quoted = (None if html_end is not None else _fence(line)) \
            or (0, 0, "", "", False)
        if marker and not fence and indent <= 3 and not (marker[0] == "`" and "`" in rest):  # (```x``` is code)
            fence, fence_content, fence_quoted, paragraph, in_container = marker, content, quoted, [], False
        elif marker and fence and marker[0] == fence[0] and len(marker) >= len(fence) and not rest.strip() \
                and (quoted if fence_quoted else content == 0) \
                and 0 <= content + indent - fence_content <= 3:  # in the fence's container, at most 3 spaces in
            fence, paragraph, in_container = "", [], False
        elif html_end is not None:  # inside an HTML block
            if (html_end == "" and not line.strip()) or (html_end and html_end in line.lower()):
                html_end = None
        elif not fence:
            heading, underline = _atx_heading(line), _SETEXT.match(line)
            if underline and paragraph:
                yield paragraph_start, 1 if underline.group(1)[0] == "=" else 2, " ".join(paragraph)
                paragraph = []
            elif heading:
                yield offset, heading[0], heading[1]
                paragraph, in_container = [], False
            elif not line.strip() or _is_break(line):
                paragraph, in_container = [], False
            elif (html := _html_block_end(line, in_paragraph=bool(paragraph) or in_container)) is not None:
                paragraph, in_container = [], False
                html_end = None if html and html in line.lower()[line.index("<") + 4:] else html
            elif _CONTAINER.match(line):
                paragraph, in_container = [], True
            elif paragraph:
                paragraph.append(line.strip())
            elif not in_container and not line.startswith(("    ", "\t")):  # else lazy continuation, or code
                paragraph, paragraph_start = [line.strip()], offset
        offset += len(line)


def _html_block_end(line: str, in_paragraph: bool = False) -> str | None:
    """What ends the HTML block ``line`` starts ("-->", an end tag, or "" for a blank line), or None (a lone tag
    in a paragraph is part of it)."""
    if _HTML_COMMENT.match(line):
        return "-->"
    raw = _HTML_RAW.match(line)
    if raw:
        return f"</{raw.group(1).lower()}>"
    return "" if _HTML_BLOCK.match(line) or (not in_paragraph and _HTML_TAG_LINE.match(line)) else None


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
        yield match.start(), match.end(), len(match.group(1)), match.group(2).strip(" \t")


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
