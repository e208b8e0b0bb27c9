"""Figures as PNG files: a 2-D map of document embeddings coloured by label, and the document node's
attention over its passages, layer by layer.

matplotlib (object API with the Agg canvas: no global backend is set) and scikit-learn are the optional
extra ``plot``; UMAP is used for ``method="auto"`` when ``umap-learn`` is installed, else t-SNE.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import math
import numbers
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from graphdoc.backbones import FLAT, config_backbone
from graphdoc.documents import ID_KEYS, TEXT_KEYS, Document, Passage, as_document
from graphdoc.errors import ArgumentTypeError, GraphDocError
from graphdoc.explain.compare import check_has_text
from graphdoc.fileio import atomic_write, check_output_file

if TYPE_CHECKING:
    from graphdoc.corpus import Fields

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'graphdoc[plot]'"
METHODS = ("auto", "tsne", "umap")
MAX_LEGEND = 20  # also the number of colours (tab20): past it they repeat
MAX_SEED = 2**32 - 1  # scikit-learn's and UMAP's random_state: a NumPy seed
MAX_SECTION_LABELS = 15  # section titles under an attention heatmap: more would overlap


#: import name -> (package name, how to install it)
PACKAGES = {"matplotlib": ("matplotlib", INSTALL_HINT), "sklearn": ("scikit-learn", INSTALL_HINT),
            "umap": ("umap-learn", "pip install umap-learn")}


def _require(module: str, what: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        package, hint = PACKAGES[module.split(".")[0]]
        raise GraphDocError(f"{what} needs {package}: {hint}") from None


def require_plotting(projection: str | None = None) -> None:
    """Fail early, with the install hint, when matplotlib (or the projection's package) is missing."""
    _require("matplotlib.figure", "plotting")
    if projection == "tsne" or (projection == "auto" and importlib.util.find_spec("umap") is None):
        _require("sklearn.manifold", "t-SNE")
    elif projection == "umap":
        _require("umap", "the umap projection (--method umap)")


def _figure(size: tuple[float, float], dpi: int):
    """A matplotlib Figure drawn by its own Agg canvas (no pyplot state)."""
    figure = _require("matplotlib.figure", "plotting").Figure(figsize=size, dpi=dpi, layout="constrained")
    _require("matplotlib.backends.backend_agg", "plotting").FigureCanvasAgg(figure)
    return figure


def check_seed(seed: int, name: str = "seed") -> None:
    """Refuse a seed that t-SNE and UMAP would not take, naming ``name`` (``--seed`` for the CLI)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ArgumentTypeError(f"{name} must be an integer; got {seed!r}")
    if not 0 <= seed <= MAX_SEED:
        raise GraphDocError(f"{name} must be in 0..{MAX_SEED}; got {seed}")


#: embeddings none of which lies further from their mean than this share of the longest one are identical
IDENTICAL = 1e-5


def project_2d(vectors: np.ndarray, method: str = "auto", seed: int = 0) -> tuple[np.ndarray, str]:
    """``[n, d] -> [n, 2]`` with t-SNE or UMAP; returns the coordinates and the method used."""
    if method not in METHODS:
        raise GraphDocError(f"unknown projection {method!r}; valid: {', '.join(METHODS)}")
    check_seed(seed)
    vectors = as_matrix(vectors, "document embeddings", "[n, d]")
    if len(vectors) < 3:
        raise GraphDocError(f"a map needs at least 3 documents; got {len(vectors)}")
    if not np.isfinite(vectors).all():
        raise GraphDocError("the document embeddings hold NaN or infinite values")
    # identical rows leave t-SNE's PCA start with zero spread: NaN coordinates, and scikit-learn crashes; rows
    # of one text encoded in other batches differ in their last bits (~1e-7), and a map of that is of noise
    spread = np.linalg.norm(vectors - vectors.mean(axis=0), axis=1).max()
    if spread <= IDENTICAL * np.linalg.norm(vectors, axis=1).max():
        raise GraphDocError(f"all {len(vectors)} document embeddings are identical (to float rounding): a map "
                            "needs documents whose vectors differ")
    if method == "auto":
        method = "umap" if importlib.util.find_spec("umap") is not None else "tsne"
    if method == "umap":
        umap = _require("umap", "the umap projection (--method umap)")
        reducer = umap.UMAP(n_components=2, random_state=seed, n_neighbors=min(15, len(vectors) - 1))
        return reducer.fit_transform(vectors), method
    manifold = _require("sklearn.manifold", "t-SNE")
    perplexity = min(30.0, max(1.0, (len(vectors) - 1) / 3))  # t-SNE needs perplexity < n
    tsne = manifold.TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed)
    return tsne.fit_transform(vectors), method


def as_matrix(values: Any, what: str, shape: str) -> np.ndarray:
    """``values`` as a 2-D float32 array; anything else (text, 1-D or 3-D arrays) is refused, naming ``what``."""
    try:
        matrix = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError):
        raise GraphDocError(f"the {what} must be a {shape} array of numbers; got {type(values).__name__}") from None
    if matrix.ndim != 2:
        raise GraphDocError(f"the {what} must be a {shape} array; got shape {list(matrix.shape)}")
    return matrix


def plot_embeddings(vectors: np.ndarray, labels: Sequence[str] | None, path: str | Path, method: str = "auto",
                    seed: int = 0, title: str | None = None, size: tuple[float, float] = (8, 6),
                    dpi: int = 100) -> Path:
    """Save a scatter map of ``vectors`` (``[n, d]``) coloured by ``labels`` as a PNG of ``size * dpi`` pixels; a
    label's whitespace runs show as single spaces, and ``None`` or a blank label is "(no label)"."""
    _check_path(path)
    vectors = as_matrix(vectors, "document embeddings", "[n, d]")
    if isinstance(labels, str):
        raise GraphDocError("labels must be a sequence of labels, one per document, not a str")
    # (" ".join(split()): a blank label is no label, not a class drawn with an empty name)
    labels = [""] * len(vectors) if labels is None else ["" if x is None else " ".join(str(x).split()) for x in labels]
    if len(labels) != len(vectors):
        raise GraphDocError(f"{len(labels)} labels for {len(vectors)} documents")
    coords, used = project_2d(vectors, method, seed)
    figure = _figure(size, dpi)
    ax = figure.add_subplot()
    names = sort_labels(labels)
    if len(names) > MAX_LEGEND:
        logger.warning("%d distinct labels: past %d the colours repeat and the map has no legend",
                       len(names), MAX_LEGEND)
    for k, name in enumerate(names):
        mask = np.array([label == name for label in labels])
        ax.scatter(coords[mask, 0], coords[mask, 1], s=12, color=_colour(k, len(names)),
                   label=name or "(no label)")
    if 1 < len(names) <= MAX_LEGEND:
        ax.legend(fontsize="small", markerscale=1.5, loc="best")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title or f"{len(coords)} document embeddings ({'UMAP' if used == 'umap' else 't-SNE'})")
    return _save(figure, path, dpi)


