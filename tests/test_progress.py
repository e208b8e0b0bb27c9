"""Progress bars: redrawn in place on a terminal, plain lines in a log."""

import io
import sys

import pytest

from graphdoc import progress
from graphdoc.progress import LineWriter, progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_in_a_log_writes_whole_lines_without_carriage_returns(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    with progress_bar(total=3, desc="Indexing", unit="doc") as bar:
        for _ in range(3):
            bar.update()
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0].startswith("Indexing:   0%") and lines[-1].startswith("Indexing: 100%")
    assert all(line.startswith("Indexing:") for line in lines)
    assert "3/3" in lines[-1]


def test_bar_in_a_log_waits_the_log_interval_between_lines(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    with progress_bar(total=1000, desc="Embedding", unit="doc") as bar:
        for _ in range(1000):
            bar.update()
    lines = log.getvalue().splitlines()
    assert len(lines) == 2  # the start, then the end: 1,000 updates inside LOG_INTERVAL write nothing between
    assert "1000/1000" in lines[-1]


def test_bar_on_a_terminal_is_redrawn_in_place(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    bar = progress_bar(total=2, desc="Documents", mininterval=0)
    assert not isinstance(bar.fp, LineWriter)
    bar.update(2)
    bar.close()
    assert "\r" in terminal.getvalue()


@pytest.mark.parametrize("kwargs", [{"disable": True}, {"file": io.StringIO()}])
def test_disabled_bar_or_one_given_a_file_writes_nothing_to_stderr(monkeypatch, kwargs):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    with progress_bar(total=2, desc="Queries", **kwargs) as bar:
        bar.update(2)
    assert log.getvalue() == ""


def test_line_writer_drops_blank_clears():
    log = io.StringIO()
    writer = LineWriter(log)
    writer.write("\r" + " " * 20 + "\r")
    writer.write("\rstep 1   ")
    writer.write("\n")
    assert log.getvalue() == "step 1\n"


def test_a_bar_that_clears_itself_on_a_terminal_still_logs_its_end(monkeypatch):
    """finetune's epoch bars are leave=False: in a log their last state must still be written, in ASCII."""
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    with progress_bar(total=4, desc="epoch 1/2", unit="step", leave=False) as bar:
        bar.update(4)
    lines = log.getvalue().splitlines()
    assert lines[-1].startswith("epoch 1/2: 100%|##########| 4/4")
    assert all(line.isascii() for line in lines)


@pytest.mark.parametrize(("value", "text"), [(3.7e-4, "3.7e-4"), (1e-3, "1.0e-3"), (0.0, "0"), (12.5, "1.2e1"),
                                             (5e-10, "5.0e-10")])
def test_learning_rates_are_short_in_the_bars(value: float, text: str) -> None:
    assert progress.short_float(value) == text


def test_loading_and_saving_a_model_show_no_transformers_bar_and_keep_the_setting(tiny_bert, tmp_path, capfd):
    from transformers.utils import logging as hf_logging

    from graphdoc import GraphDocEncoder

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()
    try:
        GraphDocEncoder.from_pretrained(str(tiny_bert)).save_pretrained(tmp_path / "saved")  # nor "Writing model shards"
        assert hf_logging.is_progress_bar_enabled()  # the user's setting comes back
        from huggingface_hub import utils as hub_utils

        with progress.no_transformers_bar():
            assert not hf_logging.is_progress_bar_enabled()
            assert not hub_utils.are_progress_bars_disabled()  # a download from the hub still shows its bar
        hf_logging.disable_progress_bar()
        with progress.no_transformers_bar():
            pass
        assert not hf_logging.is_progress_bar_enabled()  # and a disabled bar stays disabled
        assert hub_utils.are_progress_bars_disabled()
    finally:
        (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "Writing model shards" not in err


def test_document_count_of_corpora_it_can_count_cheaply(tmp_path):
    """(stop 32: embed and index bars had no total, so no time left, on any corpus)"""
    import gzip

    from graphdoc.corpus import document_count

    plain = tmp_path / "docs.jsonl"
    plain.write_text('{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n{"id": "c", "text": "z"}', encoding="utf-8")
    assert document_count(plain) == 3  # the last line without its line break counts too
    assert document_count(str(plain)) == 3
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert document_count(tmp_path / "empty.jsonl") == 0
    beir = tmp_path / "beir"
    beir.mkdir()
    (beir / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n' * 4, encoding="utf-8")
    (beir / "queries.jsonl").write_text('{"_id": "q", "text": "x"}\n', encoding="utf-8")
    assert document_count(beir) == 4
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    for name in ("a.md", "b.txt", "sub/c.md"):
        (folder / name).write_text("# T\n\ntext\n", encoding="utf-8")
    assert document_count(folder) == 3
    packed = tmp_path / "docs.jsonl.gz"  # counting would mean decompressing: no total
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    table = tmp_path / "docs.csv"  # a row may span lines
    table.write_text('id,text\na,"one\ntwo"\n', encoding="utf-8")
    for source in (packed, table, tmp_path / "missing.jsonl", "msmarco-document", ""):
        assert document_count(source) is None, source


def test_index_bar_has_the_corpus_total(tmp_path, model_dir, monkeypatch):
    from _retrieval_helpers import make_docs, write_jsonl

    from graphdoc.retrieval import builder

    totals = []
    real = builder.progress_bar
    monkeypatch.setattr(builder, "progress_bar", lambda *a, **k: totals.append(k.get("total")) or real(*a, **k))
    corpus = write_jsonl(tmp_path / "corpus.jsonl", make_docs(7))
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.retrieval.builder import build_index

    build_index(GraphDocEncoder.from_pretrained(str(model_dir), device="cpu"), corpus, tmp_path / "index",
                show_progress_bar=True)
    assert totals == [7]


def test_a_log_gets_no_line_twice_for_one_count(monkeypatch):
    """(stop 32: close() wrote the last state again, and tqdm's monitor thread's refresh made the next update
    print at once: two lines for 301/301)"""
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    with progress_bar(total=2, desc="Indexing", unit="doc") as bar:
        bar.update()
        bar.refresh()  # as the monitor thread would
        bar.update()
    counters = [line.split(" [")[0] for line in log.getvalue().splitlines()]
    assert counters == ["Indexing:   0%|          | 0/2", "Indexing:  50%|#####     | 1/2",
                        "Indexing: 100%|##########| 2/2"]


def test_a_bar_whose_counted_total_held_blank_documents_ends_at_100_percent(monkeypatch):
    from graphdoc.progress import complete

    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    with progress_bar(total=32, desc="Embedding", unit="doc") as bar:
        bar.update(30)  # two of the 32 lines were blank documents, skipped
        complete(bar)
    assert log.getvalue().splitlines()[-1].startswith("Embedding: 100%|##########| 30/30")


def test_index_skipping_duplicates_says_how_many(tmp_path, model_dir, caplog):
    """(stop 32: --on-duplicate skip left documents out without a word, the bar at 0)"""
    import logging

    from _retrieval_helpers import make_docs, write_jsonl

    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.retrieval.builder import IndexSettings, build_index

    model = GraphDocEncoder.from_pretrained(str(model_dir), device="cpu")
    build_index(model, write_jsonl(tmp_path / "a.jsonl", make_docs(4)), tmp_path / "index")
    again = write_jsonl(tmp_path / "b.jsonl", make_docs(6))  # d000-d003 again, and two new
    with caplog.at_level(logging.INFO, logger="graphdoc"):
        manifest = build_index(model, again, tmp_path / "index", IndexSettings(on_duplicate="skip"))
    assert manifest.counts["documents"] == 6
    assert f"{again}: 4 document(s) already in the index left out (--on-duplicate skip): 'd000', 'd001', " \
           "'d002', 'd003'" in [r.getMessage() for r in caplog.records]


def test_a_description_holding_a_bracket_keeps_every_line(monkeypatch):
    """(review: the de-duplication cut at the first " [", so a run folder "out [v2]" logged only its 0% line)"""
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    with progress_bar(total=3, desc="out [v2]: epoch 1/2") as bar:
        for _ in range(3):
            bar.update()
    assert [line.rsplit(" [", 1)[0][-3:] for line in log.getvalue().splitlines()] == ["0/3", "1/3", "2/3", "3/3"]


def test_logs_beside_bars_keeps_the_callers_handlers_as_they_were(monkeypatch):
    """(review: tqdm's logging_redirect_tqdm dropped a console handler's level, and added a console handler to a
    program logging to a file only)"""
    import logging

    from graphdoc.progress import logs_beside_bars

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    root = logging.getLogger()
    console = logging.StreamHandler(terminal)
    console.setLevel(logging.WARNING)
    console.setFormatter(logging.Formatter("CONSOLE %(message)s"))
    monkeypatch.setattr(root, "handlers", [console])
    monkeypatch.setattr(root, "level", logging.INFO)
    with logs_beside_bars():
        (beside,) = root.handlers
        assert beside is not console and beside.level == logging.WARNING and beside.formatter is console.formatter
        logging.getLogger("graphdoc.test").info("not shown: below the console's level")
        logging.getLogger("graphdoc.test").warning("shown")
    assert root.handlers == [console]
    assert terminal.getvalue() == "CONSOLE shown\n"
    monkeypatch.setattr(root, "handlers", [])  # a program logging nowhere on the console gets no console handler
    with logs_beside_bars():
        assert root.handlers == []
    log_file = io.StringIO()  # not a terminal: nothing changes
    monkeypatch.setattr(sys, "stderr", log_file)
    monkeypatch.setattr(root, "handlers", [console])
    with logs_beside_bars():
        assert root.handlers == [console]
