"""Reading a corpus into an index by position: which documents a part reads, how far a run got, and
whether a corpus changed since (its files' state; for an interrupted run, its documents read again)."""

from __future__ import annotations

import hashlib
import itertools
import logging
import shlex
from pathlib import Path
from typing import Iterator

from graphdoc.corpus import Fields, MemoryCorpus, ReadStats, corpus_files, read_corpus
from graphdoc.errors import GraphDocError, InputError
from graphdoc.retrieval import docstore
from graphdoc.retrieval.manifest import Manifest, SourceProgress
from graphdoc.retrieval.shards import read_shard

logger = logging.getLogger(__name__)


class Cursor:
    """Reading a corpus: documents before ``start`` are already indexed; ``position`` counts those read so far
    (of every part; empty documents are not counted)."""

    def __init__(self, start: int = 0) -> None:
        self.start, self.position = start, 0


def open_corpus(corpus: str, stats: ReadStats | None = None, fields: Fields | None = None) -> Iterator:
    """The documents of ``corpus`` (read with ``fields``); a missing or empty corpus, or a broken first document,
    fails here."""
    stats = stats if stats is not None else ReadStats()
    documents = read_corpus(corpus, stats=stats, fields=fields)
    first = next(documents, None)
    if first is None:
        skipped = f" ({stats.empty_skipped} empty documents skipped)" if stats.empty_skipped else ""
        raise InputError(f"{corpus} holds no documents{skipped}")
    return itertools.chain([first], documents)


def part_documents(documents, cursor: Cursor, part_no: int, parts: int) -> Iterator:
    """The documents of part ``part_no`` read past ``cursor.start``; ``cursor.position`` counts all documents read."""
    for doc in documents:
        cursor.position += 1
        if cursor.position > cursor.start and (cursor.position - 1) % parts == part_no:
            yield doc


def check_read_part_unchanged(corpus: str, index_dir: Path, manifest: Manifest, source: SourceProgress,
                              part: tuple[int, int], on_duplicate: str) -> None:
    """A corpus that changed since an interrupted run began indexing it (a broken line fixed, say) resumes
    when the documents that run read are the ones it put in the index, id, title and text (or, under
    ``skip``, ids the index held before); a run resumes by position. Anything else is refused, since the
    index would mix two versions of the corpus. Only the documents read then are read again."""
    own = set(source.shards if source.shards is not None else manifest.shards)
    rows: dict[str, tuple[str, int]] = {}
    elsewhere: set[str] = set()
    for name in manifest.shards:
        ids = read_shard(index_dir / "shards" / name, ids_only=True)
        if name in own:
            rows.update((doc_id, (name, row)) for row, doc_id in enumerate(ids))
        else:
            elsewhere.update(ids)
    stores: dict[str, docstore.DocStore] = {}
    cursor = Cursor(0)
    try:
        read = itertools.islice(open_corpus(corpus, fields=source_fields(source)), source.documents_read)
        for doc in part_documents(read, cursor, *part):
            if doc.id not in rows:
                if on_duplicate == "skip" and doc.id in elsewhere:
                    continue  # skipped then as a duplicate: nothing of it was indexed
                raise _changed(corpus, index_dir, source, f"document {doc.id!r}, read before, is not in the index")
            shard, row = rows[doc.id]
            if shard not in stores:
                stores[shard] = docstore.DocStore(index_dir / "shards" / shard / "docs.jsonl")
            kept = stores[shard][row]
            if (kept["title"], kept["text"]) != (doc.title, doc.text):
                raise _changed(corpus, index_dir, source, f"document {doc.id!r} is not the one indexed")
    except InputError as exc:  # the part already read is what must still read
        raise _changed(corpus, index_dir, source, str(exc)) from None
    finally:
        for store in stores.values():
            store.close()
    if cursor.position < source.documents_read:
        raise _changed(corpus, index_dir, source, f"it now holds {cursor.position} documents")
    logger.warning("%s changed since an interrupted run began indexing it; its first %d documents are the ones "
                   "in the index: resuming after them", corpus, source.documents_read)


