"""Review fixes: lone surrogates, ids that break one-per-line and TREC files, non-scalar JSON ids,
MediaWiki page ids, and the sections of a Document built directly; each one exact error line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphdoc.cli import main
from graphdoc.corpus import read_corpus, read_qrels, read_queries
from graphdoc.documents import Document, Section
from graphdoc.errors import InputError


def write_raw(path: Path, *lines: str) -> Path:
    """Write lines as given (JSON escapes such as ``\\ud800`` stay escapes in the file)."""
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def error(source: Path, read=read_corpus) -> str:
    """The message of the InputError that reading ``source`` to the end raises; it must be one line."""
    with pytest.raises(InputError) as info:
        result = read(source)
        if not isinstance(result, dict):  # qrels are read at once; documents and queries as they stream
            list(result)
    message = str(info.value)
    assert message.splitlines() == [message]
    return message


# ------------------------------------------------------------------ lone surrogates
@pytest.mark.parametrize("line, message", [
    (r'{"_id": "a", "text": "x\ud800y"}', "document 'a': text is not valid Unicode (lone surrogate \\ud800)"),
    (r'{"_id": "a\udfff", "text": "fine"}',
     "document 'a\\udfff': id is not valid Unicode (lone surrogate \\udfff)"),
    (r'{"_id": "a", "title": "T\udc80", "text": "fine"}',
     "document 'a': title is not valid Unicode (lone surrogate \\udc80)"),
    (r'{"_id": "a", "sections": [{"title": "A", "text": "ok"}, {"title": "B", "text": "b\ud83d"}]}',
     "document 'a': text is not valid Unicode (lone surrogate \\ud83d)"),
    (r'{"_id": "a", "sections": [{"title": "A\ud800", "text": "ok"}]}',
     "document 'a': section 0 title is not valid Unicode (lone surrogate \\ud800)"),
])
def test_lone_surrogates_in_jsonl_name_file_line_and_field(tmp_path, line, message):
    path = write_raw(tmp_path / "surr.jsonl", '{"_id": "ok", "text": "caf\\u00e9 \\ud83d\\ude00"}', line)
    assert error(path) == f"{path}:2: {message}"


def test_a_surrogate_pair_is_valid_text(tmp_path):
    path = write_raw(tmp_path / "pair.jsonl", r'{"_id": "a", "text": "smile \ud83d\ude00"}')
    assert [d.text for d in read_corpus(path)] == ["smile \U0001F600"]


@pytest.mark.parametrize("line, message", [
    (r'{"_id": "q\ud800", "text": "what"}', "query 'q\\ud800': id is not valid Unicode (lone surrogate \\ud800)"),
    (r'{"_id": "q1", "text": "wh\udc00at"}', "query 'q1': text is not valid Unicode (lone surrogate \\udc00)"),
])
def test_lone_surrogates_in_jsonl_queries(tmp_path, line, message):
    path = write_raw(tmp_path / "q.jsonl", line)
    assert error(path, read_queries) == f"{path}:1: {message}"


def test_embed_cli_reports_a_surrogate_in_one_line_and_writes_nothing(tiny_bert, tmp_path, capsys,
                                                                      restore_cli_state):
    corpus = write_raw(tmp_path / "surr.jsonl", r'{"_id": "a\ud800", "text": "fine"}')
    output = tmp_path / "x.npy"
    assert main(["-q", "embed", "--corpus", str(corpus), "--output", str(output), "--model", str(tiny_bert)]) == 1
    assert capsys.readouterr().err == (f"graphdoc embed: error: {corpus}:1: document 'a\\ud800': "
                                       "id is not valid Unicode (lone surrogate \\ud800)\n")
    assert not output.exists() and not (tmp_path / "x.ids.txt").exists()


# ------------------------------------------------------------------ ids: line breaks, blank, whitespace
LINE_BREAK = "has a line break (ids are stored one per line)"
WHITESPACE = "has whitespace (TREC run and qrels files are whitespace-separated)"


@pytest.mark.parametrize("doc_id, problem", [
    *[(f"a{c}b", LINE_BREAK) for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"],
    ("a\n", LINE_BREAK),
    ("   ", "is only whitespace"),
])
def test_jsonl_ids_that_break_id_files(tmp_path, doc_id, problem):
    path = write_raw(tmp_path / "c.jsonl", json.dumps({"_id": "ok", "text": "x"}),
                     json.dumps({"_id": doc_id, "text": "x"}))
    assert error(path) == f"{path}:2: document id {doc_id!r} {problem}"


@pytest.mark.parametrize("doc_id", ["a b", "a\tb", " a", "a\u00a0b"])
def test_document_ids_may_hold_spaces_query_ids_may_not(tmp_path, doc_id):
    path = write_raw(tmp_path / "c.jsonl", json.dumps({"_id": doc_id, "text": "x"}))
    assert [d.id for d in read_corpus(path)] == [doc_id]
    queries = write_raw(tmp_path / "q.jsonl", json.dumps({"_id": doc_id, "text": "x"}))
    assert error(queries, read_queries) == f"{queries}:1: query id {doc_id!r} {WHITESPACE}"


def test_beir_corpus_queries_and_qrels_ids(tmp_path):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    corpus = write_raw(folder / "corpus.jsonl", json.dumps({"_id": "d\u20281", "text": "x"}))
    assert error(folder) == f"{corpus}:1: document id 'd\\u20281' {LINE_BREAK}"
    queries = write_raw(folder / "queries.jsonl", json.dumps({"_id": "q 1", "text": "what"}))
    assert error(folder, read_queries) == f"{queries}:1: query id 'q 1' {WHITESPACE}"
    qrels = write_raw(folder / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore", "q1\td 1\t1")
    assert error(folder, read_qrels) == f"{qrels}:2: judged document id 'd 1' {WHITESPACE}"
    write_raw(qrels, "q1\t\t1")
    assert error(qrels, read_qrels) == f"{qrels}:1: judged document id '' is empty"


def test_tsv_query_ids(tmp_path):
    path = write_raw(tmp_path / "topics.tsv", "q1\tfine", "q 2\tspaced id")
    assert error(path, read_queries) == f"{path}:2: query id 'q 2' {WHITESPACE}"


def test_text_folder_file_names(tmp_path):
    (tmp_path / "ok.md").write_text("fine", encoding="utf-8")
    (tmp_path / "a\nb.md").write_text("text", encoding="utf-8")
    bad = repr(str(tmp_path / "a\nb.md"))
    assert error(tmp_path) == f"{bad}: document id 'a\\nb' (from the file name) {LINE_BREAK}; rename the file"
    (tmp_path / "a\nb.md").unlink()
    (tmp_path / "my notes.txt").write_text("text", encoding="utf-8")
    assert sorted(d.id for d in read_corpus(tmp_path)) == ["my notes", "ok"]


def test_text_file_name_that_is_not_utf8(tmp_path):
    name = b"caf\xe9.md".decode("utf-8", "surrogateescape")  # how Python names such a file: 'caf\udce9.md'
    try:
        (tmp_path / name).write_text("t", encoding="utf-8")
    except (UnicodeEncodeError, OSError):
        pytest.skip("the file system does not take file names that are not UTF-8")
    shown = repr(str(tmp_path / name))
    assert error(tmp_path) == f"{shown}: file name is not valid UTF-8 (it makes the document id); rename the file"


# ------------------------------------------------------------------ JSON ids that are not scalars
@pytest.mark.parametrize("value, shown", [
    ({"k": 1}, '{"k": 1}'), (True, "true"), ([1], "[1]"), (1.0, "1.0"), (1e20, "1e+20"),
    ({"k": "v" * 50}, '{"k": "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvv...'),
])
def test_ids_must_be_strings_or_integers(tmp_path, value, shown):
    path = write_raw(tmp_path / "c.jsonl", json.dumps({"_id": value, "text": "x"}))
    assert error(path) == f"{path}:1: id field '_id' must be a string or an integer, got {shown}"
    queries = write_raw(tmp_path / "q.jsonl", json.dumps({"qid": value, "text": "x"}))
    assert error(queries, read_queries) == f"{queries}:1: id field 'qid' must be a string or an integer, got {shown}"


def test_integer_ids_are_written_in_decimal(tmp_path):
    path = write_raw(tmp_path / "c.jsonl", '{"_id": 7, "text": "x"}', '{"id": 12345678901234567890, "text": "y"}')
    assert [d.id for d in read_corpus(path)] == ["7", "12345678901234567890"]


# ------------------------------------------------------------------ MediaWiki page ids
def wiki(path: Path, *pages: str) -> Path:
    path.write_text('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">\n' + "\n".join(pages)
                    + "\n</mediawiki>\n", encoding="utf-8")
    return path


def page(title: str, page_id: str | None, text: str, ns: int = 0) -> str:
    id_tag = f"<id>{page_id}</id>" if page_id is not None else ""
    return f"<page><title>{title}</title><ns>{ns}</ns>{id_tag}<revision><text>{text}</text></revision></page>"


def test_mediawiki_duplicate_page_id(tmp_path):
    path = wiki(tmp_path / "wiki.xml", page("Fox", "1", "Foxes."), page("Talk:Fox", "1", "talk", ns=1),
                page("Dog", "1", "Dogs bark."))
    assert error(path) == f"{path}: duplicate page id '1' (page 'Dog')"


def test_mediawiki_page_without_id(tmp_path):
    path = wiki(tmp_path / "wiki.xml", page("Fox", "1", "Foxes."), page("NoId", None, "Text without an id."))
    assert error(path) == f"{path}: page 'NoId' has no <id>"
    path = wiki(tmp_path / "blank.xml", page("Blank", " ", "Text."))
    assert error(path) == f"{path}: page 'Blank' has no <id>"


def test_mediawiki_page_id_with_a_line_break_inside(tmp_path):
    path = wiki(tmp_path / "wiki.xml", page("Fox", "1\n2", "Foxes."))
    assert error(path) == f"{path}: page 'Fox': page id '1\\n2' {LINE_BREAK}"


def test_mediawiki_ids_around_whitespace_are_trimmed_and_other_namespaces_may_repeat(tmp_path):
    path = wiki(tmp_path / "wiki.xml", page("Fox", "\n 1 \n", "Foxes."), page("Talk:Fox", "1", "talk", ns=1),
                page("Dog", "2", "Dogs bark."))
    assert [(d.id, d.title) for d in read_corpus(path)] == [("1", "Fox"), ("2", "Dog")]


# ------------------------------------------------------------------ Document built directly
TEXT = "hello world"


@pytest.mark.parametrize("kwargs, message", [
    ({"sections": [Section("X", 5, 2)]}, "document 'x': section 0 ('X') ends before it starts ([5, 2))"),
    ({"sections": [Section("X", -1, 11)]},
     "document 'x': section 0 ('X') span [-1, 11) is outside the text (0 to 11)"),
    ({"sections": [Section("X", 0, 12)]},
     "document 'x': section 0 ('X') span [0, 12) is outside the text (0 to 11)"),
    ({"sections": [Section("A", 0, 5)]},
     "document 'x': text[5:11] ('world') is in no section (sections must cover all the text but whitespace)"),
    ({"sections": [Section("B", 6, 11)]},
     "document 'x': text[0:6] ('hello') is in no section (sections must cover all the text but whitespace)"),
    ({"sections": [Section("A", 0, 7), Section("B", 3, 11)]},
     ("document 'x': section 1 ('B') starts at 3, before section 0 ends (at 7): "
      "sections must be in order and not overlap")),
    ({"sections": [Section("B", 6, 11), Section("A", 0, 5)]},
     ("document 'x': section 1 ('A') starts at 0, before section 0 ends (at 11): "
      "sections must be in order and not overlap")),
    ({"sections": [("A", 0, 11)]},
     "document 'x': section 0 must be a graphdoc.Section(title, start, end), got tuple"),
    ({"sections": [{"title": "A", "start": 0, "end": 11}]},
     "document 'x': section 0 must be a graphdoc.Section(title, start, end), got dict"),
    ({"sections": [Section("A", 0.0, 11)]},
     ("document 'x': section 0 must have a string title and integer start and end, "
      "got Section(title='A', start=0.0, end=11)")),
    ({"sections": "A"}, "document 'x': sections must be a list of graphdoc.Section, got str"),
    ({"text": None}, "document 'x': text must be a string, got NoneType"),
    ({"title": 3}, "document 'x': title must be a string, got int"),
    ({"id": None}, "document id must be a string or an integer, got NoneType (None)"),
    ({"id": 7.0}, "document id must be a string or an integer, got float (7.0)"),
    ({"id": True}, "document id must be a string or an integer, got bool (True)"),
    ({"id": "a\u2028b"}, f"document id 'a\\u2028b' {LINE_BREAK}"),
    ({"text": "x\ud800"}, "document 'x': text is not valid Unicode (lone surrogate \\ud800)"),
])
def test_document_refuses_what_would_crash_or_lose_text(kwargs, message):
    fields = {"id": "x", "text": TEXT, **kwargs}
    with pytest.raises(InputError) as info:
        Document(**fields)
    assert str(info.value) == message


@pytest.mark.parametrize("sections", [
    None, [], [Section("", 0, 11)], [Section("A", 0, 5), Section("B", 6, 11)],  # a space between: fine
    [Section("A", 0, 6), Section("", 6, 6), Section("B", 6, 11)], (Section("A", 0, 11),),
])
def test_document_accepts_sections_that_cover_the_words(sections):
    doc = Document("x", TEXT, sections=sections)
    assert doc.sections == sections


def test_an_integer_document_id_becomes_its_decimal_string():
    assert Document(7, "text").id == "7"


def test_document_may_have_a_blank_or_spaced_id_in_python():
    """Only the readers refuse these (TREC files); a query is a Document with id ''."""
    assert [Document(i, "text").id for i in ("", "a b")] == ["", "a b"]


def test_from_dict_and_readers_build_valid_sections(tmp_path):
    doc = Document.from_dict({"id": 1, "sections": [{"title": "A", "text": "one"}, {"title": "B", "text": ""},
                                                    {"title": "C", "text": "three"}]})
    assert (doc.id, doc.sections) == ("1", [Section("A", 0, 3), Section("B", 4, 4), Section("C", 5, 10)])
    (tmp_path / "n.md").write_text("Intro\n\n# One\ntext\n## Two\nmore\n", encoding="utf-8")
    [read] = read_corpus(tmp_path)
    assert [s.title for s in read.sections] == ["", "One", "Two"]


@pytest.mark.parametrize("name, lines", [
    ("q.tsv", ["query-id\tcorpus-id\tscore", "q1\td1\t1", "q1\td2\t0", "q1\td1\t1", "q1\td1\t2"]),
    ("q.txt", ["q0 0 d0 1", "q1 0 d1 1", "q1 0 d2 0", "q1 0 d1 1", "q1 0 d1 2"]),
])
def test_a_pair_judged_twice_with_two_grades_is_an_error(tmp_path, name, lines):
    path = write_raw(tmp_path / name, *lines)
    assert error(path, read_qrels) == f"{path}:5: query 'q1' and document 'd1' are judged 2 here and 1 on line 2"
    path = write_raw(tmp_path / name, *lines[:4])  # the same grade twice is harmless
    assert read_qrels(path)["q1"] == {"d1": 1, "d2": 0}


def test_a_query_without_text_is_an_error(tmp_path):
    path = write_raw(tmp_path / "q.jsonl", json.dumps({"_id": "q1", "text": "fine"}),
                     json.dumps({"_id": "q2", "text": "  "}))
    assert error(path, read_queries) == f"{path}:2: query has no text (expected a non-empty field: text, query)"
    path = write_raw(tmp_path / "q.tsv", "q1\tfine", "q2\t   ")
    assert error(path, read_queries) == f"{path}:2: query 'q2' has no text"
