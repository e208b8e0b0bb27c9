"""``graphdoc embed`` run in-process on a tiny random encoder: outputs, and one-line errors for bad inputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from graphdoc import __version__
from graphdoc.cli import main
from graphdoc.encoder import GraphDocEncoder

DOCS = [
    {"_id": "d1", "title": "Graphs", "text": "Graph attention networks read documents as graphs of passages."},
    {"_id": "d2", "text": "The quick brown fox jumps over the lazy dog. A second sentence follows here!"},
    {"_id": "d3", "sections": [{"title": "A", "text": "Meetings have topics."},
                               {"title": "B", "text": "And sections."}]},
]


@pytest.fixture(autouse=True)
def restore_global_state(restore_cli_state):
    """``main`` configures logging and quiets transformers for the process (see conftest)."""
    yield


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def embed(corpus: Path | str, output: Path, model: Path | str, *extra: str, quiet: bool = True) -> int:
    """Run ``graphdoc [-q] embed ...``; quiet by default, so stderr holds only warnings and errors."""
    argv = ["embed", "--corpus", str(corpus), "--output", str(output), "--model", str(model), *extra]
    return main((["-q"] if quiet else []) + argv)


def error_line(capsys) -> str:
    """The whole of stderr, which must be exactly one line."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("graphdoc embed: error: ")
    return lines[0]


