"""Building index folders: manifest and files, resuming after a crash, parts and merge, adding corpora, mismatches."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from _retrieval_helpers import (
    searched_vectors,
    MODEL_CONFIG,
    chunker_config,
    cli,
    doc_ids,
    error_line,
    make_docs,
    manifest_json,
    records,
    save_model,
    unit,
    write_jsonl,
)

from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError, IndexMismatchError
from graphdoc.retrieval.bm25 import BM25Config
from graphdoc.retrieval import builder, progress
from graphdoc.retrieval.builder import IndexSettings, build_index
from graphdoc.retrieval.manifest import Manifest, SourceProgress, model_fingerprint
from graphdoc.retrieval.merge import merge_indexes
from graphdoc.retrieval.searcher import Searcher

FINAL_FILES = {"doc_ids.txt", "dense.faiss", "passage_ptr.npy",
               "passages.faiss", "bm25", "docstore.jsonl", "docstore.jsonl.offsets.npy"}

pytestmark = pytest.mark.usefixtures("restore_cli_state")


def final_vectors(index_dir: Path) -> dict[str, np.ndarray]:
    """``{doc id: its vector in final/}``; every id must appear once."""
    ids = doc_ids(index_dir)
    assert len(ids) == len(set(ids)), ids
    return dict(zip(ids, searched_vectors(index_dir)))


def assert_vectors_match(index_dir: Path, model, docs: list[dict]) -> None:
    """The index holds exactly ``docs``' ids, each with the unit vector the model gives its text."""
    vectors = final_vectors(index_dir)
    assert sorted(vectors) == sorted(d["_id"] for d in docs)
    expected = unit(model.encode(docs))
    got = np.stack([vectors[d["_id"]] for d in docs])
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    return make_docs(10)


@pytest.fixture(scope="module")
def built(model, docs, tmp_path_factory) -> Path:
    """An index of ten documents in shards of three, built once for the read-only tests."""
    folder = tmp_path_factory.mktemp("built")
    corpus = write_jsonl(folder / "corpus.jsonl", docs)
    build_index(model, str(corpus), folder / "index", IndexSettings(shard_size=3))
    return folder / "index"


def copy_index(index_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(index_dir, tmp_path / "index"))


