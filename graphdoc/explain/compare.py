"""Which parts of two long documents are alike, at the document, section and passage level (as in CoLDE).

* document similarity: cosine of the two document embeddings;
* passage x passage: cosine of the graph-contextualised passage nodes;
* section x section: cosine of section centroids, a section's centroid being the mean of its unit
  passage vectors. A centroid (rather than the best passage pair) says how alike two sections are as a
  whole: one shared boilerplate sentence does not make two sections look the same. The best passage
  pairs are listed on their own;
* the most similar passage pairs, matched one to one (greedily: the best pair, then the best pair of
  passages not yet used), so a single passage does not fill the whole list.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from graphdoc.config import check_count
from graphdoc.documents import Document, Passage, as_document
from graphdoc.errors import ArgumentTypeError, GraphDocError, InputError
from graphdoc.explain.passages import snippet


@dataclass(frozen=True)
class SectionInfo:
    """A section that has passages: its number in the document, its title, and its passages' rows."""

    section: int
    title: str
    rows: tuple[int, ...]

    @property
    def label(self) -> str:
        return self.title or f"section {self.section}"


@dataclass(frozen=True)
class PassagePair:
    """Passage ``a`` of the first document and passage ``b`` of the second, with their cosine."""

    a: int
    b: int
    score: float


@dataclass
class Comparison:
    """Two documents compared; matrices have the first document's items as rows."""

    documents: tuple[Document, Document]
    passages: tuple[list[Passage], list[Passage]]
    sections: tuple[list[SectionInfo], list[SectionInfo]]
    document_similarity: float
    passage_similarity: np.ndarray  # [n_a, n_b]
    section_similarity: np.ndarray  # [s_a, s_b]
    pairs: list[PassagePair]

    def to_dict(self, snippet_chars: int | None = None) -> dict[str, Any]:
        """JSON-ready: ids, titles, sections, passages (spans and text), matrices and pairs."""
        def passage(p: Passage) -> dict[str, Any]:
            text = p.text if snippet_chars is None else snippet(p.text, snippet_chars)
            return {"index": p.index, "section": p.section, "section_title": p.section_title,
                    "start": p.start, "end": p.end, "text": text}

        sides = [{"id": d.id, "title": d.title, "sections": [{"section": s.section, "title": s.title}
                                                              for s in secs],
                  "passages": [passage(p) for p in ps]}
                 for d, ps, secs in zip(self.documents, self.passages, self.sections)]
        return {"a": sides[0], "b": sides[1], "document_similarity": self.document_similarity,
                "section_similarity": self.section_similarity.tolist(),
                "passage_similarity": self.passage_similarity.tolist(),
                "pairs": [{"a": p.a, "b": p.b, "score": p.score} for p in self.pairs]}


def unit_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[n, d] x [m, d] -> [n, m]`` cosine similarities."""
    return unit_rows(a) @ unit_rows(b).T


def sections_of(passages: Sequence[Passage]) -> list[SectionInfo]:
    """The sections that have passages, in order of first appearance."""
    rows: dict[int, list[int]] = {}
    titles: dict[int, str] = {}
    for row, p in enumerate(passages):
        rows.setdefault(p.section, []).append(row)
        titles.setdefault(p.section, p.section_title)
    return [SectionInfo(s, titles[s], tuple(r)) for s, r in rows.items()]


def section_vectors(passage_vectors: np.ndarray, sections: Sequence[SectionInfo]) -> np.ndarray:
    """``[s, d]``: each section's centroid, the mean of its unit passage vectors."""
    units = unit_rows(passage_vectors)
    return np.stack([units[list(s.rows)].mean(axis=0) for s in sections])


def top_pairs(similarity: np.ndarray, k: int) -> list[PassagePair]:
    """Up to ``k`` one-to-one pairs, best first (ties: lower row, then lower column)."""
    n, m = similarity.shape
    flat = np.lexsort((np.arange(n * m), -similarity.ravel()))
    used_a, used_b, pairs = set(), set(), []
    for f in flat:
        if len(pairs) == k:
            break
        i, j = divmod(int(f), m)
        if i not in used_a and j not in used_b:
            used_a.add(i)
            used_b.add(j)
            pairs.append(PassagePair(i, j, float(similarity[i, j])))
    return pairs


def compare_vectors(doc_a: np.ndarray, doc_b: np.ndarray, passages_a: np.ndarray, passages_b: np.ndarray,
                    sections_a: Sequence[SectionInfo], sections_b: Sequence[SectionInfo],
                    top: int = 5) -> tuple[float, np.ndarray, np.ndarray, list[PassagePair]]:
    """Document cosine, passage matrix ``[n_a, n_b]``, section matrix ``[s_a, s_b]`` and top pairs."""
    doc = float(cosine_matrix(np.asarray(doc_a)[None], np.asarray(doc_b)[None])[0, 0])
    passage = cosine_matrix(passages_a, passages_b)
    section = cosine_matrix(section_vectors(passages_a, sections_a), section_vectors(passages_b, sections_b))
    return doc, passage, section, top_pairs(passage, top)


def check_has_text(document: Document) -> None:
    """An empty document has no passages to compare (its vector would be its title's, or nothing's)."""
    if not document.text.strip():
        path = document.metadata.get("path")  # a document read from a file
        raise InputError(f"{path}: document has no text" if path else f"document {document.id!r} has no text")


def compare_documents(model, a, b, top: int = 5, max_passages: int | None = None) -> Comparison:
    """Compare two documents (strings, dicts or :class:`Document`) with a GraphDocEncoder in one pass.

    ``top``: how many most similar passage pairs to list (0 lists none); ``max_passages``: read at most this
    many passages of each document (``None``: the model's cap, ``chunker.max_passages``). Passages past the
    cap are left out of the comparison, with a warning.
    """
    if isinstance(top, bool) or not isinstance(top, numbers.Integral):
        raise ArgumentTypeError(f"the number of passage pairs (top) must be an integer; got {top!r}")
    if top < 0:
        raise GraphDocError(f"the number of passage pairs (top) must be at least 0; got {top}")
    if max_passages is not None:
        check_count("max_passages", max_passages)
    docs = [as_document(a, 0), as_document(b, 1)]
    for doc in docs:
        check_has_text(doc)
    cut_before = model.chunker.counts()
    # attention asked for: a model whose document vector needs no passages (flat FirstP) still gives them
    out = next(iter(model.iter_forward(docs, batch_size=2, return_attention_weights=True,
                                       max_passages=max_passages)))
    model.chunker.warn_cut(cut_before, max_passages, "compared")
    passages = [prepared.passages for prepared in out.documents]
    vectors = [out.passage_embeddings(i).float().cpu().numpy() for i in range(2)]
    sections = [sections_of(p) for p in passages]
    doc_vectors = out.document_embeddings.float().cpu().numpy()
    doc, passage, section, pairs = compare_vectors(doc_vectors[0], doc_vectors[1], vectors[0], vectors[1],
                                                   sections[0], sections[1], top)
    return Comparison((docs[0], docs[1]), (passages[0], passages[1]), (sections[0], sections[1]),
                      doc, passage, section, pairs)
