"""Findings of the black-box review of the Python retrieval API: natural inputs that gave a library traceback
or a silent wrong answer (one str for many queries, ``None`` queries, int ids in qrels, hits lists as a run,
a model name, a fusion dict, badly shaped query vectors), a folder left behind, and an unclosed docstore."""

from __future__ import annotations

import gc
import logging
import math
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from _retrieval_helpers import MODEL_CONFIG, cli, make_docs, write_jsonl

from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError, IndexMismatchError
from graphdoc.explain import compare_documents, explain_hits
from graphdoc.retrieval import FusionConfig, evaluate, evaluate_per_query, run_from_hits
from graphdoc.retrieval.builder import IndexSettings, build_index
from graphdoc.retrieval.searcher import Searcher, final_problem

pytestmark = pytest.mark.usefixtures("restore_cli_state")

SEVERAL = ("expected a list of query texts or a dict {query id: text}, got one str: pass [query], or use search() "
           "for one query")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("api-corpus") / "corpus.jsonl", make_docs(12))


@pytest.fixture(scope="module")
def index(model, corpus, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("api-index") / "index"
    build_index(model, str(corpus), folder)
    return folder


@pytest.fixture
def searcher(index, model):
    with Searcher(index, model=model) as searcher:
        yield searcher


# ------------------------------------------------------------------ 1. queries
def test_one_str_is_refused_where_several_queries_are_expected(searcher) -> None:
    for call in (lambda: searcher.batch_search("zebra", mode="bm25"), lambda: searcher.encode_queries("zebra"),
                 lambda: searcher.component_runs("zebra")):
        with pytest.raises(GraphDocError) as info:
            call()
        assert str(info.value) == SEVERAL


def test_a_query_that_is_not_a_str_is_refused_naming_it(searcher) -> None:
    with pytest.raises(GraphDocError, match=r"^query 1 \(counting from 0\) is of type NoneType, not str: None$"):
        searcher.batch_search(["zebra", None, math.nan], mode="dense")
    with pytest.raises(GraphDocError, match=r"^query 'q2' is of type float, not str: nan$"):
        searcher.batch_search({"q1": "zebra", "q2": math.nan}, mode="bm25")
    with pytest.raises(GraphDocError, match=r"^query 0 \(counting from 0\) is of type bytes, not str: b'fox'$"):
        searcher.encode_queries([b"fox"])
    for mode in ("bm25", "dense", "hybrid"):  # bm25 searched the word "None" and found nothing
        with pytest.raises(GraphDocError, match="^the query is of type NoneType, not str: None$"):
            searcher.search(None, mode=mode)


def test_encode_queries_takes_a_list_or_a_dict_of_texts(searcher, model) -> None:
    expected = model.encode_queries(["zebra", "fox"], show_progress_bar=False)
    assert np.array_equal(searcher.encode_queries({"a": "zebra", "b": "fox"}), expected)
    assert np.array_equal(searcher.encode_queries(("zebra", "fox")), expected)
    assert "[n, d]" in Searcher.encode_queries.__doc__


# ------------------------------------------------------------------ 2. evaluation
RUN = {"0": {"d007": 3.0, "d001": 2.0}, "1": {"d012": 1.0, "d003": 0.5}}
QRELS = {"0": {"d007": 1}, "1": {"d003": 1}}


def test_ids_of_runs_and_qrels_are_compared_as_strings() -> None:
    expected = evaluate(RUN, QRELS)
    assert expected["RR@100"] == pytest.approx(0.75)
    assert evaluate(RUN, {0: {"d007": 1}, 1: {"d003": 1}}) == expected
    assert evaluate({0: RUN["0"], 1: RUN["1"]}, QRELS) == expected
    assert evaluate({"q": {"7": 1.0}}, {"q": {7: 1}})["nDCG@10"] == 1.0
    assert evaluate_per_query(RUN, {0: {"d007": 1}}, ["RR@100"]) == {"0": {"RR@100": 1.0}}


@pytest.mark.parametrize("relevance", ["yes", 1.5, None])
def test_a_relevance_that_is_not_a_whole_number_is_one_line(relevance) -> None:
    with pytest.raises(GraphDocError) as info:
        evaluate(RUN, {"0": {"d007": relevance}})
    assert str(info.value) == (f"qrels: the relevance of document 'd007' for query '0' must be a whole number; "
                               f"got {relevance!r}")
    assert evaluate(RUN, {"0": {"d007": "1"}}) == evaluate(RUN, {"0": {"d007": 1}})


def test_a_score_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(GraphDocError, match=r"^the run's score of document 'd007' for query '0' is not a number: nan$"):
        evaluate({"0": {"d007": math.nan, "d001": 1.0}}, QRELS)


def test_search_hits_are_a_run(searcher) -> None:
    hits = searcher.search("zebra", k=3, mode="hybrid")
    run = run_from_hits({"q": hits})
    assert run == {"q": {h.doc_id: h.score for h in hits}}
    with pytest.raises(GraphDocError, match=r"^results must map each query id to its hits \(\{query id: "
                                            r"\[Hit, \.\.\.\]\}\); got list$"):
        run_from_hits(hits)  # (an AttributeError traceback)
    assert run == searcher.batch_search({"q": "zebra"}, k=3, mode="hybrid")
    assert evaluate({"q": hits}, {"q": {"d007": 1}}) == evaluate(run, {"q": {"d007": 1}})
    with pytest.raises(GraphDocError) as info:
        evaluate({"q": ["d007", "d001"]}, {"q": {"d007": 1}})
    assert str(info.value) == ("query 'q' of the run holds a list: expected {doc id: score} or a list of search() "
                               "hits")


def test_a_run_none_of_whose_queries_is_judged_is_warned_about(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="graphdoc"):
        assert evaluate(RUN, {"zz": {"d007": 1}}, ["nDCG@10"]) == {"nDCG@10": 0.0}
        assert caplog.messages == [("none of the 2 queries of the run is judged in the qrels (ids are compared as "
                                    "strings): every figure is 0")]
        caplog.clear()
        evaluate(RUN, {"zz": {"d007": 1}}, ["nDCG@10"], warn_unjudged=False)
        evaluate(RUN, {0: {"d007": 1}}, ["nDCG@10"])
        assert caplog.messages == []
        assert evaluate({}, {"zz": {"d007": 1}}, ["nDCG@10"]) == {"nDCG@10": 0.0}
        assert caplog.messages == ["the run is empty: every figure is 0"]


# ------------------------------------------------------------------ 3. natural inputs
def test_build_index_refuses_a_corpus_of_another_type(model, tmp_path) -> None:
    with pytest.raises(GraphDocError) as info:  # (a list of documents is indexed: tests/test_index_memory.py)
        build_index(model, {d["_id"]: d["text"] for d in make_docs(3)}, tmp_path / "i")
    assert str(info.value) == ("corpus must be the path or name of a corpus, or a list of documents (dicts or "
                               "graphdoc.Document); got a dict")
    with pytest.raises(GraphDocError, match="^settings must be an IndexSettings; got dict$"):
        build_index(model, "corpus.jsonl", tmp_path / "i", settings={})
    assert not (tmp_path / "i").exists()


def test_a_model_can_be_named_by_its_folder(searcher, index, model, model_dir, corpus, tmp_path) -> None:
    manifest = build_index(str(model_dir), corpus, tmp_path / "i")
    assert manifest.model == build_index(model, corpus, tmp_path / "i").model
    expected = searcher.batch_search(["zebra"], k=2, mode="dense")
    for name in (str(model_dir), Path(model_dir)):
        with Searcher(index, model=name) as named:
            assert named.batch_search(["zebra"], k=2, mode="dense") == expected


def test_fusion_may_be_a_dict_of_settings_over_the_index_s(searcher) -> None:
    rrf = replace(searcher.fusion, method="rrf")
    assert searcher.search("zebra fox", k=5, fusion={"method": "rrf"}) == searcher.search("zebra fox", k=5, fusion=rrf)
    assert (searcher.batch_search(["zebra fox"], k=5, fusion={"alpha": 0.9})
            == searcher.batch_search(["zebra fox"], k=5, fusion=replace(searcher.fusion, alpha=0.9)))
    with pytest.raises(GraphDocError, match="^unknown FusionConfig key"):
        searcher.search("zebra", fusion={"methd": "rrf"})
    with pytest.raises(GraphDocError, match="^fusion must be a FusionConfig or a dict of its fields; got str$"):
        searcher.search("zebra", fusion="rrf")


@pytest.mark.parametrize("settings, message", [
    ({"alpha": "0.5"}, "alpha must be a number; got '0.5'"),
    ({"alpha": True}, "alpha must be a number; got True"),
    ({"alpha": math.nan}, "alpha must be between 0 and 1, got nan"),
    ({"rrf_k": "60"}, "rrf_k must be a number; got '60'"),
    ({"rrf_k": -1}, "rrf_k must be >= 0, got -1"),
])
def test_fusion_settings_of_the_wrong_type_are_one_line(settings, message) -> None:
    with pytest.raises(GraphDocError) as info:
        FusionConfig(**settings)
    assert str(info.value) == message


# ------------------------------------------------------------------ 4. query vectors
def test_query_vectors_must_have_one_row_per_query_of_the_index_s_dimension(searcher, model) -> None:
    vectors = model.encode_queries(["zebra", "walrus"], show_progress_bar=False)
    expected = searcher.batch_search(["zebra", "walrus"], k=3, mode="dense")
    assert searcher.batch_search(["zebra", "walrus"], k=3, mode="dense", query_vectors=vectors) == expected
    assert searcher.batch_search(["zebra", "walrus"], k=3, mode="dense",
                                 query_vectors=torch.from_numpy(vectors)) == expected
    d = model.dimension
    for vectors_, mode, shape, want in [(np.zeros((2, 16)), "dense", [2, 16], 2), (vectors[:1], "hybrid", [1, d], 2),
                                        (vectors[0], "dense", [d], 1)]:
        queries = ["zebra", "walrus"][:want]
        with pytest.raises(GraphDocError) as info:
            searcher.batch_search(queries, k=3, mode=mode, query_vectors=vectors_)
        assert str(info.value) == (f"query_vectors has shape {shape}; expected [{want}, {d}] (one row per query, "
                                   "the index's dimension)")


def test_query_vectors_that_are_not_finite_are_refused(searcher, model) -> None:
    """Dense search returned no hits for them, silently; hybrid failed on 'non-finite scores'."""
    vectors = model.encode_queries(["zebra", "walrus"], show_progress_bar=False)
    for bad in (np.nan, np.inf):
        given = vectors.copy()
        given[1, 3] = bad
        for mode in ("dense", "hybrid"):
            with pytest.raises(GraphDocError, match=r"^query_vectors row 1 holds a value that is not a finite number"):
                searcher.batch_search(["zebra", "walrus"], k=3, mode=mode, query_vectors=given)


def test_cosine_normalisation_of_huge_vectors_gives_unit_vectors() -> None:
    """A float32 sum of squares overflows past ~1e19: such a row became a zero vector (every score 0)."""
    from graphdoc.retrieval.dense import prepare_vectors

    out = prepare_vectors(np.array([[1e30, -1e30, 0.0], [3.0, 4.0, 0.0]], dtype=np.float32), "cosine")
    np.testing.assert_allclose(out, [[2 ** -0.5, -(2 ** -0.5), 0.0], [0.6, 0.8, 0.0]], rtol=1e-6)
    assert out.dtype == np.float32


# ------------------------------------------------------------------ 5. no folder left behind
@pytest.mark.parametrize("batch_size, message", [(0, "batch_size must be at least 1; got 0"),
                                                 (1.5, "batch_size must be an integer; got 1.5")])
def test_a_bad_batch_size_leaves_no_folder_behind(model, corpus, tmp_path, batch_size, message) -> None:
    with pytest.raises(GraphDocError) as info:
        build_index(model, corpus, tmp_path / "new", batch_size=batch_size)
    assert str(info.value) == message
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------------------ 6. explain
A = "Graph attention networks read documents. Long documents are split into passages. Dense vectors are fused."


@pytest.mark.parametrize("options, message", [
    ({"max_passages": 0}, "max_passages must be at least 1; got 0"),
    ({"max_passages": 2.0}, "max_passages must be an integer; got 2.0"),
    ({"top": 1.5}, "the number of passage pairs (top) must be an integer; got 1.5"),
    ({"top": -1}, "the number of passage pairs (top) must be at least 0; got -1"),
])
def test_compare_documents_checks_its_counts(model, options, message) -> None:
    with pytest.raises(GraphDocError) as info:
        compare_documents(model, A, A, **options)
    assert str(info.value) == message
    assert isinstance(info.value, TypeError) == ("integer" in message)  # a wrong type is a TypeError too
    assert len(compare_documents(model, A, A, top=1, max_passages=2).pairs) == 1


def test_explain_hits_refuses_a_query_search_refuses(searcher) -> None:
    hits = searcher.search("zebra", k=1, mode="bm25")
    for query, message in [("", "the query is empty"), (" \t", "the query is empty"),
                           (None, "the query is of type NoneType, not str: None")]:
        with pytest.raises(GraphDocError) as info:
            explain_hits(searcher, query, hits)
        assert str(info.value) == message
    with pytest.raises(GraphDocError, match=r"^the number of passages to explain \(top\) must be an integer; got 1.5$"):
        explain_hits(searcher, "zebra", hits, top=1.5)


# ------------------------------------------------------------------ 7. closing
def resource_warnings(action) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        action()
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def test_a_searcher_closes_its_docstore(index, model) -> None:
    def search_and_close() -> None:
        with Searcher(index, model=model) as searcher:
            assert [h.doc_id for h in searcher.search("zebra", k=1, mode="bm25")] == ["d007"]
        assert searcher.docstore.closed
        searcher.close()  # twice is harmless
        with pytest.raises(GraphDocError, match=f"^the searcher of index {index} is closed$"):
            searcher.search("zebra", mode="bm25")

    assert resource_warnings(search_and_close) == []
    assert resource_warnings(lambda: final_problem(index)) == []


def test_a_searcher_refusing_a_damaged_index_closes_what_it_opened(index, tmp_path) -> None:
    import shutil

    copy = Path(shutil.copytree(index, tmp_path / "copy"))
    ids = (copy / "final" / "doc_ids.txt").read_text(encoding="utf-8").splitlines()
    (copy / "final" / "doc_ids.txt").write_text("\n".join(ids[:-1]) + "\n", encoding="utf-8")
    assert resource_warnings(lambda: final_problem(copy)) == []
    assert final_problem(copy).startswith("final/doc_ids.txt holds 11 documents")


def test_a_searcher_whose_model_is_refused_closes_what_it_opened(index, tmp_path) -> None:
    from graphdoc.errors import ModelLoadError

    def refused() -> None:
        with pytest.raises(ModelLoadError):
            Searcher(index, model=str(tmp_path / "no-such-model"))

    assert resource_warnings(refused) == []


def test_the_search_command_closes_its_searcher(index, model_dir, monkeypatch, capsys) -> None:
    closed = []
    close = Searcher.close
    monkeypatch.setattr(Searcher, "close", lambda self: closed.append(self) or close(self))
    assert cli("search", "--index-dir", index, "zebra", "--mode", "bm25", "-k", 1) == 0
    assert "d007" in capsys.readouterr().out
    assert len(closed) == 1 and closed[0].docstore.closed


# ------------------------------------------------------------------ 8. messages for Python and CLI users
def test_messages_raised_from_the_api_name_the_argument_and_the_option(index, tiny_roberta, model, corpus,
                                                                       tmp_path) -> None:
    other = GraphDocEncoder.from_pretrained(str(tiny_roberta), config=MODEL_CONFIG, device="cpu")
    with pytest.raises(IndexMismatchError, match=r"\): pass the index's model \(--model\)$"):
        Searcher(index, model=other)
    bare = tmp_path / "bare"
    build_index(model, corpus, bare, IndexSettings(store_passages=False))
    with Searcher(bare, model=model) as searcher, pytest.raises(GraphDocError) as info:
        explain_hits(searcher, "zebra", searcher.search("zebra", k=1, mode="bm25"))
    assert str(info.value) == (f"index {bare} keeps no passage vectors: explanations need them (build it again with "
                               "store_passages=True, i.e. without --no-passages)")
    with pytest.raises(GraphDocError, match=r"^part \(--shard\) must look like I/N \(for example 1/4\); got 'half'$"):
        build_index(model, corpus, tmp_path / "new", part="half")
