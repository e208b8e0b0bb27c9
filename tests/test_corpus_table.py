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
    ("d.csv", 'id,text\na,"unterminated\n', "d.csv:2: a quoted field opened on this line is not closed: not valid "
     "CSV (unexpected end of data)"),
    # (stop 32: an unclosed quote was reported at the file's last line, a row at the line it ends on)
    ("k.csv", 'id,text\na,"unterminated\nb,two\nc,three\n', "k.csv:2: a quoted field opened on this line is not "
     "closed"),
    ("l.csv", 'id,text\na,"one\nline"\na,"two\nlines"\n', "l.csv:4: duplicate document id 'a' (first seen on line 2)"),
    # (stop 32: a header with spaces or dashes was read as a first document)
    ("m.tsv", "Doc ID\tText\n1\thello world\n", "m.tsv:1: the first line must name the columns, among them an id "
     "(_id, id, docid, doc_id) and a text (text, contents, body); it holds 'Doc ID', 'text'"),
    ("n.tsv", "doc-id\tpassage\n1\thello world\n", "n.tsv:1: the first line must name the columns"),
    ("o.tsv", 'id\ttext\na\t"two\nlines"\n', "o.tsv:3: 1 TSV column(s); the header (line 1) names 2 (a TSV file is "
     "read as it is, quotes kept, unless its header's names are in double quotes too"),
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


def test_a_tsv_field_quoted_as_csv_writers_quote_is_warned_of(tmp_path: Path, caplog) -> None:
    """(stop 32: pandas' to_csv(sep="\\t") quoting was kept in the text without a word)"""
    path = tmp_path / "pandas.tsv"
    path.write_text('id\ttext\na\tplain\nb\t"He said ""hi"" there"\nc\t"again ""x"""\n', encoding="utf-8")
    with caplog.at_level("WARNING", logger="graphdoc"):
        docs = list(read_corpus(path))
    assert [d.text for d in docs] == ["plain", '"He said ""hi"" there"', '"again ""x"""']  # read as it is
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}:3: a field is in double quotes, as CSV writers quote (pandas, Python's csv module); a TSV file is "
        "read as it is, quotes kept, unless its header's names are in double quotes too: write it without quoting "
        "(csv.QUOTE_NONE) or as CSV"]  # once


def test_other_id_columns_and_a_sections_column_are_metadata(tmp_path: Path) -> None:
    """(stop 32: of _id, id and docid only the one used was kept, the others dropped; a 'sections' column failed
    every row, as a cell is no list of sections)"""
    path = tmp_path / "multi.csv"
    path.write_text("_id,id,docid,text,sections\nA,B,C,hello,intro\n,B2,C2,world,\n", encoding="utf-8")
    assert [(d.id, d.text, d.metadata) for d in read_corpus(path)] == [
        ("A", "hello", {"id": "B", "docid": "C", "sections": "intro"}),
        ("B2", "world", {"docid": "C2", "sections": ""})]


