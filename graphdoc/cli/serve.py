"""``graphdoc serve``: search an index over HTTP (JSON), until Ctrl-C.

``GET /search?q=TEXT&k=10&mode=hybrid``, ``GET /similar?id=DOC_ID``, ``GET /document?id=DOC_ID``, ``GET /info``,
``GET /health``, and ``POST /search`` with ``{"queries": {...}, "k": 100}`` for many queries at once (see
graphdoc.retrieval.server). It listens on 127.0.0.1 (this machine only) unless ``--host`` says otherwise; an index
rebuilt while it serves (documents added or deleted) is served from its next request on, and every answer names its
build (header X-Graphdoc-Build). With an API key (``--api-key-file FILE``, else the environment variable
GRAPHDOC_API_KEY), every request but ``/health`` must send it: ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from graphdoc.cli.common import DEVICE_HELP, logger


#: seconds a stopped server waits for the requests under way to be answered
STOP_WAIT = 60
#: the environment variable holding the API key when --api-key-file is not given
KEY_VARIABLE = "GRAPHDOC_API_KEY"


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("serve", help="search an index over HTTP", description=__doc__)
    parser.add_argument("--index-dir", required=True, type=Path)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: every IPv4 "
                             "network; ::1 or :: for IPv6)")
    parser.add_argument("--port", type=int, default=8080, help="default 8080; 0: any free port")
    parser.add_argument("--model", default=None, help="query encoder (default: the index's model)")
    parser.add_argument("--device", default=None, help=DEVICE_HELP)
    parser.add_argument("--api-key-file", type=Path, default=None, metavar="FILE",
                        help="require the key on FILE's first line from every request but /health "
                             f"(Authorization: Bearer KEY or X-API-Key: KEY; default: ${KEY_VARIABLE} if set, else "
                             "no key)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    server = _server(args)
    restore = _stop_on_sigterm()
    documents = len(server.service.searcher.doc_ids)
    needs = ", API key required" if server.api_key is not None else ""
    print(f"serving {args.index_dir} ({documents} documents) on {server.url}{needs} (Ctrl-C stops)", flush=True)
    try:
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            server.server_close()  # no new connection; the requests under way are answered
            again = False
            try:
                if server.wait_idle(0.1):
                    logger.info("answering the requests under way before stopping (Ctrl-C again: stop now)")
                    server.wait_idle(STOP_WAIT)
                server.join_request_threads(2.0)  # (a thread of torch work ending as Python exits aborts it)
            except KeyboardInterrupt:
                again = True
            left = server.request_threads_alive()
            logger.info("stopped" + (f" ({left} connection(s) dropped)" if left else ""))
            if left:  # a thread still in torch as Python shuts down aborts it (SIGABRT): leave at once, tidied up
                restore()
                server.server_close()
                server.service.searcher.close()
                _exit_now(130 if again else 0)
    finally:
        restore()
        server.server_close()
        server.service.searcher.close()
    return 0


def _server(args: argparse.Namespace):
    """The server ``args`` describe, not yet serving; one that any network may reach without a key is warned of."""
    from graphdoc.errors import GraphDocError
    from graphdoc.retrieval.server import make_server

    if not 0 <= args.port <= 65535:
        raise GraphDocError(f"--port must be from 0 to 65535; got {args.port}")
    api_key = read_api_key(args.api_key_file)
    server = make_server(args.index_dir, args.host, args.port, model=args.model, device=args.device, api_key=api_key)
    if api_key is None and not _loopback(server.server_address[0]):
        logger.warning("serving on %s without an API key: anyone who can reach port %d can search the index (set "
                       "one with --api-key-file FILE or %s)", args.host, server.server_address[1], KEY_VARIABLE)
    return server


def read_api_key(path: Path | None) -> str | None:
    """The API key: the first line of ``path`` (stripped; not given on the command line, where ``ps`` would show
    it), else the environment's GRAPHDOC_API_KEY, else ``None``. A key file missing, unreadable or with an empty
    first line, or an empty variable, is one error line."""
    import os

    from graphdoc.errors import GraphDocError
    from graphdoc.retrieval.auth import check_api_key

    if path is None:
        key = os.environ.get(KEY_VARIABLE)
        if key is not None and not key.strip():
            raise GraphDocError(f"{KEY_VARIABLE} is set but empty: set it to the key, or unset it to serve without one")
        return None if key is None else check_api_key(key.strip(), KEY_VARIABLE)
    if path.is_dir():
        raise GraphDocError(f"--api-key-file {path} is a folder; name the file holding the key")
    try:
        with open(path, encoding="utf-8-sig") as handle:
            first = handle.readline()
    except FileNotFoundError:
        raise GraphDocError(f"--api-key-file {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise GraphDocError(f"--api-key-file {path} cannot be read ({getattr(err, 'strerror', None) or err})") \
            from None
    if not first.strip():
        raise GraphDocError(f"--api-key-file {path}: its first line is empty; write the key on it")
    return check_api_key(first.strip(), f"the first line of --api-key-file {path}")


def _loopback(address: str) -> bool:
    """Whether the address a server listens on is this machine's loopback (127.0.0.0/8, ::1)."""
    import ipaddress

    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def _exit_now(status: int) -> None:
    """End the process without Python's shutdown (the logs and output flushed first)."""
    import logging
    import os
    import sys

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _stop_on_sigterm():
    """SIGTERM (``kill``, ``docker stop``) stops the server as Ctrl-C does: the requests under way are answered.
    Returns what puts the handler it replaced back."""
    import signal
    import threading

    def stop(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():  # (signals go to the main thread only)
        return lambda: None
    previous = signal.signal(signal.SIGTERM, stop)
    return lambda: signal.signal(signal.SIGTERM, previous)
