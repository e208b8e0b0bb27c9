"""``graphdoc embed``: one float32 row per document in a .npy file, ids in row order beside it.

A long run keeps what it has embedded in ``FILE.npy.partial/`` every few thousand documents; run the same
command again after a crash and it goes on from there (with the same model, corpus, field options, ``--truncate-dim``
and ``--normalize``; a run computing in another arithmetic than the saved part, ``--precision``, is refused).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np

from graphdoc.cli.common import (add_field_arguments, add_model_arguments, fields_from, load_model, logger,
                                 stdin_corpus)
from graphdoc.errors import GraphDocError
from graphdoc.fileio import NAME_MAX, atomic_write, check_output_file, file_lock, replacing
from graphdoc.progress import complete, logs_beside_bars, progress_bar


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("embed", help="embed every document of a corpus into a .npy file",
                            description=__doc__)
    parser.add_argument("--corpus", required=True, help="JSON lines (.jsonl or .json, plain or .gz/.bz2/.xz), "
                        "CSV/TSV with a header, BEIR folder, folder of .txt/.md/.markdown files, MediaWiki dump "
                        "(.xml[.bz2]), corpus name, or - for JSON lines piped in (read whole; the same lines piped "
                        "again go on from a stopped run)")
    parser.add_argument("--output", required=True, type=Path, metavar="FILE.npy")
    parser.add_argument("--normalize", action="store_true", help="L2-normalise the embeddings")
    parser.add_argument("--truncate-dim", type=int, metavar="N", help="keep the first N dimensions of each embedding "
                        "(a Matryoshka model's), before --normalize")
    add_field_arguments(parser)
    add_model_arguments(parser)
    parser.set_defaults(func=run)


def ids_path(output: Path) -> Path:
    """``emb.npy`` -> ``emb.ids.txt``."""
    return output.with_name(output.name[:-len(".npy")] + ".ids.txt")


#: documents embedded between two saves of a run's partial output: a crash loses at most these
SAVE_EVERY = 5_000
PARTIAL_FORMAT = "graphdoc.embed-partial"


def partial_path(output: Path) -> Path:
    """``emb.npy`` -> ``emb.npy.partial/``: what a run has embedded so far, kept until the output is written."""
    return output.with_name(output.name + ".partial")


class Partial:
    """The saved part of a run: chunks ``rows-N.npy`` and ``ids-N.txt``, and ``state.json`` naming the run (model
    identity, corpus and its state, ``--normalize``, ``--truncate-dim``), the arithmetic its rows were computed in
    (``precision``: ``fp32``, ``bf16``, ``fp16``) and how many chunks and documents are saved. A chunk is written
    before the state that counts it, so a crash between the two leaves a chunk no state counts."""

    def __init__(self, output: Path, run: dict, earlier: dict | None = None, encoder=None) -> None:
        """``earlier``: the same run as graphdoc named it before (its model by folder, not architecture), also
        gone on from. ``encoder``: the passage encoder, whose arithmetic a part it goes on from must have been
        computed in (a part saved before graphdoc recorded it goes on as before)."""
        self.folder, self.run = partial_path(output), run
        self.chunks, self.ids = 0, []
        self.arithmetic = None if encoder is None else encoder.arithmetic  # recorded with every save
        if not self.folder.exists():
            return
        state = self._state()
        try:
            if state is not None and state.get("run") in _accepted_runs(run, earlier):
                self.arithmetic = self._check_arithmetic(state.get("precision"), encoder)
                for chunk in range(state["chunks"]):
                    self.ids += (self.folder / f"ids-{chunk:06d}.txt").read_text(encoding="utf-8").splitlines()
                self.chunks = state["chunks"]
                logger.info("%s: going on after the %d documents embedded before", self.folder, len(self.ids))
                return
            why = ("what an embed of another model, corpus, --normalize, --truncate-dim or graphdoc chunker left"
                   if state is not None else "no state of a run (one stopped before its first save)")
        except (OSError, KeyError, TypeError, UnicodeDecodeError):
            why = "files that cannot be read"
        self.ids = []
        self.remove()  # before a chunk of this run is written: no state may ever count another run's chunks
        logger.warning("%s holds %s: starting again", self.folder, why)

    def _check_arithmetic(self, was: str | None, encoder) -> str | None:
        """``was``, the arithmetic the saved part was computed in, when this run computes in it too (``None``: not
        recorded); else one error line saying how to go on."""
        from graphdoc.device import arithmetic_refusal

        if was is None or encoder is None or was == self.arithmetic:
            return was
        raise GraphDocError(arithmetic_refusal(str(self.folder), was, self.arithmetic, encoder.config.precision,
                                               f"remove {self.folder} to start again at {self.arithmetic}"))

    def _state(self) -> dict | None:
        try:
            state = json.loads((self.folder / "state.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        return state if isinstance(state, dict) and state.get("format") == PARTIAL_FORMAT else None

    def save(self, ids: list[str], rows: list[np.ndarray]) -> None:
        """Add a chunk: these documents' ids and rows."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_write(self.folder / f"rows-{self.chunks:06d}.npy", "wb") as handle:
            np.save(handle, np.concatenate(rows).astype(np.float32, copy=False))
        with atomic_write(self.folder / f"ids-{self.chunks:06d}.txt", "w", encoding="utf-8") as handle:
            handle.write("".join(f"{i}\n" for i in ids))
        self.chunks += 1
        self.ids += ids
        with atomic_write(self.folder / "state.json", "w", encoding="utf-8") as handle:
            arithmetic = {"precision": self.arithmetic} if self.arithmetic else {}  # (not recorded: left so)
            json.dump({"format": PARTIAL_FORMAT, "run": self.run, "chunks": self.chunks,
                       "documents": len(self.ids), **arithmetic}, handle)

    def rows(self) -> list[np.ndarray]:
        return [np.load(self.folder / f"rows-{chunk:06d}.npy", allow_pickle=False) for chunk in range(self.chunks)]

    def remove(self) -> None:
        if self.folder.exists():
            check_partial_folder(self.folder)  # (a folder of the user's own with its name is refused, not removed)
            shutil.rmtree(self.folder)  # a failure is an error: this run's chunks must not join another's


