"""Searching an index folder: exact dense, BM25 and hybrid scores, readable hits, FAISS variants, no passages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from _retrieval_helpers import (
    searched_vectors,
    RARE,
    cli,
    error_line,
    make_docs,
    manifest_json,
    unit,
    write_jsonl,
)

from graphdoc.errors import GraphDocError
from graphdoc.retrieval.bm25 import BM25Config, BM25Index
from graphdoc.retrieval.builder import IndexSettings, build_index
from graphdoc.retrieval.fusion import FusionConfig, fuse
from graphdoc.retrieval.searcher import Hit, Searcher

QUERIES = {"q1": "graph attention network", "q2": "zebra fox", "q3": "lazy dog sentence"}

pytestmark = pytest.mark.usefixtures("restore_cli_state")


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    return make_docs(20)


@pytest.fixture(scope="module")
def corpus(docs, tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", docs)


@pytest.fixture(scope="module")
def index(model, corpus, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("index") / "index"
    build_index(model, str(corpus), folder, IndexSettings(shard_size=3))
    return folder


class Expected:
    """Scores computed here from the model's own outputs, independently of the index files."""

    def __init__(self, model, docs: list[dict]) -> None:
        self.model, self.ids = model, [d["_id"] for d in docs]
        self.docs = unit(model.encode(docs))  # [n, d]
        self.passages = [unit(out.passage_embeddings(i).numpy())
                         for out in model.iter_forward(docs) for i in range(len(out.documents))]
        self.bm25 = BM25Index.build([f"{d['title']} {d['text']}" for d in docs], BM25Config())

    def query(self, text: str) -> np.ndarray:
        return unit(self.model.encode_queries([text]))[0]

    def dense(self, text: str, passage_weight: float) -> dict[str, float]:
        q = self.query(text)
        best = np.array([(p @ q).max() for p in self.passages])
        scores = (1 - passage_weight) * (self.docs @ q) + passage_weight * best
        return dict(zip(self.ids, scores.tolist()))

    def sparse(self, text: str) -> dict[str, float]:
        return dict(zip(self.ids, self.bm25.get_scores(text).tolist()))


@pytest.fixture(scope="module")
def expected(model, docs) -> Expected:
    return Expected(model, docs)


def with_settings(index: Path, tmp_path: Path, **changes) -> Path:
    """A copy of ``index`` with manifest entries changed (e.g. ``dense={"passage_weight": 0}``)."""
    copy = Path(shutil.copytree(index, tmp_path / "index"))
    manifest = manifest_json(copy)
    manifest.update(changes)
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return copy


def assert_ranked(run: dict[str, float]) -> None:
    assert list(run.values()) == sorted(run.values(), reverse=True)


# ------------------------------------------------------------------ BM25
def test_bm25_ranks_the_document_with_a_rare_word_first(index, model, expected) -> None:
    searcher = Searcher(index, model=model)
    run = searcher.batch_search({"z": "zebra", "zf": "zebra fox", "none": "xylophone"}, k=5, mode="bm25")
    assert list(run["z"]) == ["d007"]  # the only document with the word; no-match documents are left out
    assert next(iter(run["zf"])) == "d007" and len(run["zf"]) == 5
    assert run["zf"] == pytest.approx(dict(sorted(expected.sparse("zebra fox").items(),
                                                  key=lambda kv: (-kv[1], kv[0]))[:5]))
    assert run["none"] == {}


# ------------------------------------------------------------------ dense
@pytest.mark.parametrize("passage_weight", [0.0, 1.0, 0.3])
def test_dense_scores_are_exact(index, model, expected, tmp_path, passage_weight) -> None:
    """``(1 - w) * cos(q, document node) + w * max over passage nodes cos(q, p)`` for every document."""
    searcher = Searcher(with_settings(index, tmp_path, dense={"passage_weight": passage_weight}), model=model)
    run = searcher.batch_search(QUERIES, k=20, mode="dense")
    assert list(run) == list(QUERIES)
    for qid, text in QUERIES.items():
        assert run[qid] == pytest.approx(expected.dense(text, passage_weight), abs=1e-5)
        assert_ranked(run[qid])


def test_passage_weight_changes_the_scores(expected) -> None:
    """The exact-score test above would not notice a searcher ignoring the weight if these agreed."""
    doc_only, passages_only = expected.dense(QUERIES["q1"], 0.0), expected.dense(QUERIES["q1"], 1.0)
    assert max(abs(doc_only[i] - passages_only[i]) for i in doc_only) > 1e-2


