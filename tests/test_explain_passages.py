"""Explaining a hit: passages ranked exactly on hand-made vectors, offsets and snippets, and from an index."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from graphdoc.config import ChunkerConfig, ModelConfig, PassageEncoderConfig
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import ArgumentTypeError, GraphDocError
from graphdoc.explain import (
    explain_hits,
    explain_passages,
    format_explanation,
    rank_passages,
)
from graphdoc.explain.passages import snippet
from graphdoc.retrieval.builder import IndexSettings, build_index
from graphdoc.retrieval.searcher import Searcher

TEXT = "Alpha beta gamma. Delta epsilon zeta. Eta theta iota."
RECORD = {"id": "doc", "title": "T", "text": TEXT,
          "passages": [[0, 17, 0, "Intro"], [18, 37, 1, "Body"], [38, 53, 1, "Body"]]}
QUERY = np.array([1.0, 0.0])
PASSAGES = np.array([[0.0, 1.0], [1.0, 0.0], [0.6, 0.8]])
ATTENTION = np.array([0.5, 0.2, 0.3])


def test_passages_are_ranked_by_similarity_with_exact_scores() -> None:
    found = explain_passages(QUERY, PASSAGES, RECORD, ATTENTION, top=3)
    assert [e.index for e in found] == [1, 2, 0]
    assert [e.score for e in found] == pytest.approx([1.0, 0.6, 0.0])
    assert [e.attention for e in found] == pytest.approx([0.2, 0.3, 0.5])
    assert [(e.section, e.section_title) for e in found] == [(1, "Body"), (1, "Body"), (0, "Intro")]


def test_top_cuts_the_list_and_attention_can_rank() -> None:
    assert [e.index for e in explain_passages(QUERY, PASSAGES, RECORD, ATTENTION, top=1)] == [1]
    by_attention = explain_passages(QUERY, PASSAGES, RECORD, ATTENTION, top=None, by="attention")
    assert [e.index for e in by_attention] == [0, 2, 1]


def test_ties_keep_document_order() -> None:
    assert rank_passages(np.array([0.5, 0.9, 0.5, 0.9])).tolist() == [1, 3, 0, 2]


def test_offsets_and_snippets_match_the_text() -> None:
    for e in explain_passages(QUERY, PASSAGES, RECORD, None, top=None):
        assert e.snippet == TEXT[e.start:e.end]
        assert e.attention is None
    long = "word " * 100
    cut = snippet(long, 50)
    assert cut.endswith(" ...") and len(cut) <= 54 and long.startswith(cut[:-4])


def test_bad_inputs_name_the_problem() -> None:
    with pytest.raises(GraphDocError, match="2 passage vectors for 3 passages"):
        explain_passages(QUERY, PASSAGES[:2], RECORD)
    with pytest.raises(GraphDocError, match="2 attention weights"):
        explain_passages(QUERY, PASSAGES, RECORD, ATTENTION[:2])
    with pytest.raises(GraphDocError, match="valid: score, attention"):
        explain_passages(QUERY, PASSAGES, RECORD, by="words")
    # a corpus record (BEIR's _id, no passages) is one passage; the error names its id (it said None)
    with pytest.raises(GraphDocError, match=r"^document 'x': 3 passage vectors for 1 passages$"):
        explain_passages(QUERY, PASSAGES, {"_id": "x", "text": TEXT})


def test_top_is_a_count_or_none() -> None:
    """(top=-1 gave every passage but the last, as a slice does; top=1.5 was Python's 'slice indices must be ...')"""
    assert [e.index for e in explain_passages(QUERY, PASSAGES, RECORD, top=0)] == []
    assert [e.index for e in explain_passages(QUERY, PASSAGES, RECORD, top=5)] == [1, 2, 0]
    with pytest.raises(GraphDocError, match=r"^the number of passages to explain \(top\) must be at least 0; got -1$"):
        explain_passages(QUERY, PASSAGES, RECORD, top=-1)
    for bad in (1.5, True, "2"):
        with pytest.raises(ArgumentTypeError, match=r"^the number of passages to explain \(top\) must be an integer "
                                                    rf"or None; got {re.escape(repr(bad))}$"):
            explain_passages(QUERY, PASSAGES, RECORD, top=bad)


def test_format_explanation_gives_one_line_per_passage() -> None:
    lines = format_explanation(explain_passages(QUERY, PASSAGES, RECORD, ATTENTION, top=2)).splitlines()
    assert len(lines) == 2
    assert "p1" in lines[0] and "sim 1.0000" in lines[0] and "att 0.200" in lines[0]
    assert "[Body]" in lines[0] and "chars 18-37: Delta epsilon zeta." in lines[0]
    titled = {**RECORD, "passages": [[s, e, i, "Body\nof\ttext"] for s, e, i, _ in RECORD["passages"]]}
    lines = format_explanation(explain_passages(QUERY, PASSAGES, titled, ATTENTION, top=2)).splitlines()
    assert len(lines) == 2 and "[Body of text]" in lines[0]  # a title's newline and tab: one line still


# ----------------------------------------------------------------- from an index
DOCS = [{"_id": f"d{i}", "title": f"Title {i}",
         "text": " ".join(f"{w.capitalize()} graph attention passage query dense fox lazy {w}." for w in words)}
        for i, words in enumerate([["network", "dog", "meeting"], ["index", "shard", "topic"],
                                   ["sparse", "fusion", "section"], ["brown", "quick", "unicode"]])]


@pytest.fixture(scope="module")
def model(tiny_bert) -> GraphDocEncoder:
    """Mean pooling (a random BERT's CLS vectors hardly differ) and 12-word passages: 3 per document."""
    config = ModelConfig(chunker=ChunkerConfig(max_words=12), passage_encoder=PassageEncoderConfig(pooling="mean"))
    return GraphDocEncoder.from_pretrained(str(tiny_bert), config=config, device="cpu")


@pytest.fixture(scope="module")
def index(model, tmp_path_factory) -> Path:
    corpus = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    folder = tmp_path_factory.mktemp("index") / "index"
    build_index(model, str(corpus), folder, IndexSettings(shard_size=3))
    return folder


def test_explained_hits_agree_with_the_best_passage_and_the_model(index, model) -> None:
    searcher = Searcher(index, model=model)
    hits = searcher.search("graph attention network", k=3, mode="dense")
    explained = explain_hits(searcher, "graph attention network", hits, top=3)
    assert len(explained) == 3
    docs = {d["_id"]: d for d in DOCS}
    for hit, passages in zip(hits, explained):
        assert passages[0]["index"] == hit.passage["index"]
        assert passages[0]["score"] == pytest.approx(hit.passage["score"], abs=1e-5)
        assert [p["score"] for p in passages] == sorted((p["score"] for p in passages), reverse=True)
        out = next(model.iter_forward([docs[hit.doc_id]], return_attention_weights=True))
        weights = out.document_attention(0).numpy()
        for p in passages:
            assert p["attention"] == pytest.approx(float(weights[p["index"]]), abs=1e-5)
            assert p["snippet"] == docs[hit.doc_id]["text"][p["start"]:p["end"]]


def test_an_index_without_attention_explains_with_null_attention(index, model, tmp_path) -> None:
    copy = Path(shutil.copytree(index, tmp_path / "index"))
    (copy / "final" / "passage_attention.npy").unlink()
    searcher = Searcher(copy, model=model)
    hits = searcher.search("lazy dog", k=2, mode="dense")
    explained = explain_hits(searcher, "lazy dog", hits, top=1)
    assert [len(e) for e in explained] == [1, 1]
    assert explained[0][0]["attention"] is None


def test_explaining_needs_at_least_one_passage(index, model) -> None:
    searcher = Searcher(index, model=model)
    with pytest.raises(GraphDocError, match="at least 1"):
        explain_hits(searcher, "dog", searcher.search("dog", k=1, mode="dense"), top=0)
