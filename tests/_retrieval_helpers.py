"""Shared pieces of the index, search and retrieval CLI tests: toy corpora, a tiny graphdoc model, CLI calls.

The model is the ``tiny_bert`` encoder with mean pooling (a random BERT's CLS vectors are nearly
identical for every text, which would make dense scores useless to compare) and 12-word passages,
so each three-sentence toy document has three passages.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
from pathlib import Path

import numpy as np
import torch

from graphdoc.cli import main
from graphdoc.config import ChunkerConfig, ModelConfig, PassageEncoderConfig
from graphdoc.encoder import GraphDocEncoder

VOCAB = ["graph", "attention", "network", "document", "passage", "retrieval", "dense", "sparse", "fusion", "query",
         "index", "shard", "meeting", "topic", "section", "sentence", "quick", "brown", "fox", "lazy", "dog",
         "unicode", "numbers", "long", "split", "vectors"]

#: rare words placed in one document each: a BM25 query with one of them has exactly one match
RARE = {"d007": "zebra", "d012": "walrus", "d003": "okapi"}



def chunker_config(max_words: int) -> ModelConfig:
    return ModelConfig(chunker=ChunkerConfig(max_words=max_words), passage_encoder=PassageEncoderConfig(pooling="mean"))


MODEL_CONFIG = chunker_config(12)


def make_docs(n: int, seed: int = 0, start: int = 0, prefix: str = "d") -> list[dict]:
    """``n`` documents ``{prefix}{i:03d}`` of three 8-word sentences; documents in ``RARE`` hold their word."""
    rng = random.Random(seed)
    docs = []
    for i in range(start, start + n):
        doc_id = f"{prefix}{i:03d}"
        sentences = [[rng.choice(VOCAB) for _ in range(8)] for _ in range(3)]
        if doc_id in RARE:
            sentences[1][3] = RARE[doc_id]
        text = " ".join(" ".join(words).capitalize() + "." for words in sentences)
        docs.append({"_id": doc_id, "title": f"Title {i}", "text": text})
    return docs


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def save_model(tiny_bert: Path, folder: Path, config: ModelConfig = MODEL_CONFIG) -> Path:
    """A saved graphdoc model on ``tiny_bert`` with ``config``: usable as ``--model folder``. Its freshly
    initialised layers are seeded, so every test session scores the same."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        GraphDocEncoder.from_pretrained(str(tiny_bert), config=config, device="cpu").save_pretrained(folder)
    return folder


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def doc_ids(index_dir: Path) -> list[str]:
    return (index_dir / "final" / "doc_ids.txt").read_text(encoding="utf-8").splitlines()


def records(index_dir: Path) -> list[dict]:
    """The records of an index's document store (final/docstore.jsonl), in row order."""
    from graphdoc.retrieval.docstore import DocStore

    store = DocStore(index_dir / "final" / "docstore.jsonl")
    try:
        return [store[i] for i in range(len(store))]
    finally:
        store.close()


def kill_on_shard(monkeypatch, number: int = 2) -> None:
    """Make the index builder raise KeyboardInterrupt (a kill) as it starts encoding its ``number``-th shard;
    ``monkeypatch.undo()`` lets a rerun finish."""
    from graphdoc.retrieval import builder

    encode_shard, calls = builder._encode_shard, []

    def killed(*args, **kwargs):
        calls.append(1)
        if len(calls) == number:
            raise KeyboardInterrupt
        encode_shard(*args, **kwargs)

    monkeypatch.setattr(builder, "_encode_shard", killed)


def search_runs(index_dir: Path, queries: dict[str, str], k: int) -> dict[str, dict]:
    """``{mode: run}`` of ``queries`` over an index, in every search mode."""
    from graphdoc.retrieval.searcher import Searcher

    with Searcher(index_dir) as searcher:
        return {mode: searcher.batch_search(queries, k=k, mode=mode) for mode in ("dense", "bm25", "hybrid")}


def assert_same_runs(runs: dict[str, dict], expected: dict[str, dict]) -> None:
    """The runs (:func:`search_runs`) rank the same documents in every mode, with the same scores: BM25's equal,
    dense and hybrid within 1e-6 (equal here; a tolerance for BLAS builds whose sums depend on the batches the
    shards were encoded in)."""
    assert runs.keys() == expected.keys()
    for mode in runs:
        assert runs[mode].keys() == expected[mode].keys(), mode
        for qid in runs[mode]:
            assert list(runs[mode][qid]) == list(expected[mode][qid]), (mode, qid)
            tolerance = 0 if mode == "bm25" else 1e-6
            np.testing.assert_allclose(list(runs[mode][qid].values()), list(expected[mode][qid].values()),
                                       rtol=tolerance, atol=tolerance, err_msg=f"{mode} {qid}")


def manifest_json(index_dir: Path) -> dict:
    return json.loads((index_dir / "manifest.json").read_text(encoding="utf-8"))


def searched_vectors(index_dir: Path, passages: bool = False) -> np.ndarray:
    """The document (or passage) vectors ``final/`` is searched with, rows in index order, read as the searcher
    reads them (from the exact FAISS index that holds them, or from the ``.npy`` beside another kind)."""
    from graphdoc.retrieval.dense_searcher import DenseSearcher

    manifest = manifest_json(Path(index_dir))
    dense = DenseSearcher(Path(index_dir) / "final", manifest["metric"], manifest["faiss_factory"], device="cpu")
    return np.array(dense.passage_vectors if passages else dense.doc_vectors)


def cli(*argv: str) -> int:
    """``graphdoc -q ARGV``: quiet, so stderr holds only warnings and errors."""
    return main(["-q", *map(str, argv)])


def error_line(capsys, command: str) -> str:
    """The whole of stderr, which must be exactly one ``graphdoc COMMAND: error: ...`` line."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"graphdoc {command}: error: "), err
    return lines[0]


@contextlib.contextmanager
def cli_state_restored():
    """``main`` configures logging and quiets transformers for the process; undo that afterwards."""
    from transformers.utils import logging as hf_logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    bars, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model gains nothing from threads on a busy shared CPU
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        root.handlers[:] = handlers
        root.setLevel(level)
        hf_logging.set_verbosity(verbosity)
        (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()
