"""``--max-passages``: the passage cap of one run of ``embed``, ``index`` (kept for documents added later, not
needed by a search) and ``compare``; warned of where a flat FirstP model reads no passages."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from _retrieval_helpers import cli, error_line, make_docs, manifest_json, records, write_jsonl

from graphdoc.encoder import GraphDocEncoder
from graphdoc.retrieval.searcher import Searcher

pytestmark = pytest.mark.usefixtures("restore_cli_state")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Five documents of three 12-word passages each (the model's passages; see _retrieval_helpers)."""
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", make_docs(5))


def capped(model_dir: Path, cap: int | None) -> GraphDocEncoder:
    model = GraphDocEncoder.from_pretrained(str(model_dir), device="cpu")
    model.config.chunker.max_passages = cap
    return model


def test_embed_takes_the_documents_first_n_passages(model_dir, corpus, tmp_path, caplog) -> None:
    docs = [line for line in corpus.read_text(encoding="utf-8").splitlines()]
    full, two = capped(model_dir, None).encode(make_docs(5)), capped(model_dir, 2).encode(make_docs(5))
    assert not np.allclose(full, two, atol=1e-4)  # the third passage counts
    with caplog.at_level(logging.WARNING):
        assert cli("embed", "--corpus", corpus, "--output", tmp_path / "two.npy", "--model", model_dir,
                   "--max-passages", 2) == 0
    assert np.allclose(np.load(tmp_path / "two.npy"), two, atol=1e-6)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == ["5 document(s) had more than 2 passages: their first 2 were embedded and 5 passages left out "
                      "(--max-passages N sets the cap, 0 for none; or chunker.max_passages, null for none)"]
    assert cli("embed", "--corpus", corpus, "--output", tmp_path / "all.npy", "--model", model_dir,
               "--max-passages", 0) == 0
    assert np.allclose(np.load(tmp_path / "all.npy"), full, atol=1e-6) and len(docs) == 5


def test_a_negative_cap_is_one_error_line(model_dir, corpus, tmp_path, capsys) -> None:
    assert cli("embed", "--corpus", corpus, "--output", tmp_path / "x.npy", "--model", model_dir,
               "--max-passages", -1) == 1
    assert error_line(capsys, "embed") == "graphdoc embed: error: --max-passages must be at least 0 (0: no cap); got -1"
    assert not (tmp_path / "x.npy").exists()


def test_an_index_keeps_its_cap_and_is_searched_without_it(model_dir, corpus, tmp_path, capsys) -> None:
    index = tmp_path / "index"
    assert cli("index", "--corpus", corpus, "--index-dir", index, "--model", model_dir, "--max-passages", 2) == 0
    assert manifest_json(index)["model"]["chunker"]["max_passages"] == 2
    with Searcher(index) as searcher:  # the index's model, with the index's cap
        assert searcher.model.config.chunker.max_passages == 2
        vectors = np.load(index / "shards" / "00000" / "doc_vectors.npy")
        expected = capped(model_dir, 2).encode(make_docs(5))
        assert np.allclose(vectors, expected, atol=1e-5)
        hits = searcher.batch_search(["graph attention"], k=3, mode="dense")["0"]
    with Searcher(index, model=model_dir) as searcher:  # the model folder, cap 100: queries are encoded alike
        assert searcher.batch_search(["graph attention"], k=3, mode="dense")["0"] == pytest.approx(hits, abs=1e-6)
    capsys.readouterr()
    more = write_jsonl(tmp_path / "more.jsonl", make_docs(2, seed=1, start=5))
    assert cli("index", "--corpus", more, "--index-dir", index) == 0  # the index's model and cap
    assert manifest_json(index)["counts"]["documents"] == 7
    capsys.readouterr()
    assert cli("index", "--corpus", more, "--index-dir", index, "--max-passages", 3) == 1
    assert error_line(capsys, "index") == (f"graphdoc index: error: {index} was built with a cap of 2 passages a "
                                           "document: adding documents keeps it (leave --max-passages out, or "
                                           "build another index)")
    assert cli("index", "--corpus", more, "--index-dir", index, "--model", model_dir) == 1  # cap 100: refused
    assert "was built with chunker.max_passages=2, the model has chunker.max_passages=100" in error_line(capsys,
                                                                                                       "index")


def test_compare_takes_the_cap(model_dir, tmp_path, capsys) -> None:
    docs = make_docs(2)
    a, b = (write_jsonl(tmp_path / f"{d['_id']}.jsonl", [d]) for d in docs)
    assert cli("compare", a, b, "--model", model_dir, "--max-passages", 1, "--json") == 0
    import json

    result = json.loads(capsys.readouterr().out)
    assert len(result["passage_similarity"]) == 1 and len(result["passage_similarity"][0]) == 1


@pytest.fixture(scope="module")
def flat_dirs(tiny_bert, tmp_path_factory) -> dict[str, Path]:
    """Saved flat models on ``tiny_bert`` (12-word passages, as the graph model's) in document modes first and
    mean."""
    from graphdoc.flat_config import FlatModelConfig
    from graphdoc.flat_encoder import FlatEncoder

    folders = {}
    for document in ("first", "mean"):
        config = FlatModelConfig.from_dict({"chunker": {"max_words": 12}, "passage_encoder": {"pooling": "mean"},
                                            "graph": {"document": document}})
        folders[document] = tmp_path_factory.mktemp(f"flat-{document}")
        FlatEncoder.from_pretrained(str(tiny_bert), config=config, device="cpu").save_pretrained(folders[document])
    return folders


