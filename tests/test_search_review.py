"""Findings of the black-box review of ``graphdoc search | eval | tune-fusion``: checks made before any search,
options that were silently ignored, damaged index files, and pipes closed early."""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from _retrieval_helpers import cli, error_line, make_docs, write_jsonl

from graphdoc.cli import main
from graphdoc.errors import GraphDocError
from graphdoc.retrieval.evaluation import format_table, parse_measures
from graphdoc.retrieval.searcher import Searcher, final_problem
from graphdoc.retrieval.trec import run_lines, unwritable_ids
from graphdoc.retrieval.tuning import tune_alpha

pytestmark = pytest.mark.usefixtures("restore_cli_state")

#: one word found in one document only: BM25 ranks that document first and alone, so BM25 is perfect
WORDS = {"q1": ("d001", "aardvark"), "q2": ("d004", "bison"), "q3": ("d008", "caracal"),
         "q4": ("d011", "dingo"), "q5": ("d015", "emu"), "q6": ("d018", "ferret")}
DAMAGED = ("; rerun the graphdoc index command that built it (final/ is rebuilt from the shards), or build it anew "
           "in a new folder")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("review-files")
    docs = make_docs(20)
    for doc_id, word in WORDS.values():
        doc = next(d for d in docs if d["_id"] == doc_id)
        doc["text"] += f" The {word}."
    queries = [{"_id": q, "text": word} for q, (_, word) in WORDS.items()]
    (folder / "qrels.tsv").write_text("".join(f"{q}\t{d}\t1\n" for q, (d, _) in WORDS.items()), encoding="utf-8")
    return {"corpus": write_jsonl(folder / "corpus.jsonl", docs), "qrels": folder / "qrels.tsv",
            "queries": write_jsonl(folder / "queries.jsonl", queries),
            "q3": write_jsonl(folder / "q3.jsonl", queries[:3])}


