"""``graphdoc index | search | eval | tune-fusion | merge`` run in-process: outputs, files, and one-line errors."""

from __future__ import annotations

import itertools
import json
import os
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from _retrieval_helpers import (
    searched_vectors,
    cli,
    doc_ids,
    error_line,
    make_docs,
    manifest_json,
    write_jsonl,
)

from graphdoc.cli import main
from graphdoc.retrieval.evaluation import format_table
from graphdoc.retrieval.fusion import FusionConfig
from graphdoc.retrieval.searcher import Searcher
from graphdoc.retrieval.trec import read_run

QUERIES = [{"_id": "q1", "text": "zebra"}, {"_id": "q2", "text": "walrus"}, {"_id": "q3", "text": "okapi"}]
QRELS = "q1 0 d007 1\nq2 0 d012 1\nq3 0 d003 1\n"

pytestmark = pytest.mark.usefixtures("restore_cli_state")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("files")
    (folder / "qrels.txt").write_text(QRELS, encoding="utf-8")
    return {"corpus": write_jsonl(folder / "corpus.jsonl", make_docs(20)),
            "queries": write_jsonl(folder / "queries.jsonl", QUERIES), "qrels": folder / "qrels.txt"}


@pytest.fixture(scope="module")
def index(files, model_dir, tmp_path_factory) -> Path:
    """An index built by ``graphdoc index`` itself."""
    folder = tmp_path_factory.mktemp("cli-index") / "index"
    assert cli("index", "--corpus", files["corpus"], "--index-dir", folder, "--model", model_dir,
               "--shard-size", 7) == 0
    return folder


@pytest.fixture
def own_index(index, tmp_path) -> Path:
    """A copy of the module's index for a test that changes it."""
    return Path(shutil.copytree(index, tmp_path / "index"))


def test_index_prints_its_counts(files, model_dir, tmp_path, capsys) -> None:
    assert cli("index", "--corpus", files["corpus"], "--index-dir", tmp_path / "i", "--model", model_dir,
               "--shard-size", 7, "--no-passages", "--bm25-stemmer", "english") == 0
    assert capsys.readouterr().out == f"{tmp_path / 'i'}: 20 documents, 0 passages, 3 shards\n"
    m = manifest_json(tmp_path / "i")
    assert (m["store_passages"], m["bm25"]["stemmer"]) == (False, "english")


def test_index_counts_one_in_the_singular(model_dir, tmp_path, capsys) -> None:
    corpus = write_jsonl(tmp_path / "one.jsonl", [{"_id": "a", "text": "A single short sentence."}])
    assert cli("index", "--corpus", corpus, "--index-dir", tmp_path / "i", "--model", model_dir) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'i'}: 1 document, 1 passage, 1 shard\n"


def test_index_reports_its_counts_once(files, model_dir, tmp_path, capsys) -> None:
    from graphdoc.cli import main

    assert main(["index", "--corpus", str(files["corpus"]), "--index-dir", str(tmp_path / "i"), "--model",
                 str(model_dir)]) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith(f"{tmp_path / 'i'}: 20 documents, ") and "20 documents" not in printed.err


def test_index_reports_skipped_empty_documents_once(model_dir, tmp_path, capsys) -> None:
    from graphdoc.cli import main

    corpus = write_jsonl(tmp_path / "c.jsonl", [{"_id": "blank", "text": "  "}, *make_docs(3)])
    assert main(["index", "--corpus", str(corpus), "--index-dir", str(tmp_path / "i"), "--model", str(model_dir)]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "empty" in line]
    assert lines == [f"INFO graphdoc.corpus.stats: {corpus}: skipped 1 empty document(s) ('blank')"]


def test_index_adds_documents_with_the_index_model_when_no_model_is_named(own_index, model, tmp_path,
                                                                        capsys) -> None:
    more = write_jsonl(tmp_path / "more.jsonl", [dict(d, _id=f"new{d['_id']}") for d in make_docs(3)])
    assert cli("index", "--corpus", more, "--index-dir", own_index) == 0  # not the default MiniLM: no mismatch
    assert capsys.readouterr().out == f"{own_index}: 23 documents, {manifest_json(own_index)['counts']['passages']} " \
                                      "passages, 4 shards\n"
    vectors = dict(zip(doc_ids(own_index), searched_vectors(own_index)))
    for i in range(3):  # the same texts, embedded by the same model
        np.testing.assert_allclose(vectors[f"newd00{i}"], vectors[f"d00{i}"], atol=1e-6)
    Searcher(own_index, model=model)  # the index still takes its model


