import json
import math
import sys

import numpy as np
import pytest

from graphdoc.errors import GraphDocError
from graphdoc.retrieval.bm25 import BM25Config, BM25Index

TEXTS = [
    "the cat sat on the mat",
    "dogs chase cats in the garden",
    "a quick brown fox jumps over the lazy dog",
    "cat food for a hungry cat",
    "",
    "mat mat mat",
]


def test_config_round_trip_and_errors():
    config = BM25Config(k1=1.2, stemmer="english")
    assert BM25Config.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(GraphDocError, match=r"^unknown BM25Config key\(s\) 'k3'; valid keys: backend, method, "):
        BM25Config.from_dict({"k3": 1.0})
    with pytest.raises(GraphDocError, match=r"^unknown BM25 backend 'lucene'; valid: 'bm25s', 'rank_bm25'$"):
        BM25Config(backend="lucene")
    with pytest.raises(GraphDocError, match=r"^unknown BM25 method 'okapi'; valid: 'lucene', 'robertson'"):
        BM25Config(method="okapi")
    with pytest.raises(GraphDocError, match=r"^BM25 needs k1 >= 0 and 0 <= b <= 1, got k1=1.5, b=2$"):
        BM25Config(b=2)


def test_exact_lucene_score():
    index = BM25Index.build(["apple banana", "apple", "cherry"])
    # idf = ln(1 + (N - df + .5) / (df + .5)); tf part = tf / (tf + k1 (1 - b + b |d| / avgdl))
    idf = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    tf_part = 1 / (1 + 1.5 * (0.25 + 0.75 * 2 / (4 / 3)))
    scores = index.get_scores("banana")
    assert scores.dtype == np.float32 and scores.shape == (3,)
    np.testing.assert_allclose(scores, [idf * tf_part, 0, 0], rtol=1e-6)


def test_search_shapes_padding_and_ties():
    index = BM25Index.build(TEXTS)
    indices, scores = index.search(["cat mat", "zebra", "dog"], k=4)
    assert indices.dtype == np.int64 and scores.dtype == np.float32 and indices.shape == (3, 4)
    assert indices.tolist() == [[0, 5, 3, -1], [-1, -1, -1, -1], [2, -1, -1, -1]]
    assert scores[1].tolist() == [0, 0, 0, 0] and scores[0, 3] == 0 and np.all(np.diff(scores[0, :3]) < 0)
    np.testing.assert_array_equal(scores[0, :3], index.get_scores("cat mat")[[0, 5, 3]])
    assert index.search(["cat"], k=100)[0].shape == (1, 6)  # k clipped to the corpus size
    same = BM25Index.build(["xx yy", "yy xx", "xx yy", "zz"])
    assert same.search(["xx"], k=2)[0].tolist() == [[0, 1]]  # ties broken by row
    threaded = index.search(["cat mat", "zebra", "dog"], k=4, n_threads=2)
    np.testing.assert_array_equal(threaded[0], indices)


def test_search_errors():
    with pytest.raises(GraphDocError, match="^cannot build a BM25 index from an empty corpus$"):
        BM25Index.build([])
    with pytest.raises(GraphDocError, match=r"^cannot build a BM25 index: none of the 2 texts has a word to index"):
        BM25Index.build(["a b", "the"], BM25Config(backend="rank_bm25"))
    with pytest.raises(GraphDocError, match="^search expects a list of query strings, got a single string$"):
        BM25Index.build(TEXTS).search("cat", k=1)


def test_texts_without_a_word_to_index_make_an_index_that_finds_nothing(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="graphdoc"):
        index = BM25Index.build(["a b", "the", "!!!"])
    assert caplog.messages == ["none of the 3 texts has a word BM25 indexes (2+ letters or digits, not a stop word): "
                               "BM25 finds nothing in them"]
    index.save(tmp_path / "bm25")
    for found in (index, BM25Index.load(tmp_path / "bm25")):
        assert found.num_docs == 3 and found.get_scores("the cat").tolist() == [0.0, 0.0, 0.0]
        assert found.search(["cat", "b"], k=2)[0].tolist() == [[-1, -1], [-1, -1]]


