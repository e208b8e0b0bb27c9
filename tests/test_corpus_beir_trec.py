"""BEIR folders, TREC topics and qrels, TSV queries, and format detection errors."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest

from graphdoc.corpus import data_files, read_corpus, read_qrels, read_queries
from graphdoc.errors import InputError

TOPICS = """<top>
<num> Number: 301
<title> International Organized Crime

<desc> Description:
Identify organizations that participate in international criminal activity.

<narr> Narrative:
A relevant document must, as a minimum, identify the organization.
</top>

<top>
<num> Number: 302 <title> Topic: Poliomyelitis and
Post-Polio
<desc> Is the disease still a threat?
</top>
"""


def make_beir(root: Path, gz: bool = False) -> Path:
    (root / "qrels").mkdir(parents=True)
    docs = [{"_id": "d1", "title": "T1", "text": "alpha"}, {"_id": "d2", "title": "", "text": "beta"}]
    lines = "".join(json.dumps(d) + "\n" for d in docs)
    if gz:
        with gzip.open(root / "corpus.jsonl.gz", "wt", encoding="utf-8") as f:
            f.write(lines)
    else:
        (root / "corpus.jsonl").write_text(lines, encoding="utf-8")
    queries = [{"_id": "q1", "text": "first?"}, {"_id": "q2", "text": "second?"}, {"_id": "q3", "text": "third?"}]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq3\td2\t2\nq3\td1\t0\n")
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td2\t1\n")
    return root


@pytest.mark.parametrize("gz", [False, True])
def test_beir_corpus(tmp_path, gz):
    docs = list(read_corpus(make_beir(tmp_path / "beir", gz)))
    assert [(d.id, d.title, d.text) for d in docs] == [("d1", "T1", "alpha"), ("d2", "", "beta")]


def test_beir_queries_and_qrels_by_split(tmp_path):
    root = make_beir(tmp_path / "beir")
    assert [q for q, _ in read_queries(root)] == ["q1", "q2", "q3"]
    assert list(read_queries(root, split="test")) == [("q1", "first?"), ("q3", "third?")]
    assert list(read_queries(str(root), split="train")) == [("q2", "second?")]
    expected_test = {"q1": {"d1": 1}, "q3": {"d2": 2, "d1": 0}}
    assert read_qrels(root) == expected_test
    assert read_qrels(root, split="test") == expected_test
    assert read_qrels(root / "qrels" / "train.tsv") == {"q2": {"d2": 1}}


def test_a_beir_folder_of_queries_and_qrels_alone_is_read_as_one_with_its_corpus(tmp_path):
    root = make_beir(tmp_path / "beir")
    (root / "corpus.jsonl").unlink()
    assert list(read_queries(root, split="test")) == [("q1", "first?"), ("q3", "third?")]
    assert read_qrels(root, split="train") == {"q2": {"d2": 1}}
    assert data_files(root) == [root / "queries.jsonl", root / "qrels" / "test.tsv", root / "qrels" / "train.tsv"]
    (root / "queries.jsonl").unlink()
    assert read_qrels(root) == {"q1": {"d1": 1}, "q3": {"d2": 2, "d1": 0}}  # qrels alone
    with pytest.raises(InputError, match=r"beir: unknown queries format \(accepted: a BEIR folder"):
        list(read_queries(root))
    with pytest.raises(InputError, match=r"beir: folder has no .* \(and no corpus\.jsonl\[\.gz\] of a BEIR folder\)"):
        list(read_corpus(root))


def test_beir_unknown_split_lists_splits(tmp_path):
    root = make_beir(tmp_path / "beir")
    with pytest.raises(InputError, match=r"dev\.tsv: no qrels for split 'dev' \(splits here: test, train\)$"):
        read_qrels(root, split="dev")


def test_split_only_for_folders(tmp_path):
    root = make_beir(tmp_path / "beir")
    assert read_qrels(root / "qrels" / "test.tsv", split="test") == read_qrels(root)  # the file is that split
    with pytest.raises(InputError, match=r"split='train' applies only to BEIR folders and named corpora"):
        read_qrels(root / "qrels" / "test.tsv", split="train")
    with pytest.raises(InputError, match=r"queries\.jsonl: split='test' applies only to BEIR folders"):
        read_queries(root / "queries.jsonl", split="test")


def test_trec_topics(tmp_path):
    path = tmp_path / "topics.301-302.txt"
    path.write_text(TOPICS, encoding="utf-8")
    assert list(read_queries(path)) == [("301", "International Organized Crime"),
                                        ("302", "Poliomyelitis and Post-Polio")]


def test_trec_topics_with_closing_tags_and_on_one_line(tmp_path):
    path = tmp_path / "topics"
    path.write_text("<top>\n<num> Number: 302 <title> Poliomyelitis and Post-Polio </title>\n</top>\n"
                    "<top><num>303</num><title>Hubble Telescope Achievements</title></top>\n", encoding="utf-8")
    assert list(read_queries(path)) == [("302", "Poliomyelitis and Post-Polio"),
                                        ("303", "Hubble Telescope Achievements")]


@pytest.mark.parametrize("text, message", [
    ("<top>\n<num> Number: 5\n<title> x\n", r"topics:1: topic opened here is never closed with </top>"),
    ("<top>\n<num> 8\n<title> a\n</top>\n<top> <num> 8 <title> b </top>\n",
     r"topics:5: duplicate topic id '8' \(first seen on line 1\)"),
    ("<top>\n<title> x\n</top>\n", r"topics:1: topic has no <num>"),
    ("<top>\n<num> Number: 7\n</top>\n", r"topics:1: topic 7 has no <title>"),
    ("<top>\n<num> 1\n<title> a\n<top>\n", r"topics:4: <top> before the topic opened on line 1 was closed"),
    ("<top>\n<num> 1 <title> a\n</top>\nstray\n", r"topics:4: expected <top>, got 'stray'"),
])
def test_bad_topics(tmp_path, text, message):
    path = tmp_path / "topics"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=message):
        list(read_queries(path))


def test_trec_qrels(tmp_path):
    path = tmp_path / "qrels.robust"
    path.write_text("301 0 FBIS3-10082 1\n301 0 FBIS3-10169 0\n\n302\t0\tLA010189-0001\t2\n")
    assert read_qrels(path) == {"301": {"FBIS3-10082": 1, "FBIS3-10169": 0}, "302": {"LA010189-0001": 2}}


@pytest.mark.parametrize("name, text, message", [
    ("q.trec", "301 0 D1 1\n301 0 D2\n",
     r"q\.trec:2: expected 4 fields \(query-id iteration doc-id relevance\), got 3"),
    ("q.trec", "301 0 D1 1\n301 0 D2 high\n", r"q\.trec:2: relevance must be an integer, got 'high'"),
    ("q.trec", "301 0 D1 1.5\n", r"q\.trec:1: relevance must be an integer, got '1\.5'"),  # not "unknown format"
    ("q.tsv", "query-id\tcorpus-id\tscore\nq1\td1\n", r"q\.tsv:2: expected 3 tab-separated fields"),
    ("q.tsv", "query-id\tcorpus-id\tscore\nq1\td1\tx\n", r"q\.tsv:2: relevance must be an integer, got 'x'"),
    ("q.txt", "just some words\n", r"q\.txt: unknown qrels format \(accepted: a BEIR folder"),
    ("q.txt", "1 how to cook\n", r"q\.txt: unknown qrels format"),  # four words: queries, not qrels
])
def test_bad_qrels(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=message):
        read_qrels(path)


@pytest.mark.parametrize("text", ["q1 Q0 d1 1 9.5 bm25\nq1 Q0 d2 2 8 bm25\n", "\nq1\tQ0\td1\t1\t-1.5e-3\tx\n"])
def test_a_run_read_as_qrels_is_named_so(tmp_path, text):
    """(graphdoc eval --qrels RUN said only 'unknown qrels format')"""
    from graphdoc.corpus.formats import QRELS_FORMATS, accepted

    path = tmp_path / "given.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_qrels(path)
    assert str(err.value) == (f"{path}: unknown qrels format (this looks like a run file, which graphdoc eval takes "
                              f"as --run; accepted: {accepted(QRELS_FORMATS)})")


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_empty_qrels_file_says_it_is_empty(tmp_path, text):
    path = tmp_path / "qrels.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_qrels(path)
    assert str(err.value) == f"{path}: the qrels file is empty"


def test_tsv_queries(tmp_path):
    path = tmp_path / "queries.tsv"
    path.write_text("qid\ttext\n1185869\t)what was the immediate impact\n19335\tanthropological definition\n")
    assert list(read_queries(path)) == [("1185869", ")what was the immediate impact"),
                                        ("19335", "anthropological definition")]
    path.write_text("1\tfine\nno tab here\n")
    with pytest.raises(InputError, match=r"queries\.tsv:2: expected 'query-id<TAB>text', found no tab"):
        list(read_queries(path))
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")  # qrels given as queries: "d1\t1" searched
    with pytest.raises(InputError, match=r"queries\.tsv: its header 'query-id\\tcorpus-id\\tscore' is that of a "
                                         r"BEIR qrels file, not of queries \(query-id<TAB>text\)$"):
        list(read_queries(path))
    path.write_text("q1\tcats\nq2\tbirds\nq1\tdogs\n")  # the second q1 would silently replace the first
    with pytest.raises(InputError, match=r"queries\.tsv:3: duplicate query id 'q1' \(first seen on line 1\)"):
        list(read_queries(path))


def test_a_queries_or_qrels_header_after_blank_lines_is_skipped(tmp_path):
    """(review: only line 1 was taken as a header: 'qid<TAB>text' after a blank line was a query, a qrels header
    a bad relevance 'score')"""
    queries = tmp_path / "queries.tsv"
    queries.write_text("\nqid\ttext\nq1\tvolcano lava\n")
    assert list(read_queries(queries)) == [("q1", "volcano lava")]
    queries.write_text("\n  \n_id\ttitle\ttext\nq1\tT\tvolcano lava\nq2\tU\n")
    with pytest.raises(InputError) as err:
        list(read_queries(queries))
    assert str(err.value) == f"{queries}:5: 2 columns; the header (line 3) names 3"
    queries.write_text("\n_id\ttitle\tbody\nq1\tT\tvolcano\n")
    with pytest.raises(InputError) as err:
        list(read_queries(queries))
    assert str(err.value) == (f"{queries}:2: the header names 3 columns and none is the query's text (text, query); "
                              "it holds '_id\\ttitle\\tbody'")
    queries.write_text("q1\tcats\nqid\ttext\n")  # a header's names on a later line are a query
    assert list(read_queries(queries)) == [("q1", "cats"), ("qid", "text")]
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("\nquery-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert read_qrels(qrels) == {"q1": {"d1": 1}}


def test_txt_queries_one_a_line_are_named_by_their_line(tmp_path):
    path = tmp_path / "queries.txt"
    path.write_text("\ufeffgraph attention networks\n\n  lazy dog \r\nwhat is covid 19\n", encoding="utf-8")
    assert list(read_queries(path)) == [("1", "graph attention networks"), ("3", "lazy dog"),
                                        ("4", "what is covid 19")]
    path.write_text("cats\nq2\tbirds\n")  # a query-id<TAB>text file whose first line lost its tab
    with pytest.raises(InputError, match=r"^.*queries\.txt:2: a tab in a file of one query a line \(its first line "
                                         r"has none\); a file of query-id<TAB>text lines has a tab on every line$"):
        list(read_queries(path))
    path.write_text("q1\tcats\nq2\tbirds\n")  # a tab on the first line: query-id<TAB>text, as before
    assert list(read_queries(path)) == [("q1", "cats"), ("q2", "birds")]
    path.write_text("")
    assert list(read_queries(path)) == []
    qrels = tmp_path / "qrels.txt"  # TREC qrels, a run or JSON lines given as queries are not searched as text
    qrels.write_text("1 0 doc7 1\n1 0 doc9 0\n")
    with pytest.raises(InputError, match=r"qrels\.txt: its first lines look like TREC qrels \(query-id 0 doc-id "
                                         r"relevance\), not queries \(a \.txt file of queries holds one query a line\)$"):
        list(read_queries(qrels))
    qrels.write_text("1 Q0 doc7 1 12.5 bm25\n1 Q0 doc9 2 -3e-2 bm25\n1 Q0 doc1 3 -4 bm25\nfourth line\n")
    with pytest.raises(InputError, match=r"qrels\.txt: its first lines look like a TREC run"):
        list(read_queries(qrels))
    qrels.write_text('{"_id": "q1", "text": "cats"}\n')
    with pytest.raises(InputError, match=r"qrels\.txt: its first line is a JSON object: a JSON lines file of queries "
                                         r"is read by its name, \.jsonl \(rename it\)"):
        list(read_queries(qrels))
    qrels.write_text("top 0 to 60\nbest 0 of 2021\nsecond query\n")  # one line like qrels is a query still
    assert [text for _, text in read_queries(qrels)] == ["top 0 to 60", "best 0 of 2021", "second query"]
    topics = tmp_path / "topics.txt"
    topics.write_text("<top>\n<num> Number: 301\n<title> International Organized Crime\n</top>\n")
    assert list(read_queries(topics)) == [("301", "International Organized Crime")]
    tsv = tmp_path / "queries.tsv"  # only .txt: a .tsv without a tab stays an error
    tsv.write_text("cats\n")
    with pytest.raises(InputError, match=r"queries\.tsv: unknown queries format"):
        list(read_queries(tsv))


def test_missing_path_and_unknown_format(tmp_path):
    with pytest.raises(InputError, match=r"nowhere\.jsonl: no such file or folder, and not a named corpus "
                                         r"\(accepted: .*JSON lines.*MediaWiki.*robust04"):
        read_corpus(tmp_path / "nowhere.jsonl")
    (tmp_path / "table.parquet").write_text("a,b\n")
    with pytest.raises(InputError, match=r"table\.parquet: unknown corpus format \(accepted: a BEIR folder"):
        read_corpus(tmp_path / "table.parquet")
    with pytest.raises(InputError, match=r"unknown queries format"):
        read_queries(tmp_path / "table.parquet")


def test_a_missing_path_close_to_a_named_corpus_or_a_file_beside_it_is_suggested(tmp_path):
    with pytest.raises(InputError, match=r"^robust4: no such file or folder, and not a named corpus; did you mean "
                                         r"robust04\? \(accepted: "):
        read_corpus("robust4")
    (tmp_path / "scifact").mkdir()
    with pytest.raises(InputError, match=r"scifcat: no such file or folder, and not a named corpus; did you mean "
                                         rf"{re.escape(str(tmp_path / 'scifact'))}\? \(accepted: "):
        read_corpus(tmp_path / "scifcat")
    with pytest.raises(InputError, match=r"elsewhere: no such file or folder, and not a named corpus \(accepted: "):
        read_corpus(tmp_path / "elsewhere")
    (tmp_path / "queries.tsv").symlink_to(tmp_path / "gone.tsv")  # a broken link: its target is named
    with pytest.raises(InputError, match=rf"queries\.tsv: no such file or folder, and not a named corpus \(a link to "
                                         rf"{re.escape(str(tmp_path / 'gone.tsv'))}, which is missing\) \(accepted: "):
        read_queries(tmp_path / "queries.tsv")


def test_a_latin1_queries_or_qrels_file_is_named_as_not_utf8_not_as_an_unknown_format(tmp_path):
    (tmp_path / "queries.tsv").write_bytes("1\tcaf\xe9 cancer\n".encode("latin-1"))
    with pytest.raises(InputError) as err:
        list(read_queries(tmp_path / "queries.tsv"))
    assert str(err.value) == (f"{tmp_path / 'queries.tsv'}:1: not valid UTF-8 (byte 0xe9 at column 6): queries files "
                              "are read as UTF-8 text")
    (tmp_path / "qrels.trec").write_bytes("1 0 d\xe9 1\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"qrels\.trec:1: not valid UTF-8 \(byte 0xe9 at column 6\): qrels files"):
        read_qrels(tmp_path / "qrels.trec")
    whole = gzip.compress(b"query-id\tcorpus-id\tscore\n1\td1\t1\n")
    (tmp_path / "qrels.tsv.gz").write_bytes(whole[:20])  # cut short: a reading error, not an encoding one
    with pytest.raises(InputError) as err:
        read_qrels(tmp_path / "qrels.tsv.gz")
    assert str(err.value).startswith(f"{tmp_path / 'qrels.tsv.gz'}: cannot read file (")
    assert "UTF-8" not in str(err.value)


def test_query_topic_and_qrels_files_with_lines_ended_by_a_carriage_return_alone(tmp_path):
    """Old Mac line ends: each CR ends a line (a TSV query file read as one query 'graph\\rq2\\tattention')."""
    files = {"queries.tsv": "q1\tgraph\rq2\tattention\r",
             "topics.txt": "<top>\r<num> 1\r<title> graph\r</top>\r<top>\r<num> 2\r<title> attention\r</top>\r",
             "qrels.txt": "q1 0 d1 1\rq2 0 d2 1\r",
             "qrels.tsv": "query-id\tcorpus-id\tscore\rq1\td1\t1\rq2\td2\t1\r"}
    for name, text in files.items():
        (tmp_path / name).write_bytes(text.encode("utf-8"))
    assert list(read_queries(tmp_path / "queries.tsv")) == [("q1", "graph"), ("q2", "attention")]
    assert list(read_queries(tmp_path / "topics.txt")) == [("1", "graph"), ("2", "attention")]
    for name in ("qrels.txt", "qrels.tsv"):
        assert read_qrels(tmp_path / name) == {"q1": {"d1": 1}, "q2": {"d2": 1}}
    (tmp_path / "stray.tsv").write_bytes(b"q1\tgraph\rneural networks\nq2\tattention\n")  # LF ends: a CR in a line
    assert list(read_queries(tmp_path / "stray.tsv")) == [("q1", "graph\rneural networks"), ("q2", "attention")]
    (tmp_path / "bad.tsv").write_bytes(b"q1\tgraph\rq2\tatten\xfftion\r")
    with pytest.raises(InputError, match=r"bad\.tsv:2: "):  # the line of the bad byte, counted as lines
        list(read_queries(tmp_path / "bad.tsv"))
    (tmp_path / "stray-bad.tsv").write_bytes(b"q0\tfine\nq1\tgraph\rq2\tatten\xfftion\n")  # LF ends: CR no end
    with pytest.raises(InputError, match=r"stray-bad\.tsv:2: "):
        list(read_queries(tmp_path / "stray-bad.tsv"))


def test_standard_input_and_pipes_are_refused_as_corpus_queries_or_qrels_in_one_line(tmp_path):
    with pytest.raises(InputError, match=r"^- \(standard input\) cannot be read as queries: give a file, a folder "
                                         r"or a corpus name$"):
        list(read_queries("-"))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # as <(...) or /dev/stdin on a pipe: read twice (format, then data), so not read at all
    with pytest.raises(InputError, match=rf"^{re.escape(str(fifo))} is a pipe or a device, not a file: graphdoc "
                                         r"reads qrels from a file"):
        read_qrels(fifo)
