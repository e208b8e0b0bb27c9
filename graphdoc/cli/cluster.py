"""``graphdoc cluster``: group a corpus's documents by their embeddings (spherical k-means).

Writes one ``id<TAB>cluster`` line per document (with ``--labels-field``, a third column holds its label) and
prints each cluster's size and the document nearest its centre; with ``--labels-field``, also how well the
clusters agree with the labels (NMI, ARI, purity; needs scikit-learn) and each cluster's most common label.
``--embeddings FILE.npy`` takes the vectors a ``graphdoc embed`` run wrote for the same corpus instead of
embedding it again.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections import Counter
from pathlib import Path

from graphdoc.cli.common import add_field_arguments, add_model_arguments, counted, fields_from, load_model, logger
from graphdoc.errors import GraphDocError


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("cluster", help="group a corpus's documents by their embeddings", description=__doc__)
    parser.add_argument("--corpus", required=True, metavar="PATH_OR_NAME", help="the documents (any corpus format)")
    parser.add_argument("--clusters", "-k", required=True, type=int, metavar="K", help="how many clusters")
    parser.add_argument("--output", required=True, type=Path, metavar="FILE.tsv",
                        help="id<TAB>cluster lines, clusters numbered by size from 0 (-: standard output)")
    parser.add_argument("--embeddings", type=Path, default=None, metavar="FILE.npy",
                        help="vectors of the corpus written by graphdoc embed (its FILE.ids.txt must list the "
                             "corpus's documents in order); default: embed them with the model")
    parser.add_argument("--labels-field", default=None, metavar="FIELD",
                        help="a record field holding each document's known class: scores the clusters against it")
    parser.add_argument("--seed", type=int, default=0, help="seed of the k-means starts (default 0)")
    parser.add_argument("--n-init", type=int, default=3, metavar="N",
                        help="k-means runs from different starts; the tightest is kept (default 3)")
    add_model_arguments(parser)
    add_field_arguments(parser)
    parser.set_defaults(func=run, batch_size=None)  # (None: not given, which --embeddings needs to tell; 32)


def run(args: argparse.Namespace) -> int:
    from graphdoc.clustering import cluster_scores, kmeans
    from graphdoc.corpus import corpus_files, read_corpus
    from graphdoc.explain.plot import label_of
    from graphdoc.fileio import atomic_write, check_not_an_input, check_output_file, is_stdio, replacing

    for flag, value, low in (("--clusters", args.clusters, 2), ("--n-init", args.n_init, 1), ("--seed", args.seed, 0)):
        if value < low:
            raise GraphDocError(f"{flag} must be at least {low}; got {value}")
    if args.seed >= 2**31:
        raise GraphDocError(f"--seed must be below 2^31; got {args.seed}")
    to_stdout = is_stdio(args.output)
    if not to_stdout:
        check_output_file(args.output)
        check_not_an_input(args.output, [*corpus_files(args.corpus), args.embeddings], what="the clusters")
    if args.embeddings is not None:
        unused = [flag for flag, value in (("--model", args.model), ("--config", args.config),
                                           ("--backbone", args.backbone), ("--flat-document", args.flat_document),
                                           ("--max-passages", args.max_passages), ("--device", args.device),
                                           ("--precision", args.precision), ("--batch-size", args.batch_size))
                  if value is not None]
        if unused:
            raise GraphDocError(f"{unused[0]} is not used with --embeddings (the vectors are read, not embedded)")
    fields = fields_from(args)
    docs = list(read_corpus(args.corpus, fields=fields))
    if len(docs) < args.clusters:
        raise GraphDocError(f"cannot make {args.clusters} clusters of the {len(docs)} documents of {args.corpus}")
    tabbed = next((doc.id for doc in docs if "\t" in doc.id), None)
    if tabbed is not None:
        raise GraphDocError(f"document id {tabbed!r} holds a tab: it cannot go into id<TAB>cluster lines")
    labels = None
    if args.labels_field is not None:
        labels = [_label_text(label_of(doc, args.labels_field, fields)) for doc in docs]
        if all(label is None for label in labels):
            raise GraphDocError(f"no document of {args.corpus} has a {args.labels_field!r} field")
    if args.embeddings is not None:
        vectors = _read_embeddings(args.embeddings, [doc.id for doc in docs])
    else:
        vectors = load_model(args, passages=False).encode(
            docs, batch_size=32 if args.batch_size is None else args.batch_size, show_progress_bar=not args.quiet)
    found = kmeans(vectors, args.clusters, seed=args.seed, n_init=args.n_init)
    note = "" if to_stdout else replacing(args.output)
    with contextlib.nullcontext(sys.stdout) if to_stdout else atomic_write(args.output, "w",
                                                                           encoding="utf-8") as handle:
        for row, doc in enumerate(docs):
            label = "" if labels is None else f"\t{labels[row] if labels[row] is not None else ''}"
            handle.write(f"{doc.id}\t{found.assignments[row]}{label}\n")
    with contextlib.redirect_stdout(sys.stderr if to_stdout else sys.stdout):  # stdout holds the clusters then
        if labels is not None:
            scores = cluster_scores(labels, found.assignments)
            unlabelled = len(docs) - scores["documents"]
            left = f" ({counted(unlabelled, 'documents')} without a label left out)" if unlabelled else ""
            print(f"against {args.labels_field}: NMI {scores['NMI']:.4f}  ARI {scores['ARI']:.4f}  "
                  f"purity {scores['purity']:.4f}{left}")
        for cluster, size in enumerate(found.sizes):
            if not size:  # (k-means left it empty)
                print(f"cluster {cluster}: 0 documents")
                continue
            near = docs[found.nearest[cluster]]
            title = f" {' '.join(near.title.split())[:60]!r}" if near.title.strip() else ""
            common = ""
            if labels is not None:
                counts = Counter(label for label, c in zip(labels, found.assignments) if c == cluster
                                 and label is not None)
                if counts:  # (the share of its documents that have a label)
                    label, n = counts.most_common(1)[0]
                    common = f"; most common {args.labels_field}: {label} ({n / sum(counts.values()):.0%})"
            print(f"cluster {cluster}: {counted(size, 'documents')}; nearest its centre: {near.id}{title}{common}")
    logger.info("wrote the clusters of %s to %s%s", counted(len(docs), "documents"),
                "standard output" if to_stdout else args.output, note)
    return 0


def _label_text(label) -> str | None:
    """A label as one TSV cell: a string with its whitespace runs as single spaces (a tab or a line break would
    break the line), anything else as JSON (``1``, ``true``, ``["a", "b"]``); ``None`` for no label (``label_of``'s
    ``None``, a blank string's too)."""
    import json

    if label is None:
        return None
    return " ".join((label if isinstance(label, str) else json.dumps(label, ensure_ascii=False)).split())


def _read_embeddings(path: Path, ids: list[str]):
    """The vectors of ``path`` (a graphdoc embed output), checked against the corpus's document ``ids``."""
    import numpy as np

    from graphdoc.cli.embed import ids_path

    if path.suffix != ".npy":
        raise GraphDocError(f"--embeddings {path}: name a .npy file written by graphdoc embed")
    ids_file = ids_path(path)
    for file in (path, ids_file):
        if not file.is_file():
            raise GraphDocError(f"--embeddings: {file} not found" + (" (graphdoc embed writes it beside the .npy)"
                                                                     if file == ids_file else ""))
    try:
        vectors = np.load(path, allow_pickle=False)
        written = ids_file.read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError, EOFError) as exc:
        raise GraphDocError(f"--embeddings {path}: cannot be read ({exc})") from None
    if vectors.ndim != 2:
        raise GraphDocError(f"--embeddings {path}: an array of shape {vectors.shape}, not [documents, dimension] "
                            "as graphdoc embed writes")
    if vectors.dtype.kind not in "fiu":  # (complex, bool, text, records: not vectors to read as float32)
        raise GraphDocError(f"--embeddings {path}: an array of {vectors.dtype}, not of real numbers as graphdoc "
                            "embed writes")
    if len(vectors) != len(written):
        raise GraphDocError(f"--embeddings {path}: {len(vectors)} rows for the {len(written)} ids of {ids_file.name}")
    if written != ids:
        row = next((i for i, (a, b) in enumerate(zip(written, ids)) if a != b), min(len(written), len(ids)))
        both = min(len(written), len(ids))
        shown = (f"row {row} is {written[row]!r} there, {ids[row]!r} in the corpus" if row < both
                 else f"{len(written)} ids there, {len(ids)} documents in the corpus")
        raise GraphDocError(f"--embeddings {path} is not of this corpus: {shown} (embed the corpus again, or "
                            "leave --embeddings out)")
    return _finite(path, vectors, ids)


def _finite(path: Path, vectors, ids: list[str]):
    """``vectors`` as float32, refused in one line naming the file and a document when a row is not finite."""
    import numpy as np

    with np.errstate(over="ignore"):  # (a value past float32's range is infinite there: refused below)
        matrix = vectors.astype(np.float32, copy=False)
    bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
    if len(bad):
        more = f" and {counted(len(bad) - 1, 'other rows')}" if len(bad) > 1 else ""
        raise GraphDocError(f"--embeddings {path}: row {bad[0]} (document {ids[bad[0]]!r}){more} "
                            f"{'hold' if more else 'holds'} NaN or infinite values; embed the corpus again")
    return matrix