# ------------------------------------------------------------------ success
def test_embed_writes_one_float32_row_per_document_and_ids_in_row_order(tiny_bert: Path, tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    output = tmp_path / "out" / "emb.npy"
    assert embed(corpus, output, tiny_bert, "--batch-size", "2") == 0
    matrix = np.load(output)
    assert matrix.dtype == np.float32 and matrix.shape == (3, 32)
    assert (tmp_path / "out" / "emb.ids.txt").read_text(encoding="utf-8") == "d1\nd2\nd3\n"
    # the rows are what the Python API gives for the same documents
    model = GraphDocEncoder.from_pretrained(str(tiny_bert), device="cpu")
    assert np.allclose(matrix, model.encode(DOCS), atol=1e-6)
    assert sorted(p.name for p in output.parent.iterdir()) == ["emb.ids.txt", "emb.npy"]  # no temporary files


def test_embed_says_when_it_replaces_an_earlier_output(tiny_bert: Path, tmp_path: Path, capsys) -> None:
    corpus, output = write_jsonl(tmp_path / "c.jsonl", DOCS), tmp_path / "emb.npy"
    assert embed(corpus, output, tiny_bert, quiet=False) == 0
    assert f"wrote 3 x 32 embeddings to {output} and ids" in capsys.readouterr().err
    assert embed(write_jsonl(tmp_path / "c.jsonl", DOCS[:2]), output, tiny_bert, quiet=False) == 0
    assert f"wrote 2 x 32 embeddings to {output} (replacing the earlier file) and ids" in capsys.readouterr().err
    assert np.load(output).shape[0] == 2 and (tmp_path / "emb.ids.txt").read_text().split() == ["d1", "d2"]


def test_embed_normalize(tiny_bert: Path, tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--normalize") == 0
    assert np.allclose(np.linalg.norm(np.load(tmp_path / "emb.npy"), axis=1), 1.0, atol=1e-6)


def test_embed_truncate_dim_keeps_the_first_dimensions_before_normalising(tiny_bert: Path, tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--truncate-dim", "8", "--normalize") == 0
    model = GraphDocEncoder.from_pretrained(str(tiny_bert), device="cpu")
    expected = model.encode(DOCS, truncate_dim=8, normalize_embeddings=True)
    matrix = np.load(tmp_path / "emb.npy")
    assert matrix.shape == (3, 8) and np.allclose(matrix, expected, atol=1e-6)


@pytest.mark.parametrize("value", ["0", "33"])
def test_embed_truncate_dim_outside_the_model_s_dimension_is_one_line(tiny_bert: Path, tmp_path: Path, capsys,
                                                                      value: str) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--truncate-dim", value) == 1
    assert error_line(capsys) == ("graphdoc embed: error: --truncate-dim must be from 1 to the model's dimension, 32; "
                                  f"got {value}")
    assert not list(tmp_path.glob("emb*"))


def test_embed_precision_bf16_gives_vectors_close_to_fp32(tiny_bert: Path, tmp_path: Path, monkeypatch) -> None:
    from graphdoc import device as device_module

    monkeypatch.setattr(device_module, "cpu_supports_bf16", lambda: True)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    assert embed(corpus, tmp_path / "fp32.npy", tiny_bert) == 0
    assert embed(corpus, tmp_path / "bf16.npy", tiny_bert, "--precision", "bf16") == 0
    a, b = np.load(tmp_path / "fp32.npy"), np.load(tmp_path / "bf16.npy")
    assert b.dtype == np.float32 and not np.array_equal(a, b)
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosine.min() > 0.99


def test_empty_documents_are_skipped_and_counted(tiny_bert: Path, tmp_path: Path, capsys) -> None:
    records = [DOCS[0], {"_id": "empty", "text": ""}, DOCS[1], {"_id": "blank", "text": " \n\t "}]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, quiet=False) == 0
    assert np.load(tmp_path / "emb.npy").shape == (2, 32)
    assert (tmp_path / "emb.ids.txt").read_text(encoding="utf-8") == "d1\nd2\n"
    assert "skipped 2 empty document" in capsys.readouterr().err


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"graphdoc {__version__}"


def test_the_parser_loads_no_torch_and_ctrl_c_before_a_command_is_one_line(capsys, monkeypatch) -> None:
    import subprocess
    import sys

    code = "import sys; from graphdoc.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"  # --version and --help start at once: torch is for the commands

    import graphdoc.cli as cli_module

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "build_parser", interrupted)
    assert main(["merge", "--index-dir", "x", "a"]) == 130
    assert capsys.readouterr().err == "graphdoc: interrupted\n"


# ------------------------------------------------------------------ user errors: exit 1, one line on stderr
def test_missing_corpus(tiny_bert: Path, tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nope.jsonl"
    assert embed(missing, tmp_path / "emb.npy", tiny_bert) == 1
    line = error_line(capsys)
    assert str(missing) in line and "no such file" in line
    assert not (tmp_path / "emb.npy").exists()


def test_broken_json_line_names_file_and_line(tiny_bert: Path, tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps(DOCS[0]) + "\n" + '{"_id": "d2", "text": "unterminated\n', encoding="utf-8")
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert) == 1
    line = error_line(capsys)
    assert f"{corpus}:2:" in line and "invalid JSON" in line


def test_duplicate_id(tiny_bert: Path, tmp_path: Path, capsys) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [DOCS[0], DOCS[1], dict(DOCS[2], _id="d1")])
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert) == 1
    line = error_line(capsys)
    assert f"{corpus}:3:" in line and "duplicate document id 'd1'" in line and "line 1" in line


def test_wrong_encoding(tiny_bert: Path, tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes((json.dumps(DOCS[0]) + "\n").encode() + '{"_id": "x", "text": "café"}\n'.encode("latin-1"))
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert) == 1
    line = error_line(capsys)
    assert f"{corpus}:2:" in line and "not valid UTF-8" in line and "0xe9" in line


def test_output_must_end_in_npy(tiny_bert: Path, tmp_path: Path, capsys) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    assert embed(corpus, tmp_path / "emb.txt", tiny_bert) == 1
    line = error_line(capsys)
    assert "--output must end in .npy" in line and "emb.txt" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl"]
    assert embed(corpus, tmp_path / ".npy", tiny_bert) == 0  # a name that is all suffix is still .npy
    assert np.load(tmp_path / ".npy").shape[0] == len(DOCS)
    long = tmp_path / ("e" * 244 + ".npy")  # 248 bytes: its ids file fits, its .partial folder would not
    assert embed(corpus, long, tiny_bert) == 1
    assert error_line(capsys) == (f"graphdoc embed: error: --output {long}: its name is too long for the folder a "
                                  "run keeps beside it (NAME.partial, 255 bytes at most): shorten it")


