"""Named corpora through fake ``ir_datasets`` and ``datasets`` modules: no network, no optional packages."""

from __future__ import annotations

import json
import logging
import re
import sys
import types
from typing import NamedTuple

import pytest

from graphdoc.corpus import ReadStats, read_corpus, read_qrels, read_queries
from graphdoc.errors import InputError


# Field names as in ir_datasets.formats.base / .trec and ir_datasets.datasets.msmarco_document.
class GenericDoc(NamedTuple):
    doc_id: str
    text: str


class TrecDoc(NamedTuple):
    doc_id: str
    text: str
    marked_up_doc: str


class MsMarcoDocument(NamedTuple):
    doc_id: str
    url: str
    title: str
    body: str


class GenericQuery(NamedTuple):
    query_id: str
    text: str


class TrecQuery(NamedTuple):
    query_id: str
    title: str
    description: str
    narrative: str


class TrecQrel(NamedTuple):
    query_id: str
    doc_id: str
    relevance: int
    iteration: str


DATASETS = {
    "msmarco-document": {"docs": [MsMarcoDocument("D1", "http://a.org", "A title", "a body"),
                                  MsMarcoDocument("D2", "http://b.org", "", "  ")]},
    "msmarco-document/trec-dl-2019": {"queries": [GenericQuery("19335", "anthropological definition")],
                                      "qrels": [TrecQrel("19335", "D1", 3, "Q0")]},
    "msmarco-document/dev": {"queries": [GenericQuery("2", "dev query")], "qrels": [TrecQrel("2", "D2", 1, "0")]},
    "disks45/nocr/trec-robust-2004": {
        "docs": [TrecDoc("FBIS3-1", "robust text", "<TEXT>robust text</TEXT>")],
        "queries": [TrecQuery("301", "International Organized Crime", "Identify ...", "A relevant ...")]},
    "disks45/nocr/trec-robust-2004/fold2": {"queries": [TrecQuery("302", "Poliomyelitis", "d", "n")],
                                            "qrels": [TrecQrel("302", "LA1", 1, "0")]},
    "wikir/en78k": {"docs": [GenericDoc("17", "wiki text")]},
    "wikir/en78k/test": {"queries": [GenericQuery("q7", "wiki query")], "qrels": [TrecQrel("q7", "17", 2, "0")]},
}


class FakeDataset:
    def __init__(self, name: str) -> None:
        self.parts = DATASETS[name]

    def docs_iter(self):
        return iter(self.parts["docs"])

    def queries_iter(self):
        return iter(self.parts["queries"])

    def qrels_iter(self):
        return iter(self.parts["qrels"])


@pytest.fixture
def fake_ir_datasets(monkeypatch):
    module = types.ModuleType("ir_datasets")
    module.load = FakeDataset
    monkeypatch.setitem(sys.modules, "ir_datasets", module)
    return module


@pytest.fixture
def fake_datasets(monkeypatch, tmp_path):
    source = tmp_path / "openwebtext.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["first page", "", "third page"]))
    calls = []

    def load_dataset(path: str, split: str, streaming: bool):
        calls.append((path, split, streaming))
        with open(source, encoding="utf-8") as f:
            yield from (json.loads(line) for line in f)

    module = types.ModuleType("datasets")
    module.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", module)
    return calls


def test_msmarco_documents_queries_and_qrels(fake_ir_datasets):
    stats = ReadStats()
    [doc] = read_corpus("msmarco-document", stats=stats)
    assert (doc.id, doc.title, doc.text, doc.metadata) == ("D1", "A title", "a body", {"url": "http://a.org"})
    assert (stats.documents, stats.skipped_ids) == (1, ["D2"])
    assert list(read_queries("msmarco-document")) == [("19335", "anthropological definition")]
    assert read_qrels("msmarco-document") == {"19335": {"D1": 3}}
    assert read_qrels("msmarco-document/dev") == read_qrels("msmarco-document", split="dev") == {"2": {"D2": 1}}


def test_robust04_trec_docs_topics_and_folds(fake_ir_datasets):
    [doc] = read_corpus("robust04/fold2")
    assert (doc.id, doc.title, doc.text, doc.metadata) == ("FBIS3-1", "", "robust text", {})
    assert list(read_queries("robust04")) == [("301", "International Organized Crime")]
    assert list(read_queries("robust04", split="fold2")) == [("302", "Poliomyelitis")]
    assert read_qrels("robust04/fold2") == {"302": {"LA1": 1}}