def test_default_passage_weight_is_written_to_the_manifest_and_used(index, model, expected) -> None:
    searcher = Searcher(index, model=model)
    assert searcher.manifest.dense == {"passage_weight": 1.0}
    assert searcher.manifest.fusion == {"method": "weighted", "alpha": 0.6, "normalization": "zscore", "rrf_k": 60}
    run = searcher.batch_search(QUERIES, k=20, mode="dense")
    assert run["q3"] == pytest.approx(expected.dense(QUERIES["q3"], 1.0), abs=1e-5)


def test_a_bad_passage_weight_in_the_manifest_is_refused(index, tmp_path) -> None:
    with pytest.raises(GraphDocError, match="passage_weight must be between 0 and 1; got 1.5"):
        Searcher(with_settings(index, tmp_path, dense={"passage_weight": 1.5}))


# ------------------------------------------------------------------ hybrid
@pytest.mark.parametrize("fusion", [FusionConfig(), FusionConfig(alpha=0.8, normalization="zscore"),
                                    FusionConfig(method="rrf")])
def test_hybrid_fuses_the_exact_scores_over_the_union(index, model, expected, fusion) -> None:
    searcher = Searcher(index, model=model)
    run = searcher.batch_search(QUERIES, k=7, mode="hybrid", fusion=fusion)
    for qid, text in QUERIES.items():
        want = fuse(expected.dense(text, 1.0), expected.sparse(text), fusion, k=7)
        # float32 index vectors against float64 expectations; z-scores scale the difference by 1/std
        assert run[qid] == pytest.approx(want, abs=1e-4)
        assert len(run[qid]) == 7
        assert_ranked(run[qid])


def test_hybrid_uses_the_fusion_stored_in_the_manifest(index, model, expected, tmp_path) -> None:
    stored = {"method": "weighted", "alpha": 0.0, "normalization": "minmax", "rrf_k": 60}
    searcher = Searcher(with_settings(index, tmp_path, fusion=stored), model=model)
    assert searcher.fusion == FusionConfig(alpha=0.0)
    run = searcher.batch_search(QUERIES, k=20, mode="hybrid")
    assert run["q2"] == pytest.approx(fuse(expected.dense(QUERIES["q2"], 1.0), expected.sparse(QUERIES["q2"]),
                                           FusionConfig(alpha=0.0), k=20), abs=1e-5)
    assert next(iter(run["q2"])) == "d007"


def test_component_runs_score_the_union_with_both_retrievers(index, model, expected) -> None:
    dense, sparse = Searcher(index, model=model).component_runs({"q": "zebra fox"}, depth=3)
    union = set(dense["q"])
    assert union == set(sparse["q"]) and len(union) >= 3
    assert dense["q"] == pytest.approx({i: s for i, s in expected.dense("zebra fox", 1.0).items() if i in union},
                                       abs=1e-5)
    assert sparse["q"] == pytest.approx({i: s for i, s in expected.sparse("zebra fox").items() if i in union})


# ------------------------------------------------------------------ readable hits
def test_search_hits_carry_title_rank_and_their_best_passage(index, model, docs, expected) -> None:
    searcher = Searcher(index, model=model)
    by_id = {d["_id"]: d for d in docs}
    for mode in ("dense", "hybrid", "bm25"):
        hits = searcher.search("zebra fox", k=4, mode=mode)
        run = searcher.batch_search({"q": "zebra fox"}, k=4, mode=mode)["q"]
        assert [h.doc_id for h in hits] == list(run) and [h.score for h in hits] == list(run.values())
        assert [h.rank for h in hits] == [1, 2, 3, 4]
        for hit in hits:
            doc, p = by_id[hit.doc_id], hit.passage
            record = searcher.docstore[searcher.doc_ids.index(hit.doc_id)]
            assert hit.title == doc["title"]
            assert [p["start"], p["end"], p["section"], p["section_title"]] == record["passages"][p["index"]]
            assert p["snippet"] == doc["text"][p["start"]:p["end"]]  # short passages are shown whole
            if mode != "bm25":  # the passage nearest the query vector
                q = expected.query("zebra fox")
                scores = expected.passages[int(hit.doc_id[1:])] @ q
                assert p["index"] == int(np.argmax(scores)) and p["score"] == pytest.approx(scores.max(), abs=1e-5)
    top = searcher.search("zebra", k=1, mode="bm25")[0]
    assert (top.doc_id, top.title, top.passage["index"]) == ("d007", "Title 7", 1)
    assert "zebra" in top.passage["snippet"] and top.passage["score"] == 1.0  # one word shared


def test_long_passages_are_cut_into_snippets(index) -> None:
    text = " ".join(f"word{i}" for i in range(80))
    record = {"id": "x", "title": "", "text": text, "passages": [[0, 10, 0, ""], [11, len(text), 1, "Body"]]}
    passage = Searcher(index).best_passage("word70 word71", record, 0, None)
    assert (passage["index"], passage["start"], passage["end"], passage["section_title"]) == (1, 11, len(text), "Body")
    assert passage["snippet"] == text[11:311].rsplit(" ", 1)[0] + " ..."  # cut at a word, at most 300 characters


