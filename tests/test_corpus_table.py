"""CSV and TSV corpora: a header naming id and text columns (other columns into metadata), CSV quoting with commas,
quotes and line breaks in a field, long fields, compressed files, headerless id<TAB>text TSV, and one-line errors
naming the line."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from graphdoc.corpus import read_corpus
from graphdoc.errors import InputError


def test_a_csv_corpus_with_quoted_fields_and_extra_columns(tmp_path: Path) -> None:
    path = tmp_path / "docs.csv"
    long_text = "word " * 40_000  # past the csv module's default 128 KiB field limit
    path.write_text('doc_id,title,content_type,text\n'
                    'a,First,note,"Graph attention, over passages."\n'
                    'b,,letter,"She said ""hello"".\nA second line."\r\n'
                    '\n'
                    f'c,Long,book,{long_text}\n', encoding="utf-8")
    docs = list(read_corpus(path))
    assert [(d.id, d.title, d.text, d.metadata) for d in docs[:2]] == [
        ("a", "First", "Graph attention, over passages.", {"content_type": "note"}),
        ("b", "", 'She said "hello".\nA second line.', {"content_type": "letter"})]
    assert docs[2].text == long_text


def test_a_tsv_corpus_with_a_header_or_none_and_compressed(tmp_path: Path) -> None:
    with_header = tmp_path / "docs.tsv"
    with_header.write_text('id\ttext\ttitle\nx1\tHe said "no" twice.\tA\n', encoding="utf-8")
    assert [(d.id, d.text, d.title) for d in read_corpus(with_header)] == [("x1", 'He said "no" twice.', "A")]
    plain = tmp_path / "collection.tsv.gz"  # MS MARCO's collection.tsv: pid<TAB>passage, no header
    plain.write_bytes(gzip.compress(b"0\tThe presence of communication.\n1\tManhattan Project.\n"))
    assert [(d.id, d.text) for d in read_corpus(plain)] == [("0", "The presence of communication."),
                                                          ("1", "Manhattan Project.")]


@pytest.mark.parametrize(("name", "content", "message"), [
    ("a.csv", "name,body\nx,y\n", "a.csv:1: the first line must name the columns, among them an id (_id, id, docid, "
     "doc_id) and a text (text, contents, body); it holds 'name', 'body'"),
    ("b.csv", "id,text\na,one\nb,two,three\n", "b.csv:3: 3 CSV column(s); the header (line 1) names 2 (a field "
     "holding a comma must be in double quotes)"),
    ("h.tsv", "1\thello\n2 no tab here\n", "h.tsv:2: 1 TSV column(s); a TSV without a header has 2 (id<TAB>text)"),
    ("i.csv", "\n\nname,body\nx,y\n", "i.csv:3: the first line must name the columns"),
    # (review: an unknown two-column header was read as a first document)
    ("j.tsv", "pid\tpassage\n0\tThe presence of communication.\n", "j.tsv:1: the first line must name the "
     "columns, among them an id (_id, id, docid, doc_id) and a text (text, contents, body); it holds 'pid', 'passage'"),
    ("c.csv", "id,text\na,one\na,two\n", "c.csv:3: duplicate document id 'a' (first seen on line 2)"),
    ("d.csv", 'id,text\na,"unterminated\n', "d.csv:2: not valid CSV (unexpected end of data)"),
    ("e.tsv", "id\ttext\ttext\na\tb\tc\n", "e.tsv:1: the header names column 'text' twice"),
    ("f.tsv", "a\tb\tc\n", "f.tsv:1: the first line must name the columns"),
    ("g.csv", "id,text\n,orphan\n", "g.csv:2: record has no id field"),
])
def test_a_broken_table_is_one_error_line_naming_the_line(tmp_path: Path, name: str, content: str,
                                                         message: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as info:
        list(read_corpus(path))
    assert str(info.value).startswith(f"{path.parent}/{message}")


def test_a_table_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes("id,text\na,café\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1\.csv:2: not valid UTF-8 \(byte 0xe9 at column 6\)"):
        list(read_corpus(path))


def test_a_tsv_header_in_another_case_or_quoted_as_r_writes_it(tmp_path: Path) -> None:
    """(review: 'ID<TAB>Text' was read as a document, and R's quoted header and fields kept their quotes)"""
    upper = tmp_path / "upper.tsv"
    upper.write_text("ID\tText\na\tone\n", encoding="utf-8")
    assert [(d.id, d.text) for d in read_corpus(upper)] == [("a", "one")]
    quoted = tmp_path / "r.tsv"
    quoted.write_text('"id"\t"text"\n"a"\t"He said ""no"" twice."\n', encoding="utf-8")
    assert [(d.id, d.text) for d in read_corpus(quoted)] == [("a", 'He said "no" twice.')]
    old_mac = tmp_path / "cr.csv"  # line ends of a lone CR
    old_mac.write_bytes(b"id,text\ra,one\rb,two\r")
    assert [(d.id, d.text) for d in read_corpus(old_mac)] == [("a", "one"), ("b", "two")]
