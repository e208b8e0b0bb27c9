"""Atomic writes: plain permissions, folders of other files kept, output paths checked before any work."""

from __future__ import annotations

import errno
import json
import os
import re
import stat

import numpy as np
import pytest

from graphdoc.cli import main
from graphdoc.encoder import GraphDocEncoder
from graphdoc.errors import GraphDocError, ModelLoadError
from graphdoc.fileio import atomic_directory, atomic_write, check_output_file


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_writes_get_the_modes_of_a_plain_open(tmp_path, umask_022):
    with atomic_write(tmp_path / "a.txt", "w", encoding="utf-8") as handle:
        handle.write("x")
    with atomic_directory(tmp_path / "folder") as tmp:
        (tmp / "sub").mkdir(mode=0o700)
        (tmp / "sub" / "f").write_text("y")
        os.chmod(tmp / "sub" / "f", 0o600)  # as safetensors writes its files
    assert mode(tmp_path / "a.txt") == 0o644
    assert [mode(tmp_path / "folder"), mode(tmp_path / "folder" / "sub")] == [0o755, 0o755]
    assert mode(tmp_path / "folder" / "sub" / "f") == 0o644


def test_atomic_writes_refuse_a_folder_or_a_path_under_a_file(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("keep")
    with pytest.raises(GraphDocError, match="it is a folder"), atomic_write(tmp_path / "dir"):
        pass
    with pytest.raises(GraphDocError, match="file, not a folder"), atomic_write(tmp_path / "file" / "x"):
        pass
    with pytest.raises(GraphDocError, match="a file of that name exists"), atomic_directory(tmp_path / "file"):
        pass
    assert (tmp_path / "file").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "file"]  # no temporaries left


def test_a_failed_replace_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "out"
    real_replace = os.replace

    def failing_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk gone"), atomic_directory(target) as tmp:
        (tmp / "f").write_text("x")
    monkeypatch.setattr(os, "replace", real_replace)
    assert list(tmp_path.iterdir()) == []


def test_check_output_file(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    check_output_file(tmp_path / "new" / "deeper" / "out.npy")  # missing folders are made at write time
    with pytest.raises(GraphDocError, match=r"^--output .*/d is a folder; name a file$"):
        check_output_file(tmp_path / "d")
    with pytest.raises(GraphDocError, match=r"^--html .*/f/x.html: .*/f is a file, not a folder$"):
        check_output_file(tmp_path / "f" / "x.html", "--html")
    assert not (tmp_path / "new").exists()


def test_save_pretrained_keeps_a_folder_of_other_files(tiny_bert, tmp_path, monkeypatch):
    model = GraphDocEncoder.from_pretrained(tiny_bert, device="cpu")
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("mine")
    with pytest.raises(GraphDocError, match=r"project is a folder of other files, not a saved graphdoc model: "
                                            r"save into a new or empty folder"):
        model.save_pretrained(project)
    assert [p.name for p in project.iterdir()] == ["notes.txt"]
    monkeypatch.chdir(project)
    with pytest.raises(GraphDocError, match=r"^\. is a folder of other files"):
        model.save_pretrained(".")
    (tmp_path / "empty").mkdir()
    model.save_pretrained(tmp_path / "empty")
    model.save_pretrained(tmp_path / "empty")  # an earlier save is replaced
    monkeypatch.chdir(tmp_path / "empty")
    with pytest.raises(GraphDocError, match="it holds the current working folder"):
        model.save_pretrained(".")
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == ["README.md", "config.json", "model.safetensors",
                                                                      "passage_encoder"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "project"]


def test_a_truncated_weights_file_is_one_line(tiny_bert, tmp_path):
    model = GraphDocEncoder.from_pretrained(tiny_bert, device="cpu")
    model.save_pretrained(tmp_path / "m")
    with open(tmp_path / "m" / "model.safetensors", "r+b") as handle:
        handle.truncate(100)
    with pytest.raises(ModelLoadError, match=r"^cannot read .*model.safetensors: .*\(the file is damaged or "
                                             r"incomplete\)$"):
        GraphDocEncoder.from_pretrained(tmp_path / "m", device="cpu")


def test_embed_checks_its_output_before_reading_the_corpus(tiny_bert, tmp_path, capsys, restore_cli_state):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"_id": "a", "text": "one passage."}) + "\n", encoding="utf-8")
    (tmp_path / "dir.npy").mkdir()
    (tmp_path / "old.ids.txt").mkdir()
    for output, message in [("dir.npy", "dir.npy is a folder; name a file"),
                            ("c.jsonl/x.npy", "c.jsonl is a file, not a folder"),
                            ("old.npy", "the ids file .*old.ids.txt is a folder")]:
        assert main(["embed", "--corpus", str(corpus), "--output", str(tmp_path / output),
                     "--model", str(tiny_bert)]) == 1
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith("graphdoc embed: error: ") and re.search(message, line), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl", "dir.npy", "old.ids.txt"]
    assert main(["-q", "embed", "--corpus", str(corpus), "--output", str(tmp_path / "ok.npy"),
                 "--model", str(tiny_bert)]) == 0
    assert np.load(tmp_path / "ok.npy").shape == (1, 32)
    assert (tmp_path / "ok.ids.txt").read_text() == "a\n"