#: the files a run's partial folder holds: its state, its chunks, and the temporaries written beside them
_PARTIAL_FILE = re.compile(r"state\.json|(rows|ids)-\d{6}\.(npy|txt)|\..+\.tmp")


def check_partial_folder(folder: Path) -> None:
    """Refuse, in one line, to remove ``folder`` unless it holds only what an embed run writes there (a folder of
    the user's own that happens to have its name is not embed's to delete)."""
    if not folder.is_dir() or folder.is_symlink():
        raise GraphDocError(f"{folder} is not the folder graphdoc embed keeps a run's part in: move it, or choose "
                            "another --output")
    others = sorted(entry.name for entry in folder.iterdir()
                    if not (_PARTIAL_FILE.fullmatch(entry.name) and entry.is_file() and not entry.is_symlink()))
    if others:
        raise GraphDocError(f"{folder} holds files graphdoc embed did not write ({', '.join(others[:3])}"
                            f"{', ...' if len(others) > 3 else ''}): it is not a run's part; move it, or choose "
                            "another --output")


def run(args: argparse.Namespace) -> int:
    from graphdoc.corpus import ReadStats, check_outside_corpus, read_corpus

    if not args.output.name.lower().endswith(".npy"):
        raise GraphDocError(f"--output must end in .npy; got {args.output}")
    if args.batch_size < 1:
        raise GraphDocError(f"--batch-size must be at least 1; got {args.batch_size}")
    check_output_file(args.output)
    check_output_file(ids_path(args.output), "the ids file")
    if len(os.fsencode(partial_path(args.output).name)) > NAME_MAX:
        raise GraphDocError(f"--output {args.output}: its name is too long for the folder a run keeps beside it "
                            f"(NAME.partial, {NAME_MAX} bytes at most): shorten it")
    check_outside_corpus(args.corpus, ids_path(args.output), "--output's ids file", "it")
    _check_corpus_outside_partial(args.corpus, partial_path(args.output))
    args.fields = fields_from(args)
    if args.corpus == "-":
        args.corpus = stdin_corpus("embed", args.fields)
    documents = read_corpus(args.corpus, stats=ReadStats(), fields=args.fields)  # a bad corpus fails here, at once
    with file_lock(args.output):  # one run at a time writes FILE.npy and FILE.npy.partial/ (checked before loading)
        return _embed(args, documents, load_model(args, passages=False))


def _check_corpus_outside_partial(corpus, folder: Path) -> None:
    """Refuse a corpus inside (or being) the folder a run keeps its part in: a run starting again removes it."""
    if not isinstance(corpus, (str, os.PathLike)) or not os.path.exists(corpus) or not folder.exists():
        return
    if Path(corpus).resolve().is_relative_to(folder.resolve()):
        raise GraphDocError(f"--corpus {corpus} is in {folder}, the folder graphdoc embed keeps a run's part in for "
                            "--output: choose another --output")


