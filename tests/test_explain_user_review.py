"""Review of explain / compare / plot: an input is not overwritten by the page, the passage cap is reported,
bad arrays are refused in one clear message, attention figures have readable ticks, right-to-left text is
isolated in the page, and a hit or query vector that does not fit the index is named."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from _retrieval_helpers import cli, error_line

from graphdoc.config import ChunkerConfig, ModelConfig, PassageEncoderConfig
from graphdoc.corpus import markdown_sections
from graphdoc.documents import Document, Passage
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError, InputError
from graphdoc.explain import (
    Comparison,
    PassagePair,
    SectionInfo,
    compare_documents,
    explain_passages,
    render_comparison,
)

TEXT = "Graph attention networks read documents. Passages become nodes. Dense vectors and BM25 are fused."
CAP_WARNING = ("2 document(s) had more than 1 passages: their first 1 were compared and {cut} passages left out "
               "(the max_passages argument set the cap)")


@pytest.fixture(autouse=True)
def cli_state(restore_cli_state):
    yield


@pytest.fixture(scope="module")
def model(tiny_bert) -> GraphDocEncoder:
    config = ModelConfig(chunker=ChunkerConfig(max_words=6), passage_encoder=PassageEncoderConfig(pooling="mean"))
    return GraphDocEncoder.from_pretrained(str(tiny_bert), config=config, device="cpu")


# ---------------------------------------------------------------- compare


def test_compare_refuses_an_html_page_over_an_input(model_dir, tmp_path, capsys) -> None:
    a, b = tmp_path / "a.md", tmp_path / "b.txt"
    a.write_text("# A\n" + TEXT, encoding="utf-8")
    b.write_text(TEXT, encoding="utf-8")
    assert cli("compare", a, b, "--model", model_dir, "--html", b) == 1
    assert error_line(capsys, "compare") == (f"graphdoc compare: error: --html {b} is the input file {b}; "
                                             "name another file for the page")
    assert b.read_text(encoding="utf-8") == TEXT


def test_compare_refuses_an_html_page_over_the_corpus(model_dir, tmp_path, capsys) -> None:
    corpus = tmp_path / "c.jsonl"
    records = [{"_id": "x", "text": TEXT}, {"_id": "y", "text": TEXT}]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    before = corpus.read_bytes()
    assert cli("compare", "x", "y", "--corpus", corpus, "--model", model_dir, "--html", corpus) == 1
    assert "is the input file" in error_line(capsys, "compare")
    assert corpus.read_bytes() == before
    folder = tmp_path / "notes"  # a folder corpus: its text files are the inputs
    folder.mkdir()
    for name in ("x", "y"):
        (folder / f"{name}.md").write_text(f"# {name}\n\n{TEXT}\n", encoding="utf-8")
    before = (folder / "x.md").read_bytes()
    assert cli("compare", "x", "y", "--corpus", folder, "--model", model_dir, "--html", folder / "x.md") == 1
    assert error_line(capsys, "compare").endswith(f"--html {folder / 'x.md'} is the input file {folder / 'x.md'}; "
                                                  "name another file for the page")
    assert (folder / "x.md").read_bytes() == before


def test_compare_says_when_the_passage_cap_leaves_passages_out(model, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="graphdoc.chunker"):
        comparison = compare_documents(model, TEXT, TEXT, max_passages=1)
    n = len(model.prepare(Document("t", TEXT)).passages)
    assert n >= 3 and [len(p) for p in comparison.passages] == [1, 1]
    assert [r.getMessage() for r in caplog.records] == [CAP_WARNING.format(cut=2 * (n - 1))]


def test_compare_within_the_cap_is_silent(model, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="graphdoc.chunker"):
        compare_documents(model, TEXT, TEXT)
    assert not caplog.records


# ---------------------------------------------------------------- explanations


def test_a_query_vector_of_the_wrong_size_is_named() -> None:
    record = {"id": "d", "text": "ab cd", "passages": [[0, 2, 0, ""], [3, 5, 0, ""]]}
    with pytest.raises(GraphDocError, match=r"^the query vector must have shape \[4\], as the passage vectors; "
                                            r"got \[5\]$"):
        explain_passages(np.ones(5), np.ones((2, 4)), record)


def test_a_hit_of_another_index_is_named(model_dir, tmp_path) -> None:
    from graphdoc.explain import explain_hits
    from graphdoc.retrieval.builder import IndexSettings, build_index
    from graphdoc.retrieval.searcher import Searcher

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": f"{TEXT} {i}"}) + "\n" for i in range(3)),
                      encoding="utf-8")
    build_index(GraphDocEncoder.from_pretrained(str(model_dir), device="cpu"), str(corpus), tmp_path / "idx",
                IndexSettings())
    with Searcher(tmp_path / "idx") as searcher:
        hits = searcher.search("graph", k=1, mode="dense")
        hits[0].doc_id = "elsewhere"
        with pytest.raises(GraphDocError, match=r"^hit 'elsewhere' is not a document of index "):
            explain_hits(searcher, "graph", hits)
        with pytest.raises(GraphDocError, match=r"^the query vector must have shape"):
            explain_hits(searcher, "graph", searcher.search("graph", k=1, mode="dense"), query_vector=np.ones(3))


# ---------------------------------------------------------------- page


def rtl_comparison() -> Comparison:
    text = "שלום עולם. Hello."
    passages = [Passage("a", 0, 0, "כותרת", 0, 10, text[:10]), Passage("a", 1, 0, "כותרת", 11, 17, text[11:])]
    sections = [SectionInfo(0, "כותרת", (0, 1))]
    return Comparison((Document("a", text, title="\u202eמסמך"), Document("b", text, title="B")),
                      (passages, passages), (sections, sections), 1.0, np.eye(2), np.ones((1, 1)),
                      [PassagePair(0, 0, 1.0)])


def test_right_to_left_text_is_isolated_in_the_page() -> None:
    page = render_comparison(rtl_comparison())
    assert "<h1>A: <bdi>\u202eמסמך</bdi> <small>(<bdi>a</bdi>)</small><br>B: <bdi>B</bdi>" in page
    assert "<title>graphdoc compare: \u2068\u202eמסמך\u2069 vs \u2068B\u2069</title>" in page
    assert '<th title="כותרת"><bdi>כותרת</bdi></th>' in page
    assert 'title="\u2068p0\u2069 × \u2068p1\u2069: 0.000"' in page
    assert '<p dir="auto">שלום עולם.</p>' in page and " · <bdi>כותרת</bdi> · characters 0–10" in page


# ---------------------------------------------------------------- plots

plot = pytest.importorskip("graphdoc.explain.plot")


@pytest.fixture
def figures(monkeypatch) -> list:
    """The matplotlib figures the plot functions draw, kept to read their axes."""
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    made, make = [], plot._figure

    def keep(*args, **kwargs):
        made.append(make(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(plot, "_figure", keep)
    return made


@pytest.mark.parametrize("vectors, message", [
    (np.zeros(5), "the document embeddings must be a [n, d] array; got shape [5]"),
    (np.zeros((5, 3, 2)), "the document embeddings must be a [n, d] array; got shape [5, 3, 2]"),
    ("abc", "the document embeddings must be a [n, d] array of numbers; got str"),
])
def test_embeddings_that_are_not_a_matrix_are_refused(tmp_path, vectors, message) -> None:
    with pytest.raises(GraphDocError) as err:
        plot.plot_embeddings(vectors, None, tmp_path / "m.png")
    assert str(err.value) == message and not (tmp_path / "m.png").exists()


def test_labels_given_as_one_string_and_a_fractional_seed_are_refused(tmp_path) -> None:
    with pytest.raises(GraphDocError, match="^labels must be a sequence of labels, one per document, not a str$"):
        plot.plot_embeddings(np.eye(5), "abcde", tmp_path / "m.png")
    with pytest.raises(TypeError, match=r"^seed must be an integer; got 1\.5$"):
        plot.plot_embeddings(np.eye(5), None, tmp_path / "m.png", seed=1.5)


def test_a_missing_folder_is_refused_before_the_projection(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(plot, "project_2d", lambda *a, **k: pytest.fail("projected before checking the path"))
    with pytest.raises(GraphDocError, match="^folder not found for "):
        plot.plot_embeddings(np.eye(5), None, tmp_path / "no" / "m.png")


@pytest.mark.parametrize("weights, passages, message", [
    (np.zeros((2, 0)), None, "no attention weights to plot: shape [2, 0]"),
    (np.zeros((2, 3, 4)), None, "the attention weights must be a [layers, n_passages] array; got shape [2, 3, 4]"),
    (np.full((2, 3), np.nan), None, "the attention weights hold NaN or infinite values"),
    (np.ones((2, 3)), [], "0 passages for 3 attention weights per layer"),
])
def test_attention_weights_that_do_not_fit_are_refused(tmp_path, weights, passages, message) -> None:
    with pytest.raises(GraphDocError) as err:
        plot.plot_attention(weights, tmp_path / "a.png", passages)
    assert str(err.value) == message and not (tmp_path / "a.png").exists()


def test_attention_of_an_empty_document_is_refused(model) -> None:
    with pytest.raises(InputError, match="^document '0' has no text$"):
        plot.document_attention_layers(model, " ")


def test_one_passage_has_one_integer_tick(figures, tmp_path) -> None:
    plot.plot_attention(np.ones((2, 1)), tmp_path / "a.png")
    ax = figures[0].axes[0]
    assert [t for t in ax.get_xticks() if -0.5 <= t <= 0.5] == [0]


def test_many_sections_label_at_most_fifteen_starts(model, figures, tmp_path) -> None:
    text = "\n".join(f"# S{s}\nGraph attention words {s}." for s in range(60))
    weights, passages = plot.document_attention_layers(model, Document("d", text, sections=markdown_sections(text)))
    assert len({p.section for p in passages}) == 60
    plot.plot_attention(weights, tmp_path / "a.png", passages)
    labels = [t.get_text() for t in figures[0].axes[0].get_xticklabels()]
    assert labels[0] == "S0" and 1 < len(labels) <= 15
    assert len(figures[0].axes[0].lines) == 59  # every section boundary is still drawn


def test_attention_plot_says_when_the_cap_leaves_passages_out(model, caplog) -> None:
    text = " ".join(["Graph attention networks read long documents."] * 120)
    with caplog.at_level(logging.WARNING, logger="graphdoc.chunker"):
        weights, passages = plot.document_attention_layers(model, text)
    assert weights.shape[1] == len(passages) == model.config.chunker.max_passages
    assert len(caplog.records) == 1 and "their first 100 were plotted" in caplog.records[0].getMessage()
