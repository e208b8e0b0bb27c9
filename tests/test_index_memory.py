"""Indexing documents held in memory: a list of dicts or of Documents, named in the manifest by a hash of its
records, so that the same list resumes or adds nothing and another one adds its documents; bad records, a
generator, renamed fields, parts and their merge."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from _retrieval_helpers import (
    cli,
    doc_ids,
    error_line,
    kill_on_shard,
    make_docs,
    manifest_json,
    records,
    searched_vectors,
    write_jsonl,
)

from graphdoc.corpus import Fields, MemoryCorpus
from graphdoc.documents import Document
from graphdoc.errors import GraphDocError, InputError
from graphdoc.retrieval import delete_documents
from graphdoc.retrieval.builder import IndexSettings, build_index
from graphdoc.retrieval.merge import merge_indexes
from graphdoc.retrieval.searcher import Searcher

pytestmark = pytest.mark.usefixtures("restore_cli_state")

SHARDS_OF_3 = IndexSettings(shard_size=3)
WHERE = "document {} of the list (counting from 0)"


def key_of(docs: list[dict]) -> str:
    """The manifest's name of ``docs``: the SHA-256 of each record's canonical JSON line, in order."""
    lines = "".join(json.dumps(d, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n" for d in docs)
    return "memory:sha256:" + hashlib.sha256(lines.encode("utf-8")).hexdigest()[:16]


def vectors(index_dir: Path) -> dict[str, np.ndarray]:
    return dict(zip(doc_ids(index_dir), searched_vectors(index_dir)))


def hits(index_dir: Path, model, mode: str) -> list[tuple[str, float]]:
    with Searcher(index_dir, model=model) as searcher:
        return [(h.doc_id, h.score) for h in searcher.search("graph attention zebra", k=10, mode=mode)]


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    return make_docs(10)


@pytest.fixture(scope="module")
def from_file(model, docs, tmp_path_factory) -> Path:
    """The documents indexed from a JSON lines file, to compare with."""
    folder = tmp_path_factory.mktemp("from-file")
    build_index(model, write_jsonl(folder / "corpus.jsonl", docs), folder / "index", SHARDS_OF_3)
    return folder / "index"


@pytest.fixture(scope="module")
def from_list(model, docs, tmp_path_factory) -> Path:
    """The same documents indexed from the list, in shards of three."""
    folder = tmp_path_factory.mktemp("from-list") / "index"
    build_index(model, docs, folder, SHARDS_OF_3)
    return folder


def copy_index(index_dir: Path, tmp_path: Path, name: str = "index") -> Path:
    return Path(shutil.copytree(index_dir, tmp_path / name))


# ------------------------------------------------------------------ indexing a list
def test_a_list_of_dicts_is_indexed_and_searched_as_its_jsonl_file(from_list, from_file, model, docs) -> None:
    assert doc_ids(from_list) == doc_ids(from_file) == [d["_id"] for d in docs]
    for mode in ("hybrid", "dense", "bm25"):
        assert hits(from_list, model, mode) == hits(from_file, model, mode)
    assert records(from_list) == records(from_file)
    source = manifest_json(from_list)["sources"]
    assert source == [{"corpus": key_of(docs), "part": "1/1", "documents_read": 10, "complete": True, "state": None,
                       "shards": ["00000", "00001", "00002", "00003"], "precision": "fp32"}]
    assert MemoryCorpus(tuple(dict(d) for d in docs)).key == key_of(docs)  # a copy, a tuple: the same documents


def test_a_list_of_documents_is_indexed_as_the_dicts_are(from_list, model, docs, tmp_path) -> None:
    documents = [Document(id=d["_id"], text=d["text"], title=d["title"]) for d in docs]
    build_index(model, documents, tmp_path / "index", SHARDS_OF_3, show_progress_bar=True)
    assert doc_ids(tmp_path / "index") == doc_ids(from_list)
    for doc_id, vector in vectors(tmp_path / "index").items():
        np.testing.assert_allclose(vector, vectors(from_list)[doc_id], atol=1e-6)
    assert records(tmp_path / "index") == records(from_list)
    key = manifest_json(tmp_path / "index")["sources"][0]["corpus"]
    assert key.startswith("memory:sha256:") and key != key_of(docs)


def test_graphdoc_info_lists_the_list_by_its_key(from_list, docs, capsys) -> None:
    assert cli("info", from_list) == 0
    assert f"    {key_of(docs)}: 10 documents read, complete, encoded at fp32\n" in capsys.readouterr().out


# ------------------------------------------------------------------ resuming and adding
def test_a_build_stopped_part_way_resumes_with_the_same_documents(model, docs, tmp_path, monkeypatch) -> None:
    index = tmp_path / "index"
    kill_on_shard(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        build_index(model, docs, index, SHARDS_OF_3)
    monkeypatch.undo()
    source = manifest_json(index)["sources"][0]
    assert (source["corpus"], source["documents_read"], source["complete"]) == (key_of(docs), 6, False)
    manifest = build_index(model, [dict(d) for d in docs], index, SHARDS_OF_3)  # equal records: the same corpus
    assert manifest.counts["documents"] == 10 and len(manifest.sources) == 1
    assert doc_ids(index) == [d["_id"] for d in docs]
    assert manifest_json(index)["shards"] == ["00000", "00001", "00002", "00003"]


def test_the_same_list_again_adds_nothing(from_list, model, docs, tmp_path, caplog) -> None:
    index = copy_index(from_list, tmp_path)
    before = (index / "final" / "dense.faiss").read_bytes()
    with caplog.at_level(logging.INFO, logger="graphdoc"):
        manifest = build_index(model, docs, index)
    assert manifest.counts["documents"] == 10 and manifest.shards == ["00000", "00001", "00002", "00003"]
    assert (index / "final" / "dense.faiss").read_bytes() == before
    assert f"the list {key_of(docs)} (part 1/1) is already in the index" in caplog.messages


def test_another_list_adds_its_documents(from_list, model, docs, tmp_path) -> None:
    index = copy_index(from_list, tmp_path)
    more = make_docs(4, seed=1, start=10)
    manifest = build_index(model, more, index)
    assert manifest.counts["documents"] == 14
    assert [s.corpus for s in manifest.sources] == [key_of(docs), key_of(more)]
    assert doc_ids(index) == [d["_id"] for d in docs + more]


def test_a_deleted_document_stays_deleted_when_its_list_is_given_again(from_list, model, docs, tmp_path) -> None:
    index = copy_index(from_list, tmp_path)
    delete_documents(index, ["d003"])
    assert build_index(model, docs, index).counts["documents"] == 9
    assert "d003" not in doc_ids(index)


@pytest.mark.parametrize("policy", ["error", "skip", "replace"])
def test_an_id_already_in_the_index(from_list, model, tmp_path, policy) -> None:
    index = copy_index(from_list, tmp_path)
    changed = [{"_id": "d004", "title": "New", "text": "A new text about walrus."}, *make_docs(2, start=10)]
    settings = IndexSettings(on_duplicate=policy)
    if policy == "error":
        with pytest.raises(GraphDocError, match=r"^document id 'd004' is already in the index; set on_duplicate "
                                                r"\(--on-duplicate\) to replace or skip$"):
            build_index(model, changed, index, settings)
        return
    assert build_index(model, changed, index, settings).counts["documents"] == 12
    title = {r["id"]: r["title"] for r in records(index)}["d004"]
    assert title == ("Title 4" if policy == "skip" else "New")


# ------------------------------------------------------------------ bad input, refused before the folder is touched
SELF_HOLDING = {"_id": "a", "text": "x"}
SELF_HOLDING["meta"] = SELF_HOLDING


@pytest.mark.parametrize("bad, message", [
    ({"title": "no id", "text": "x"}, f"{WHERE.format(1)}: record has no id field (expected one of _id, id, docid, "
                                      "doc_id)"),
    ({"_id": "a", "title": "t"}, f"{WHERE.format(1)}: document 'a' has no text field (expected one of text, "
                                 "contents, body)"),
    ({"_id": "a", "text": 5}, f"{WHERE.format(1)}: document 'a': text must be a string, got int"),
    ({"_id": 1.5, "text": "x"}, f"{WHERE.format(1)}: id field '_id' must be a string or an integer, got 1.5"),
    ({"_id": "a\nb", "text": "x"}, f"{WHERE.format(1)}: document id 'a\\nb' has a line break (ids are stored one "
                                   "per line)"),
    ({"_id": "d000", "text": "x"}, f"{WHERE.format(1)}: duplicate document id 'd000' (first seen at document 0)"),
    (Document(id=" ", text="x"), f"{WHERE.format(1)}: document id ' ' is only whitespace"),
    ("a text", f"{WHERE.format(1)} is a str, not a dict or a graphdoc.Document (a string has no id: give "
               '{"id": ..., "text": ...})'),
    (None, f"{WHERE.format(1)} is a NoneType, not a dict or a graphdoc.Document"),
    (SELF_HOLDING, f"{WHERE.format(1)} is not a JSON-style record (it holds itself)"),
])
def test_a_bad_record_is_named_by_its_position(model, tmp_path, bad, message) -> None:
    with pytest.raises(InputError) as info:
        build_index(model, [make_docs(1)[0], bad, *make_docs(2, start=5)], tmp_path / "index")
    assert str(info.value).startswith(message) and (str(info.value) == message or message.endswith("("))
    assert not (tmp_path / "index").exists()


def test_a_bad_record_leaves_an_existing_index_untouched(from_list, model, tmp_path) -> None:
    index = copy_index(from_list, tmp_path)
    before = (index / "manifest.json").read_bytes()
    with pytest.raises(InputError, match=r"^document 2 of the list \(counting from 0\): duplicate document id 'x' "
                                         r"\(first seen at document 0\)$"):
        build_index(model, [{"_id": "x", "text": "a"}, {"_id": "y", "text": "b"}, {"_id": "x", "text": "c"}], index)
    assert (index / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in index.iterdir()) == sorted(p.name for p in from_list.iterdir())


def test_an_empty_list_or_one_of_empty_documents(model, tmp_path) -> None:
    with pytest.raises(InputError, match=r"^the list of documents is empty: there is nothing to read$"):
        build_index(model, [], tmp_path / "index")
    empty = [{"_id": "a", "text": " "}, {"_id": "b", "title": "", "text": ""}]
    with pytest.raises(InputError) as info:
        build_index(model, empty, tmp_path / "index")
    assert str(info.value) == f"the list {key_of(empty)} holds no documents (2 empty documents skipped)"
    assert not (tmp_path / "index").exists()


@pytest.mark.parametrize("make", [lambda docs: (d for d in docs), iter, lambda docs: map(dict, docs)])
def test_a_generator_is_refused(model, docs, tmp_path, make) -> None:
    corpus = make(docs)
    with pytest.raises(InputError) as info:
        build_index(model, corpus, tmp_path / "index")
    assert str(info.value) == (f"corpus is a {type(corpus).__name__}, which can be read only once, but an index "
                               "build reads its documents more than once (to check them first, to resume): pass a "
                               "list (list(documents)), or write them to a JSON lines file to stream a large corpus")
    assert not (tmp_path / "index").exists()


# ------------------------------------------------------------------ fields, parts
def test_renamed_fields_are_read_and_recorded(from_list, model, docs, tmp_path) -> None:
    renamed = [{"paper_id": d["_id"], "headline": d["title"], "abstract": d["text"]} for d in docs]
    fields = Fields(id="paper_id", text="abstract", title="headline")
    index = tmp_path / "index"
    build_index(model, renamed, index, SHARDS_OF_3, fields=fields)
    assert doc_ids(index) == doc_ids(from_list)
    assert [r["text"] for r in records(index)] == [d["text"] for d in docs]
    assert manifest_json(index)["sources"][0]["fields"] == {"id": "paper_id", "text": "abstract", "title": "headline"}
    assert build_index(model, renamed, index).counts["documents"] == 10  # fields=None: the recorded ones
    with pytest.raises(GraphDocError, match=rf"^the list {key_of(renamed)} was read into {index} with id=paper_id, "
                                            r"text=abstract, title=headline, not text=headline: "):
        build_index(model, renamed, index, fields=Fields(text="headline"))
    with pytest.raises(InputError, match=r"^document 0 of the list \(counting from 0\) is a graphdoc.Document: field "
                                         r"names \(fields=\) apply to dict records only$"):
        build_index(model, [Document(id="a", text="x")], tmp_path / "other", fields=fields)
    with pytest.raises(InputError) as info:
        build_index(model, docs, tmp_path / "other", fields=fields)
    assert str(info.value) == f"{WHERE.format(0)}: record has no id field 'paper_id' (the field named for ids)"
    assert not (tmp_path / "other").exists()


def test_parts_of_a_list_merge_into_the_single_build(from_list, model, docs, tmp_path) -> None:
    for part in ("1/2", "2/2"):
        manifest = build_index(model, docs, tmp_path / part.replace("/", "of"), SHARDS_OF_3, part=part)
        assert manifest.counts["documents"] == 5
    merged = tmp_path / "merged"
    manifest = merge_indexes(merged, [tmp_path / "1of2", tmp_path / "2of2"])
    assert manifest.counts["documents"] == 10
    assert [(s.corpus, s.part) for s in manifest.sources] == [(key_of(docs), "1/2"), (key_of(docs), "2/2")]
    assert doc_ids(merged) == [d["_id"] for d in docs[0::2] + docs[1::2]]
    for doc_id, vector in vectors(merged).items():
        np.testing.assert_allclose(vector, vectors(from_list)[doc_id], atol=1e-6)
    assert build_index(model, docs, merged).counts["documents"] == 10  # all its parts are in: nothing to add
    with pytest.raises(GraphDocError, match=rf"^{tmp_path / '1of2'} holds the list {key_of(docs)} read as part 1/2 "
                                            r"\(--shard 1/2\), not with no --shard: "):
        build_index(model, docs, tmp_path / "1of2")


def test_the_key_is_that_of_the_records_as_stored_the_same_in_every_process(tmp_path) -> None:
    """A set's order changed with PYTHONHASHSEED, and a long array's str() elided its middle: keys of str()."""
    import subprocess
    import sys

    script = ("from graphdoc.corpus import MemoryCorpus\n"
              "print(MemoryCorpus([{'_id': 'a', 'text': 'x', 'tags': {'graph', 'retrieval', 'dense', 'sparse'}}]).key)")
    keys = {subprocess.run([sys.executable, "-c", script], env={"PYTHONHASHSEED": seed, "PATH": ""},
                           capture_output=True, text=True, check=True).stdout for seed in ("1", "2", "3")}
    assert len(keys) == 1
    one, other = np.zeros(2000), np.zeros(2000)
    other[1000] = 1.0
    assert MemoryCorpus([{"_id": "a", "text": "x", "v": one}]).key != MemoryCorpus([{"_id": "a", "text": "x",
                                                                                    "v": other}]).key
    assert MemoryCorpus([{"_id": "a", "text": "x", "day": np.datetime64("2020-01-01T00:00", "ns")}]).key == \
        MemoryCorpus([{"_id": "a", "text": "x", "day": "2020-01-01T00:00:00.000000000"}]).key  # a date: its text
    assert MemoryCorpus([{"_id": "a", "text": "x", "n": np.int64(3), "b": np.bool_(True)}]).key == \
        MemoryCorpus([{"_id": "a", "text": "x", "n": 3, "b": True}]).key  # stored the same: one key


def test_numpy_values_are_stored_and_filtered_as_the_values_they_hold(model, tmp_path) -> None:
    docs = [{"_id": "a", "text": "graph attention", "open": np.bool_(True), "year": np.int64(2020),
             "tags": np.array(["x", "y"])},
            {"_id": "b", "text": "graph search", "open": np.bool_(False), "year": np.int64(2021), "tags": {"y"}}]
    build_index(model, docs, tmp_path / "index")
    assert [r["metadata"] for r in records(tmp_path / "index")] == [
        {"open": True, "year": 2020, "tags": ["x", "y"]}, {"open": False, "year": 2021, "tags": ["y"]}]
    with Searcher(tmp_path / "index", model=model) as searcher:
        assert list(searcher.batch_search(["graph"], mode="bm25", filter={"open": True})["0"]) == ["a"]
        assert list(searcher.batch_search(["graph"], mode="bm25", filter={"tags": "y", "year": "2021"})["0"]) == ["b"]


# ------------------------------------------------------------------ graphdoc index --corpus -: JSON lines piped in
def pipe(monkeypatch, data: bytes) -> None:
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_index_reads_json_lines_piped_in_as_documents_in_memory(model_dir, docs, tmp_path, capsys, monkeypatch):
    lines = "".join(json.dumps(d) + "\n" for d in docs).encode("utf-8")
    file = write_jsonl(tmp_path / "corpus.jsonl", docs)
    assert cli("index", "--corpus", file, "--index-dir", tmp_path / "from-file", "--model", model_dir) == 0
    pipe(monkeypatch, lines)
    assert cli("index", "--corpus", "-", "--index-dir", tmp_path / "piped", "--model", model_dir) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"{tmp_path / 'piped'}: 10 documents, 30 passages, 1 shard"
    assert manifest_json(tmp_path / "piped")["sources"][0]["corpus"] == key_of(docs)
    assert doc_ids(tmp_path / "piped") == doc_ids(tmp_path / "from-file")
    np.testing.assert_array_equal(searched_vectors(tmp_path / "piped"), searched_vectors(tmp_path / "from-file"))
    pipe(monkeypatch, lines)  # the same lines again: nothing added
    assert cli("index", "--corpus", "-", "--index-dir", tmp_path / "piped") == 0
    assert manifest_json(tmp_path / "piped")["counts"]["documents"] == 10


@pytest.mark.parametrize("data, message", [
    (b"", "--corpus -: standard input holds no JSON lines"),
    (b'{"_id": "a", "text": "x"}\n[1]\n', "<stdin>:2: expected a JSON object, got an array"),
    (b'{"_id": "a", "text": "x"}\n\n{"_id": "a", "text": "y"}\n',
     "<stdin>:3: duplicate document id 'a' (first seen on line 1)"),
    (b'{"_id": "a", "text": "x"}\n\n{"_id": "b"}\n',
     "<stdin>:3: document 'b' has no text field (expected one of text, contents, body)"),
    (b'{"_id": "a", "text": "caf\xe9"}\n', "<stdin>:1: not valid UTF-8 (byte 0xe9 at column 26)"),
])
def test_bad_json_lines_piped_in_are_one_line_before_anything_is_written(model_dir, tmp_path, capsys, monkeypatch,
                                                                        data, message):
    pipe(monkeypatch, data)
    assert cli("index", "--corpus", "-", "--index-dir", tmp_path / "index", "--model", model_dir) == 1
    assert error_line(capsys, "index") == f"graphdoc index: error: {message}"
    assert not (tmp_path / "index").exists()


def test_embed_reads_json_lines_piped_in(model_dir, docs, tmp_path, capsys, monkeypatch) -> None:
    lines = "".join(json.dumps(d) + "\n" for d in docs).encode("utf-8")
    file = write_jsonl(tmp_path / "corpus.jsonl", docs)
    assert cli("embed", "--corpus", file, "--output", tmp_path / "file.npy", "--model", model_dir) == 0
    pipe(monkeypatch, lines)
    assert cli("embed", "--corpus", "-", "--output", tmp_path / "piped.npy", "--model", model_dir) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "piped.npy"), np.load(tmp_path / "file.npy"))
    assert (tmp_path / "piped.ids.txt").read_text() == "".join(d["_id"] + "\n" for d in docs)
    pipe(monkeypatch, b'{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n')
    before = (tmp_path / "piped.npy").read_bytes()
    assert cli("embed", "--corpus", "-", "--output", tmp_path / "piped.npy", "--model", model_dir) == 1
    assert error_line(capsys, "embed") == (
        "graphdoc embed: error: <stdin>:2: duplicate document id 'a' (first seen on line 1)")
    assert (tmp_path / "piped.npy").read_bytes() == before  # what was written stays


def test_a_stopped_embed_of_lines_piped_in_goes_on_when_they_are_piped_again(model_dir, docs, tmp_path, monkeypatch):
    from graphdoc.cli import embed

    lines = "".join(json.dumps(d) + "\n" for d in docs).encode("utf-8")
    monkeypatch.setattr(embed, "SAVE_EVERY", 4)
    saved = embed.Partial.save
    calls = []

    def save_then_stop(self, ids, rows):
        saved(self, ids, rows)
        calls.append(len(ids))
        if len(calls) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(embed.Partial, "save", save_then_stop)
    pipe(monkeypatch, lines)
    assert cli("embed", "--corpus", "-", "--output", tmp_path / "e.npy", "--model", model_dir, "--batch-size", 2) == 130
    assert (tmp_path / "e.npy.partial").is_dir() and not (tmp_path / "e.npy").exists()
    from graphdoc.encoder import GraphDocEncoder

    forward, embedded = GraphDocEncoder.iter_forward, []

    def counted(self, documents, *args, **kwargs):
        for out in forward(self, documents, *args, **kwargs):
            embedded.extend(prepared.document.id for prepared in out.documents)
            yield out

    monkeypatch.setattr(GraphDocEncoder, "iter_forward", counted)
    pipe(monkeypatch, lines)
    assert cli("embed", "--corpus", "-", "--output", tmp_path / "e.npy", "--model", model_dir, "--batch-size", 2) == 0
    assert embedded == [d["_id"] for d in docs[4:]]  # only the documents not saved before were embedded again
    monkeypatch.setattr(GraphDocEncoder, "iter_forward", forward)
    whole = write_jsonl(tmp_path / "corpus.jsonl", docs)
    assert cli("embed", "--corpus", whole, "--output", tmp_path / "whole.npy", "--model", model_dir) == 0
    np.testing.assert_allclose(np.load(tmp_path / "e.npy"), np.load(tmp_path / "whole.npy"), atol=1e-6)