@pytest.fixture(scope="module")
def index(files, model_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("review-index") / "index"
    assert cli("index", "--corpus", files["corpus"], "--index-dir", folder, "--model", model_dir) == 0
    return folder


@pytest.fixture(scope="module")
def spaced_index(model_dir, tmp_path_factory) -> Path:
    """Document ids with spaces (as text folder file names have) and a text with line breaks."""
    folder = tmp_path_factory.mktemp("spaced")
    docs = [{"_id": "my notes.md", "title": "Notes", "text": "Deltas and estuaries.\n\n## Two\n\nRivers   end here."},
            {"_id": "plain", "title": "Plain\ntitle\twith a tab", "text": "Nothing about water at all."}]
    corpus = write_jsonl(folder / "corpus.jsonl", docs)
    assert cli("index", "--corpus", corpus, "--index-dir", folder / "index", "--model", model_dir) == 0
    return folder / "index"


@pytest.fixture
def no_search(monkeypatch):
    """Any search from here on fails the test: checks must come first."""
    def searched(*args, **kwargs):
        raise AssertionError("searched before refusing")

    for name in ("batch_search", "search", "component_runs"):
        monkeypatch.setattr(Searcher, name, searched)


def refused(capsys, command: str, *argv) -> str:
    capsys.readouterr()
    assert cli(command, *argv) == 1
    return error_line(capsys, command).removeprefix(f"graphdoc {command}: error: ")


# ------------------------------------------------------------------ 3. -k and --depth must be at least 1
@pytest.mark.parametrize("k", ["0", "-1"])
def test_k_below_one_is_refused(index, files, capsys, k) -> None:
    assert refused(capsys, "search", "--index-dir", index, "zebra", "-k", k) == f"-k must be at least 1; got {k}"
    assert refused(capsys, "search", "--index-dir", index, "--queries", files["queries"], "-k", k,
                   "--mode", "dense") == f"-k must be at least 1; got {k}"


def test_k_and_depth_below_one_are_refused_by_the_python_api(index, model) -> None:
    searcher = Searcher(index, model=model)
    with pytest.raises(GraphDocError, match=r"^k must be at least 1; got 0$"):
        searcher.search("aardvark", k=0, mode="bm25")
    with pytest.raises(GraphDocError, match=r"^k must be at least 1; got -1$"):
        searcher.batch_search(["aardvark"], k=-1, mode="dense")
    with pytest.raises(GraphDocError, match=r"^depth must be at least 1; got 0$"):
        searcher.batch_search(["aardvark"], k=5, depth=0)
    with pytest.raises(GraphDocError, match=r"^depth must be at least 1; got -5$"):
        searcher.component_runs({"q": "aardvark"}, depth=-5)
    assert list(searcher.batch_search(["aardvark"], k=1, mode="bm25")["0"]) == ["d001"]


@pytest.mark.parametrize("depth", ["0", "-5"])
def test_tune_fusion_depth_below_one_is_refused(index, files, capsys, no_search, depth) -> None:
    assert refused(capsys, "tune-fusion", "--index-dir", index, "--queries", files["queries"], "--qrels",
                   files["qrels"], "--folds", 3, "--depth", depth) == f"--depth must be at least 1; got {depth}"


def test_batch_size_below_one_is_refused_before_an_index_is_started(files, model_dir, tmp_path, capsys) -> None:
    assert refused(capsys, "index", "--corpus", files["corpus"], "--index-dir", tmp_path / "i", "--model", model_dir,
                   "--batch-size", 0) == "--batch-size must be at least 1; got 0"
    assert not (tmp_path / "i").exists()


# ------------------------------------------------------------------ 4. outputs, qrels and measures before the search
def test_output_paths_are_checked_before_searching(index, files, tmp_path, capsys, no_search) -> None:
    folder = tmp_path / "outdir"
    folder.mkdir()
    under_file = files["corpus"] / "run.trec"
    assert refused(capsys, "search", "--index-dir", index, "--queries", files["queries"], "--output", folder) == (
        f"--output {folder} is a folder; name a file")
    assert refused(capsys, "search", "--index-dir", index, "--queries", files["queries"], "--output", under_file) == (
        f"--output {under_file}: {files['corpus']} is a file, not a folder")
    assert refused(capsys, "tune-fusion", "--index-dir", index, "--queries", files["queries"], "--qrels",
                   files["qrels"], "--folds", 3, "--output", folder) == f"--output {folder} is a folder; name a file"
    before = {name: files[name].read_bytes() for name in ("queries", "qrels")}
    for name in ("queries", "qrels"):  # the run would replace what the search reads
        assert refused(capsys, "search", "--index-dir", index, "--queries", files["queries"], "--qrels", files["qrels"],
                       "--output", files[name]) == (f"--output {files[name]} is the input file {files[name]}; name "
                                                    "another file for the run")
    assert refused(capsys, "tune-fusion", "--index-dir", index, "--queries", files["queries"], "--qrels",
                   files["qrels"], "--folds", 3, "--output", files["qrels"]) == (
        f"--output {files['qrels']} is the input file {files['qrels']}; name another file for the run")
    assert {name: files[name].read_bytes() for name in ("queries", "qrels")} == before
    manifest = (index / "manifest.json").read_bytes()
    for command in ("search", "tune-fusion"):  # a run written into the index would replace its files
        assert refused(capsys, command, "--index-dir", index, "--queries", files["queries"], "--qrels", files["qrels"],
                       "--output", index / "manifest.json") == (f"--output {index / 'manifest.json'} is inside the "
                                                                f"index folder {index}; write the run elsewhere")
    assert (index / "manifest.json").read_bytes() == manifest


def test_qrels_and_measures_are_checked_before_searching(index, files, tmp_path, capsys, no_search) -> None:
    base = ["--index-dir", index, "--queries", files["queries"]]
    assert refused(capsys, "search", *base, "--qrels", files["qrels"], "--measures", "nDCG@10", "Bogus").startswith(
        "unknown measure 'Bogus'; use ir_measures names such as nDCG@10")
    assert refused(capsys, "search", *base, "--qrels", files["qrels"], "--measures", "alpha_nDCG@10").startswith(
        "measure 'alpha_nDCG@10' cannot be computed here: no installed ir_measures provider computes it")
    assert refused(capsys, "search", *base, "--qrels", tmp_path / "none.tsv").startswith(f"{tmp_path / 'none.tsv'}")
    empty = tmp_path / "empty.tsv"
    empty.write_text("query-id\tcorpus-id\tscore\n", encoding="utf-8")
    assert refused(capsys, "search", *base, "--qrels", empty) == f"{empty} holds no relevance judgements"
    assert refused(capsys, "tune-fusion", *base, "--qrels", files["qrels"], "--folds", 3, "--measure", "nDCG@0") == (
        "measure 'nDCG@0': the cutoff must be at least 1")


# ------------------------------------------------------------------ 5. options that were silently ignored
def test_batch_search_without_output_prints_the_run(index, files, model, capsys) -> None:
    queries = {q: word for q, (_, word) in WORDS.items()}
    expected = Searcher(index, model=model).batch_search(queries, k=3, mode="bm25")
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "--queries", files["queries"], "--mode", "bm25", "-k", 3) == 0
    out = capsys.readouterr().out
    assert out == "".join(run_lines(expected, tag="graphdoc-bm25"))
    assert [line.split()[:4] for line in out.splitlines()] == [[q, "Q0", d, "1"] for q, (d, _) in WORDS.items()]

    assert cli("search", "--index-dir", index, "--queries", files["queries"], "--mode", "bm25", "-k", 3,
               "--output", "-") == 0  # "-": standard output, as in other tools
    assert capsys.readouterr().out == out
    assert cli("search", "--index-dir", index, "--queries", files["queries"], "--mode", "bm25", "-k", 3,
               "--output", "-", "--qrels", files["qrels"]) == 0
    printed = capsys.readouterr()
    assert printed.out == out and "nDCG@10" in printed.err  # the run piped on, the evaluation beside it
    assert cli("search", "--index-dir", index, "--queries", files["q3"], "--mode", "bm25", "--json",
               "--output", "-") == 0
    assert len(capsys.readouterr().out.splitlines()) == 3

    assert cli("search", "--index-dir", index, "--queries", files["q3"], "--mode", "bm25", "--json") == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [
        {"query_id": q, "rank": 1, "doc_id": d, "score": pytest.approx(expected[q][d]),
         "title": f"Title {int(d[1:])}", "metadata": {}}
        for q, (d, _) in list(WORDS.items())[:3]]


