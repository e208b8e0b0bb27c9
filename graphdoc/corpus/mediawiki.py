"""MediaWiki XML dumps (``.xml``, ``.xml.bz2``): articles as clean text with their ``== Heading ==`` sections.

The dump is streamed with :func:`xml.etree.ElementTree.iterparse`; each ``<page>`` is dropped once read
(only the article ids are kept, to refuse a duplicate).
Only namespace-0 articles are kept, redirects are skipped, and the wikitext is turned into plain text
with ``mwparserfromhell`` after templates, references, tables, files, categories, interlanguage
links, behaviour switches (``__NOTOC__``) and stray HTML tags have been removed.
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
#: Link prefixes (before ':') of links that are not text: media and categories.
DROPPED_LINK_PREFIXES = frozenset({"file", "image", "media", "category"})
#: MediaWiki's own namespace names (and the old alias "Image"): the namespaces of a dump without <siteinfo>.
CANONICAL_NAMESPACES = frozenset({
    "media", "special", "talk", "user", "user talk", "project", "project talk", "file", "file talk", "image",
    "image talk", "mediawiki", "mediawiki talk", "template", "template talk", "help", "help talk", "category",
    "category talk"})
#: HTML tags MediaWiki accepts, and the dropped extension tags: left unpaired in a section, they are no text.
MARKUP_TAGS = DROPPED_TAGS | frozenset({
    "abbr", "b", "bdi", "bdo", "big", "blockquote", "br", "caption", "center", "cite", "code", "data", "dd",
    "del", "dfn", "div", "dl", "dt", "em", "font", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "ins", "kbd",
    "li", "mark", "ol", "p", "q", "rb", "rp", "rt", "rtc", "ruby", "s", "samp", "small", "span", "strike",
    "strong", "sub", "sup", "td", "th", "time", "tr", "tt", "u", "ul", "var", "wbr"})
# The dump does not list the interwiki prefixes (<siteinfo> holds namespaces only), so an interlanguage link
# is told by how it is written: a language code (or "simple") in lower case, then the title right after the
# colon, as in [[de:Foo]] or [[zh-yue:Foo]]. Titles are capitalised and a colon in a title is followed by a
# space ([[CSI: Miami]], [[Ys: The Vanished Omens]]): those stay links, whose text is kept.
_LANGUAGE_PREFIX = re.compile(r"(?:[a-z]{2,3}(?:-[a-z]+)*|simple):(?!\s)")
_REDIRECT = re.compile(r"\s*#REDIRECT\s*:?\s*\[\[", re.IGNORECASE)  # how MediaWiki tells a redirect page
_COMMENTS = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_REF_OPEN = re.compile(r"<ref\b", re.IGNORECASE)
_REF_CLOSE = re.compile(r"</ref\s*>", re.IGNORECASE)
# Behaviour switches, upper case as written: a lower-case __index__ in prose is Python's, not a switch.
_SWITCHES = re.compile(r"__(?:NOTOC|FORCETOC|TOC|NOEDITSECTION|NEWSECTIONLINK|NONEWSECTIONLINK|NOGALLERY|"
                       r"HIDDENCAT|EXPECTUNUSEDCATEGORY|EXPECTUNUSEDTEMPLATE|NOCONTENTCONVERT|NOCC|"
                       r"NOTITLECONVERT|NOTC|INDEX|NOINDEX|STATICREDIRECT|DISAMBIG|EXPECTED_UNCONNECTED_PAGE|"
                       r"NOGLOBAL|ARCHIVEDTALK|NOTALK)__")
# An opening or closing tag left in a Text node is one the parser could not pair: no prose.
_LONE_TAG = re.compile(r"</?(?:" + "|".join(sorted(MARKUP_TAGS)) + r")\b[^<>]*>", re.IGNORECASE)
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
    namespaces = CANONICAL_NAMESPACES  # until the dump's <siteinfo> names its own
    for event, elem in ET.iterparse(stream, events=("start", "end")):
        if root is None:
            root = elem
        if event != "end":
            continue
        if _local(elem.tag) == "siteinfo":
            namespaces = _namespace_names(elem) or namespaces
        if _local(elem.tag) != "page":
            continue
        page = {_local(child.tag): child for child in elem}
        revision = {_local(child.tag): child for child in page.get("revision", ())}
        title, wikitext = _text(page.get("title")), _text(revision.get("text"))
        # dumps before schema 0.4 have no <redirect/>: the text says it, as it does to MediaWiki
        if _in_main_namespace(page, title, namespaces) and "redirect" not in page and not _REDIRECT.match(wikitext):
            articles += 1
            yield article_document(_article_id(page, title, source, ids), title, wikitext)
        else:
            skipped += 1
        root.clear()  # drop the pages read so far; but for the ids, memory stays flat on a full dump
    logger.debug("%s: %d articles, %d other pages (redirects, other namespaces) skipped", source, articles, skipped)


def _namespace_names(siteinfo: ET.Element) -> frozenset[str]:
    """The names of the namespaces other than the main one, lower case, from ``<siteinfo><namespaces>``."""
    return frozenset(_namespace_key(_text(ns)) for ns in siteinfo.iter()
                     if _local(ns.tag) == "namespace" and _text(ns).strip())


def _namespace_key(name: str) -> str:
    return " ".join(name.replace("_", " ").split()).lower()  # MediaWiki matches namespace names so


def _in_main_namespace(page: dict[str, ET.Element], title: str, namespaces: frozenset[str]) -> bool:
    if "ns" in page:
        return _text(page["ns"]) == "0"
    # dumps before schema 0.5 have no <ns>: a page is outside the main namespace when its title starts with a
    # namespace name and a colon ("Talk:Bar"), not when it merely holds a colon ("CSI: Miami")
    prefix, colon, _ = title.partition(":")
    return not colon or _namespace_key(prefix) not in namespaces


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

    raw = drop_refs(_COMMENTS.sub("", wikitext))
    headings = list(wikitext_headings(raw))
    cuts = [(0, 0, "")] + [(start, end, title) for start, end, _, title in headings]
    ends = [start for start, _, _ in cuts[1:]] + [len(raw)]
    sections = []
    for (_, body_start, title), body_end in zip(cuts, ends):
        title = _clean(plain_text(mwparserfromhell.parse(title).nodes))
        sections.append((title, _clean(plain_text(mwparserfromhell.parse(raw[body_start:body_end]).nodes))))
    return sections


def drop_refs(wikitext: str) -> str:
    r"""The wikitext without its references: ``<ref .../>`` and ``<ref ...>...</ref>``, in one pass.

    A well-formed reference goes as with ``re.sub(r"<ref\b[^>]*?/>|<ref\b[^>]*>.*?</ref\s*>", "", text)``,
    but in linear time: that regex searched the rest of the text for a '>' or a '</ref>' from each unclosed
    tag, so its time grew with their square. Here the next '>' and the next '</ref>' found are used until
    passed. An opening tag with no '</ref>' after it goes alone, its text after it staying; a '<ref' with
    no '>' after it is no tag and stays as text, escaped to '&lt;ref' (mwparserfromhell too takes time
    quadratic in the unclosed tags it is given).
    """
    kept, pos = [], 0
    gt, close, closes_left = -1, None, True  # the next '>' (index), the next '</ref>' (match)
    for match in _REF_OPEN.finditer(wikitext):
        if match.start() < pos:
            continue  # inside a reference dropped
        if gt < match.end():
            gt = wikitext.find(">", match.end())
            if gt < 0:
                break
        if gt > match.end() and wikitext[gt - 1] == "/":
            end = gt + 1  # <ref name="a" />
        else:
            if closes_left and (close is None or close.start() <= gt):
                close = _REF_CLOSE.search(wikitext, gt + 1)
                closes_left = close is not None
            end = close.end() if closes_left else gt + 1
        kept.append(wikitext[pos:match.start()])
        pos = end
    return "".join(kept) + _REF_OPEN.sub(lambda m: "&lt;" + m.group()[1:], wikitext[pos:])


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
    "Text": lambda node: _LONE_TAG.sub("", _SWITCHES.sub("", node.value)),
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
        title = str(node.title).strip()
        prefix, colon, _ = title.partition(":")
        return bool(colon) and (prefix.strip().lower() in DROPPED_LINK_PREFIXES
                                or bool(_LANGUAGE_PREFIX.match(title)))
    return False


def _clean(text: str) -> str:
    """Tidy stripped wikitext: no bold/italic quotes the parser left, no indents, single blank lines."""
    lines = (line.strip() for line in _QUOTES.sub("", text).split("\n"))
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
