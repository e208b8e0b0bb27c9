"""Shared pieces of the ``graphdoc serve`` tests: the toy index served, a server on a free port of 127.0.0.1 in a
thread, and requests to it."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from _retrieval_helpers import make_docs, write_jsonl

from graphdoc.retrieval.builder import IndexSettings, build_index
from graphdoc.retrieval.server import make_server


def build_served_index(model, folder: Path) -> Path:
    """Ten toy documents in four-document shards, ``d004`` labelled ``four``: ``folder/index``."""
    docs = make_docs(10)
    docs[4]["label"] = "four"
    build_index(model, str(write_jsonl(folder / "corpus.jsonl", docs)), folder / "index", IndexSettings(shard_size=4))
    return folder / "index"


@contextlib.contextmanager
def serving(index: Path, model, **options):
    """A server of ``index`` (``make_server`` ``options``, such as ``api_key``) answering in a thread; its base URL
    (``http://127.0.0.1:PORT``, no slash)."""
    server = make_server(index, port=0, model=model, **options)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        server.service.searcher.close()


def fetch(url: str, body: bytes | None = None, headers: dict[str, str] | None = None):
    """The status, JSON answer and response headers of a GET of ``url`` (a POST of ``body``)."""
    request = urllib.request.Request(url, data=body, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read().decode("utf-8")), response.headers
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read().decode("utf-8")), err.headers


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    return fetch(url, headers=headers)[:2]


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    return fetch(url, body, headers)[:2]


def raw(base: str, data: bytes) -> bytes:
    """Send ``data`` on one connection and read until the server closes it (or 10 s pass)."""
    port = urllib.parse.urlsplit(base).port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            pass
    return received
