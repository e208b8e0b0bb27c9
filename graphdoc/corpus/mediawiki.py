"""MediaWiki XML dumps (``.xml``, ``.xml.bz2``): articles as clean text with their ``== Heading ==`` sections.

The dump is streamed with :func:`xml.etree.ElementTree.iterparse`; each ``<page>`` is dropped once read
(only the article ids are kept, to refuse a duplicate).
Only namespace-0 articles are kept, redirects are skipped, and the wikitext is turned into plain text
with ``mwparserfromhell`` after templates, references, tables, files, categories and interlanguage
links have been removed.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Callable, Iterator

from graphdoc.documents import Document, id_problem
from graphdoc.errors import InputError
from graphdoc.corpus.files import READ_ERRORS, open_binary
from graphdoc.corpus.markup import wikitext_headings

logger = logging.getLogger(__name__)

#: Sections made of citations and links rather than prose; left out of the text.
SKIPPED_SECTIONS = frozenset({
    "references", "external links", "see also", "further reading", "notes", "footnotes",
    "bibliography", "sources", "citations", "notes and references", "references and notes",
})
#: Tags whose whole content is dropped (tables are Tag nodes with the wiki markup "{|").
DROPPED_TAGS = frozenset({"ref", "references", "table", "gallery", "math", "timeline", "imagemap",
                          "score", "graph", "syntaxhighlight", "source", "pre", "templatedata"})
#: Link prefixes (before ':') of links that are not text: media, categories, interlanguage links.
DROPPED_LINK_PREFIXES = frozenset({"file", "image", "media", "category"})
_LANGUAGE_PREFIX = re.compile(r"[a-z]{2,3}(?:-[a-z]+)*")
_COMMENTS = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_REFS = re.compile(r"<ref\b[^>]*?/>|<ref\b[^>]*>.*?</ref\s*>", re.IGNORECASE | re.DOTALL)
_QUOTES = re.compile(r"'{2,}")  # bold/italic markup left when unbalanced
_BLANK_LINES = re.compile(r"\n[ \t]*(?:\n[ \t]*)+")


def _local(tag: str) -> str:
    """The tag without its ``{namespace}``, so any export schema version works."""
    return tag.rpartition("}")[2]


def read_mediawiki(path: Path) -> Iterator[Document]:
    """Yield one document per article of a MediaWiki XML dump: id = page id, title = page title."""
    with open_binary(path) as stream:
        try:
            yield from _pages(stream, str(path))
        except ET.ParseError as err:
            line = err.position[0] if err.position else "?"
            raise InputError(f"{path}:{line}: invalid XML ({str(err).split(':')[0]})") from None
        except READ_ERRORS as err:
            raise InputError(f"{path}: cannot read file ({err})") from None


def _pages(stream: Any, source: str) -> Iterator[Document]:
    root, articles, skipped, ids = None, 0, 0, set()
    for event, elem in ET.iterparse(stream, events=("start", "end")):
        if root is None:
            root = elem
        if event != "end" or _local(elem.tag) != "page":
            continue
        page = {_local(child.tag): child for child in elem}
        revision = {_local(child.tag): child for child in page.get("revision", ())}
        title = _text(page.get("title"))
        # dumps older than schema 0.5 have no <ns>: there, articles are the titles without a prefix
        namespace = _text(page["ns"]) if "ns" in page else ("0" if ":" not in title else "")
        if namespace == "0" and "redirect" not in page:
            articles += 1
            yield article_document(_article_id(page, title, source, ids), title, _text(revision.get("text")))
        else:
            skipped += 1
        root.clear()  # drop the pages read so far; but for the ids, memory stays flat on a full dump
    logger.debug("%s: %d articles, %d other pages (redirects, other namespaces) skipped", source, articles, skipped)


def _article_id(page: dict[str, ET.Element], title: str, source: str, seen: set[str]) -> str:
    """The ``<id>`` of an article page, refused when missing, unusable as an id, or an earlier article's."""
    page_id = _text(page.get("id")).strip()
    if not page_id:
        raise InputError(f"{source}: page {title!r} has no <id>")
    problem = id_problem(page_id)
    if problem:
        raise InputError(f"{source}: page {title!r}: page id {page_id!r} {problem}")
    if page_id in seen:
        raise InputError(f"{source}: duplicate page id {page_id!r} (page {title!r})")
    seen.add(page_id)
    return page_id


