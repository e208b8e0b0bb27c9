"""MediaWiki XML dumps: articles only, clean text, heading sections as spans, streaming, errors."""

from __future__ import annotations

import bz2

import pytest

from graphdoc.corpus import read_corpus
from graphdoc.corpus.mediawiki import clean_sections, drop_refs
from graphdoc.errors import InputError

ARTICLE = """{{Infobox country|name=Testland}}
'''Testland''' is a [[country|nation]] in [[Europe]].<ref>Some book, p. 3</ref><ref name="x"/> It has ''rivers''.
[[File:Map.png|thumb|A [[map]] of Testland]]
<!-- hidden comment -->
== History ==
Founded in 1900 &amp; still here.{{cn}} See [http://example.org the site].
{| class="wikitable"
|-
| cell || cell
|}
=== Early years ===
* Farming
* Fishing
== References ==
{{reflist}}
== Empty ==
{{main|Other}}
[[Category:Countries]]
[[de:Testland]]
"""


def page(title: str, page_id: int, text: str, ns: int = 0, redirect: bool = False) -> str:
    redirect_tag = f'<redirect title="{title}2" />' if redirect else ""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (f"<page><title>{title}</title><ns>{ns}</ns><id>{page_id}</id>{redirect_tag}"
            f"<revision><id>9{page_id}</id><text xml:space=\"preserve\">{text}</text></revision></page>\n")


def dump(pages: list[str], version: str = "0.10") -> str:
    return (f'<mediawiki xmlns="http://www.mediawiki.org/xml/export-{version}/" version="{version}">\n'
            "<siteinfo><sitename>Wikipedia</sitename></siteinfo>\n" + "".join(pages) + "</mediawiki>\n")


EXPECTED_TEXT = ("Testland is a nation in Europe. It has rivers.\n"
                 "Founded in 1900 & still here. See the site.\n"
                 "Farming\nFishing")


def test_article_text_and_sections(tmp_path):
    path = tmp_path / "dump.xml"
    path.write_text(dump([page("Testland", 7, ARTICLE)]), encoding="utf-8")
    [doc] = read_corpus(path)
    assert (doc.id, doc.title) == ("7", "Testland")
    assert doc.text == EXPECTED_TEXT
    assert [(s.title, doc.text[s.start:s.end]) for s in doc.sections] == [
        ("", "Testland is a nation in Europe. It has rivers."),
        ("History", "Founded in 1900 & still here. See the site."),
        ("Early years", "Farming\nFishing"),
    ]


def test_keeps_only_articles_and_skips_redirects_bz2_any_schema(tmp_path):
    pages = [page("Alpha", 1, "Alpha text."), page("Alpha2", 2, "#REDIRECT [[Alpha]]", redirect=True),
             page("Wikipedia:About", 3, "Project page.", ns=4), page("Beta", 4, "{{stub}}"),
             page("Gamma", 5, "Gamma text.")]
    path = tmp_path / "dump.xml.bz2"
    path.write_bytes(bz2.compress(dump(pages, version="0.11").encode("utf-8")))
    # a page whose text is only templates is its title alone: a document still (only a blank title and text is empty)
    assert [(d.id, d.title, d.text) for d in read_corpus(path)] == [
        ("1", "Alpha", "Alpha text."), ("4", "Beta", ""), ("5", "Gamma", "Gamma text.")]


def test_streams_pages_before_a_broken_tail(tmp_path):
    path = tmp_path / "dump.xml"
    path.write_text(dump([page("Alpha", 1, "Alpha text.")])[:-len("</mediawiki>\n")] + "<page><title>x</oops>",
                    encoding="utf-8")
    docs = read_corpus(path)
    assert next(docs).id == "1"
    with pytest.raises(InputError, match=r"dump\.xml:4: invalid XML \(mismatched tag\)$"):
        next(docs)


def test_unbalanced_markup_does_not_swallow_later_headings():
    sections = clean_sections("Lead with ''unclosed italics.\n== One ==\nA<ref>r</ref>.\n== Two ==\nB.\n")
    assert sections == [("", "Lead with unclosed italics."), ("One", "A."), ("Two", "B.")]


def test_titles_with_a_short_word_and_a_colon_are_links_interlanguage_links_are_dropped():
    text = ("He starred in [[CSI: Miami]] and [[CSI: NY|the New York one]]; see [[Ys: The Vanished Omens]], "
            "[[UFO: Enemy Unknown]], [[AVP: Alien vs. Predator]].\n[[de:Foo]][[fr:Bar|Bar]][[zh-yue:X]][[simple:Y]]")
    assert clean_sections(text) == [("", "He starred in CSI: Miami and the New York one; see Ys: The Vanished Omens, "
                                         "UFO: Enemy Unknown, AVP: Alien vs. Predator.")]


OLD_PAGES = [("CSI: Miami", "CSI: Miami is a police drama."), ("Foo", "#REDIRECT [[Bar]]"),
             ("Foo2", " #redirect: [[Bar]]"), ("Bar", "Bar text."), ("Talk:Bar", "Talk text."),
             ("Portal:Science", "Portal text.")]


def old_dump(namespaces: str) -> str:
    """An export-0.3 dump: no <ns> and no <redirect/> in its pages."""
    pages = "".join(f"<page><title>{title}</title><id>{i}</id><revision><id>9{i}</id><text>{text}</text>"
                    "</revision></page>\n" for i, (title, text) in enumerate(OLD_PAGES, 1))
    return ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.3/" version="0.3">\n'
            f"<siteinfo><sitename>Wikipedia</sitename>{namespaces}</siteinfo>\n{pages}</mediawiki>\n")


def test_old_dump_namespaces_from_siteinfo_and_redirects_from_the_text(tmp_path):
    path = tmp_path / "old.xml"
    path.write_text(old_dump('<namespaces><namespace key="0" /><namespace key="1">Talk</namespace>'
                             '<namespace key="100">Portal</namespace></namespaces>'), encoding="utf-8")
    assert [(d.id, d.title, d.text) for d in read_corpus(path)] == [
        ("1", "CSI: Miami", "CSI: Miami is a police drama."), ("4", "Bar", "Bar text.")]
    # with no namespaces listed, MediaWiki's own names are the namespaces
    path.write_text(old_dump(""), encoding="utf-8")
    assert [d.title for d in read_corpus(path)] == ["CSI: Miami", "Bar", "Portal:Science"]


def test_behaviour_switches_are_no_text():
    text = "__NOTOC__Lead.__TOC__\n== Heading ==\nBody.__NOEDITSECTION__ <code>__init__</code>\n__FORCETOC__\n"
    assert clean_sections(text) == [("", "Lead."), ("Heading", "Body. __init__")]


def test_unclosed_refs_take_linear_time():
    # well-formed references go as before
    assert drop_refs('a<ref name="n"/>b<REF group=g>c</ref >d<ref>e<ref>f</ref>g') == "abdg"
    # an unclosed tag goes alone; a '<ref' without '>' is text. 20,000 of each once took minutes
    assert clean_sections("A<ref>b " * 20_000) == [("", "Ab " * 19_999 + "Ab")]
    assert clean_sections("<ref name=x " * 20_000) == [("", "<ref name=x " * 19_999 + "<ref name=x")]


def test_html_tags_around_a_heading_leave_no_markup():
    text = 'Lead.\n<div style="column-count:2">\n== Heading ==\nBody.\n</div>\nWrite &lt;div&gt;, not <foo>.'
    assert clean_sections(text) == [("", "Lead."), ("Heading", "Body.\n\nWrite <div>, not <foo>.")]
