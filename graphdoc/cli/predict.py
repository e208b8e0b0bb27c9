"""``graphdoc predict``: labels and class probabilities of documents with a fine-tuned classifier (JSON lines)."""

from __future__ import annotations

import argparse
from pathlib import Path

from graphdoc.cli.common import (
    DEVICE_HELP,
    add_field_arguments,
    fields_from,
    logger,
    saved_embeds_no_passages,
    warn_max_passages_unused,
)
from graphdoc.errors import GraphDocError


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("predict", help="classify documents with a fine-tuned classifier", description=__doc__)
    parser.add_argument("--model", required=True, metavar="DIR", help="a classifier saved by graphdoc finetune")
    parser.add_argument("--input", required=True, metavar="PATH", help="documents (JSON lines, text folder, ...)")
    parser.add_argument("--output", required=True, type=Path, metavar="JSONL",
                        help='one {"id", "label", "probabilities"} line per document (-: standard output)')
    parser.add_argument("--batch-size", type=int, default=32, metavar="N")
    parser.add_argument("--max-passages", type=int, default=None, metavar="N",
                        help="passages kept per document (default: the number the classifier was trained and "
                             "scored with, so predictions reproduce its dev score; a classifier saved before "
                             "graphdoc recorded it: its encoder's chunker max_passages)")
    parser.add_argument("--device", default=None, help=DEVICE_HELP)
    add_field_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graphdoc.fileio import is_stdio, replacing
    from graphdoc.finetune import predict
    from graphdoc.finetune.classifier import ENCODER_DIR
    from graphdoc.finetune.predict import check_output

    for flag, value in (("--batch-size", args.batch_size), ("--max-passages", args.max_passages)):
        if value is not None and value < 1:
            raise GraphDocError(f"{flag} must be a positive integer; got {value}")
    if args.max_passages is not None and saved_embeds_no_passages(Path(args.model) / ENCODER_DIR):
        warn_max_passages_unused()
    to_stdout = is_stdio(args.output)
    if not to_stdout:
        check_output(args.model, args.output, "--output", source=args.input)
    note = "" if to_stdout else replacing(args.output)
    count = predict(args.model, args.input, args.output, args.batch_size, args.max_passages, args.device,
                    show_progress_bar=not args.quiet, fields=fields_from(args))
    logger.info("%d documents classified into %s%s", count, "standard output" if to_stdout else args.output, note)
    return 0