@pytest.mark.parametrize("argv, message", [
    (["--output", "x.trec"], "--output works with --queries, not with one QUERY"),
    (["--qrels", "qrels.tsv"], "--qrels works with --queries, not with one QUERY"),
    (["--measures", "P@5"], "--measures works with --queries, not with one QUERY"),
    (["--split", "test"], "--split works with --queries, not with one QUERY"),
    (["--fusion", "rrf", "--alpha", "0.3"], "--alpha applies to weighted fusion, not rrf"),
    (["--fusion", "rrf", "--normalization", "zscore"], "--normalization applies to weighted fusion, not rrf"),
    (["--mode", "dense", "--alpha", "0.3"], "--alpha is not used with --mode dense"),
    (["--mode", "bm25", "--fusion", "rrf"], "--fusion is not used with --mode bm25"),
    (["--mode", "bm25", "--model", "no-such-model"], "--model is not used with --mode bm25"),
])
def test_ignored_options_of_one_query_are_refused(index, capsys, no_search, argv, message) -> None:
    assert refused(capsys, "search", "--index-dir", index, "aardvark", *argv) == message


def test_ignored_options_of_a_batch_are_refused(index, files, own_rrf_index, capsys, no_search) -> None:
    base = ["--index-dir", index, "--queries", files["queries"]]
    assert refused(capsys, "search", *base, "--measures", "P@5") == "--measures needs --qrels"
    assert refused(capsys, "search", *base, "--json", "--output", "x.trec") == (
        "--json prints the run of --queries: it cannot be combined with --output FILE or --qrels")
    assert refused(capsys, "search", "--index-dir", own_rrf_index, "aardvark", "--alpha", "0.2") == (
        "--alpha applies to weighted fusion, not rrf (the index's fusion; add --fusion weighted)")


