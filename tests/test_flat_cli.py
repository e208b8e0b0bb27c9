"""``--backbone flat`` through ``graphdoc embed``, ``index`` and ``search`` in-process; indexes keep backbones apart."""

from __future__ import annotations

import json
import logging
import random
import re
from pathlib import Path

import numpy as np
import pytest
from _retrieval_helpers import cli, error_line, searched_vectors

from graphdoc.config import ModelConfig
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError, IndexMismatchError
from graphdoc.flat_config import FlatConfig, FlatModelConfig
from graphdoc.flat_encoder import FlatEncoder
from graphdoc.retrieval.builder import IndexSettings, build_index
from graphdoc.retrieval.searcher import Searcher

WORDS = ["graph", "attention", "network", "document", "passage", "retrieval", "dense", "sparse", "fusion", "query",
         "quick", "brown", "fox", "lazy", "dog"]
# mean pooling: a random BERT's CLS vectors are nearly the same for every text
FLAT_YAML = """\
chunker: {max_words: 12}
passage_encoder: {pooling: mean}
graph: {document: first}
"""


def flat_config(document: str = "first") -> FlatModelConfig:
    return FlatModelConfig.from_dict({"chunker": {"max_words": 12}, "passage_encoder": {"pooling": "mean"},
                                      "graph": {"document": document}})




def manifest_json(index_dir: Path) -> dict:
    return json.loads((index_dir / "manifest.json").read_text(encoding="utf-8"))


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture(autouse=True)
def restore_logging():
    """``main`` configures logging and quiets transformers for the process; undo that after each test."""
    from transformers.utils import logging as hf_logging

    root = logging.getLogger()
    handlers, level, verbosity = root.handlers[:], root.level, hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    hf_logging.set_verbosity(verbosity)
    (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    """Eight titled documents of three 8-word sentences (three 12-word passages each)."""
    rng = random.Random(0)

    def sentence() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(8)).capitalize() + "."

    return [{"_id": f"d{i}", "title": f"Title {i}", "text": " ".join(sentence() for _ in range(3))} for i in range(8)]


