"""Search an index over HTTP: a small JSON service on the standard library's threading HTTP server.

``GET`` endpoints (parameters in the query string; answers are JSON objects, UTF-8):

- ``/search?q=TEXT[&k=10][&mode=hybrid|dense|bm25][&alpha=A][&fusion=weighted|rrf][&normalization=...]``:
  ``{"query", "mode", "hits": [{rank, doc_id, score, title, passage, metadata}, ...]}``
- ``/similar?id=DOC_ID[&k=10]``: the documents most like an indexed one (``Searcher.similar``)
- ``/search`` and ``/similar`` take ``filter=FIELD=VALUE``, repeatable: only documents whose metadata match (a
  field given twice takes either value; different fields must all match; a field inside an object by its dotted
  path, ``metadata.year``)
- ``/document?id=DOC_ID``: its stored record (id, title, text, metadata, passage spans)
- ``/info``: the build, documents and passages held, the model, dense, BM25 and fusion settings, the metadata
  fields a filter may name, and the corpora read (with how many documents of each)
- ``/health``: ``{"status": "ok", "documents": N, "build": ID}``

``POST /search`` with a JSON body ``{"queries": {id: text, ...} or [text, ...], "k": 100, "mode": ...}`` (and
``"filter": {field: value or [values]}``) ranks many queries at once: ``{"run": {query id: {doc id: score}}}``.
A bad request is answered ``400`` with ``{"error": "..."}`` (one line, as the command line's errors), an unknown
id or path ``404``.

One :class:`~graphdoc.retrieval.searcher.Searcher` serves every thread. When the index is rebuilt (documents
added or deleted), the next request opens the new build; requests under way finish on the one they began with.
Every answer names the build that gave it in the header ``X-Graphdoc-Build`` (``Searcher.build``).

With an API key (``make_server(..., api_key=KEY)``), every request but ``/health`` must send it as
``Authorization: Bearer KEY`` or ``X-API-Key: KEY`` (:mod:`graphdoc.retrieval.auth`); one without it, or with
another, is answered ``401`` with ``{"error": "..."}`` and ``WWW-Authenticate: Bearer``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import weakref
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from graphdoc.errors import DamagedIndexError, GraphDocError, ModelLoadError
from graphdoc.retrieval.auth import NO_KEY, WRONG_KEY, check_api_key, refusal  # noqa: F401 (WRONG_KEY: the API's)
from graphdoc.retrieval.filters import filter_from_pairs
from graphdoc.retrieval.rebuilds import build_changed
from graphdoc.retrieval.searcher import MODES, Searcher

logger = logging.getLogger(__name__)

MAX_BODY = 16 * 2**20  # bytes of a POST body read at most
MAX_K = 10_000  # results a request may ask for
#: the query parameters of each GET endpoint
PARAMETERS = {"/search": ("q", "k", "mode", "alpha", "fusion", "normalization", "filter"),
              "/similar": ("id", "k", "filter"), "/document": ("id",)}
#: the fields of a POST /search body
BODY_FIELDS = ("queries", "k", "mode", "fusion", "filter")
#: the response header naming the index build that answered (``Searcher.build``)
BUILD_HEADER = "X-Graphdoc-Build"


class NotFound(GraphDocError):
    """An id the index does not hold, or a path the service does not have: answered 404."""


class SearchService:
    """The searcher of ``index_dir`` (reopened when the index is rebuilt) and the answers to requests."""

    def __init__(self, index_dir: str | Path, model=None, device: str | None = None) -> None:
        self.index_dir, self.device = Path(index_dir), device
        self._lock = threading.Lock()
        self.searcher = Searcher(self.index_dir, model=model, device=device)
        # a model named by a string is loaded once, here: a rebuild reuses it (it is checked against the index)
        self.model = self.searcher.model if model is not None else None

    def current(self) -> Searcher:
        """The searcher of the index's latest complete build (a new one when an add or a delete was finalised)."""
        searcher = self.searcher
        if not build_changed(searcher):
            return searcher
        with self._lock:
            if self.searcher is searcher:  # (another thread may have reopened it meanwhile)
                fresh = Searcher(self.index_dir, model=self.model, device=self.device)
                if self.model is None and searcher._model is not None:  # keep the loaded query encoder
                    try:
                        fresh.model = searcher._model
                    except GraphDocError:  # rebuilt with another model: the new one loads on first use
                        pass
                self.searcher = fresh  # (the old one is let go, not closed: requests may still be reading it)
                logger.info("%s was rebuilt: serving its new build (%d documents)", self.index_dir,
                            len(fresh.doc_ids))
            return self.searcher

    # ----------------------------------------------------------------- answers
    def answer(self, method: str, path: str, params: dict[str, list[str]], body: bytes | None) -> "Answer":
        """The JSON answer to one request, with the build that gave it (``.build``); raises
        :class:`GraphDocError` (400) or :class:`NotFound` (404)."""
        routes = {("GET", "/search"): self._search, ("GET", "/similar"): self._similar,
                  ("GET", "/document"): self._document, ("GET", "/info"): self._info,
                  ("GET", "/health"): self._health, ("POST", "/search"): self._batch}
        path = path.rstrip("/") or "/"
        route = routes.get((method, path))
        if route is None:
            known = sorted({p for _, p in routes})
            raise NotFound(f"no endpoint {method} {path} (endpoints: {', '.join(known)}; POST /search)")
        allowed = PARAMETERS.get(path, ()) if method == "GET" else ()
        unknown = sorted(set(params) - set(allowed))
        if unknown:  # (a typo, mod=bm25, would be passed over)
            valid = f"valid: {', '.join(allowed)}" if allowed else "it takes none"
            raise GraphDocError(f"unknown parameter {unknown[0]!r} for {method} {path} ({valid})")
        searcher = self.current()  # (one build answers the whole request, and names itself)
        return Answer(route(searcher, (body or b"") if method == "POST" else params), build=searcher.build)

    def _search(self, searcher: Searcher, params) -> dict[str, Any]:
        query = _one(params, "q")
        if query is None:
            raise GraphDocError("give the query as q=...")
        mode = _one(params, "mode") or "hybrid"
        fusion = {key: value for key, value in (("method", _one(params, "fusion")),
                                                ("alpha", _number(params, "alpha", float)),
                                                ("normalization", _one(params, "normalization")))
                  if value is not None}
        if fusion and mode != "hybrid":
            raise GraphDocError(f"{', '.join(fusion)} applies to mode hybrid, not {mode}")
        hits = searcher.search(query, k=_k(params, 10), mode=mode, fusion=fusion or None,
                               filter=filter_from_pairs(params.get("filter"), "filter"))
        return {"query": query, "mode": mode, "hits": [vars(hit) for hit in hits]}

    def _similar(self, searcher: Searcher, params) -> dict[str, Any]:
        doc_id = _required_id(params)
        if doc_id not in searcher:
            raise NotFound(f"the index holds no document {doc_id!r}")
        hits = searcher.similar(doc_id, k=_k(params, 10), filter=filter_from_pairs(params.get("filter"), "filter"))
        return {"id": doc_id, "hits": [vars(hit) for hit in hits]}

    def _document(self, searcher: Searcher, params) -> dict[str, Any]:
        doc_id = _required_id(params)
        if doc_id not in searcher:
            raise NotFound(f"the index holds no document {doc_id!r}")
        return searcher.document(doc_id)

    def _info(self, searcher: Searcher, params) -> dict[str, Any]:
        manifest = searcher.manifest
        return {"index": str(self.index_dir), "build": searcher.build, "documents": len(searcher.doc_ids),
                "passages": manifest.counts.get("passages"), "model": manifest.model,
                "dimension": manifest.dimension, "metric": manifest.metric, "faiss_factory": manifest.faiss_factory,
                "bm25": manifest.bm25, "fusion": searcher.fusion.to_dict(), "dense": manifest.dense,
                "metadata_fields": searcher.metadata_fields(),
                "corpora": [{"corpus": s.corpus, "part": s.part, "documents_read": s.documents_read,
                             "complete": s.complete, "stopped": s.stopped} for s in manifest.sources]}

    def _health(self, searcher: Searcher, params) -> dict[str, Any]:
        return {"status": "ok", "documents": len(searcher.doc_ids), "build": searcher.build}

    def _batch(self, searcher: Searcher, body: bytes) -> dict[str, Any]:
        try:
            request = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise GraphDocError(f"the body is not JSON ({exc})") from None
        if not isinstance(request, dict) or "queries" not in request:
            raise GraphDocError('the body must be a JSON object with "queries" (an object {id: text} or a list)')
        unknown = sorted(set(request) - set(BODY_FIELDS))
        if unknown:
            raise GraphDocError(f"unknown field {unknown[0]!r} (valid: {', '.join(BODY_FIELDS)})")
        k = request.get("k", 100)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise GraphDocError(f"k must be an integer from 1 to {MAX_K}; got {k!r}")
        mode = request.get("mode", "hybrid")
        if mode not in MODES:
            raise GraphDocError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
        if request.get("fusion") is not None and mode != "hybrid":
            raise GraphDocError(f"fusion applies to mode hybrid, not {mode}")
        queries = request["queries"]
        if not isinstance(queries, (dict, list)):
            raise GraphDocError(f'"queries" must be an object {{id: text}} or a list of texts; got '
                                f"{type(queries).__name__}")
        run = searcher.batch_search(queries, k=k, mode=mode, fusion=request.get("fusion"),
                                    filter=request.get("filter"))
        return {"run": run}


