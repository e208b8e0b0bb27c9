"""The chunker's version in an index's model identity (stop 32 changed how an over-long sentence ends): adding to
or resuming an index chunked by an earlier graphdoc, or merging parts chunked by two, is warned of; searching it
is not affected (a query is not chunked); an embed's saved part from an earlier chunker is started again."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from _retrieval_helpers import make_docs, write_jsonl

from graphdoc.chunker import CHUNKER_VERSION
from graphdoc.encoder import GraphDocEncoder
from graphdoc.retrieval.builder import build_index
from graphdoc.retrieval.merge import merge_indexes
from graphdoc.retrieval.searcher import Searcher


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _as_before_stop_32(index: Path) -> None:
    """Make ``index``'s manifest what graphdoc wrote before it recorded the chunker's version."""
    path = index / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    del manifest["model"]["chunker"]["version"]
    path.write_text(json.dumps(manifest), encoding="utf-8")


@pytest.fixture(scope="module")
def encoder(tiny_bert: Path) -> GraphDocEncoder:
    return GraphDocEncoder.from_pretrained(str(tiny_bert), device="cpu")  # a plain encoder: rebuilt by search


def test_adding_to_an_index_of_an_earlier_chunker_is_warned_of(encoder, tmp_path: Path, caplog) -> None:
    index = tmp_path / "index"
    build_index(encoder, write_jsonl(tmp_path / "a.jsonl", make_docs(6)), index)
    assert json.loads((index / "manifest.json").read_text())["model"]["chunker"]["version"] == CHUNKER_VERSION == 2
    more = write_jsonl(tmp_path / "b.jsonl", make_docs(3, start=6))
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        build_index(encoder, more, index)  # the same chunker: no word
    assert warnings(caplog) == []
    _as_before_stop_32(index)
    even_more = write_jsonl(tmp_path / "c.jsonl", make_docs(2, start=9))
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        manifest = build_index(encoder, even_more, index)
    assert manifest.counts["documents"] == 11
    assert warnings(caplog) == [
        f"{index} was chunked by an earlier graphdoc (chunker version 1, this one's 2: a sentence over the word limit "
        "ends differently): documents added now are chunked by this one, and the index mixes the two; rebuild it for "
        "one chunking"]
    # searched without a model, the index's plain encoder is rebuilt from the identity, version or not
    hits = Searcher(index).search("zebra", k=3, mode="dense")
    assert len(hits) == 3


def test_merging_parts_of_two_chunkers_is_warned_of(encoder, tmp_path: Path, caplog) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", make_docs(8))
    build_index(encoder, corpus, tmp_path / "p1", part="1/2")
    build_index(encoder, corpus, tmp_path / "p2", part="2/2")
    _as_before_stop_32(tmp_path / "p1")
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        manifest = merge_indexes(tmp_path / "merged", [tmp_path / "p1", tmp_path / "p2"])
    assert manifest.counts["documents"] == 8
    assert warnings(caplog) == [
        f"the parts were chunked by different graphdoc chunkers ({tmp_path / 'p1'} version 1, {tmp_path / 'p2'} "
        "version 2: a sentence over the word limit ends differently): the merged index mixes the two; rebuild the "
        "older parts for one chunking"]


def test_an_embed_saved_by_an_earlier_chunker_starts_again(tiny_bert: Path, tmp_path: Path, capsys,
                                                           restore_cli_state, monkeypatch) -> None:
    from graphdoc.cli import embed as embed_cli
    from graphdoc.cli import main

    monkeypatch.setattr(embed_cli, "SAVE_EVERY", 2)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", make_docs(5))
    out = tmp_path / "emb.npy"
    partial = embed_cli.partial_path(out)

    calls = {"n": 0}
    real = GraphDocEncoder.iter_forward

    def stop_after_two_saves(self, *args, **kwargs):
        for out_ in real(self, *args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 3:
                raise KeyboardInterrupt
            yield out_

    monkeypatch.setattr(GraphDocEncoder, "iter_forward", stop_after_two_saves)
    argv = ["embed", "--corpus", str(corpus), "--output", str(out), "--model", str(tiny_bert), "--batch-size", "2"]
    assert main(argv) != 0
    state = json.loads((partial / "state.json").read_text())
    assert state["documents"] == 4
    for key in ("model",):  # as graphdoc wrote it before stop 32: no chunker version
        del state["run"][key]["chunker"]["version"]
    (partial / "state.json").write_text(json.dumps(state))
    monkeypatch.setattr(GraphDocEncoder, "iter_forward", real)
    capsys.readouterr()
    assert main(argv) == 0
    assert ("holds what an embed of another model, corpus, --normalize, --truncate-dim or graphdoc chunker left: "
            "starting again" in capsys.readouterr().err)
    assert np.load(out).shape[0] == 5 and not partial.exists()


def test_resuming_a_first_build_an_earlier_chunker_began_is_warned_of(encoder, tmp_path: Path, caplog,
                                                                     monkeypatch) -> None:
    """(review: the check wanted the counts a finished build has; a first build stopped part-way has only shards)"""
    from graphdoc.retrieval import builder
    from graphdoc.retrieval.builder import IndexSettings

    corpus = write_jsonl(tmp_path / "corpus.jsonl", make_docs(6))
    index = tmp_path / "index"
    real = builder._encode_shard
    calls = []

    def stop_after_one(*args, **kwargs):
        if calls:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(builder, "_encode_shard", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        build_index(encoder, corpus, index, IndexSettings(shard_size=2))
    monkeypatch.setattr(builder, "_encode_shard", real)
    _as_before_stop_32(index)
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        assert build_index(encoder, corpus, index, IndexSettings(shard_size=2)).counts["documents"] == 6
    assert [m.split(" (")[0] for m in warnings(caplog)] == [f"{index} was chunked by an earlier graphdoc"]
