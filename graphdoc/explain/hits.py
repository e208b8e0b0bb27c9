"""Explanations for the hits of a :class:`~graphdoc.retrieval.searcher.Searcher`, read from its index.

The passage vectors are the graph-contextualised passage nodes the index keeps (``final/``), and
the attention is ``final/passage_attention.npy`` (absent from indexes built before it was kept:
the explanations then carry ``attention: null``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from graphdoc.config import check_count
from graphdoc.errors import GraphDocError
from graphdoc.explain.passages import explain_passages
from graphdoc.retrieval.dense import prepare_vectors
from graphdoc.retrieval.finalize import FINAL_DIR
from graphdoc.retrieval.queries import check_query
from graphdoc.retrieval.searcher import ATTENTION_FILE


def load_passage_attention(index_dir: str | Path) -> np.ndarray | None:
    """The index's per-passage attention (aligned with its passage vectors), or None if it has none."""
    path = Path(index_dir) / FINAL_DIR / ATTENTION_FILE
    return np.load(path, mmap_mode="r") if path.is_file() else None


def explain_hits(searcher, query: str, hits: Sequence, top: int = 3, by: str = "score",
                 query_vector: np.ndarray | None = None) -> list[list[dict[str, Any]]]:
    """For each hit, its ``top`` passages as dicts (see :class:`PassageExplanation`), best first.

    The query is encoded with the searcher's model unless ``query_vector`` (``[d]``) is given; a blank or
    non-str query is refused, as :meth:`Searcher.search` refuses it.
    """
    searcher._check_open()
    check_query(query)
    dense = searcher.dense
    if not dense.has_passages:
        raise GraphDocError(f"index {searcher.index_dir} keeps no passage vectors: explanations need them "
                            "(build it again with store_passages=True, i.e. without --no-passages)")
    check_count("the number of passages to explain (top)", top)
    if not hits:
        return []
    vector = searcher.encode_queries([query])[0] if query_vector is None else query_vector
    vector = prepare_vectors(np.asarray(vector)[None, :], searcher.manifest.metric)[0]
    attention = searcher.passage_attention  # the searcher's build's, as its passage vectors are
    row_of = searcher.row_of
    explained = []
    for hit in hits:
        row = row_of.get(hit.doc_id)
        if row is None:
            raise GraphDocError(f"hit {hit.doc_id!r} is not a document of index {searcher.index_dir}")
        start, end = int(dense.passage_ptr[row]), int(dense.passage_ptr[row + 1])
        weights = None if attention is None else np.asarray(attention[start:end])
        found = explain_passages(vector, np.asarray(dense.passage_vectors[start:end]), searcher.record(row),
                                 weights, top, by)
        explained.append([e.to_dict() for e in found])
    return explained
