"""JSON lines corpora: exact documents, gzip, streaming, empty documents and one-line errors."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest

from graphdoc.corpus import ReadStats, read_corpus, read_queries
from graphdoc.documents import Section
from graphdoc.errors import InputError


def write_lines(path: Path, lines: list[str | dict]) -> Path:
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_documents_with_titles_sections_and_metadata(tmp_path):
    path = write_lines(tmp_path / "corpus.jsonl", [
        {"_id": "d1", "title": "One", "text": "first text", "label": "sci.space"},
        "",
        {"id": 2, "contents": "second"},
        {"_id": "d3", "sections": [{"title": "", "text": "intro"}, {"title": "Body", "text": "more"}]},
    ])
    docs = list(read_corpus(path))
    assert [d.id for d in docs] == ["d1", "2", "d3"]
    assert (docs[0].title, docs[0].text, docs[0].metadata) == ("One", "first text", {"label": "sci.space"})
    assert docs[1].text == "second" and docs[1].sections is None
    assert docs[2].text == "intro\nmore"
    assert docs[2].sections == [Section("", 0, 5), Section("Body", 6, 10)]


def test_gzip_and_json_gz_suffixes(tmp_path):
    for name in ("c.jsonl.gz", "c.json.gz"):
        with gzip.open(tmp_path / name, "wt", encoding="utf-8") as f:
            f.write(json.dumps({"_id": "a", "text": "zipped"}) + "\n")
        assert [(d.id, d.text) for d in read_corpus(str(tmp_path / name))] == [("a", "zipped")]


def test_json_suffix_is_json_lines_and_a_pretty_printed_file_is_one_error(tmp_path):
    path = write_lines(tmp_path / "corpus.json", [{"_id": "a", "text": "first"}, {"_id": "b", "text": "second"}])
    assert [(d.id, d.text) for d in read_corpus(path)] == [("a", "first"), ("b", "second")]  # datasets' to_json
    path.write_text(json.dumps({"_id": "a", "text": "one record"}, indent=2), encoding="utf-8")
    with pytest.raises(InputError, match=r"corpus\.json:1: .*looks like pretty-printed JSON"):
        list(read_corpus(path))


def test_streams_lazily_up_to_a_broken_line(tmp_path):
    path = write_lines(tmp_path / "c.jsonl", [{"_id": "a", "text": "ok"}, "{broken"])
    docs = read_corpus(path)
    assert next(docs).id == "a"
    with pytest.raises(InputError, match=r"c\.jsonl:2: invalid JSON"):
        next(docs)


def test_empty_documents_are_skipped_counted_and_logged_once(tmp_path, caplog):
    path = write_lines(tmp_path / "c.jsonl", [
        {"_id": "a", "text": "x"}, {"_id": "b", "text": ""}, {"_id": "c", "text": " \n\t"}, {"_id": "d", "text": "y"},
    ])
    stats = ReadStats()
    with caplog.at_level(logging.INFO, logger="graphdoc.corpus"):
        ids = [d.id for d in read_corpus(path, stats=stats)]
    assert ids == ["a", "d"]
    assert (stats.documents, stats.empty_skipped, stats.skipped_ids) == (2, 2, ["b", "c"])
    messages = [r.getMessage() for r in caplog.records if "empty" in r.getMessage()]
    assert len(messages) == 1 and "skipped 2 empty document(s)" in messages[0]


@pytest.mark.parametrize("line, message", [
    ('{"_id": "a" "text": "x"}', r"c\.jsonl:2: invalid JSON \(Expecting ',' delimiter at column 13\)$"),
    ('["a", "b"]', r"c\.jsonl:2: expected a JSON object, got an array$"),
    ('"just text"', r"c\.jsonl:2: expected a JSON object, got a string$"),
    ('{"text": "no id"}', r"c\.jsonl:2: record has no id field"),
    ('{"_id": "b"}', r"c\.jsonl:2: document 'b' has no text field"),
    ('{"_id": "b", "text": 3}', r"c\.jsonl:2: document 'b': text must be a string"),
    ('{"_id": "a", "text": "again"}', r"c\.jsonl:2: duplicate document id 'a' \(first seen on line 1\)$"),
])
def test_bad_lines_name_file_and_line(tmp_path, line, message):
    path = write_lines(tmp_path / "c.jsonl", [{"_id": "a", "text": "x"}, line])
    with pytest.raises(InputError, match=message) as info:
        list(read_corpus(path))
    assert "\n" not in str(info.value)


def test_bad_utf8_names_line_and_column(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"_id": "a", "text": "x"}\n\n{"_id": "\xe9"}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:3: not valid UTF-8 \(byte 0xe9 at column 10\)$"):
        list(read_corpus(path))


def test_broken_gzip_is_one_line(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(InputError, match=r"c\.jsonl\.gz: cannot read file"):
        list(read_corpus(path))


def test_bom_and_crlf_are_tolerated(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"_id": "a", "text": "x"}\r\n{"_id": "b", "text": "y"}\r\n')
    assert [d.id for d in read_corpus(path)] == ["a", "b"]


def test_jsonl_queries(tmp_path):
    path = write_lines(tmp_path / "queries.jsonl", [{"_id": "q1", "text": "what"}, {"id": 2, "query": "who"}])
    assert list(read_queries(path)) == [("q1", "what"), ("2", "who")]


@pytest.mark.parametrize("record, message", [
    ({"text": "x"}, r"q\.jsonl:2: query has no id"),
    ({"_id": "q2"}, r"q\.jsonl:2: query has no text"),
    ({"_id": "q1", "text": "again"}, r"q\.jsonl:2: duplicate query id 'q1' \(first seen on line 1\)"),
    ({"_id": "q2", "text": ["cancer", "prion"]}, r"q\.jsonl:2: query 'q2': text must be a string, got list$"),
    ({"_id": "q2", "query": 911}, r"q\.jsonl:2: query 'q2': query must be a string, got int$"),
])
def test_bad_queries(tmp_path, record, message):
    path = write_lines(tmp_path / "q.jsonl", [{"_id": "q1", "text": "what"}, record])
    with pytest.raises(InputError, match=message):
        list(read_queries(path))
