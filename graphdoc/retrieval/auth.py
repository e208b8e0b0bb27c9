"""The API key of :mod:`graphdoc.retrieval.server`: which keys a header can carry, and whether a request sends it.

With a key, every request but ``GET /health`` must send it as ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``;
one without it, or with another, is refused (the server answers ``401``). Keys are compared in constant time, their
lengths too, so that how long a refusal takes tells nothing of the key.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from graphdoc.errors import ArgumentTypeError, GraphDocError

#: the answers (401) to a request without the server's API key, or with another
NO_KEY = "this service needs an API key: send it as Authorization: Bearer KEY (or X-API-Key: KEY)"
WRONG_KEY = "the API key sent is not this service's"
#: what a client may ask for without the key: whether the service is up
OPEN = (("GET", "/health"),)


def check_api_key(key: str, name: str = "api_key") -> str:
    """``key``, refused (``name`` says where it came from) when it is not a str, is empty, or holds what a client
    cannot send as ``Authorization: Bearer KEY``: a space, a control character, a non-ASCII character."""
    if not isinstance(key, str):
        raise ArgumentTypeError(f"{name} must be a str; got {type(key).__name__}")
    if not key:
        raise GraphDocError(f"{name} is empty: give a key, or None to serve without one")
    if not (key.isascii() and key.isprintable()) or " " in key:
        raise GraphDocError(f"{name} holds a space, a control or a non-ASCII character: a key goes into an HTTP "
                            "header (Authorization: Bearer KEY), which carries printable ASCII without spaces")
    return key


def refusal(key: str | None, method: str, path: str, headers: Mapping[str, str]) -> str | None:
    """Why a request is refused for its API key (:data:`NO_KEY`, :data:`WRONG_KEY`); ``None`` when the server has
    no ``key``, the request is ``GET /health``, or its ``headers`` carry the key."""
    if key is None or (method, path.rstrip("/") or "/") in OPEN:
        return None
    scheme, _, token = (headers.get("Authorization") or "").strip().partition(" ")
    sent = [token.strip()] if scheme.lower() == "bearer" else []
    sent = [value for value in (*sent, (headers.get("X-API-Key") or "").strip()) if value]
    if not sent:
        return NO_KEY
    return None if any([_same(value, key) for value in sent]) else WRONG_KEY  # (a list: each one compared)


def _same(sent: str, key: str) -> bool:
    """Whether ``sent`` is ``key``, in a time that depends on neither: their digests, of one length, are compared
    (``hmac.compare_digest`` of the texts would end at once when their lengths differ)."""
    digests = [hashlib.sha256(text.encode("latin-1", "replace")).digest() for text in (sent, key)]
    return hmac.compare_digest(*digests)