def test_an_output_inside_a_text_folder_corpus_is_refused(tiny_bert: Path, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\nFirst text.\n", encoding="utf-8")
    assert embed(folder, folder / "emb.npy", tiny_bert) == 1  # emb.ids.txt would be a document next time
    assert error_line(capsys) == (f"graphdoc embed: error: --output's ids file {folder / 'emb.ids.txt'} is inside the "
                                  f"corpus folder {folder}: it would be read as documents")
    assert sorted(p.name for p in folder.iterdir()) == ["a.md"]
    assert embed(folder, folder / ".cache" / "emb.npy", tiny_bert) == 0  # a hidden folder is not read
    assert embed(folder, tmp_path / "again.npy", tiny_bert) == 0
    assert (tmp_path / "again.ids.txt").read_text(encoding="utf-8") == "a\n"
    shared = tmp_path / "shared"  # a folder the corpus links to is read as part of it
    shared.mkdir()
    (shared / "b.md").write_text("# B\nSecond text.\n", encoding="utf-8")
    (folder / "more").symlink_to(shared, target_is_directory=True)
    assert embed(folder, shared / "out" / "emb.npy", tiny_bert) == 1
    assert error_line(capsys) == (f"graphdoc embed: error: --output's ids file {shared / 'out' / 'emb.ids.txt'} is "
                                  f"inside the corpus folder {folder} (through its link to {shared}): it would be "
                                  "read as documents")
    assert not (shared / "out").exists()
    (folder / "more").unlink()
    beir = tmp_path / "beir"  # a BEIR folder reads its corpus file only: an output beside it is fine
    beir.mkdir()
    write_jsonl(beir / "corpus.jsonl", DOCS)
    assert embed(beir, beir / "emb.npy", tiny_bert) == 0


def test_only_empty_documents_is_an_error(tiny_bert: Path, tmp_path: Path, capsys) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "e", "text": ""}])
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert) == 1
    assert "no documents to embed" in error_line(capsys)
    assert not (tmp_path / "emb.npy").exists()


def test_unloadable_model(tmp_path: Path, capsys) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    assert embed(corpus, tmp_path / "emb.npy", "no-such-org/no-such-model") == 1
    assert "no-such-org/no-such-model" in error_line(capsys)


def test_an_error_mid_corpus_leaves_no_output_and_keeps_an_earlier_one(tiny_bert: Path, tmp_path: Path,
                                                                       capsys) -> None:
    output = tmp_path / "emb.npy"
    earlier = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(output, earlier)
    (tmp_path / "emb.ids.txt").write_text("old1\nold2\n", encoding="utf-8")
    # several full batches are embedded before the reader reaches the broken line
    records = [{"_id": f"doc{i}", "text": f"Document number {i} has a sentence."} for i in range(9)]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records) + "{broken\n", encoding="utf-8")
    assert embed(corpus, output, tiny_bert, "--batch-size", "2") == 1
    assert f"{corpus}:10:" in error_line(capsys)
    assert np.array_equal(np.load(output), earlier)
    assert (tmp_path / "emb.ids.txt").read_text(encoding="utf-8") == "old1\nold2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "emb.ids.txt", "emb.npy"]

    fresh = tmp_path / "fresh.npy"
    assert embed(corpus, fresh, tiny_bert, "--batch-size", "2") == 1
    assert not fresh.exists() and not (tmp_path / "fresh.ids.txt").exists()


_ITER_FORWARD = GraphDocEncoder.iter_forward


