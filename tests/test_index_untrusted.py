"""Index folders from someone else, or edited by hand: an add never deletes or replaces anything outside the
folder (``shards/`` or ``final/`` a link, shard names with ``..``), a damaged manifest deletes none of the index's
own shards, and a manifest value of the wrong type is one error line, not a traceback when it is used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from _retrieval_helpers import cli, error_line, make_docs, manifest_json, write_jsonl

pytestmark = pytest.mark.usefixtures("restore_cli_state")


@pytest.fixture(scope="module")
def built(model_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("built")
    corpus = write_jsonl(folder / "corpus.jsonl", make_docs(4))
    assert cli("index", "--corpus", corpus, "--index-dir", folder / "idx", "--model", model_dir) == 0
    return folder / "idx"


@pytest.fixture
def index(built, tmp_path) -> Path:
    return Path(shutil.copytree(built, tmp_path / "idx"))


@pytest.fixture
def more(tmp_path) -> Path:
    return write_jsonl(tmp_path / "more.jsonl", make_docs(2, start=10))


def edit_manifest(index: Path, **changes) -> None:
    data = manifest_json(index)
    data.update(changes)
    (index / "manifest.json").write_text(json.dumps(data), encoding="utf-8")


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["shards", "final"])
def test_an_add_through_a_linked_folder_is_refused_and_what_it_points_to_untouched(index, more, tmp_path, capsys,
                                                                                 name) -> None:
    """An add removed every folder in a linked shards/ that the manifest did not list, and replaced the whole
    folder a linked final/ pointed to."""
    outside = tmp_path / "outside"
    shutil.copytree(index / name, outside)
    (outside / "precious").mkdir()
    (outside / "precious" / "thesis.txt").write_text("years of work", encoding="utf-8")
    shutil.rmtree(index / name)
    (index / name).symlink_to(outside)
    before = tree(outside)
    capsys.readouterr()
    assert cli("index", "--corpus", more, "--index-dir", index) == 1
    assert error_line(capsys, "index") == (
        f"graphdoc index: error: index {index}: {name}/ is a symbolic link, and graphdoc writes an index only inside "
        "its folder: copy the index without links to add to it")
    assert tree(outside) == before


@pytest.mark.parametrize("shards", [["0000"], ["../../../elsewhere/shards/00000"], ["/tmp/00000"], [0], {"a": 1}])
def test_a_manifest_naming_no_shard_is_refused_and_the_shards_kept(index, more, capsys, shards) -> None:
    """A typo in the shard list removed the index's own shard as 'incomplete', then failed: its encoded documents
    were lost. A name with '..' or an absolute one read another index's shard into this one."""
    edit_manifest(index, shards=shards)
    before = tree(index / "shards")
    capsys.readouterr()
    assert cli("index", "--corpus", more, "--index-dir", index) == 1
    line = error_line(capsys, "index")
    if isinstance(shards, dict):
        assert line == f"graphdoc index: error: {index / 'manifest.json'}: shards must be a list; got {{\"a\": 1}}"
    else:
        assert line == (f"graphdoc index: error: {index / 'manifest.json'}: shards holds {json.dumps(shards[0])}, "
                        "not a shard name (00000, 00001, ...)")
    assert tree(index / "shards") == before
    assert cli("search", "--index-dir", index, "graph", "--mode", "bm25") == 1


def test_a_listed_shard_that_is_missing_is_refused_and_nothing_removed(index, more, capsys) -> None:
    edit_manifest(index, shards=["00001"])
    before = tree(index / "shards")
    capsys.readouterr()
    assert cli("index", "--corpus", more, "--index-dir", index) == 1
    assert error_line(capsys, "index") == (
        f"graphdoc index: error: index {index} is damaged: shard 00001, which its manifest lists, is not a folder in "
        f"{index / 'shards'} (nothing was changed)")
    assert tree(index / "shards") == before


