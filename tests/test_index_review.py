"""Review fixes of ``graphdoc index`` / ``graphdoc merge``: mistakes found before encoding, nothing written
lost, one writer per folder, merges written atomically, damaged manifests and parts named in one line."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from _retrieval_helpers import (
    searched_vectors,
    MODEL_CONFIG,
    cli,
    doc_ids,
    error_line,
    kill_on_shard,
    make_docs,
    manifest_json,
    write_jsonl,
)

from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError
from graphdoc.retrieval import builder, progress
from graphdoc.retrieval.bm25 import BM25Config
from graphdoc.retrieval.builder import IndexSettings, build_index, open_manifest
from graphdoc.retrieval.dense import DenseIndex, TrainingError
from graphdoc.fileio import writer_lock
from graphdoc.retrieval.merge import merge_indexes
from graphdoc.retrieval.searcher import Searcher

pytestmark = pytest.mark.usefixtures("restore_cli_state")


@pytest.fixture
def corpus(tmp_path) -> Path:
    return write_jsonl(tmp_path / "corpus.jsonl", make_docs(4))


def index_cli(corpus, index, model_dir, *extra) -> int:
    return cli("index", "--corpus", corpus, "--index-dir", index, "--model", model_dir, *extra)


def no_encoding(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a document was encoded")

    monkeypatch.setattr(builder, "_encode_shard", refuse)


# ------------------------------------------------------------------ settings checked before encoding (1, 2, 14)
def test_a_bad_stemmer_is_refused_before_the_model_loads_and_nothing_is_written(corpus, tmp_path, capsys) -> None:
    capsys.readouterr()
    assert index_cli(corpus, tmp_path / "i", tmp_path / "no-model", "--bm25-stemmer", "klingon") == 1
    assert error_line(capsys, "index").startswith("graphdoc index: error: unknown BM25 stemmer 'klingon'; "
                                                  "valid: 'arabic', ")
    assert not (tmp_path / "i").exists()
    with pytest.raises(GraphDocError, match="unknown BM25 stemmer 'klingon'"):
        BM25Config(stemmer="klingon")


def refused_before_encoding(corpus, model_dir, tmp_path, capsys, monkeypatch, factory: str) -> str:
    """Index with ``factory``: it must fail before encoding, leaving no folder; the error line."""
    no_encoding(monkeypatch)
    capsys.readouterr()
    assert index_cli(corpus, tmp_path / "i", model_dir, "--faiss-factory", factory) == 1
    line = error_line(capsys, "index")
    assert not (tmp_path / "i").exists()
    return line


# a graph index's PQ storage, NSG's graph, OPQ's quantizer, PCA: they were found after encoding
@pytest.mark.parametrize(("factory", "need"), [("IVF64,Flat", 64), ("HNSW32,PQ4", 256), ("NSG32,Flat", 101),
                                               ("OPQ4,IVF4,Flat", 256), ("PCAR16,Flat", 16)])
def test_a_factory_needing_more_documents_is_refused_before_encoding(corpus, model_dir, tmp_path, capsys,
                                                                     monkeypatch, factory, need) -> None:
    assert refused_before_encoding(corpus, model_dir, tmp_path, capsys, monkeypatch, factory) == (
        f"graphdoc index: error: FAISS index {factory!r} needs at least {need} documents to be built; "
        f"{tmp_path / 'i'} would hold 4: choose a smaller one (Flat and HNSW32 need no training)")


def test_a_pca_to_more_dimensions_than_the_model_gives_is_refused_before_encoding(corpus, model_dir, tmp_path,
                                                                                 capsys, monkeypatch) -> None:
    assert refused_before_encoding(corpus, model_dir, tmp_path, capsys, monkeypatch, "PCA4096,Flat").startswith(
        "graphdoc index: error: FAISS index 'PCA4096,Flat': a PCA cannot turn ")


def test_an_index_faiss_cannot_fill_is_one_error_line():
    vectors = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    with pytest.raises(TrainingError, match=r"^cannot build FAISS index 'NSG32,Flat' from 50 vectors: .*NUM_EVAL"):
        DenseIndex.build(vectors, "NSG32,Flat")
    assert DenseIndex.build(np.tile(vectors, (3, 1)), "NSG32,Flat").size == 150


@pytest.mark.parametrize("factory", ["IDMap,Flat", "IDMap2,HNSW32"])
def test_an_idmap_factory_is_refused_before_encoding(corpus, model_dir, tmp_path, capsys, monkeypatch,
                                                     factory) -> None:
    # it was a traceback from FAISS's add() once the whole corpus was encoded
    assert refused_before_encoding(corpus, model_dir, tmp_path, capsys, monkeypatch, factory) == (
        f"graphdoc index: error: FAISS index {factory!r}: graphdoc keeps documents by row and adds no ids, so an "
        f"IDMap cannot be filled; leave '{factory.split(',')[0]},' out")


def test_a_factory_that_fails_to_train_keeps_the_shards_and_can_be_replaced(model, corpus, tmp_path, capsys,
                                                                            monkeypatch) -> None:
    index = tmp_path / "i"
    # a need the check cannot see
    monkeypatch.setattr("graphdoc.retrieval.corpus_checks.training_minimum", lambda *_: 0)
    with pytest.raises(GraphDocError) as info:
        build_index(model, str(corpus), index, IndexSettings(faiss_factory="HNSW32,PQ8"))
    monkeypatch.undo()
    assert str(info.value).startswith("cannot train FAISS index 'HNSW32,PQ8' on 4 vectors: ")
    assert str(info.value).endswith("; the 4 documents encoded so far are kept: rerun with another FAISS factory "
                                    "(faiss_factory, --faiss-factory; Flat needs no training) to finish the index")
    assert manifest_json(index)["shards"] == ["00000"] and not (index / "final").exists()
    no_encoding(monkeypatch)
    manifest = build_index(model, str(corpus), index, IndexSettings(faiss_factory="Flat"))
    assert manifest.faiss_factory == "Flat" and manifest.finalized and doc_ids(index) == [f"d00{i}" for i in range(4)]
    capsys.readouterr()  # once finalised, the factory is fixed again
    with pytest.raises(GraphDocError, match=r"has faiss_factory='Flat'; cannot change it to 'HNSW32' \(build a new"):
        build_index(model, str(corpus), index, IndexSettings(faiss_factory="HNSW32"))


def test_a_stemmer_on_an_existing_index_is_refused_like_the_factory(model, model_dir, corpus, tmp_path,
                                                                    capsys) -> None:
    index = tmp_path / "i"
    build_index(model, str(corpus), index)
    before = (index / "manifest.json").read_bytes()
    capsys.readouterr()
    assert index_cli(corpus, index, model_dir, "--bm25-stemmer", "english") == 1
    assert error_line(capsys, "index") == (f"graphdoc index: error: index {index} has bm25.stemmer=None; cannot "
                                           "change it to 'english' (build a new index)")
    assert (index / "manifest.json").read_bytes() == before
    assert index_cli(corpus, index, model_dir) == 0  # without the option: the index's own setting


# ------------------------------------------------------------------ the corpus is read before anything is written (15)
def test_a_missing_empty_or_broken_corpus_writes_nothing(model_dir, tmp_path, capsys) -> None:
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "broken.jsonl").write_text('{"_id": broken\n', encoding="utf-8")
    cases = {"nosuch.jsonl": "nosuch.jsonl: no such file or folder",
             "empty.jsonl": f"{tmp_path / 'empty.jsonl'} holds no documents",
             "broken.jsonl": f"{tmp_path / 'broken.jsonl'}:1: invalid JSON"}
    for name, message in cases.items():
        capsys.readouterr()
        corpus = name if name == "nosuch.jsonl" else tmp_path / name
        assert index_cli(corpus, tmp_path / "i", model_dir) == 1
        assert error_line(capsys, "index").startswith(f"graphdoc index: error: {message}")
        assert not (tmp_path / "i").exists()


def test_an_index_without_documents_binds_no_model(model, tiny_roberta, corpus, tmp_path) -> None:
    roberta = GraphDocEncoder.from_pretrained(str(tiny_roberta), config=MODEL_CONFIG, device="cpu")
    open_manifest(tmp_path / "i", roberta, IndexSettings())  # what an older failed run left
    manifest = build_index(model, str(corpus), tmp_path / "i")
    assert manifest.counts["documents"] == 4
    assert manifest_json(tmp_path / "i")["model"]["name"] == model.config.passage_encoder.model_name_or_path


def test_a_folder_of_other_files_is_refused(model_dir, corpus, tmp_path, capsys) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.txt").write_text("keep me\n", encoding="utf-8")
    capsys.readouterr()
    assert index_cli(corpus, folder, model_dir) == 1
    assert error_line(capsys, "index") == (f"graphdoc index: error: {folder} is a folder of other files, not a "
                                           "graphdoc index: index into a new or empty folder")
    assert sorted(p.name for p in folder.iterdir()) == ["todo.txt"]


def test_an_index_inside_a_text_folder_corpus_is_refused(model_dir, tmp_path, capsys) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("a", "b"):
        (folder / f"{name}.md").write_text(f"# {name}\nSome text about {name}.\n", encoding="utf-8")
    capsys.readouterr()
    assert index_cli(folder, folder / "idx", model_dir) == 1  # its .txt files would be documents next time
    assert error_line(capsys, "index") == (f"graphdoc index: error: the index folder {folder / 'idx'} is inside the "
                                           f"corpus folder {folder}: the index's files would be read as documents")
    assert sorted(p.name for p in folder.iterdir()) == ["a.md", "b.md"]


# ------------------------------------------------------------------ rerunning (12, 13)
def test_leftovers_of_a_killed_finalisation_are_removed(model, corpus, tmp_path) -> None:
    index = tmp_path / "i"
    build_index(model, str(corpus), index)
    (index / ".final.k1ll3d.tmp").mkdir()
    (index / ".final.k1ll3d.tmp" / "doc_ids.txt").write_text("x\n", encoding="utf-8")
    (index / ".manifest.json.k1ll3d.tmp").write_text("{", encoding="utf-8")
    build_index(model, str(corpus), index)
    assert sorted(p.name for p in index.iterdir()) == ["final", "manifest.json", "shards"]


def test_a_rerun_does_not_read_an_indexed_corpus_again_and_warns_if_it_changed(model, tmp_path, monkeypatch,
                                                                               caplog) -> None:
    docs = make_docs(6)
    folder = tmp_path / "texts"
    folder.mkdir()
    for d in docs[:4]:
        (folder / f"{d['_id']}.txt").write_text(d["text"], encoding="utf-8")
    index = tmp_path / "i"
    build_index(model, str(folder), index, IndexSettings(shard_size=3))
    no_encoding(monkeypatch)
    monkeypatch.setattr(progress, "read_corpus", lambda *a, **k: pytest.fail("the corpus was read again"))
    with caplog.at_level(logging.INFO, logger="graphdoc"):
        assert build_index(model, str(folder), index, IndexSettings(shard_size=3)).counts["documents"] == 4
    assert "is already in the index" in caplog.text and not [r for r in caplog.records if r.levelno >= 30]
    (folder / "0a.txt").write_text(docs[4]["text"], encoding="utf-8")  # sorts before the indexed files
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="graphdoc"):
        assert build_index(model, str(folder), index, IndexSettings(shard_size=3)).counts["documents"] == 4
    [warning] = [r.getMessage() for r in caplog.records if r.levelno >= 30]
    assert warning == (f"{folder} changed since it was indexed; the index keeps the 4 documents read from it "
                       "then. To add documents, put them in another file and index that; to pick up changes, "
                       "build a new index")
    assert sorted(doc_ids(index)) == sorted(d["_id"] for d in docs[:4])


@pytest.mark.parametrize("change", ["rename", "older copy", "old manifest"])
def test_a_file_renamed_or_restored_in_an_indexed_folder_is_a_change(model, tmp_path, caplog, change) -> None:
    """A file's name is its document id: renamed (same count, bytes and latest time) or replaced by an older copy
    of the same size, the folder is not what was indexed. A manifest from before the state kept a digest of the
    files compares on its three figures."""
    docs = make_docs(3)
    folder = tmp_path / "texts"
    folder.mkdir()
    for d in docs:
        (folder / f"{d['_id']}.txt").write_text(d["text"], encoding="utf-8")
    index = tmp_path / "i"
    build_index(model, str(folder), index)
    first = folder / f"{docs[0]['_id']}.txt"
    if change == "rename":
        first.rename(folder / "renamed.txt")
    elif change == "older copy":
        stat = first.stat()
        first.write_text(first.read_text(encoding="utf-8")[::-1], encoding="utf-8")
        os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns - 10**9))
    else:
        manifest = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
        [source] = manifest["sources"]
        assert len(source["state"]) == 4
        source["state"] = source["state"][:3]
        (index / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="graphdoc"):
        build_index(model, str(folder), index)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= 30]
    if change == "old manifest":
        assert "is already in the index" in caplog.text and not warnings
    else:
        assert warnings == [f"{folder} changed since it was indexed; the index keeps the 3 documents read from it "
                            "then. To add documents, put them in another file and index that; to pick up changes, "
                            "build a new index"]


def test_a_beir_folder_changed_only_in_its_qrels_is_not_a_changed_corpus(model, tmp_path, caplog) -> None:
    folder = tmp_path / "beir"
    folder.mkdir()
    write_jsonl(folder / "corpus.jsonl", make_docs(4))
    index = tmp_path / "i"
    build_index(model, str(folder), index)
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("q1\td000\t1\n", encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="graphdoc"):
        build_index(model, str(folder), index)
    assert "is already in the index" in caplog.text and not [r for r in caplog.records if r.levelno >= 30]
    write_jsonl(folder / "corpus.jsonl", make_docs(5))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="graphdoc"):
        build_index(model, str(folder), index)
    assert [r.getMessage() for r in caplog.records if r.levelno >= 30][0].startswith(f"{folder} changed since")


def test_an_interrupted_run_does_not_resume_over_a_changed_corpus(model, tmp_path, monkeypatch) -> None:
    docs = make_docs(6)
    corpus = write_jsonl(tmp_path / "c.jsonl", docs)
    index = tmp_path / "i"
    real_encode, shards = builder._encode_shard, []

    def crash_after_one_shard(*args, **kwargs):
        if shards:
            raise KeyboardInterrupt  # killed while encoding the second shard
        shards.append(real_encode(*args, **kwargs))

    monkeypatch.setattr(builder, "_encode_shard", crash_after_one_shard)
    with pytest.raises(KeyboardInterrupt):
        build_index(model, str(corpus), index, IndexSettings(shard_size=3))
    monkeypatch.setattr(builder, "_encode_shard", real_encode)
    write_jsonl(corpus, docs[1:])  # the first document removed: resuming by position would skip docs[3]
    with pytest.raises(GraphDocError, match=r"c.jsonl changed since an interrupted run began indexing it \(3 of "
                                            r"its documents are in\) and not only past them: document 'd003', read "
                                            r"before, is not in the index. A run resumes by position"):
        build_index(model, str(corpus), index, IndexSettings(shard_size=3))
    edited = [dict(d, text=d["text"] + " Edited.") if d["_id"] == "d001" else d for d in docs]
    write_jsonl(corpus, edited)
    with pytest.raises(GraphDocError, match="document 'd001' is not the one indexed"):
        build_index(model, str(corpus), index, IndexSettings(shard_size=3))
    write_jsonl(corpus, docs)  # restored as it was (same size; a new modification time is checked document-wise)
    stat = corpus.stat()
    state = json.loads((index / "manifest.json").read_text())["sources"][0]["state"]
    os.utime(corpus, ns=(stat.st_atime_ns, state[2]))
    build_index(model, str(corpus), index, IndexSettings(shard_size=3))
    assert doc_ids(index) == [d["_id"] for d in docs]


# ------------------------------------------------------------------ one writer (16)
def test_a_second_writer_is_refused_at_once(model_dir, corpus, tmp_path, capsys) -> None:
    index = tmp_path / "i"
    with writer_lock(index):
        capsys.readouterr()
        assert index_cli(corpus, index, model_dir) == 1
        assert error_line(capsys, "index") == f"graphdoc index: error: another graphdoc process is writing {index}"
        assert cli("merge", "--index-dir", index, tmp_path / "a") == 1
    assert not index.exists()  # the lock's folder goes with it when nothing was written
    assert index_cli(corpus, index, model_dir) == 0
    assert sorted(p.name for p in index.iterdir()) == ["final", "manifest.json", "shards"]


# ------------------------------------------------------------------ merge (9, 10, empty parts)
def test_a_run_stopped_by_a_broken_line_resumes_once_the_line_is_fixed(model, tmp_path, caplog) -> None:
    docs = make_docs(7)
    lines = [json.dumps(d) for d in docs]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(lines[:5] + ['{"_id": "d005", "text": broken'] + lines[6:]) + "\n", encoding="utf-8")
    index = tmp_path / "i"
    with pytest.raises(GraphDocError, match=r"c.jsonl:6: invalid JSON"):
        build_index(model, str(corpus), index, IndexSettings(shard_size=2))
    assert json.loads((index / "manifest.json").read_text())["sources"][0]["documents_read"] == 4
    write_jsonl(corpus, docs)  # the line fixed: the 4 documents indexed are still the corpus's first 4
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        build_index(model, str(corpus), index, IndexSettings(shard_size=2))
    assert [r.getMessage() for r in caplog.records] == [
        f"{corpus} changed since an interrupted run began indexing it; its first 4 documents are the ones in the "
        "index: resuming after them"]
    build_index(model, str(corpus), tmp_path / "whole", IndexSettings(shard_size=2))
    for name in ("doc_ids.txt", "dense.faiss", "passages.faiss"):
        assert (index / "final" / name).read_bytes() == (tmp_path / "whole" / "final" / name).read_bytes(), name


def test_resuming_over_an_edited_corpus_reads_only_what_was_read_and_knows_skipped_duplicates(model,
                                                                                              tmp_path) -> None:
    write_jsonl(tmp_path / "a.jsonl", make_docs(3))
    index, skip = tmp_path / "i", IndexSettings(shard_size=2, on_duplicate="skip")
    build_index(model, str(tmp_path / "a.jsonl"), index, skip)
    # the same ids with other texts first (skipped as duplicates), then new documents, line 6 broken
    docs = [dict(d, text=d["text"] + " Other.") for d in make_docs(3)] + make_docs(4, start=3)
    lines = [json.dumps(d) for d in docs]
    corpus = tmp_path / "b.jsonl"
    corpus.write_text("\n".join(lines[:5] + ["{broken"] + lines[6:]) + "\n", encoding="utf-8")
    with pytest.raises(GraphDocError, match=r"b.jsonl:6: invalid JSON"):
        build_index(model, str(corpus), index, skip)
    corpus.write_text("\n".join(lines[:5] + ["{broken"] + lines[6:] + [lines[0]]) + "\n", encoding="utf-8")
    with pytest.raises(GraphDocError, match=r"b.jsonl:6: invalid JSON"):  # still broken: the line is named
        build_index(model, str(corpus), index, skip)
    write_jsonl(corpus, docs)  # fixed: the skipped duplicates are not taken for changed documents
    build_index(model, str(corpus), index, skip)
    assert (index / "final" / "doc_ids.txt").read_text().split() == [f"d{i:03d}" for i in range(7)]


@pytest.fixture
def parts(model, corpus, tmp_path) -> list[Path]:
    for i in (1, 2):
        build_index(model, str(corpus), tmp_path / f"p{i}", part=f"{i}/2")
    return [tmp_path / "p1", tmp_path / "p2"]


def test_a_part_named_twice_is_refused(parts, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for second in ("p1", "./p1", str(parts[0])):
        capsys.readouterr()
        assert cli("merge", "--index-dir", "out", "p1", second) == 1
        message = "p1 is named twice" if second != str(parts[0]) else f"{parts[0]} is named twice (as p1)"
        assert error_line(capsys, "merge") == f"graphdoc merge: error: {message}"
    assert not (tmp_path / "out").exists()


def test_a_damaged_part_is_named_and_nothing_is_written(parts, tmp_path, capsys) -> None:
    bad = Path(shutil.copytree(parts[1], tmp_path / "bad"))
    with open(bad / "shards" / "00000" / "doc_vectors.npy", "r+b") as handle:
        handle.truncate(100)
    capsys.readouterr()
    assert cli("merge", "--index-dir", tmp_path / "out", parts[0], bad) == 1
    assert error_line(capsys, "merge") == (f"graphdoc merge: error: {bad / 'shards' / '00000' / 'doc_vectors.npy'}: "
                                           "damaged (EOF: reading array header, expected 118 bytes got 90)")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_a_killed_merge_leaves_nothing_that_blocks_the_rerun(parts, tmp_path, monkeypatch) -> None:
    out = tmp_path / "out"
    from graphdoc.retrieval import merge

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(merge, "finalize", killed)
    with pytest.raises(KeyboardInterrupt):
        merge_indexes(out, parts)
    assert not out.exists() and not list(tmp_path.glob(".out*"))
    out.mkdir()  # what kill -9 leaves: the lock file and the temporary folder
    (out / ".lock").touch()
    (tmp_path / ".out.k1ll3d.tmp" / "shards").mkdir(parents=True)
    monkeypatch.undo()
    manifest = merge_indexes(out, parts)
    assert manifest.counts["documents"] == 4 and sorted(doc_ids(out)) == [f"d00{i}" for i in range(4)]
    assert sorted(p.name for p in out.iterdir()) == ["final", "manifest.json", "shards"]
    assert not list(tmp_path.glob(".out*"))


def test_an_empty_part_is_valid_and_merges(model, model_dir, corpus, tmp_path, capsys) -> None:
    for i in range(1, 6):
        assert index_cli(corpus, tmp_path / f"q{i}", model_dir, "--shard", f"{i}/5") == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"{tmp_path / 'q5'}: 0 documents, 0 passages, 0 shards"
    assert manifest_json(tmp_path / "q5")["finalized"] is True
    with pytest.raises(GraphDocError, match=r"q5 holds no documents \(an empty part of a sharded corpus\): merge "
                                            r"it with the other parts \(merge_indexes, graphdoc merge\) and search the "
                                            r"merged index"):
        Searcher(tmp_path / "q5")
    manifest = merge_indexes(tmp_path / "out", [tmp_path / f"q{i}" for i in range(1, 6)])
    assert manifest.counts["documents"] == 4 and len(manifest.sources) == 5
    vectors = searched_vectors(tmp_path / "out")
    assert vectors.shape == (4, 32)


# ------------------------------------------------------------------ damaged manifests (19)
@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(extra=1), "unexpected field 'extra'"),
    (lambda m: m.pop("dimension"), "missing field 'dimension'"),
    (lambda m: m["dense"].update(foo=1), "unexpected field 'dense.foo'"),
    (lambda m: m["sources"][0].pop("corpus"), "missing field 'sources[].corpus'"),
])
def test_a_manifest_with_a_wrong_field_is_one_line_naming_it(model, corpus, tmp_path, capsys, change,
                                                             message) -> None:
    index = tmp_path / "i"
    build_index(model, str(corpus), index)
    data = manifest_json(index)
    change(data)
    (index / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "graph", "--mode", "bm25") == 1
    assert error_line(capsys, "search") == f"graphdoc search: error: {index / 'manifest.json'}: {message}"
    with pytest.raises(GraphDocError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Searcher(index)


def test_an_index_built_with_a_relative_model_folder_loads_it_quietly_from_elsewhere(tiny_bert, tmp_path, monkeypatch,
                                                                                     caplog) -> None:
    """The manifest records the folder's name as typed ("enc") and its absolute path; searching from another
    folder loads the path, and said it was "loading /abs/enc, not the enc the config names"."""
    from graphdoc.retrieval.searcher import Searcher

    shutil.copytree(tiny_bert, tmp_path / "enc")
    monkeypatch.chdir(tmp_path)
    build_index("enc", str(write_jsonl(tmp_path / "c.jsonl", make_docs(3))), tmp_path / "idx", IndexSettings())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        searcher = Searcher(tmp_path / "idx")
        hits = searcher.batch_search({"q": make_docs(3)[1]["text"]}, k=1, mode="dense")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert list(hits["q"]) == [make_docs(3)[1]["_id"]]
    assert searcher.model.name_or_path == str((tmp_path / "enc").resolve())


def _unique_words(n: int) -> list[dict]:
    """``n`` documents each holding a word of its own ("uqa", "uqb", ...), so a BM25 search tells rows apart."""
    return [{"_id": f"d{i}", "title": "", "text": f"Shared words here. Only uq{chr(97 + i)}x is mine."}
            for i in range(n)]


def test_a_final_replaced_while_a_searcher_opens_it_is_opened_again(model, tmp_path, monkeypatch) -> None:
    """An add put a new final/ in place between the searcher's reading doc_ids.txt and bm25/: with the same
    number of documents no size disagreed, and the searcher paired the old ids with the new BM25 rows."""
    from graphdoc.retrieval.bm25 import BM25Index

    docs = _unique_words(6)
    build_index(model, str(write_jsonl(tmp_path / "a.jsonl", docs)), tmp_path / "idx", IndexSettings())
    rotated = [dict(d, text=docs[(i + 1) % 6]["text"]) for i, d in enumerate(docs)]  # same ids, other texts
    build_index(model, str(write_jsonl(tmp_path / "b.jsonl", rotated)), tmp_path / "other", IndexSettings())
    real_load, swaps = BM25Index.load.__func__, []

    def load_after_an_add(cls, path, *args, **kwargs):
        if not swaps:  # the add's finalising swaps final/ now, once
            swaps.append(path)
            os.replace(tmp_path / "idx" / "final", tmp_path / "old-final")
            shutil.copytree(tmp_path / "other" / "final", tmp_path / "idx" / "final")
        return real_load(cls, path, *args, **kwargs)

    monkeypatch.setattr(BM25Index, "load", classmethod(load_after_an_add))
    searcher = Searcher(tmp_path / "idx")
    monkeypatch.undo()
    assert swaps
    for i, doc in enumerate(rotated):
        word = doc["text"].split()[4]
        assert list(searcher.batch_search({"q": word}, k=1, mode="bm25")["q"]) == [doc["_id"]], word
        assert searcher.record(searcher.doc_ids.index(doc["_id"]))["text"] == doc["text"]


def test_a_searcher_opened_while_an_add_swaps_final_waits_for_the_new_one(model, tmp_path, monkeypatch) -> None:
    """An add's finalising moves final/ aside, then puts the new build in its place: a searcher opened between
    the two renames called the index incomplete (or damaged) instead of waiting the moment for the new one."""
    import threading

    from graphdoc.retrieval import rebuilds

    build_index(model, str(write_jsonl(tmp_path / "a.jsonl", make_docs(4))), tmp_path / "idx", IndexSettings())
    manifest_file = tmp_path / "idx" / "manifest.json"
    manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    manifest_file.write_text(json.dumps({**manifest, "finalized": False}), encoding="utf-8")  # as while finalising
    final, aside = tmp_path / "idx" / "final", tmp_path / "idx" / ".final.old-123"
    os.replace(final, aside)
    (tmp_path / "finalised.json").write_text(json.dumps(manifest), encoding="utf-8")
    put_back = threading.Timer(0.3, lambda: (os.replace(aside, final),
                                             os.replace(tmp_path / "finalised.json", manifest_file)))
    put_back.start()
    try:
        searcher = Searcher(tmp_path / "idx")
    finally:
        put_back.join()
    assert len(searcher.doc_ids) == 4 and not searcher.updating
    os.replace(final, aside)  # a kill between the two renames: the old build aside, no final/
    monkeypatch.setattr(rebuilds, "SWAP_WAIT_S", 0.05)
    with pytest.raises(GraphDocError, match=r"has no final/: an add was stopped as it replaced it \(its last build "
                                            r"is in \.final\.old-123\): rerun the build that was interrupted"):
        Searcher(tmp_path / "idx")
    build_index(model, str(tmp_path / "a.jsonl"), tmp_path / "idx", IndexSettings())  # the rerun mends it
    assert len(Searcher(tmp_path / "idx").doc_ids) == 4 and not aside.exists()


def killed_between_the_renames(monkeypatch) -> None:
    """Make finalising stop (as a kill) after it moved final/ aside and before it put the new build in its place."""
    real_replace = os.replace

    def replace(src, dst):
        if Path(dst).name == "final" and Path(src).name.endswith(".tmp"):
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def test_a_rerun_that_fails_after_a_kill_between_the_renames_leaves_the_last_build_searchable(
        model, tmp_path, monkeypatch, caplog) -> None:
    """A kill between finalising's two renames leaves the last complete build aside (.final.old-PID) and no final/:
    the next run deleted it as a temporary, so when that run failed too, no build was left to search."""
    index = tmp_path / "idx"
    build_index(model, str(write_jsonl(tmp_path / "a.jsonl", make_docs(4))), index, IndexSettings())
    killed_between_the_renames(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        build_index(model, str(write_jsonl(tmp_path / "b.jsonl", make_docs(2, start=4))), index, IndexSettings())
    monkeypatch.undo()
    assert not (index / "final").exists() and [p.name for p in index.glob(".final.*")] == [f".final.old-{os.getpid()}"]
    kill_on_shard(monkeypatch, 1)  # the next run (adding another corpus) is killed too, before it finalises
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="graphdoc"), pytest.raises(KeyboardInterrupt):
        build_index(model, str(write_jsonl(tmp_path / "c.jsonl", make_docs(2, start=6))), index, IndexSettings())
    monkeypatch.undo()
    with caplog.at_level(logging.WARNING, logger="graphdoc"), Searcher(index) as searcher:
        assert searcher.doc_ids == [d["_id"] for d in make_docs(4)]  # the last complete build, searched
    assert "being finalised after an add or a delete" in caplog.text
    assert f"putting back final/ from .final.old-{os.getpid()}, where a run stopped while replacing it left it" \
        in caplog.messages
    assert not list(index.glob(".final.*"))
    build_index(model, str(tmp_path / "c.jsonl"), index, IndexSettings())  # the next run that ends finishes both
    assert doc_ids(index) == [d["_id"] for d in make_docs(8)]


def test_a_final_in_place_before_the_manifest_counts_it_is_searched(model, tmp_path, caplog) -> None:
    """An add replaces final/, then saves the manifest with its counts: in between (or after a kill there) the
    searcher compared the new final/ with the old counts and called the index damaged."""
    build_index(model, str(write_jsonl(tmp_path / "a.jsonl", make_docs(4))), tmp_path / "idx", IndexSettings())
    manifest_file = tmp_path / "idx" / "manifest.json"
    before = manifest_file.read_text(encoding="utf-8")
    build_index(model, str(write_jsonl(tmp_path / "b.jsonl", make_docs(3, start=4))), tmp_path / "idx",
                IndexSettings())
    killed = json.loads(before)  # the manifest as a kill after the swap left it: not finalised, old counts
    killed["finalized"] = False
    killed["shards"] = json.loads(manifest_file.read_text(encoding="utf-8"))["shards"]
    manifest_file.write_text(json.dumps(killed), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        searcher = Searcher(tmp_path / "idx")
    assert len(searcher.doc_ids) == 7
    assert "searching the 7 documents of its last complete build" in caplog.text


def test_settings_of_an_index_whose_add_was_interrupted_while_finalising_stay(model, tmp_path) -> None:
    build_index(model, str(write_jsonl(tmp_path / "a.jsonl", make_docs(4))), tmp_path / "idx", IndexSettings())
    manifest_file = tmp_path / "idx" / "manifest.json"
    manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    manifest_file.write_text(json.dumps({**manifest, "finalized": False}), encoding="utf-8")
    with pytest.raises(GraphDocError, match=r"has bm25\.stemmer=None; cannot change it to 'english' \(build a new "
                                            r"index\)$"):
        build_index(model, str(tmp_path / "a.jsonl"), tmp_path / "idx",
                    IndexSettings(bm25=BM25Config(stemmer="english")))


def test_an_index_from_before_bm25_terms_keeps_bm25s_terms_when_documents_are_added(model, tmp_path) -> None:
    from graphdoc.retrieval.bm25 import BM25Index
    from graphdoc.retrieval.manifest import Manifest

    build_index(model, str(write_jsonl(tmp_path / "a.jsonl", make_docs(3))), tmp_path / "idx", IndexSettings())
    assert BM25Index.load(tmp_path / "idx" / "final" / "bm25").config.terms == "unicode"
    manifest_file = tmp_path / "idx" / "manifest.json"
    manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    del manifest["bm25"]["terms"]  # as graphdoc wrote it before the setting
    manifest_file.write_text(json.dumps({**manifest, "format_version": 1}), encoding="utf-8")
    assert Manifest.load(tmp_path / "idx").bm25["terms"] == "bm25s"
    build_index(model, str(write_jsonl(tmp_path / "b.jsonl", make_docs(2, start=3))), tmp_path / "idx",
                IndexSettings())
    assert BM25Index.load(tmp_path / "idx" / "final" / "bm25").config.terms == "bm25s"
    saved = json.loads(manifest_file.read_text(encoding="utf-8"))
    assert saved["bm25"]["terms"] == "bm25s" and saved["format_version"] == 2  # older graphdoc: "upgrade"
    # a setting that leaves terms out (graphdoc index --bm25-stemmer ...: the command that built it) keeps them
    build_index(model, str(tmp_path / "b.jsonl"), tmp_path / "idx", IndexSettings(bm25=BM25Config()))
    with pytest.raises(GraphDocError, match=r"has bm25\.terms='bm25s'; cannot change it to 'unicode'"):
        build_index(model, str(tmp_path / "b.jsonl"), tmp_path / "idx", IndexSettings(bm25=BM25Config(terms="unicode")))


@pytest.mark.parametrize(("factory", "message"), [
    ("HNSW0", "HNSW0 needs M (links per node) of at least 2"),  # FAISS aborted the process
    ("HNSW1", "HNSW1 needs M (links per node) of at least 2"),  # a segmentation fault
    ("IVF0,Flat", "IVF0 needs a list count of at least 1"),  # "nprobe must be at least 1", and a folder left
])
def test_a_faiss_factory_faiss_would_crash_on_is_refused_before_encoding(corpus, model_dir, tmp_path, capsys,
                                                                         monkeypatch, factory, message) -> None:
    assert refused_before_encoding(corpus, model_dir, tmp_path, capsys, monkeypatch, factory) == (
        f"graphdoc index: error: bad FAISS index_factory string {factory!r}: {message}")


def test_a_part_resumed_without_its_shard_is_told_to_give_it(model, tmp_path, monkeypatch) -> None:
    """(a --shard 1/2 run resumed without --shard said its first document was already in the index)"""
    from _retrieval_helpers import kill_on_shard, make_docs, manifest_json, write_jsonl

    from graphdoc.retrieval.builder import IndexSettings, build_index

    corpus = str(write_jsonl(tmp_path / "c.jsonl", make_docs(8)))
    kill_on_shard(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        build_index(model, corpus, tmp_path / "p", IndexSettings(shard_size=1), part="1/2")
    monkeypatch.undo()
    with pytest.raises(GraphDocError) as err:
        build_index(model, corpus, tmp_path / "p", IndexSettings(shard_size=1))
    assert str(err.value) == (f"{tmp_path / 'p'} holds {corpus} read as part 1/2 (--shard 1/2), not with no --shard: "
                              f"run the same command again with --shard 1/2 to go on with it, or index {corpus} into "
                              "another folder")
    build_index(model, corpus, tmp_path / "p", IndexSettings(shard_size=1), part="1/2")
    assert manifest_json(tmp_path / "p")["counts"]["documents"] == 4
