"""``graphdoc plot``: PNG figures of a corpus's document embeddings and of a document's attention.

``graphdoc plot embeddings --corpus C --labels-field label --output map.png`` draws a t-SNE map (UMAP
when installed) coloured by a field of the records; ``graphdoc plot attention --corpus C --id DOC
--output att.png`` draws the document node's attention over the passages of one document, per layer.
Needs the optional extra: ``pip install 'graphdoc[plot]'``.
"""

from __future__ import annotations

import argparse
from itertools import islice
from pathlib import Path

from graphdoc.cli.common import add_field_arguments, add_model_arguments, fields_from, load_model, logger
from graphdoc.errors import GraphDocError
from graphdoc.fileio import check_output_file, replacing


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("plot", help="PNG figures: embedding map, attention heatmap", description=__doc__)
    kinds = parser.add_subparsers(dest="figure", metavar="FIGURE", required=True)
    emb = kinds.add_parser("embeddings", help="2-D map of document embeddings coloured by label")
    emb.add_argument("--corpus", required=True, help="corpus file, folder or name")
    emb.add_argument("--labels-field", default=None, metavar="FIELD",
                     help="record field holding each document's label (default: no colours)")
    emb.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N documents")
    emb.add_argument("--method", choices=("auto", "tsne", "umap"), default="auto",
                     help="auto: UMAP when umap-learn is installed, else t-SNE")
    emb.add_argument("--seed", type=int, default=0, help="random seed of the projection, 0..2**32-1 (default: 0)")
    emb.add_argument("--output", required=True, type=Path, metavar="FILE.png")
    add_field_arguments(emb)
    add_model_arguments(emb)
    _add_log_options(emb)
    emb.set_defaults(func=run_embeddings)
    att = kinds.add_parser("attention", help="the document node's attention over one document's passages")
    att.add_argument("--corpus", required=True, help="corpus file, folder or name")
    att.add_argument("--id", required=True, dest="doc_id", metavar="DOC", help="the document's id")
    att.add_argument("--output", required=True, type=Path, metavar="FILE.png")
    add_field_arguments(att)
    add_model_arguments(att, batches=False)
    _add_log_options(att)
    att.set_defaults(func=run_attention)


def _add_log_options(parser: argparse.ArgumentParser) -> None:
    """-v / -q after the figure too: ``graphdoc.cli.build_parser`` adds them to ``plot`` itself, whose
    arguments end at the figure's name."""
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log debug messages")
    parser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="only warnings and errors; no progress bars")


def _check_output(path: Path) -> None:
    if path.suffix.lower() != ".png":
        raise GraphDocError(f"--output must end in .png; got {path}")
    check_output_file(path)


def run_embeddings(args: argparse.Namespace) -> int:
    from graphdoc.corpus import read_corpus
    from graphdoc.explain.plot import (
        check_seed,
        label_of,
        plot_embeddings,
        require_plotting,
    )

    _check_output(args.output)
    check_seed(args.seed, "--seed")
    require_plotting(args.method)
    if args.limit is not None and args.limit < 3:
        raise GraphDocError(f"--limit must be at least 3; got {args.limit}")
    fields = fields_from(args)
    docs = list(islice(read_corpus(args.corpus, fields=fields), args.limit))
    if len(docs) < 3:  # before loading the model
        raise GraphDocError(f"a map needs at least 3 documents; {args.corpus} has {len(docs)}")
    field = args.labels_field
    labels = [label_of(d, field, fields) for d in docs] if field else None
    if labels is not None and all(label is None for label in labels):  # (label_of: a blank one is none)
        what = "a title" if field == "title" else f"a {field!r} field"  # a blank title is no title
        raise GraphDocError(f"no document of {args.corpus} has {what}")
    vectors = load_model(args, passages=False).encode(docs, batch_size=args.batch_size,
                                                     show_progress_bar=not args.quiet)
    note = replacing(args.output)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    plot_embeddings(vectors, labels, args.output, method=args.method, seed=args.seed)
    logger.info("mapped %d documents", len(docs))
    logger.info("wrote %s%s", args.output, note)
    return 0


def run_attention(args: argparse.Namespace) -> int:
    from graphdoc.cli.compare import read_from_corpus
    from graphdoc.explain.plot import (
        document_attention_layers,
        plot_attention,
        require_plotting,
    )

    _check_output(args.output)
    require_plotting()
    document = read_from_corpus(args.corpus, [args.doc_id], fields_from(args))[0]
    weights, passages = document_attention_layers(load_model(args), document)
    note = replacing(args.output)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    plot_attention(weights, args.output, passages, title=f"{document.title or document.id}: "
                   "document node attention over passages")
    logger.info("wrote %s%s", args.output, note)
    return 0
