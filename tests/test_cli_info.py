"""``graphdoc info``: an index folder's and a saved model's description, as lines and as JSON; one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _retrieval_helpers import cli, error_line, kill_on_shard, make_docs, manifest_json, write_jsonl

pytestmark = pytest.mark.usefixtures("restore_cli_state")


@pytest.fixture(scope="module")
def index(model_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("info")
    corpus = write_jsonl(folder / "corpus.jsonl", make_docs(4))
    assert cli("index", "--corpus", corpus, "--index-dir", folder / "index", "--model", model_dir,
               "--shard-size", 3, "--bm25-stemmer", "english") == 0
    return folder / "index"


def info(capsys, *argv) -> str:
    capsys.readouterr()
    assert cli("info", *argv) == 0
    return capsys.readouterr().out


def test_an_index_is_described(index, model_dir, capsys) -> None:
    lines = info(capsys, index).splitlines()
    manifest = manifest_json(index)
    assert lines[0] == f"index {index} (graphdoc {manifest['graphdoc_version']}, created {manifest['created']})"
    assert lines[1].startswith("  4 documents, 12 passages; 2 shards, ") and lines[1].endswith(" MiB on disk")
    assert lines[2:] == [
        f"  encoder: {model_dir}, mean pooling, 64 tokens a passage, dimension 32",
        "  passages: 12 words, at most 100 a document (chunker version 2)",
        "  graph: full graph, 2 GAT layers, 2 heads",
        f"  weights: {manifest['model']['fingerprint'][:12]}",
        "  arithmetic: fp32",
        "  dense: Flat, cosine, passage weight 1.0; passages stored",
        "  BM25: lucene (k1 1.5, b 0.75), stop words en, stemmer english, unicode terms",
        "  fusion: weighted, alpha 0.6, zscore",
        "  metadata (what --filter may name): none",
        "  corpora:",
        f"    {index.parent / 'corpus.jsonl'}: 4 documents read, complete, encoded at fp32"]
    data = json.loads(info(capsys, index, "--json"))
    assert data["counts"]["documents"] == 4 and data["final"] == {"documents": 4, "passages": 12, "metadata": {}}
    assert data["building"] == [] and data["model"] == manifest["model"] and data["bytes"] > 0
    assert data["arithmetic"] == ["fp32"] and data["sources"][0]["part_documents"] == 4


def test_a_build_under_way_is_not_searchable_yet(index, tmp_path, capsys) -> None:
    import shutil

    copy = Path(shutil.copytree(index, tmp_path / "index"))
    shutil.rmtree(copy / "final")
    manifest = manifest_json(copy)
    manifest["sources"][0].update(complete=False, documents_read=3)
    manifest["finalized"] = False
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    lines = info(capsys, copy).splitlines()
    assert lines[1].startswith("  not searchable yet; 2 shards, ")
    assert lines[2] == ("  build under way or interrupted (rerun the graphdoc index command, or build_index with the "
                        "same documents, to finish it; or keep what it read: graphdoc index --index-dir DIR "
                        f"--stop-reading CORPUS): {index.parent / 'corpus.jsonl'}")
    assert lines[-1] == f"    {index.parent / 'corpus.jsonl'}: 3 documents read, not finished, encoded at fp32"


def test_a_saved_model_is_described(model_dir, tiny_bert, capsys) -> None:
    lines = info(capsys, model_dir).splitlines()
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    assert lines[0].startswith(f"model {model_dir} (graphdoc {config['graphdoc_version']}, torch ")
    assert lines[1:] == ["  backbone: graph",
                         f"  encoder: {tiny_bert}, mean pooling, 64 tokens a passage, dimension 32",
                         "  passages: 12 words, at most 100 a document",
                         "  graph: full graph, 2 GAT layers, 2 heads"]
    data = json.loads(info(capsys, model_dir, "--json"))
    assert data["backbone"] == "graph" and data["dimension"] == 32 and data["path"] == str(model_dir)


def test_other_paths_are_one_error_line(tmp_path, capsys) -> None:
    (tmp_path / "file.txt").write_text("x")
    for path, message in ((tmp_path / "nowhere", f"{tmp_path / 'nowhere'}: no such file or folder"),
                          (tmp_path / "file.txt", f"{tmp_path / 'file.txt'} is a file: give an index folder or a "
                                                  "saved model folder"),
                          (tmp_path, f"{tmp_path} is neither a graphdoc index (no manifest.json) nor a saved graphdoc "
                                     "model (no config.json written by graphdoc)")):
        capsys.readouterr()
        assert cli("info", path) == 1
        assert error_line(capsys, "info") == f"graphdoc info: error: {message}"
    (tmp_path / "manifest.json").write_text("{not json")
    assert cli("info", tmp_path) == 1
    assert error_line(capsys, "info").startswith(f"graphdoc info: error: {tmp_path / 'manifest.json'}: unreadable "
                                                 "manifest (")


def test_deleted_documents_are_counted(index, tmp_path, capsys) -> None:
    import shutil

    copy = Path(shutil.copytree(index, tmp_path / "index"))
    assert cli("delete", "--index-dir", copy, "d001") == 0
    assert info(capsys, copy).splitlines()[1].startswith("  3 documents, 9 passages (1 document deleted); 2 shards, ")


def test_a_deleted_id_indexed_again_is_not_counted_deleted(index, tmp_path, capsys) -> None:
    import shutil

    copy = Path(shutil.copytree(index, tmp_path / "index"))
    assert cli("delete", "--index-dir", copy, "d001") == 0
    again = write_jsonl(tmp_path / "again.jsonl", [make_docs(2)[1]])
    assert cli("index", "--corpus", again, "--index-dir", copy) == 0
    assert info(capsys, copy).splitlines()[1].startswith("  4 documents, 12 passages; 3 shards, ")


def test_the_metadata_a_filter_may_name_is_summed_up(model_dir, tmp_path, capsys, monkeypatch) -> None:
    from graphdoc.retrieval import filters

    monkeypatch.setattr(filters, "SUMMARY_VALUES", 3)
    docs = make_docs(5)
    for i, doc in enumerate(docs):
        doc.update(year=2020 + i % 2, url=f"https://x/{i}")
    docs[0]["tags"] = ["graph", "search", 7]
    docs[1]["tags"] = "graph"
    docs[2]["nested"] = {"a": 1}  # an object: its fields are named by their paths
    corpus = write_jsonl(tmp_path / "corpus.jsonl", docs)
    assert cli("index", "--corpus", corpus, "--index-dir", tmp_path / "index", "--model", model_dir) == 0
    lines = info(capsys, tmp_path / "index").splitlines()
    assert "  metadata (what --filter may name): nested.a (1 document, 1 value); tags (2 documents, 3 values); " \
           "url (5 documents, more than 3 values); year (5 documents, 2 values)" in lines
    final = json.loads(info(capsys, tmp_path / "index", "--json"))["final"]
    assert final["metadata"]["url"] == {"documents": 5, "values": 3, "values_capped": True}
    assert final["metadata"]["tags"] == {"documents": 2, "values": 3}


def test_an_index_finalised_before_metadata_was_summed_up_says_nothing_of_it(index, tmp_path, capsys) -> None:
    import shutil

    copy = Path(shutil.copytree(index, tmp_path / "index"))
    build = json.loads((copy / "final" / "build.json").read_text(encoding="utf-8"))
    del build["metadata"]
    (copy / "final" / "build.json").write_text(json.dumps(build), encoding="utf-8")
    assert not any(line.startswith("  metadata") for line in info(capsys, copy).splitlines())
    assert json.loads(info(capsys, copy, "--json"))["final"] == {"documents": 4, "passages": 12, "metadata": None}


def test_a_part_counts_its_own_documents(model_dir, tmp_path, capsys, monkeypatch) -> None:
    """A --shard I/N part showed the whole corpus's count as its documents read."""
    from graphdoc.retrieval import builder

    five, three = write_jsonl(tmp_path / "five.jsonl", make_docs(5)), write_jsonl(tmp_path / "three.jsonl", make_docs(3))
    for corpus, part in ((five, "1/2"), (five, "2/2"), (three, "4/4")):
        assert cli("index", "--corpus", corpus, "--index-dir", tmp_path / part.replace("/", "of"), "--model",
                   model_dir, "--shard", part) == 0
    assert info(capsys, tmp_path / "1of2").splitlines()[-1] == \
        f"    {five} part 1/2: 3 documents read (its part of the corpus's 5), complete, encoded at fp32"
    assert info(capsys, tmp_path / "2of2").splitlines()[-1] == \
        f"    {five} part 2/2: 2 documents read (its part of the corpus's 5), complete, encoded at fp32"
    empty = info(capsys, tmp_path / "4of4").splitlines()
    assert empty[1].startswith("  an empty part, holding no document (its corpus had none for it): merge it with the "
                               "other parts; 0 shards, ")
    assert empty[-1] == f"    {three} part 4/4: 0 documents read (its part of the corpus's 3), complete, encoded at fp32"
    encode_shard = builder._encode_shard
    kill_on_shard(monkeypatch)  # part 1/2 of 9 in shards of 2: killed after its documents 1 and 3 of the corpus
    nine = write_jsonl(tmp_path / "nine.jsonl", make_docs(9))
    assert cli("index", "--corpus", nine, "--index-dir", tmp_path / "stopped", "--model", model_dir, "--shard", "1/2",
               "--shard-size", 2) == 130
    monkeypatch.setattr(builder, "_encode_shard", encode_shard)
    assert info(capsys, tmp_path / "stopped").splitlines()[-1] == \
        f"    {nine} part 1/2: 2 documents read (its part of the corpus's first 3), not finished, encoded at fp32"
    sources = json.loads(info(capsys, tmp_path / "stopped", "--json"))["sources"]
    assert (sources[0]["documents_read"], sources[0]["part_documents"]) == (3, 2)
