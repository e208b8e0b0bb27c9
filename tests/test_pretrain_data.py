"""Streaming training data: shuffling, batching, skipped documents, sharding, sub-documents."""

from __future__ import annotations

import json

import numpy as np
import pytest

from graphdoc.corpus import ReadStats
from graphdoc.documents import Document, Passage
from graphdoc.outputs import PreparedDocument
from graphdoc.training import data


def fake_prepare(doc: Document) -> PreparedDocument:
    """One passage per word, token ids = word lengths (no model needed)."""
    words = doc.text.split()
    passages = [Passage(doc.id, i, i // 3, "", 0, 0, w) for i, w in enumerate(words)]
    return PreparedDocument(doc, passages, [[len(w), i] for i, w in enumerate(words)])


def docs(lengths):
    return [Document(str(i), " ".join(["w"] * n)) for i, n in enumerate(lengths)]


def test_shuffled_is_a_reproducible_permutation():
    items = list(range(50))
    one = list(data.shuffled(items, 8, np.random.default_rng(1)))
    assert sorted(one) == items and one != items
    assert one == list(data.shuffled(items, 8, np.random.default_rng(1)))
    assert list(data.shuffled(items, 0, np.random.default_rng(1))) == items


def test_batches_skip_and_count_one_passage_documents():
    stats = data.DataStats()
    out = list(data.batches(docs([3, 1, 2, 0, 4, 5, 1]), fake_prepare, 2, 0, stats))
    assert [[e.position for e in b.examples] for b in out] == [[0, 2], [4, 5]]
    assert [b.end for b in out] == [3, 6]
    assert (stats.used, stats.one_passage_skipped) == (4, 3)  # the empty one makes no passage either


def test_batches_resume_from_an_offset():
    stats = data.DataStats()
    out = list(data.batches(docs([3, 1, 2, 4, 5]), fake_prepare, 2, 3, stats))
    assert [[e.position for e in b.examples] for b in out] == [[3, 4]]
    assert stats.one_passage_skipped == 0  # documents before the offset are not looked at


def test_empty_documents_are_skipped_by_the_reader_and_counted(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"_id": str(i), "text": t}) + "\n" for i, t in enumerate(["a b", " ", "c d"])))
    stats = ReadStats()
    assert [d.id for d in data.epoch_stream([str(path), str(path)], 0, 0, 0, stats)] == ["0", "2", "0", "2"]
    assert stats.empty_skipped == 2
    assert data.count_examples([str(path)], fake_prepare) == 2


def test_shards_concatenate_to_the_batch():
    examples = list(range(7))
    for world in (1, 2, 3):
        blocks = [data.shard(examples, r, world) for r in range(world)]
        assert sum(blocks, []) == examples
        assert max(map(len, blocks)) - min(map(len, blocks)) <= 1


@pytest.mark.parametrize("objective", ["half", "ict"])
def test_sub_documents_come_in_pairs_and_depend_only_on_position(objective):
    examples = [data.Example(p, fake_prepare(d)) for p, d in zip([10, 11], docs([5, 8]))]
    subs = data.sub_documents(examples, objective, seed=1, epoch=0)
    assert len(subs) == 4
    for k, ex in enumerate(examples):
        a, b = subs[2 * k], subs[2 * k + 1]
        ids = sorted(t[1] for t in a.token_ids + b.token_ids)
        assert ids == list(range(len(ex.prepared.passages)))  # the pair holds the document exactly once
        assert a.section_ids == [t[1] // 3 for t in a.token_ids]
        if objective == "ict":
            assert a.num_passages == 1
    alone = data.sub_documents(examples[1:], objective, seed=1, epoch=0)
    assert [s.token_ids for s in alone] == [s.token_ids for s in subs[2:]]  # not on batch neighbours
    other_epoch = data.sub_documents(examples, "half", seed=1, epoch=1)
    if objective == "half":
        assert [s.token_ids for s in other_epoch] != [s.token_ids for s in subs]


def test_is_named_corpus(tmp_path):
    assert data.is_named_corpus("openwebtext")
    assert not data.is_named_corpus(str(tmp_path))


def test_prepared_memo_prepares_each_document_once_within_its_budget():
    calls = []

    def counting(doc):
        calls.append(doc.id)
        return fake_prepare(doc)

    memo = data.PreparedMemo(counting, max_mb=1)
    corpus = docs([3, 5, 2])
    first = [memo(d) for d in corpus]
    again = [memo(d) for d in corpus]
    assert calls == ["0", "1", "2"] and (memo.hits, memo.misses, len(memo)) == (3, 3, 3)
    assert [a is b for a, b in zip(first, again)] == [True] * 3
    assert first[1].token_ids == fake_prepare(corpus[1]).token_ids
    # same id, other text: another document
    memo(Document("0", "other words here"))
    assert calls[-1] == "0" and memo.misses == 4
    # sections count too
    sectioned = Document.from_dict({"_id": "s", "sections": [{"title": "A", "text": "ab"}, {"title": "B", "text": "cd"}]})
    assert sectioned.text == "ab\ncd"
    assert data.content_key(sectioned) != data.content_key(Document("s", "ab\ncd"))


def test_prepared_memo_over_budget_prepares_anew_and_zero_turns_it_off():
    calls = []

    def counting(doc):
        calls.append(doc.id)
        return fake_prepare(doc)

    size = data.approx_bytes(fake_prepare(docs([4])[0]))
    memo = data.PreparedMemo(counting, max_mb=(size * 2.5) / 2 ** 20)  # room for two such documents
    corpus = docs([4, 4, 4])
    for _ in range(2):
        for d in corpus:
            memo(d)
    assert calls == ["0", "1", "2", "2"] and len(memo) == 2 and memo.held <= memo.budget
    off = data.PreparedMemo(counting, max_mb=0)
    off(corpus[0]), off(corpus[0])
    assert len(off) == 0 and off.misses == 2


def test_approx_bytes_grows_with_tokens_and_text():
    short, long = fake_prepare(docs([2])[0]), fake_prepare(docs([20])[0])
    assert 0 < data.approx_bytes(short) < data.approx_bytes(long)
    assert data.approx_bytes(["ab", "abcdef"]) > data.approx_bytes(["ab"])
