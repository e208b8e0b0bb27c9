"""``graphdoc embed``: one float32 row per document in a .npy file, ids in row order beside it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from graphdoc.cli.common import add_model_arguments, load_model, logger
from graphdoc.errors import GraphDocError
from graphdoc.fileio import atomic_write, check_output_file, replacing
from graphdoc.progress import progress_bar


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("embed", help="embed every document of a corpus into a .npy file",
                            description=__doc__)
    parser.add_argument("--corpus", required=True, help="JSON lines (.jsonl or .json, plain or .gz/.bz2/.xz), "
                        "BEIR folder, folder of .txt/.md/.markdown files, MediaWiki dump (.xml[.bz2]), or corpus name")
    parser.add_argument("--output", required=True, type=Path, metavar="FILE.npy")
    parser.add_argument("--normalize", action="store_true", help="L2-normalise the embeddings")
    add_model_arguments(parser)
    parser.set_defaults(func=run)


def ids_path(output: Path) -> Path:
    """``emb.npy`` -> ``emb.ids.txt``."""
    return output.with_name(output.name[:-len(".npy")] + ".ids.txt")


def run(args: argparse.Namespace) -> int:
    from graphdoc.corpus import ReadStats, check_outside_corpus, read_corpus

    if not args.output.name.lower().endswith(".npy"):
        raise GraphDocError(f"--output must end in .npy; got {args.output}")
    if args.batch_size < 1:
        raise GraphDocError(f"--batch-size must be at least 1; got {args.batch_size}")
    check_output_file(args.output)
    check_output_file(ids_path(args.output), "the ids file")
    check_outside_corpus(args.corpus, ids_path(args.output), "--output's ids file", "it")
    stats = ReadStats()
    documents = read_corpus(args.corpus, stats=stats)  # a missing or unknown corpus fails here, at once
    model = load_model(args)
    ids: list[str] = []
    rows: list[np.ndarray] = []

    def tracked():
        for doc in documents:
            ids.append(doc.id)
            yield doc

    with progress_bar(desc="Embedding", unit="doc", disable=args.quiet, delay=1) as bar:
        for out in model.iter_forward(tracked(), batch_size=args.batch_size, document_only=True):
            vectors = out.document_embeddings.float()
            if args.normalize:
                vectors = vectors / vectors.norm(dim=-1, keepdim=True).clamp(min=1e-12)
            rows.append(vectors.cpu().numpy())
            bar.update(len(out.documents))
    if not ids:
        raise GraphDocError(f"no documents to embed in {args.corpus}")
    matrix = np.concatenate(rows).astype(np.float32, copy=False)
    note = replacing(args.output)
    # both written out before either replaces its file (the ids flushed and synced first: a full disk shows there,
    # not after the matrix is in); then the matrix goes in, then its ids
    with atomic_write(ids_path(args.output), "w", encoding="utf-8") as id_file:
        id_file.write("".join(f"{i}\n" for i in ids))
        id_file.flush()
        os.fsync(id_file.fileno())
        with atomic_write(args.output, "wb") as matrix_file:
            np.save(matrix_file, matrix)
    model.chunker.warn_cut()
    logger.info("wrote %d x %d embeddings to %s%s and ids to %s", *matrix.shape, args.output, note,
                ids_path(args.output))
    return 0
