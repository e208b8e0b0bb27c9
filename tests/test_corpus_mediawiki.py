"""MediaWiki XML dumps: articles only, clean text, heading sections as spans, streaming, errors."""

from __future__ import annotations

import bz2

import pytest

from graphdoc.corpus import read_corpus
from graphdoc.corpus.mediawiki import clean_sections
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