# ------------------------------------------------------------------ search
def test_search_prints_a_readable_ranked_list(index, model, capsys) -> None:
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "zebra fox", "-k", 3, "--mode", "bm25") == 0
    hits = Searcher(index, model=model).search("zebra fox", k=3, mode="bm25")
    assert capsys.readouterr().out == "".join(
        f"{h.rank:>3}. {h.score:.4f}  {h.doc_id}  {h.title}\n     {h.passage['snippet']}\n" for h in hits)
    assert hits[0].doc_id == "d007" and len(hits) == 3


def test_search_json_gives_the_hits_of_the_python_api(index, model, capsys) -> None:
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "graph zebra", "--json", "-k", 4) == 0  # hybrid, the index's model
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    hits = [vars(h) for h in Searcher(index, model=model).search("graph zebra", k=4)]
    assert [sorted(p) for p in printed] == [["doc_id", "metadata", "passage", "rank", "score", "title"]] * 4
    assert [p["doc_id"] for p in printed] == [h["doc_id"] for h in hits]
    for p, h in zip(printed, hits):
        assert p == {**h, "score": pytest.approx(h["score"], abs=1e-6),
                     "passage": {**h["passage"], "score": pytest.approx(h["passage"]["score"], abs=1e-6)}}


def test_search_fusion_options_override_the_index(index, model, capsys) -> None:
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "graph zebra", "--json", "-k", 20, "--fusion", "rrf") == 0
    printed = {h["doc_id"]: h["score"] for h in map(json.loads, capsys.readouterr().out.splitlines())}
    run = Searcher(index, model=model).batch_search(["graph zebra"], k=20, fusion=FusionConfig(method="rrf"))["0"]
    assert printed == pytest.approx(run)
    assert max(printed.values()) <= 2 / 61  # reciprocal ranks of two rankings


def test_search_queries_writes_a_trec_run(index, model, files, tmp_path, capsys) -> None:
    out = tmp_path / "runs" / "hybrid.trec"
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "--queries", files["queries"], "--output", out) == 0
    assert capsys.readouterr() == ("", "")  # the "wrote" line is a log line: -q leaves it out
    lines = [line.split() for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 60 and {len(cols) for cols in lines} == {6}  # 20 documents for each query
    assert {(cols[1], cols[5]) for cols in lines} == {("Q0", "graphdoc-hybrid")}
    assert [int(cols[3]) for cols in lines] == list(range(1, 21)) * 3
    run = Searcher(index, model=model).batch_search({q["_id"]: q["text"] for q in QUERIES}, k=100)
    written = read_run(out)
    assert list(written) == ["q1", "q2", "q3"]
    for qid in written:
        assert written[qid] == pytest.approx(run[qid], abs=1e-9)
        assert [cols[2] for cols in lines if cols[0] == qid] == list(run[qid])
    assert main(["search", "--index-dir", str(index), "--queries", str(files["queries"]), "--output", str(out),
                 "-k", "5"]) == 0
    printed = capsys.readouterr()
    assert printed.out == ""
    assert f"wrote the results of 3 queries to {out} (replacing the earlier file)\n" in printed.err
    assert len(out.read_text(encoding="utf-8").splitlines()) == 15


def test_queries_that_find_nothing_are_named_not_dropped_silently(index, tmp_path, capsys) -> None:
    """(stop 32: a BM25 query matching no document had no line in the run, the log said all were written, and
    search --qrels counted it 0 without a word)"""
    queries = write_jsonl(tmp_path / "q.jsonl", [QUERIES[0], {"_id": "q2", "text": "the of and"},
                                                 {"_id": "q3", "text": "xylophonist"}])
    out = tmp_path / "bm25.trec"
    capsys.readouterr()
    assert main(["search", "--index-dir", str(index), "--queries", str(queries), "--output", str(out),
                 "--mode", "bm25"]) == 0
    err = capsys.readouterr().err
    assert ("WARNING graphdoc.cli: 2 of 3 queries found no document (1 without a word BM25 indexes): q2, q3; the "
            "results have no line for them, and evaluation counts them as 0\n") in err
    assert f"wrote the results of 1 query to {out}\n" in err
    assert {line.split()[0] for line in out.read_text(encoding="utf-8").splitlines()} == {"q1"}


def test_search_queries_with_qrels_prints_the_measures(index, files, capsys) -> None:
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "--queries", files["queries"], "--qrels", files["qrels"],
               "--mode", "bm25") == 0
    # each rare word is in its relevant document only, which BM25 ranks first and alone
    captured = capsys.readouterr()
    assert captured.out == format_table(
        {"bm25": {"nDCG@10": 1.0, "nDCG@20": 1.0, "P@20": 0.05, "RR@100": 1.0, "R@100": 1.0}}) + "\n"
    assert "cutoff" not in captured.err
    assert cli("search", "--index-dir", index, "--queries", files["queries"], "--qrels", files["qrels"],
               "--mode", "bm25", "-k", "15") == 0
    assert capsys.readouterr().err == ("WARNING graphdoc.cli: nDCG@20, P@20, RR@100, R@100 have a cutoff over -k 15: "
                                       "computed over the 15 results a query keeps\n")