@pytest.fixture
def own_rrf_index(index, tmp_path) -> Path:
    folder = Path(shutil.copytree(index, tmp_path / "rrf"))
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    manifest["fusion"] = {"method": "rrf", "alpha": 0.5, "normalization": "minmax", "rrf_k": 60}
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def test_one_query_prints_one_line_snippets_and_says_when_nothing_matched(spaced_index, capsys) -> None:
    capsys.readouterr()
    assert cli("search", "--index-dir", spaced_index, "estuaries", "--mode", "bm25") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[2:] == ["my", "notes.md", "Notes"]
    assert lines[1] == "     Deltas and estuaries. ## Two Rivers end here."
    assert len(lines) == 2
    assert cli("search", "--index-dir", spaced_index, "water", "--mode", "bm25") == 0  # a title's line break too
    assert capsys.readouterr().out.splitlines()[0].split("  ")[2:] == ["plain", "Plain title with a tab"]
    assert cli("search", "--index-dir", spaced_index, "zzzz", "--mode", "bm25") == 0
    assert capsys.readouterr().out == "no results\n"
    assert cli("search", "--index-dir", spaced_index, "the of ?!", "--mode", "bm25") == 0  # stop words only
    assert capsys.readouterr().out == ("no results: the query has no word BM25 indexes (2+ letters or digits, "
                                       "not a stop word)\n")


# ------------------------------------------------------------------ 6. cutoffs below 1 never reach trec_eval
def test_measures_with_a_cutoff_below_one_are_refused(files, tmp_path, capsys) -> None:
    run = tmp_path / "r.trec"
    run.write_text("q1 Q0 d001 1 1.0 t\n", encoding="utf-8")
    for measure in ("P@0", "nDCG@0"):
        assert refused(capsys, "eval", "--run", run, "--qrels", files["qrels"], "--measures", measure) == (
            f"measure '{measure}': the cutoff must be at least 1")
    with pytest.raises(GraphDocError, match=r"^measure 'P@1.5': the cutoff must be a whole number; got 1.5$"):
        parse_measures(["P@1.5"])
    assert [str(m) for m in parse_measures(["P@1", "AP"])] == ["P@1", "AP"]


# ------------------------------------------------------------------ 7. tune-fusion counts only searched queries
def test_tune_fusion_scores_only_the_searched_judged_queries(index, files, tmp_path, capsys) -> None:
    # BM25 alone is perfect here and equally good alphas go to the one nearest the index's: with the index's
    # alpha at 0.0 the outcome does not hang on the random dense model
    index = Path(shutil.copytree(index, tmp_path / "index"))
    manifest = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
    manifest["fusion"]["alpha"] = 0.0
    (index / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    capsys.readouterr()
    assert cli("tune-fusion", "--index-dir", index, "--queries", files["q3"], "--qrels", files["qrels"],
               "--folds", 3) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == "cross-validated nDCG@10: 1.0000; alpha on all queries: 0.00"
    assert [line.split(":")[0] for line in captured.out.splitlines()[:-1]] == ["fold 1", "fold 2", "fold 3"]
    assert captured.err == (f"WARNING graphdoc.cli: 3 of the 6 queries judged in {files['qrels']} are not in "
                            f"{files['q3']}: tuning on the other 3\n")


def test_tune_fusion_refuses_more_folds_than_searched_judged_queries(index, files, capsys, no_search) -> None:
    assert refused(capsys, "tune-fusion", "--index-dir", index, "--queries", files["q3"], "--qrels", files["qrels"],
                   "--folds", 5) == ("--folds must be between 2 and the number of queries (3), got 5 (3 of the 6 "
                                     f"queries judged in {files['qrels']} are not in {files['q3']})")
    assert refused(capsys, "tune-fusion", "--index-dir", index, "--queries", files["queries"], "--qrels",
                   files["qrels"], "--folds", 41) == "--folds must be between 2 and the number of queries (6), got 41"


@pytest.mark.parametrize("folds", ["1", "0", "-3"])
def test_tune_fusion_refuses_fewer_than_two_folds_before_opening_the_index(files, tmp_path, capsys, folds) -> None:
    """(it said 'folds must be between 2 and the number of queries (6), got 1', once a model had loaded)"""
    assert refused(capsys, "tune-fusion", "--index-dir", tmp_path / "none", "--queries", files["queries"],
                   "--qrels", files["qrels"], "--folds", folds) == f"--folds must be at least 2; got {folds}"


def test_tune_alpha_leaves_out_judged_queries_that_were_not_searched() -> None:
    qrels = {f"q{i}": {"A": 1} for i in range(6)}
    perfect = {"A": 1.0, "B": 0.5}
    runs = {f"q{i}": perfect for i in range(3)}
    result = tune_alpha(runs, runs, qrels, folds=3)
    assert result.mean_test_score == 1.0 and sorted(result.run) == ["q0", "q1", "q2"]
    assert sorted(q for fold in result.folds for q in fold.query_ids) == ["q0", "q1", "q2"]
    with pytest.raises(GraphDocError, match=r"^folds must be between 2 and the number of queries \(3\), got 5$"):
        tune_alpha(runs, runs, qrels, folds=5)
    with pytest.raises(GraphDocError, match=r"^no searched query has relevance judgements$"):
        tune_alpha({"x": perfect}, {}, qrels, folds=2)


# ------------------------------------------------------------------ 11. damaged files in final/
def _truncate(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(50)


def _drop_last_line(path: Path) -> None:
    path.write_text("".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]), encoding="utf-8")


