import re

import numpy as np
import pytest

from graphdoc.errors import GraphDocError, InputError
from graphdoc.retrieval.trec import read_run, run_lines, write_run

RUN = {"q2": {"d1": 0.5, "d3": 2.25, "d2": 0.5}, "q1": {"x": float(np.float32(0.1))}}


def test_write_format_and_round_trip(tmp_path):
    path = tmp_path / "out" / "run.trec"
    write_run(RUN, path, tag="bm25")
    assert path.read_text().splitlines() == [
        "q2 Q0 d3 1 2.25 bm25",
        "q2 Q0 d1 2 0.5 bm25",
        "q2 Q0 d2 3 0.5 bm25",
        "q1 Q0 x 1 0.10000000149011612 bm25",
    ]
    assert read_run(path) == RUN
    assert [p.name for p in path.parent.iterdir()] == ["run.trec"]  # no temporary file left


def test_write_top_k_and_overwrite(tmp_path):
    path = tmp_path / "run.trec"
    path.write_text("old\n")
    write_run(RUN, path, k=1)
    assert read_run(path) == {"q2": {"d3": 2.25}, "q1": {"x": RUN["q1"]["x"]}}


def test_write_errors_leave_no_file(tmp_path):
    path = tmp_path / "run.trec"
    with pytest.raises(GraphDocError, match=r"^doc id 'a b' cannot be written to a TREC run: it is empty or has whitespace$"):
        write_run({"q": {"a b": 1.0}}, path)
    with pytest.raises(GraphDocError, match=r"^score nan of query 'q', doc 'a' is not finite$"):
        write_run({"q": {"a": float("nan")}}, path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "line, message",
    [
        ("q1 Q0 d1 1 0.5", "expected 6 columns 'qid Q0 docid rank score tag', got 5"),
        ("q1 Q0 d1 one 0.5 t", "rank 'one' is not an integer"),
        ("q1 Q0 d1 1 high t", "score 'high' is not a number"),
        ("q1 Q0 d0 2 0.5 t", "document 'd0' listed twice for query 'q1'"),
    ],
)
def test_read_errors_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.trec"
    path.write_text("q1 Q0 d0 1 1.0 t\n\n" + line + "\n")
    with pytest.raises(InputError) as err:
        read_run(path)
    assert str(err.value) == f"{path}:3: {message}"


SIX = "expected 6 columns 'qid Q0 docid rank score tag'"
QRELS_HINT = " (this looks like a qrels file: pass it as --qrels)"


@pytest.mark.parametrize("text, message", [
    ("q1 0 d1 1\nq1 0 d2 0\n", f"1: {SIX}, got 4{QRELS_HINT}"),  # TREC qrels
    ("\nquery-id\tcorpus-id\tscore\nq1\td1\t1\n", f"2: {SIX}, got 3{QRELS_HINT}"),  # BEIR qrels and their header
    ("q1\td1\t2\n", f"1: {SIX}, got 3{QRELS_HINT}"),  # BEIR qrels without one
    ("q1 Q0 d1 1 0.5\n", f"1: {SIX}, got 5"),  # a run's line cut short
    ("q1 d1 rel 2\n", f"1: {SIX}, got 4"),  # no iteration column: not TREC qrels
    ("q1 Q0 d0 1 1.0 t\nq1 0 d1 1\n", f"2: {SIX}, got 4"),  # a qrels line in a run: the file is a run
])
def test_a_qrels_file_read_as_a_run_is_named_so(tmp_path, text, message):
    """(eval --run QRELS said only 'expected 6 columns ..., got 4')"""
    path = tmp_path / "given.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_run(path)
    assert str(err.value) == f"{path}:{message}"


def test_read_missing_file(tmp_path):
    with pytest.raises(InputError, match="^run file not found: "):
        read_run(tmp_path / "nope.trec")


def test_read_drops_a_leading_byte_order_mark(tmp_path):
    path = tmp_path / "bom.trec"
    path.write_bytes("\ufeffq0 Q0 d1 1 2.0 t\nq0 Q0 d2 2 1.0 t\nq1 Q0 d3 1 0.5 t\n".encode("utf-8"))
    assert read_run(path) == {"q0": {"d1": 2.0, "d2": 1.0}, "q1": {"d3": 0.5}}


