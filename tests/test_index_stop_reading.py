"""Stopping a corpus that an interrupted build left part-way (``graphdoc index --stop-reading``, ``stop_reading``):
its documents read are kept and searched as an index of them alone, the corpus is read no more, deletes work, and
the errors of a part-read index name this way out."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from _retrieval_helpers import (assert_same_runs, cli, doc_ids, error_line, kill_on_shard, make_docs, manifest_json,
                                search_runs, write_jsonl)

from graphdoc.errors import GraphDocError
from graphdoc.fileio import writer_lock
from graphdoc.retrieval import stop_reading, stopping  # (the function is graphdoc.retrieval's)
from graphdoc.retrieval.builder import IndexSettings, build_index
from graphdoc.retrieval.manifest import Manifest
from graphdoc.retrieval.searcher import Searcher

pytestmark = pytest.mark.usefixtures("restore_cli_state")

DOCS = make_docs(12)
READ = DOCS[:6]  # what a build in shards of 3 killed as it starts its third shard has read
QUERIES = {"q1": "graph attention network", "q2": "zebra fox", "q3": "lazy dog sentence", "q4": "okapi walrus"}


def interrupted(model, corpus, index: Path, monkeypatch, shard: int = 3, **settings) -> None:
    """Build ``index`` from ``corpus`` in shards of 3, killed as it starts encoding its ``shard``-th shard."""
    kill_on_shard(monkeypatch, shard)
    with pytest.raises(KeyboardInterrupt):
        build_index(model, corpus, index, IndexSettings(**{"shard_size": 3, **settings}))
    monkeypatch.undo()


def hint(index: Path, corpus) -> str:
    return f"graphdoc index --index-dir {index} --stop-reading {corpus} (stop_reading in Python)"


def unchanged(index: Path) -> dict[str, bytes]:
    return {str(p.relative_to(index)): p.read_bytes() for p in sorted(index.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ the way out, end to end
def test_a_build_whose_corpus_changed_is_stopped_where_it_got_searched_and_deleted_from(model, model_dir, tmp_path,
                                                                                       capsys, monkeypatch) -> None:
    corpus, index = write_jsonl(tmp_path / "c.jsonl", DOCS), tmp_path / "idx"
    kill_on_shard(monkeypatch, 3)
    assert cli("index", "--corpus", corpus, "--index-dir", index, "--model", model_dir, "--shard-size", 3) == 130
    monkeypatch.undo()
    write_jsonl(corpus, DOCS[1:])  # the corpus changed: the rerun cannot resume by position
    capsys.readouterr()
    assert cli("index", "--corpus", corpus, "--index-dir", index) == 1
    assert error_line(capsys, "index") == (
        f"graphdoc index: error: {corpus} changed since an interrupted run began indexing it (6 of its documents are "
        "in) and not only past them: document 'd006', read before, is not in the index. A run resumes by position: "
        "restore the corpus as it was, index it into a new folder, or keep the documents in and read no more of it: "
        f"{hint(index, corpus)}")
    assert cli("search", "--index-dir", index, "topic") == 1
    assert error_line(capsys, "search") == (
        f"graphdoc search: error: index {index} is incomplete: rerun the build that was interrupted (the same "
        f"build_index call or graphdoc index command), or keep what it read: {hint(index, corpus)}")
    assert cli("delete", "--index-dir", index, "d001") == 1
    assert error_line(capsys, "delete") == (
        f"graphdoc delete: error: the build of {index} is not finished ({corpus} part 1/1: 6 documents read): finish "
        "it first (rerun the build_index call or graphdoc index command) or keep what it read, "
        f"{hint(index, corpus)}; then delete (nothing was changed)")

    assert cli("index", "--index-dir", index, "--stop-reading", corpus) == 0
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (f"{index}: 6 documents, 18 passages, 2 shards\n", "")
    alone = tmp_path / "alone"  # an index of the documents read, alone
    build_index(model, str(write_jsonl(tmp_path / "read.jsonl", READ)), alone, IndexSettings(shard_size=3))
    assert doc_ids(index) == doc_ids(alone) == [d["_id"] for d in READ]
    assert_same_runs(search_runs(index, QUERIES, k=len(DOCS)), search_runs(alone, QUERIES, k=len(DOCS)))
    assert cli("info", index) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"    {corpus}: 6 documents read, stopped, encoded at fp32"
    assert cli("info", index, "--json") == 0
    info = json.loads(capsys.readouterr().out)
    assert info["building"] == [] and [(s["documents_read"], s["complete"], s["stopped"]) for s in info["sources"]] \
        == [(6, True, True)]

    # the corpus is read no more: the same command again adds nothing and says why
    assert cli("index", "--corpus", corpus, "--index-dir", index) == 0
    captured = capsys.readouterr()
    assert captured.out == f"{index}: 6 documents, 18 passages, 2 shards\n"
    assert captured.err == (
        f"WARNING graphdoc.retrieval.progress: {corpus} was stopped after 6 documents read (graphdoc index "
        "--stop-reading): the index keeps them and reads no more of it. To add documents, put them in another corpus "
        "and index that (--on-duplicate skip leaves out those in), or build a new index\n")
    assert cli("delete", "--index-dir", index, "d001") == 0
    assert capsys.readouterr().out == f"{index}: 1 document deleted, 5 documents, 15 passages\n"
    assert doc_ids(index) == [d["_id"] for d in READ if d["_id"] != "d001"]


def test_a_corpus_gone_is_named_with_the_way_out_and_stopped_without_it(model, tmp_path, capsys,
                                                                        monkeypatch) -> None:
    corpus, index = write_jsonl(tmp_path / "c.jsonl", DOCS), tmp_path / "idx"
    interrupted(model, str(corpus), index, monkeypatch)
    corpus.unlink()
    monkeypatch.chdir(tmp_path)  # named as the build was given it, relative to here
    capsys.readouterr()
    assert cli("index", "--corpus", "c.jsonl", "--index-dir", index) == 1
    assert error_line(capsys, "index") == (
        f"graphdoc index: error: c.jsonl: no such file or folder, and an interrupted run read 6 of its documents into "
        f"{index}: restore it to go on, or keep those and read no more of it: {hint(index, corpus)}")
    manifest = stop_reading(index, "c.jsonl")
    assert [(s.corpus, s.documents_read, s.complete, s.stopped) for s in manifest.sources] == \
        [(str(corpus), 6, True, True)]
    assert manifest.finalized and doc_ids(index) == [d["_id"] for d in READ]


def test_documents_in_memory_are_stopped_by_their_name_and_the_same_list_adds_nothing(model, tmp_path, monkeypatch,
                                                                                     caplog) -> None:
    index = tmp_path / "idx"
    interrupted(model, DOCS, index, monkeypatch)
    name = manifest_json(index)["sources"][0]["corpus"]
    assert name.startswith("memory:sha256:")
    stop_reading(index, name)
    assert doc_ids(index) == [d["_id"] for d in READ]
    saved = manifest_json(index)["sources"][0]
    assert (saved["documents_read"], saved["complete"], saved["stopped"]) == (6, True, True)
    before = unchanged(index)
    with caplog.at_level(logging.INFO, logger="graphdoc"):
        build_index(model, DOCS, index)  # found again: not read again, and warned of
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING][0].startswith(
        f"the list {name} was stopped after 6 documents read (graphdoc index --stop-reading)")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="graphdoc"):
        stop_reading(index, name)  # stopped already: nothing to do
    assert [r.getMessage() for r in caplog.records] == [f"{index}: {name} was stopped already"]
    assert unchanged(index) == before


def test_a_stop_killed_while_finalising_is_finished_by_the_same_call(model, tmp_path, monkeypatch, capsys) -> None:
    corpus, index = write_jsonl(tmp_path / "c.jsonl", DOCS), tmp_path / "idx"
    interrupted(model, str(corpus), index, monkeypatch)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(stopping, "finalize", killed)
    with pytest.raises(KeyboardInterrupt):
        stop_reading(index, corpus)
    monkeypatch.undo()
    with pytest.raises(GraphDocError) as refused:
        Searcher(index)
    assert str(refused.value).endswith(f", or keep what it read: {hint(index, corpus)}")
    stop_reading(index, corpus)
    assert doc_ids(index) == [d["_id"] for d in READ] and manifest_json(index)["finalized"]


# ------------------------------------------------------------------ several corpora, parts
def test_one_corpus_of_several_is_stopped_and_the_others_kept(model, tmp_path, monkeypatch, capsys) -> None:
    first = write_jsonl(tmp_path / "first.jsonl", make_docs(4, prefix="a"))
    corpus, index = write_jsonl(tmp_path / "c.jsonl", DOCS), tmp_path / "idx"
    build_index(model, str(first), index, IndexSettings(shard_size=3))
    interrupted(model, str(corpus), index, monkeypatch)
    stop_reading(index, corpus)
    assert doc_ids(index) == [f"a{i:03d}" for i in range(4)] + [d["_id"] for d in READ]
    sources = manifest_json(index)["sources"]
    assert "stopped" not in sources[0] and sources[1]["stopped"] is True  # (saved only where true)
    assert cli("info", index) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [f"    {first}: 4 documents read, complete, encoded at fp32",
                                                         f"    {corpus}: 6 documents read, stopped, encoded at fp32"]
    with pytest.raises(GraphDocError) as refused:
        stop_reading(index, first)
    assert str(refused.value) == f"{first} is read to its end in {index} (4 documents read, complete): there is " \
                                 "nothing to stop"


def test_a_part_is_stopped_by_its_own_progress_and_merges(model, tmp_path, monkeypatch, capsys) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", DOCS)
    build_index(model, str(corpus), tmp_path / "2of2", IndexSettings(shard_size=2), part="2/2")
    kill_on_shard(monkeypatch, 2)  # part 1/2 in shards of 2: killed after d000 and d002, 3 documents of the corpus read
    with pytest.raises(KeyboardInterrupt):
        build_index(model, str(corpus), tmp_path / "1of2", IndexSettings(shard_size=2), part="1/2")
    monkeypatch.undo()
    capsys.readouterr()
    assert cli("index", "--index-dir", tmp_path / "1of2", "--stop-reading", corpus, "--shard", "2/2") == 1
    assert error_line(capsys, "index") == (f"graphdoc index: error: {tmp_path / '1of2'} holds {corpus} as part 1/2, "
                                           "not part 2/2: give --shard 1/2, or leave --shard out")
    assert cli("index", "--index-dir", tmp_path / "1of2", "--stop-reading", corpus, "--shard", "1/2") == 0
    assert cli("info", tmp_path / "1of2") == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        f"    {corpus} part 1/2: 2 documents read (its part of the corpus's first 3), stopped, encoded at fp32"
    assert cli("merge", "--index-dir", tmp_path / "merged", tmp_path / "1of2", tmp_path / "2of2") == 0
    assert capsys.readouterr().err == (
        f"WARNING graphdoc.retrieval.merge: {tmp_path / '1of2'} holds {corpus} part 1/2 stopped after 2 of its "
        "documents (graphdoc index --stop-reading): the merged index lacks the rest of that part\n")
    assert doc_ids(tmp_path / "merged") == ["d000", "d002", *(f"d{i:03d}" for i in range(1, 12, 2))]


# ------------------------------------------------------------------ refusals
def test_what_cannot_be_stopped_is_refused_and_changes_nothing(model, model_dir, tmp_path, monkeypatch,
                                                               capsys) -> None:
    corpus, index = write_jsonl(tmp_path / "c.jsonl", DOCS), tmp_path / "idx"
    interrupted(model, str(corpus), index, monkeypatch)
    before = unchanged(index)
    monkeypatch.chdir(tmp_path)
    for args, message in (
            (("other.jsonl",), f"{index} holds no corpus named other.jsonl; its corpora: {corpus} (6 documents read, "
                               "not finished)"),
            (("c.jsonl", "1/2"), f"{index} holds {corpus} as part 1/1, not part 1/2: give --shard 1/1, or leave "
                                 "--shard out"),
            (("c.jsonl", "3/2"), "part (--shard) 3/2: I must be between 1 and N")):
        with pytest.raises(GraphDocError) as refused:
            stop_reading(index, *args)
        assert str(refused.value) == message
    with pytest.raises(GraphDocError, match=r"^corpus must name a corpus of the index, as graphdoc info lists it"):
        stop_reading(index, DOCS)
    with writer_lock(index):
        with pytest.raises(GraphDocError, match=f"^another graphdoc process is writing {index}$"):
            stop_reading(index, corpus)
    capsys.readouterr()
    assert cli("index", "--index-dir", index, "--stop-reading", corpus, "--model", model_dir) == 1
    assert error_line(capsys, "index") == ("graphdoc index: error: --stop-reading reads and encodes nothing: --model "
                                           "does not apply (leave it out)")
    assert unchanged(index) == before


def test_a_faiss_factory_the_documents_read_cannot_train_is_refused_until_another_is_given(model, tmp_path,
                                                                                           monkeypatch) -> None:
    corpus, index = write_jsonl(tmp_path / "c.jsonl", DOCS), tmp_path / "idx"
    interrupted(model, str(corpus), index, monkeypatch, shard=2, faiss_factory="IVF4,Flat")  # 3 documents read
    before = unchanged(index)
    with pytest.raises(GraphDocError) as refused:
        stop_reading(index, corpus)
    assert str(refused.value) == (f"FAISS index 'IVF4,Flat' needs at least 4 documents to be built; {index} holds 3: "
                                  "pass a smaller one too (--faiss-factory, faiss_factory; Flat needs no training; "
                                  "nothing was changed)")
    assert unchanged(index) == before
    manifest = stop_reading(index, corpus, faiss_factory="Flat")
    assert manifest.faiss_factory == manifest_json(index)["faiss_factory"] == "Flat"
    assert doc_ids(index) == ["d000", "d001", "d002"]


def test_a_manifest_that_says_stopped_but_not_complete_is_refused(model, tmp_path, monkeypatch) -> None:
    corpus, index = write_jsonl(tmp_path / "c.jsonl", DOCS), tmp_path / "idx"
    interrupted(model, str(corpus), index, monkeypatch)
    copy = Path(shutil.copytree(index, tmp_path / "copy"))
    manifest = manifest_json(copy)
    manifest["sources"][0]["stopped"] = True
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(GraphDocError) as refused:
        Manifest.load(copy)
    assert str(refused.value) == (f"{copy / 'manifest.json'}: sources[].stopped is true for \"{corpus}\", whose "
                                  "complete is false (a corpus stopped is read no further: complete)")


def test_a_stopped_part_that_read_more_than_a_whole_part_is_of_another_version(model, tmp_path, monkeypatch,
                                                                                capsys) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", make_docs(20))
    kill_on_shard(monkeypatch, 4)  # part 1/2 in shards of 2: 6 of its documents, 11 of the corpus read
    with pytest.raises(KeyboardInterrupt):
        build_index(model, str(corpus), tmp_path / "1of2", IndexSettings(shard_size=2), part="1/2")
    monkeypatch.undo()
    stop_reading(tmp_path / "1of2", corpus)
    write_jsonl(corpus, make_docs(8))  # part 2/2 read whole from a shorter version
    build_index(model, str(corpus), tmp_path / "2of2", IndexSettings(shard_size=2), part="2/2")
    capsys.readouterr()
    assert cli("merge", "--index-dir", tmp_path / "merged", tmp_path / "2of2", tmp_path / "1of2") == 1
    assert error_line(capsys, "merge") == (
        f"graphdoc merge: error: cannot merge {tmp_path / '1of2'}: {corpus} part 1/2 was stopped after 11 documents "
        f"read, more than the 8 {tmp_path / '2of2'}'s part 2/2 read to the end: the parts come from different "
        "versions of it")
    assert not (tmp_path / "merged").exists()