@pytest.fixture(scope="module")
def corpus(docs, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


@pytest.fixture
def yaml_config(tmp_path: Path) -> Path:
    path = tmp_path / "flat.yaml"
    path.write_text(FLAT_YAML, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def flat_index(tiny_bert: Path, corpus: Path, tmp_path_factory) -> Path:
    """An index built by ``graphdoc index --backbone flat`` on the plain tiny_bert folder."""
    folder = tmp_path_factory.mktemp("flat-index") / "index"
    config = tmp_path_factory.mktemp("config") / "flat.yaml"
    config.write_text(FLAT_YAML, encoding="utf-8")
    assert cli("index", "--corpus", corpus, "--index-dir", folder, "--model", tiny_bert, "--backbone", "flat",
               "--config", config, "--shard-size", "3") == 0
    return folder


# ------------------------------------------------------------------ embed
@pytest.mark.parametrize("document", ["first", "mean"])
def test_embed_with_a_flat_backbone(tiny_bert: Path, corpus: Path, docs, yaml_config: Path, tmp_path: Path,
                                    document: str) -> None:
    output = tmp_path / "emb.npy"
    assert cli("embed", "--corpus", corpus, "--output", output, "--model", tiny_bert, "--backbone", "flat",
               "--config", yaml_config, "--flat-document", document, "--batch-size", "3") == 0
    model = FlatEncoder.from_pretrained(str(tiny_bert), config=flat_config(document), device="cpu")
    np.testing.assert_allclose(np.load(output), model.encode(docs), atol=1e-6)


def test_a_saved_flat_model_needs_no_backbone_flag(tiny_bert: Path, corpus: Path, docs, tmp_path: Path) -> None:
    model = FlatEncoder.from_pretrained(str(tiny_bert), config=flat_config("mean"), device="cpu")
    model.save_pretrained(tmp_path / "flat")
    assert cli("embed", "--corpus", corpus, "--output", tmp_path / "emb.npy", "--model", tmp_path / "flat") == 0
    np.testing.assert_allclose(np.load(tmp_path / "emb.npy"), model.encode(docs), atol=1e-6)


def test_flat_document_replaces_a_saved_flat_models_mode(tiny_bert: Path, corpus: Path, docs, yaml_config: Path,
                                                          tmp_path: Path, capsys) -> None:
    FlatEncoder.from_pretrained(str(tiny_bert), config=flat_config("first"), device="cpu").save_pretrained(
        tmp_path / "flat")
    args = ("embed", "--corpus", corpus, "--output", tmp_path / "emb.npy", "--model", tmp_path / "flat")
    assert cli(*args, "--config", yaml_config) == 0
    assert "ignoring the given config" in capsys.readouterr().err  # a saved model keeps its own
    assert cli(*args, "--flat-document", "mean") == 0
    assert "WARNING" not in capsys.readouterr().err  # no config was given: nothing is ignored
    mean = FlatEncoder.from_pretrained(str(tiny_bert), config=flat_config("mean"), device="cpu")
    np.testing.assert_allclose(np.load(tmp_path / "emb.npy"), mean.encode(docs), atol=1e-6)


def test_a_saved_model_ignores_a_config_for_another_backbone(tiny_bert: Path, corpus: Path, docs, tmp_path: Path,
                                                             capsys) -> None:
    model = FlatEncoder.from_pretrained(str(tiny_bert), config=flat_config("mean"), device="cpu")
    model.save_pretrained(tmp_path / "flat")
    capsys.readouterr()
    for command, output in (("embed", "--output"), ("index", "--index-dir")):  # a graph config: not even read
        written = tmp_path / ("emb.npy" if command == "embed" else "index")
        assert cli(command, "--corpus", corpus, output, written, "--model", tmp_path / "flat",
                   "--config", "section-graph") == 0
        assert (f"ignoring the given config section-graph: {tmp_path / 'flat'} is a saved graphdoc model with its "
                "own") in capsys.readouterr().err
    np.testing.assert_allclose(np.load(tmp_path / "emb.npy"), model.encode(docs), atol=1e-6)


def test_an_index_built_with_flat_document_is_searched_and_extended_in_its_mode(tiny_bert: Path, docs,
                                                                                 tmp_path: Path, capsys) -> None:
    FlatEncoder.from_pretrained(str(tiny_bert), config=flat_config("first"), device="cpu").save_pretrained(
        tmp_path / "flat")
    first, rest = tmp_path / "first.jsonl", tmp_path / "rest.jsonl"
    first.write_text("".join(json.dumps(d) + "\n" for d in docs[:5]), encoding="utf-8")
    rest.write_text("".join(json.dumps(d) + "\n" for d in docs[5:]), encoding="utf-8")
    index = tmp_path / "index"
    assert cli("index", "--corpus", first, "--index-dir", index, "--model", tmp_path / "flat",
               "--flat-document", "mean") == 0
    assert manifest_json(index)["model"]["graph"]["document"] == "mean"
    assert cli("index", "--corpus", rest, "--index-dir", index) == 0  # the index's own model, in its mode
    assert cli("index", "--corpus", rest, "--index-dir", index, "--flat-document", "mean") == 1
    assert error_line(capsys, "index").endswith(f"--flat-document sets the document mode of --model; {index} keeps "
                                                "the model and mode it was built with: leave --flat-document out "
                                                "to add to it")
    capsys.readouterr()
    assert cli("search", "--index-dir", index, "graph fox", "--mode", "hybrid", "--json") == 0
    assert len(capsys.readouterr().out.splitlines()) == 8
    mean = FlatEncoder.from_pretrained(str(tiny_bert), config=flat_config("mean"), device="cpu")
    with Searcher(index) as searcher:
        assert searcher.model.config.graph.document == "mean"
        np.testing.assert_allclose(searched_vectors(index), unit(mean.encode(docs)), atol=1e-5)


def test_the_same_flat_index_command_runs_again_with_its_config_and_mode(tiny_bert: Path, docs, tmp_path: Path,
                                                                        capsys) -> None:
    (tmp_path / "flat.yaml").write_text(FLAT_YAML.replace("{pooling: mean}", f"{{pooling: mean, model_name_or_path: "
                                                          f"{tiny_bert}}}"), encoding="utf-8")
    first, rest = tmp_path / "first.jsonl", tmp_path / "rest.jsonl"
    first.write_text("".join(json.dumps(d) + "\n" for d in docs[:5]), encoding="utf-8")
    rest.write_text("".join(json.dumps(d) + "\n" for d in docs[5:]), encoding="utf-8")
    for corpus in (first, rest):  # a model named by --config: --flat-document is its mode each time
        assert cli("index", "--corpus", corpus, "--index-dir", tmp_path / "index", "--config", tmp_path / "flat.yaml",
                   "--backbone", "flat", "--flat-document", "mean") == 0
    assert manifest_json(tmp_path / "index")["counts"]["documents"] == 8


@pytest.mark.parametrize("text, message", [
    ("graph: {graph_type: flat, document: maxp}\n", "graph.document must be one of first, mean; got 'maxp'"),
    ("passage_encoder: {pooling: mean, projection_dim: 16}\ngraph: {graph_type: flat}\n",
     "a flat backbone has no projection: passage_encoder.projection_dim must be null"),
])
def test_a_flat_config_file_with_a_mistake_is_told_of_its_mistake(tiny_bert: Path, corpus: Path, tmp_path: Path,
                                                                   capsys, text: str, message: str) -> None:
    (tmp_path / "bad.yaml").write_text(text, encoding="utf-8")
    assert cli("embed", "--corpus", corpus, "--output", tmp_path / "x.npy", "--model", tiny_bert,
               "--config", tmp_path / "bad.yaml") == 1
    assert message in error_line(capsys, "embed")
    from graphdoc.training.config import PretrainSetup

    (tmp_path / "setup.yaml").write_text("model:\n" + "".join(f"  {line}\n" for line in text.splitlines()),
                                         encoding="utf-8")
    with pytest.raises(GraphDocError, match=re.escape(message)):  # (a setting's check names it without "model.")
        PretrainSetup.read(tmp_path / "setup.yaml")


def test_a_flat_config_without_the_backbone_flag_builds_a_flat_model(tiny_bert: Path, corpus: Path,
                                                                      yaml_config: Path, tmp_path: Path) -> None:
    args = ("embed", "--corpus", corpus, "--model", tiny_bert, "--config", yaml_config, "--output")
    assert cli(*args, tmp_path / "guessed.npy") == 0
    assert cli(*args, tmp_path / "flagged.npy", "--backbone", "flat") == 0
    assert np.array_equal(np.load(tmp_path / "guessed.npy"), np.load(tmp_path / "flagged.npy"))
    assert cli(*args, tmp_path / "graph.npy", "--backbone", "graph") == 1  # asked for: its settings must fit


def test_backbone_flag_errors(tiny_bert: Path, corpus: Path, tmp_path: Path, capsys) -> None:
    args = ("embed", "--corpus", corpus, "--output", tmp_path / "emb.npy", "--model")
    assert cli(*args, tiny_bert, "--flat-document", "mean") == 1
    assert error_line(capsys, "embed").endswith("--flat-document needs --backbone flat; the model's backbone is graph")
    FlatEncoder.from_pretrained(str(tiny_bert), device="cpu").save_pretrained(tmp_path / "flat")
    assert cli(*args, tmp_path / "flat", "--backbone", "graph") == 1
    assert "is a saved flat model; it cannot be loaded as a graph one" in error_line(capsys, "embed")


# ------------------------------------------------------------------ index and search
def test_index_records_the_flat_backbone_and_search_loads_it(flat_index: Path, tiny_bert: Path, docs,
                                                            capsys) -> None:
    identity = manifest_json(flat_index)["model"]
    assert identity["graph"] == {"graph_type": "flat", "document": "first"}
    assert identity["path"] == str(tiny_bert.resolve())

    searcher = Searcher(flat_index)  # the model comes from the manifest: a plain encoder, rebuilt flat
    model = searcher.model
    assert isinstance(model, FlatEncoder) and model.config.graph == flat_config("first").graph
    assert model.config.chunker.max_words == 12 and model.config.passage_encoder.pooling == "mean"
    # passage_weight 1.0 is MaxP: the best passage's cosine alone
    searcher.dense.settings.passage_weight = 1.0
    query = "graph attention network"
    q = unit(model.encode_queries([query]))[0]
    maxp = [(unit(out.passage_embeddings(i).numpy()) @ q).max()
            for out in model.iter_forward(docs, return_attention_weights=True) for i in range(len(out.documents))]
    run = searcher.batch_search({"q": query}, k=len(docs), mode="dense")["q"]
    assert run == pytest.approx(dict(zip([d["_id"] for d in docs], np.asarray(maxp, dtype=float).tolist())), abs=1e-5)

    capsys.readouterr()
    assert cli("search", "--index-dir", flat_index, "--mode", "dense", "-k", "3", query) == 0
    lines = capsys.readouterr().out.splitlines()
    assert next(iter(run)) in lines[0] and any(line.startswith("  3. ") for line in lines)


def test_a_flat_index_explains_hits_without_attention(flat_index: Path, capsys) -> None:
    # a flat model has no graph attention: no passage_attention.npy (it held a uniform 1/n stand-in)
    assert not (flat_index / "final" / "passage_attention.npy").exists()
    assert not any((flat_index / "shards").glob("*/passage_attention.npy"))
    capsys.readouterr()
    assert cli("search", "--index-dir", flat_index, "--mode", "dense", "-k", "2", "graph attention network",
               "--explain", "2", "--json") == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    passages = [p for hit in hits for p in hit["explanation"]]
    assert passages and all(p["attention"] is None for p in passages)


def test_an_index_refuses_the_other_backbone(flat_index: Path, tiny_bert: Path, corpus: Path, tmp_path: Path,
                                             capsys) -> None:
    """Same chunker and pooling: the first difference is the backbone, named as ``graph.graph_type``."""
    same = ModelConfig.from_dict({"chunker": {"max_words": 12}, "passage_encoder": {"pooling": "mean"}})
    graph = GraphDocEncoder.from_pretrained(str(tiny_bert), config=same, device="cpu")
    with pytest.raises(IndexMismatchError, match=r"built with graph.graph_type='flat', the model has "
                                                 r"graph.graph_type='full'"):
        Searcher(flat_index, model=graph)
    graph.save_pretrained(tmp_path / "graph")
    assert cli("index", "--corpus", corpus, "--index-dir", flat_index, "--model", tmp_path / "graph") == 1
    assert "graph.graph_type='flat', the model has graph.graph_type='full'" in error_line(capsys, "index")

    graph_index = tmp_path / "graph-index"
    build_index(graph, str(corpus), graph_index, IndexSettings())
    flat = FlatEncoder.from_pretrained(str(tiny_bert), config=flat_config(), device="cpu")
    with pytest.raises(IndexMismatchError, match=r"built with graph.graph_type='full', the model has "
                                                 r"graph.graph_type='flat'"):
        build_index(flat, str(corpus), graph_index)
    assert isinstance(Searcher(graph_index).model, GraphDocEncoder)  # and the graph index loads its own


def test_an_index_refuses_the_other_flat_document_mode(flat_index: Path, tiny_bert: Path) -> None:
    mean = FlatEncoder.from_pretrained(str(tiny_bert), config=flat_config("mean"), device="cpu")
    with pytest.raises(IndexMismatchError, match="built with graph.document='first', the model has "
                                                 "graph.document='mean'"):
        Searcher(flat_index, model=mean)


def test_an_index_built_with_a_saved_flat_model_loads_it(tiny_bert: Path, corpus: Path, tmp_path: Path) -> None:
    FlatEncoder.from_pretrained(str(tiny_bert), config=FlatModelConfig(graph=FlatConfig(document="mean")),
                                device="cpu").save_pretrained(tmp_path / "flat")
    assert cli("index", "--corpus", corpus, "--index-dir", tmp_path / "index", "--model", tmp_path / "flat") == 0
    model = Searcher(tmp_path / "index").model
    assert isinstance(model, FlatEncoder) and model.name_or_path == str((tmp_path / "flat").resolve())