def _embed(args: argparse.Namespace, documents, model) -> int:
    from graphdoc.corpus import ReadStats, document_count, read_corpus
    from graphdoc.encode_output import check_truncate_dim, finish_embeddings

    check_truncate_dim(args.truncate_dim, model.dimension, "--truncate-dim")  # before a saved part is touched
    partial = Partial(args.output, *_run_identities(args, model), encoder=model.passage_encoder)
    done = partial.ids
    ids: list[str] = []  # this session's, since the last save
    rows: list[np.ndarray] = []

    def tracked():
        for position, doc in enumerate(documents):
            if position < len(done):  # embedded before a crash: passed over (the same document, or start again)
                if doc.id != done[position]:
                    raise _Restart(position, doc.id, done[position])
                continue
            ids.append(doc.id)
            yield doc

    try:
        total = None if args.quiet else document_count(args.corpus)  # time left, where it is cheap to tell
        # log records on lines of their own, not glued onto the bar on a terminal
        # (no delay: a record written while a delayed bar hid would draw it, and its close then leave it unended)
        with logs_beside_bars(not args.quiet), progress_bar(desc="Embedding", unit="doc", disable=args.quiet,
                                                            initial=len(done), total=total) as bar:
            for out in model.iter_forward(tracked(), batch_size=args.batch_size, document_only=True):
                rows.append(finish_embeddings([out.document_embeddings], model.dimension, model.device, False,
                                              args.normalize, True, args.truncate_dim))  # as encode returns them
                bar.update(len(out.documents))
                if len(ids) >= SAVE_EVERY:
                    saved = sum(len(r) for r in rows)
                    partial.save(ids[:saved], rows)
                    del ids[:saved]
                    rows.clear()
            complete(bar)  # its total counted blank documents the reader skipped
    except _Restart as restart:
        logger.warning("%s: document %d is %r, not %r as when %s was saved: the corpus changed; starting again",
                       args.corpus, restart.position + 1, restart.found, restart.saved, partial.folder)
        partial.remove()
        return _embed(args, read_corpus(args.corpus, stats=ReadStats(), fields=args.fields), model)
    ids = done + ids
    if not ids:
        raise GraphDocError(f"no documents to embed in {args.corpus}")
    matrix = np.concatenate(partial.rows() + rows).astype(np.float32, copy=False)
    note = replacing(args.output)
    # both written out before either replaces its file (the ids flushed and synced first: a full disk shows there,
    # not after the matrix is in); then the matrix goes in, then its ids
    with atomic_write(ids_path(args.output), "w", encoding="utf-8") as id_file:
        id_file.write("".join(f"{i}\n" for i in ids))
        id_file.flush()
        os.fsync(id_file.fileno())
        with atomic_write(args.output, "wb") as matrix_file:
            np.save(matrix_file, matrix)
    try:
        partial.remove()
    except OSError as exc:  # the output is written: what is left over is only in the way of the next run
        logger.warning("could not remove %s, no longer needed (%s)", partial.folder, exc)
    model.chunker.warn_cut()
    logger.info("wrote %d x %d embeddings to %s%s and ids to %s", *matrix.shape, args.output, note,
                ids_path(args.output))
    return 0


def _accepted_runs(run: dict, earlier: dict | None) -> list[dict]:
    """The names of this run a saved part may carry: as now, as graphdoc named it before (``earlier``), and both
    without the model's ``encoder`` entry (a part saved before the identity held it: the architecture
    fingerprint pins the encoder there)."""
    names = [run] + ([earlier] if earlier is not None else [])
    return names + [{**name, "model": {k: v for k, v in name["model"].items() if k != "encoder"}} for name in names]


class _Restart(Exception):
    """The corpus is not what the saved part of the run read: the run starts again."""

    def __init__(self, position: int, found: str, saved: str) -> None:
        super().__init__(position, found, saved)
        self.position, self.found, self.saved = position, found, saved


def _run_identities(args: argparse.Namespace, model) -> tuple[dict, dict]:
    """What decides the rows of a run, as JSON values: the model's identity, the corpus and its state, --normalize,
    the corpus fields named, --truncate-dim;
    and the same as an earlier graphdoc wrote it (the model by its folder and weights), whose saved part goes on."""
    from graphdoc.corpus import source_key
    from graphdoc.fingerprint import architecture_fingerprint
    from graphdoc.retrieval.manifest import model_identity
    from graphdoc.retrieval.progress import corpus_state

    recorded = model_identity(model)
    # the model by what computes its vectors, not where it was read from: a folder moved or copied goes on
    identity = {key: value for key, value in recorded.items() if key not in ("path", "name")}
    identity["architecture"] = architecture_fingerprint(model.passage_encoder.model.config)
    rest = {"corpus": source_key(args.corpus), "corpus_state": corpus_state(args.corpus),
            "normalize": bool(args.normalize)}
    fields = getattr(args, "fields", None)
    if fields is not None and not fields.is_default:  # (left out otherwise: an earlier run's part goes on)
        rest["fields"] = fields.to_dict()
    if getattr(args, "truncate_dim", None) is not None:  # (left out otherwise, as fields)
        rest["truncate_dim"] = args.truncate_dim
    return json.loads(json.dumps({"model": identity, **rest})), json.loads(json.dumps({"model": recorded, **rest}))
