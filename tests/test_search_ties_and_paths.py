"""Search ranks equal scores by document id in every mode, whatever the rows' order in the index; hybrid search
scores each candidate once (the dense search's own scores, BM25's of the same corpus scoring) and fuses arrays,
with the scores and order of fusing dicts; a query's passage scores come from one product with all passage vectors
or from its candidates' alone, with the same maxima."""

from __future__ import annotations

import numpy as np
import pytest
from _retrieval_helpers import make_docs, write_jsonl

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from graphdoc.retrieval import dense_searcher  # noqa: E402
from graphdoc.retrieval.builder import IndexSettings, build_index  # noqa: E402
from graphdoc.retrieval.dense import prepare_vectors  # noqa: E402
from graphdoc.retrieval.fusion import FusionConfig, fuse, fuse_arrays  # noqa: E402
from graphdoc.retrieval.merge import merge_indexes  # noqa: E402
from graphdoc.retrieval.searcher import Searcher  # noqa: E402

pytestmark = pytest.mark.usefixtures("restore_cli_state")

TWINS = [{"_id": "zz", "title": "", "text": "alpha beta gamma delta."},
         {"_id": "aa", "title": "", "text": "alpha beta gamma delta."},
         {"_id": "mm", "title": "", "text": "something else entirely here."}]