def _drop_last_row(path: Path) -> None:
    np.save(path, np.load(path)[:-1])


def _drop_last_vector(path: Path) -> None:
    """An exact FAISS index (which holds the vectors of an index's Flat search) one row short."""
    import faiss

    index = faiss.read_index(str(path))
    shorter = faiss.IndexFlatIP(index.d)
    shorter.add(index.reconstruct_n(0, index.ntotal - 1))
    faiss.write_index(shorter, str(path))


def _jump_an_offset(path: Path) -> None:
    ptr = np.load(path)
    ptr[1] += 1000
    np.save(path, ptr)


@pytest.mark.parametrize("name, damage, problem", [
    ("passage_ptr.npy", _jump_an_offset,
     "final/passage_ptr.npy does not start at 0 and rise (its passage offsets are broken)"),
    ("doc_ids.txt", _drop_last_line, "final/doc_ids.txt holds 19 documents, build.json 20"),
    # an index finalised before final/build.json was written: its sizes are the manifest's
    ("doc_ids.txt", lambda p: (_drop_last_line(p), (p.parent / "build.json").unlink()),
     "final/doc_ids.txt holds 19 documents, the manifest 20"),
    ("build.json", lambda p: p.write_text('{"build": 3}', encoding="utf-8"),
     "final/build.json is not valid (not a build record)"),
    ("doc_ids.txt", lambda p: p.write_bytes(p.read_bytes()[:-3]), "final/doc_ids.txt cannot be read (it is cut short)"),
    ("dense.faiss", _drop_last_vector, "final/dense.faiss holds 19 documents, not 20"),
    ("passages.faiss", _drop_last_vector, "final/passages.faiss holds 59 passages, not 60 (passage_ptr.npy)"),
    ("passage_attention.npy", _drop_last_row, "final/passage_attention.npy holds 59 passages, not 60"),
    ("docstore.jsonl", _drop_last_line, "final/docstore.jsonl is cut short"),
    ("passage_ptr.npy", _truncate,
     "final/passage_ptr.npy cannot be read (EOF: reading array header, expected 118 bytes got 40)"),
    ("docstore.jsonl.offsets.npy", _truncate,
     "final/docstore.jsonl.offsets.npy cannot be read (EOF: reading array header, expected 118 bytes got 40)"),
    # the JSON parser's own words differ with and without orjson installed
    ("bm25/vocab.index.json", _truncate, "final/bm25 cannot be read (...)"),
])
def test_a_damaged_file_is_named_in_one_line(index, tmp_path, capsys, name, damage, problem) -> None:
    copy = Path(shutil.copytree(index, tmp_path / "copy"))
    damage(copy / "final" / name)
    message = f"index {copy} is damaged: {problem}{DAMAGED}"

    def shown(line: str) -> str:
        return re.sub(r"cannot be read \(.*\);", "cannot be read (...);", line) if "(...)" in problem else line

    assert shown(refused(capsys, "search", "--index-dir", copy, "aardvark", "--mode", "bm25")) == message
    with pytest.raises(GraphDocError) as err:
        Searcher(copy)
    assert shown(str(err.value)) == message


