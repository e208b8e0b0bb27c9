"""Named corpora fetched by ``ir_datasets`` or Hugging Face ``datasets`` (optional, imported lazily).

A name may carry a split after a slash: ``robust04/fold1``, ``wikir/en78k/test``, ``msmarco-document/dev``.
The split picks the queries and judgements; the documents are the same for every split.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from graphdoc.documents import Document
from graphdoc.errors import GraphDocError, InputError

logger = logging.getLogger(__name__)

T = TypeVar("T")
INSTALL_HINT = "pip install 'graphdoc[datasets]'"
LOCAL_HINT = ("to use local files instead, export it to JSON lines ({\"_id\", \"title\", \"text\"} per line) "
              "or a BEIR folder and pass that path")
#: ir_datasets document fields that are not worth keeping in ``Document.metadata``.
_DOC_FIELDS_DROPPED = ("doc_id", "title", "text", "body", "marked_up_doc")
#: The logger ir_datasets writes its notices to (with its own handler): silenced while graphdoc reads.
IRDS_LOGGERS = ("ir_datasets",)
#: What Hugging Face ``datasets`` and the hub client log while they fetch (retries: 11 lines of them offline).
HF_LOGGERS = ("datasets", "huggingface_hub")
#: How long a failure's reason may be in an error message.
MAX_REASON = 160


def import_package(package: str, corpus: str) -> ModuleType:
    """Import an optional package, or raise an :class:`InputError` saying how to install it."""
    try:
        return importlib.import_module(package)
    except ImportError:
        raise InputError(f"named corpus {corpus!r} needs {package}: {INSTALL_HINT}") from None


def guarded(corpus: str, produce: Callable[[], Iterable[T]], quiet: Sequence[str] = (),
            explain: Callable[[str], str] | None = None) -> Iterator[T]:
    """Iterate ``produce()``, turning any failure to fetch (e.g. offline) into one :class:`InputError` line.

    The loggers named in ``quiet`` are silenced while ``produce`` runs (see :func:`silenced`); ``explain``
    turns the failure's reason into the message (default: the corpus could not be downloaded).
    """
    try:
        yield from quietly(produce, quiet)
    except GraphDocError:
        raise
    except Exception as err:  # downloads fail in many ways: network, HTTP, checksum, disk
        reason = short_reason(err)
        if explain:
            message = explain(reason)
        else:
            message = f"could not be {'downloaded' if is_download_error(err) else 'read'} ({reason})"
        raise InputError(f"named corpus {corpus!r} {message}; {LOCAL_HINT}") from err


#: packages (and modules) whose errors are a failed download
_NETWORK_PACKAGES = ("requests", "urllib3", "httpx", "httpcore", "huggingface_hub", "aiohttp",
                     "fsspec.implementations.http")
#: what an error's message says when the network failed (as an ``OSError`` from a resolver or socket says it), or
#: a download did (ir_datasets checks what it fetched)
_NETWORK_WORDS = re.compile(r"download|checksum|md5|sha256|name or service not known|name resolution|"
                            r"network is unreachable|connection (refused|reset|aborted)|timed out|no route to host|"
                            r"proxy", re.IGNORECASE)
#: a local file's errors: their message names a path, which may hold any word ("Downloads")
_LOCAL_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def is_download_error(err: BaseException) -> bool:
    """Whether ``err`` (or an error behind it) is a failed download: a network error, one of a network package,
    or ir_datasets' "All download sources failed"; not a local file that cannot be read or parsed."""
    import socket
    import urllib.error

    for error in _chain(err):
        module = type(error).__module__ or ""
        if isinstance(error, (ConnectionError, TimeoutError, socket.gaierror, urllib.error.URLError)) \
                or any(module == name or module.startswith(f"{name}.") for name in _NETWORK_PACKAGES) \
                or (not isinstance(error, _LOCAL_ERRORS) and _NETWORK_WORDS.search(str(error))):
            return True
    return False


def _chain(err: BaseException | None) -> list[BaseException]:
    """``err`` and the errors behind it (causes, and contexts not suppressed), outermost first."""
    chain: list[BaseException] = []
    while err is not None and err not in chain and len(chain) < 20:
        chain.append(err)
        err = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
    return chain


def quietly(produce: Callable[[], Iterable[T]], names: Sequence[str]) -> Iterator[T]:
    """The items of ``produce()``, each one fetched with the loggers ``names`` silenced."""
    with silenced(names):
        items = iter(produce())
    done = object()
    while True:
        with silenced(names):
            item = next(items, done)
        if item is done:
            return
        yield item


@contextmanager
def silenced(names: Sequence[str]) -> Iterator[None]:
    """Disable the loggers ``names``, and those under them, for the block, unless graphdoc logs at DEBUG
    (``graphdoc -v``).

    ir_datasets prints its notices (download retries, where to put files) through a handler of its own, at
    any graphdoc verbosity, ahead of graphdoc's one-line error that says what went wrong.
    """
    if not names or logger.isEnabledFor(logging.DEBUG):
        yield
        return
    loggers = _with_children(tuple(names))
    before = [log.disabled for log in loggers]
    for log in loggers:
        log.disabled = True
    try:
        yield
    finally:
        for log, was in zip(loggers, before):
            log.disabled = was