def test_compare_checks_its_html_output_before_loading_a_model(tmp_path, capsys, restore_cli_state):
    doc = tmp_path / "a.md"
    doc.write_text("# A\n\nSome text here.\n", encoding="utf-8")
    (tmp_path / "page.html").mkdir()
    assert main(["compare", str(doc), str(doc), "--html", str(tmp_path / "page.html"),
                 "--model", str(tmp_path / "no-such-model")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"graphdoc compare: error: --html {tmp_path / 'page.html'} is a folder; name a file"]


def test_a_rewritten_file_keeps_its_permissions(tmp_path, umask_022):
    path = tmp_path / "private.txt"
    path.write_text("old")
    os.chmod(path, 0o600)
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write("new")
    assert (path.read_text(), mode(path)) == ("new", 0o600)


def test_writes_through_a_symbolic_link_replace_its_target_and_keep_the_link(tiny_bert, tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "run.txt").symlink_to(tmp_path / "store" / "run.txt")  # dangling until written
    for text in ("first", "second"):
        with atomic_write(tmp_path / "run.txt", "w", encoding="utf-8") as handle:
            handle.write(text)
        assert (tmp_path / "run.txt").is_symlink() and (tmp_path / "store" / "run.txt").read_text() == text
    model = GraphDocEncoder.from_pretrained(tiny_bert, device="cpu")
    model.save_pretrained(tmp_path / "store" / "model")
    (tmp_path / "model").symlink_to(tmp_path / "store" / "model", target_is_directory=True)
    model.save_pretrained(tmp_path / "model")  # a saved model behind the link: replaced in place
    assert (tmp_path / "model").is_symlink()
    assert sorted(p.name for p in (tmp_path / "store" / "model").iterdir()) == [
        "README.md", "config.json", "model.safetensors", "passage_encoder"]
    assert GraphDocEncoder.from_pretrained(tmp_path / "model", device="cpu").dimension == model.dimension
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["model", "run.txt"]  # no temporaries


def test_save_pretrained_keeps_files_added_to_a_saved_model(tiny_bert, tmp_path):
    """A file added is refused, and kept; a README.md of the user's (a card without graphdoc's mark) is carried
    over by a save."""
    model = GraphDocEncoder.from_pretrained(tiny_bert, device="cpu")
    model.save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "README.md").write_text("model card")
    (tmp_path / "m" / "extra").mkdir()
    with pytest.raises(GraphDocError, match=r"m holds extra besides a saved graphdoc model: saving "
                                            r"replaces the whole folder, so move them out first"):
        model.save_pretrained(tmp_path / "m")
    assert (tmp_path / "m" / "README.md").read_text() == "model card"
    (tmp_path / "m" / "extra").rmdir()
    model.save_pretrained(tmp_path / "m")
    assert (tmp_path / "m" / "README.md").read_text() == "model card"