@pytest.mark.parametrize("name", ["dense.faiss", "passages.faiss"])
def test_a_truncated_faiss_file_is_named_in_one_line(index, tmp_path, capsys, name) -> None:
    copy = Path(shutil.copytree(index, tmp_path / "copy"))
    _truncate(copy / "final" / name)
    message = refused(capsys, "search", "--index-dir", copy, "aardvark")
    assert message.startswith(f"index {copy} is damaged: final/{name} cannot be read ('ret == (size)' failed: ")
    assert message.endswith(DAMAGED)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("damage, problem", [
    (lambda final: _truncate(final / "dense.faiss"), "final/dense.faiss cannot be read"),
    (lambda final: _drop_last_line(final / "docstore.jsonl"), "final/docstore.jsonl is cut short"),
    (shutil.rmtree, "final/ is missing"),
])
def test_rerunning_the_index_command_rebuilds_a_damaged_final(index, files, model_dir, tmp_path, capsys, damage,
                                                             problem) -> None:
    copy = Path(shutil.copytree(index, tmp_path / "copy"))
    built = _files(copy / "final")
    damage(copy / "final")
    assert final_problem(copy).startswith(problem)
    capsys.readouterr()
    assert cli("index", "--corpus", files["corpus"], "--index-dir", copy, "--model", model_dir) == 0
    assert f"WARNING graphdoc.retrieval.builder: index {copy} is damaged ({problem}" in capsys.readouterr().err
    assert final_problem(copy) is None
    assert _files(copy / "final") == built
    assert cli("index", "--corpus", files["corpus"], "--index-dir", copy, "--model", model_dir) == 0
    assert "damaged" not in capsys.readouterr().err


# ------------------------------------------------------------------ 17. eval warns about runs that miss the qrels
def test_eval_refuses_an_empty_run_and_warns_about_unjudged_ones(files, tmp_path, capsys) -> None:
    empty = tmp_path / "empty.trec"
    empty.write_text("", encoding="utf-8")
    assert refused(capsys, "eval", "--run", empty, "--qrels", files["qrels"]) == f"{empty} holds no results"
    mismatch = tmp_path / "mismatch.trec"
    mismatch.write_text("zz Q0 d001 1 1.0 t\n", encoding="utf-8")
    assert cli("eval", "--run", mismatch, "--qrels", files["qrels"], "--measures", "nDCG@10") == 0
    captured = capsys.readouterr()
    assert captured.out == format_table({"mismatch.trec": {"nDCG@10": 0.0}}) + "\n"
    assert captured.err == (f"WARNING graphdoc.cli: none of the 1 queries of {mismatch} is judged in "
                            f"{files['qrels']}: every figure is 0\n")


def test_search_with_qrels_warns_that_unsearched_judged_queries_count_as_zero(index, files, capsys) -> None:
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "--queries", files["q3"], "--qrels", files["qrels"], "--mode", "bm25",
               "--measures", "nDCG@10", "R@100") == 0
    captured = capsys.readouterr()
    assert captured.out == format_table({"bm25": {"nDCG@10": 0.5, "R@100": 0.5}}) + "\n"
    assert captured.err == (f"WARNING graphdoc.cli: 3 of the 6 queries judged in {files['qrels']} are not in "
                            f"{files['q3']}: they count as 0\n")


# ------------------------------------------------------------------ 20. a pipe closed by the reader
class _ClosedPipe(io.TextIOBase):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        raise io.UnsupportedOperation("no file")


def test_a_closed_pipe_ends_quietly(index, capsys, monkeypatch) -> None:
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(["-q", "search", "--index-dir", str(index), "aardvark", "--mode", "bm25"]) == 1
    monkeypatch.undo()
    assert capsys.readouterr().err == ""


# ------------------------------------------------------------------ 21. ids a TREC run cannot hold
def test_document_ids_with_spaces_are_refused_before_a_trec_run_is_searched(spaced_index, tmp_path, capsys,
                                                                             monkeypatch) -> None:
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\testuaries\n", encoding="utf-8")
    with monkeypatch.context() as patch:
        patch.setattr(Searcher, "batch_search", lambda *a, **k: pytest.fail("searched before refusing"))
        prefix = (f"index {spaced_index}: 1 of its 2 document ids cannot go into a TREC run, e.g. 'my notes.md' "
                  "(whitespace); rename those documents and rebuild the index")
        assert refused(capsys, "search", "--index-dir", spaced_index, "--queries", queries, "--output",
                       tmp_path / "r.trec") == prefix
        assert refused(capsys, "search", "--index-dir", spaced_index, "--queries", queries) == (
            prefix + ", or print the run with --json")
    assert not (tmp_path / "r.trec").exists()
    assert cli("search", "--index-dir", spaced_index, "--queries", queries, "--mode", "bm25", "--json") == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["doc_id"] == "my notes.md"
    assert unwritable_ids(["a", "b c", "", "d\u00a0e", "f"]) == ["b c", "", "d\u00a0e"]
    assert unwritable_ids(["a", "b"]) == []