_children: dict[tuple[str, ...], tuple[int, list[logging.Logger]]] = {}


def _with_children(names: tuple[str, ...]) -> list[logging.Logger]:
    """The loggers ``names`` and every logger under them that exists (a disabled logger does not silence its
    children, and a package's modules log through their own: ``huggingface_hub.utils._http``), looked up again
    only when loggers were added (``silenced`` runs once a document of a streamed corpus)."""
    count = len(logging.root.manager.loggerDict)
    found = _children.get(names)
    if found is None or found[0] != count:
        under = [n for n in list(logging.root.manager.loggerDict) if n.startswith(tuple(f"{name}." for name in names))]
        found = _children[names] = (count, [logging.getLogger(name) for name in (*names, *under)])
    return found[1]


def short_reason(err: BaseException, limit: int = MAX_REASON) -> str:
    """Why ``err`` happened, in one short line: the innermost cause's first line, widened to an enclosing
    message that contains it while that fits in ``limit`` (a host name, say), and cut at a word."""
    lines = [_first_line(e) for e in _chain(err)]
    reason = lines[-1]
    for outer in reversed(lines[:-1]):
        if reason not in outer or len(outer) > limit:
            break
        reason = outer
    return cut_at_word(reason, limit)


def _first_line(err: BaseException) -> str:
    """The first line of the message; one word alone (a path, a key) is named by the exception's type. An error
    raised with a message and a list of the errors behind it (ir_datasets' ``RuntimeError('All download sources
    failed', [(source, error), ...])``) is its message and the last of those, not the tuple's repr."""
    if len(err.args) > 1 and isinstance(err.args[0], str):
        behind = [e for arg in err.args[1:] for item in (arg if isinstance(arg, (list, tuple)) else (arg,))
                  for e in (item if isinstance(item, tuple) else (item,)) if isinstance(e, BaseException)]
        if behind:
            return f"{err.args[0]}: {_first_line(behind[-1])}"
    lines = str(err).strip().splitlines()
    if not lines:
        return type(err).__name__
    return lines[0].strip() if len(lines[0].split()) > 1 else f"{type(err).__name__}: {lines[0].strip()}"