def stop_after(monkeypatch, batches: int) -> list[str]:
    """Make ``iter_forward`` stop the run (Ctrl-C) after ``batches`` batches; returns the ids it was given."""
    given: list[str] = []
    real = _ITER_FORWARD  # not an earlier stop_after's

    def iter_forward(self, documents, *args, **kwargs):
        def seen():
            for doc in documents:
                given.append(doc.id)
                yield doc

        for n, out in enumerate(real(self, seen(), *args, **kwargs)):
            if n == batches:
                raise KeyboardInterrupt
            yield out

    monkeypatch.setattr(GraphDocEncoder, "iter_forward", iter_forward)
    return given


def test_a_run_stopped_midway_goes_on_from_what_it_saved(tiny_bert: Path, tmp_path: Path, monkeypatch,
                                                         capsys) -> None:
    from graphdoc.cli import embed as embed_command

    records = [{"_id": f"doc{i}", "text": f"Document number {i} has a sentence."} for i in range(9)]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    assert embed(corpus, tmp_path / "whole.npy", tiny_bert, "--batch-size", "2") == 0
    monkeypatch.setattr(embed_command, "SAVE_EVERY", 3)
    stop_after(monkeypatch, 3)  # 6 documents embedded; saved: the first 4 (a save every 3 or more read)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2") != 0
    assert not (tmp_path / "emb.npy").exists()
    state = json.loads((tmp_path / "emb.npy.partial" / "state.json").read_text(encoding="utf-8"))
    saved = state["documents"]
    assert 0 < saved < 9
    given = stop_after(monkeypatch, 100)
    capsys.readouterr()
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2", quiet=False) == 0
    assert given == [f"doc{i}" for i in range(saved, 9)]  # the saved ones are not embedded again
    assert f"going on after the {saved} documents embedded before" in capsys.readouterr().err
    np.testing.assert_allclose(np.load(tmp_path / "emb.npy"), np.load(tmp_path / "whole.npy"), atol=1e-6)
    assert (tmp_path / "emb.ids.txt").read_text(encoding="utf-8") == "".join(f"doc{i}\n" for i in range(9))
    assert not (tmp_path / "emb.npy.partial").exists()


def test_a_run_goes_on_with_its_model_moved_to_another_folder(tiny_bert: Path, tmp_path: Path, monkeypatch,
                                                              capsys) -> None:
    """The run is the model's weights and settings, not the folder they are read from; another architecture
    setting with the same weights is another run."""
    import shutil

    from graphdoc.cli import embed as embed_command

    records = [{"_id": f"doc{i}", "text": f"Document number {i} has a sentence."} for i in range(9)]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    monkeypatch.setattr(embed_command, "SAVE_EVERY", 3)
    stop_after(monkeypatch, 3)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2") != 0
    saved = json.loads((tmp_path / "emb.npy.partial" / "state.json").read_text(encoding="utf-8"))["documents"]
    edited = Path(shutil.copytree(tiny_bert, tmp_path / "edited-model"))
    config = json.loads((edited / "config.json").read_text(encoding="utf-8"))
    (edited / "config.json").write_text(json.dumps({**config, "layer_norm_eps": 0.5}), encoding="utf-8")
    stop_after(monkeypatch, 3)
    capsys.readouterr()
    assert embed(corpus, tmp_path / "emb.npy", edited, "--batch-size", "2", quiet=False) != 0
    assert "starting again" in capsys.readouterr().err
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2") != 0  # its own run again
    moved = Path(shutil.copytree(tiny_bert, tmp_path / "moved-model"))
    given = stop_after(monkeypatch, 100)
    capsys.readouterr()
    assert embed(corpus, tmp_path / "emb.npy", moved, "--batch-size", "2", quiet=False) == 0
    assert f"going on after the {saved} documents embedded before" in capsys.readouterr().err
    assert given == [f"doc{i}" for i in range(saved, 9)]