def _text(elem: ET.Element | None) -> str:
    return (elem.text or "") if elem is not None else ""


def article_document(page_id: str, title: str, wikitext: str) -> Document:
    """An article as a document: clean text, one section per heading (lead section untitled)."""
    sections = [{"title": t, "text": body} for t, body in clean_sections(wikitext)
                if body and t.lower() not in SKIPPED_SECTIONS]
    if not sections:
        return Document(id=page_id, text="", title=title, sections=[])
    return Document.from_dict({"id": page_id, "title": title, "sections": sections})


def clean_sections(wikitext: str) -> list[tuple[str, str]]:
    """``(heading title, clean text)`` for the lead and each section of the wikitext, in order.

    The text is cut at heading lines before parsing, so that markup the parser cannot match (an
    unclosed ``''``) spoils one section at most instead of swallowing the headings after it.
    """
    import mwparserfromhell  # a required dependency; imported here to keep importing graphdoc light

    raw = _REFS.sub("", _COMMENTS.sub("", wikitext))
    headings = list(wikitext_headings(raw))
    cuts = [(0, 0, "")] + [(start, end, title) for start, end, _, title in headings]
    ends = [start for start, _, _ in cuts[1:]] + [len(raw)]
    sections = []
    for (_, body_start, title), body_end in zip(cuts, ends):
        title = _clean(plain_text(mwparserfromhell.parse(title).nodes))
        sections.append((title, _clean(plain_text(mwparserfromhell.parse(raw[body_start:body_end]).nodes))))
    return sections


def plain_text(nodes: list[Any]) -> str:
    """The prose of parsed wikitext nodes: like ``strip_code()``, without the non-text nodes."""
    return "".join(_plain_node(node) for node in nodes)


def _plain_node(node: Any) -> str:
    to_text = None if _is_non_text(node) else _NODE_TEXT.get(type(node).__name__)
    return to_text(node) if to_text else ""


def _external_link_text(node: Any) -> str:
    if not node.brackets:
        return str(node.url)  # a bare URL is part of the sentence
    return plain_text(node.title.nodes) if node.title else ""


def _tag_text(node: Any) -> str:
    if str(node.tag).strip().lower() == "br":
        return "\n"
    return plain_text(node.contents.nodes) if node.contents else ""  # list markers have no contents


#: Node class name -> its text; nodes not listed (templates, comments, arguments) give no text.
_NODE_TEXT: dict[str, Callable[[Any], str]] = {
    "Text": lambda node: node.value,
    "HTMLEntity": lambda node: node.normalize(),
    "Wikilink": lambda node: plain_text((node.text or node.title).nodes),
    "ExternalLink": _external_link_text,
    "Tag": _tag_text,
    "Heading": lambda node: "\n" + plain_text(node.title.nodes) + "\n",  # one nested in a tag
}


def _is_non_text(node: Any) -> bool:
    """Whether a node carries no article prose: templates, references, tables, files, categories..."""
    kind = type(node).__name__
    if kind in ("Template", "Comment", "Argument"):
        return True
    if kind == "Tag":
        return str(node.tag).strip().lower() in DROPPED_TAGS
    if kind == "Wikilink":
        prefix, colon, _ = str(node.title).strip().partition(":")
        prefix = prefix.strip().lower()
        return bool(colon) and (prefix in DROPPED_LINK_PREFIXES or bool(_LANGUAGE_PREFIX.fullmatch(prefix)))
    return False


def _clean(text: str) -> str:
    """Tidy stripped wikitext: no bold/italic quotes the parser left, no indents, single blank lines."""
    lines = (line.strip() for line in _QUOTES.sub("", text).split("\n"))
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