def test_eval_prints_measures_of_a_run_file(files, tmp_path, capsys) -> None:
    run = tmp_path / "my.run"
    run.write_text("q1 Q0 d007 1 9.0 x\nq2 Q0 d000 1 9.0 x\nq2 Q0 d012 2 8.0 x\nq3 Q0 d001 1 9.0 x\n",
                   encoding="utf-8")
    capsys.readouterr()
    assert cli("eval", "--run", run, "--qrels", files["qrels"], "--measures", "nDCG@10", "RR@100") == 0
    ndcg = (1 + 1 / math.log2(3) + 0) / 3
    assert capsys.readouterr().out == format_table({"my.run": {"nDCG@10": ndcg, "RR@100": 0.5}}) + "\n"
    assert f"{ndcg:.4f}" == "0.5436"


def test_eval_reads_a_run_from_standard_input_or_a_pipe(files, tmp_path, capsys, monkeypatch) -> None:
    """--run - reads standard input, and a named pipe (cat run | graphdoc eval --run /dev/stdin) is a run file: it
    was 'run file not found', as only regular files were."""
    import io
    import threading

    text = "q1 Q0 d007 1 9.0 x\nq2 Q0 d000 1 9.0 x\nq2 Q0 d012 2 8.0 x\nq3 Q0 d001 1 9.0 x\n"
    expected = {"nDCG@10": (1 + 1 / math.log2(3) + 0) / 3, "RR@100": 0.5}
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(("\ufeff" + text).encode("utf-8"))))
    capsys.readouterr()
    assert cli("eval", "--run", "-", "--qrels", files["qrels"], "--measures", "nDCG@10", "RR@100") == 0
    assert capsys.readouterr().out == format_table({"stdin": expected}) + "\n"
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    writer = threading.Thread(target=pipe.write_text, args=(text,), kwargs={"encoding": "utf-8"})
    writer.start()
    assert cli("eval", "--run", pipe, "--qrels", files["qrels"], "--measures", "nDCG@10", "RR@100") == 0
    writer.join()
    assert capsys.readouterr().out == format_table({"pipe": expected}) + "\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert cli("eval", "--run", "-", "--qrels", files["qrels"]) == 1
    assert error_line(capsys, "eval") == "graphdoc eval: error: standard input holds no results"


def test_eval_tells_a_run_and_qrels_given_the_other_way_round(files, tmp_path, capsys) -> None:
    """(each said only that its columns or its format were wrong)"""
    from graphdoc.corpus.formats import QRELS_FORMATS, accepted

    run = tmp_path / "my.run"
    run.write_text("q1 Q0 d007 1 9.0 x\n", encoding="utf-8")
    capsys.readouterr()
    assert cli("eval", "--run", files["qrels"], "--qrels", files["qrels"]) == 1
    assert error_line(capsys, "eval") == (f"graphdoc eval: error: {files['qrels']}:1: expected 6 columns 'qid Q0 docid "
                                          "rank score tag', got 4 (this looks like a qrels file: pass it as --qrels)")
    assert cli("eval", "--run", files["qrels"], "--qrels", run) == 1  # both swapped: the qrels are read first
    assert error_line(capsys, "eval") == (f"graphdoc eval: error: {run}: unknown qrels format (this looks like a run "
                                          f"file, which graphdoc eval takes as --run; accepted: "
                                          f"{accepted(QRELS_FORMATS)})")