@pytest.mark.parametrize("suffix, opener", [(".gz", "gzip"), (".bz2", "bz2"), (".xz", "lzma")])
def test_read_a_compressed_run_as_the_plain_one(tmp_path, suffix, opener):
    import importlib

    lines = "q0 Q0 d1 1 2.0 t\r\nq0 Q0 d2 2 1.0 t\nq1 Q0 d3 1 0.5 t\n"
    path = tmp_path / f"run.trec{suffix}"
    path.write_bytes(importlib.import_module(opener).compress(lines.encode("utf-8")))
    assert read_run(path) == {"q0": {"d1": 2.0, "d2": 1.0}, "q1": {"d3": 0.5}}
    path.write_bytes(importlib.import_module(opener).compress(b"q0 Q0 d1 1 2.0 t\nq0 Q0 \xe9 2 1.0 t\n"))
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}:2: not valid UTF-8 \(byte 0xe9 at column 7\)"):
        read_run(path)


def test_a_query_id_that_starts_like_bzip2_is_plain_text(tmp_path):
    (tmp_path / "bz.trec").write_text("BZh9 Q0 d1 1 2.0 t\nBZhang Q0 d2 1 1.0 t\n", encoding="utf-8")
    assert read_run(tmp_path / "bz.trec") == {"BZh9": {"d1": 2.0}, "BZhang": {"d2": 1.0}}


@pytest.mark.parametrize("compress", [None, "gzip"])
def test_standard_input_reads_as_a_file_does_even_a_byte_at_a_time(monkeypatch, compress):
    import gzip
    import io

    class Trickle(io.BytesIO):  # a slow pipe: one byte a read
        def read(self, size=-1):
            return super().read(1 if size is None or size < 0 else min(size, 1))

    data = b"q0 Q0 d1 1 2.0 t\rq0 Q0 d2 2 1.0 t\r"
    stdin = io.TextIOWrapper(Trickle(gzip.compress(data) if compress else data))
    monkeypatch.setattr("sys.stdin", stdin)
    assert read_run("-") == {"q0": {"d1": 2.0, "d2": 1.0}}


@pytest.mark.parametrize(("name", "module"), [("run.gz", "gzip"), ("run.trec.bz2", "bz2"), ("run.XZ", "lzma")])
def test_a_run_written_under_a_compressed_name_is_compressed_so(tmp_path, name, module):
    import importlib

    import ir_measures

    write_run(RUN, tmp_path / name)
    plain = tmp_path / "run.trec"
    write_run(RUN, plain)
    assert importlib.import_module(module).decompress((tmp_path / name).read_bytes()) == plain.read_bytes()
    assert read_run(tmp_path / name) == RUN
    if name.endswith(".gz"):  # what other tools read too; the same run gives the same bytes (no time stamp)
        assert len(list(ir_measures.read_trec_run(str(tmp_path / name)))) == sum(map(len, RUN.values()))
        before = (tmp_path / name).read_bytes()
        write_run(RUN, tmp_path / name)
        assert (tmp_path / name).read_bytes() == before


def test_a_plain_run_under_a_compressed_name_reads_as_written(tmp_path):
    (tmp_path / "run.gz").write_bytes("".join(run_lines(RUN)).encode("utf-8"))  # as older graphdoc versions wrote it
    assert read_run(tmp_path / "run.gz") == RUN
    (tmp_path / "cr.trec").write_bytes(b"q0 Q0 d1 1 2.0 t\rq0 Q0 d2 2 1.0 t\r")  # old Mac line ends
    assert read_run(tmp_path / "cr.trec") == {"q0": {"d1": 2.0, "d2": 1.0}}


def test_read_a_folder_says_it_is_a_folder(tmp_path):
    with pytest.raises(InputError) as err:
        read_run(tmp_path)
    assert str(err.value) == f"{tmp_path} is a folder, not a run file"


def test_eval_scores_a_run_with_a_byte_order_mark_as_without(tmp_path, capsys, restore_cli_state):
    from graphdoc.cli import main

    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td2\t1\nq1\td3\t1\n")
    lines = "q0 Q0 d1 1 2.0 t\nq0 Q0 d2 2 1.0 t\nq1 Q0 d3 1 0.5 t\n"
    (tmp_path / "a.trec").write_text(lines, encoding="utf-8")
    (tmp_path / "b.trec").write_text("\ufeff" + lines, encoding="utf-8")
    outputs = []
    for name in ("a.trec", "b.trec"):
        assert main(["-q", "eval", "--run", str(tmp_path / name), "--qrels", str(tmp_path / "qrels.tsv"),
                     "--measures", "RR@10"]) == 0
        captured = capsys.readouterr()
        assert captured.err == ""
        outputs.append(captured.out.replace(name, "RUN"))
    assert outputs[0] == outputs[1] and "0.75" in outputs[0]
    assert main(["-q", "eval", "--run", str(tmp_path), "--qrels", str(tmp_path / "qrels.tsv")]) == 1
    assert capsys.readouterr().err == f"graphdoc eval: error: {tmp_path} is a folder, not a run file\n"
