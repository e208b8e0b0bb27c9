"""The CLI in-process: ``search --explain``, ``compare``, ``plot`` and their one-line errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from _retrieval_helpers import cli, error_line

from graphdoc.cli import main
from graphdoc.config import ChunkerConfig, ModelConfig, PassageEncoderConfig
from graphdoc.encoder import GraphDocEncoder
from graphdoc.retrieval.builder import IndexSettings, build_index

WORDS = ["network", "dog", "meeting", "index", "shard", "topic", "sparse", "fusion", "section", "brown", "quick", "unicode"]
DOCS = [{"_id": f"d{i}", "title": f"Title {i}", "label": "even" if i % 2 == 0 else "odd",
         "text": " ".join(f"{w.capitalize()} graph attention passage query dense fox lazy {w}."
                          for w in WORDS[3 * i:3 * i + 3])} for i in range(4)]
MARKDOWN = "# Start\nGraph attention networks read documents. Passages become nodes.\n" \
           "## Next\nDense vectors and BM25 are fused. The <script>x</script> fox jumps.\n"


@pytest.fixture(autouse=True)
def cli_state(restore_cli_state):
    """``main`` configures logging and quiets transformers for the process (see conftest)."""
    yield


@pytest.fixture(scope="module")
def model_dir(tiny_bert, tmp_path_factory) -> Path:
    config = ModelConfig(chunker=ChunkerConfig(max_words=12), passage_encoder=PassageEncoderConfig(pooling="mean"))
    folder = tmp_path_factory.mktemp("model")
    GraphDocEncoder.from_pretrained(str(tiny_bert), config=config, device="cpu").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def index(model_dir, corpus, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("index") / "index"
    threads = torch.get_num_threads()
    build_index(GraphDocEncoder.from_pretrained(str(model_dir), device="cpu"), str(corpus), folder, IndexSettings())
    torch.set_num_threads(threads)
    return folder


def test_search_explain_json_carries_the_explanations(index, capsys) -> None:
    assert cli("search", "--index-dir", index, "graph attention dog", "--mode", "dense", "-k", "2",
               "--explain", "2", "--json") == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(hits) == 2
    for hit in hits:
        explained = hit["explanation"]
        assert len(explained) == 2 and explained[0]["index"] == hit["passage"]["index"]
        assert set(explained[0]) == {"index", "score", "attention", "section", "section_title", "start", "end",
                                     "snippet"}
        text = next(d["text"] for d in DOCS if d["_id"] == hit["doc_id"])
        assert explained[1]["snippet"] == text[explained[1]["start"]:explained[1]["end"]]


def test_search_explain_prints_passage_lines(index, capsys) -> None:
    assert cli("search", "--index-dir", index, "lazy fox", "-k", "1", "--explain") == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 5 and out[0].startswith("  1. ")
    assert all(" sim " in line and " att " in line and "chars " in line for line in out[2:])


def test_search_without_explain_is_unchanged(index, capsys) -> None:
    assert cli("search", "--index-dir", index, "lazy fox", "-k", "1", "--json") == 0
    assert "explanation" not in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("extra, message", [(["--queries", "QUERIES", "--explain"], "--explain works with one QUERY"),
                                            (["lazy", "--explain", "0"], "at least 1")])
def test_search_explain_errors(index, tmp_path, capsys, extra, message) -> None:
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\tlazy fox\n", encoding="utf-8")
    extra = [str(queries) if e == "QUERIES" else e for e in extra]
    assert cli("search", "--index-dir", index, *extra) == 1
    assert message in error_line(capsys, "search")


def test_compare_writes_html_and_prints_json(model_dir, tmp_path, capsys) -> None:
    a, b = tmp_path / "a.md", tmp_path / "b.json"
    a.write_text(MARKDOWN, encoding="utf-8")
    b.write_text(json.dumps(DOCS[1]), encoding="utf-8")
    page = tmp_path / "out" / "compare.html"
    assert cli("compare", a, b, "--model", model_dir, "--html", page, "--json", "--top", "2") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["a"]["id"] == "a" and data["b"]["id"] == "d1" and len(data["pairs"]) == 2
    assert [s["title"] for s in data["a"]["sections"]] == ["Start", "Next"]
    html = page.read_text(encoding="utf-8")
    assert 'id="passage-heatmap"' in html and 'id="section-heatmap"' in html and "&lt;script&gt;" in html
    assert main(["compare", str(a), str(b), "--model", str(model_dir), "--html", str(page), "--top", "2"]) == 0
    printed = capsys.readouterr()  # the "wrote" line is a log line (-q leaves it out), not output
    assert printed.err.splitlines()[-1].endswith(f"wrote {page} (replacing the earlier file)")


def test_compare_ids_of_a_corpus_prints_a_summary(model_dir, corpus, capsys) -> None:
    assert cli("compare", "d0", "d2", "--corpus", corpus, "--model", model_dir, "--top", "1") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("document similarity: ") and "most similar passage pairs:" in out
    assert out[-2].startswith("     A: ") and out[-1].startswith("     B: ")
    assert cli("compare", "d0", "d2", "--corpus", corpus, "--model", model_dir, "--top", "0") == 0
    out = capsys.readouterr().out.splitlines()  # no pairs asked for: no heading over an empty list
    assert "most similar passage pairs:" not in out and out[-1].startswith("  B")


def test_compare_reads_a_markdown_suffix_as_markdown(model_dir, tmp_path, capsys) -> None:
    a, b = tmp_path / "a.markdown", tmp_path / "b.md"
    a.write_text(MARKDOWN, encoding="utf-8")
    b.write_text(MARKDOWN, encoding="utf-8")
    assert cli("compare", a, b, "--model", model_dir, "--json") == 0
    data = json.loads(capsys.readouterr().out)
    titles = [[s["title"] for s in data[side]["sections"]] for side in ("a", "b")]
    assert titles == [["Start", "Next"], ["Start", "Next"]]


def test_compare_one_record_files_without_an_id_take_the_file_name(model_dir, tmp_path, capsys) -> None:
    import bz2
    import gzip

    record = {"title": "Notes", "text": "Graph attention networks read documents. Passages become nodes."}
    (tmp_path / "a.jsonl").write_text(json.dumps(record) + "\n\n", encoding="utf-8")
    with gzip.open(tmp_path / "b.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    assert cli("compare", tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz", "--model", model_dir, "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["a"]["id"], data["b"]["id"]) == ("a", "b") and data["document_similarity"] == pytest.approx(1.0)
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(record).encode())  # as Notepad saves it
    assert cli("compare", tmp_path / "bom.json", tmp_path / "a.jsonl", "--model", model_dir, "--json") == 0
    assert json.loads(capsys.readouterr().out)["a"]["id"] == "bom"
    with gzip.open(tmp_path / "pretty.json.gz", "wt", encoding="utf-8") as handle:  # one record over many lines
        handle.write(json.dumps(record, indent=2))
    assert cli("compare", tmp_path / "pretty.json.gz", tmp_path / "a.jsonl", "--model", model_dir, "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["a"]["id"] == "pretty" and data["document_similarity"] == pytest.approx(1.0)
    (tmp_path / "c.JSONL.bz2").write_bytes(bz2.compress((json.dumps(record) + "\n").encode()))
    (tmp_path / ".jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert cli("compare", tmp_path / "c.JSONL.bz2", tmp_path / ".jsonl", "--model", model_dir, "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["a"]["id"], data["b"]["id"]) == ("c", ".jsonl")
    (tmp_path / "two.jsonl").write_text(json.dumps(record) + "\n" + json.dumps(record) + "\n", encoding="utf-8")
    assert cli("compare", tmp_path / "two.jsonl", tmp_path / "a.jsonl", "--model", model_dir) == 1
    assert error_line(capsys, "compare").endswith(f"{tmp_path / 'two.jsonl'}: holds 2 documents; give one, or use "
                                                  f"--corpus {tmp_path / 'two.jsonl'} ID_A ID_B")


def test_compare_field_options_apply_to_the_json_record_not_the_text_file(model_dir, tmp_path, capsys) -> None:
    record, notes, other = tmp_path / "paper.json", tmp_path / "notes.md", tmp_path / "other.txt"
    record.write_text(json.dumps({"paper_id": "p1", "abstract": "Graph attention reads long documents.",
                                  "text": "The full text, kept as metadata."}), encoding="utf-8")
    notes.write_text(MARKDOWN, encoding="utf-8")
    other.write_text("Dense vectors and BM25 are fused.", encoding="utf-8")
    fields = ("--id-field", "paper_id", "--text-field", "abstract")
    assert cli("compare", record, notes, "--model", model_dir, *fields, "--json") == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert (data["a"]["id"], data["b"]["id"]) == ("p1", "notes")
    assert [p["text"] for p in data["a"]["passages"]] == ["Graph attention reads long documents."]
    assert [s["title"] for s in data["b"]["sections"]] == ["Start", "Next"]  # the Markdown file, read as it is
    assert captured.err == (f"WARNING graphdoc.cli: --id-field, --text-field apply to the JSON record {record}, not "
                            f"to {notes}, a text file: it is read as it is\n")
    assert cli("compare", other, record, "--model", model_dir, "--text-field", "abstract", "--json") == 0
    captured = capsys.readouterr()
    assert [json.loads(captured.out)[side]["id"] for side in ("a", "b")] == ["other", "paper"]  # (no id field named)
    assert captured.err == (f"WARNING graphdoc.cli: --text-field applies to the JSON record {record}, not to "
                            f"{other}, a text file: it is read as it is\n")
    assert cli("compare", notes, other, "--model", model_dir, "--text-field", "abstract") == 1
    assert error_line(capsys, "compare") == (f"graphdoc compare: error: {notes} and {other} are text files: "
                                             "--text-field applies only to a JSON record (.json, .jsonl)")


def test_compare_summary_names_the_columns_in_full(model_dir, tmp_path, capsys) -> None:
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text(MARKDOWN, encoding="utf-8")
    b.write_text(MARKDOWN.replace("## Next", "## Dense and lexical search, fused"), encoding="utf-8")
    assert cli("compare", a, b, "--model", model_dir) == 0
    out = capsys.readouterr().out.splitlines()
    header = out.index("section similarity (rows: A's sections, columns: B's, named below):")
    assert out[header + 1].split() == ["B1", "B2"]
    assert [line.split()[0] for line in out[header + 2:header + 4]] == ["Start", "Next"]
    assert out[header + 4:header + 6] == ["  B1: Start", "  B2: Dense and lexical search, fused"]
    b.write_text(json.dumps({"id": "b", "sections": [{"title": "Two\nlines", "text": "Graph attention."}]}),
                 encoding="utf-8")
    b.rename(b.with_suffix(".json"))
    assert cli("compare", a, b.with_suffix(".json"), "--model", model_dir) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  B1: Two lines" in out and not any(line.startswith("lines") for line in out)
    assert all("Two lines" in line for line in out if "Two" in line)


@pytest.mark.parametrize("args, message", [
    (["a.pdf", "b.md"], "unknown document file"),
    (["missing.md", "b.md"], "no such file"),
    (["CORPUS", "b.md"], "holds 4 documents"),
    (["d0", "nope", "--corpus", "CORPUS"], "no document with id 'nope'"),
    (["b.md", "d0", "--corpus", "CORPUS"],
     "b.md is a file: with --corpus, A and B are ids of that corpus; compare files without it)"),
    (["b.md", "b.md", "--top", "-1"], "--top must be at least 0"),
])
def test_compare_errors(model_dir, corpus, tmp_path, capsys, args, message) -> None:
    (tmp_path / "a.pdf").write_text("x", encoding="utf-8")
    (tmp_path / "b.md").write_text(MARKDOWN, encoding="utf-8")
    args = [str(corpus) if a == "CORPUS" else a if a.startswith("-") or a in ("d0", "nope", "-1")
            else str(tmp_path / a) for a in args]
    assert cli("compare", *args, "--model", model_dir) == 1
    assert message in error_line(capsys, "compare")


def test_compare_names_a_folder_an_empty_document_and_its_file(model_dir, tmp_path, capsys) -> None:
    (tmp_path / "b.md").write_text(MARKDOWN, encoding="utf-8")
    (tmp_path / "empty.json").write_text(json.dumps({"title": "Nothing", "text": " "}), encoding="utf-8")
    corpus = tmp_path / "withempty.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in [DOCS[0], {"_id": "e", "text": ""}]), encoding="utf-8")
    cases = [
        ([tmp_path, tmp_path / "b.md"], f"{tmp_path} is a folder; name a document file (.txt, .md, .markdown, "
                                        f".json, .jsonl, .jsonl.gz/.bz2/.xz, .json.gz/.bz2/.xz), or use --corpus {tmp_path} ID_A ID_B"),
        ([tmp_path / "empty.json", tmp_path / "b.md"], f"{tmp_path / 'empty.json'}: document has no text"),
        (["d0", "e", "--corpus", corpus], f"{corpus}: document 'e' is empty: it has no passages"),
    ]
    for args, message in cases:
        assert cli("compare", *args, "--model", model_dir) == 1
        assert error_line(capsys, "compare") == f"graphdoc compare: error: {message}"


def test_plot_embeddings_and_attention(model_dir, corpus, tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    pytest.importorskip("sklearn", reason="the plot extra is not installed")
    assert cli("plot", "embeddings", "--corpus", corpus, "--labels-field", "label", "--method", "tsne",
               "--output", tmp_path / "map.png", "--model", model_dir) == 0
    assert cli("plot", "attention", "--corpus", corpus, "--id", "d1", "--output", tmp_path / "att.png",
               "--model", model_dir) == 0
    for name in ("map.png", "att.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out == ""  # -q: no "wrote" lines
    assert main(["plot", "attention", "--corpus", str(corpus), "--id", "d1", "--output", str(tmp_path / "att.png"),
                 "--model", str(model_dir)]) == 0
    printed = capsys.readouterr()
    assert printed.out == "" and f"wrote {tmp_path / 'att.png'} (replacing the earlier file)\n" in printed.err


@pytest.mark.parametrize("args, message", [
    (["embeddings", "--output", "map.jpg"], "--output must end in .png"),
    (["embeddings", "--labels-field", "colour", "--output", "map.png"], "no document of"),
    (["embeddings", "--limit", "2", "--output", "map.png"], "--limit must be at least 3"),
    (["attention", "--id", "zz", "--output", "att.png"], "no document with id 'zz'"),
])
def test_plot_errors(model_dir, corpus, tmp_path, capsys, args, message) -> None:
    args = [str(tmp_path / a) if a.endswith((".png", ".jpg")) else a for a in args]
    assert cli("plot", args[0], "--corpus", corpus, *args[1:], "--model", model_dir) == 1
    assert message in error_line(capsys, f"plot {args[0]}")


@pytest.mark.parametrize("missing", ["matplotlib.figure", "sklearn.manifold"])
def test_plot_without_the_extra_says_what_to_install(model_dir, corpus, tmp_path, capsys, monkeypatch,
                                                     missing) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # importing it now raises ImportError
    assert cli("plot", "embeddings", "--corpus", corpus, "--method", "tsne", "--output", tmp_path / "m.png",
               "--model", model_dir) == 1
    assert "pip install 'graphdoc[plot]'" in error_line(capsys, "plot embeddings")
    assert not (tmp_path / "m.png").exists()


def test_one_document_commands_ignore_a_batch_size_with_a_warning(model_dir, corpus, tmp_path, capsys) -> None:
    """compare and plot attention embed one pair or one document: a --batch-size (listed by earlier versions)
    changes nothing, and says so instead of failing a script that passes it."""
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text(MARKDOWN, encoding="utf-8")
    b.write_text(MARKDOWN.replace("## Next", "## Other"), encoding="utf-8")
    assert cli("compare", a, b, "--model", model_dir, "--json") == 0
    plain = capsys.readouterr()
    assert cli("compare", a, b, "--model", model_dir, "--json", "--batch-size", 4) == 0
    warned = capsys.readouterr()
    assert warned.out == plain.out
    assert warned.err.splitlines() == ["WARNING graphdoc.cli: --batch-size is ignored: this command embeds "
                                       "one document or one pair, not batches"] and not plain.err
    with pytest.raises(SystemExit):
        cli("compare", "--help")
    assert "--batch-size" not in capsys.readouterr().out  # not offered any more
    from graphdoc.cli import build_parser

    args = build_parser().parse_args(["plot", "attention", "--corpus", "c", "--id", "d", "--output", "x.png",
                                      "--batch-size", "4"])
    assert args.ignored_batch_size == 4 and not hasattr(args, "batch_size")  # load_model warns, as for compare
