"""Smoke tests on the real data sets in ../shared/data (skipped when that folder is absent)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from graphdoc.corpus import ReadStats, read_corpus, read_qrels, read_queries

DATA = Path(__file__).parents[1].parent / "shared" / "data"

pytestmark = pytest.mark.data


def need(relative: str) -> Path:
    path = DATA / relative
    if not path.exists():
        pytest.skip(f"real data not found at {path} (see shared/data/README.md)")
    return path


def test_scifact_corpus_queries_and_qrels():
    root = need("scifact")
    stats = ReadStats()
    assert sum(1 for _ in read_corpus(root, stats=stats)) == 5183 == stats.documents
    test_queries = dict(read_queries(root, split="test"))
    qrels = read_qrels(root, split="test")
    assert len(test_queries) == len(qrels) == 300
    assert sum(len(judged) for judged in qrels.values()) == 339
    assert set(test_queries) == set(qrels)
    assert read_qrels(root / "qrels" / "train.tsv").keys() <= dict(read_queries(root)).keys()


def test_qmsum_sections_are_consistent():
    docs = list(itertools.islice(read_corpus(need("qmsum")), 20))
    assert len(docs) == 20
    for doc in docs:
        assert len(doc.sections) >= 2 and any(s.title for s in doc.sections)
        assert "\n".join(doc.text[s.start:s.end] for s in doc.sections) == doc.text


def test_20news_keeps_the_label():
    docs = list(itertools.islice(read_corpus(need("20news/test.jsonl.gz")), 50))
    assert len(docs) == 50
    assert all(doc.metadata.get("label") for doc in docs)
    assert all("/" in doc.id for doc in docs)


def test_wiki_sample_is_clean_and_sectioned():
    docs = list(itertools.islice(read_corpus(need("wiki/enwiki-sample-pages-articles.xml.bz2")), 25))
    assert len(docs) == 25
    assert sum(len(doc.sections) >= 3 for doc in docs) >= 20
    for doc in docs:
        assert doc.id.isdigit() and doc.title
        assert not any(markup in doc.text for markup in ("[[", "]]", "{{", "}}", "<ref", "{|"))
        assert "\n".join(doc.text[s.start:s.end] for s in doc.sections) == doc.text
        assert all(s.title for s in doc.sections[1:])