@pytest.fixture(scope="module")
def twins(model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("twins")
    build_index(model, str(write_jsonl(folder / "c.jsonl", TWINS)), folder / "index", IndexSettings())
    return Searcher(folder / "index", model=model)


def test_equal_scores_rank_by_document_id_not_by_row(twins):
    assert twins.doc_ids[:2] == ["zz", "aa"]  # "zz" is the first row
    assert list(twins.batch_search({"q": "alpha"}, k=1, mode="bm25")["q"]) == ["aa"]
    both = twins.batch_search({"q": "alpha"}, k=2, mode="bm25")["q"]
    assert list(both) == ["aa", "zz"] and both["aa"] == both["zz"]
    # dense scores of byte-identical vectors can differ in their last bits with their rows' places in a product
    for mode in ("dense", "hybrid"):
        scores = twins.batch_search({"q": "alpha"}, k=2, mode=mode)["q"]
        assert set(scores) == {"aa", "zz"} and scores["aa"] == pytest.approx(scores["zz"], abs=1e-6)


def test_dense_ties_rank_by_document_id(twins, monkeypatch):
    """Where the dense scores are equal (here: forced), the document id decides, not the row."""
    monkeypatch.setattr(twins.dense, "score", lambda query, rows, all_passages=None: np.ones(len(rows)))
    assert list(twins.batch_search({"q": "alpha"}, k=3, mode="dense")["q"]) == ["aa", "mm", "zz"]


def test_faiss_keeps_a_tie_at_its_cut_whole():
    from graphdoc.retrieval.dense import DenseIndex

    vectors = np.ones((150, 4), dtype=np.float32)
    index = DenseIndex.build(vectors, "Flat", "ip")
    query = np.ones((1, 4), dtype=np.float32)
    assert sorted(index.search_ties(query, 1)[0].tolist()) == list(range(150))  # past FAISS's first depth too
    vectors[7] *= 2
    vectors[140:] *= 0.5
    index = DenseIndex.build(vectors, "Flat", "ip")
    assert index.search_ties(query, 1)[0].tolist() == [7]  # no tie at the cut: the top alone
    second = index.search_ties(query, 2)[0].tolist()
    assert second[0] == 7 and sorted(second[1:]) == [r for r in range(140) if r != 7]
    assert len(index.search_ties(query, 140)[0]) == 140  # 7, then the 139 of one score: the cut falls after them
    assert len(index.search_ties(query, 145)[0]) == 150  # into the last 10, tied: all of them
    assert len(index.search_ties(query, 500)[0]) == 150


def test_dense_ties_at_the_candidate_cut_rank_by_document_id(model, tmp_path, monkeypatch):
    """150 documents with equal dense scores, indexed in reverse id order: -k 1 is the first of -k 150 (FAISS
    cut the tie in row order, so -k 1 gave a document from the middle)."""
    from graphdoc.retrieval.dense import DenseIndex
    from graphdoc.retrieval.dense_searcher import DenseSettings

    docs = make_docs(150)[::-1]
    build_index(model, str(write_jsonl(tmp_path / "c.jsonl", docs)), tmp_path / "index", IndexSettings())
    searcher = Searcher(tmp_path / "index", model=model)
    dimension = searcher.manifest.dimension
    searcher.dense.doc_index = DenseIndex.build(np.ones((150, dimension), dtype=np.float32), "Flat", "ip")
    searcher.dense.settings = DenseSettings(0.0)  # the document node alone
    monkeypatch.setattr(searcher.dense, "score", lambda query, rows, all_passages=None: np.ones(len(rows)))
    query = np.ones((1, dimension), dtype=np.float32)
    whole = list(searcher.batch_search(["x"], k=150, mode="dense", query_vectors=query)["0"])
    assert whole == sorted(d["_id"] for d in docs)
    for k in (1, 5, 100):
        assert list(searcher.batch_search(["x"], k=k, mode="dense", query_vectors=query)["0"]) == whole[:k]


def test_a_merge_in_another_order_ranks_bm25_ties_the_same(model, tmp_path):
    """(Dense scores of copies encoded in other batches differ in their last bits, as their vectors do.)"""
    docs = make_docs(12)
    docs += [{**docs[3], "_id": "d003-copy"}, {**docs[3], "_id": "a-copy"}]  # three documents with equal scores
    corpus = write_jsonl(tmp_path / "c.jsonl", docs)
    parts = []
    for part in ("1/2", "2/2"):
        parts.append(tmp_path / f"p{part[0]}")
        build_index(model, str(corpus), parts[-1], IndexSettings(), part=part)
    runs = []
    for name, order in (("forward", parts), ("backward", parts[::-1])):
        merge_indexes(tmp_path / name, order)
        searcher = Searcher(tmp_path / name, model=model)
        assert searcher.doc_ids.index("a-copy") > searcher.doc_ids.index("d003")
        runs.append(searcher.batch_search({"q": docs[3]["text"]}, k=3, mode="bm25")["q"])
    assert runs[0] == runs[1]
    assert list(runs[0]) == ["a-copy", "d003", "d003-copy"] and len(set(runs[0].values())) == 1


# ------------------------------------------------------------------ fusing arrays is fusing dicts
SCORES = st.lists(st.sampled_from([0.0, 0.0, 1.0, 2.5, -1.0, 3.0, 0.25]) | st.floats(-5, 5), min_size=1,
                  max_size=12)


@settings(max_examples=300, deadline=None, database=None)
@given(data=st.data(), method=st.sampled_from(["weighted", "rrf"]),
       normalization=st.sampled_from(["minmax", "zscore", "none"]), alpha=st.sampled_from([0.0, 0.3, 0.6, 1.0]),
       rrf_k=st.sampled_from([0, 1, 60, 2.5]), k=st.integers(1, 14))
def test_fuse_arrays_gives_what_fuse_gives_over_dicts(data, method, normalization, alpha, rrf_k, k):
    dense = data.draw(SCORES)
    sparse = data.draw(st.lists(st.sampled_from([0.0, 0.0, 1.5, 4.0, -0.5]) | st.floats(0, 9),
                                min_size=len(dense), max_size=len(dense)))
    ids = data.draw(st.lists(st.text("abcxyz", min_size=1, max_size=3), min_size=len(dense), max_size=len(dense),
                             unique=True))
    config = FusionConfig(method=method, alpha=alpha, normalization=normalization, rrf_k=rrf_k)
    want = fuse(dict(zip(ids, dense)), dict(zip(ids, sparse)), config, k)
    rank = np.empty(len(ids), dtype=np.int64)
    rank[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
    order, fused = fuse_arrays(np.array(dense), np.array(sparse), config, rank, k)
    assert dict(zip([ids[i] for i in order], fused.tolist())) == want
    assert [ids[i] for i in order] == list(want)


# ------------------------------------------------------------------ the hybrid path
@pytest.fixture(scope="module")
def searcher(model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("hybrid")
    build_index(model, str(write_jsonl(folder / "c.jsonl", make_docs(30))), folder / "index", IndexSettings())
    return Searcher(folder / "index", model=model)


QUERIES = {"q1": "graph attention network", "q2": "zebra fox", "q3": "lazy dog sentence", "q4": "xylophone"}


@pytest.mark.parametrize("fusion", [FusionConfig(), FusionConfig(alpha=0.8, normalization="zscore"),
                                    FusionConfig(method="rrf")])
def test_hybrid_gives_what_scoring_the_union_afresh_gives(searcher, fusion):
    """The search before it scored the union of both candidate lists again with both retrievers, over dicts."""
    run = searcher.batch_search(QUERIES, k=10, mode="hybrid", fusion=fusion, depth=6)
    vectors = searcher.encode_queries(QUERIES)
    dense = searcher.dense.search(vectors, 10, searcher.name_rank)
    rows, _ = searcher.bm25.search(list(QUERIES.values()), 10, tie_rank=searcher.name_rank)
    for i, (qid, text) in enumerate(QUERIES.items()):
        union = np.union1d(dense[i][0], rows[i][rows[i] >= 0])
        query = prepare_vectors(vectors[i][None, :], searcher.manifest.metric)[0]
        names = [searcher.doc_ids[r] for r in union]
        want = fuse(dict(zip(names, searcher.dense.score(query, union).tolist())),
                    dict(zip(names, searcher.bm25.get_scores(text)[union].tolist())), fusion, 10)
        assert list(run[qid]) == list(want)
        # float32 products, of all passages a block of queries at a time or of the candidates', differ in the
        # last bits, which z-scores scale by 1/std
        assert run[qid] == pytest.approx(want, abs=1e-4)


def test_bm25_scores_the_rows_asked_for_from_the_same_scoring(searcher):
    texts = list(QUERIES.values())
    asked = [np.array([0, 5, 29]), np.array([], dtype=np.int64), np.array([7]), np.array([1, 2])]
    indices, scores, at_rows = searcher.bm25.search_scoring(texts, 5, asked)
    plain = searcher.bm25.search(texts, 5)
    np.testing.assert_array_equal(indices, plain[0])
    np.testing.assert_array_equal(scores, plain[1])
    for text, rows, got in zip(texts, asked, at_rows):
        np.testing.assert_array_equal(got, searcher.bm25.get_scores(text)[rows])


@pytest.mark.parametrize("share", [0.0, 2.0])  # every query through one product; every query through its own
def test_best_passage_scores_are_the_same_either_way(searcher, monkeypatch, share):
    vectors = searcher.encode_queries(QUERIES)
    ptr, passages, docs = searcher.dense.passage_ptr, searcher.dense.passage_vectors, searcher.dense.doc_vectors
    monkeypatch.setattr(dense_searcher, "FULL_PRODUCT_SHARE", share)
    monkeypatch.setattr(dense_searcher, "QUERY_BLOCK", 3)  # blocks of 3 queries, the last of 1
    blocks = list(searcher.dense.search_blocks(vectors, 8))
    assert [len(b) for b in blocks] == [3, 1]
    for query, (rows, scores, score_more) in zip(prepare_vectors(vectors, searcher.manifest.metric), [r for b in blocks for r in b]):
        w = searcher.dense.settings.passage_weight
        want = [(1 - w) * (docs[r] @ query) + w * max(passages[ptr[r]:ptr[r + 1]] @ query) for r in rows]
        np.testing.assert_allclose(scores, want, rtol=0, atol=1e-6)
        others = np.setdiff1d(np.arange(30), rows)[:5]
        np.testing.assert_allclose(score_more(others), searcher.dense.score(query, others), rtol=0, atol=1e-6)


@pytest.mark.parametrize(("share", "blocks"), [(0.0, [1, 1, 1, 1]), (2.0, [4])])
def test_only_queries_scored_from_all_passages_are_cut_to_the_memory_budget(searcher, monkeypatch, share, blocks):
    """FAISS takes its blocks of queries whatever the passages; a block is cut where its queries' scores of every
    passage would pass the budget (here one query's), and nowhere else."""
    vectors = searcher.encode_queries(QUERIES)
    want = searcher.dense.search(vectors, 8)
    monkeypatch.setattr(dense_searcher, "FULL_PRODUCT_SHARE", share)
    monkeypatch.setattr(dense_searcher, "FULL_PRODUCT_BYTES", 4 * len(searcher.dense.passage_vectors))
    got = list(searcher.dense.search_blocks(vectors, 8))
    assert [len(block) for block in got] == blocks
    for (rows, scores, _), (want_rows, want_scores) in zip([r for b in got for r in b], want):
        np.testing.assert_array_equal(rows, want_rows)
        np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-6)


def test_bm25_search_and_eval_import_neither_torch_nor_transformers(searcher, tmp_path):
    """They load no model: importing torch and transformers took ~2.5 s of a one-query BM25 search's 2.8 s."""
    import subprocess
    import sys

    (tmp_path / "qrels.txt").write_text("q 0 d001 1\n", encoding="utf-8")
    (tmp_path / "run.trec").write_text("q Q0 d001 1 2.0 x\n", encoding="utf-8")
    script = (
        "import sys\nfrom graphdoc.cli import main\n"
        f"assert main(['-q', 'search', '--index-dir', {str(searcher.index_dir)!r}, 'fox', '--mode', 'bm25']) == 0\n"
        f"assert main(['-q', 'eval', '--run', {str(tmp_path / 'run.trec')!r}, '--qrels', "
        f"{str(tmp_path / 'qrels.txt')!r}]) == 0\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("hub_logging", ["import huggingface_hub.utils.logging", "pass"])
def test_huggingface_hub_records_print_once(tmp_path, hub_logging):
    """huggingface_hub prints its records (retries on an unreachable hub: 22 lines) with a handler of its own once
    its logging is set up (transformers does); graphdoc's handler printed each a second time."""
    import subprocess
    import sys

    script = (
        f"import logging\n{hub_logging}\nimport graphdoc.cli.eval as command\nfrom graphdoc.cli import main\n"
        "def run(args):\n"
        "    logging.getLogger('huggingface_hub.utils._http').warning('Retrying in 1s [Retry 1/5].')\n"
        "    logging.getLogger('graphdoc.cli').warning('a warning of graphdoc')\n"
        "    return 0\n"
        "command.run = run\n"
        "raise SystemExit(main(['eval', '--run', 'r', '--qrels', 'q']))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("Retrying in 1s [Retry 1/5].") == 1
    assert "WARNING graphdoc.cli: a warning of graphdoc" in done.stderr