@pytest.mark.parametrize(("changes", "message"), [
    ({"format_version": "3"}, 'format_version must be an integer; got "3"'),
    ({"format_version": None}, "format_version must be an integer; got null"),
    ({"dimension": "32"}, 'dimension must be an integer; got "32"'),
    ({"dimension": -1}, "dimension must be at least 1; got -1"),
    ({"faiss_factory": 5}, "faiss_factory must be a string; got 5"),
    ({"finalized": "no"}, 'finalized must be true or false; got "no"'),
    ({"store_passages": "false"}, 'store_passages must be true or false; got "false"'),
    ({"model": "abc"}, 'model must be a JSON object; got "abc"'),
    ({"model": None}, "model must be a JSON object; got null"),
    ({"counts": "x"}, 'counts must be a JSON object; got "x"'),
    ({"dense": {"passage_weight": "x"}}, "its dense settings are not usable ("),
    ({"bm25": {"k1": "x"}}, "its bm25 settings are not usable ("),
    ({"fusion": {"alpha": "x"}}, "its fusion settings are not usable ("),
    ({"shard_size": "3"}, 'shard_size must be an integer or null; got "3"'),
    ({"shard_size": 0}, "shard_size must be at least 1; got 0"),
    ({"sources": [{"corpus": "c.jsonl", "precision": "fp8"}]},
     'sources[].precision must be one of fp32, bf16, fp16; got "fp8"'),
])
def test_a_manifest_value_of_the_wrong_type_is_one_error_line(index, more, capsys, changes, message) -> None:
    data = manifest_json(index)
    for key, value in changes.items():  # settings sections are edited, not replaced
        data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
    (index / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    prefix = f"{index / 'manifest.json'}: "
    for command, argv in (("search", ("graph", "--mode", "bm25")), ("index", ("--corpus", more))):
        capsys.readouterr()
        assert cli(command, "--index-dir", index, *argv) == 1
        assert error_line(capsys, command).startswith(f"graphdoc {command}: error: {prefix}{message}")


def test_a_model_path_of_the_wrong_type_is_one_error_line(index, more, capsys) -> None:
    data = manifest_json(index)
    data["model"]["path"] = 5
    (index / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    capsys.readouterr()
    assert cli("index", "--corpus", more, "--index-dir", index) == 1
    assert error_line(capsys, "index") == (f"graphdoc index: error: {index / 'manifest.json'}: model.path must be a "
                                           "string or null; got 5")


def _edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(change(data)), encoding="utf-8")


@pytest.mark.parametrize(("change", "reason"), [
    (lambda b: _edit_json(b / "config.json", lambda d: {**d, "num_docs": "4"}),
     "config.json: num_docs must be an integer and config a JSON object"),
    (lambda b: _edit_json(b / "config.json", lambda d: {**d, "config": {**d["config"], "k1": "x"}}),
     "'<' not supported between instances of 'str' and 'int'"),
    (lambda b: _edit_json(b / "params.index.json", lambda d: {**d, "num_docs": "4"}),
     "damaged BM25 files: num_docs is '4', not a count"),
    (lambda b: (b / "vocab.index.json").write_text("[1]", encoding="utf-8"), "'list' object has no attribute"),
    (lambda b: _edit_json(b / "vocab.index.json", lambda d: {**d, "zebra": "x"}),
     "damaged BM25 files: its vocabulary is not a mapping of terms to integer ids"),
    (lambda b: _edit_json(b / "vocab.index.json", lambda d: {**d, "zebra": 10 ** 6}),
     "damaged BM25 files: its vocabulary has term ids outside the "),
    (lambda b: np.save(b / "data.csc.index.npy", np.ones(5, dtype=np.float32)),
     "damaged BM25 files: its score matrix has 5 scores and "),
])
def test_damaged_bm25_files_are_one_error_line(index, capsys, change, reason) -> None:
    """bm25s's files of a hand-edited or damaged index failed with TypeError, AttributeError or ValueError
    tracebacks, when opened or later when searched."""
    change(index / "final" / "bm25")
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "graph", "--mode", "bm25") == 1
    line = error_line(capsys, "search")
    assert line.startswith(f"graphdoc search: error: index {index} is damaged: final/bm25 cannot be read (")
    assert reason in line


def test_bm25_rows_past_the_documents_are_one_error_line_when_searched(index, capsys) -> None:
    bm25 = index / "final" / "bm25"
    indices = np.load(bm25 / "indices.csc.index.npy")
    np.save(bm25 / "indices.csc.index.npy", np.full_like(indices, 10 ** 6))
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "graph", "--mode", "bm25") == 1
    assert error_line(capsys, "search") == (
        f"graphdoc search: error: BM25 index {bm25} is damaged: its score matrix does not fit its vocabulary or its "
        "documents (index 1000000 is out of bounds for axis 0 with size 4); rebuild the index")


def test_a_listed_shard_linked_from_elsewhere_is_read_and_kept(index, more, tmp_path, capsys) -> None:
    """(review: the check for missing shards refused a listed shard that is a link to its folder)"""
    elsewhere = tmp_path / "elsewhere-00000"
    shutil.move(index / "shards" / "00000", elsewhere)
    (index / "shards" / "00000").symlink_to(elsewhere)
    before = tree(elsewhere)
    assert cli("index", "--corpus", more, "--index-dir", index) == 0
    assert tree(elsewhere) == before and manifest_json(index)["counts"]["documents"] == 6