def test_eval_names_a_run_read_from_a_descriptor_run(files, capsys) -> None:
    """--run <(...) reads /dev/fd/N: its row is 'run' (it was the descriptor's number, '63')."""
    text = "q1 Q0 d007 1 9.0 x\nq2 Q0 d000 1 9.0 x\nq2 Q0 d012 2 8.0 x\nq3 Q0 d001 1 9.0 x\n"
    expected = {"nDCG@10": (1 + 1 / math.log2(3) + 0) / 3}
    read, write = os.pipe()
    os.write(write, text.encode("utf-8"))  # (well within a pipe's buffer)
    os.close(write)
    try:
        capsys.readouterr()
        assert cli("eval", "--run", f"/dev/fd/{read}", "--qrels", files["qrels"], "--measures", "nDCG@10") == 0
    finally:
        os.close(read)
    assert capsys.readouterr().out == format_table({"run": expected}) + "\n"


# ------------------------------------------------------------------ tune-fusion
def test_tune_fusion_saves_alpha_that_later_hybrid_searches_use(own_index, model, files, tmp_path, capsys) -> None:
    manifest = manifest_json(own_index)
    manifest["fusion"] = {"method": "rrf", "alpha": 0.0, "normalization": "zscore", "rrf_k": 60}
    (own_index / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    capsys.readouterr()
    assert cli("tune-fusion", "--index-dir", own_index, "--queries", files["queries"], "--qrels", files["qrels"],
               "--folds", 2, "--save", "--output", tmp_path / "cv.trec") == 0
    out = capsys.readouterr().out.splitlines()
    # BM25 alone is perfect on these queries and of equally good alphas the one nearest the index's (0.0) wins
    assert out[-2:] == ["cross-validated nDCG@10: 1.0000; alpha on all queries: 0.00",
                        f"stored fusion weighted alpha=0.00 normalization=zscore in {own_index}/manifest.json "
                        "(was rrf k=60)"]
    assert [line.split(":")[0] for line in out[:-2]] == ["fold 1", "fold 2"]
    assert manifest_json(own_index)["fusion"] == {"method": "weighted", "alpha": 0.0, "normalization": "zscore",
                                                  "rrf_k": 60}
    assert sorted(read_run(tmp_path / "cv.trec")) == ["q1", "q2", "q3"]

    assert cli("search", "--index-dir", own_index, "graph zebra", "--json", "-k", 20) == 0
    printed = {h["doc_id"]: h["score"] for h in map(json.loads, capsys.readouterr().out.splitlines())}
    searcher = Searcher(own_index, model=model)
    saved = FusionConfig(alpha=0.0, normalization="zscore")
    assert printed == pytest.approx(searcher.batch_search(["graph zebra"], k=20, fusion=saved)["0"])
    assert printed != pytest.approx(searcher.batch_search(["graph zebra"], k=20, fusion=FusionConfig())["0"])


def test_tune_fusion_output_dash_prints_the_run_alone_on_stdout(index, files, tmp_path, capsys, monkeypatch) -> None:
    """As search --output -: the run's TREC lines on stdout (the report on stderr), not a file named '-'."""
    monkeypatch.chdir(tmp_path)
    assert cli("tune-fusion", "--index-dir", index, "--queries", files["queries"], "--qrels", files["qrels"],
               "--folds", 2, "--output", tmp_path / "cv.trec") == 0
    capsys.readouterr()
    assert cli("tune-fusion", "--index-dir", index, "--queries", files["queries"], "--qrels", files["qrels"],
               "--folds", 2, "--output", "-") == 0
    captured = capsys.readouterr()
    assert captured.out == (tmp_path / "cv.trec").read_text(encoding="utf-8")
    assert "cross-validated nDCG@10" in captured.err and not Path("-").exists()


# ------------------------------------------------------------------ errors: one line on stderr, exit 1
def test_search_errors(index, tmp_path, tiny_roberta, capsys) -> None:
    cases = [
        (["--index-dir", tmp_path / "nowhere", "q"], f"index folder not found: {tmp_path / 'nowhere'}"),
        (["--index-dir", index], "give one QUERY, --queries or --like"),
        (["--index-dir", index, "q", "--alpha", "2"], "alpha must be between 0 and 1, got 2.0"),
        (["--index-dir", tmp_path, "q"], f"{tmp_path} is not a graphdoc index (no manifest.json)"),
    ]
    for argv, message in cases:
        capsys.readouterr()
        assert cli("search", *argv) == 1
        assert error_line(capsys, "search") == f"graphdoc search: error: {message}"
    assert cli("search", "--index-dir", index, "q", "--model", tiny_roberta) == 1
    assert error_line(capsys, "search").startswith(f"graphdoc search: error: index {index} was built with ")


@pytest.mark.parametrize("command", ["search", "tune-fusion"])
@pytest.mark.parametrize("target", ["queries.jsonl", "qrels/test.tsv", "corpus.jsonl"])
def test_a_run_output_onto_a_file_of_a_beir_folder_given_as_input_is_refused(index, files, tmp_path, capsys,
                                                                             command, target) -> None:
    """--queries/--qrels given as a BEIR folder: the run must not replace the folder's queries, qrels or corpus
    (it did, with exit code 0, as only files given as inputs were checked)."""
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    shutil.copy(files["corpus"], beir / "corpus.jsonl")
    shutil.copy(files["queries"], beir / "queries.jsonl")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t1\n" for q, _, d, _ in (line.split() for line in QRELS.splitlines())), encoding="utf-8")
    before = {p: p.read_bytes() for p in beir.rglob("*") if p.is_file()}
    extra = ["--folds", 2] if command == "tune-fusion" else []
    assert cli(command, "--index-dir", index, "--queries", beir, "--qrels", beir, "--output", beir / target,
               *extra) == 1
    assert error_line(capsys, command) == (f"graphdoc {command}: error: --output {beir / target} is the input file "
                                           f"{beir / target}; name another file for the run")
    assert {p: p.read_bytes() for p in beir.rglob("*") if p.is_file()} == before
    assert cli("search", "--index-dir", index, "--queries", beir, "--qrels", beir, "--output", beir / "run.trec",
               "--mode", "bm25") == 0  # another file in the folder is fine


def test_search_refuses_an_incomplete_index(own_index, capsys, monkeypatch) -> None:
    from graphdoc.retrieval import searcher

    capsys.readouterr()
    assert cli("search", "--index-dir", own_index, "zebra", "--mode", "bm25") == 0
    before = capsys.readouterr().out
    manifest = manifest_json(own_index)
    # an add finalising (a shard more, not in final/ yet): the last complete build is searched, with a warning
    updating = {**manifest, "finalized": False, "shards": [*manifest["shards"], "00009"]}
    (own_index / "manifest.json").write_text(json.dumps(updating), encoding="utf-8")
    assert cli("search", "--index-dir", own_index, "zebra", "--mode", "bm25") == 0
    captured = capsys.readouterr()
    assert captured.out == before
    assert captured.err == (f"WARNING graphdoc.retrieval.searcher: index {own_index} is being finalised after an add or a "
                            f"delete, or its finalising was interrupted: searching the "
                            f"{manifest['counts']['documents']} documents of its last complete build (rerun an "
                            "interrupted build or delete to finish it)\n")
    incomplete = (f"graphdoc search: error: index {own_index} is incomplete: rerun the build that was interrupted "
                  "(the same build_index call or graphdoc index command)")
    ids = own_index / "final" / "doc_ids.txt"
    ids.write_text(ids.read_text(encoding="utf-8") + "new-doc\n", encoding="utf-8")
    # final/ put in place by adds each time it was read: opened again, and said after the last try
    stamps = itertools.count()
    monkeypatch.setattr(searcher, "build_identity", lambda folder: next(stamps))
    assert cli("search", "--index-dir", own_index, "zebra", "--mode", "bm25") == 1
    assert error_line(capsys, "search") == (f"graphdoc search: error: index {own_index} was replaced 3 times while "
                                            "it was opened (documents are being added): try again")
    assert next(stamps) == 6  # read before and after each of the 3 tries
    monkeypatch.undo()
    # the same sizes with final/ as it was: damage, said as damage
    assert cli("search", "--index-dir", own_index, "zebra", "--mode", "bm25") == 1
    assert error_line(capsys, "search").startswith(f"graphdoc search: error: index {own_index} is damaged: "
                                                   "final/doc_ids.txt holds")
    # no build finished yet: nothing to search
    first = {**updating, "counts": {"encode_seconds": 1.0}}
    (own_index / "manifest.json").write_text(json.dumps(first), encoding="utf-8")
    assert cli("search", "--index-dir", own_index, "zebra", "--mode", "bm25") == 1
    assert error_line(capsys, "search") == incomplete


@pytest.mark.parametrize("extra, message", [
    (["--faiss-factory", "Bogus"], "bad FAISS index_factory string 'Bogus': "),
    (["--shard", "3/2"], "part (--shard) 3/2: I must be between 1 and N"),
    (["--shard", "half"], "part (--shard) must look like I/N (for example 1/4); got 'half'"),
    (["--shard-size", "0"], "shard_size must be at least 1"),
])
def test_index_errors_leave_no_index_behind(files, model_dir, tmp_path, capsys, extra, message) -> None:
    capsys.readouterr()
    assert cli("index", "--corpus", files["corpus"], "--index-dir", tmp_path / "i", "--model", model_dir, *extra) == 1
    assert error_line(capsys, "index").startswith(f"graphdoc index: error: {message}")
    assert not (tmp_path / "i").exists()


def test_eval_tune_fusion_and_merge_errors(index, files, tmp_path, capsys) -> None:
    cases = [
        ("eval", ["--run", tmp_path / "none.run", "--qrels", files["qrels"]],
         f"run file not found: {tmp_path / 'none.run'}"),
        ("tune-fusion", ["--index-dir", index, "--queries", files["queries"], "--qrels", files["qrels"], "--folds", 5],
         "--folds must be between 2 and the number of queries (3), got 5"),
        ("merge", ["--index-dir", index, index], f"{index} already exists; merge into a new folder"),
    ]
    for command, argv, message in cases:
        capsys.readouterr()
        assert cli(command, *argv) == 1
        assert error_line(capsys, command) == f"graphdoc {command}: error: {message}"


def test_a_file_as_index_folder_an_empty_factory_and_blank_documents_are_one_line(files, capsys, tmp_path) -> None:
    """(stop 32: search --index-dir FILE said "not found", --faiss-factory "" was taken as Flat, and compare "" ""
    called the current folder a folder)"""
    corpus = str(files["corpus"])
    assert main(["search", "--index-dir", corpus, "zebra"]) == 1
    assert error_line(capsys, "search") == f"graphdoc search: error: {corpus} is a file, not an index folder"
    assert main(["index", "--corpus", corpus, "--index-dir", str(tmp_path / "i"), "--faiss-factory", ""]) == 1
    assert error_line(capsys, "index") == ("graphdoc index: error: faiss_factory (--faiss-factory) is empty: name a "
                                           "FAISS factory string, such as Flat or HNSW32, or leave it out")
    assert not (tmp_path / "i").exists()
    from graphdoc.errors import GraphDocError
    from graphdoc.retrieval.builder import IndexSettings

    with pytest.raises(GraphDocError, match=r"^faiss_factory must be a string \(Flat, HNSW32, ...\); got 5$"):
        IndexSettings(faiss_factory=5)  # (review: an AttributeError)
    assert main(["compare", "", ""]) == 1
    assert error_line(capsys, "compare") == ("graphdoc compare: error: a document is named by an empty string (''): "
                                             "name a document file")
    assert main(["compare", "--corpus", corpus, "d001", " "]) == 1
    assert error_line(capsys, "compare") == ("graphdoc compare: error: a document is named by an empty string (' '): "
                                             "name a document file or an id")
