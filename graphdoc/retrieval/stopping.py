"""Stop reading a corpus that an interrupted build left part-way: keep its documents read, read no more of it.

A build resumes by position, so a corpus that changed since (or is gone, or was a list of documents in memory, now
lost) cannot be finished. :func:`stop_reading` records it as stopped (``stopped`` and ``complete`` in its progress):
the shards it filled are kept and ``final/`` is built from them, so that the index is searched and its documents
can be deleted, and a later run over the same corpus reads none of it (a warning says why). It needs the index only,
not the corpus.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from graphdoc.corpus import source_key
from graphdoc.errors import GraphDocError
from graphdoc.retrieval.dense import new_faiss_index, training_minimum
from graphdoc.retrieval.finalize import finalize, maintaining
from graphdoc.retrieval.index_setup import change_setting, parse_part, remove_orphans
from graphdoc.retrieval.manifest import Manifest, SourceProgress, normal_part
from graphdoc.retrieval.progress import warn_partly_read
from graphdoc.retrieval.shards import indexed_ids

logger = logging.getLogger(__name__)


def stop_reading(index_dir: str | os.PathLike, corpus: str | os.PathLike, part: str | None = None, *,
                 faiss_factory: str | None = None, show_progress_bar: bool = False) -> Manifest:
    """Keep the documents of ``corpus`` that an interrupted build read into ``index_dir``, read no more of it, and
    finalise the index (searchable, its documents deletable); returns its manifest.

    ``corpus`` is named as the index names it (``graphdoc info`` lists the names): its path (as given to the build,
    or resolved), a dataset name, or ``memory:sha256:...`` for documents in memory; it need not exist any more.
    ``part`` (``"I/N"``) stops that ``--shard`` part only; ``None`` every part of it the index holds unfinished. A
    corpus read to its end is refused (there is nothing to stop); one stopped already is left as it is (an index
    whose finalising was interrupted is finalised). ``faiss_factory`` replaces the index's FAISS factory, as an
    index never finalised allows, where that one needs more documents than were read. A second process writing the
    folder is refused, as for :func:`~graphdoc.retrieval.builder.build_index`.
    """
    if not isinstance(corpus, (str, os.PathLike)) or not str(corpus):
        raise GraphDocError(f"corpus must name a corpus of the index, as graphdoc info lists it (a path, a dataset "
                            f"name or memory:sha256:...); got {corpus!r}")
    corpus, index_dir = str(corpus), Path(index_dir)
    if part is not None:
        parse_part(part)
        part = normal_part(part)
    with maintaining(index_dir) as manifest:
        remove_orphans(index_dir, manifest)
        sources = _to_stop(index_dir, manifest, corpus, part)
        if faiss_factory is not None and faiss_factory != manifest.faiss_factory:
            new_faiss_index(faiss_factory, manifest.dimension)  # a bad string: one line, nothing changed
            change_setting(index_dir, manifest, "faiss_factory", faiss_factory, announce=True)
        if sources or not manifest.finalized:
            _check_trainable(index_dir, manifest)
        if sources:
            for source in sources:
                source.complete = source.stopped = True
            manifest.finalized = False
            manifest.save(index_dir)
            for source in sources:
                logger.info("%s: %s stopped after %s read; the index keeps them and reads no more of it", index_dir,
                            _named(source), _documents(source.part_documents() or 0))
        else:
            logger.info("%s: %s was stopped already", index_dir, corpus)
        if not manifest.finalized:
            finalize(index_dir, manifest, show_progress_bar=show_progress_bar)
        warn_partly_read(index_dir, manifest)
    return manifest


def _to_stop(index_dir: Path, manifest: Manifest, corpus: str, part: str | None) -> list[SourceProgress]:
    """The unfinished sources of ``corpus`` (its ``part``, when given); ``[]`` when it is stopped already. A name the
    index does not hold, a part of it the index does not hold, and a corpus read to its end are refused."""
    names = {corpus, source_key(corpus)}
    try:
        names.add(str(Path(corpus).resolve()))  # a path relative to this folder, or a file that is gone
    except (OSError, RuntimeError, ValueError):
        pass
    found = [s for s in manifest.sources if s.corpus in names]
    if not found:
        held = "; ".join(f"{_named(s)} ({_progress(s)})" for s in manifest.sources) or "none"
        raise GraphDocError(f"{index_dir} holds no corpus named {corpus}; its corpora: {held}")
    if part is not None:
        parts = [s for s in found if s.part == part]
        if not parts:
            raise GraphDocError(f"{index_dir} holds {found[0].corpus} as part {', '.join(s.part for s in found)}, not "
                                f"part {part}: give --shard {found[0].part}, or leave --shard out")
        found = parts
    if any(not s.complete for s in found):
        return [s for s in found if not s.complete]
    if any(s.stopped for s in found):
        return []
    raise GraphDocError(f"{_named(found[0])} is read to its end in {index_dir} ({_progress(found[0])}): there is "
                        "nothing to stop")


def _check_trainable(index_dir: Path, manifest: Manifest) -> None:
    """Refuse, before anything is changed, to stop where ``final/`` could not be built from the documents read:
    fewer than the FAISS factory is trained on."""
    need = training_minimum(manifest.faiss_factory, manifest.dimension)
    have = len(indexed_ids(index_dir, manifest))
    if have < need:
        raise GraphDocError(f"FAISS index {manifest.faiss_factory!r} needs at least {need} documents to be built; "
                            f"{index_dir} holds {have}: pass a smaller one too (--faiss-factory, faiss_factory; Flat "
                            "needs no training; nothing was changed)")


def _named(source: SourceProgress) -> str:
    return source.corpus if source.part == "1/1" else f"{source.corpus} part {source.part}"


def _progress(source: SourceProgress) -> str:
    """``200 documents read, stopped``, as ``graphdoc info`` says it."""
    done = "stopped" if source.stopped else "complete" if source.complete else "not finished"
    return f"{_documents(source.part_documents() or 0)} read, {done}"


def _documents(n: int) -> str:
    return f"{n} document{'' if n == 1 else 's'}"
