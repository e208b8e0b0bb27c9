"""Checks on the queries a searcher is given: text, not blank, and several where several are expected."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from graphdoc.documents import check_query_text, query_names
from graphdoc.errors import GraphDocError

SEVERAL = "a list of query texts or a dict {query id: text}"


def check_query(query: Any) -> str:
    """One query: a str with a word in it (a blank query would rank documents on nothing)."""
    check_query_text(query, "the query")
    if not query.strip():
        raise GraphDocError("the query is empty")
    return query


def split_queries(queries: Mapping[Any, str] | Iterable[str]) -> tuple[list[str], list[str]]:
    """Query ids and texts of a dict ``{id: text}`` or a list of texts (ids ``"0"``, ``"1"``, ...).

    One str is refused rather than searched letter by letter; so is a query that is not a str (``None`` would
    be searched as the word "None") or is blank.
    """
    if isinstance(queries, (str, bytes)):
        raise GraphDocError(f"expected {SEVERAL}, got one {type(queries).__name__}: pass [query], or use "
                            "search() for one query")
    if isinstance(queries, Mapping):
        qids, texts = [str(q) for q in queries], list(queries.values())
        if len(set(qids)) < len(qids):  # ({1: ..., "1": ...}: one id in a run, one query's results lost)
            keys = list(queries)
            first = next(i for i, q in enumerate(qids) if qids.index(q) != i)
            raise GraphDocError(f"query ids {keys[qids.index(qids[first])]!r} and {keys[first]!r} are both "
                                f"{qids[first]!r} as text, as a run names them: give each query its own id")
        names = query_names(qids, len(texts))
    elif isinstance(queries, Iterable):
        texts = list(queries)
        qids = [str(i) for i in range(len(texts))]
        names = query_names(None, len(texts))
    else:
        raise GraphDocError(f"expected {SEVERAL}; got {type(queries).__name__}")
    for name, text in zip(names, texts):
        check_query_text(text, name)
    blank = next((name for name, text in zip(names, texts) if not text.strip()), None)
    if blank is not None:
        raise GraphDocError("the query is empty" if len(texts) == 1 else f"{blank} is empty")
    return qids, texts
