"""Findings of the review of the index lifecycle: a model of the same weights under another encoder setting or
tokenizer is another model; an empty part keeps its record when a corpus is added; BM25 options not given keep the
index's own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _retrieval_helpers import cli, error_line, make_docs, manifest_json, write_jsonl

pytestmark = pytest.mark.usefixtures("restore_cli_state")


@pytest.fixture(scope="module")
def built(model_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("maintenance")
    corpus = write_jsonl(folder / "corpus.jsonl", make_docs(6))
    assert cli("index", "--corpus", corpus, "--index-dir", folder / "index", "--model", model_dir) == 0
    return folder / "index"


def changed_model(model_dir: Path, folder: Path, change) -> Path:
    """A copy of ``model_dir`` (the same weights) with ``change`` made to its passage encoder's files."""
    copy = Path(shutil.copytree(model_dir, folder))
    change(copy / "passage_encoder")
    return copy


def _relu(encoder: Path) -> None:
    config = json.loads((encoder / "config.json").read_text(encoding="utf-8"))
    (encoder / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}), encoding="utf-8")


def _swap_two_tokens(encoder: Path) -> None:
    tokenizer = json.loads((encoder / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]
    words = [w for w in vocab if w.isalpha()][:2]
    vocab[words[0]], vocab[words[1]] = vocab[words[1]], vocab[words[0]]
    (encoder / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")


def test_the_same_weights_under_another_activation_are_refused(built, model_dir, tmp_path, capsys) -> None:
    other = changed_model(model_dir, tmp_path / "relu", _relu)
    assert manifest_json(built)["model"]["encoder"]["architecture"]["hidden_act"] == "gelu"
    assert cli("search", "--index-dir", built, "graph", "--mode", "dense", "--model", other) == 1
    assert error_line(capsys, "search") == (
        f"graphdoc search: error: index {built} was built with encoder.hidden_act='gelu', the model has "
        f"encoder.hidden_act='relu' (the index's model is '{model_dir}', this one '{other}')")
    corpus = write_jsonl(tmp_path / "more.jsonl", make_docs(2, start=50))
    index = Path(shutil.copytree(built, tmp_path / "index"))
    assert cli("index", "--corpus", corpus, "--index-dir", index, "--model", other) == 1
    assert "encoder.hidden_act='gelu'" in error_line(capsys, "index")
    assert manifest_json(index)["counts"]["documents"] == 6


def test_a_tokenizer_of_another_vocabulary_is_refused(built, model_dir, tmp_path, capsys) -> None:
    other = changed_model(model_dir, tmp_path / "tok", _swap_two_tokens)
    assert cli("search", "--index-dir", built, "graph", "--mode", "dense", "--model", other) == 1
    assert error_line(capsys, "search") == (
        f"graphdoc search: error: index {built} was built with a tokenizer of another vocabulary than this "
        f"model's (the index's model is '{model_dir}', this one '{other}'): pass the index's model (--model) with "
        "its own tokenizer files")


def test_an_index_recorded_before_the_encoder_was_is_searched_as_before(built, model_dir, tmp_path, capsys) -> None:
    index = Path(shutil.copytree(built, tmp_path / "index"))
    manifest = manifest_json(index)
    del manifest["model"]["encoder"]
    (index / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert cli("search", "--index-dir", index, "graph", "--mode", "dense", "-k", 2) == 0
    assert cli("search", "--index-dir", index, "graph", "--mode", "dense", "--model", model_dir, "-k", 2) == 0


def test_an_empty_part_keeps_its_record_when_a_corpus_is_added(model_dir, tmp_path, capsys) -> None:
    small = write_jsonl(tmp_path / "small.jsonl", make_docs(2))
    for i in (1, 2, 3):
        assert cli("index", "--corpus", small, "--index-dir", tmp_path / f"p{i}", "--shard", f"{i}/3",
                   "--model", model_dir, "--faiss-factory", "HNSW8") == 0
    assert manifest_json(tmp_path / "p3")["shards"] == []  # two documents, three parts: the last one empty
    more = write_jsonl(tmp_path / "more.jsonl", make_docs(3, start=40))
    assert cli("index", "--corpus", more, "--index-dir", tmp_path / "p3") == 0
    manifest = manifest_json(tmp_path / "p3")
    assert [(s["corpus"], s["part"]) for s in manifest["sources"]] == [(str(small), "3/3"), (str(more), "1/1")]
    assert manifest["faiss_factory"] == "HNSW8"
    capsys.readouterr()
    assert cli("merge", "--index-dir", tmp_path / "merged", tmp_path / "p1", tmp_path / "p2", tmp_path / "p3") == 0
    assert "without its part" not in capsys.readouterr().err
    assert manifest_json(tmp_path / "merged")["counts"]["documents"] == 5


def test_bm25_terms_alone_keeps_the_index_stemmer(model_dir, tmp_path) -> None:
    first = write_jsonl(tmp_path / "first.jsonl", make_docs(2))
    assert cli("index", "--corpus", first, "--index-dir", tmp_path / "index", "--model", model_dir,
               "--bm25-stemmer", "english") == 0
    more = write_jsonl(tmp_path / "more.jsonl", make_docs(2, start=40))
    assert cli("index", "--corpus", more, "--index-dir", tmp_path / "index", "--bm25-terms", "unicode") == 0
    bm25 = manifest_json(tmp_path / "index")["bm25"]
    assert (bm25["stemmer"], bm25["terms"]) == ("english", "unicode")
    assert manifest_json(tmp_path / "index")["counts"]["documents"] == 4


def test_a_merged_index_is_made_now_by_this_graphdoc(model_dir, tmp_path) -> None:
    from graphdoc import __version__

    corpus = write_jsonl(tmp_path / "corpus.jsonl", make_docs(4))
    for i in (1, 2):
        assert cli("index", "--corpus", corpus, "--index-dir", tmp_path / f"p{i}", "--shard", f"{i}/2",
                   "--model", model_dir) == 0
    old = manifest_json(tmp_path / "p1")
    (tmp_path / "p1" / "manifest.json").write_text(
        json.dumps({**old, "created": "2020-01-01T00:00:00Z", "graphdoc_version": "0.0.1"}), encoding="utf-8")
    assert cli("merge", "--index-dir", tmp_path / "merged", tmp_path / "p1", tmp_path / "p2") == 0
    merged = manifest_json(tmp_path / "merged")
    assert merged["created"] >= old["created"] and merged["graphdoc_version"] == __version__


def test_info_calls_an_empty_part_one(model_dir, tmp_path, capsys) -> None:
    small = write_jsonl(tmp_path / "small.jsonl", make_docs(1))
    assert cli("index", "--corpus", small, "--index-dir", tmp_path / "p2", "--shard", "2/2", "--model", model_dir) == 0
    capsys.readouterr()
    assert cli("info", tmp_path / "p2") == 0
    assert capsys.readouterr().out.splitlines()[1].startswith(
        "  an empty part, holding no document (its corpus had none for it): merge it with the other parts; 0 shards")