def test_wikir_with_split_suffix(fake_ir_datasets):
    assert [(d.id, d.text) for d in read_corpus("wikir/en78k/test")] == [("17", "wiki text")]
    assert list(read_queries("wikir/en78k/test")) == list(read_queries("wikir/en78k")) == [("q7", "wiki query")]
    assert read_qrels("wikir/en78k", split="test") == {"q7": {"17": 2}}


@pytest.mark.parametrize("call, message", [
    (lambda: read_queries("robust04/fold9"), r"named corpus 'robust04' has no split 'fold9' \(splits: all, fold1"),
    (lambda: read_qrels("robust04/fold1", split="fold2"), r"already names split 'fold1', but split='fold2'"),
    (lambda: read_queries("openwebtext"), r"named corpus 'openwebtext' has documents only, no queries"),
])
def test_bad_names_and_splits(fake_ir_datasets, call, message):
    with pytest.raises(InputError, match=message):
        call()


def test_openwebtext_streams_with_running_ids(fake_datasets):
    docs = list(read_corpus("openwebtext"))
    assert [(d.id, d.text) for d in docs] == [("0", "first page"), ("2", "third page")]
    assert fake_datasets == [("Skylion007/openwebtext", "train", True)]


def test_openwebtext_reads_the_parquet_export_where_datasets_runs_no_loading_script(monkeypatch):
    calls = []

    def load_dataset(path: str, split: str, streaming: bool, revision: str | None = None):
        calls.append(revision)
        if revision is None:  # datasets >= 4 over a repository that still holds openwebtext.py
            raise RuntimeError("Dataset scripts are no longer supported, but found openwebtext.py")
        return iter([{"text": "a page"}])

    module = types.ModuleType("datasets")
    module.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", module)
    assert [(d.id, d.text) for d in read_corpus("openwebtext")] == [("0", "a page")]
    assert calls == [None, "refs/convert/parquet"]


@pytest.mark.parametrize("name, package", [("robust04", "ir_datasets"), ("openwebtext", "datasets")])
def test_missing_package_is_one_line(monkeypatch, name, package):
    monkeypatch.setitem(sys.modules, package, None)  # makes `import package` fail
    with pytest.raises(InputError, match=rf"^named corpus '{name}' needs {package}: "
                                         r"pip install 'graphdoc\[datasets\]'$"):
        read_corpus(name)


def test_download_failure_is_one_line(monkeypatch):
    class Offline:
        def docs_iter(self):
            raise ConnectionError("HTTPSConnectionPool(host='msmarco.blob.core.windows.net'): Max retries\nmore")

        def qrels_iter(self):
            raise OSError("Name or service not known")

    module = types.ModuleType("ir_datasets")
    module.load = lambda name: Offline()
    monkeypatch.setitem(sys.modules, "ir_datasets", module)
    docs = read_corpus("msmarco-document")
    with pytest.raises(InputError, match=r"^named corpus 'msmarco-document' could not be downloaded "
                                         r"\(HTTPSConnectionPool.*Max retries\); to use local files instead, "
                                         r"export it to JSON lines .* or a BEIR folder and pass that path$"):
        next(docs)
    with pytest.raises(InputError, match=r"could not be downloaded \(Name or service not known\)"):
        read_qrels("robust04")


def test_a_failure_of_every_download_source_says_why_not_what_objects_it_held(monkeypatch):
    class LocalDownload:  # ir_datasets' mirrors: their repr is no reason
        pass

    class Offline:
        def qrels_iter(self):  # as ir_datasets.util.download raises it
            raise RuntimeError("All download sources failed", [(LocalDownload(), FileNotFoundError("no local copy")),
                                                                (LocalDownload(), OSError("Network is unreachable"))])

    module = types.ModuleType("ir_datasets")
    module.load = lambda name: Offline()
    monkeypatch.setitem(sys.modules, "ir_datasets", module)
    with pytest.raises(InputError, match=r"could not be downloaded \(All download sources failed: Network is "
                                         r"unreachable\); "):
        read_qrels("robust04")