# ------------------------------------------------------------------ minor: log noise
def test_faiss_loader_notices_are_kept_out_of_the_output(files, tmp_path, capsys) -> None:
    faiss_logger = logging.getLogger("faiss")
    level = faiss_logger.level
    try:
        assert main(["eval", "--run", str(tmp_path / "none.run"), "--qrels", str(files["qrels"])]) == 1
        assert faiss_logger.getEffectiveLevel() == logging.WARNING
    finally:
        faiss_logger.setLevel(level)


def test_a_blank_query_is_refused(index, model, tmp_path, capsys) -> None:
    searcher = Searcher(index, model=model)
    for mode in ("bm25", "dense", "hybrid"):
        with pytest.raises(GraphDocError, match="^the query is empty$"):
            searcher.search("  ", mode=mode)
    with pytest.raises(GraphDocError, match="^query 'q2' is empty$"):
        searcher.batch_search({"q1": "fox", "q2": "\t"}, mode="bm25")
    assert refused(capsys, "search", "--index-dir", index, "", "--mode", "bm25") == "the query is empty"



# ------------------------------------------------------------------ --queries -: queries piped in
def pipe(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


@pytest.mark.parametrize("data", [
    "".join(json.dumps({"_id": q, "text": word}) + "\n" for q, (_, word) in WORDS.items()).encode("utf-8"),
    "\ufeff".encode("utf-8") + "".join(f"{q}\t{word}\n" for q, (_, word) in WORDS.items()).encode("utf-8"),
    "".join(f"<top>\n<num> Number: {q}\n<title> {word}\n</top>\n" for q, (_, word) in WORDS.items()).encode("utf-8"),
])
def test_queries_piped_in_are_searched_as_a_file_of_them_is(index, files, capsys, monkeypatch, data) -> None:
    assert cli("search", "--index-dir", index, "--queries", files["queries"], "--mode", "bm25", "-k", 3) == 0
    from_file = capsys.readouterr().out
    pipe(monkeypatch, data)
    assert cli("search", "--index-dir", index, "--queries", "-", "--mode", "bm25", "-k", 3) == 0
    assert capsys.readouterr().out == from_file


def test_query_lines_piped_in_are_numbered(index, capsys, monkeypatch) -> None:
    pipe(monkeypatch, b"aardvark\n\nbison\n")
    assert cli("search", "--index-dir", index, "--queries", "-", "--mode", "bm25", "-k", 1, "--json") == 0
    assert [(h["query_id"], h["doc_id"]) for h in map(json.loads, capsys.readouterr().out.splitlines())] == [
        ("1", "d001"), ("3", "d004")]


@pytest.mark.parametrize("data, argv, message", [
    (b"", [], "--queries -: standard input holds no queries"),
    (b"\n  \n", [], "--queries -: standard input holds no queries"),
    (b'{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n', [],
     "<stdin>:2: duplicate query id 'a' (first seen on line 1)"),
    (b"aardvark\n", ["--split", "test"],
     "--split picks the queries of a BEIR folder or a dataset; --queries - is neither"),
])
def test_bad_queries_piped_in_are_one_line(index, capsys, monkeypatch, no_search, data, argv, message) -> None:
    pipe(monkeypatch, data)
    assert refused(capsys, "search", "--index-dir", index, "--queries", "-", *argv) == message


def test_tune_fusion_reads_queries_piped_in(index, files, tmp_path, capsys, monkeypatch) -> None:
    index = Path(shutil.copytree(index, tmp_path / "index"))
    manifest = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
    manifest["fusion"]["alpha"] = 0.0
    (index / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    pipe(monkeypatch, files["q3"].read_bytes())
    capsys.readouterr()
    assert cli("tune-fusion", "--index-dir", index, "--queries", "-", "--qrels", files["qrels"], "--folds", 3) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == "cross-validated nDCG@10: 1.0000; alpha on all queries: 0.00"
    assert captured.err == (f"WARNING graphdoc.cli: 3 of the 6 queries judged in {files['qrels']} are not in "
                            "the queries piped in: tuning on the other 3\n")
