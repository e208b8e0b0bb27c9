"""A pretraining run's output folder, the corpora it reads and what a resume must match, checked before a model loads.

A run writes only into a folder that is new, empty or its own (``--resume``), with each of its entries of the
right kind; every corpus is opened first, so that bad input stops the run before anything is written; and an
error that leaves no checkpoint removes what the run wrote into a folder it made or found empty.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from pathlib import Path

from graphdoc.backbones import FLAT
from graphdoc.corpus import Fields, ReadStats, check_outside_corpus, corpus_files, source_key
from graphdoc.errors import GraphDocError
from graphdoc.fileio import LOCK_NAME, check_output_folder
from graphdoc.serialization import is_graphdoc_model, saved_backbone
from graphdoc.training import checkpoint as ckpt
from graphdoc.training import data
from graphdoc.training.cache import CACHE_NAME, cache_folder, discard_empty_cache
from graphdoc.training.config import PretrainSetup
from graphdoc.training.distributed import DistContext
from graphdoc.training.metrics import LOG_NAME

logger = logging.getLogger(__name__)

CONFIG_NAME = "pretrain_config.json"
SUMMARY_NAME = "pretrain.json"
#: settings that may change on resume: they do not change what is learned
OPERATIONAL = ("checkpoint_every", "keep_checkpoints", "log_every", "tensorboard", "cache_dir", "max_seconds",
               "prepared_cache_mb")


def corpus_identity(sources: list[str]) -> list[list]:
    """``[name, bytes, content digest]`` of every source (a named corpus: ``[name, None, None]``); a resumed run
    must read the same (a file edited in place to the same size is another corpus too)."""
    out = []
    for source in sources:
        path = Path(source)
        if not path.exists():
            out.append([source, None, None])
            continue
        files = corpus_files(path)  # a BEIR folder's queries and qrels are not read, so not counted
        out.append([path.name, sum(f.stat().st_size for f in files), _content_digest(files)])
    return out


@dataclasses.dataclass
class RecordedRun:
    """What a pretraining run recorded, the defaults of ``--resume``: the settings (``None``: no readable
    ``pretrain_config.json``), the corpus (``None``: a checkpoint from before sources were kept), the start model's
    name or path and the precision given (``None``: none)."""

    setup: PretrainSetup | None
    sources: list[str] | None
    model: str | None
    precision: str | None


def recorded_run(output: Path) -> RecordedRun | None:
    """What the pretraining run in ``output`` recorded in its latest checkpoint and ``pretrain_config.json``;
    ``None`` without a checkpoint (nothing to resume) or for a checkpoint of another kind of run (refused later,
    by :meth:`RunFolder.check`). The setup's ``pretrain`` section is the latest checkpoint's: settings that may
    change on resume (``max_seconds``, ``cache_dir``, ...) are those the run last went on with."""
    found = ckpt.list_checkpoints(output) if output.is_dir() else []
    if not found:
        return None
    state = ckpt.read_state(found[-1])
    if "pretrain" not in state:
        return None
    model = (state.get("start_model") or {}).get("name")
    return RecordedRun(_recorded_setup(output, state, model), state.get("sources"), model, state.get("precision"))


def _recorded_setup(output: Path, state: dict, model: str | None) -> PretrainSetup | None:
    try:
        data = json.loads((output / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    data = {**data, "pretrain": state["pretrain"], "backbone": state.get("backbone", data.get("backbone", "graph"))}
    if saved_backbone(model) is not None:  # a saved model brings its own settings (a config's are warned unused)
        data.pop("model", None)
    return PretrainSetup.from_dict(data)


def _content_digest(files: list[Path]) -> str:
    """A 128-bit digest of the files' bytes, in order (about 2 s a gigabyte on one core; pretraining reads them
    anyway)."""
    digest = hashlib.blake2b(digest_size=16)
    for file in files:
        with open(file, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def check_resumable(state: dict, setup: PretrainSetup, world_size: int, corpus: list[list]) -> None:
    """Refuse to resume from a checkpoint's ``state`` with another backbone, number of processes, setting that
    changes what is learned, or corpus (:func:`corpus_identity`)."""
    if state.get("backbone", "graph") != setup.backbone:
        raise GraphDocError(f"cannot resume a {state.get('backbone', 'graph')} run as a {setup.backbone} one")
    if state["world_size"] != world_size:
        raise GraphDocError(f"the checkpoint was written by {state['world_size']} processes, not {world_size}: "
                            "resume with the same number")
    saved, now = state["pretrain"], dataclasses.asdict(setup.pretrain)
    for key in now:
        if key not in OPERATIONAL and saved.get(key) != now[key]:
            raise GraphDocError(f"cannot resume with pretrain.{key}={now[key]!r}: the run was started "
                                f"with {saved.get(key)!r}")
    read = state.get("corpus", corpus)
    if len(read) != len(corpus) or any(a[:2] != b[:2] for a, b in zip(read, corpus)):
        raise GraphDocError(f"cannot resume over a different corpus: the run read {describe(read)}, "
                            f"now {describe(corpus)}")
    edited = [b[0] for a, b in zip(read, corpus) if len(a) > 2 and a[2] != b[2]]  # (older checkpoints: no digest)
    if edited:
        raise GraphDocError(f"cannot resume over a different corpus: {edited[0]} was edited since the run read it "
                            "(the same size, other content)")


def describe(identity: list[list]) -> str:
    return ", ".join(name if size is None else f"{name} ({size:,} bytes)" for name, size, *_ in identity)


class RunFolder:
    """``output`` and ``sources`` of one run (see the module's docstring)."""

    def __init__(self, setup: PretrainSetup, sources: list[str], output: Path, ctx: DistContext,
                 fields: Fields | None = None) -> None:
        self.setup, self.cfg, self.sources, self.output, self.ctx = setup, setup.pretrain, sources, output, ctx
        #: the record fields the sources are read with: those given, else (resuming) those the run recorded
        self.fields = fields
        self.all_ours, self.made_cache_dir = False, False  # see _check_output, discard_new

    def check(self, resume: bool) -> list[Path]:
        """Check the sources and the folder and open every corpus; returns the checkpoints to resume from."""
        self._check_sources()
        found = self._check_output(resume)
        self.fields = self._resolved_fields(found)
        self._open_sources()
        return found

    def _resolved_fields(self, found: list[Path]) -> Fields:
        """The fields a resumed run recorded (an older one: the default keys), which those given must match; those
        given (or the default keys) for a new run."""
        given = self.fields
        if not found:
            return given or Fields()
        recorded = Fields.from_dict(ckpt.read_state(found[-1]).get("fields"))
        if given is not None and given != recorded:
            raise GraphDocError(f"cannot resume with {given.describe()}: the run read its corpus with "
                                f"{recorded.describe()} (leave the field options out to go on with them)")
        return recorded

    def _check_sources(self) -> None:
        """Each source once; the run's folders (output, passage cache) outside every corpus folder."""
        seen: set[str] = set()
        for source in self.sources:
            key = source_key(source)
            if key in seen:
                raise GraphDocError(f"corpus {source} is given twice: its documents would be read twice an epoch")
            seen.add(key)
            for flag, folder in (("--output", self.output), ("--cache-dir", self.cfg.cache_dir)):
                check_outside_corpus(source, folder, flag, "the run's files")

    def _check_output(self, resume: bool) -> list[Path]:
        """Before a model loads or a file is written, refuse an ``output`` that is neither new, empty nor a
        pretraining run, an entry of the wrong kind in it, a ``cache_dir`` that cannot be a folder, and a run met
        without ``resume`` (or a finished one with no checkpoint); returns the checkpoints to resume from."""
        out = self.output
        if out.exists() and not out.is_dir():
            raise GraphDocError(f"--output {out} exists and is not a folder")
        check_output_folder(out, "--output")
        frozen = self.setup.backbone != FLAT and self.cfg.frozen_encoder  # the passage cache is used
        slots = {CONFIG_NAME: False, SUMMARY_NAME: False, LOG_NAME: False, ckpt.MODEL_DIR: True,
                 ckpt.CHECKPOINTS_DIR: True, **({CACHE_NAME: True} if frozen and not self.cfg.cache_dir else {})}
        ckpt.check_slots(out, slots)
        self._check_cache_dir(frozen)
        found = ckpt.list_checkpoints(out)
        if found and "pretrain" not in ckpt.read_state(found[-1]):
            raise GraphDocError(f"{out} holds a fine-tuning run, not a pretraining run: choose another --output")
        finished = (out / SUMMARY_NAME).is_file() or is_graphdoc_model(out / ckpt.MODEL_DIR)
        held = bool(found) or finished or (out / CONFIG_NAME).is_file()
        # (the writer's lock; a passage cache that a run stopped before its first checkpoint left for the next)
        if not held and out.is_dir() and any(p.name != LOCK_NAME and not (p.name == CACHE_NAME and p.is_dir())
                                             for p in out.iterdir()):
            raise GraphDocError(f"--output {out} holds other files and no pretraining run: choose a new or empty "
                                "folder")
        if held and not resume:
            raise GraphDocError(f"{out} already holds a training run; pass --resume to continue it "
                                "or choose another --output")
        if resume and not found and finished:
            raise GraphDocError(f"{out} holds a finished run with no checkpoint to continue from (it ended before "
                                "its first one); choose another --output")
        if resume and not found:
            logger.warning("nothing to resume in %s: starting from scratch", out)
        self.all_ours = not held  # every file in it this run's
        return found

    def _check_cache_dir(self, frozen: bool) -> None:
        cache_dir = self.cfg.cache_dir
        if cache_dir is not None and not frozen:
            logger.warning("ignoring pretrain.cache_dir (--cache-dir) %s: only a graph model with a frozen encoder "
                           "caches passage vectors", cache_dir)
        if cache_dir is None or not frozen:
            return
        check_output_folder(Path(cache_dir), "--cache-dir")
        inside = Path(cache_dir).resolve()
        for slot in (ckpt.MODEL_DIR, ckpt.CHECKPOINTS_DIR):  # (replaced by the run: the cache with them)
            if inside.is_relative_to((self.output / slot).resolve()):
                raise GraphDocError(f"--cache-dir {cache_dir} is inside {self.output / slot}, which the run writes "
                                    f"and replaces: put the passage cache elsewhere (by default it is "
                                    f"{self.output / CACHE_NAME})")
        self.made_cache_dir = not Path(cache_dir).exists()

    def discard_new(self, steps: int = 0) -> None:
        """After an error that left no checkpoint, remove what this run wrote into a folder that was new or empty
        (and a ``cache_dir`` it made): an error found late leaves nothing behind, and the same command runs again
        once the input is fixed. A folder holding a checkpoint, or a run from before, is kept. ``steps``: those
        taken, whose log goes too (said in a warning)."""
        if not self.ctx.is_main or not self.all_ours or not self.output.is_dir() \
                or ckpt.list_checkpoints(self.output):
            return
        cache = self._cache_with_vectors()
        if steps or cache is not None:
            stays = "" if cache is None else f"; the passage vectors it encoded stay in {cache} for the next run"
            logger.warning("removing %s: the run stopped at step %d, before its first checkpoint, so it cannot be "
                           "resumed%s", self.output, steps, stays)
        for entry in self.output.iterdir():
            if entry.name == LOCK_NAME or entry == cache:  # the lock: its release removes it (and a folder it made)
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        if self.made_cache_dir:
            discard_empty_cache(self.cfg.cache_dir)  # its folders without vectors: not what another run wrote

    def _cache_with_vectors(self) -> Path | None:
        """The run's passage cache folder when it holds vectors (hours of encoding on a large corpus: an error or a
        diverged step does not make them wrong), else ``None``."""
        folder = cache_folder(self.cfg.cache_dir, self.output)
        if folder.is_dir() and not folder.is_symlink() and any(folder.rglob("*.npy")):
            return folder
        return None

    def _open_sources(self) -> None:
        """Read the first document of every corpus, so that a missing file, an unknown name, a folder of other
        files, broken JSON, a missing package or an unreachable hub stops the run before a model loads or a
        file is written."""
        named = [s for s in self.sources if data.is_named_corpus(s)]
        if named and self.cfg.max_steps is None:
            raise GraphDocError(f"corpus {named[0]!r} streams with no known length: set pretrain.max_steps "
                                "(--max-steps)")
        for source in self.sources:
            next(data.open_corpus([source], ReadStats(), self.fields), None)