def cut_at_word(text: str, limit: int) -> str:
    """``text``, cut before ``limit`` characters at a space (at ``limit`` if it has none late enough), with '...'."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 4]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:(") + " ..."


def irds_document(doc: Any) -> Document:
    """An ``ir_datasets`` document namedtuple (GenericDoc, TrecDoc, MsMarcoDocument, ...) as a Document."""
    fields = doc._asdict()
    text = next((fields[k] for k in ("text", "body") if k in fields), None)
    if text is None:
        text = doc.default_text() if hasattr(doc, "default_text") else ""
    extra = {k: v for k, v in fields.items() if k not in _DOC_FIELDS_DROPPED and isinstance(v, (str, int, float))}
    return Document(id=str(doc.doc_id), text=text or "", title=fields.get("title") or "", metadata=extra)


def irds_query(query: Any) -> tuple[str, str]:
    """An ``ir_datasets`` query (GenericQuery, or TrecQuery whose title is the query) as ``(id, text)``."""
    text = getattr(query, "text", None) or getattr(query, "title", None) or ""
    return str(query.query_id), " ".join(str(text).split())


@dataclass(frozen=True)
class IrDatasetsCorpus:
    """A corpus from ``ir_datasets``: one dataset id for the documents, one per split for queries/qrels."""

    name: str
    docs_id: str
    split_ids: dict[str, str]
    default_split: str
    #: Documents ir_datasets does not download but reads from a folder of its home: ``(what they are,
    #: folder under the home, where to learn how to get them)``.
    local_docs: tuple[str, str, str] | None = None
    package: str = field(default="ir_datasets", init=False)

    def _load(self, dataset_id: str) -> Any:
        return import_package(self.package, self.name).load(dataset_id)

    def docs(self) -> Iterator[Document]:
        """The documents, converted as they stream in."""
        import_package(self.package, self.name)
        return guarded(self.name, lambda: map(irds_document, self._load(self.docs_id).docs_iter()), IRDS_LOGGERS,
                       self._explain_local_docs if self.local_docs else None)

    def _explain_local_docs(self, reason: str) -> str:
        what, folder, how = self.local_docs
        where = irds_home() / folder
        if where.is_dir() and any(where.iterdir()):  # they are there: one of them is what failed
            return f"could not be read from {where} ({reason})"
        return f"needs {what}, uncompressed at {where} ({reason}); to get them see {how}"

    def queries(self, split: str | None) -> Iterator[tuple[str, str]]:
        """The queries of ``split`` (the default split when ``None``)."""
        dataset_id = self.split_ids[split or self.default_split]
        import_package(self.package, self.name)
        return guarded(self.name, lambda: map(irds_query, self._load(dataset_id).queries_iter()), IRDS_LOGGERS)

    def qrels(self, split: str | None) -> dict[str, dict[str, int]]:
        """The judgements of ``split`` as ``{query id: {doc id: relevance}}``."""
        dataset_id = self.split_ids[split or self.default_split]
        import_package(self.package, self.name)
        qrels: dict[str, dict[str, int]] = {}
        for qrel in guarded(self.name, lambda: self._load(dataset_id).qrels_iter(), IRDS_LOGGERS):
            qrels.setdefault(str(qrel.query_id), {})[str(qrel.doc_id)] = int(qrel.relevance)
        return qrels


#: the branch where the Hugging Face hub keeps a dataset converted to Parquet (for a repository that still holds a
#: loading script, which ``datasets`` 4 and later refuse to run)
PARQUET_EXPORT = "refs/convert/parquet"


@dataclass(frozen=True)
class HuggingFaceCorpus:
    """A documents-only corpus streamed with Hugging Face ``datasets``; ids are running indices."""

    name: str
    hub_id: str
    text_field: str = "text"
    package: str = field(default="datasets", init=False)
    split_ids: dict[str, str] = field(default_factory=dict, init=False)

    def docs(self) -> Iterator[Document]:
        """The documents of the ``train`` split, streamed."""
        datasets = import_package(self.package, self.name)

        def produce() -> Iterator[Document]:
            try:
                stream = datasets.load_dataset(self.hub_id, split="train", streaming=True)
            except RuntimeError as exc:  # datasets >= 4 runs no loading script: read the hub's Parquet export
                if "scripts are no longer supported" not in str(exc):
                    raise
                stream = datasets.load_dataset(self.hub_id, split="train", streaming=True,
                                               revision=PARQUET_EXPORT)
            for index, record in enumerate(stream):
                yield Document(id=str(index), text=record.get(self.text_field) or "")

        return guarded(self.name, produce, HF_LOGGERS)

    def queries(self, split: str | None) -> Iterator[tuple[str, str]]:
        raise InputError(f"named corpus {self.name!r} has documents only, no queries")

    def qrels(self, split: str | None) -> dict[str, dict[str, int]]:
        raise InputError(f"named corpus {self.name!r} has documents only, no relevance judgements")


NamedCorpus = IrDatasetsCorpus | HuggingFaceCorpus


def _wikir(name: str) -> IrDatasetsCorpus:
    return IrDatasetsCorpus(name, name, {s: f"{name}/{s}" for s in ("training", "validation", "test")}, "test")


_ROBUST04 = "disks45/nocr/trec-robust-2004"
_DISKS45 = ("the licensed TREC disks 4 and 5", "disks45/corpus",
            "https://ir-datasets.com/trec-robust04.html#DataAccess")


def irds_home() -> Path:
    """ir_datasets' home folder, as ir_datasets finds it: ``$IR_DATASETS_HOME``, else ``~/.ir_datasets``."""
    return Path(os.environ.get("IR_DATASETS_HOME", Path.home() / ".ir_datasets"))


#: Name -> corpus. The default split is used for queries and qrels when none is given.
NAMED_CORPORA: dict[str, NamedCorpus] = {
    "msmarco-document": IrDatasetsCorpus(
        "msmarco-document", "msmarco-document",
        {s: f"msmarco-document/{s}" for s in ("trec-dl-2019", "trec-dl-2020", "dev")}, "trec-dl-2019"),
    "robust04": IrDatasetsCorpus(
        "robust04", _ROBUST04, {"all": _ROBUST04, **{f"fold{i}": f"{_ROBUST04}/fold{i}" for i in range(1, 6)}},
        "all", local_docs=_DISKS45),
    **{name: _wikir(name) for name in ("wikir/en59k", "wikir/en78k", "wikir/ens78k")},
    "openwebtext": HuggingFaceCorpus("openwebtext", "Skylion007/openwebtext"),
}


def resolve(name: str, split: str | None = None) -> tuple[NamedCorpus, str | None] | None:
    """The named corpus and split for ``name`` (``None`` if it names no corpus); the split may follow a slash."""
    base, suffix = (name, "") if name in NAMED_CORPORA else name.rpartition("/")[::2]
    corpus = NAMED_CORPORA.get(base)
    if corpus is None:
        return None
    if suffix and split and suffix != split:
        raise InputError(f"named corpus {name!r} already names split {suffix!r}, but split={split!r} was given")
    split = split or suffix or None
    if split is not None and split not in corpus.split_ids:
        choices = ", ".join(corpus.split_ids) or "none"
        raise InputError(f"named corpus {base!r} has no split {split!r} (splits: {choices})")
    return corpus, split