NOT_APPLIED = ("WARNING graphdoc.cli: --max-passages does not apply to this model: a flat model in document mode "
               "first (FirstP) embeds a document's title and text as one sequence cut at the encoder's limit, not its "
               "passages (--flat-document mean embeds passages)")


def test_a_cap_a_flat_first_model_does_not_read_is_warned_of(flat_dirs, corpus, tmp_path, capsys) -> None:
    first = flat_dirs["first"]
    for command in (["embed", "--corpus", corpus, "--output", tmp_path / "one.npy"],
                    ["cluster", "--corpus", corpus, "-k", 2, "--output", tmp_path / "clusters.tsv"],
                    ["plot", "embeddings", "--corpus", corpus, "--output", tmp_path / "map.png"]):
        assert cli(*command, "--model", first, "--max-passages", 1) == 0
        assert capsys.readouterr().err.splitlines() == [NOT_APPLIED], command[0]
    assert cli("embed", "--corpus", corpus, "--output", tmp_path / "all.npy", "--model", first) == 0
    assert np.array_equal(np.load(tmp_path / "one.npy"), np.load(tmp_path / "all.npy"))  # the cap changed nothing


def test_a_cap_a_flat_model_reads_is_not_warned_of(flat_dirs, corpus, tmp_path, capsys) -> None:
    import json

    def run(*command) -> str:
        assert cli(*command, "--max-passages", 1) == 0
        err = capsys.readouterr().err
        assert NOT_APPLIED not in err.splitlines()
        return err

    # the passages an index keeps (their vectors, or without them the spans its hits' passages come from), the
    # passages compare matches, a mean model's vector: each is capped
    run("index", "--corpus", corpus, "--index-dir", tmp_path / "index", "--model", flat_dirs["first"])
    assert manifest_json(tmp_path / "index")["counts"]["passages"] == 5
    run("index", "--corpus", corpus, "--index-dir", tmp_path / "bare", "--model", flat_dirs["first"], "--no-passages")
    assert [len(record["passages"]) for record in records(tmp_path / "bare")] == [1] * 5
    a, b = (write_jsonl(tmp_path / f"{d['_id']}.jsonl", [d]) for d in make_docs(2))
    run("compare", a, b, "--model", flat_dirs["first"], "--json")
    err = run("embed", "--corpus", corpus, "--output", tmp_path / "mean.npy", "--model", flat_dirs["mean"])
    assert "5 document(s) had more than 1 passages" in err
    assert cli("compare", a, b, "--model", flat_dirs["first"], "--json") == 0
    assert len(json.loads(capsys.readouterr().out)["passage_similarity"]) == 3  # (1 with the cap, above)


FIRSTP_UNCAPPED = NOT_APPLIED.removesuffix(" (--flat-document mean embeds passages)")  # (no such option here)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory) -> Path:
    """Eight documents of three passages each, labelled a and b in turn."""
    docs = [dict(doc, label="ab"[i % 2]) for i, doc in enumerate(make_docs(8))]
    return write_jsonl(tmp_path_factory.mktemp("labelled") / "labelled.jsonl", docs)


def test_finetune_and_predict_warn_of_a_cap_a_flat_first_classifier_does_not_read(flat_dirs, tiny_bert, labelled,
                                                                                  tmp_path, capsys) -> None:
    """(finetune --task classification and predict took it silently)"""
    from graphdoc.finetune import read_predictions
    from graphdoc.fileio import read_safetensors

    def warnings(command: str, *argv) -> list[str]:
        capsys.readouterr()
        assert cli(command, *argv) == 0
        return [line for line in capsys.readouterr().err.splitlines() if line.startswith("WARNING")]

    def finetune(model: Path, output: str, *extra) -> list[str]:
        return warnings("finetune", "--task", "classification", "--train", labelled, "--dev", labelled, "--output",
                        tmp_path / output, "--model", model, "--epochs", 1, *extra)

    assert finetune(flat_dirs["first"], "one", "--max-passages", 1) == [FIRSTP_UNCAPPED]
    assert finetune(flat_dirs["first"], "all") == []
    assert finetune(tiny_bert, "plain", "--backbone", "flat", "--max-passages", 1) == [FIRSTP_UNCAPPED]  # (first)
    one, every = (read_safetensors(tmp_path / run / "model" / "head.safetensors") for run in ("one", "all"))
    assert one.keys() == every.keys() and all(torch.equal(one[k], every[k]) for k in one)  # trained alike
    classifier = tmp_path / "all" / "model"
    assert warnings("predict", "--model", classifier, "--input", labelled, "--output", tmp_path / "one.jsonl",
                    "--max-passages", 1) == [FIRSTP_UNCAPPED]
    assert warnings("predict", "--model", classifier, "--input", labelled, "--output", tmp_path / "all.jsonl") == []
    assert read_predictions(tmp_path / "one.jsonl") == read_predictions(tmp_path / "all.jsonl")
    # the cap applies to a mean model's vectors, and to the sub-documents supcon draws from a first model's passages
    assert finetune(flat_dirs["mean"], "mean", "--max-passages", 1) == []
    assert warnings("predict", "--model", tmp_path / "mean" / "model", "--input", labelled, "--output",
                    tmp_path / "mean.jsonl", "--max-passages", 1) == []
    assert finetune(flat_dirs["first"], "supcon", "--max-passages", 1, "--objective", "supcon",
                    "--no-frozen-encoder") == []
