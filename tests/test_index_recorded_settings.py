"""What an index records so that a run resuming or adding to it goes on as it began: the arithmetic each corpus was
encoded in (``--precision`` as it computes on the device) and the shard size."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from _retrieval_helpers import cli, doc_ids, error_line, kill_on_shard, make_docs, manifest_json, write_jsonl

from graphdoc import device as device_module
from graphdoc.cli import main
from graphdoc.errors import GraphDocError
from graphdoc.retrieval.builder import IndexSettings, build_index

pytestmark = pytest.mark.usefixtures("restore_cli_state")


def computing(monkeypatch, model, precision: str, native_bf16: bool = True) -> None:
    """Make ``model`` encode with ``precision`` on a CPU that has (or lacks) native bfloat16, whatever this one has
    (``monkeypatch.undo()`` restores both)."""
    monkeypatch.setattr(device_module, "cpu_supports_bf16", lambda: native_bf16)
    monkeypatch.setattr(model.passage_encoder.config, "precision", precision)


def stopped_at_bf16(model, tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """An index of 6 documents (shards of 3) killed as its second shard began, encoding at bf16: corpus, index."""
    corpus, index = write_jsonl(tmp_path / "c.jsonl", make_docs(6)), tmp_path / "idx"
    computing(monkeypatch, model, "bf16")
    kill_on_shard(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        build_index(model, str(corpus), index, IndexSettings(shard_size=3))
    monkeypatch.undo()
    return corpus, index


# ------------------------------------------------------------------ arithmetic
def test_a_corpus_stopped_part_way_goes_on_only_in_the_arithmetic_it_began_in(model, tmp_path, monkeypatch) -> None:
    """A build stopped under bf16 and resumed in fp32 (or the other way) mixed vectors computed two ways."""
    corpus, index = stopped_at_bf16(model, tmp_path, monkeypatch)
    assert manifest_json(index)["sources"][0]["precision"] == "bf16"
    before = (index / "manifest.json").read_bytes()
    computing(monkeypatch, model, "fp32")
    with pytest.raises(GraphDocError, match=rf"^{corpus} in {index} was started at bf16, and this run computes at "
                                            r"fp32: pass --precision bf16 to go on, or index it into a new folder$"):
        build_index(model, str(corpus), index)
    computing(monkeypatch, model, "bf16", native_bf16=False)  # asked for, but this CPU runs fp32
    with pytest.raises(GraphDocError, match=r"was started at bf16, and this run computes at fp32 \(--precision bf16 "
                                            r"runs fp32 on this device\): go on where it computes in bf16, or index "
                                            r"it into a new folder$"):
        build_index(model, str(corpus), index)
    assert (index / "manifest.json").read_bytes() == before and sorted(p.name for p in (index / "shards").iterdir()) \
        == ["00000"]  # nothing touched
    computing(monkeypatch, model, "bf16")
    build_index(model, str(corpus), index)
    source = manifest_json(index)["sources"][0]
    assert (source["complete"], source["precision"], len(doc_ids(index))) == (True, "bf16", 6)


def test_the_command_line_names_the_precision_to_go_on_with(model_dir, tmp_path, monkeypatch, capsys) -> None:
    from graphdoc.retrieval import builder

    corpus, index = write_jsonl(tmp_path / "c.jsonl", make_docs(6)), tmp_path / "idx"
    monkeypatch.setattr(device_module, "cpu_supports_bf16", lambda: True)
    encode_shard = builder._encode_shard
    kill_on_shard(monkeypatch)
    assert cli("index", "--corpus", corpus, "--index-dir", index, "--model", model_dir, "--shard-size", 3) == 130
    monkeypatch.setattr(builder, "_encode_shard", encode_shard)
    capsys.readouterr()
    assert cli("index", "--corpus", corpus, "--index-dir", index, "--precision", "bf16") == 1
    assert error_line(capsys, "index") == (f"graphdoc index: error: {corpus} in {index} was started at fp32, and this "
                                           "run computes at bf16: pass --precision fp32 to go on, or index it into a "
                                           "new folder")
    assert cli("index", "--corpus", corpus, "--index-dir", index) == 0  # the model's own precision: auto, fp32 here
    assert manifest_json(index)["sources"][0]["precision"] == "fp32"


def test_a_corpus_added_in_another_arithmetic_is_warned_of_not_refused(model, tmp_path, monkeypatch, caplog,
                                                                       capsys) -> None:
    index = tmp_path / "idx"
    computing(monkeypatch, model, "bf16")
    build_index(model, str(write_jsonl(tmp_path / "a.jsonl", make_docs(3))), index)
    computing(monkeypatch, model, "fp32")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        build_index(model, str(write_jsonl(tmp_path / "b.jsonl", make_docs(2, start=3))), index)
    assert caplog.messages == [f"{tmp_path / 'b.jsonl'} is encoded at fp32, and {index} holds documents encoded at "
                               "bf16: their vectors differ by about 1e-3 (pass --precision bf16 to add it as they "
                               "were)"]
    assert [s["precision"] for s in manifest_json(index)["sources"]] == ["bf16", "fp32"] and len(doc_ids(index)) == 5
    capsys.readouterr()
    assert cli("info", index) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  arithmetic: bf16 and fp32 (their vectors differ by about 1e-3; each corpus's below)" in lines
    assert lines[-2:] == [f"    {tmp_path / 'a.jsonl'}: 3 documents read, complete, encoded at bf16",
                          f"    {tmp_path / 'b.jsonl'}: 2 documents read, complete, encoded at fp32"]
    assert json.loads(_info_json(index, capsys))["arithmetic"] == ["bf16", "fp32"]


def _info_json(index: Path, capsys) -> str:
    capsys.readouterr()
    assert cli("info", index, "--json") == 0
    return capsys.readouterr().out


def test_an_index_recorded_before_the_arithmetic_was_goes_on_as_before(model, tmp_path, monkeypatch, capsys) -> None:
    corpus, index = stopped_at_bf16(model, tmp_path, monkeypatch)
    manifest = manifest_json(index)
    del manifest["sources"][0]["precision"], manifest["shard_size"]  # as graphdoc wrote it before
    (index / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    capsys.readouterr()
    assert cli("info", index) == 0
    assert "  arithmetic: not recorded (built before graphdoc recorded it)" in capsys.readouterr().out.splitlines()
    computing(monkeypatch, model, "fp32")
    build_index(model, str(corpus), index, IndexSettings(shard_size=3))
    manifest = manifest_json(index)
    assert "precision" not in manifest["sources"][0] and len(doc_ids(index)) == 6  # (what it was is not known)


def test_parts_encoded_in_two_arithmetics_merge_with_a_warning(model, tmp_path, monkeypatch, caplog) -> None:
    from graphdoc.retrieval.merge import merge_indexes

    corpus = str(write_jsonl(tmp_path / "c.jsonl", make_docs(4)))
    for part, precision in (("1/2", "bf16"), ("2/2", "fp32")):
        computing(monkeypatch, model, precision)
        build_index(model, corpus, tmp_path / part.replace("/", "of"), part=part)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        merge_indexes(tmp_path / "merged", [tmp_path / "1of2", tmp_path / "2of2"])
    assert caplog.messages == [f"the parts were encoded in different arithmetics ({tmp_path / '1of2'} bf16, "
                               f"{tmp_path / '2of2'} fp32): the merged index mixes vectors that differ by about 1e-3"]
    assert [s["precision"] for s in manifest_json(tmp_path / "merged")["sources"]] == ["bf16", "fp32"]


# ------------------------------------------------------------------ shard size
def test_a_resumed_build_keeps_the_shard_size_it_began_with(model_dir, tmp_path, monkeypatch, capsys) -> None:
    """Resumed without --shard-size, it wrote the rest in shards of 1,000."""
    from graphdoc.retrieval import builder

    corpus, index = write_jsonl(tmp_path / "c.jsonl", make_docs(9)), tmp_path / "idx"
    encode_shard = builder._encode_shard
    kill_on_shard(monkeypatch)
    assert cli("index", "--corpus", corpus, "--index-dir", index, "--model", model_dir, "--shard-size", 2) == 130
    monkeypatch.setattr(builder, "_encode_shard", encode_shard)
    assert manifest_json(index)["shard_size"] == 2
    assert cli("index", "--corpus", corpus, "--index-dir", index) == 0
    assert _shard_sizes(index) == [2, 2, 2, 2, 1]
    more = write_jsonl(tmp_path / "more.jsonl", make_docs(5, start=9))
    capsys.readouterr()
    # another size given: taken, said (INFO), and kept from then on
    assert main(["index", "--corpus", str(more), "--index-dir", str(index), "--shard-size", "3"]) == 0
    assert (f"INFO graphdoc.retrieval.builder: index {index}: shards of 3 documents from now on (they held 2; search "
            "results do not depend on it)") in capsys.readouterr().err.splitlines()
    assert _shard_sizes(index) == [2, 2, 2, 2, 1, 3, 2] and manifest_json(index)["shard_size"] == 3
    assert len(doc_ids(index)) == 14


def _shard_sizes(index: Path) -> list[int]:
    return [len((index / "shards" / name / "ids.txt").read_text(encoding="utf-8").splitlines())
            for name in manifest_json(index)["shards"]]


def test_a_new_index_records_the_default_shard_size(model, tmp_path) -> None:
    build_index(model, str(write_jsonl(tmp_path / "c.jsonl", make_docs(2))), tmp_path / "idx")
    assert manifest_json(tmp_path / "idx")["shard_size"] == 1000
