"""One Searcher shared by threads, or by processes forked after it was opened, as a web service would share it:
the same hits as alone, one model load, explanations of its own build, errors that cross a process pool."""

from __future__ import annotations

import multiprocessing
import pickle
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from _retrieval_helpers import make_docs, save_model, write_jsonl

from graphdoc.errors import DamagedIndexError, GraphDocError
from graphdoc.fileio import UnreadableFileError
from graphdoc.retrieval import build_index
from graphdoc.retrieval.docstore import DocStore, write_store
from graphdoc.retrieval.searcher import Searcher

QUERIES = ["graph attention", "dense retrieval of passages", "the quick fox", "sparse fusion", "network"]


@pytest.fixture(scope="module")
def index(tiny_bert: Path, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("threads")
    model = save_model(tiny_bert, folder / "model")
    build_index(str(model), str(write_jsonl(folder / "corpus.jsonl", make_docs(60))), folder / "index")
    return folder / "index"


def hits_of(searcher: Searcher, query: str, mode: str) -> list[tuple]:
    return [(h.doc_id, h.score, h.title, h.passage) for h in searcher.search(query, k=8, mode=mode)]


def test_one_searcher_shared_by_threads_gives_each_the_hits_it_gives_alone(index):
    with Searcher(index) as searcher:
        calls = [(q, mode) for q in QUERIES for mode in ("bm25", "dense", "hybrid")] * 6
        alone = {call: hits_of(searcher, *call) for call in set(calls)}
        with ThreadPoolExecutor(8) as pool:
            shared = list(pool.map(lambda call: hits_of(searcher, *call), calls))
    assert shared == [alone[call] for call in calls]


def test_store_records_read_by_threads_are_the_ones_asked_for(tmp_path):
    records = [{"id": f"d{i}", "text": "x" * (i % 97)} for i in range(500)]
    write_store(tmp_path / "store.jsonl", records)
    store = DocStore(tmp_path / "store.jsonl")
    rows = np.random.default_rng(0).integers(0, 500, size=20_000).tolist()
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda row: store[row]["id"], rows))
    assert got == [f"d{row}" for row in rows]
    assert store[-1] == records[-1] and store[0] == records[0]
    with pytest.raises(IndexError):
        store[500]
    store.close()


def _bm25_ids(query: str) -> list[str]:
    return [h.doc_id + h.title for h in _FORKED.search(query, k=8, mode="bm25")]


_FORKED: Searcher | None = None


@pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
                    reason="needs the fork start method")
def test_a_searcher_opened_before_fork_serves_each_child(index):
    global _FORKED
    with Searcher(index) as searcher:
        _FORKED = searcher
        alone = [_bm25_ids(q) for q in QUERIES * 4]
        with multiprocessing.get_context("fork").Pool(4) as pool:  # children share the parent's store file
            forked = pool.map_async(_bm25_ids, QUERIES * 4, chunksize=1).get(timeout=120)
    _FORKED = None
    assert forked == alone


def test_index_errors_cross_a_process_pool(tmp_path):
    damaged = pickle.loads(pickle.dumps(DamagedIndexError(tmp_path, "final/ is missing")))
    assert isinstance(damaged, DamagedIndexError) and str(damaged).startswith(f"index {tmp_path} is damaged: final/")
    unreadable = pickle.loads(pickle.dumps(UnreadableFileError(tmp_path / "x.npy", "it is cut short")))
    assert (unreadable.path, unreadable.reason, str(unreadable)) == \
        (tmp_path / "x.npy", "it is cut short", f"{tmp_path / 'x.npy'} cannot be read (it is cut short)")


def test_threads_first_dense_searches_load_the_model_once(index, monkeypatch):
    import graphdoc.backbones as backbones

    loads = []
    real = backbones.load_index_model

    def slow_load(*args, **kwargs):
        loads.append(threading.get_ident())
        time.sleep(0.2)
        return real(*args, **kwargs)

    monkeypatch.setattr(backbones, "load_index_model", slow_load)
    with Searcher(index) as searcher:
        with ThreadPoolExecutor(6) as pool:
            models = set(map(id, pool.map(lambda _: searcher.model, range(6))))
    assert len(loads) == 1 and len(models) == 1


def test_explanations_come_from_the_searchers_own_build(index, tmp_path):
    from graphdoc.explain import explain_hits

    copy = Path(shutil.copytree(index, tmp_path / "index"))
    with Searcher(copy) as searcher:
        hits = searcher.search("graph attention", k=3)
        before = explain_hits(searcher, "graph attention", hits)
        # an add puts a new final/ in place (a folder renamed over the old): here, one with other attention
        new = Path(shutil.copytree(copy / "final", tmp_path / "new-final"))
        attention = np.load(new / "passage_attention.npy")
        np.save(new / "passage_attention.npy", attention[::-1].copy())
        (copy / "final").rename(tmp_path / "old-final")
        new.rename(copy / "final")
        assert explain_hits(searcher, "graph attention", hits) == before


def test_a_closed_searcher_refuses_a_search_that_finds_nothing(index):
    searcher = Searcher(index)
    searcher.close()
    with pytest.raises(GraphDocError, match=r"^the searcher of index .* is closed$"):
        searcher.search("qqqqzzzz", mode="bm25")


def test_a_closed_searcher_refuses_every_search_and_lets_go_of_its_maps(index):
    from graphdoc.explain import explain_hits

    searcher = Searcher(index)
    hits = searcher.search("graph attention", k=2, mode="bm25")
    searcher.close()
    assert searcher.dense is None and searcher.bm25 is None and searcher.passage_attention is None
    closed = r"^the searcher of index .* is closed$"
    with pytest.raises(GraphDocError, match=closed):
        searcher.batch_search(["graph attention"], mode="bm25")
    with pytest.raises(GraphDocError, match=closed):
        searcher.component_runs({"q": "graph attention"})
    with pytest.raises(GraphDocError, match=closed):
        explain_hits(searcher, "graph attention", hits)