def stopped_after_a_save(tiny_bert: Path, tmp_path: Path, monkeypatch, *extra: str) -> tuple[Path, Path, dict]:
    """A run of 9 documents into ``emb.npy`` (with the options ``extra``) stopped after saving its first ones: the
    corpus, its state file and state."""
    from graphdoc.cli import embed as embed_command

    records = [{"_id": f"doc{i}", "text": f"Document number {i} has a sentence."} for i in range(9)]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    monkeypatch.setattr(embed_command, "SAVE_EVERY", 3)
    stop_after(monkeypatch, 3)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2", *extra) != 0
    state_file = tmp_path / "emb.npy.partial" / "state.json"
    return corpus, state_file, json.loads(state_file.read_text(encoding="utf-8"))


def test_a_run_saved_by_an_earlier_graphdoc_goes_on(tiny_bert: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """Its state names the model by folder, without the architecture fingerprint: the same run, gone on from (it
    was removed as 'another model's', and everything embedded again)."""
    import argparse

    from graphdoc.cli import embed as embed_command

    corpus, state_file, state = stopped_after_a_save(tiny_bert, tmp_path, monkeypatch)
    model = GraphDocEncoder.from_pretrained(str(tiny_bert))
    now, earlier = embed_command._run_identities(argparse.Namespace(corpus=corpus, normalize=False), model)
    assert state["run"] == now and earlier["model"]["path"] == str(tiny_bert) and "architecture" not in earlier["model"]
    state_file.write_text(json.dumps({**state, "run": earlier}), encoding="utf-8")  # as written before
    given = stop_after(monkeypatch, 100)
    capsys.readouterr()
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2", quiet=False) == 0
    assert f"going on after the {state['documents']} documents embedded before" in capsys.readouterr().err
    assert given == [f"doc{i}" for i in range(state["documents"], 9)]


def test_a_run_that_fails_after_another_runs_save_never_takes_its_rows(tiny_bert: Path, tmp_path: Path,
                                                                       monkeypatch, capsys) -> None:
    from graphdoc.cli import embed as embed_command

    records = [{"_id": f"doc{i}", "text": f"Document number {i} has a sentence."} for i in range(9)]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    assert embed(corpus, tmp_path / "whole.npy", tiny_bert, "--batch-size", "2") == 0
    monkeypatch.setattr(embed_command, "SAVE_EVERY", 2)
    stop_after(monkeypatch, 3)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2") != 0  # run A: saved, stopped
    stop_after(monkeypatch, 100)
    real_write = embed_command.atomic_write

    def full_on_state(path, *args, **kwargs):
        if Path(path).name == "state.json":
            raise OSError(28, "No space left on device")
        return real_write(path, *args, **kwargs)

    monkeypatch.setattr(embed_command, "atomic_write", full_on_state)
    # run B, normalised: its first chunk is written, its state is not
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2", "--normalize") == 1
    monkeypatch.setattr(embed_command, "atomic_write", real_write)
    capsys.readouterr()
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2") == 0  # run A again: from the start
    assert "going on after" not in capsys.readouterr().err
    np.testing.assert_allclose(np.load(tmp_path / "emb.npy"), np.load(tmp_path / "whole.npy"), atol=1e-6)


@pytest.mark.parametrize("change", ["normalize", "truncate-dim", "corpus"])
def test_what_another_run_saved_is_not_taken(tiny_bert: Path, tmp_path: Path, monkeypatch, capsys,
                                             change: str) -> None:
    from graphdoc.cli import embed as embed_command

    records = [{"_id": f"doc{i}", "text": f"Document number {i} has a sentence."} for i in range(9)]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    monkeypatch.setattr(embed_command, "SAVE_EVERY", 2)
    stop_after(monkeypatch, 3)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2") != 0
    extra = {"normalize": ["--normalize"], "truncate-dim": ["--truncate-dim", "8"]}.get(change, [])
    if change == "corpus":  # the same state to the file system (size, time), other documents
        stat = corpus.stat()
        write_jsonl(corpus, [{**r, "_id": r["_id"].replace("doc", "new")} for r in records])
        os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    given = stop_after(monkeypatch, 100)
    capsys.readouterr()
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2", *extra) == 0
    assert len(given) == 9
    another_run = ("holds what an embed of another model, corpus, --normalize, --truncate-dim or graphdoc chunker "
                   "left: starting again")
    expected = {"normalize": another_run, "truncate-dim": another_run,
                "corpus": "document 1 is 'new0', not 'doc0' as when"}[change]
    assert expected in capsys.readouterr().err
    prefix = "new" if change == "corpus" else "doc"
    assert (tmp_path / "emb.ids.txt").read_text(encoding="utf-8") == "".join(f"{prefix}{i}\n" for i in range(9))


def test_a_second_embed_into_the_same_output_is_refused_and_touches_nothing(tiny_bert: Path, tmp_path: Path,
                                                                           monkeypatch, capsys) -> None:
    """Two runs into one output mixed their saved chunks: rows of one corpus under the other's ids."""
    from graphdoc.cli import embed as embed_command
    from graphdoc.fileio import file_lock

    records = [{"_id": f"doc{i}", "text": f"Document number {i} has a sentence."} for i in range(9)]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    monkeypatch.setattr(embed_command, "SAVE_EVERY", 2)
    stop_after(monkeypatch, 3)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2") != 0
    saved = sorted(p.name for p in (tmp_path / "emb.npy.partial").iterdir())
    capsys.readouterr()
    with file_lock(tmp_path / "emb.npy"):  # as another process's run holds it
        assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2", "--normalize") == 1
    assert error_line(capsys) == f"graphdoc embed: error: another graphdoc process is writing {tmp_path / 'emb.npy'}"
    assert sorted(p.name for p in (tmp_path / "emb.npy.partial").iterdir()) == saved  # its saved part kept
    stop_after(monkeypatch, 100)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "emb.ids.txt", "emb.npy"]  # no lock left


