"""Documents like an indexed one (``Searcher.similar``, ``search --like``), stored records by id
(``Searcher.document``), and the metadata hits carry."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np
import pytest
from _retrieval_helpers import cli, error_line, make_docs, unit, write_jsonl

from graphdoc.documents import Document
from graphdoc.errors import GraphDocError
from graphdoc.retrieval.builder import IndexSettings, build_index
from graphdoc.retrieval.searcher import Searcher

pytestmark = pytest.mark.usefixtures("restore_cli_state")


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    records = make_docs(8)
    for i, record in enumerate(records):
        record["label"] = f"group{i % 2}"
    records[3]["url"] = "https://example.org/d003"
    return records


@pytest.fixture(scope="module")
def index(model, docs, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("similar")
    build_index(model, str(write_jsonl(folder / "corpus.jsonl", docs)), folder / "index", IndexSettings(shard_size=3))
    return folder / "index"


def expected_scores(model, docs: list[dict], of: int) -> dict[str, float]:
    """Dense scores with the document's own vector as the query (passage weight 1: its best passage)."""
    vectors = unit(model.encode(docs))
    passages = [unit(out.passage_embeddings(i).numpy()) for out in model.iter_forward(docs)
                for i in range(len(out.documents))]
    return {d["_id"]: float((p @ vectors[of]).max()) for d, p in zip(docs, passages)}


def test_similar_ranks_by_the_documents_own_vector_and_leaves_it_out(index, model, docs) -> None:
    expected = expected_scores(model, docs, 2)
    del expected["d002"]
    ranked = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))
    with Searcher(index) as searcher:
        hits = searcher.similar("d002", k=4)
        assert searcher._model is None  # the stored vector is the query: no model loaded
        assert len(searcher.similar("d002", k=100)) == 7
    assert [(h.rank, h.doc_id) for h in hits] == [(i + 1, doc_id) for i, (doc_id, _) in enumerate(ranked[:4])]
    assert [h.score for h in hits] == pytest.approx([score for _, score in ranked[:4]], abs=1e-5)
    assert all(h.metadata["label"] in ("group0", "group1") and h.passage["snippet"] for h in hits)


def test_document_len_contains_and_unknown_ids(index, docs) -> None:
    with Searcher(index) as searcher:
        assert len(searcher) == 8 and "d003" in searcher and "nope" not in searcher and 3 not in searcher
        record = searcher.document("d003")
        assert (record["id"], record["title"], record["text"]) == ("d003", docs[3]["title"], docs[3]["text"])
        assert record["metadata"] == {"label": "group1", "url": "https://example.org/d003"}
        for call in (searcher.document, searcher.similar):
            with pytest.raises(GraphDocError, match=rf"^index {index} holds no document 'nope'$"):
                call("nope")
        with pytest.raises(GraphDocError, match=r"^a document id is a string; got int 3$"):
            searcher.document(3)


def test_hits_carry_the_documents_metadata(index) -> None:
    with Searcher(index) as searcher:
        hit = next(h for h in searcher.search("zebra", k=8, mode="bm25") if h.doc_id == "d007")
    assert hit.metadata == {"label": "group1"}


def test_metadata_json_cannot_hold_is_stored_as_text(tmp_path) -> None:
    day = datetime.date(2026, 11, 25)
    docs = [Document("a", "Graph attention over passages. A second sentence here.", metadata={"day": day}),
            Document("b", "Dense retrieval of long documents. Another sentence.",
                     metadata={"n": [1, 2], "score": float("nan"), "top": np.float32(2.5), 3: np.int64(4)})]
    from graphdoc.retrieval import docstore

    records = [docstore.record(d, []) for d in docs]
    docstore.write_store(tmp_path / "store.jsonl", records)
    assert [r.get("metadata") for r in docstore.iter_store(tmp_path / "store.jsonl")] == \
        [{"day": "2026-11-25"}, {"n": [1, 2], "score": "nan", "top": 2.5, "3": 4}]
    json.loads((tmp_path / "store.jsonl").read_text(encoding="utf-8").splitlines()[1],
               parse_constant=lambda name: pytest.fail(f"{name} is not strict JSON"))


def test_cli_like(index, model, docs, capsys) -> None:
    expected = expected_scores(model, docs, 5)
    del expected["d005"]
    best = max(expected, key=lambda doc_id: (expected[doc_id], doc_id))
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "--like", "d005", "-k", 2, "--json") == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["rank"] for line in lines] == [1, 2] and lines[0]["doc_id"] == best
    assert lines[0]["score"] == pytest.approx(expected[best], abs=1e-5) and "metadata" in lines[0]
    assert cli("search", "--index-dir", index, "--like", "d005", "-k", 1) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"  1. {expected[best]:.4f}  {best}  ")
    for argv, message in ((["--like", "d005", "--mode", "bm25"], "--like searches with the document's dense "
                                                                "vector: --mode bm25 cannot (leave --mode out)"),
                          (["--like", "d005", "a query"], "give one QUERY, --queries or --like"),
                          (["--like", "d005", "--explain"], "--explain is not used with --like (the document's "
                                                           "stored vector is the query)"),
                          (["--like", "d005", "--output", "run.trec"], "--output works with --queries, not with "
                                                                       "--like"),
                          (["--like", "nope"], f"index {index} holds no document 'nope'")):
        assert cli("search", "--index-dir", index, *argv) == 1
        assert error_line(capsys, "search") == f"graphdoc search: error: {message}"
