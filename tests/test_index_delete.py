"""Deleting documents from an index: the rebuilt index is the index of the remaining documents, a deleted id can be
added again, the manifest records deletions, an interrupted delete is finished by a rerun, merges carry them."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from _retrieval_helpers import (RARE, assert_same_runs, cli, doc_ids, error_line, kill_on_shard, make_docs, manifest_json,
                                search_runs, write_jsonl)

from graphdoc.errors import GraphDocError, InputError
from graphdoc.retrieval import delete_documents
from graphdoc.retrieval import finalize as finalize_module
from graphdoc.retrieval.builder import IndexSettings, build_index
from graphdoc.retrieval.manifest import Manifest
from graphdoc.retrieval.merge import merge_indexes
from graphdoc.retrieval.searcher import Searcher

pytestmark = pytest.mark.usefixtures("restore_cli_state")

DOCS = make_docs(12)
GONE = ["d003", "d007", "d010"]
QUERIES = {"q1": "graph attention network", "q2": "zebra fox", "q3": "lazy dog sentence", "q4": "okapi walrus"}


@pytest.fixture(scope="module")
def built(model, tmp_path_factory) -> Path:
    """An index of DOCS in shards of three (four shards)."""
    folder = tmp_path_factory.mktemp("built")
    build_index(model, str(write_jsonl(folder / "corpus.jsonl", DOCS)), folder / "index", IndexSettings(shard_size=3))
    return folder / "index"


@pytest.fixture
def index(built, tmp_path) -> Path:
    return Path(shutil.copytree(built, tmp_path / "index"))


def _runs(index_dir: Path) -> dict[str, dict]:
    return search_runs(index_dir, QUERIES, k=len(DOCS))


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ exact behaviour
def test_a_deletion_is_searched_as_an_index_of_the_remaining_documents(model, index, tmp_path) -> None:
    manifest = delete_documents(index, GONE)
    remaining = [d for d in DOCS if d["_id"] not in GONE]
    alone = tmp_path / "alone"
    build_index(model, str(write_jsonl(tmp_path / "remaining.jsonl", remaining)), alone, IndexSettings(shard_size=3))
    assert doc_ids(index) == doc_ids(alone) == [d["_id"] for d in remaining]
    runs = _runs(index)
    assert_same_runs(runs, _runs(alone))  # BM25's statistics (document count, lengths) are the remaining ones'
    assert not any(set(GONE) & set(run) for by_query in runs.values() for run in by_query.values())
    assert "d003" not in runs["bm25"]["q4"] and RARE["d003"] == "okapi"  # its rare word matches nothing now
    assert manifest.deleted == {doc_id: 4 for doc_id in GONE} and manifest_json(index)["deleted"] == manifest.deleted
    assert {k: manifest.counts[k] for k in ("documents", "passages", "shards", "replaced", "deleted")} == \
        {"documents": 9, "passages": 27, "shards": 4, "replaced": 0, "deleted": 3}
    assert manifest_json(index)["finalized"] is True
    assert sorted(p.name for p in (index / "shards").iterdir()) == ["00000", "00001", "00002", "00003"]  # untouched


def test_a_deleted_id_added_again_is_back_and_no_duplicate(model, index, tmp_path) -> None:
    delete_documents(index, ["d001", "d002"])
    again = [dict(DOCS[1], text="A new text about a walrus."), dict(DOCS[2], text="Another new text.")]
    corpus = write_jsonl(tmp_path / "again.jsonl", again[:1])
    manifest = build_index(model, str(corpus), index)  # on_duplicate="error": d001 is not in the index
    assert "d001" in doc_ids(index) and "d002" not in doc_ids(index)
    assert (manifest.counts["documents"], manifest.counts["deleted"]) == (11, 1)
    with Searcher(index) as searcher:
        assert searcher.record(searcher.row_of["d001"])["text"] == "A new text about a walrus."
        assert list(searcher.batch_search({"q": "walrus"}, k=2, mode="bm25")["q"])[0] == "d001"
    build_index(model, str(write_jsonl(tmp_path / "skip.jsonl", again[1:])), index,
                IndexSettings(on_duplicate="skip"))  # skip: not skipped, as the index does not hold it
    assert doc_ids(index)[-1] == "d002"
    with pytest.raises(GraphDocError, match=r"document id 'd004' is already in the index"):  # one not deleted
        build_index(model, str(write_jsonl(tmp_path / "dup.jsonl", [DOCS[4]])), index)
    delete_documents(index, ["d001"])  # deleted again: its new row goes too
    assert "d001" not in doc_ids(index) and manifest_json(index)["deleted"]["d001"] == 6


def test_a_replaced_document_deleted_is_gone_whole(model, index, tmp_path) -> None:
    replacement = dict(DOCS[5], text="The replacement text.")
    build_index(model, str(write_jsonl(tmp_path / "r.jsonl", [replacement])), index,
                IndexSettings(on_duplicate="replace"))
    assert manifest_json(index)["counts"]["replaced"] == 1
    manifest = delete_documents(index, ["d005"])
    assert "d005" not in doc_ids(index)
    assert {k: manifest.counts[k] for k in ("documents", "replaced", "deleted")} == \
        {"documents": 11, "replaced": 0, "deleted": 1}
    with Searcher(index) as searcher:
        assert not any(searcher.record(row)["id"] == "d005" for row in range(len(searcher.doc_ids)))


# ------------------------------------------------------------------ ids given
def test_ids_not_in_the_index_are_warned_of_and_the_others_deleted(index, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        manifest = delete_documents(index, ["d001", "nope", 42, "d001", "zzz"])
    assert "d001" not in doc_ids(index) and manifest.counts["deleted"] == 1
    assert "3 of the 4 ids given are not in " in caplog.text and "left out: 'nope', '42', 'zzz'" in caplog.text


def test_ids_none_of_which_is_in_the_index_change_nothing(index, caplog) -> None:
    before = _tree(index)
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        delete_documents(index, ["nope"])
    assert f"no id given is in {index}: nothing was changed" in caplog.text
    assert _tree(index) == before


def test_missing_error_refuses_and_changes_nothing(index) -> None:
    before = _tree(index)
    with pytest.raises(GraphDocError, match=r"^1 of the 2 ids given is not in .*: 'nope' \(nothing was changed"):
        delete_documents(index, ["d001", "nope"], missing="error")
    assert _tree(index) == before


@pytest.mark.parametrize(("ids", "message"), [
    ("d001", r"not one string: pass \['d001'\]"),
    ([], "no document ids were given"),
    (["d001", ""], "an empty document id"),
    (["d001", None], "a string or an integer; got None"),
])
def test_unusable_ids_are_refused(index, ids, message) -> None:
    with pytest.raises(GraphDocError, match=message):
        delete_documents(index, ids)
    with pytest.raises(GraphDocError, match="missing must be one of warn, error"):
        delete_documents(index, ["d001"], missing="ignore")


def test_deleting_every_document_is_refused(index) -> None:
    before = _tree(index)
    with pytest.raises(GraphDocError, match=r"cannot delete all 12 documents of .*: an index without documents "
                                            r"cannot be searched \(remove the folder instead; nothing was changed\)"):
        delete_documents(index, [d["_id"] for d in DOCS] + ["extra"])
    assert _tree(index) == before


def test_a_faiss_factory_left_without_enough_documents_is_refused(model, tmp_path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", make_docs(6))
    build_index(model, str(corpus), tmp_path / "ivf", IndexSettings(faiss_factory="IVF4,Flat"))
    with pytest.raises(GraphDocError, match=r"'IVF4,Flat' .* needs at least 4 documents to be built; 3 would be "
                                            r"left \(nothing was changed\)"):
        delete_documents(tmp_path / "ivf", ["d000", "d001", "d002"])
    assert len(doc_ids(tmp_path / "ivf")) == 6 and "deleted" not in manifest_json(tmp_path / "ivf")


# ------------------------------------------------------------------ manifest
def test_a_manifest_without_deletions_has_no_deleted_field_and_loads(built) -> None:
    assert "deleted" not in manifest_json(built)
    assert Manifest.load(built).deleted == {}


@pytest.mark.parametrize(("deleted", "message"), [
    ([1], "deleted must be a JSON object; got [1]"),
    ({"d001": "1"}, "deleted['d001'] must be a number of shards from 1 to 4 (the shards the index had when the "
                    'document was deleted); got "1"'),
    ({"d001": 0}, "deleted['d001'] must be a number of shards from 1 to 4"),
    ({"d001": 5}, "deleted['d001'] must be a number of shards from 1 to 4"),
    ({"d001": True}, "deleted['d001'] must be a number of shards from 1 to 4"),
])
def test_a_malformed_deleted_value_is_one_error_line(index, capsys, deleted, message) -> None:
    data = manifest_json(index)
    (index / "manifest.json").write_text(json.dumps({**data, "deleted": deleted}), encoding="utf-8")
    for command, argv in (("search", ("graph", "--mode", "bm25")), ("delete", ("d001",))):
        capsys.readouterr()
        assert cli(command, "--index-dir", index, *argv) == 1
        assert error_line(capsys, command).startswith(
            f"graphdoc {command}: error: {index / 'manifest.json'}: {message}")


# ------------------------------------------------------------------ command line
def test_the_delete_command_end_to_end(index, tmp_path, capsys) -> None:
    ids = tmp_path / "gone.ids.txt"
    ids.write_text("d003\n\nd007\n", encoding="utf-8")
    capsys.readouterr()
    assert cli("delete", "--index-dir", index, "d010", "--ids", ids) == 0
    captured = capsys.readouterr()
    assert captured.out == f"{index}: 3 documents deleted, 9 documents, 27 passages\n" and captured.err == ""
    assert cli("search", "--index-dir", index, "okapi zebra fox dog", "--mode", "bm25", "-k", "12", "--json") == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert hits and not {h["doc_id"] for h in hits} & set(GONE)
    assert cli("delete", "--index-dir", index, "d001", "d003") == 0  # d003: already deleted, warned of
    captured = capsys.readouterr()
    assert captured.out == f"{index}: 1 document deleted, 8 documents, 24 passages\n"
    assert "1 of the 2 ids given is not in" in captured.err and "'d003'" in captured.err
    assert cli("delete", "--index-dir", index, "d002", "nope", "--missing", "error") == 1
    assert "nope" in error_line(capsys, "delete") and "d002" in doc_ids(index)
    assert cli("delete", "--index-dir", index) == 1
    assert error_line(capsys, "delete") == "graphdoc delete: error: name the ids to delete (ID ... or --ids FILE)"
    assert cli("delete", "--index-dir", index, "--ids", tmp_path / "none.txt") == 1
    assert error_line(capsys, "delete") == f"graphdoc delete: error: --ids {tmp_path / 'none.txt'}: no such file"
    assert cli("delete", "--index-dir", tmp_path / "nowhere", "d001") == 1
    assert error_line(capsys, "delete") == f"graphdoc delete: error: index folder not found: {tmp_path / 'nowhere'}"
    assert not (tmp_path / "nowhere").exists()


# ------------------------------------------------------------------ interruptions
def _killed(*args, **kwargs):
    raise KeyboardInterrupt  # as a kill while final/ is rebuilt: nothing after it runs


def test_a_delete_killed_while_finalising_keeps_the_last_build_searchable_and_a_rerun_finishes(
        index, capsys, caplog, monkeypatch) -> None:
    before = (index / "final" / "build.json").read_bytes()
    monkeypatch.setattr(finalize_module.BM25Index, "build", _killed)
    with pytest.raises(KeyboardInterrupt):
        delete_documents(index, GONE)
    monkeypatch.undo()
    m = manifest_json(index)
    assert m["finalized"] is False and m["deleted"] == {doc_id: 4 for doc_id in GONE}  # recorded first
    assert (index / "final" / "build.json").read_bytes() == before
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        with Searcher(index) as searcher:  # the last complete build, as after an add killed then
            assert len(searcher.doc_ids) == 12
    assert "being finalised after an add or a delete" in caplog.text
    capsys.readouterr()
    assert cli("delete", "--index-dir", index, *GONE) == 0  # the same command again: no "not in the index"
    captured = capsys.readouterr()
    assert captured.out == f"{index}: 3 documents deleted, 9 documents, 27 passages\n" and captured.err == ""
    assert manifest_json(index)["finalized"] is True and not set(GONE) & set(doc_ids(index))


def test_a_delete_killed_while_finalising_is_finished_by_the_next_index_run(model, index, tmp_path,
                                                                             monkeypatch) -> None:
    monkeypatch.setattr(finalize_module.BM25Index, "build", _killed)
    with pytest.raises(KeyboardInterrupt):
        delete_documents(index, ["d000"])
    monkeypatch.undo()
    build_index(model, str(write_jsonl(tmp_path / "more.jsonl", make_docs(2, start=12))), index)
    assert doc_ids(index)[0] == "d001" and len(doc_ids(index)) == 13


@pytest.mark.parametrize("error", [GraphDocError("no space left on the device"),
                                   OSError(28, "No space left on device")])
def test_a_finalising_that_fails_takes_the_deletion_back(index, monkeypatch, error) -> None:
    before = _tree(index)

    def full_disk(*args, **kwargs):
        raise error

    monkeypatch.setattr(finalize_module.BM25Index, "build", full_disk)
    with pytest.raises(type(error), match="(?i)no space left"):
        delete_documents(index, ["d001"])
    assert _tree(index) == before


def test_an_index_whose_build_is_in_progress_is_refused(model, tmp_path, monkeypatch) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", make_docs(6))
    kill_on_shard(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        build_index(model, str(corpus), tmp_path / "idx", IndexSettings(shard_size=3))
    monkeypatch.undo()
    before = _tree(tmp_path / "idx")
    with pytest.raises(GraphDocError) as refused:
        delete_documents(tmp_path / "idx", ["d000"])
    assert str(refused.value) == (
        f"the build of {tmp_path / 'idx'} is not finished ({corpus} part 1/1: 3 documents read): finish it first "
        "(rerun the build_index call or graphdoc index command) or keep what it read, graphdoc index --index-dir "
        f"{tmp_path / 'idx'} --stop-reading {corpus} (stop_reading in Python); then delete (nothing was changed)")
    assert _tree(tmp_path / "idx") == before


# ------------------------------------------------------------------ merging
def test_a_merge_carries_the_deletions_of_its_parts(model, tmp_path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", DOCS)
    for part in ("1/2", "2/2"):
        build_index(model, str(corpus), tmp_path / part[0], IndexSettings(shard_size=2), part=part)
    delete_documents(tmp_path / "1", ["d002"])  # part 1 holds d000, d002, ...
    delete_documents(tmp_path / "2", ["d001", "d011"])
    manifest = merge_indexes(tmp_path / "merged", [tmp_path / "1", tmp_path / "2"])
    kept = [f"d{i:03d}" for i in range(0, 12, 2) if i != 2] + [f"d{i:03d}" for i in range(1, 12, 2) if i not in (1, 11)]
    assert doc_ids(tmp_path / "merged") == kept
    assert manifest.deleted == {"d002": 3, "d001": 6, "d011": 6}  # part 2's shards come after part 1's three
    assert (manifest.counts["documents"], manifest.counts["deleted"]) == (9, 3)
    build_index(model, str(write_jsonl(tmp_path / "again.jsonl", [DOCS[1]])), tmp_path / "merged")
    assert doc_ids(tmp_path / "merged")[-1] == "d001"


def test_a_merge_refuses_a_part_that_deleted_an_id_an_earlier_part_holds(model, tmp_path) -> None:
    build_index(model, str(write_jsonl(tmp_path / "a.jsonl", make_docs(3))), tmp_path / "a")
    build_index(model, str(write_jsonl(tmp_path / "b.jsonl", make_docs(3, start=2))), tmp_path / "b")  # d002..d004
    delete_documents(tmp_path / "b", ["d002"])
    with pytest.raises(GraphDocError, match=r"cannot merge .*b: document 'd002' was deleted from it, and .*a, named "
                                            r"before it, holds it: the merged index would lose that one too"):
        merge_indexes(tmp_path / "ab", [tmp_path / "a", tmp_path / "b"])
    assert not (tmp_path / "ab").exists()
    manifest = merge_indexes(tmp_path / "ba", [tmp_path / "b", tmp_path / "a"])  # no duplicate: b no longer holds it
    assert doc_ids(tmp_path / "ba") == ["d003", "d004", "d000", "d001", "d002"] and manifest.deleted == {"d002": 1}


@pytest.mark.parametrize("damage", ["cut", "dropped"])
def test_a_damaged_shard_docstore_is_one_error_and_changes_nothing(index, damage) -> None:
    store = index / "shards" / "00001" / "docs.jsonl"
    lines = store.read_bytes().splitlines(keepends=True)
    store.write_bytes(b"".join(lines[:-1]) + (lines[-1][:20] if damage == "cut" else b""))
    before = _tree(index)
    message = (rf"^{store}: cannot be read at record 3 \(" if damage == "cut"
               else rf"^{store}: 2 records for 3 ids in ids\.txt: the shard is damaged; build the index anew$")
    with pytest.raises(InputError, match=message):
        delete_documents(index, ["d001"])
    assert _tree(index) == before