def test_compare_names_the_json_file_of_a_bad_document(tmp_path, capsys, restore_cli_state):
    good, bad = tmp_path / "a.md", tmp_path / "b.json"
    good.write_text("# A\n\nSome text here.\n", encoding="utf-8")
    bad.write_text('{"text": "x\\ud800y"}', encoding="utf-8")
    assert main(["compare", str(good), str(bad), "--model", str(tmp_path / "no-such-model")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"graphdoc compare: error: {bad}: document 'b': text is not valid Unicode (lone surrogate \\ud800)"]


def _disk_full_errors():
    from safetensors import SafetensorError

    return [OSError("19200 requested and 8160 written"),  # np.save on a full disk: no error number, no file
            RuntimeError("Error in void faiss::write_index(...) at impl/io.cpp:118: write error in "
                         "/d/.final.x.tmp/passages.faiss: 131027 != 399360 (No space left on device)"),
            SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")]


@pytest.mark.parametrize("error", _disk_full_errors(), ids=["numpy", "faiss", "safetensors"])
def test_a_full_disk_in_a_librarys_words_is_an_os_error_naming_the_output(tmp_path, error):
    for writer, path in ((atomic_write, tmp_path / "file.npy"), (atomic_directory, tmp_path / "folder")):
        with pytest.raises(OSError) as info:
            with writer(path):
                raise error
        assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
        assert info.value.__cause__ is error
        assert info.value.strerror == ("a write was cut short (8160 of 19200 bytes written): the disk is full or "
                                       "over its quota" if "requested" in str(error) else os.strerror(errno.ENOSPC))
    assert list(tmp_path.iterdir()) == []  # no temporary left


def test_a_full_disk_error_naming_a_file_of_the_temporary_names_the_file_it_was_to_be(tmp_path):
    with pytest.raises(OSError) as info:
        with atomic_directory(tmp_path / "shard") as tmp:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "docs.jsonl"))
    assert info.value.filename == str(tmp_path / "shard" / "docs.jsonl")


def test_a_failed_copy_of_a_merge_is_one_os_error_naming_the_file_that_failed(tmp_path):
    import shutil

    with pytest.raises(OSError) as info:  # the disk: the file being written, as it was to be named
        with atomic_directory(tmp_path / "merged") as tmp:
            raise shutil.Error([("p2/docs.jsonl", str(tmp / "shards" / "docs.jsonl"),
                                 f"[Errno 28] No space left on device: '{tmp / 'shards' / 'docs.jsonl'}'")] * 3)
    assert (info.value.errno, info.value.filename) == (errno.ENOSPC, str(tmp_path / "merged" / "shards" / "docs.jsonl"))
    with pytest.raises(OSError) as info:  # a part's file it could not read: that file, not the output
        with atomic_directory(tmp_path / "merged") as tmp:
            raise shutil.Error([("p2/extra.bin", str(tmp / "extra.bin"),
                                 "[Errno 2] No such file or directory: 'p2/extra.bin'")])
    assert (info.value.errno, info.value.filename) == (errno.ENOENT, "p2/extra.bin")
    assert list(tmp_path.iterdir()) == []


def test_other_library_errors_are_raised_as_they_are(tmp_path):
    for error in (RuntimeError("faiss: bad factory"), ValueError("19200 requested and 8160 written")):
        with pytest.raises(type(error)) as info:
            with atomic_directory(tmp_path / "folder"):
                raise error
        assert info.value is error