def test_error_is_one_line_without_quiet(tiny_bert: Path, tmp_path: Path, capsys) -> None:
    assert embed(tmp_path / "nope.jsonl", tmp_path / "emb.npy", tiny_bert, quiet=False) == 1
    error_line(capsys)


def test_a_pretrain_config_gives_its_model_section_and_backbone(tiny_bert: Path, tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    model = {"chunker": {"max_words": 8}, "passage_encoder": {"model_name_or_path": str(tiny_bert)},
             "graph": {"document": "mean"}}
    config = tmp_path / "pretrain.json"
    config.write_text(json.dumps({"backbone": "flat", "model": model, "pretrain": {"objective": "simcse"}}),
                      encoding="utf-8")
    assert main(["-q", "embed", "--corpus", str(corpus), "--output", str(tmp_path / "a.npy"), "--config",
                 str(config)]) == 0
    (tmp_path / "model.json").write_text(json.dumps(model), encoding="utf-8")
    assert main(["-q", "embed", "--corpus", str(corpus), "--output", str(tmp_path / "b.npy"), "--config",
                 str(tmp_path / "model.json"), "--backbone", "flat"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))
    assert main(["-q", "embed", "--corpus", str(corpus), "--output", str(tmp_path / "c.npy"), "--config",
                 str(config), "--backbone", "graph"]) == 1  # the flat settings do not fit a graph model


def test_a_full_disk_is_one_line_and_the_last_output_is_kept(tiny_bert: Path, tmp_path: Path, capsys,
                                                               monkeypatch) -> None:
    import errno

    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert) == 0
    before = (tmp_path / "emb.npy").read_bytes(), (tmp_path / "emb.ids.txt").read_bytes()

    def full(file, array, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "emb.npy"))

    monkeypatch.setattr(np, "save", full)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert) == 1
    assert error_line(capsys) == (f"graphdoc embed: error: No space left on device: {tmp_path / 'emb.npy'} "
                                  "(-v shows where it happened)")
    assert ((tmp_path / "emb.npy").read_bytes(), (tmp_path / "emb.ids.txt").read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "emb.ids.txt", "emb.npy"]
    with pytest.raises(OSError):  # -v: the traceback, to see where
        main(["-v", "embed", "--corpus", str(corpus), "--output", str(tmp_path / "emb.npy"), "--model",
              str(tiny_bert)])


