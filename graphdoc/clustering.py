"""Clustering document embeddings: spherical k-means (FAISS) and, against known labels, NMI, ARI and purity.

Embeddings are compared by cosine, as everywhere in graphdoc: the vectors are scaled to unit length and the
centroids kept on the unit sphere. Clusters are numbered by size, the largest 0 (equal sizes: in the order of
their first document), so that a run's numbering does not depend on FAISS's.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from graphdoc.errors import GraphDocError

#: what scoring clusters against labels needs
SKLEARN_HINT = "pip install scikit-learn (or graphdoc[plot])"


@dataclass
class Clustering:
    """What :func:`kmeans` found: each document's cluster, the unit-length centroids ``[k, d]``, and each
    cluster's document nearest its centroid (a row number)."""

    assignments: np.ndarray = field(repr=False)
    centroids: np.ndarray = field(repr=False)
    nearest: np.ndarray = field(repr=False)

    def __repr__(self) -> str:
        return f"Clustering(k={len(self.centroids)}, documents={len(self.assignments)}, sizes={self.sizes})"

    @property
    def sizes(self) -> list[int]:
        return np.bincount(self.assignments, minlength=len(self.centroids)).tolist()


def kmeans(vectors, k: int, *, seed: int = 0, n_init: int = 1, iterations: int = 25) -> Clustering:
    """Spherical k-means of ``vectors`` (``[n, d]``, any float type) into ``k`` clusters: ``n_init`` runs from
    seeded starts, the one of the highest total cosine to its centroids kept. Raises :class:`GraphDocError` for
    ``k`` outside 2 to n, vectors that are not a finite 2-D array, or a zero vector (it has no direction)."""
    data = _unit_rows(vectors)
    for name, value, low in (("k", k, 2), ("n_init", n_init, 1), ("iterations", iterations, 1)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
            raise GraphDocError(f"{name} must be an integer of at least {low}; got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**31:
        raise GraphDocError(f"seed must be an integer from 0 to 2^31 - 1; got {seed!r}")
    if k > len(data):
        raise GraphDocError(f"cannot make {k} clusters of {len(data)} documents")
    distinct = len(np.unique(data, axis=0))
    if k > distinct:
        raise GraphDocError(f"cannot make {k} clusters of {len(data)} documents with only {distinct} distinct "
                            f"embeddings (documents of the same text): ask for at most {distinct}")
    import faiss

    model = faiss.Kmeans(data.shape[1], int(k), niter=int(iterations), nredo=int(n_init), seed=int(seed),
                         spherical=True, verbose=False, min_points_per_centroid=1, max_points_per_centroid=1 << 30)
    model.train(data)
    similarity = data @ model.centroids.T  # [n, k]
    assignments = similarity.argmax(axis=1)
    # number by size, largest first; equal sizes in the order of their first document
    sizes = np.bincount(assignments, minlength=k)
    first = np.full(k, len(data))
    np.minimum.at(first, assignments, np.arange(len(data)))
    order = sorted(range(k), key=lambda c: (-sizes[c], first[c]))
    renumber = np.empty(k, dtype=np.int64)
    renumber[order] = np.arange(k)
    assignments = renumber[assignments]
    centroids = np.ascontiguousarray(model.centroids[order])
    similarity = similarity[:, order]
    nearest = np.full(k, -1, dtype=np.int64)
    for c in range(k):
        members = np.flatnonzero(assignments == c)
        if len(members):  # (a cluster k-means left empty, in a degenerate case, has no nearest document: -1)
            nearest[c] = members[np.argmax(similarity[members, c])]
    return Clustering(assignments.astype(np.int64), centroids, nearest)


def _unit_rows(vectors) -> np.ndarray:
    try:
        data = np.ascontiguousarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise GraphDocError(f"vectors must be a 2-D array of numbers ({exc})") from None
    if data.ndim != 2 or not data.size:
        raise GraphDocError(f"vectors must be a non-empty 2-D array [documents, dimension]; got shape {data.shape}")
    if not np.isfinite(data).all():
        raise GraphDocError(f"vectors hold {int((~np.isfinite(data)).any(axis=1).sum())} row(s) with NaN or "
                            "infinite values")
    norms = np.linalg.norm(data, axis=1, keepdims=True)
    zero = np.flatnonzero(norms[:, 0] == 0)
    if len(zero):
        raise GraphDocError(f"row {int(zero[0])} of the vectors is all zeros: it has no direction to cluster by")
    return np.ascontiguousarray(data / norms)


def cluster_scores(labels: Sequence, assignments: Sequence[int]) -> dict[str, float]:
    """Agreement of ``assignments`` with known ``labels`` (same length; ``None`` labels are left out):
    normalised mutual information, adjusted Rand index and purity (the share of documents whose cluster's most
    common label is theirs). Needs scikit-learn."""
    try:
        from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
        from sklearn.metrics.cluster import contingency_matrix
    except ImportError:
        raise GraphDocError(f"scoring clusters against labels needs scikit-learn: {SKLEARN_HINT}") from None
    if len(labels) != len(assignments):
        raise GraphDocError(f"{len(labels)} labels for {len(assignments)} documents")
    kept = [(str(label), int(cluster)) for label, cluster in zip(labels, assignments) if label is not None]
    if not kept:
        raise GraphDocError("no document has a label to score the clusters against")
    truth, found = zip(*kept)
    return {"NMI": float(normalized_mutual_info_score(truth, found)),
            "ARI": float(adjusted_rand_score(truth, found)),
            "purity": float(contingency_matrix(truth, found).max(axis=0).sum() / len(truth)),
            "documents": len(kept)}