def sort_labels(labels: Iterable[str]) -> list[str]:
    """The distinct labels in legend order: numbers by value ("4" before "10"), then the others as strings,
    then the empty label (no label)."""
    return sorted(set(labels), key=_label_order)


def _label_order(label: str) -> tuple[int, float, str]:
    if not label:
        return 2, 0.0, label
    try:
        value = float(label)
    except ValueError:
        return 1, 0.0, label
    return (0, value, label) if math.isfinite(value) else (1, 0.0, label)


def label_of(document: Document, field: str, fields: "Fields | None" = None) -> Any:
    """``document``'s value of the record field ``field`` (``None`` when it has none): a metadata field,
    the title (``title``, or the field ``fields`` names for it) or the id (``_id``, ``id``, ``docid``,
    ``doc_id``, or the field named for it), as the corpus was read with ``fields``. A blank string is no label, as a
    blank title is no title (not a class of its own)."""
    if field in document.metadata:
        value = document.metadata[field]
        return None if isinstance(value, str) and not value.strip() else value
    if fields is not None and field in fields.named().values():
        if field == fields.text:
            raise GraphDocError(f"{field!r} is a document's text, not a label")
        return document.id if field == fields.id else document.title or None
    named = fields.named() if fields is not None else {}  # a role named elsewhere: its default keys are metadata
    if field in ID_KEYS and "id" not in named:
        return document.id
    if field == "title" and "title" not in named:
        return document.title or None
    if field in TEXT_KEYS + ("sections",) and "text" not in named:
        raise GraphDocError(f"{field!r} is a document's text, not a label")
    return None