def test_queries_tsv_with_a_header_of_more_columns_reads_its_text_column(tmp_path: Path) -> None:
    """(stop 32: '_id<TAB>title<TAB>text' made each query its title, a tab and its text)"""
    from graphdoc.corpus import read_queries

    path = tmp_path / "queries.tsv"
    path.write_text("_id\ttitle\ttext\nq1\tT\tvolcano lava\nq2\tU\tice\n", encoding="utf-8")
    assert list(read_queries(path)) == [("q1", "volcano lava"), ("q2", "ice")]
    path.write_text("qid\tquery\tlang\nq1\tvolcano lava\ten\n", encoding="utf-8")
    assert list(read_queries(path)) == [("q1", "volcano lava")]
    path.write_text("_id\ttitle\tbody\nq1\tT\tvolcano\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        list(read_queries(path))
    assert str(info.value) == (f"{path}:1: the header names 3 columns and none is the query's text (text, query); it "
                               "holds '_id\\ttitle\\tbody'")
    path.write_text("_id\ttitle\ttext\nq1\tT\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"queries\.tsv:2: 2 columns; the header \(line 1\) names 3$"):
        list(read_queries(path))


def test_a_headerless_tsv_whose_first_text_is_a_column_word_is_a_document(tmp_path: Path) -> None:
    """(review: 'Doc ID<TAB>Text' is refused as a header, but '0<TAB>Content' is MS MARCO-style data)"""
    path = tmp_path / "c.tsv"
    path.write_text("0\tContent\n1\tsecond document here\n", encoding="utf-8")
    assert [(d.id, d.text) for d in read_corpus(path)] == [("0", "Content"), ("1", "second document here")]


@pytest.mark.parametrize(("doc_id", "text"), [("d1", "volcano"), ("x1", "Graphs"), ("MED-10", "word"),
                                               ("doc_7", "passage"), ("0", "pid")])
def test_a_headerless_tsv_whose_first_id_is_no_column_name_is_a_document(tmp_path: Path, doc_id: str,
                                                                         text: str) -> None:
    """(review: 'd1<TAB>volcano', a document of one word whose id looks like a name, was refused as no header)"""
    path = tmp_path / "c.tsv"
    path.write_text(f"{doc_id}\t{text}\n1\tsecond document here\n", encoding="utf-8")
    assert [(d.id, d.text) for d in read_corpus(path)] == [(doc_id, text), ("1", "second document here")]


def test_a_tsv_first_line_of_two_names_is_a_header_and_the_error_says_how_to_read_it_as_a_document(
        tmp_path: Path) -> None:
    path = tmp_path / "c.tsv"
    path.write_text("doc_a\tGraphs\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        list(read_corpus(path))
    assert str(info.value) == (f"{path}:1: the first line must name the columns, among them an id (_id, id, docid, "
                               "doc_id) and a text (text, contents, body); it holds 'doc_a', 'Graphs' (a TSV file "
                               "without a header holds id<TAB>text on every line; if this line is a document, put "
                               "a header line id<TAB>text before it)")
    path.write_text("id\ttext\ndoc_a\tGraphs\n", encoding="utf-8")
    assert [(d.id, d.text) for d in read_corpus(path)] == [("doc_a", "Graphs")]
    path.write_text("\n\t\nid\ttext\ttitle\na\tone\tT\n", encoding="utf-8")  # a header after blank lines
    assert [(d.id, d.text, d.title) for d in read_corpus(path)] == [("a", "one", "T")]


def test_a_text_merely_in_quotes_is_not_warned_of(tmp_path: Path, caplog) -> None:
    path = tmp_path / "q.tsv"
    path.write_text('0\t"A quotation on its own."\n1\t"QUOTE_ALL"\n', encoding="utf-8")
    with caplog.at_level("WARNING", logger="graphdoc"):
        assert [d.text for d in read_corpus(path)] == ['"A quotation on its own."', '"QUOTE_ALL"']
    assert caplog.records == []
    path.write_text('"0"\t"every field quoted, as QUOTE_ALL writes"\n', encoding="utf-8")
    with caplog.at_level("WARNING", logger="graphdoc"):
        list(read_corpus(path))
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        f"{path}:1: a field is in double quotes, as CSV writers quote (pandas, Python's csv module)"]


def test_a_queries_header_with_a_trailing_tab(tmp_path: Path) -> None:
    from graphdoc.corpus import read_queries

    path = tmp_path / "queries.tsv"
    path.write_text("qid\ttext\t\nq1\tvolcano lava\n", encoding="utf-8")
    assert list(read_queries(path)) == [("q1", "volcano lava")]
    path.write_text("qid\ttitle\ttext\t\nq1\tT\tvolcano lava\t\nq2\tU\tice\n", encoding="utf-8")
    assert list(read_queries(path)) == [("q1", "volcano lava"), ("q2", "ice")]
