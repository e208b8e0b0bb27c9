"""Corpus field mapping: graphdoc.corpus.Fields, read_corpus(fields=), the --*-field options, and indexes that
record the fields a corpus was read with."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _retrieval_helpers import cli, doc_ids, error_line, make_docs, manifest_json, records, write_jsonl

from graphdoc.corpus import Fields, read_corpus
from graphdoc.errors import GraphDocError, InputError
from graphdoc.retrieval import builder
from graphdoc.retrieval.builder import IndexSettings, build_index
from graphdoc.retrieval.manifest import Manifest

PAPERS = [{"paper_id": "p1", "abstract": "Graphs of passages.", "text": "The full text one.", "headline": "One",
           "title": "old one", "year": 2020},
          {"paper_id": 2, "abstract": "Attention over sections.", "headline": None}]


def papers(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "papers.jsonl", PAPERS)


# ------------------------------------------------------------------ Fields
def test_fields_default_and_record_round_trip() -> None:
    assert Fields().is_default and Fields().to_dict() == {} and Fields.from_dict(None) == Fields()
    fields = Fields(id="paper_id", text="abstract")
    assert fields.to_dict() == {"id": "paper_id", "text": "abstract"}
    assert Fields.from_dict(fields.to_dict()) == fields
    assert fields.describe() == "id=paper_id, text=abstract"


@pytest.mark.parametrize("kwargs, message", [
    ({"text": ""}, "the text field name is empty ('')"),
    ({"id": "  "}, "the id field name is only whitespace"),
    ({"id": "x", "text": "x"}, "field 'x' is named for both the id and the text"),
    ({"text": "body", "title": "body"}, "field 'body' is named for both the text and the title"),
    ({"title": 3}, "the title field name must be a string, got int"),
])
def test_fields_refuses_bad_names(kwargs, message) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Fields(**kwargs)


def test_fields_from_dict_refuses_an_unknown_role() -> None:
    with pytest.raises(InputError, match="unknown field role 'body'"):
        Fields.from_dict({"body": "x"})


# ------------------------------------------------------------------ JSON lines
def test_jsonl_read_with_named_fields_keeps_the_replaced_keys_as_metadata(tmp_path) -> None:
    docs = list(read_corpus(papers(tmp_path), fields=Fields(id="paper_id", text="abstract", title="headline")))
    assert [(d.id, d.text, d.title) for d in docs] == [("p1", "Graphs of passages.", "One"),
                                                      ("2", "Attention over sections.", "")]
    assert docs[0].metadata == {"text": "The full text one.", "title": "old one", "year": 2020}
    assert docs[1].metadata == {}


def test_a_named_text_makes_sections_metadata(tmp_path) -> None:
    record = {"id": "a", "abstract": "Short.", "sections": [{"title": "S", "text": "Long body."}]}
    doc = next(read_corpus(write_jsonl(tmp_path / "c.jsonl", [record]), fields=Fields(text="abstract")))
    assert (doc.text, doc.sections) == ("Short.", None)
    assert doc.metadata == {"sections": [{"title": "S", "text": "Long body."}]}


def test_only_the_id_named_keeps_the_default_text_keys(tmp_path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"paper_id": "x", "id": "other", "contents": "Words here."}])
    doc = next(read_corpus(corpus, fields=Fields(id="paper_id")))
    assert (doc.id, doc.text, doc.metadata) == ("x", "Words here.", {"id": "other"})


@pytest.mark.parametrize("fields, record, message", [
    (Fields(text="abstract"), {"id": "a", "text": "x"},
     "c.jsonl:2: document 'a' has no text field ('abstract' is the field named for the text)"),
    (Fields(id="paper_id"), {"id": "a", "text": "x"},
     "c.jsonl:2: record has no id field 'paper_id' (the field named for ids)"),
    (Fields(title="headline"), {"id": "a", "text": "x"},
     "c.jsonl:2: document 'a' has no field 'headline' (the field named for titles)"),
    (Fields(text="abstract"), {"id": "a", "abstract": ["x"]}, "c.jsonl:2: document 'a': abstract must be a string, got list"),
    (Fields(id="paper_id"), {"paper_id": 1.5, "text": "x"},
     "c.jsonl:2: id field 'paper_id' must be a string or an integer, got 1.5"),
])
def test_a_record_without_a_named_field_is_one_error_naming_its_line(tmp_path, fields, record, message) -> None:
    good = {"id": "ok", "text": "t", "abstract": "t", "paper_id": "ok", "headline": "h"}
    corpus = write_jsonl(tmp_path / "c.jsonl", [good, record])
    with pytest.raises(InputError) as err:
        list(read_corpus(corpus, fields=fields))
    assert str(err.value) == f"{corpus.parent}/{message}"


# ------------------------------------------------------------------ CSV/TSV, BEIR
def test_a_default_key_named_for_another_role_is_that_role_only(tmp_path) -> None:
    """``Fields(title="body")``: ``body`` is the title, not also a text key (which made text and body 'differ');
    ``Fields(title="sections")``: no section list read from it; a named id never falls back to a default id."""
    from graphdoc.documents import Document

    doc = Document.from_dict({"_id": "a", "text": "T", "body": "B"}, fields=Fields(title="body"))
    assert (doc.title, doc.text, doc.metadata) == ("B", "T", {})
    doc = Document.from_dict({"_id": "a", "text": "T", "sections": "My title"}, fields=Fields(title="sections"))
    assert (doc.title, doc.text, doc.sections) == ("My title", "T", None)
    doc = Document.from_dict({"title": "T", "text": "x", "_id": "a"}, fields=Fields(id="title", title="_id"))
    assert (doc.id, doc.title, doc.metadata) == ("T", "a", {})
    with pytest.raises(InputError, match=r"^record has no id field 'pid' \(the field named for ids\)$"):
        Document.from_dict({"abstract": "x"}, default_id="file-name", fields=Fields(id="pid", text="abstract"))
    table = tmp_path / "t.csv"  # a column named sections is a column like others, and may be named
    table.write_text("id,sections,body2\n1,S,B\n", encoding="utf-8")
    assert [(d.id, d.text, d.metadata) for d in read_corpus(table, fields=Fields(text="sections"))] == \
        [("1", "S", {"body2": "B"})]
    assert [(d.id, d.text, d.metadata) for d in read_corpus(table, fields=Fields(id="sections", text="body2"))] == \
        [("S", "B", {"id": "1"})]


def test_plot_labels_follow_the_named_fields() -> None:
    from graphdoc.documents import Document
    from graphdoc.explain.plot import label_of

    fields = Fields(id="pid", text="abstract", title="headline")
    doc = Document.from_dict({"pid": "p1", "abstract": "x", "headline": "H", "title": "own", "topic": "t"},
                             fields=fields)
    assert [label_of(doc, name, fields) for name in ("pid", "headline", "title", "topic", "_id", "text")] == \
        ["p1", "H", "own", "t", None, None]
    with pytest.raises(GraphDocError, match=r"^'abstract' is a document's text, not a label$"):
        label_of(doc, "abstract", fields)
    no_title = Document.from_dict({"pid": "p2", "abstract": "y", "headline": "H2"}, fields=fields)
    assert label_of(no_title, "title", fields) is None  # not the headline: the record has no title of its own


def test_csv_and_tsv_columns_are_named_exactly(tmp_path) -> None:
    csv_file = tmp_path / "c.csv"
    csv_file.write_text('paper_id,Abstract,Body,headline\np1,"A, b.",ignored body,Head\n', encoding="utf-8")
    docs = list(read_corpus(csv_file, fields=Fields(id="paper_id", text="Abstract", title="headline")))
    assert [(d.id, d.text, d.title, d.metadata) for d in docs] == [("p1", "A, b.", "Head", {"body": "ignored body"})]
    tsv_file = tmp_path / "c.tsv"
    tsv_file.write_text("docid\tarticle\nd1\tFirst article.\n", encoding="utf-8")
    assert [(d.id, d.text) for d in read_corpus(tsv_file, fields=Fields(text="article"))] == \
        [("d1", "First article.")]


def test_a_table_without_the_named_column_says_so(tmp_path) -> None:
    tsv_file = tmp_path / "c.tsv"
    tsv_file.write_text("docid\ttext\nd1\tFirst.\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"c.tsv:1: no column 'article' \(the text field named\) in the header, "
                                         r"which names 'docid', 'text'$"):
        list(read_corpus(tsv_file, fields=Fields(text="article")))


def test_a_beir_folder_is_read_with_named_fields(tmp_path) -> None:
    folder = tmp_path / "beir"
    folder.mkdir()
    write_jsonl(folder / "corpus.jsonl", [{"_id": "b1", "article": "Beir text.", "text": ""}])
    doc = next(read_corpus(folder, fields=Fields(text="article")))
    assert (doc.id, doc.text, doc.metadata) == ("b1", "Beir text.", {"text": ""})


@pytest.mark.parametrize("make", ["folder", "txt", "named"])
def test_sources_without_fields_refuse_a_mapping(tmp_path, make) -> None:
    if make == "folder":
        source = tmp_path / "docs"
        source.mkdir()
        (source / "a.txt").write_text("Some text.", encoding="utf-8")
        what = "a folder of .txt/.md/.markdown files"
    elif make == "txt":
        source = tmp_path / "a.md"
        source.write_text("# T\n\nSome text.", encoding="utf-8")
        what = "a .txt/.md/.markdown file"
    else:
        source, what = "robust04", "a named corpus"
    with pytest.raises(InputError) as err:
        read_corpus(source, fields=Fields(text="abstract"))
    assert str(err.value) == (f"{source} is {what}: field names (fields=, --id-field/--text-field/--title-field) "
                              "apply only to JSON lines, BEIR and CSV/TSV corpora")
    if make != "named":  # (reading robust04 needs ir_datasets)
        assert next(read_corpus(source, fields=Fields())).text.strip()  # no names given: read as ever


# ------------------------------------------------------------------ CLI
@pytest.fixture
def restored(restore_cli_state):
    yield


def test_embed_with_text_field_end_to_end(tiny_bert, tmp_path, restored) -> None:
    corpus = papers(tmp_path)
    out = tmp_path / "emb.npy"
    assert cli("embed", "--corpus", corpus, "--output", out, "--model", tiny_bert, "--id-field", "paper_id",
               "--text-field", "abstract") == 0
    assert (tmp_path / "emb.ids.txt").read_text(encoding="utf-8") == "p1\n2\n"
    vectors = np.load(out)
    assert vectors.shape[0] == 2 and vectors.dtype == np.float32


def test_embed_with_a_missing_field_is_one_error_line(tiny_bert, tmp_path, restored, capsys) -> None:
    corpus = papers(tmp_path)
    assert cli("embed", "--corpus", corpus, "--output", tmp_path / "e.npy", "--model", tiny_bert,
               "--id-field", "paper_id", "--text-field", "summary") == 1
    assert error_line(capsys, "embed").endswith(
        f"{corpus}:1: document 'p1' has no text field ('summary' is the field named for the text)")


def test_embed_refuses_the_same_field_twice(tiny_bert, tmp_path, restored, capsys) -> None:
    assert cli("embed", "--corpus", papers(tmp_path), "--output", tmp_path / "e.npy", "--model", tiny_bert,
               "--id-field", "abstract", "--text-field", "abstract") == 1
    assert error_line(capsys, "embed").endswith("field 'abstract' is named for both the id and the text: each role "
                                                "needs a field of its own")


# ------------------------------------------------------------------ indexes
def renamed(docs: list[dict]) -> list[dict]:
    """The toy documents with their fields named otherwise (and a decoy ``text``)."""
    return [{"paper_id": d["_id"], "abstract": d["text"], "headline": d["title"], "text": "decoy"} for d in docs]


FIELDS = Fields(id="paper_id", text="abstract", title="headline")


def crash_after(monkeypatch, shards: int) -> None:
    encode_shard, calls = builder._encode_shard, []

    def crash(*args, **kwargs):
        encode_shard(*args, **kwargs)
        calls.append(1)
        if len(calls) == shards:
            raise KeyboardInterrupt

    monkeypatch.setattr(builder, "_encode_shard", crash)


def test_index_records_the_fields_and_a_resume_reads_with_them(model, tmp_path, monkeypatch) -> None:
    docs = make_docs(7)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", renamed(docs))
    index = tmp_path / "index"
    crash_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        build_index(model, str(corpus), index, IndexSettings(shard_size=3), fields=FIELDS)
    monkeypatch.undo()
    source = manifest_json(index)["sources"][0]
    assert (source["fields"], source["documents_read"], source["complete"]) == (FIELDS.to_dict(), 3, False)
    build_index(model, str(corpus), index, IndexSettings(shard_size=3))  # no fields: the recorded ones
    assert doc_ids(index) == [d["_id"] for d in docs]
    assert [(r["title"], r["text"]) for r in records(index)] == [(d["title"], d["text"]) for d in docs]


def test_a_resume_with_other_fields_is_refused(model, tmp_path, monkeypatch) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", renamed(make_docs(7)))
    index = tmp_path / "index"
    crash_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        build_index(model, str(corpus), index, IndexSettings(shard_size=3), fields=FIELDS)
    monkeypatch.undo()
    with pytest.raises(GraphDocError) as err:
        build_index(model, str(corpus), index, IndexSettings(shard_size=3), fields=Fields(id="paper_id"))
    assert str(err.value) == (f"{corpus} was read into {index} with id=paper_id, text=abstract, title=headline, not "
                              "id=paper_id: that would index other text under the same ids (leave the field "
                              "options out to go on with its own, or index into a new folder)")
    assert manifest_json(index)["sources"][0]["documents_read"] == 3  # nothing changed


def test_cli_index_add_uses_the_flags_given_for_the_added_corpus(model_dir, tmp_path, restored, capsys) -> None:
    first = write_jsonl(tmp_path / "first.jsonl", renamed(make_docs(3)))
    second = write_jsonl(tmp_path / "second.jsonl", make_docs(2, start=3))
    index = tmp_path / "index"
    assert cli("index", "--corpus", first, "--index-dir", index, "--model", model_dir, "--id-field", "paper_id",
               "--text-field", "abstract", "--title-field", "headline") == 0
    assert cli("index", "--corpus", second, "--index-dir", index) == 0  # the default keys
    assert doc_ids(index) == ["d000", "d001", "d002", "d003", "d004"]
    assert [s.get("fields") for s in manifest_json(index)["sources"]] == [FIELDS.to_dict(), None]
    capsys.readouterr()
    assert cli("index", "--corpus", first, "--index-dir", index, "--text-field", "text") == 1
    assert "with id=paper_id, text=abstract, title=headline, not text=text" in error_line(capsys, "index")


def test_an_old_manifest_without_fields_loads_and_resumes_with_the_default_keys(model, tmp_path,
                                                                                 monkeypatch) -> None:
    docs = make_docs(7)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", docs)
    index = tmp_path / "index"
    crash_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        build_index(model, str(corpus), index, IndexSettings(shard_size=3))
    monkeypatch.undo()
    data = manifest_json(index)
    assert "fields" not in data["sources"][0]  # the default keys are not written: earlier graphdoc reads it
    assert Manifest.load(index).sources[0].fields is None
    with pytest.raises(GraphDocError, match="with the default fields, not text=abstract"):
        build_index(model, str(corpus), index, IndexSettings(shard_size=3), fields=Fields(text="abstract"))
    build_index(model, str(corpus), index, IndexSettings(shard_size=3), fields=Fields())  # the same as recorded
    assert doc_ids(index) == [d["_id"] for d in docs]


def test_a_manifest_with_unusable_fields_is_one_error(model, tmp_path) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", make_docs(2))
    index = tmp_path / "index"
    build_index(model, str(corpus), index)
    data = manifest_json(index)
    data["sources"][0]["fields"] = {"body": "x"}
    (index / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(GraphDocError, match=r"manifest.json: sources\[\].fields is not usable \(unknown field role "
                                            r"'body'"):
        Manifest.load(index)


# ------------------------------------------------------------------ pretraining
def test_pretrain_records_the_fields_and_a_resume_keeps_them(tiny_bert, tmp_path, monkeypatch) -> None:
    import torch

    from graphdoc.config import ChunkerConfig, ModelConfig, PassageEncoderConfig
    from graphdoc.training import PretrainConfig, PretrainSetup, pretrain
    from graphdoc.training import checkpoint as ckpt
    from graphdoc.training.trainer import Trainer

    words = "graph attention passage document retrieval vector dense sparse".split()
    corpus = write_jsonl(tmp_path / "c.jsonl", [
        {"paper_id": f"p{i}", "abstract": " ".join(f"{words[(i + j) % 8]} {words[j % 8]} one two." for j in range(4))}
        for i in range(8)])
    setup = PretrainSetup(ModelConfig(chunker=ChunkerConfig(max_words=5),
                                      passage_encoder=PassageEncoderConfig(model_name_or_path=str(tiny_bert))),
                          PretrainConfig(batch_size=4, epochs=3, lr=1e-3, checkpoint_every=2, log_every=1,
                                         shuffle_buffer=0))
    fields, original = Fields(id="paper_id", text="abstract"), Trainer._train_step

    def killed(self, batch):
        if self.step == 2:
            raise KeyboardInterrupt
        return original(self, batch)

    monkeypatch.setattr(Trainer, "_train_step", killed)
    with torch.random.fork_rng(), pytest.raises(KeyboardInterrupt):
        pretrain(corpus, tmp_path / "run", setup, device="cpu", fields=fields)
    monkeypatch.undo()
    latest = ckpt.list_checkpoints(tmp_path / "run")[-1]
    assert ckpt.read_state(latest)["fields"] == {"id": "paper_id", "text": "abstract"}
    with pytest.raises(GraphDocError, match=r"^cannot resume with id=paper_id, text=summary: the run read its corpus "
                                            r"with id=paper_id, text=abstract \(leave the field options out"):
        pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu",
                 fields=Fields(id="paper_id", text="summary"))
    with torch.random.fork_rng():
        result = pretrain(corpus, tmp_path / "run", setup, resume=True, device="cpu")  # the recorded fields
    assert result.steps == result.total_steps == 6
