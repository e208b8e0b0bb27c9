"""Why a document matched a query: its passages ranked by similarity to the query, with attention.

Pure functions over plain data: a query vector, the document's graph-contextualised passage vectors
(as the index keeps them), the document node's last-layer attention over those passages, and the
docstore record ``{"id", "title", "text", "passages": [[start, end, section, section_title], ...]}``.
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from graphdoc.errors import ArgumentTypeError, GraphDocError

SNIPPET_CHARS = 300
#: How explained passages can be ranked; ties go to the earlier passage.
RANKINGS = ("score", "attention")


@dataclass
class PassageExplanation:
    """One passage of a hit: its similarity to the query, the document node's attention and its place."""

    index: int
    score: float
    attention: float | None
    section: int
    section_title: str
    start: int
    end: int
    snippet: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters on a word boundary, with ``" ..."`` when cut."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    cut = head.rsplit(" ", 1)[0] if " " in head else head
    return cut.rstrip() + " ..."


def passage_spans(record: Mapping[str, Any]) -> list[list]:
    """The record's ``[start, end, section, section_title]`` spans (the whole text when it has none)."""
    return [list(s) for s in record.get("passages") or [[0, len(record["text"]), 0, ""]]]


def _record_id(record: Mapping[str, Any]):
    from graphdoc.documents import ID_KEYS

    return next((record[key] for key in ID_KEYS if key in record), None)


def rank_passages(scores: np.ndarray, attention: np.ndarray | None = None, by: str = "score") -> np.ndarray:
    """Passage positions, best first, by ``scores`` or by ``attention``; ties keep document order."""
    if by not in RANKINGS:
        raise GraphDocError(f"unknown passage ranking {by!r}; valid: {', '.join(RANKINGS)}")
    if by == "attention" and attention is None:
        raise GraphDocError("ranking by attention needs the document node's attention weights")
    key = np.asarray(scores if by == "score" else attention, dtype=np.float64)
    return np.lexsort((np.arange(len(key)), -key))


def explain_passages(query_vector: np.ndarray, passage_vectors: np.ndarray, record: Mapping[str, Any],
                     attention: np.ndarray | None = None, top: int | None = 3, by: str = "score",
                     snippet_chars: int = SNIPPET_CHARS) -> list[PassageExplanation]:
    """The ``top`` passages of one document that explain its match with a query, best first.

    ``score`` is the dot product of the query vector with each passage vector (the cosine when both
    are unit vectors, as in an index with the cosine metric); ``attention`` is the document node's
    weight on the passage, when given.

    Shapes: ``query_vector``: ``[d]``; ``passage_vectors``: ``[n, d]``; ``attention``: ``[n]``.
    """
    spans = passage_spans(record)
    vectors = np.asarray(passage_vectors, dtype=np.float64)
    if vectors.ndim != 2 or len(vectors) != len(spans):
        raise GraphDocError(f"document {_record_id(record)!r}: {len(vectors)} passage vectors for "
                            f"{len(spans)} passages")
    if attention is not None and len(attention) != len(spans):
        raise GraphDocError(f"document {_record_id(record)!r}: {len(attention)} attention weights for "
                            f"{len(spans)} passages")
    query = np.asarray(query_vector, dtype=np.float64)
    if query.shape != vectors.shape[1:]:
        raise GraphDocError(f"the query vector must have shape {list(vectors.shape[1:])}, as the passage vectors; "
                            f"got {list(query.shape)}")
    if top is not None:  # (a negative one sliced passages off the end: top=-1 gave all but the last)
        if isinstance(top, bool) or not isinstance(top, numbers.Integral):
            raise ArgumentTypeError(f"the number of passages to explain (top) must be an integer or None; got {top!r}")
        if top < 0:
            raise GraphDocError(f"the number of passages to explain (top) must be at least 0; got {top}")
    scores = vectors @ query
    order = rank_passages(scores, attention, by)[:top]
    return [_explanation(int(i), float(scores[i]), None if attention is None else float(attention[i]),
                         spans[i], record["text"], snippet_chars) for i in order]


def _explanation(index: int, score: float, attention: float | None, span: Sequence, text: str,
                 snippet_chars: int) -> PassageExplanation:
    start, end, section, title = span
    return PassageExplanation(index, score, attention, int(section), str(title), int(start), int(end),
                              snippet(text[start:end], snippet_chars))


def format_explanation(explanations: Sequence[PassageExplanation | Mapping[str, Any]], indent: int = 5) -> str:
    """Readable lines, one per passage: index, similarity, attention, section, offsets, snippet."""
    lines = []
    for e in explanations:
        e = e.to_dict() if isinstance(e, PassageExplanation) else e
        attention = "" if e["attention"] is None else f"  att {e['attention']:.3f}"
        section = f"  [{' '.join(e['section_title'].split())}]" if e["section_title"] else ""  # on one line
        lines.append(f"{' ' * indent}p{e['index']:<3} sim {e['score']:.4f}{attention}{section}  "
                     f"chars {e['start']}-{e['end']}: {' '.join(e['snippet'].split())}")
    return "\n".join(lines)
