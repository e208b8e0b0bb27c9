"""Filtering search results by metadata (``filter=`` of ``Searcher.search``/``batch_search``/``similar``,
``graphdoc search --filter``): which documents match, and that the kept ones rank and score as without it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from _retrieval_helpers import cli, error_line, make_docs, write_jsonl

from graphdoc.errors import GraphDocError
from graphdoc.retrieval import dense_searcher
from graphdoc.retrieval.builder import IndexSettings, build_index
from graphdoc.retrieval.dense import DenseIndex, RowSelection, prepare_vectors
from graphdoc.retrieval.filters import MetadataTable, filter_from_pairs, normalize_filter, value_key
from graphdoc.retrieval.fusion import fuse
from graphdoc.retrieval.searcher import Searcher

pytestmark = pytest.mark.usefixtures("restore_cli_state")

QUERIES = {"q1": "graph attention network", "q2": "zebra fox", "q3": "lazy dog sentence"}
ARXIV = {"d000", "d002", "d004", "d006", "d008", "d010"}
YEAR_2020 = {"d001", "d004", "d007", "d010"}


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    """12 documents: source arxiv (even) or acl (odd); year 2019, 2020, 2021 in turn (d010's the string "2020",
    d011 without one); tags lists; open true/false/null; d009 a float score."""
    records = make_docs(12)
    for i, record in enumerate(records):
        record["source"] = "arxiv" if i % 2 == 0 else "acl"
        if i < 10:
            record["year"] = 2019 + i % 3
        if i < 9:
            record["open"] = i < 4 if i < 8 else None
    records[10]["year"] = "2020"
    records[0]["tags"], records[3]["tags"] = ["graph", "retrieval"], ["graph"]
    records[5]["tags"], records[6]["tags"], records[8]["tags"] = ["nlp", 7], [], [{"graph": 1}]
    records[9]["score"] = 0.5
    return records


@pytest.fixture(scope="module")
def corpus(docs, tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("filter") / "corpus.jsonl", docs)


@pytest.fixture(scope="module")
def index(model, corpus) -> Path:
    build_index(model, str(corpus), corpus.parent / "index", IndexSettings(shard_size=5))
    return corpus.parent / "index"


@pytest.fixture(scope="module")
def searcher(index, model):
    with Searcher(index, model=model) as opened:
        yield opened


def kept(searcher: Searcher, filter) -> set[str]:
    return {doc_id for doc_id, keep in zip(searcher.doc_ids, searcher.filter_mask(filter)) if keep}


# ------------------------------------------------------------------ which documents match
@pytest.mark.parametrize("filter, expected", [
    ({"year": 2020}, YEAR_2020),
    ({"year": "2020"}, YEAR_2020),  # as typed on a command line: matches the number and the string
    ({"year": 2020.0}, YEAR_2020),
    ({"year": [2019, "2021"]}, {"d000", "d002", "d003", "d005", "d006", "d008", "d009"}),  # OR within a field
    ({"year": 2020, "source": "arxiv"}, {"d004", "d010"}),  # AND across fields
    ({"tags": "graph"}, {"d000", "d003"}),  # a list matches when one of its elements does
    ({"tags": ["7", "retrieval"]}, {"d000", "d005"}),
    ({"open": True}, {"d000", "d001", "d002", "d003"}),
    ({"open": "true"}, {"d000", "d001", "d002", "d003"}),
    ({"open": [False, None]}, {"d004", "d005", "d006", "d007", "d008"}),
    ({"open": "null"}, {"d008"}),
    ({"score": "0.5"}, {"d009"}),
    ({"source": "ARXIV"}, set()),  # exact text: no case folding
    ({"year": "2020.0"}, set()),  # a string is compared as it is
])
def test_filter_matches_documents_by_the_text_of_their_values(searcher, filter, expected) -> None:
    assert kept(searcher, filter) == expected


def test_no_filter_and_an_empty_one_keep_everything(searcher) -> None:
    assert searcher.filter_mask(None) is None and searcher.filter_mask({}) is None
    assert searcher.batch_search(QUERIES, k=100, mode="bm25", filter={}) == searcher.batch_search(QUERIES, k=100,
                                                                                                  mode="bm25")


def test_value_keys() -> None:
    assert [value_key(v) for v in ("2020", 2020, 2020.0, np.int64(2020), 0.5, True, np.bool_(False), None,
                                   float("nan"), float("-inf"), [1], {"a": 1})] == \
        ["2020", "2020", "2020", "2020", "0.5", "true", "false", "null", "nan", "-inf", None, None]


def test_filter_from_pairs_splits_at_the_first_equals_sign() -> None:
    assert filter_from_pairs(["year=2020", "year=2021", "url=a=b", "note="]) == \
        {"year": ["2020", "2021"], "url": ["a=b"], "note": [""]}
    assert filter_from_pairs(None) is None and filter_from_pairs([]) is None
    for bad in ("year2020", "=2020"):
        with pytest.raises(GraphDocError, match=rf"^--filter takes FIELD=VALUE \(split at the first =\); got '{bad}'$"):
            filter_from_pairs([bad])


# ------------------------------------------------------------------ errors
def test_an_unknown_field_is_an_error_naming_the_fields_there_are(searcher, index) -> None:
    want = (f"unknown filter field 'yaer' (did you mean 'year'?): no document of index {index} has it; fields: "
            "open, score, source, tags, tags.graph, year")
    for call in (lambda: searcher.search("graph", filter={"yaer": 2020}),
                 lambda: searcher.batch_search(QUERIES, mode="bm25", filter={"source": "acl", "yaer": 2020}),
                 lambda: searcher.similar("d001", filter={"yaer": 2020})):
        with pytest.raises(GraphDocError) as caught:
            call()
        assert str(caught.value) == want
    with pytest.raises(GraphDocError, match=r"^unknown filter field 'colour': no document of index .* has it; "
                                            r"fields: open, score, source, tags, tags.graph, year$"):
        searcher.filter_mask({"colour": "red"})
    assert searcher.metadata_fields() == ["open", "score", "source", "tags", "tags.graph", "year"]


def test_unknown_field_of_documents_without_metadata_and_a_long_field_list() -> None:
    bare = MetadataTable.read([b'{"id": "a", "title": "", "text": "x", "passages": []}\n'], 1)
    with pytest.raises(GraphDocError, match=r"^unknown filter field 'year': the documents of the index have no "
                                            r"metadata$"):
        bare.mask(normalize_filter({"year": 1}))
    line = json.dumps({"id": "a", "text": "x", "metadata": {f"f{i:02d}": i for i in range(12)}}).encode()
    with pytest.raises(GraphDocError, match=r"^unknown filter field 'g': no document of the index has it; fields: "
                                            r"f00, f01, f02, f03, f04, f05, f06, f07, f08, f09, ... \(12 in all\)$"):
        MetadataTable.read([line], 1).mask(normalize_filter({"g": 1}))


@pytest.mark.parametrize("filter, message", [
    ("year=2020", "a filter is a mapping {field: value or [values]}; got str"),
    ([("year", 2020)], "a filter is a mapping {field: value or [values]}; got list"),
    ({"year": []}, "filter field 'year' has an empty list of values; give at least one"),
    ({"year": {"from": 2019}}, "filter field 'year': a value is a string, number, boolean or null (or a list of "
                               "them); got dict {'from': 2019}"),
    ({"year": [2020, [2021]]}, "filter field 'year': a value is a string, number, boolean or null (or a list of "
                               "them); got list [2021]"),
    ({"": 1}, "a filter's fields are non-empty strings; got ''"),
    ({3: 1}, "a filter's fields are non-empty strings; got 3"),
])
def test_bad_filters_are_one_line_errors(searcher, filter, message) -> None:
    for call in (lambda: searcher.search("graph", mode="bm25", filter=filter),
                 lambda: searcher.batch_search(QUERIES, filter=filter),
                 lambda: searcher.similar("d001", filter=filter)):
        with pytest.raises(GraphDocError) as caught:
            call()
        assert str(caught.value) == message


def test_metadata_is_read_from_the_end_of_each_record() -> None:
    tricky = {"id": "a", "title": "t", "text": 'quoted ", "metadata": {"year": 1} here', "passages": [[0, 1, 0, ""]],
              "metadata": {"year": 2, "metadata": {"year": 3}, "tags": [1, [2], {"x": 3}]}}
    reordered = {"metadata": {"year": 4}, "id": "b", "text": "x"}
    lines = [json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in (tricky, reordered)]
    table = MetadataTable.read(lines, 2)
    assert table.fields == ["metadata.year", "tags", "tags.x", "year"]
    assert table.mask(normalize_filter({"year": [2, 4]})).tolist() == [True, True]
    assert table.mask(normalize_filter({"year": [1, 3]})).tolist() == [False, False]
    assert table.mask(normalize_filter({"metadata.year": [1, 3]})).tolist() == [True, False]
    assert table.mask(normalize_filter({"tags": [1]})).tolist() == [True, False]
    assert table.mask(normalize_filter({"tags": [2, 3]})).tolist() == [False, False]  # a list in a list, an object
    assert table.mask(normalize_filter({"tags.x": 3})).tolist() == [True, False]


def test_metadata_read_once_and_a_damaged_store_is_reported(index, model, tmp_path) -> None:
    from graphdoc.errors import DamagedIndexError

    copy = Path(shutil.copytree(index, tmp_path / "index"))
    store = copy / "final" / "docstore.jsonl"
    with Searcher(copy, model=model) as searcher:
        assert kept(searcher, {"source": "acl"}) == {f"d{i:03d}" for i in range(1, 12, 2)}
        broken = store.read_bytes().replace(b'"metadata": {"source": "acl"', b'"metadata": ["source": "acl"')
        store.write_bytes(broken)  # (as long as it was: the store still opens)
        assert kept(searcher, {"year": 2019}) == {"d000", "d003", "d006", "d009"}  # (read on the first filter)
    with Searcher(copy, model=model) as searcher:
        with pytest.raises(DamagedIndexError, match=r"final/docstore.jsonl cannot be read \(.*\)"):
            searcher.filter_mask({"source": "acl"})


def test_a_searcher_filters_the_build_it_opened_after_a_newer_one_replaced_it(index, model, tmp_path) -> None:
    """Its metadata was read from the store's path on the first filter: the new build's, rows shifted."""
    from graphdoc.retrieval import delete_documents

    copy = Path(shutil.copytree(index, tmp_path / "index"))
    with Searcher(copy, model=model) as searcher:
        assert searcher.search("graph", k=1, mode="bm25")  # opened, no filter yet
        delete_documents(copy, ["d000"])  # final/ rebuilt: every row after d000's moves up one
        assert kept(searcher, {"source": "arxiv"}) == ARXIV  # the documents of the build it opened
        assert searcher.metadata_fields() == ["open", "score", "source", "tags", "tags.graph", "year"]
    with Searcher(copy, model=model) as searcher:
        assert kept(searcher, {"source": "arxiv"}) == ARXIV - {"d000"}


def test_threads_share_the_metadata_read_once(index, model, monkeypatch) -> None:
    from concurrent.futures import ThreadPoolExecutor

    reads, read = [], MetadataTable.read.__func__
    monkeypatch.setattr(MetadataTable, "read", classmethod(lambda cls, *args: reads.append(1) or read(cls, *args)))
    filters = [{"source": "arxiv"}, {"year": 2020}, {"tags": "graph"}, {"open": [True, None]}] * 4
    with Searcher(index, model=model) as fresh, ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda f: kept(fresh, f), filters))
    assert len(reads) == 1
    assert found[:4] == [ARXIV, YEAR_2020, {"d000", "d003"}, {"d000", "d001", "d002", "d003", "d008"}]
    assert found == found[:4] * 4


# ------------------------------------------------------------------ rankings
def restricted(run: dict[str, float], allowed: set[str], k: int = 100) -> dict[str, float]:
    return dict(list({doc_id: s for doc_id, s in run.items() if doc_id in allowed}.items())[:k])


@pytest.mark.parametrize("mode", ["dense", "bm25"])
@pytest.mark.parametrize("filter", [{"source": "arxiv"}, {"year": [2019, 2021], "source": "acl"}])
def test_filtered_ranking_is_the_unfiltered_one_restricted(searcher, mode, filter) -> None:
    allowed = kept(searcher, filter)
    full = searcher.batch_search(QUERIES, k=100, mode=mode)
    for k in (100, 2):
        run = searcher.batch_search(QUERIES, k=k, mode=mode, filter=filter)
        for qid in QUERIES:
            want = restricted(full[qid], allowed, k)
            assert list(run[qid]) == list(want) and run[qid] == pytest.approx(want, abs=1e-6)
    if mode == "dense":  # every document has a dense score: k results whenever k documents match
        assert all(len(docs) == 2 for docs in run.values())


@pytest.mark.parametrize("filter", [{"source": "arxiv"}, {"tags": "graph"}])
def test_filtered_hybrid_fuses_the_filtered_components(searcher, filter) -> None:
    """Both retrievers keep the matching documents; fusion normalises over those, as over any candidates."""
    allowed = kept(searcher, filter)
    dense, sparse = searcher.component_runs(QUERIES, depth=100)  # every document of this small index
    run = searcher.batch_search(QUERIES, k=100, filter=filter)
    for qid in QUERIES:
        want = fuse(restricted(dense[qid], allowed), restricted(sparse[qid], allowed), searcher.fusion)
        assert list(run[qid]) == list(want) and run[qid] == pytest.approx(want, abs=1e-6)


def test_search_hits_carry_matching_metadata_and_k_of_them(searcher) -> None:
    hits = searcher.search("graph attention", k=3, mode="dense", filter={"year": "2020"})
    assert len(hits) == 3 and [h.rank for h in hits] == [1, 2, 3]
    assert {h.doc_id for h in hits} <= YEAR_2020 and all(str(h.metadata["year"]) == "2020" for h in hits)
    full = searcher.search("graph attention", k=12, mode="dense")
    assert [h.doc_id for h in hits] == [h.doc_id for h in full if h.doc_id in YEAR_2020][:3]


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_a_filter_no_document_matches_finds_nothing(searcher, mode) -> None:
    assert searcher.search("zebra", mode=mode, filter={"source": "nowhere"}) == []
    assert searcher.batch_search(QUERIES, mode=mode, filter={"year": 1999}) == {qid: {} for qid in QUERIES}


def test_similar_keeps_the_matching_documents(searcher) -> None:
    full = searcher.similar("d002", k=11)
    hits = searcher.similar("d002", k=3, filter={"source": "arxiv"})  # d002 is arxiv too: still left out
    want = [h for h in full if h.doc_id in ARXIV][:3]
    assert [(h.rank, h.doc_id) for h in hits] == [(i + 1, h.doc_id) for i, h in enumerate(want)]
    assert [h.score for h in hits] == pytest.approx([h.score for h in want], abs=1e-6)
    assert [h.doc_id for h in searcher.similar("d002", k=5, filter={"source": "acl"})] == \
        [h.doc_id for h in full if h.doc_id not in ARXIV][:5]
    assert searcher.similar("d002", filter={"open": "maybe"}) == []


# ------------------------------------------------------------------ FAISS restricted to the matching rows
@pytest.mark.parametrize("factory", ["Flat", "IVF8,Flat", "Flat,RFlat", "HNSW16"])
def test_dense_index_search_returns_only_allowed_rows(factory) -> None:
    """Flat and IVF take a FAISS selector (an IVF search short of k in its probed lists probes them all); a
    refined index cannot, and is searched deeper, its other rows dropped."""
    rng = np.random.default_rng(0)
    vectors, queries = rng.standard_normal((300, 16)), rng.standard_normal((3, 16))
    mask = np.zeros(300, dtype=bool)
    mask[::23] = True  # 14 rows
    scores = prepare_vectors(queries, "cosine") @ prepare_vectors(vectors, "cosine").T
    want = np.argsort(-np.where(mask, scores, -np.inf), axis=1)[:, :10]
    index = DenseIndex.build(vectors, factory)
    if index.nlist:
        index.nprobe = 1  # one list of eight holds fewer than 10 of the 14 allowed rows
    found_scores, rows = index.search(queries, 10, RowSelection(mask))
    assert rows.shape == (3, 10) and mask[rows].all()
    if factory != "HNSW16":  # (HNSW is approximate)
        assert (rows == want).all()
        assert found_scores == pytest.approx(np.take_along_axis(scores, want, axis=1), abs=1e-5)
    assert [len(r) for r in index.search_ties(queries, 100, RowSelection(mask))] == [14] * 3 or factory == "HNSW16"


def test_ivf_index_filtered_through_faiss_finds_what_the_flat_index_finds(model, corpus, searcher, tmp_path,
                                                                          monkeypatch) -> None:
    build_index(model, str(corpus), tmp_path / "ivf", IndexSettings(faiss_factory="IVF4,Flat"))
    monkeypatch.setattr(dense_searcher, "EXACT_ROWS", 0)  # FAISS's selector, not every matching document
    filter = {"source": "arxiv"}
    with Searcher(tmp_path / "ivf", model=model) as ivf:
        ivf.dense.nprobe = 1
        assert ivf.dense.doc_index.nlist == 4
        for mode in ("dense", "hybrid"):
            run = ivf.batch_search(QUERIES, k=100, mode=mode, filter=filter)
            flat = searcher.batch_search(QUERIES, k=100, mode=mode, filter=filter)
            for qid in QUERIES:
                assert len(run[qid]) == len(ARXIV) and list(run[qid]) == list(flat[qid])
                assert run[qid] == pytest.approx(flat[qid], abs=1e-5)
        assert {h.doc_id for h in ivf.similar("d001", k=5, filter=filter)} <= ARXIV


def test_hnsw_walk_short_of_allowed_rows_is_topped_up(model, corpus, searcher, tmp_path, monkeypatch) -> None:
    build_index(model, str(corpus), tmp_path / "hnsw", IndexSettings(faiss_factory="HNSW32"))
    monkeypatch.setattr(dense_searcher, "EXACT_ROWS", 0)
    with Searcher(tmp_path / "hnsw", model=model) as hnsw:
        monkeypatch.setattr(hnsw.dense.doc_index, "search_ties", lambda queries, k, allowed=None: [
            np.zeros(0, dtype=np.int64)] * len(queries))  # a walk that reached none of them
        run = hnsw.batch_search(QUERIES, k=3, mode="dense", filter={"year": 2020})
    flat = searcher.batch_search(QUERIES, k=3, mode="dense", filter={"year": 2020})
    for qid in QUERIES:
        assert list(run[qid]) == list(flat[qid]) and run[qid] == pytest.approx(flat[qid], abs=1e-5)


# ------------------------------------------------------------------ command line
def test_cli_filter_prints_only_matching_hits(index, searcher, capsys) -> None:
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "graph zebra", "--json", "-k", 12, "--filter", "year=2020",
               "--filter", "year=2019", "--filter", "source=acl") == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    hits = searcher.search("graph zebra", k=12, filter={"year": ["2020", "2019"], "source": ["acl"]})
    assert [p["doc_id"] for p in printed] == [h.doc_id for h in hits]
    assert {p["doc_id"] for p in printed} == {"d001", "d003", "d007", "d009"}
    assert cli("search", "--index-dir", index, "--like", "d002", "--json", "-k", 3, "--filter", "tags=graph") == 0
    assert [json.loads(line)["doc_id"] for line in capsys.readouterr().out.splitlines()] == \
        [h.doc_id for h in searcher.similar("d002", k=3, filter={"tags": "graph"})]


def test_cli_filter_with_queries_and_qrels(index, searcher, tmp_path, capsys) -> None:
    queries = write_jsonl(tmp_path / "q.jsonl", [{"_id": q, "text": t} for q, t in QUERIES.items()])
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "--queries", queries, "--mode", "bm25", "--json",
               "--filter", "source=arxiv") == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    run = searcher.batch_search(QUERIES, k=100, mode="bm25", filter={"source": "arxiv"})
    assert [(line["query_id"], line["doc_id"]) for line in lines] == [(q, d) for q in run for d in run[q]]
    assert {line["doc_id"] for line in lines} <= ARXIV
    for line in lines:  # each hit line names its document as a single search's hit does
        assert (line["title"], line["metadata"]) == (searcher.document(line["doc_id"])["title"],
                                                     searcher.document(line["doc_id"])["metadata"])
        assert line["metadata"]["source"] == "arxiv"
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q2 0 d007 1\n", encoding="utf-8")  # zebra's document is acl: filtered out
    assert cli("search", "--index-dir", index, "--queries", queries, "--qrels", qrels, "--mode", "bm25",
               "--measures", "R@100", "--filter", "source=arxiv") == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[-1] == "0.0000"


def test_cli_filter_errors_and_no_match(index, capsys) -> None:
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "graph", "--filter", "year2020") == 1
    assert error_line(capsys, "search") == ("graphdoc search: error: --filter takes FIELD=VALUE (split at the first "
                                            "=); got 'year2020'")
    assert cli("search", "--index-dir", index, "graph", "--filter", "yaer=2020") == 1
    assert error_line(capsys, "search") == (f"graphdoc search: error: unknown filter field 'yaer' (did you mean "
                                            f"'year'?): no document of index {index} has it; fields: open, score, "
                                            "source, tags, tags.graph, year")
    assert cli("search", "--index-dir", index, "graph", "--mode", "bm25", "--filter", "source=nowhere") == 0
    captured = capsys.readouterr()
    assert captured.out == "no results\n"
    assert captured.err == (f"WARNING graphdoc.cli: no document of {index} matches --filter source=nowhere: nothing "
                            "is found\n")


# ------------------------------------------------------------------ nested metadata: dotted paths
NESTED_FIELDS = ["authors.name", "metadata.venue", "metadata.year", "source", "x.y"]


@pytest.fixture(scope="module")
def nested_index(model, tmp_path_factory) -> Path:
    """5 documents with BEIR's nested ``metadata`` (n004 without), authors as a list of objects, and a top-level
    key holding a dot (``x.y``) beside an object that spells the same path."""
    records = make_docs(5, prefix="n")
    nested = [{"year": 2020, "venue": "acl"}, {"year": 2021, "venue": "emnlp"},
              {"year": "2020", "venue": ["acl", "tacl"]}, {"year": 2019}]
    for record, metadata in zip(records, nested):
        record["metadata"] = metadata
    records[0]["authors"] = [{"name": "Li"}, {"name": "Wu"}]
    records[1]["authors"] = [{"name": "Wu"}]
    records[0]["x.y"], records[1]["x"], records[4]["x"] = 1, {"y": 1}, {"y": 2}  # the key x.y wins over x -> y
    records[3]["source"] = "arxiv"
    corpus = write_jsonl(tmp_path_factory.mktemp("nested") / "corpus.jsonl", records)
    build_index(model, str(corpus), corpus.parent / "index", IndexSettings(shard_size=3))
    return corpus.parent / "index"


@pytest.fixture(scope="module")
def nested_searcher(nested_index, model):
    with Searcher(nested_index, model=model) as opened:
        yield opened


@pytest.mark.parametrize("filter, expected", [
    ({"metadata.year": 2020}, {"n000", "n002"}),  # the number and the string "2020"
    ({"metadata.year": ["2019", 2021]}, {"n001", "n003"}),  # OR within a field
    ({"metadata.venue": "acl"}, {"n000", "n002"}),  # a list in an object matches by element
    ({"metadata.venue": "tacl", "metadata.year": 2020}, {"n002"}),  # AND across fields
    ({"metadata.year": 2020, "source": "arxiv"}, set()),
    ({"authors.name": "Wu"}, {"n000", "n001"}),  # a list of objects: by element
    ({"authors.name": ["Li"]}, {"n000"}),
    ({"x.y": 1}, {"n000"}),  # the top-level key "x.y", not x's y (n001's 1)
    ({"x.y": 2}, set()),
])
def test_a_nested_field_is_filtered_by_its_dotted_path(nested_searcher, filter, expected) -> None:
    assert kept(nested_searcher, filter) == expected


def test_nested_fields_are_listed_by_their_paths_with_their_counts(nested_searcher, nested_index, capsys) -> None:
    """(review: 'metadata', holding objects only, was listed as a field, and a filter on it matched nothing)"""
    assert nested_searcher.metadata_fields() == NESTED_FIELDS
    build = json.loads((nested_index / "final" / "build.json").read_text(encoding="utf-8"))
    assert build["metadata"] == {"authors.name": {"documents": 2, "values": 2},
                                 "metadata.venue": {"documents": 3, "values": 3},
                                 "metadata.year": {"documents": 4, "values": 3},
                                 "source": {"documents": 1, "values": 1}, "x.y": {"documents": 1, "values": 1}}
    assert list(build["metadata"]) == NESTED_FIELDS
    capsys.readouterr()
    assert cli("info", nested_index) == 0
    assert "  metadata (what --filter may name): authors.name (2 documents, 2 values); metadata.venue (3 documents, " \
           "3 values); metadata.year (4 documents, 3 values); source (1 document, 1 value); x.y (1 document, " \
           "1 value)" in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("filter, message", [
    ({"metadata": 2020}, "filter field 'metadata' holds objects, which no value matches: name a field inside them, "
                         "as 'metadata.venue' (fields there: metadata.venue, metadata.year)"),
    ({"authors": "Wu"}, "filter field 'authors' holds objects, which no value matches: name a field inside them, as "
                        "'authors.name' (fields there: authors.name)"),
    ({"title": "Title 1"}, "unknown filter field 'title' (a document's id, title and text are no metadata): no "
                           "document of index {index} has it; fields: " + ", ".join(NESTED_FIELDS)),
    ({"metadata.yaer": 2020}, "unknown filter field 'metadata.yaer' (did you mean 'metadata.year'?): no document of "
                              "index {index} has it; fields: " + ", ".join(NESTED_FIELDS)),
])
def test_a_field_of_objects_or_no_metadata_is_refused_naming_what_to_write(nested_searcher, nested_index, filter,
                                                                          message) -> None:
    with pytest.raises(GraphDocError) as caught:
        nested_searcher.filter_mask(filter)
    assert str(caught.value) == message.format(index=nested_index)


def test_search_and_cli_filter_on_a_dotted_path(nested_searcher, nested_index, capsys) -> None:
    hits = nested_searcher.search("graph attention", k=5, mode="bm25", filter={"metadata.year": 2020})
    full = nested_searcher.search("graph attention", k=5, mode="bm25")
    assert [h.doc_id for h in hits] == [h.doc_id for h in full if h.doc_id in {"n000", "n002"}]
    capsys.readouterr()
    assert cli("search", "--index-dir", nested_index, "--like", "n004", "--json", "--filter", "metadata.year=2020",
               "--filter", "metadata.venue=tacl") == 0
    assert [json.loads(line)["doc_id"] for line in capsys.readouterr().out.splitlines()] == ["n002"]


def test_info_leaves_out_a_field_summed_up_before_paths_and_says_why(nested_index, tmp_path, capsys) -> None:
    """A build summed up before graphdoc named the fields of objects lists such a field with 0 values."""
    copy = Path(shutil.copytree(nested_index, tmp_path / "index"))
    build = json.loads((copy / "final" / "build.json").read_text(encoding="utf-8"))
    build["metadata"] = {"metadata": {"documents": 4, "values": 0}, "source": {"documents": 1, "values": 1}}
    (copy / "final" / "build.json").write_text(json.dumps(build), encoding="utf-8")
    capsys.readouterr()
    assert cli("info", copy) == 0
    assert "  metadata (what --filter may name): source (1 document, 1 value) (not metadata: no value a filter " \
           "matches; the fields of an object are named by their paths, FIELD.KEY, listed here after the index's " \
           "next add or delete)" in capsys.readouterr().out.splitlines()