def test_stemmer():
    assert BM25Index.build(TEXTS).search(["cats"], k=3)[0].tolist() == [[1, -1, -1]]
    stemmed = BM25Index.build(TEXTS, BM25Config(stemmer="english"))
    assert stemmed.search(["cats"], k=3)[0].tolist() == [[3, 0, 1]]
    with pytest.raises(GraphDocError, match=r"^unknown BM25 stemmer 'klingon'; valid: 'arabic', "):
        BM25Index.build(TEXTS, BM25Config(stemmer="klingon"))


@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_plain_files(tmp_path, mmap):
    index = BM25Index.build(TEXTS, BM25Config(method="bm25+"))
    index.save(tmp_path / "bm25")
    files = sorted(p.name for p in (tmp_path / "bm25").iterdir())
    assert files == [
        "config.json",
        "data.csc.index.npy",
        "indices.csc.index.npy",
        "indptr.csc.index.npy",
        "nonoccurrence_array.index.npy",
        "params.index.json",
        "vocab.index.json",
    ]
    for npy in (tmp_path / "bm25").glob("*.npy"):
        assert np.load(npy, allow_pickle=False).dtype != object
    meta = json.loads((tmp_path / "bm25" / "config.json").read_text())
    assert meta["format"] == "graphdoc.bm25" and meta["num_docs"] == 6 and meta["config"]["method"] == "bm25+"
    loaded = BM25Index.load(tmp_path / "bm25", mmap=mmap)
    assert loaded.config == index.config and len(loaded) == 6
    queries = ["cat mat", "dog garden", "zebra"]
    for a, b in zip(loaded.search(queries, k=6), index.search(queries, k=6)):
        np.testing.assert_array_equal(a, b)


def test_load_errors(tmp_path):
    with pytest.raises(GraphDocError, match=r"^not a BM25 index folder \(no config.json\): "):
        BM25Index.load(tmp_path)
    (tmp_path / "config.json").write_text('{"format": "other"}')
    with pytest.raises(GraphDocError, match=r"config.json: not a graphdoc.bm25 index \(format='other'\)$"):
        BM25Index.load(tmp_path)


def test_rank_bm25_matches_bm25s_okapi(tmp_path):
    # bm25s "atire" tf + "robertson" idf is BM25Okapi; no term is in more than half the documents,
    # so BM25Okapi's idf floor (epsilon) does not apply
    texts = TEXTS[:4] + ["garden food for birds", "brown bread", "sat in the sun"]
    queries = ["cat mat", "garden dog", "brown fox food", "sun"]
    okapi = BM25Index.build(texts, BM25Config(method="atire", idf_method="robertson"))
    reference = BM25Index.build(texts, BM25Config(backend="rank_bm25"))
    for a, b in zip(okapi.search(queries, k=7), reference.search(queries, k=7)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    reference.save(tmp_path / "rank")
    assert sorted(p.name for p in (tmp_path / "rank").iterdir()) == ["config.json", "corpus.tokens.jsonl"]
    reloaded = BM25Index.load(tmp_path / "rank")
    np.testing.assert_array_equal(reloaded.get_scores("brown fox"), reference.get_scores("brown fox"))


def test_rank_bm25_epsilon_zero_matches_with_common_terms():
    texts = ["cat dog", "cat bird", "cat fish", "dog"]  # "cat" is in 3 of 4 documents
    okapi = BM25Index.build(texts, BM25Config(method="atire", idf_method="robertson"))
    reference = BM25Index.build(texts, BM25Config(backend="rank_bm25", epsilon=0.0))
    for query in ["cat", "cat dog", "fish"]:
        np.testing.assert_allclose(okapi.get_scores(query), reference.get_scores(query), rtol=1e-6)


def test_missing_rank_bm25_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "rank_bm25", None)
    with pytest.raises(GraphDocError, match="^the BM25 backend needs rank_bm25; install it with: pip install rank-bm25$"):
        BM25Index.build(TEXTS, BM25Config(backend="rank_bm25"))