def test_a_disk_that_fills_on_the_ids_file_keeps_the_last_matrix_and_ids_together(tiny_bert: Path, tmp_path: Path,
                                                                                   capsys, monkeypatch) -> None:
    import errno
    import os

    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert) == 0
    before = (tmp_path / "emb.npy").read_bytes(), (tmp_path / "emb.ids.txt").read_bytes()
    real_fsync = os.fsync

    def full(fd):  # a buffered write() fails at flush, naming no file, as on a real full disk
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if name.startswith(".emb.ids.txt.") and name.endswith(".tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    assert embed(write_jsonl(tmp_path / "other.jsonl", DOCS[:2]), tmp_path / "emb.npy", tiny_bert) == 1
    assert error_line(capsys) == (f"graphdoc embed: error: No space left on device: {tmp_path / 'emb.ids.txt'} "
                                  "(-v shows where it happened)")
    assert ((tmp_path / "emb.npy").read_bytes(), (tmp_path / "emb.ids.txt").read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "emb.ids.txt", "emb.npy", "other.jsonl"]


@pytest.mark.parametrize("command", [[], ["embed"], ["finetune"], ["pretrain"], ["plot"], ["plot", "attention"]])
def test_help_shows_no_docstring_markup_and_keeps_options_whole(command, capsys, monkeypatch):
    import graphdoc.cli

    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out and out.startswith(f"usage: graphdoc{''.join(' ' + c for c in command)}")
    assert not [line for line in out.splitlines() if line.endswith("-") and not line.endswith(" -")]
    if command == []:
        assert graphdoc.cli.__doc__.splitlines()[0].replace("``", '"') in out  # The "graphdoc" command line
    if command == ["finetune"]:  # a quoted command line stays on one line
        assert any('"--corpus C --queries Q --qrels R [--dev-qrels R2]"' in line for line in out.splitlines())
        assert any(line.startswith('"--train T --dev D [--test E]" (JSON lines, or CSV/TSV, with a "label")')
                   for line in out.splitlines())
    if command == ["plot"]:  # paragraphs kept, the subject plain, command lines quoted
        assert "\n\ngraphdoc plot: PNG figures of a corpus's document embeddings and of a\ndocument's attention.\n\n" \
            "\"graphdoc plot embeddings --corpus C" in out
        assert "\"pip install 'graphdoc[plot]'\"" in out


def test_a_folder_of_other_files_named_as_a_runs_part_is_refused_not_removed(tiny_bert: Path, tmp_path: Path,
                                                                          capsys) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "a", "text": "One sentence here."}])
    folder = tmp_path / "emb.npy.partial"
    folder.mkdir()
    (folder / "thesis.tex").write_text("important", encoding="utf-8")
    capsys.readouterr()
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (f"graphdoc embed: error: {folder} holds files graphdoc embed did not write "
                                    "(thesis.tex): it is not a run's part; move it, or choose another --output")
    assert "starting again" not in err
    assert (folder / "thesis.tex").read_text(encoding="utf-8") == "important"
    assert not (tmp_path / "emb.npy").exists()


def test_a_corpus_inside_the_folder_of_a_runs_part_is_refused(tiny_bert: Path, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "notes.npy.partial"
    folder.mkdir()
    (folder / "n1.md").write_text("# Note\n\nGraph text.\n", encoding="utf-8")
    capsys.readouterr()
    assert embed(folder, tmp_path / "notes.npy", tiny_bert) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"graphdoc embed: error: --corpus {folder} is in {folder}, the folder graphdoc embed keeps a run's part in "
        "for --output: choose another --output")
    assert (folder / "n1.md").is_file()


