"""``graphdoc index``: build (resume, extend) an index folder: FAISS + BM25 + document store.

Without ``--model`` (or ``--config``/``--backbone``), an existing index is extended or resumed with its own model.
``--stop-reading CORPUS`` (instead of ``--corpus``) keeps what an interrupted run read of a corpus that cannot be
read again as it was (changed, gone, or documents in memory now lost), reads no more of it, and finalises the index.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from graphdoc.cli.common import (add_field_arguments, add_model_arguments, counted, fields_from, load_model, logger,
                                  max_passages_given, stdin_corpus)
from graphdoc.errors import GraphDocError


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("index", help="index a corpus for dense, BM25 and hybrid search", description=__doc__)
    read = parser.add_mutually_exclusive_group(required=True)
    read.add_argument("--corpus", help="a local corpus (JSON lines, CSV/TSV, BEIR folder, "
                      "text folder, MediaWiki dump), a dataset name (msmarco-document, robust04, wikir/en59k, ...), "
                      "or - for JSON lines piped in (read whole, then indexed as documents in memory: the same "
                      "lines piped again resume or add nothing)")
    read.add_argument("--stop-reading", metavar="CORPUS",
                      help="keep the documents of CORPUS (named as graphdoc info names it: a path, a dataset name or "
                           "memory:sha256:...) that an interrupted run read, read no more of it, and finalise the "
                           "index; the corpus need not exist (with --shard: that part only)")
    parser.add_argument("--index-dir", required=True, type=Path)
    parser.add_argument("--faiss-factory", default=None, metavar="STR",
                        help="FAISS index_factory string (default Flat: exact inner product), e.g. HNSW32; "
                             "can be changed until the index is finalised")
    parser.add_argument("--metric", choices=("cosine", "ip"), default=None,
                        help="default cosine (ip for a model fine-tuned with dot products)")
    parser.add_argument("--shard", default=None, metavar="I/N", help="build part I of N (join with graphdoc merge)")
    parser.add_argument("--shard-size", type=int, default=None, metavar="N",
                        help="documents per resumable shard (default: the size the index recorded, 1000 for a new "
                             "one; a size given is recorded for the runs after it)")
    parser.add_argument("--on-duplicate", choices=("error", "skip", "replace"), default=None,
                        help="an id already in the index: refuse (default), skip it, or replace the old one")
    parser.add_argument("--no-passages", action="store_true",
                        help="do not keep passage vectors (smaller; no passage-level scores or explanations)")
    parser.add_argument("--bm25-stemmer", default=None, help="PyStemmer algorithm, e.g. english (default none; fixed once the index is finalised)")
    parser.add_argument("--bm25-terms", choices=("unicode", "bm25s"), default=None,
                        help="how BM25 finds terms: unicode (default) or bm25s, the terms of indexes built before "
                             "graphdoc had this setting, for a part to merge with theirs (fixed once the index is "
                             "finalised)")
    add_field_arguments(parser, recorded="those the index recorded for this corpus")
    add_model_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graphdoc.retrieval.bm25 import BM25Config
    from graphdoc.retrieval.builder import IndexSettings, build_index

    if args.stop_reading is not None:
        return _stop_reading(args)
    # checked here, before the model loads; None keeps an existing index's own setting
    given = args.bm25_stemmer is not None or args.bm25_terms is not None
    stemmer = args.bm25_stemmer
    if given and stemmer is None:  # --bm25-terms alone: an existing index keeps its own stemmer
        stemmer = _stored_bm25(args.index_dir).get("stemmer")
    bm25 = BM25Config(stemmer=stemmer, terms=args.bm25_terms) if given else None
    settings = IndexSettings(faiss_factory=args.faiss_factory, metric=args.metric, bm25=bm25,
                             store_passages=not args.no_passages, shard_size=args.shard_size,
                             on_duplicate=args.on_duplicate or "error")
    fields = fields_from(args)
    corpus = stdin_corpus("index", fields) if args.corpus == "-" else args.corpus  # (read before the model loads)
    model = _model(args)
    manifest = build_index(model, corpus, args.index_dir, settings, part=args.shard or "1/1",
                           batch_size=args.batch_size, show_progress_bar=not args.quiet, fields=fields)
    _print_counts(args.index_dir, manifest)
    return 0


#: options that say how to read or encode a corpus, which --stop-reading (reading none) refuses
_READING_OPTIONS = ("metric", "shard_size", "on_duplicate", "no_passages", "bm25_stemmer", "bm25_terms", "id_field",
                    "text_field", "title_field", "model", "config", "backbone", "flat_document", "max_passages",
                    "device", "precision")


def _stop_reading(args: argparse.Namespace) -> int:
    """``--stop-reading CORPUS``: keep what an interrupted run read of it, and finalise the index."""
    from graphdoc.retrieval.stopping import stop_reading

    given = next((name for name in _READING_OPTIONS if getattr(args, name, None) not in (None, False)), None)
    if given is not None:
        raise GraphDocError(f"--stop-reading reads and encodes nothing: --{given.replace('_', '-')} does not apply "
                            "(leave it out)")
    manifest = stop_reading(args.index_dir, args.stop_reading, args.shard, faiss_factory=args.faiss_factory,
                            show_progress_bar=not args.quiet)
    _print_counts(args.index_dir, manifest)
    return 0


def _print_counts(index_dir: Path, manifest) -> None:
    counts = manifest.counts
    print(f"{index_dir}: " + ", ".join(counted(counts.get(what, 0), what) for what in
                                       ("documents", "passages", "shards")))
    logger.debug("manifest: %s", manifest)


def _stored_bm25(index_dir: Path) -> dict:
    """The BM25 setting of the index in ``index_dir`` (``{}`` where there is none yet)."""
    from graphdoc.retrieval.manifest import MANIFEST_NAME, Manifest

    return Manifest.load(index_dir).bm25 or {} if (index_dir / MANIFEST_NAME).is_file() else {}


def _model(args: argparse.Namespace):
    """The model of ``--model``/``--config``/``--backbone``; with none of them, an existing index's own model (adding
    documents to it, or resuming its build), as ``graphdoc search`` takes it."""
    from graphdoc.retrieval.manifest import MANIFEST_NAME, Manifest

    named = any(x is not None for x in (args.model, args.config, args.backbone))
    identity = Manifest.load(args.index_dir).model \
        if not named and (args.index_dir / MANIFEST_NAME).is_file() else None
    if identity and args.flat_document is not None:  # no model named: it would be the default, not the index's
        raise GraphDocError(f"--flat-document sets the document mode of --model; {args.index_dir} keeps the model and "
                            "mode it was built with: leave --flat-document out to add to it")
    given, cap = max_passages_given(args)
    if identity and given and cap != identity.get("chunker", {}).get("max_passages"):
        raise GraphDocError(f"{args.index_dir} was built with a cap of "
                            f"{identity.get('chunker', {}).get('max_passages') or 'no'} passages a document: adding "
                            f"documents keeps it (leave --max-passages out, or build another index)")
    if identity:  # an index holding no documents yet binds no model
        from graphdoc.backbones import load_index_model

        logger.info("%s: using the model it was built with, %s", args.index_dir,
                    identity.get("path") or identity.get("name"))
        model = load_index_model(identity, device=args.device)
        if args.precision is not None:
            model.passage_encoder.config.precision = args.precision
        return model
    return load_model(args)