def test_existing_local_path_wins_over_a_name(tmp_path, monkeypatch, fake_ir_datasets):
    (tmp_path / "robust04").mkdir()
    (tmp_path / "robust04" / "a.txt").write_text("local", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert [d.text for d in read_corpus("robust04")] == ["local"]


def test_a_split_of_a_named_corpus_names_the_same_documents_to_an_index(fake_ir_datasets, model_dir, tmp_path,
                                                                       caplog):
    from graphdoc.corpus import source_key
    from graphdoc.retrieval.builder import build_index

    assert source_key("wikir/en78k/test") == source_key("wikir/en78k") == "wikir/en78k"
    assert source_key("robust04/fold2") == "robust04" and source_key("robust04/fold9") == "robust04/fold9"
    first = build_index(str(model_dir), "wikir/en78k/test", tmp_path / "index")
    assert [s.corpus for s in first.sources] == ["wikir/en78k"] and first.counts["documents"] == 1
    fake_ir_datasets.load = None  # the documents are not read again
    with caplog.at_level(logging.INFO, logger="graphdoc"):
        again = build_index(str(model_dir), "wikir/en78k", tmp_path / "index")
    assert [s.corpus for s in again.sources] == ["wikir/en78k"] and again.counts["documents"] == 1
    assert "already in the index" in caplog.text


def reader_failing_with(error: BaseException):
    class Failing:
        def docs_iter(self):
            yield from ()
            raise error

    module = types.ModuleType("ir_datasets")
    module.load = lambda name: Failing()
    return module


@pytest.mark.parametrize("error, message", [
    (EOFError("Compressed file ended before the end-of-stream marker was reached"),
     "could not be read (Compressed file ended before the end-of-stream marker was reached)"),
    (ValueError("expected 2 fields, got 3"), "could not be read (expected 2 fields, got 3)"),
    (FileNotFoundError(2, "No such file or directory", "/home/u/Downloads/irds/docs.tsv"),
     "could not be read ([Errno 2] No such file or directory: '/home/u/Downloads/irds/docs.tsv')"),
    (OSError("Unable to connect to proxy", OSError("Tunnel connection failed: 426 Upgrade Required")),
     "could not be downloaded (Unable to connect to proxy: Tunnel connection failed: 426 Upgrade Required)"),
])
def test_a_local_file_that_fails_is_not_called_a_download(monkeypatch, error, message):
    monkeypatch.setitem(sys.modules, "ir_datasets", reader_failing_with(error))
    with pytest.raises(InputError, match=rf"^named corpus 'msmarco-document' {re.escape(message)}; to use local"):
        list(read_corpus("msmarco-document"))


def test_robust04_disks_that_are_there_but_fail_are_named_as_there(monkeypatch, tmp_path):
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path))
    monkeypatch.setitem(sys.modules, "ir_datasets", reader_failing_with(ValueError("bad SGML in FR940104.0")))
    with pytest.raises(InputError, match=r"^named corpus 'robust04' needs the licensed TREC disks 4 and 5, "):
        list(read_corpus("robust04"))
    (tmp_path / "disks45" / "corpus" / "FR94").mkdir(parents=True)
    with pytest.raises(InputError, match=rf"^named corpus 'robust04' could not be read from "
                                         rf"{re.escape(str(tmp_path / 'disks45' / 'corpus'))} \(bad SGML in FR940104.0\)"):
        list(read_corpus("robust04"))


def test_the_hub_clients_retry_lines_are_held_back(monkeypatch, caplog):
    def load_dataset(path, split, streaming):
        for _ in range(3):
            logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
        logging.getLogger("datasets.load").warning("Couldn't reach the Hub")
        raise ConnectionError("Couldn't reach 'Skylion007/openwebtext' on the Hub")

    module = types.ModuleType("datasets")
    module.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", module)
    for name in ("huggingface_hub.utils._http", "datasets.load"):  # made as the packages are imported
        logging.getLogger(name)
    with caplog.at_level(logging.WARNING):
        with pytest.raises(InputError, match=r"^named corpus 'openwebtext' could not be downloaded \(Couldn't reach"):
            list(read_corpus("openwebtext"))
    assert caplog.records == []
    assert not logging.getLogger("huggingface_hub.utils._http").disabled  # only while the corpus is read