def test_a_runs_part_with_its_temporaries_is_still_removed_when_the_run_changes(tiny_bert: Path, tmp_path: Path,
                                                                               capsys) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "a", "text": "One sentence here."}])
    folder = tmp_path / "emb.npy.partial"
    folder.mkdir()
    (folder / "rows-000000.npy").write_bytes(b"x")
    (folder / ".rows-000001.npy.abc123.tmp").write_bytes(b"x")  # a crash mid-write
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert) == 0
    assert not folder.exists() and np.load(tmp_path / "emb.npy").shape[0] == 1


def test_a_part_saved_before_the_identity_held_the_encoder_goes_on(tiny_bert: Path, tmp_path: Path, monkeypatch,
                                                                   capsys) -> None:
    corpus, state_file, state = stopped_after_a_save(tiny_bert, tmp_path, monkeypatch)
    assert "encoder" in state["run"]["model"]
    del state["run"]["model"]["encoder"]  # as graphdoc wrote it before
    goes_on_from(state, state_file, corpus, tiny_bert, tmp_path, monkeypatch, capsys)


def goes_on_from(state: dict, state_file: Path, corpus: Path, tiny_bert: Path, tmp_path: Path, monkeypatch,
                 capsys) -> None:
    """Write ``state`` as a stopped run's saved state, run embed again, and check it embeds only the rest."""
    state_file.write_text(json.dumps(state), encoding="utf-8")
    given = stop_after(monkeypatch, 100)
    capsys.readouterr()
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2", quiet=False) == 0
    assert f"going on after the {state['documents']} documents embedded before" in capsys.readouterr().err
    assert given == [f"doc{i}" for i in range(state["documents"], 9)]


def test_a_run_goes_on_only_in_the_arithmetic_it_was_started_in(tiny_bert: Path, tmp_path: Path, monkeypatch,
                                                                capsys) -> None:
    """A run stopped under --precision bf16 and run again in fp32 (or the other way) mixed rows computed two ways in
    one output."""
    from graphdoc import device as device_module

    monkeypatch.setattr(device_module, "cpu_supports_bf16", lambda: True)  # bf16 computes in bf16, on any CPU
    corpus, state_file, state = stopped_after_a_save(tiny_bert, tmp_path, monkeypatch, "--precision", "bf16")
    assert state["precision"] == "bf16"
    before, folder = state_file.read_bytes(), tmp_path / "emb.npy.partial"
    capsys.readouterr()
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2") == 1
    assert error_line(capsys) == (f"graphdoc embed: error: {folder} was started at bf16, and this run computes at "
                                  f"fp32: pass --precision bf16 to go on, or remove {folder} to start again at fp32")
    monkeypatch.setattr(device_module, "cpu_supports_bf16", lambda: False)  # asked for, but this CPU runs fp32
    device_module._warn_once.cache_clear()
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2", "--precision", "bf16") == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"graphdoc embed: error: {folder} was started at bf16, and this run computes at fp32 (--precision bf16 runs "
        f"fp32 on this device): go on where it computes in bf16, or remove {folder} to start again at fp32")
    assert state_file.read_bytes() == before
    monkeypatch.setattr(device_module, "cpu_supports_bf16", lambda: True)
    given = stop_after(monkeypatch, 100)
    assert embed(corpus, tmp_path / "emb.npy", tiny_bert, "--batch-size", "2", "--precision", "bf16") == 0
    assert given == [f"doc{i}" for i in range(state["documents"], 9)]


def test_a_part_saved_before_its_arithmetic_was_recorded_goes_on(tiny_bert: Path, tmp_path: Path, monkeypatch,
                                                                  capsys) -> None:
    from graphdoc import device as device_module

    monkeypatch.setattr(device_module, "cpu_supports_bf16", lambda: True)
    corpus, state_file, state = stopped_after_a_save(tiny_bert, tmp_path, monkeypatch, "--precision", "bf16")
    del state["precision"]  # as graphdoc wrote it before
    goes_on_from(state, state_file, corpus, tiny_bert, tmp_path, monkeypatch, capsys)