def source_fields(source: SourceProgress) -> Fields:
    """The record fields ``source`` is read with (an index built before they were recorded: the default keys)."""
    return Fields.from_dict(source.fields)


def _changed(corpus: str, index_dir: Path, source: SourceProgress, why: str) -> GraphDocError:
    return GraphDocError(f"{corpus} changed since an interrupted run began indexing it ({source.documents_read} of "
                         f"its documents are in) and not only past them: {why}. A run resumes by position: restore "
                         "the corpus as it was, index it into a new folder, or keep the documents in and read no "
                         f"more of it: {stop_hint(index_dir, source)}")


def stop_hint(index_dir: Path, source: SourceProgress) -> str:
    """The command (and function) that keeps what an interrupted run read of ``source`` and reads no more of it
    (:func:`graphdoc.retrieval.stopping.stop_reading`), for the errors of an index left part-way."""
    part = f" --shard {source.part}" if source.part != "1/1" else ""
    return (f"graphdoc index --index-dir {shlex.quote(str(index_dir))} --stop-reading {shlex.quote(source.corpus)}"
            f"{part} (stop_reading in Python)")


def corpus_state(corpus: str) -> list[int] | None:
    """``[files, bytes, latest modification ns, digest]`` of the files a local corpus is read from (see
    :func:`graphdoc.corpus.corpus_files`: a BEIR folder's queries and qrels are not), else ``None``; the digest
    (48 bits) is of every file's path in the corpus, size and modification time, so that a file renamed or moved
    (its name is its document id), or restored with an older time, changes the state too.

    Kept in the manifest when a corpus is indexed, to notice on a rerun that it changed without reading it
    (documents in memory, a :class:`~graphdoc.corpus.MemoryCorpus`, are named by their content: ``None``).
    """
    if isinstance(corpus, MemoryCorpus):
        return None
    root = Path(corpus)
    if not root.exists():
        return None
    files = corpus_files(corpus)
    stats = [p.stat() for p in files]
    digest = hashlib.blake2b(digest_size=6)
    for path, stat in zip(files, stats):
        name = path.relative_to(root).as_posix() if root.is_dir() else path.name
        digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return [len(files), sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0),
            int.from_bytes(digest.digest(), "big")]


def state_changed(saved: list[int] | None, corpus: str) -> bool:
    """Whether ``corpus`` is not as its ``saved`` :func:`corpus_state` says (a state saved by graphdoc before
    the digest was kept is compared on its three figures)."""
    return saved is not None and saved != (corpus_state(corpus) or [])[:len(saved)]


def report_complete(corpus: str, sources: list[SourceProgress]) -> None:
    """Say that ``corpus`` is in the index already (as ``sources``: one, or the parts of a split)."""
    parts = ", ".join(s.part for s in sources)
    stopped = [s for s in sources if s.stopped]
    if stopped:
        logger.warning("%s was stopped after %d documents read (graphdoc index --stop-reading): the index keeps them "
                       "and reads no more of it. To add documents, put them in another corpus and index that "
                       "(--on-duplicate skip leaves out those in), or build a new index", corpus,
                       max(s.documents_read for s in stopped))
    elif any(state_changed(s.state, corpus) for s in sources):
        logger.warning("%s changed since it was indexed; the index keeps the %d documents read from it then. To "
                       "add documents, put them in another file and index that; to pick up changes, build a new "
                       "index", corpus, max(s.documents_read for s in sources))
    else:
        logger.info("%s (part%s %s) is already in the index", corpus, "s" if len(sources) > 1 else "", parts)


def warn_partly_read(index_dir: Path, manifest: Manifest) -> None:
    """Warn of each corpus the index holds part-way (a run adding it was interrupted), and how to finish it or keep
    only what it read."""
    for source in manifest.sources:
        if not source.complete:
            logger.warning("%s part %s is only partly in the index (%d documents read): rerun its build to add the "
                           "rest, or keep only those: %s", source.corpus, source.part, source.documents_read,
                           stop_hint(index_dir, source))
