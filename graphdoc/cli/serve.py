"""``graphdoc serve``: search an index over HTTP (JSON), until Ctrl-C.

``GET /search?q=TEXT&k=10&mode=hybrid``, ``GET /similar?id=DOC_ID``, ``GET /document?id=DOC_ID``, ``GET /info``,
``GET /health``, and ``POST /search`` with ``{"queries": {...}, "k": 100}`` for many queries at once (see
graphdoc.retrieval.server). It listens on 127.0.0.1 (this machine only) unless ``--host`` says otherwise; an index
rebuilt while it serves (documents added or deleted) is served from its next request on.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from graphdoc.cli.common import DEVICE_HELP, logger


#: seconds a stopped server waits for the requests under way to be answered
STOP_WAIT = 60


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("serve", help="search an index over HTTP", description=__doc__)
    parser.add_argument("--index-dir", required=True, type=Path)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: every IPv4 "
                             "network; ::1 or :: for IPv6)")
    parser.add_argument("--port", type=int, default=8080, help="default 8080; 0: any free port")
    parser.add_argument("--model", default=None, help="query encoder (default: the index's model)")
    parser.add_argument("--device", default=None, help=DEVICE_HELP)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graphdoc.errors import GraphDocError
    from graphdoc.retrieval.server import make_server

    if not 0 <= args.port <= 65535:
        raise GraphDocError(f"--port must be from 0 to 65535; got {args.port}")
    server = make_server(args.index_dir, args.host, args.port, model=args.model, device=args.device)
    restore = _stop_on_sigterm()
    documents = len(server.service.searcher.doc_ids)
    print(f"serving {args.index_dir} ({documents} documents) on {server.url} (Ctrl-C stops)", flush=True)
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