@pytest.mark.parametrize("method", ["bm25l", "bm25+"])
def test_bm25l_and_bm25plus_score_a_document_without_a_query_term_0(method, tmp_path):
    index = BM25Index.build(["apple banana", "apple", "cherry"], BM25Config(method=method))
    retriever = index.backend.retriever
    raw = retriever.get_scores_from_ids(retriever.get_tokens_ids(["banana"]))
    assert raw[1] == raw[2] > 0  # bm25s's floor: the same for every document without the term
    scores = index.get_scores("banana")
    assert scores[0] == pytest.approx(raw[0]) and raw[0] > raw[1] and scores[1:].tolist() == [0, 0]
    indices, values = index.search(["banana", "cherry apple", "zebra"], k=3)
    assert indices.tolist() == [[0, -1, -1], [2, 1, 0], [-1, -1, -1]] and values[2].tolist() == [0, 0, 0]
    assert np.all(values[1] > 0)
    index.save(tmp_path / "bm25")
    np.testing.assert_array_equal(BM25Index.load(tmp_path / "bm25").get_scores("banana"), scores)


def test_rank_bm25_negative_scores_are_matches_and_ranked():
    # most terms are in most documents: BM25Okapi's idf floor (epsilon x the average idf) is negative here
    index = BM25Index.build(["apple pie", "apple pie pie", "apple apple pie", "plum"], BM25Config(backend="rank_bm25"))
    scores = index.get_scores("apple")
    assert np.all(scores[:3] < 0) and scores[3] == 0
    indices, values = index.search(["apple", "zebra"], k=4)
    assert indices.tolist() == [[1, 0, 2, -1], [-1, -1, -1, -1]] and values[0, 3] == 0
    np.testing.assert_array_equal(values[0, :3], scores[[1, 0, 2]])


@pytest.mark.parametrize("stemmer", [None, "english"])
def test_build_in_batches_scores_as_one_tokenisation_of_every_text(monkeypatch, stemmer):
    """The index is built from texts tokenised TOKENIZE_BATCH at a time (each batch with its own bm25s vocabulary)
    into one flat array of term ids: every document's score must be what bm25s gives for the whole corpus's
    term lists, whatever the batch size, and a generator is read once."""
    import bm25s

    from graphdoc.retrieval import bm25 as bm25_module

    texts = [f"running runner {w} the {w}s of document {i} runs" for i, w in enumerate(
        ["apple", "pear", "apple", "plum", "", "pear", "grape", "apple", "kiwi"])] + ["the of and", "plums plum"]
    config = BM25Config(stemmer=stemmer)
    reference = bm25s.BM25(k1=config.k1, b=config.b, method=config.method)
    reference.index(bm25_module.tokenize(texts, config), create_empty_token=False, show_progress=False)
    for batch in (1, 2, 3, 100):
        monkeypatch.setattr(bm25_module, "TOKENIZE_BATCH", batch)
        read = []
        index = BM25Index.build((read.append(t) or t for t in texts), config)
        assert read == texts
        assert index.num_docs == len(texts)
        for query in ("apple", "plum runs", "runner kiwi grape", "document 3"):
            ids = reference.get_tokens_ids(bm25_module.tokenize([query], config)[0])
            expected = reference.get_scores_from_ids(ids)
            np.testing.assert_array_equal(index.get_scores(query), expected)


def test_term_ids_give_back_every_documents_terms():
    from graphdoc.retrieval.bm25 import TermIds, tokenize

    texts = ["alpha beta alpha", "", "the gamma", "beta delta epsilon"]
    corpus = TermIds.from_texts(iter(texts), BM25Config())
    assert corpus.flat.dtype == np.int32 and corpus.ptr.tolist() == [0, 3, 3, 4, 7]
    assert corpus.terms() == tokenize(texts, BM25Config())
    assert [[sorted(corpus.vocab, key=corpus.vocab.get)[i] for i in doc] for doc in corpus] == corpus.terms()