# ------------------------------------------------------------------ a fresh build
def test_manifest_records_model_settings_progress_and_counts(built, model, model_dir, tmp_path) -> None:
    m = manifest_json(built)
    assert m["format"] == "graphdoc.index" and m["format_version"] == 2
    assert m["model"]["path"] == str(model_dir.resolve())
    assert m["model"]["name"] == model.config.passage_encoder.model_name_or_path
    assert m["model"]["fingerprint"] == model_fingerprint(model) and len(m["model"]["fingerprint"]) == 64
    assert m["model"]["chunker"] == {"max_words": 12, "max_passages": 100, "title": "first", "version": 2}
    assert m["model"]["passage_encoder"] == {"pooling": "mean", "normalize": False, "max_seq_length": 64,
                                             "projection_dim": None, "query_prompt": "", "passage_prompt": ""}
    assert m["model"]["graph"] == asdict(MODEL_CONFIG.graph)
    assert (m["dimension"], m["metric"], m["faiss_factory"], m["store_passages"]) == (32, "cosine", "Flat", True)
    assert m["shards"] == ["00000", "00001", "00002", "00003"]  # 3 + 3 + 3 + 1 documents
    corpus = str((built.parent / "corpus.jsonl").resolve())
    stat = Path(corpus).stat()
    digest = hashlib.blake2b(f"corpus.jsonl\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode(), digest_size=6)
    assert m["sources"] == [{"corpus": corpus, "part": "1/1", "documents_read": 10, "complete": True,
                             "state": [1, stat.st_size, stat.st_mtime_ns, int.from_bytes(digest.digest(), "big")],
                             "shards": m["shards"], "precision": "fp32"}]
    assert m["shard_size"] == 3
    assert {k: m["counts"][k] for k in ("documents", "passages", "shards", "replaced")} == \
        {"documents": 10, "passages": 30, "shards": 4, "replaced": 0}
    assert m["finalized"] is True
    assert time.strptime(m["created"], "%Y-%m-%dT%H:%M:%SZ")


def test_final_files_exist_and_nothing_temporary_is_left(built) -> None:
    assert sorted(p.name for p in built.iterdir()) == ["final", "manifest.json", "shards"]
    final = {p.name for p in (built / "final").iterdir()}
    assert FINAL_FILES <= final and not [name for name in final if name.startswith(".")]
    assert sorted(p.name for p in (built / "shards").iterdir()) == ["00000", "00001", "00002", "00003"]


def test_doc_vectors_are_the_models_unit_vectors_in_corpus_order(built, model, docs) -> None:
    from graphdoc.retrieval.dense import prepare_vectors

    assert doc_ids(built) == [d["_id"] for d in docs]
    vectors = searched_vectors(built)
    shards = np.concatenate([np.load(p / "doc_vectors.npy") for p in sorted((built / "shards").iterdir())])
    assert np.array_equal(vectors, prepare_vectors(shards, "cosine"))  # normalised once, to the last bit
    assert vectors.dtype == np.float32 and vectors.shape == (10, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(vectors, unit(model.encode(docs)), atol=1e-5)


def test_passage_vectors_and_docstore_follow_the_passages(built, model, docs) -> None:
    ptr = np.load(built / "final" / "passage_ptr.npy")
    assert ptr.tolist() == list(range(0, 31, 3))  # three sentences of 8 words, 12-word passages
    expected = [out.passage_embeddings(i).numpy()
                for out in model.iter_forward(docs) for i in range(len(out.documents))]
    np.testing.assert_allclose(searched_vectors(built, passages=True), unit(np.concatenate(expected)),
                               atol=1e-5)
    for doc, rec in zip(docs, records(built)):
        assert (rec["id"], rec["title"], rec["text"]) == (doc["_id"], doc["title"], doc["text"])
        sentences = [s + "." for s in doc["text"][:-1].split(". ")]
        assert [rec["text"][start:end] for start, end, *_ in rec["passages"]] == sentences


def test_rebuilding_the_same_corpus_changes_nothing(built, tmp_path) -> None:
    index = copy_index(built, tmp_path)
    before = (index / "final" / "dense.faiss").read_bytes()
    model = GraphDocEncoder.from_pretrained(manifest_json(index)["model"]["path"], device="cpu")
    manifest = build_index(model, str(built.parent / "corpus.jsonl"), index, IndexSettings(shard_size=3))
    assert manifest.counts["documents"] == 10 and manifest.shards == ["00000", "00001", "00002", "00003"]
    assert (index / "final" / "dense.faiss").read_bytes() == before


# ------------------------------------------------------------------ resuming
def test_build_resumes_after_a_crash_and_removes_unlisted_shards(model, tmp_path, monkeypatch) -> None:
    docs = make_docs(11)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", docs)
    index = tmp_path / "index"
    encode_shard, calls = builder._encode_shard, []

    def crash_on_third_shard(*args, **kwargs):
        calls.append(1)
        encode_shard(*args, **kwargs)  # the shard folder is written ...
        if len(calls) == 3:
            raise KeyboardInterrupt  # ... but the run dies before the manifest lists it

    monkeypatch.setattr(builder, "_encode_shard", crash_on_third_shard)
    with pytest.raises(KeyboardInterrupt):
        build_index(model, str(corpus), index, IndexSettings(shard_size=3))
    monkeypatch.setattr(builder, "_encode_shard", encode_shard)

    m = manifest_json(index)
    assert m["shards"] == ["00000", "00001"] and m["finalized"] is False
    assert (m["sources"][0]["documents_read"], m["sources"][0]["complete"]) == (6, False)
    assert (index / "shards" / "00002").is_dir()  # the unlisted shard of the crashed run
    (index / "shards" / "junk").mkdir()
    (index / "shards" / "junk" / "ids.txt").write_text("d000\n", encoding="utf-8")
    with pytest.raises(GraphDocError, match=r"incomplete: rerun the build that was interrupted \(the same "
                                            r"build_index call or graphdoc index command\), or keep what it read: "
                                            r"graphdoc index --index-dir .* --stop-reading .*corpus\.jsonl "
                                            r"\(stop_reading in Python\)$"):
        Searcher(index)

    build_index(model, str(corpus), index, IndexSettings(shard_size=3))
    m = manifest_json(index)
    assert m["shards"] == ["00000", "00001", "00002", "00003"] and m["finalized"] is True
    assert sorted(p.name for p in (index / "shards").iterdir()) == m["shards"]
    assert (index / "shards" / "00002" / "ids.txt").read_text(encoding="utf-8") == "d006\nd007\nd008\n"
    assert doc_ids(index) == [d["_id"] for d in docs]
    assert_vectors_match(index, model, docs)


def test_adding_another_corpus_warns_of_one_left_half_read(model, tmp_path, monkeypatch, caplog) -> None:
    first = write_jsonl(tmp_path / "first.jsonl", make_docs(7))
    second = write_jsonl(tmp_path / "second.jsonl", [dict(d, _id=f"s{d['_id']}") for d in make_docs(2)])
    index = tmp_path / "index"
    encode_shard = builder._encode_shard

    def crash_on_second_shard(*args, **kwargs):
        encode_shard(*args, **kwargs)
        if len(list((index / "shards").iterdir())) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(builder, "_encode_shard", crash_on_second_shard)
    with pytest.raises(KeyboardInterrupt):
        build_index(model, str(first), index, IndexSettings(shard_size=3))
    monkeypatch.setattr(builder, "_encode_shard", encode_shard)
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        build_index(model, str(second), index)  # finalised with 3 of first's 7 documents: say so
    assert caplog.messages == [f"{first.resolve()} part 1/1 is only partly in the index (3 documents read): rerun "
                               f"its build to add the rest, or keep only those: graphdoc index --index-dir {index} "
                               f"--stop-reading {first.resolve()} (stop_reading in Python)"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        build_index(model, str(first), index)  # its rerun completes it
    assert caplog.messages == [] and len(doc_ids(index)) == 9


def _start_cli_index(corpus: Path, index: Path, model_dir: Path, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "graphdoc", "-q", "index", "--corpus", str(corpus), "--index-dir", str(index),
            "--model", str(model_dir), "--shard-size", "2", "--batch-size", "2"]
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(cwd / "stderr.txt", "wb"))


def _kill_after_first_shard(proc: subprocess.Popen, index: Path, timeout: float = 120.0) -> bool:
    """SIGKILL ``proc`` once its manifest lists a shard; False if it finished first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            shards = json.loads((index / "manifest.json").read_text(encoding="utf-8"))["shards"]
        except (FileNotFoundError, json.JSONDecodeError):
            shards = []
        if shards:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.005)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        pytest.fail("graphdoc index wrote no shard in time")
    return False


@pytest.mark.slow
def test_index_killed_mid_run_resumes_with_every_document_once(model, model_dir, tmp_path) -> None:
    """A real crash: ``graphdoc index`` in a subprocess, SIGKILLed mid-run, then the same command again."""
    for attempt, n in enumerate((150, 1000)):  # a machine fast enough to finish 150 first gets a longer corpus
        work = tmp_path / f"attempt{attempt}"
        work.mkdir()
        docs = make_docs(n)
        corpus = write_jsonl(work / "corpus.jsonl", docs)
        index = work / "index"
        proc = _start_cli_index(corpus, index, model_dir, work)
        if _kill_after_first_shard(proc, index):
            break
        assert proc.returncode == 0, (work / "stderr.txt").read_text()
    else:
        pytest.fail("graphdoc index always finished before it could be killed")
    assert proc.returncode == -signal.SIGKILL
    killed = manifest_json(index)
    assert killed["finalized"] is False and not killed["sources"][0]["complete"]
    assert 1 <= len(killed["shards"]) and killed["sources"][0]["documents_read"] < n

    argv = ["index", "--corpus", corpus, "--index-dir", index, "--model", model_dir, "--shard-size", 2,
            "--batch-size", 2]
    assert cli(*argv) == 0
    m = manifest_json(index)
    assert m["finalized"] is True and m["sources"][0]["complete"] and m["counts"]["documents"] == n
    assert len(m["shards"]) == n // 2
    assert sorted(p.name for p in (index / "shards").iterdir()) == m["shards"]  # no half-written shard left
    assert doc_ids(index) == [d["_id"] for d in docs]
    assert_vectors_match(index, model, docs)


# ------------------------------------------------------------------ parts and merge
def test_parts_merge_into_the_single_build(built, model, docs, tmp_path, capsys) -> None:
    corpus = str(built.parent / "corpus.jsonl")
    for part in ("1/2", "2/2"):
        manifest = build_index(model, corpus, tmp_path / part.replace("/", "of"), IndexSettings(shard_size=3),
                               part=part)
        assert manifest.sources[0].part == part
    assert doc_ids(tmp_path / "1of2") == [d["_id"] for d in docs[0::2]]
    assert doc_ids(tmp_path / "2of2") == [d["_id"] for d in docs[1::2]]
    capsys.readouterr()
    assert cli("merge", "--index-dir", tmp_path / "merged", tmp_path / "1of2", tmp_path / "2of2") == 0
    merged = tmp_path / "merged"
    passages = manifest_json(merged)["counts"]["passages"]
    assert passages > 10
    assert capsys.readouterr().out == f"{merged}: 10 documents, {passages} passages from 2 parts\n"
    assert doc_ids(merged) == [d["_id"] for d in docs[0::2] + docs[1::2]]
    single = final_vectors(built)
    for doc_id, vector in final_vectors(merged).items():
        np.testing.assert_allclose(vector, single[doc_id], atol=1e-6)
    m = manifest_json(merged)
    assert [s["part"] for s in m["sources"]] == ["1/2", "2/2"] and m["finalized"] is True
    assert m["model"] == manifest_json(built)["model"]
    assert {r["id"]: r["text"] for r in records(merged)} == {d["_id"]: d["text"] for d in docs}


def test_merge_refuses_parts_of_another_model_or_settings(model, model_dir, tiny_bert, tiny_roberta, tmp_path,
                                                         capsys) -> None:
    corpus = str(write_jsonl(tmp_path / "corpus.jsonl", make_docs(4)))
    build_index(model, corpus, tmp_path / "a", IndexSettings(shard_size=3), part="1/2")
    chunker = save_model(tiny_bert, tmp_path / "m50", chunker_config(50))
    others = {
        "chunker": (GraphDocEncoder.from_pretrained(str(chunker), device="cpu"), IndexSettings()),
        "roberta": (GraphDocEncoder.from_pretrained(str(tiny_roberta), config=MODEL_CONFIG, device="cpu"),
                    IndexSettings()),
        "hnsw": (model, IndexSettings(faiss_factory="HNSW32")),
    }
    for name, (other, settings) in others.items():
        build_index(other, corpus, tmp_path / name, settings, part="2/2")
    with pytest.raises(IndexMismatchError) as info:
        merge_indexes(tmp_path / "out", [tmp_path / "a", tmp_path / "chunker"])
    assert str(info.value) == (f"cannot merge {tmp_path / 'chunker'}: it was built with chunker.max_words=50, "
                               f"{tmp_path / 'a'} with chunker.max_words=12")
    with pytest.raises(IndexMismatchError, match=r"it was built with model=.*roberta.* \(weights [0-9a-f]{12}\), "
                                                 r".*/a with model=.*bert.* \(weights [0-9a-f]{12}\)$"):
        merge_indexes(tmp_path / "out", [tmp_path / "a", tmp_path / "roberta"])
    capsys.readouterr()
    assert cli("merge", "--index-dir", tmp_path / "out", tmp_path / "a", tmp_path / "hnsw") == 1
    assert error_line(capsys, "merge").endswith(f"cannot merge {tmp_path / 'hnsw'}: it has faiss_factory='HNSW32', "
                                                 f"{tmp_path / 'a'} faiss_factory='Flat'")
    # a part as graphdoc built it before the terms setting: bm25s terms; the command line builds one to match
    assert cli("index", "--corpus", corpus, "--index-dir", tmp_path / "terms", "--model", model_dir,
               "--bm25-terms", "bm25s", "--shard", "2/2") == 0
    with pytest.raises(GraphDocError) as info:
        merge_indexes(tmp_path / "out", [tmp_path / "a", tmp_path / "terms"])  # the setting named, not "bm25"
    assert str(info.value) == (f"cannot merge {tmp_path / 'terms'}: it has bm25.terms='bm25s', {tmp_path / 'a'} "
                               f"bm25.terms='unicode' ({tmp_path / 'terms'} was built before graphdoc had this "
                               f"setting: build the other parts with graphdoc index --bm25-terms bm25s, or index "
                               f"{tmp_path / 'terms'}'s corpus again)")
    build_index(model, corpus, tmp_path / "a-old", IndexSettings(shard_size=3, bm25=BM25Config(terms="bm25s")),
                part="1/2")
    merge_indexes(tmp_path / "merged", [tmp_path / "a-old", tmp_path / "terms"])
    assert Manifest.load(tmp_path / "merged").bm25["terms"] == "bm25s"
    assert not (tmp_path / "out").exists()


def test_merge_refuses_duplicate_ids_unless_told_to_replace(model, tmp_path, capsys) -> None:
    first = make_docs(5)
    second = make_docs(4, seed=1, start=3)  # d003 and d004 again, with other texts
    for name, docs in (("a", first), ("b", second)):
        build_index(model, str(write_jsonl(tmp_path / f"{name}.jsonl", docs)), tmp_path / name,
                    IndexSettings(shard_size=3))
    capsys.readouterr()
    assert cli("merge", "--index-dir", tmp_path / "out", tmp_path / "a", tmp_path / "b") == 1
    assert "document id 'd003' is in both" in error_line(capsys, "merge")
    assert not (tmp_path / "out").exists()

    manifest = merge_indexes(tmp_path / "out", [tmp_path / "a", tmp_path / "b"], on_duplicate="replace")
    assert manifest.counts["documents"] == 7 and manifest.counts["replaced"] == 2
    assert doc_ids(tmp_path / "out") == ["d000", "d001", "d002", "d003", "d004", "d005", "d006"]
    assert {r["id"]: r["text"] for r in records(tmp_path / "out")} == \
        {d["_id"]: d["text"] for d in first[:3] + second}
    assert_vectors_match(tmp_path / "out", model, first[:3] + second)


def test_merge_refuses_an_incomplete_part(built, tmp_path) -> None:
    for position in (0, 1):
        parts = [copy_index(built, tmp_path / f"{position}a"), copy_index(built, tmp_path / f"{position}b")]
        m = manifest_json(parts[position])
        m["sources"][0]["complete"] = False
        (parts[position] / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
        with pytest.raises(GraphDocError) as refused:
            merge_indexes(tmp_path / f"{position}out", parts, on_duplicate="replace")
        source = m["sources"][0]
        assert str(refused.value) == (
            f"cannot merge {parts[position]}: {source['corpus']} part {source['part']} is incomplete "
            f"({source['documents_read']} documents read): rerun its graphdoc index command to finish it, or keep "
            f"what it read: graphdoc index --index-dir {parts[position]} --stop-reading {source['corpus']} "
            "(stop_reading in Python)")


def test_merge_takes_the_parts_of_one_split_of_one_version(model, tmp_path, caplog, capsys) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", make_docs(6))
    settings = IndexSettings(shard_size=3)
    for part in ("1/2", "2/3"):
        build_index(model, str(corpus), tmp_path / part.replace("/", "of"), settings, part=part)
    with pytest.raises(GraphDocError) as info:
        merge_indexes(tmp_path / "out", [tmp_path / "1of2", tmp_path / "2of3"])
    assert str(info.value) == (f"cannot merge {tmp_path / '2of3'}: it holds {corpus} part 2/3, {tmp_path / '1of2'} "
                               "part 1/2: parts of different splits (part, --shard) overlap and leave documents out")
    write_jsonl(corpus, make_docs(8))  # grown before its second part was indexed
    build_index(model, str(corpus), tmp_path / "2of2", settings, part="2/2")
    with pytest.raises(GraphDocError) as info:
        merge_indexes(tmp_path / "out", [tmp_path / "1of2", tmp_path / "2of2"])
    assert str(info.value) == (f"cannot merge {tmp_path / '2of2'}: {corpus} had 8 documents when its part 2/2 was "
                               f"indexed, 6 when {tmp_path / '1of2'}'s part 1/2 was: the parts come from different "
                               "versions of it")
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(make_docs(1)[0]) + "\n{broken\n", encoding="utf-8")
    with pytest.raises(GraphDocError, match="broken.jsonl"):
        build_index(model, str(broken), tmp_path / "stopped", settings)
    with pytest.raises(GraphDocError) as info:
        merge_indexes(tmp_path / "out", [tmp_path / "stopped", tmp_path / "1of2"])
    assert str(info.value) == (f"cannot merge {tmp_path / 'stopped'}: nothing was indexed into it (the build_index "
                               "call or graphdoc index command that made it stopped before the first shard was "
                               "saved): rerun it")
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        assert merge_indexes(tmp_path / "out", [tmp_path / "1of2"]).counts["documents"] == 3
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"the parts hold {corpus} without its part 2/2: the merged index lacks those documents"]
    assert cli("merge", "--index-dir", tmp_path / "out2", tmp_path / "1of2", tmp_path / "nothere") == 1
    assert error_line(capsys, "merge") == f"graphdoc merge: error: index folder not found: {tmp_path / 'nothere'}"
    assert not (tmp_path / "out2").exists()


def test_merge_warns_that_it_takes_the_first_parts_search_settings(built, model, tmp_path, caplog) -> None:
    corpus = str(built.parent / "corpus.jsonl")
    for part in ("1/2", "2/2"):
        build_index(model, corpus, tmp_path / part.replace("/", "of"), IndexSettings(shard_size=3), part=part)
    m = manifest_json(tmp_path / "2of2")
    m["fusion"]["alpha"] = 0.3
    (tmp_path / "2of2" / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        merged = merge_indexes(tmp_path / "out", [tmp_path / "1of2", tmp_path / "2of2"])
    assert merged.fusion["alpha"] == 0.6
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"{tmp_path / '2of2'}'s search settings (fusion) differ from {tmp_path / '1of2'}'s: the merged index takes "
        f"{tmp_path / '1of2'}'s"]


def test_indexing_a_corpus_into_the_merge_of_its_parts_adds_nothing(built, model, tmp_path, monkeypatch,
                                                                    caplog) -> None:
    corpus = str(built.parent / "corpus.jsonl")
    for part in ("1/2", "2/2"):
        build_index(model, corpus, tmp_path / part.replace("/", "of"), IndexSettings(shard_size=3), part=part)
    merged = tmp_path / "merged"
    merge_indexes(merged, [tmp_path / "1of2", tmp_path / "2of2"])
    before = doc_ids(merged)
    monkeypatch.setattr(progress, "read_corpus", lambda *a, **k: pytest.fail("the corpus was read again"))
    for part in ("1/1", "2/2", "1/3"):
        with caplog.at_level(logging.INFO, logger="graphdoc"):
            assert build_index(model, corpus, merged, part=part).counts["documents"] == 10
    assert doc_ids(merged) == before
    assert caplog.messages.count(f"{corpus} (parts 1/2, 2/2) is already in the index") == 2
    assert caplog.messages.count(f"{corpus} (part 2/2) is already in the index") == 1


def test_a_part_is_kept_as_i_slash_n_however_it_was_typed(built, model, tmp_path) -> None:
    corpus = str(built.parent / "corpus.jsonl")
    build_index(model, corpus, tmp_path / "a", IndexSettings(shard_size=3), part=" 01/2")
    assert [s["part"] for s in manifest_json(tmp_path / "a")["sources"]] == ["1/2"]
    assert build_index(model, corpus, tmp_path / "a", part="1/2").counts["documents"] == 5  # the same part: done
    manifest = manifest_json(tmp_path / "a")  # an index written before parts were kept as I/N
    manifest["sources"][0]["part"] = " 01/2"
    (tmp_path / "a" / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert build_index(model, corpus, tmp_path / "a", part="1/2").counts["documents"] == 5


def test_parts_indexed_at_different_paths_merge_as_one_corpus(built, model, tmp_path, monkeypatch, caplog) -> None:
    corpus = built.parent / "corpus.jsonl"
    for part in ("1/2", "2/2"):  # one machine each, the corpus copied to a folder of its own on each
        (tmp_path / f"machine{part[0]}").mkdir()
        copy = shutil.copy(corpus, tmp_path / f"machine{part[0]}" / "corpus.jsonl")
        build_index(model, str(copy), tmp_path / part.replace("/", "of"), IndexSettings(shard_size=3), part=part)
    merged = tmp_path / "merged"
    with caplog.at_level(logging.INFO, logger="graphdoc"):
        merge_indexes(merged, [tmp_path / "1of2", tmp_path / "2of2"])
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # no "without its part 2/2"
    first = str((tmp_path / "machine1" / "corpus.jsonl").resolve())
    assert [(s["corpus"], s["part"]) for s in manifest_json(merged)["sources"]] == [(first, "1/2"), (first, "2/2")]
    monkeypatch.setattr(progress, "read_corpus", lambda *a, **k: pytest.fail("the corpus was read again"))
    assert build_index(model, first, merged).counts["documents"] == 10  # whole: nothing to add


@pytest.mark.parametrize("parts, whole", [
    ({"1/1": True}, ["1/1"]),
    ({"1/2": True}, []),
    ({"2/2": True, "1/2": True}, ["1/2", "2/2"]),
    ({"1/3": True, "2/3": False, "3/3": True}, []),
    ({"1/2": True, "1/3": True, "2/3": True, "3/3": True}, ["1/3", "2/3", "3/3"]),
])
def test_manifest_knows_when_the_parts_of_a_corpus_make_it_whole(parts, whole) -> None:
    manifest = Manifest(model={}, dimension=2, metric="cosine", faiss_factory="Flat",
                        sources=[SourceProgress("c", part, 10, complete) for part, complete in parts.items()])
    manifest.sources.append(SourceProgress("other", "2/2", 10, True))
    assert [s.part for s in manifest.whole("c")] == whole


# ------------------------------------------------------------------ adding corpora
def _add(index: Path, model, docs: list[dict], tmp_path: Path, **settings):
    corpus = write_jsonl(tmp_path / f"add-{len(list(tmp_path.glob('add-*')))}.jsonl", docs)
    return build_index(model, str(corpus), index, IndexSettings(shard_size=3, **settings))


def test_adding_a_corpus_appends_its_documents(built, model, docs, tmp_path) -> None:
    index = copy_index(built, tmp_path)
    more = make_docs(4, seed=2, start=10)
    manifest = _add(index, model, more, tmp_path)
    assert doc_ids(index) == [d["_id"] for d in docs + more]
    assert manifest.shards == ["00000", "00001", "00002", "00003", "00004", "00005"]
    assert [s.documents_read for s in manifest.sources] == [10, 4]
    assert_vectors_match(index, model, docs + more)
    searcher = Searcher(index, model=model)
    assert list(searcher.batch_search(["walrus"], mode="bm25")["0"]) == ["d012"]


CLASHING = [{"_id": "d100", "text": "Fresh words here."}, {"_id": "d101", "text": "More fresh words."},
            {"_id": "d103", "text": "Yet more fresh words."},
            {"_id": "d003", "title": "New three", "text": "A replacement text about a capybara."},
            {"_id": "d102", "text": "The last fresh words."}]


def test_an_id_already_indexed_is_refused_by_default_and_the_index_still_works(built, model, docs, tmp_path,
                                                                               capsys) -> None:
    index = copy_index(built, tmp_path)
    corpus = write_jsonl(tmp_path / "clash.jsonl", CLASHING)
    capsys.readouterr()
    assert cli("index", "--corpus", corpus, "--index-dir", index, "--model", manifest_json(index)["model"]["path"],
               "--shard-size", 3) == 1
    assert error_line(capsys, "index") == ("graphdoc index: error: document id 'd003' is already in the index; "
                                           "set on_duplicate (--on-duplicate) to replace or skip")
    searcher = Searcher(index, model=model)
    assert searcher.doc_ids == [d["_id"] for d in docs]
    assert list(searcher.batch_search(["okapi"], mode="bm25")["0"]) == ["d003"]
    assert len(searcher.batch_search(["graph"], k=20, mode="hybrid")["0"]) == 10


def test_on_duplicate_skip_keeps_the_old_document(built, model, docs, tmp_path) -> None:
    index = copy_index(built, tmp_path)
    manifest = _add(index, model, CLASHING, tmp_path, on_duplicate="skip")
    assert doc_ids(index) == [d["_id"] for d in docs] + ["d100", "d101", "d103", "d102"]
    assert manifest.counts["replaced"] == 0
    assert records(index)[3]["text"] == docs[3]["text"]
    assert_vectors_match(index, model, docs + [CLASHING[i] for i in (0, 1, 2, 4)])


def test_on_duplicate_replace_swaps_text_vector_and_passages(built, model, docs, tmp_path) -> None:
    index = copy_index(built, tmp_path)
    old = final_vectors(index)["d003"]
    manifest = _add(index, model, CLASHING, tmp_path, on_duplicate="replace")
    # the replaced document leaves its old row and takes the row of its new version
    expected = [d for d in docs if d["_id"] != "d003"] + CLASHING
    assert doc_ids(index) == [d["_id"] for d in expected]
    assert (manifest.counts["documents"], manifest.counts["replaced"]) == (14, 1)
    stored = {r["id"]: r for r in records(index)}
    assert [r["id"] for r in records(index)] == doc_ids(index)
    assert (stored["d003"]["title"], stored["d003"]["text"]) == ("New three", CLASHING[3]["text"])
    assert_vectors_match(index, model, expected)
    assert not np.allclose(final_vectors(index)["d003"], old, atol=1e-3)
    ptr = np.load(index / "final" / "passage_ptr.npy")
    assert np.diff(ptr).tolist() == [len(stored[i]["passages"]) for i in doc_ids(index)]
    assert len(searched_vectors(index, passages=True)) == ptr[-1] == manifest.counts["passages"]
    searcher = Searcher(index, model=model)
    assert list(searcher.batch_search(["capybara"], mode="bm25")["0"]) == ["d003"]
    assert searcher.batch_search(["okapi"], mode="bm25")["0"] == {}  # the old text is gone


# ------------------------------------------------------------------ mismatches
def test_opening_with_another_model_is_refused(built, tiny_roberta) -> None:
    roberta = GraphDocEncoder.from_pretrained(str(tiny_roberta), config=MODEL_CONFIG, device="cpu")
    with pytest.raises(IndexMismatchError, match=r"was built with model .* \(weights [0-9a-f]{12}\), not"):
        Searcher(built, model=roberta)
    with pytest.raises(IndexMismatchError):
        build_index(roberta, str(built.parent / "corpus.jsonl"), built)


def test_a_model_retrained_in_place_is_named_as_such(tiny_bert, docs, tmp_path) -> None:
    folder = save_model(tiny_bert, tmp_path / "model")
    model = GraphDocEncoder.from_pretrained(str(folder), device="cpu")
    corpus = write_jsonl(tmp_path / "corpus.jsonl", docs[:3])
    build_index(model, str(corpus), tmp_path / "index")
    with torch.no_grad():
        next(model.graph.parameters()).add_(0.5)
    model.save_pretrained(folder)  # the same folder, other weights
    with pytest.raises(IndexMismatchError, match=rf"^index {tmp_path / 'index'} was built with model "
                                                 rf"'{folder}' when its weights were [0-9a-f]{{12}}; they are now "
                                                 r"[0-9a-f]{12}: rebuild the index, or pass the model it was built "
                                                 r"with \(--model\)$"):
        Searcher(tmp_path / "index", model=GraphDocEncoder.from_pretrained(str(folder), device="cpu"))


def test_opening_with_another_chunker_setting_names_it(built, model_dir, tiny_bert) -> None:
    other = GraphDocEncoder.from_pretrained(str(tiny_bert), config=chunker_config(50), device="cpu")
    assert model_fingerprint(other) == manifest_json(built)["model"]["fingerprint"]  # the same weights
    with pytest.raises(IndexMismatchError) as info:
        Searcher(built, model=other)
    assert str(info.value) == (f"index {built} was built with chunker.max_words=12, the model has "
                               f"chunker.max_words=50 (the index's model is '{model_dir}', this one '{tiny_bert}')")


def test_a_setting_mismatch_names_both_models_when_they_differ(tiny_bert, docs, tmp_path) -> None:
    saved = save_model(tiny_bert, tmp_path / "m50", chunker_config(50))
    build_index(GraphDocEncoder.from_pretrained(str(saved), device="cpu"), str(write_jsonl(tmp_path / "c.jsonl",
                                                                                          docs[:2])), tmp_path / "i")
    with pytest.raises(IndexMismatchError) as info:
        Searcher(tmp_path / "i", model=GraphDocEncoder.from_pretrained(str(tiny_bert), config=MODEL_CONFIG,
                                                                       device="cpu"))
    assert str(info.value) == (f"index {tmp_path / 'i'} was built with chunker.max_words=50, the model has "
                               f"chunker.max_words=12 (the index's model is '{saved}', this one '{tiny_bert}')")


def test_adding_with_another_faiss_factory_is_refused(built, tmp_path, capsys) -> None:
    index = copy_index(built, tmp_path)
    before = (index / "manifest.json").read_text(encoding="utf-8")
    capsys.readouterr()
    assert cli("index", "--corpus", write_jsonl(tmp_path / "more.jsonl", make_docs(2, start=20)), "--index-dir", index,
               "--model", manifest_json(index)["model"]["path"], "--faiss-factory", "HNSW32") == 1
    assert error_line(capsys, "index") == (f"graphdoc index: error: index {index} has faiss_factory='Flat'; "
                                           "cannot change it to 'HNSW32' (build a new index)")
    assert (index / "manifest.json").read_text(encoding="utf-8") == before


def test_passage_setting_of_an_existing_index_is_kept(built, model, docs, tmp_path) -> None:
    index = copy_index(built, tmp_path)
    with pytest.raises(GraphDocError, match="keeps passage vectors"):
        _add(index, model, make_docs(2, start=20), tmp_path, store_passages=False)
    plain = tmp_path / "plain"
    build_index(model, str(built.parent / "corpus.jsonl"), plain, IndexSettings(shard_size=3, store_passages=False))
    _add(plain, model, make_docs(2, start=20), tmp_path)  # the default (passages) gives way to the index's
    assert manifest_json(plain)["counts"]["passages"] == 0
    assert not {"passage_vectors.npy", "passages.faiss"} & {p.name for p in (plain / "final").iterdir()}
    assert_vectors_match(plain, model, docs + make_docs(2, start=20))


def test_bad_settings_are_refused_before_anything_is_written(model, tmp_path) -> None:
    corpus = str(write_jsonl(tmp_path / "corpus.jsonl", make_docs(3)))
    with pytest.raises(GraphDocError, match="bad FAISS index_factory string 'Bogus'"):
        build_index(model, corpus, tmp_path / "index", IndexSettings(faiss_factory="Bogus"))
    assert not (tmp_path / "index").exists()
    with pytest.raises(GraphDocError, match="unknown metric 'l2'; valid: cosine, ip"):
        build_index(model, corpus, tmp_path / "index", IndexSettings(metric="l2"))
    with pytest.raises(GraphDocError, match="on_duplicate must be one of error, skip, replace; got 'keep'"):
        IndexSettings(on_duplicate="keep")
    with pytest.raises(GraphDocError, match="shard_size must be at least 1"):
        IndexSettings(shard_size=0)
    manifest = build_index(model, corpus, tmp_path / "index", IndexSettings(faiss_factory="HNSW32"))
    assert manifest.counts["documents"] == 3


def test_an_index_whose_model_folder_moved_says_so_in_one_line(tiny_bert, tmp_path, capsys):
    model = save_model(tiny_bert, tmp_path / "model")
    corpus = write_jsonl(tmp_path / "c.jsonl", make_docs(4))
    assert cli("index", "--corpus", corpus, "--index-dir", tmp_path / "index", "--model", model) == 0
    moved = model.rename(tmp_path / "moved")
    capsys.readouterr()
    assert cli("search", "--index-dir", tmp_path / "index", "alpha", "--mode", "dense") == 1
    assert error_line(capsys, "search") == (
        f"graphdoc search: error: the index's model folder {model} is gone (moved or deleted): pass it from its new "
        "place with --model (its weights are checked against the index; an index run with it records the new "
        "place), or search with --mode bm25")
    assert cli("search", "--index-dir", tmp_path / "index", "alpha", "--mode", "bm25") == 0
    capsys.readouterr()
    assert cli("index", "--corpus", corpus, "--index-dir", tmp_path / "index") == 1  # (no BM25 way out: it encodes)
    assert error_line(capsys, "index") == (
        f"graphdoc index: error: the index's model folder {model} is gone (moved or deleted): pass it from its new "
        "place with --model (its weights are checked against the index; an index run with it records the new "
        "place)")
    assert cli("search", "--index-dir", tmp_path / "index", "alpha", "--mode", "dense", "-k", "4", "--model",
               moved) == 0
    assert len(capsys.readouterr().out.splitlines()) == 8
    assert manifest_json(tmp_path / "index")["model"]["path"] == str(model)  # a search writes nothing
    assert cli("index", "--corpus", corpus, "--index-dir", tmp_path / "index", "--model", moved) == 0
    assert manifest_json(tmp_path / "index")["model"]["path"] == str(moved)  # recorded: searches find it there
    capsys.readouterr()
    assert cli("search", "--index-dir", tmp_path / "index", "alpha", "--mode", "dense", "-k", "4") == 0
    assert len(capsys.readouterr().out.splitlines()) == 8


@pytest.mark.parametrize("settings", [("--backbone", "flat"), ("--config", "section-graph"),
                                      ("--backbone", "flat", "--flat-document", "mean")])
def test_search_model_of_a_plain_encoder_index_is_loaded_with_the_index_settings(tiny_bert, tmp_path, capsys,
                                                                                  settings):
    """--model named a moved plain encoder folder, loaded as a default graph model: refused as another model."""
    encoder = Path(shutil.copytree(tiny_bert, tmp_path / "encoder"))
    corpus = write_jsonl(tmp_path / "c.jsonl", make_docs(4))
    assert cli("index", "--corpus", corpus, "--index-dir", tmp_path / "index", "--model", encoder, *settings) == 0
    capsys.readouterr()
    search = ["search", "--index-dir", tmp_path / "index", "alpha", "--mode", "dense", "-k", "4"]
    assert cli(*search) == 0
    before = capsys.readouterr().out
    moved = encoder.rename(tmp_path / "moved")
    assert cli(*search) == 1
    assert "is gone (moved or deleted): pass it from its new place with --model" in error_line(capsys, "search")
    assert cli(*search, "--model", moved) == 0
    assert capsys.readouterr().out == before
    assert cli(*search, "--model", tmp_path / "nowhere") == 1
    assert error_line(capsys, "search") == f"graphdoc search: error: model folder not found: {tmp_path / 'nowhere'}"
    assert cli(*search, "--model", " ") == 1
    assert error_line(capsys, "search") == ("graphdoc search: error: the model is an empty name: give a model folder "
                                            "or a Hugging Face id")


def test_a_corpus_without_a_word_bm25_indexes_is_searched_densely(model, tmp_path) -> None:
    """The build stopped at BM25 with shards written, and every rerun stopped there again."""
    from graphdoc.retrieval.searcher import Searcher

    docs = [{"_id": "a", "text": "!!! ??? ..."}, {"_id": "b", "text": "--- *** ;;;"}]
    build_index(model, str(write_jsonl(tmp_path / "c.jsonl", docs)), tmp_path / "index", IndexSettings())
    with Searcher(tmp_path / "index", model=model) as searcher:
        assert sorted(searcher.batch_search(["symbols"], mode="dense")["0"]) == ["a", "b"]
        assert searcher.batch_search(["symbols"], mode="bm25")["0"] == {}


def test_an_index_in_a_folder_whose_name_is_not_utf_8_builds_and_searches(model, tmp_path) -> None:
    """FAISS takes only UTF-8 file names: the build failed with a TypeError traceback and left the index broken."""
    from graphdoc.retrieval.searcher import Searcher

    index = tmp_path / os.fsdecode(b"idx-\xff")
    docs = make_docs(4)
    build_index(model, str(write_jsonl(tmp_path / "c.jsonl", docs)), index, IndexSettings())
    searcher = Searcher(index, model=model)
    assert sorted(searcher.batch_search({"q": "alpha"}, k=4, mode="dense")["q"]) == sorted(d["_id"] for d in docs)
    assert_vectors_match(index, model, docs)