class Answer(dict):
    """A request's JSON answer, and ``build``: the id of the index build that gave it (``Searcher.build``)."""

    def __init__(self, payload: dict[str, Any], build: str) -> None:
        super().__init__(payload)
        self.build = build


def _one(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise GraphDocError(f"{name} is given {len(values)} times; give it once")
    return values[0]


def _number(params, name: str, kind: type):
    text = _one(params, name)
    if text is None:
        return None
    try:
        return kind(text)
    except ValueError:
        raise GraphDocError(f"{name} must be a number; got {text!r}") from None


def _k(params, default: int) -> int:
    k = _number(params, "k", int)
    if k is None:
        return default
    if not 1 <= k <= MAX_K:
        raise GraphDocError(f"k must be from 1 to {MAX_K}; got {k}")
    return k


def _required_id(params) -> str:
    doc_id = _one(params, "id")
    if not doc_id:
        raise GraphDocError("give the document id as id=...")
    return doc_id


class _Handler(BaseHTTPRequestHandler):
    server: "SearchServer"
    protocol_version = "HTTP/1.1"
    timeout = 60  # seconds a connection may stay silent (a client that sends less than it announced)

    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        self._respond("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._respond("POST")

    def _respond(self, method: str) -> None:
        with self.server.answering():
            if self._authorised(method):
                self._answer(method)

    def _authorised(self, method: str) -> bool:
        """Whether the request may be answered; if not, it is answered ``401`` here."""
        refused = refusal(self.server.api_key, method, urlsplit(self.path).path, self.headers)
        if refused is None:
            return True
        if self.headers.get("Content-Length") not in (None, "0"):
            self.close_connection = True  # (a body not read: its bytes would be taken as the next request)
        logger.info("%s %s %d (%s, from %s)", method, self.path, HTTPStatus.UNAUTHORIZED,
                    "no API key" if refused == NO_KEY else "a wrong API key", self.client_address[0])  # (not the key)
        self._send(HTTPStatus.UNAUTHORIZED, {"error": refused}, {"WWW-Authenticate": "Bearer"})
        return False

    def _answer(self, method: str) -> None:
        start = time.perf_counter()
        url = urlsplit(self.path)
        try:
            body = self._body(method)
            params = parse_qs(url.query, keep_blank_values=True, strict_parsing=False)
            status, payload = HTTPStatus.OK, self.server.service.answer(method, url.path, params, body)
        except NotFound as exc:
            status, payload = HTTPStatus.NOT_FOUND, {"error": str(exc)}
        except DamagedIndexError as exc:
            status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc)}
        except ModelLoadError as exc:
            status, payload = HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(exc)}
        except (GraphDocError, ValueError) as exc:
            status, payload = HTTPStatus.BAD_REQUEST, {"error": str(exc)}
        except Exception as exc:  # a bug: the service goes on; the log has the traceback
            logger.exception("%s %s failed", method, self.path)
            status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"}
        self._send(status, payload)
        logger.info("%s %s %d %.0f ms", method, self.path, status, 1000 * (time.perf_counter() - start))

    def _body(self, method: str) -> bytes | None:
        """The request's body (POST); a body this cannot read whole closes the connection after the answer (its
        bytes would be read as the next request)."""
        announced = self.headers.get("Content-Length")
        if method != "POST":
            if announced not in (None, "0"):
                self.close_connection = True  # (a GET's body is not read)
            return None
        try:
            length = int(announced) if announced is not None else None
        except ValueError:
            length = -1
        if length is None or length < 0:
            self.close_connection = True
            raise GraphDocError("a POST needs a Content-Length header giving the body's size in bytes"
                                if length is None else f"Content-Length {announced!r} is not a size in bytes")
        if length > MAX_BODY:
            self.close_connection = True
            raise GraphDocError(f"the body is {length} bytes; at most {MAX_BODY}")
        try:
            body = self.rfile.read(length)
        except (TimeoutError, ConnectionError, OSError) as exc:
            self.close_connection = True
            raise GraphDocError(f"the {length} bytes of the body did not arrive ({exc})") from None
        if len(body) < length:  # the client closed the connection early
            self.close_connection = True
            raise GraphDocError(f"the body ended after {len(body)} of the {length} bytes Content-Length gave")
        return body

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        # the build that answered (the latest one opened, for an answer no build gave): another after a rebuild
        self.send_header(BUILD_HEADER, getattr(payload, "build", None) or self.server.service.searcher.build)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (an unsupported method, a malformed request line) as one JSON line too."""
        self.close_connection = True
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = ""
        error = message or phrase
        if code == HTTPStatus.NOT_IMPLEMENTED and getattr(self, "command", None):
            error = f"method {self.command} is not supported: GET or POST"
        self._send(code, {"error": error})
        logger.info("%s %s %d (%s)", getattr(self, "command", None) or "-", getattr(self, "path", "") or "-", code,
                    error)

    def log_message(self, format: str, *args) -> None:  # (http.server's own lines: graphdoc logs one above)
        logger.debug(format, *args)


class SearchServer(ThreadingHTTPServer):
    """The HTTP server of a :class:`SearchService`; ``server_address`` holds the port it got (0: any free).
    ``api_key``: what every request but ``/health`` must send (``None``: none needed)."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client gone mid-answer is a DEBUG line, not socketserver's traceback on stderr."""
        import sys

        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            logger.debug("%s: %s", client_address[0], error)
        else:
            logger.exception("request from %s failed", client_address[0])

    def __init__(self, service: SearchService, host: str = "127.0.0.1", port: int = 8080,
                 api_key: str | None = None) -> None:
        import socket

        self.service = service
        self.api_key = None if api_key is None else check_api_key(api_key)
        self._busy, self._idle = 0, threading.Condition()
        self._request_threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        if ":" in host:  # an IPv6 address (::1, ::)
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        """``http://HOST:PORT/`` of the address it listens on (an IPv6 address in brackets)."""
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"

    @contextlib.contextmanager
    def answering(self):
        """Count a request under way for :meth:`wait_idle`."""
        with self._idle:
            self._busy += 1
            self._request_threads.add(threading.current_thread())
        try:
            yield
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float | None = None) -> int:
        """Wait until no request is under way (``timeout`` seconds at most); the number still under way."""
        with self._idle:
            self._idle.wait_for(lambda: self._busy == 0, timeout)
            return self._busy

    def request_threads_alive(self) -> int:
        """How many threads that answered requests are still running (a connection kept open, a request under
        way)."""
        return sum(t.is_alive() and t is not threading.current_thread() for t in list(self._request_threads))

    def join_request_threads(self, timeout: float) -> None:
        """Give the threads that answered requests ``timeout`` seconds in all to end (a connection kept open waits
        for its client's next request until then)."""
        end = time.monotonic() + timeout
        for thread in list(self._request_threads):
            if thread is not threading.current_thread():
                thread.join(max(0.0, end - time.monotonic()))


def make_server(index_dir: str | Path, host: str = "127.0.0.1", port: int = 8080, model=None,
                device: str | None = None, api_key: str | None = None) -> SearchServer:
    """A server of the index in ``index_dir`` on ``host:port`` (``port`` 0: a free one), not yet serving: call
    ``serve_forever()`` (and ``shutdown()`` from another thread, ``server_close()`` at the end). With ``api_key``,
    every request but ``GET /health`` must send it (``Authorization: Bearer KEY`` or ``X-API-Key: KEY``), or is
    answered ``401``."""
    if api_key is not None:
        check_api_key(api_key)  # (before the index and model are opened)
    service = SearchService(index_dir, model=model, device=device)
    try:
        return SearchServer(service, host, port, api_key)
    except OSError as exc:
        service.searcher.close()
        raise GraphDocError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None