def _colour(k: int, n: int):
    cm = _require("matplotlib", "plotting").colormaps["tab20" if n > 10 else "tab10"]
    return cm(k % cm.N)


def _check_path(path: str | Path) -> Path:
    """Refuse, before any work, a PNG path whose folder is missing or that is a folder."""
    path = Path(path)
    if not path.parent.is_dir():
        raise GraphDocError(f"folder not found for {path}")
    check_output_file(path, "the plot")
    return path


def _save(figure, path: str | Path, dpi: int) -> Path:
    path = _check_path(path)
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, dpi=dpi, format="png")
    return path


def document_attention_layers(model, document) -> tuple[np.ndarray, list[Passage]]:
    """The document node's attention over its passages in every GAT layer: ``[layers, n_passages]``.

    Mean over heads; with no GAT layers, one row of uniform weights (the document node is the mean).
    A flat model has no passage graph, so no such attention: a :class:`GraphDocError`.
    """
    if config_backbone(model.config) == FLAT:
        raise GraphDocError("the model's backbone is flat (the encoder alone): it has no graph attention "
                            "to plot; use a graph model")
    document = as_document(document, 0)
    check_has_text(document)
    cut_before = model.chunker.counts()
    out = next(iter(model.iter_forward([document], batch_size=1, return_attention_weights=True)))
    model.chunker.warn_cut(cut_before, done="plotted")
    layers = range(len(out.attention)) if out.attention else [None]
    rows = [out.document_attention(0) if layer is None else out.document_attention(0, layer) for layer in layers]
    return torch.stack([r.float().cpu() for r in rows]).numpy(), out.documents[0].passages


def plot_attention(weights: np.ndarray, path: str | Path, passages: Sequence[Passage] | None = None,
                   title: str | None = None, size: tuple[float, float] = (10, 3), dpi: int = 100) -> Path:
    """Save a heatmap of ``weights`` (``[layers, n_passages]``) as a PNG; section starts are ticked."""
    _check_path(path)
    weights = as_matrix(np.atleast_2d(weights), "attention weights", "[layers, n_passages]")
    if weights.size == 0:
        raise GraphDocError(f"no attention weights to plot: shape {list(weights.shape)}")
    if not np.isfinite(weights).all():
        raise GraphDocError("the attention weights hold NaN or infinite values")
    if passages is not None and len(passages) != weights.shape[1]:
        raise GraphDocError(f"{len(passages)} passages for {weights.shape[1]} attention weights per layer")
    figure = _figure(size, dpi)
    ax = figure.add_subplot()
    image = ax.imshow(weights, aspect="auto", cmap="viridis", interpolation="nearest")
    figure.colorbar(image, ax=ax, label="attention")
    ax.set_yticks(range(len(weights)), [f"layer {i + 1}" for i in range(len(weights))])
    ax.set_xlabel("passage")
    ax.xaxis.set_major_locator(_require("matplotlib.ticker", "plotting").MaxNLocator(integer=True, min_n_ticks=1))
    starts = _section_starts(passages or [])
    if len(starts) > 1:
        labelled = _spread(starts, weights.shape[1])
        ax.set_xticks([i for i, _ in labelled], [t[:24] for _, t in labelled], rotation=30, ha="right",
                      fontsize="small")
        for i, _ in starts[1:]:
            ax.axvline(i - 0.5, color="white", linewidth=0.8)
    ax.set_title(title or "document node attention over passages")
    return _save(figure, path, dpi)


def _spread(starts: list[tuple[int, str]], n: int) -> list[tuple[int, str]]:
    """The section starts to label: each at least ``n / MAX_SECTION_LABELS`` passages after the last one
    labelled, so that the titles do not overlap."""
    gap, kept = n / MAX_SECTION_LABELS, [starts[0]]
    for start in starts[1:]:
        if start[0] - kept[-1][0] >= gap:
            kept.append(start)
    return kept


def _section_starts(passages: Sequence[Passage]) -> list[tuple[int, str]]:
    starts, last = [], None
    for row, p in enumerate(passages):
        if p.section != last:
            starts.append((row, p.section_title or f"section {p.section}"))
            last = p.section
    return starts
