"""Folders of .txt/.md/.markdown files: ids, titles, sections, order, and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphdoc.corpus import read_corpus
from graphdoc.documents import Section
from graphdoc.errors import InputError


def make_folder(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / ".hidden").mkdir()
    (root / "b.md").write_text("Preface\n# Guide\nintro\n## Install\nrun it\n", encoding="utf-8")
    (root / "a.txt").write_text("plain words\n", encoding="utf-8")
    (root / "sub" / "c.md").write_text("## Only sub\ntext\n", encoding="utf-8")
    (root / "notes.csv").write_text("x,y\n", encoding="utf-8")
    (root / ".hidden" / "d.md").write_text("secret\n", encoding="utf-8")
    return root


def test_folder_documents_exact(tmp_path):
    docs = list(read_corpus(make_folder(tmp_path / "docs")))
    assert [d.id for d in docs] == ["a", "b", "sub/c"]
    a, b, c = docs
    assert (a.title, a.text, a.sections) == ("a", "plain words\n", [Section("", 0, 12)])
    assert b.title == "Guide"
    assert b.text == "Preface\n# Guide\nintro\n## Install\nrun it\n"
    assert b.sections == [Section("", 0, 8), Section("Guide", 8, 22), Section("Install", 22, 40)]
    assert (c.title, c.sections) == ("c", [Section("Only sub", 0, 17)])


def test_single_file_and_crlf(tmp_path):
    path = tmp_path / "note.md"
    path.write_bytes(b"# Note\r\nline\r\n")
    [doc] = read_corpus(path)
    assert (doc.id, doc.title, doc.text) == ("note", "Note", "# Note\nline\n")


def test_bad_encoding_names_file_and_line(tmp_path):
    (tmp_path / "ok.txt").write_text("fine", encoding="utf-8")
    (tmp_path / "bad.txt").write_bytes(b"first\nsecond caf\xe9\n")
    docs = read_corpus(tmp_path)
    with pytest.raises(InputError, match=r"bad\.txt:2: not valid UTF-8 \(byte 0xe9 at column 11\)$"):
        list(docs)


def test_same_id_from_two_files(tmp_path):
    (tmp_path / "x.md").write_text("one", encoding="utf-8")
    (tmp_path / "x.txt").write_text("two", encoding="utf-8")
    with pytest.raises(InputError, match=r"x\.txt: duplicate document id 'x' \(also from x\.md\)"):
        list(read_corpus(tmp_path))


def test_folder_without_text_files(tmp_path):
    (tmp_path / "data.csv").write_text("a,b", encoding="utf-8")
    with pytest.raises(InputError, match=r"folder has no \.markdown/\.md/\.txt files"):
        read_corpus(tmp_path)


def test_markdown_suffix_is_read_like_md(tmp_path):
    (tmp_path / "guide.markdown").write_text("# Guide\nintro\n## Install\nrun it\n", encoding="utf-8")
    (tmp_path / "notes.MD").write_text("plain\n", encoding="utf-8")
    docs = list(read_corpus(tmp_path))
    assert [(d.id, d.title) for d in docs] == [("guide", "Guide"), ("notes", "notes")]
    assert docs[0].sections == [Section("Guide", 0, 14), Section("Install", 14, 32)]
    [single] = read_corpus(tmp_path / "guide.markdown")
    assert single.sections == docs[0].sections


def test_data_files_in_a_folder_are_named_not_silently_left_out(tmp_path, caplog):
    """JSON lines shards next to a README: the folder corpus reads the README only, and says which data files
    it did not read; with no text file at all, the error names them."""
    import gzip
    import logging

    folder = tmp_path / "shards"
    folder.mkdir()
    (folder / "part-0001.jsonl").write_text('{"_id": "a", "text": "hello"}\n', encoding="utf-8")
    (folder / "part-0002.jsonl.gz").write_bytes(gzip.compress(b'{"_id": "b", "text": "world"}\n'))
    (folder / "logo.png").write_bytes(b"\x89PNG")
    with pytest.raises(InputError, match=r"^.*shards: folder has no \.markdown/\.md/\.txt files \(and no "
                       r"corpus\.jsonl\[\.gz\] of a BEIR folder\); it holds 2 data file\(s\) \(part-0001\.jsonl, "
                       r"part-0002\.jsonl\.gz\): give one as the corpus itself$"):
        list(read_corpus(folder))
    (folder / "README.md").write_text("# My dataset\n\nTwo shards.\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        docs = list(read_corpus(folder))
    assert [d.id for d in docs] == ["README"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{folder}: read its 1 .markdown/.md/.txt file(s), not its 2 data file(s) (part-0001.jsonl, "
        "part-0002.jsonl.gz): give a data file as the corpus itself to read it",
        f"{folder}: read its 1 .markdown/.md/.txt file(s), not its 1 other file(s) (logo.png): graphdoc reads no "
        "other kind in a folder (convert them to text, or to JSON lines or CSV)"]


def test_other_files_in_a_folder_are_named_not_silently_left_out(tmp_path, caplog):
    """A folder of .md, .html and .pdf files read the .md ones and said nothing of the others."""
    import logging

    folder = tmp_path / "mydocs"
    (folder / "sub").mkdir(parents=True)
    (folder / "page.html").write_text("<p>hi</p>", encoding="utf-8")
    (folder / "sub" / "doc.rst").write_text("Title\n=====\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"^.*mydocs: folder has no \.markdown/\.md/\.txt files \(and no "
                       r"corpus\.jsonl\[\.gz\] of a BEIR folder\); it holds 2 other file\(s\) \(page\.html, "
                       r"sub/doc\.rst\), which graphdoc does not read$"):
        list(read_corpus(folder))
    (folder / "notes.md").write_text("Some notes.\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        assert [d.id for d in read_corpus(folder)] == ["notes"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{folder}: read its 1 .markdown/.md/.txt file(s), not its 2 other file(s) (page.html, sub/doc.rst): "
        "graphdoc reads no other kind in a folder (convert them to text, or to JSON lines or CSV)"]