def test_build_refuses_a_single_string():
    with pytest.raises(TypeError, match="expects an iterable of texts, got a single string"):
        BM25Index.build("apple pear")


@pytest.mark.parametrize("text, unicode_terms, bm25s_terms", [
    ("हिन्दी का वाक्य", ["हिन्दी", "का", "वाक्य"], []),  # vowel signs and viramas are combining marks
    ("தமிழ் மொழி", ["தமிழ்", "மொழி"], ["தம"]),
    ("שָׁלוֹם", ["שָׁלוֹם"], ["לו"]),
    ("re\u0301sume\u0301 of a cafe\u0301", ["résumé", "café"], ["re", "sume", "cafe"]),  # decomposed accents
    ("ＡＢＣ graph 3.14", ["abc", "graph", "14"], ["ａｂｃ", "graph", "14"]),  # full-width letters are ASCII ones
])
def test_unicode_terms_keep_combining_marks_in_their_words(text, unicode_terms, bm25s_terms):
    from graphdoc.retrieval.bm25 import tokenize

    assert tokenize([text], BM25Config())[0] == unicode_terms
    assert tokenize([text], BM25Config(terms="bm25s"))[0] == bm25s_terms


def test_a_hindi_corpus_is_indexed_and_found_by_its_words():
    index = BM25Index.build(["दिल्ली भारत की राजधानी है", "मुंबई एक बड़ा शहर है"])
    indices, scores = index.search(["दिल्ली", "मुंबई शहर"], k=1)
    assert indices.tolist() == [[0], [1]] and (scores > 0).all()
    assert BM25Index.build(["हिन्दी का वाक्य", "বাংলা ভাষা"]).num_docs == 2
    none = BM25Index.build(["हिन्दी का वाक्य", "বাংলা ভাষা"], BM25Config(terms="bm25s"))  # bm25s's terms: none
    assert none.search(["वाक्य"], k=2)[0].tolist() == [[-1, -1]]


def test_a_setting_stored_before_terms_existed_reads_as_bm25s_terms(tmp_path):
    index = BM25Index.build(["re\u0301sume\u0301 here", "another text"], BM25Config(terms="bm25s"))
    index.save(tmp_path / "bm25")
    meta = json.loads((tmp_path / "bm25" / "config.json").read_text(encoding="utf-8"))
    del meta["config"]["terms"]  # as graphdoc wrote it before
    (tmp_path / "bm25" / "config.json").write_text(json.dumps(meta), encoding="utf-8")
    loaded = BM25Index.load(tmp_path / "bm25")
    assert loaded.config.terms == "bm25s"
    assert loaded.get_scores("sume").tolist() == index.get_scores("sume").tolist() and loaded.get_scores("sume")[0] > 0
    assert BM25Config.from_stored({}) == BM25Config()  # nothing stored: the defaults


def test_ascii_texts_take_the_plain_pattern_with_the_same_terms(monkeypatch):
    """With "unicode" terms an ASCII text is tokenised with bm25s's own pattern (twice as fast): a batch of ASCII
    and other texts, in any order, gives each text the terms the "unicode" pattern gives it alone."""
    import unicodedata

    import bm25s

    from graphdoc.retrieval import bm25 as bm25_module
    from graphdoc.retrieval.bm25 import TermIds, tokenize, unicode_term_pattern

    texts = ["plain ascii words here", "re\u0301sume\u0301 and cafe\u0301", "", "हिन्दी का वाक्य", "x y zz",
             "ＡＢＣ ascii again", "the of and", "naïve façade"]
    alone = [bm25s.tokenize([unicodedata.normalize("NFKC", t)], token_pattern=unicode_term_pattern(),
                            stopwords="en", return_ids=False, show_progress=False)[0] for t in texts]
    assert tokenize(texts, BM25Config()) == alone
    for batch in (1, 3, 100):
        monkeypatch.setattr(bm25_module, "TOKENIZE_BATCH", batch)
        assert TermIds.from_texts(iter(texts), BM25Config()).terms() == alone