def test_an_index_finalised_on_a_full_disk_is_one_error_line_and_keeps_its_last_build(tiny_bert, tmp_path, capsys,
                                                                                      monkeypatch,
                                                                                      restore_cli_state):
    from _retrieval_helpers import make_docs, write_jsonl

    from graphdoc.retrieval.dense import DenseIndex
    from graphdoc.retrieval.searcher import Searcher

    corpus = write_jsonl(tmp_path / "c.jsonl", make_docs(6))
    index = tmp_path / "index"
    assert main(["index", "--corpus", str(corpus), "--index-dir", str(index), "--model", str(tiny_bert)]) == 0
    before = Searcher(index).batch_search(["alpha"], mode="bm25")

    def full(self, path):
        raise RuntimeError(f"Error in void faiss::write_index: write error in {path}: 1 != 9 (No space left on "
                           "device)")

    monkeypatch.setattr(DenseIndex, "save", full)
    capsys.readouterr()
    more = write_jsonl(tmp_path / "more.jsonl", make_docs(3, start=6))
    assert main(["index", "--corpus", str(more), "--index-dir", str(index)]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (f"graphdoc index: error: No space left on device: "
                                                        f"{index / 'final'} (-v shows where it happened)")
    assert Searcher(index).batch_search(["alpha"], mode="bm25") == before  # the last complete build, searched


def test_an_output_that_is_a_pipe_is_written_into_not_replaced(tmp_path):
    import threading

    from graphdoc.fileio import _is_stream, is_stdio, replacing

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    with atomic_write(fifo, "w", encoding="utf-8") as handle:
        handle.write("q1 Q0 d1 1 1.0 t\n")
    reader.join(10)
    assert got == [b"q1 Q0 d1 1 1.0 t\n"] and stat.S_ISFIFO(fifo.stat().st_mode)  # still a pipe
    assert replacing(fifo) == "" and list(tmp_path.iterdir()) == [fifo]
    assert _is_stream("/dev/null")
    for name in ("/dev/stdout", "/dev/stderr", "/dev/fd/1", "/proc/self/fd/2"):  # opened again: another position
        with pytest.raises(GraphDocError, match=f"^cannot write {name}: name a file, or - for standard output$"):
            _is_stream(name)
    assert not _is_stream(tmp_path / "run.trec") and not _is_stream(tmp_path)
    assert is_stdio("/dev/stdout") and is_stdio("-") and not is_stdio("stdout")


def test_names_near_the_file_name_limit_are_written_replaced_and_locked(tmp_path):
    """A temporary is named `.NAME.XXXXXXXX.tmp`: for a name of 242 bytes or more it passed the 255-byte limit and
    the write failed, after the work, naming the temporary."""
    from graphdoc.fileio import file_lock, hidden_prefix, remove_stale_temporaries

    name = "é" * 100 + "c" * 50 + ".trec"  # 155 characters, 255 bytes: as long as a name may be
    assert len(os.fsencode(name)) == 255
    path = tmp_path / name
    for text in ("first\n", "second\n"):  # written, then replaced
        with atomic_write(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    assert path.read_text(encoding="utf-8") == "second\n"
    folder = tmp_path / ("d" * 255)
    for _ in range(2):
        with atomic_directory(folder) as tmp:
            (tmp / "x").write_text("x")
    with file_lock(path), pytest.raises(GraphDocError, match="another graphdoc process is writing"):
        with file_lock(path):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "d" * 255])  # nothing else left
    prefix = hidden_prefix(name)
    assert len(os.fsencode(prefix)) + 16 <= 255 and prefix != hidden_prefix(name[:-1] + "x")  # names kept apart
    (tmp_path / f"{prefix}abcd1234.tmp").write_text("killed")  # as a killed write leaves it
    assert [p.name for p in remove_stale_temporaries(tmp_path, name)] == [f"{prefix}abcd1234.tmp"]
    assert hidden_prefix("short.trec") == ".short.trec."
    cut = hidden_prefix("a" + "é" * 127)  # cut between whole characters: valid UTF-8 (macOS refuses other names)
    assert os.fsencode(cut).decode("utf-8") == cut and len(os.fsencode(cut)) + 16 <= 255