def test_k_larger_than_the_corpus_returns_every_document(index, model) -> None:
    searcher = Searcher(index, model=model)
    for mode in ("dense", "hybrid"):
        run = searcher.batch_search(QUERIES, k=50, mode=mode)
        assert all(sorted(docs) == [f"d{i:03d}" for i in range(20)] for docs in run.values())
    assert len(searcher.batch_search(["title"], k=50, mode="bm25")["0"]) == 20  # every title matches
    hits = searcher.search("graph", k=50, mode="hybrid")
    assert [h.rank for h in hits] == list(range(1, 21))


def test_query_list_gets_positional_ids_and_unknown_mode_is_refused(index, model) -> None:
    searcher = Searcher(index, model=model)
    assert list(searcher.batch_search(["zebra", "walrus"], k=1, mode="bm25").items()) == \
        [("0", pytest.approx({"d007": searcher.bm25.get_scores("zebra")[7]})),
         ("1", pytest.approx({"d012": searcher.bm25.get_scores("walrus")[12]}))]
    with pytest.raises(GraphDocError, match="unknown mode 'sparse'; valid: dense, bm25, hybrid"):
        searcher.batch_search(["zebra"], mode="sparse")
    with pytest.raises(GraphDocError, match="index folder not found"):
        Searcher(index.parent / "missing")


def test_model_is_loaded_from_the_manifest_when_none_is_given(index, model) -> None:
    lazy = Searcher(index)
    assert lazy._model is None
    assert lazy.batch_search(QUERIES, k=5, mode="bm25") == Searcher(index).batch_search(QUERIES, k=5, mode="bm25")
    assert lazy._model is None  # BM25 needs no model
    loaded, given = (s.batch_search(QUERIES, k=5, mode="dense") for s in (lazy, Searcher(index, model=model)))
    assert all(loaded[q] == pytest.approx(given[q], abs=1e-6) for q in QUERIES)


# ------------------------------------------------------------------ index variants
def test_hnsw_index_finds_what_the_flat_index_finds(index, model, corpus, tmp_path) -> None:
    manifest = build_index(model, str(corpus), tmp_path / "hnsw", IndexSettings(faiss_factory="HNSW32"))
    assert manifest.faiss_factory == "HNSW32"
    hnsw = Searcher(tmp_path / "hnsw", model=model).batch_search(QUERIES, k=5, mode="dense")
    flat = Searcher(index, model=model).batch_search(QUERIES, k=5, mode="dense")
    for q in QUERIES:
        assert hnsw[q] == pytest.approx(flat[q], abs=1e-6) and list(hnsw[q]) == list(flat[q])


def test_ivf_index_is_trained_on_the_corpus_and_scores_exactly(model, corpus, expected, tmp_path) -> None:
    build_index(model, str(corpus), tmp_path / "ivf", IndexSettings(faiss_factory="IVF4,Flat"))
    ivf = with_settings(tmp_path / "ivf", tmp_path / "copy", dense={"passage_weight": 0.0})
    searcher = Searcher(ivf, model=model)
    assert (searcher.dense.doc_index.nlist, searcher.dense.nprobe) == (4, 4)  # at least 16 lists: all four
    run = searcher.batch_search(QUERIES, k=20, mode="dense")
    for qid, text in QUERIES.items():
        want = expected.dense(text, 0.0)
        assert len(run[qid]) == min(20, len(want))  # every list probed: what a Flat index finds
        assert list(run[qid].values()) == sorted(run[qid].values(), reverse=True)
        assert min(run[qid].values()) >= sorted(want.values(), reverse=True)[len(run[qid]) - 1] - 1e-5
        assert run[qid] == pytest.approx({i: want[i] for i in run[qid]}, abs=1e-5)
    searcher.dense.nprobe = 1  # FAISS's own default: one list of four
    assert searcher.dense.nprobe == 1
    run = searcher.batch_search(QUERIES, k=20, mode="dense")
    for qid, text in QUERIES.items():
        want = expected.dense(text, 0.0)
        assert 1 <= len(run[qid]) < len(want)  # the candidates FAISS found in that list
        assert run[qid] == pytest.approx({i: want[i] for i in run[qid]}, abs=1e-5)
    with pytest.raises(GraphDocError, match=r"^nprobe must be at least 1; got 0$"):
        searcher.dense.nprobe = 0


def test_nprobe_default_and_the_search_option(model, corpus, tmp_path, capsys) -> None:
    from graphdoc.retrieval.dense import default_nprobe

    assert [default_nprobe(n) for n in (1, 8, 16, 64, 1024, 4096, 65536)] == [1, 8, 16, 16, 128, 256, 256]
    build_index(model, str(corpus), tmp_path / "flat")
    capsys.readouterr()
    assert cli("search", "--index-dir", tmp_path / "flat", "zebra", "--nprobe", 4) == 1
    assert error_line(capsys, "search") == (f"graphdoc search: error: --nprobe applies to IVF indexes; "
                                            f"{tmp_path / 'flat'} is 'Flat'")
    assert cli("search", "--index-dir", tmp_path / "flat", "zebra", "--nprobe", 0) == 1
    assert error_line(capsys, "search") == "graphdoc search: error: --nprobe must be at least 1; got 0"
    assert cli("search", "--index-dir", tmp_path / "flat", "zebra", "--mode", "bm25", "--nprobe", 4) == 1
    assert error_line(capsys, "search") == "graphdoc search: error: --nprobe is not used with --mode bm25"


def test_ip_metric_keeps_raw_vectors(model, docs, corpus, tmp_path) -> None:
    build_index(model, str(corpus), tmp_path / "ip", IndexSettings(metric="ip"))
    raw = model.encode(docs)
    np.testing.assert_allclose(searched_vectors(tmp_path / "ip"), raw, atol=1e-5)
    searcher = Searcher(with_settings(tmp_path / "ip", tmp_path / "copy", dense={"passage_weight": 0.0}), model=model)
    q = model.encode_queries(["zebra fox"])[0]
    assert searcher.batch_search(["zebra fox"], k=20, mode="dense")["0"] == \
        pytest.approx(dict(zip([d["_id"] for d in docs], (raw @ q).tolist())), rel=1e-5)


def test_index_without_passages_scores_documents_only(model, docs, corpus, expected, tmp_path) -> None:
    manifest = build_index(model, str(corpus), tmp_path / "plain", IndexSettings(store_passages=False))
    assert manifest.counts["passages"] == 0 and manifest.store_passages is False
    assert not {"passage_vectors.npy", "passage_ptr.npy", "passages.faiss"} & \
        {p.name for p in (tmp_path / "plain" / "final").iterdir()}
    searcher = Searcher(tmp_path / "plain", model=model)  # default passage weight 1.0: no passages to weigh
    run = searcher.batch_search(QUERIES, k=20, mode="dense")
    for qid, text in QUERIES.items():
        assert run[qid] == pytest.approx(expected.dense(text, 0.0), abs=1e-5)
    hits = {h.doc_id: h for h in searcher.search("zebra", k=20, mode="dense")}
    assert len(hits) == 20 and "zebra" in hits["d007"].passage["snippet"]  # chosen by shared words
    assert isinstance(hits["d007"], Hit) and hits["d007"].passage["index"] == 1
    assert set(RARE) <= set(hits)


# ------------------------------------------------------------------ many queries
@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_queries_searched_a_block_at_a_time_rank_as_all_at_once(index, model, monkeypatch, mode) -> None:
    """Blocks of queries (QUERY_BLOCK) give the run of one block, query vectors given or not; the bar counts the
    queries (in a log, as stderr is here: a line as it starts and one as it ends)."""
    import io

    from graphdoc.retrieval import searcher as searcher_module

    queries = {f"q{i}": text for i, text in enumerate(["zebra fox", "graph attention network", "lazy dog sentence",
                                                         "fox", "sentence network zebra"])}
    with Searcher(index, model=model) as searcher:
        whole = searcher.batch_search(queries, k=7, mode=mode)
        dense, sparse = searcher.component_runs(queries, depth=7)
        vectors = searcher.encode_queries(queries)
        monkeypatch.setattr(searcher_module, "QUERY_BLOCK", 2)
        err = io.StringIO()
        monkeypatch.setattr("sys.stderr", err)
        blocks = searcher.batch_search(queries, k=7, mode=mode, show_progress_bar=True)
        given = searcher.batch_search(queries, k=7, mode=mode, query_vectors=vectors)
        runs = searcher.component_runs(queries, depth=7, show_progress_bar=True)
    # (a query encoded beside others may differ in its last bits (its batch is padded otherwise), which z-scores
    # of hybrid fusion magnify)
    for run, reference in ((blocks, whole), (given, whole), (runs[0], dense), (runs[1], sparse)):
        assert list(run) == list(reference)
        for qid, ranked in run.items():
            assert list(ranked) == list(reference[qid]) and ranked == pytest.approx(reference[qid], abs=1e-4)
    ends = [line for line in err.getvalue().splitlines() if not line.startswith("Searching:   0%|")]
    assert len(ends) == 2 and all(line.startswith("Searching: 100%") and "| 5/5 " in line for line in ends)
