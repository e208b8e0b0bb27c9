"""``graphdoc pretrain``: contrastive pretraining on unlabelled documents; the model ends in OUTPUT/model.

Graph models train with ``half``, ``ict`` or ``docsplit``; flat models (``--backbone flat``) with
``docsplit`` (plus 0.1 x masked language modelling), ``simcse`` or ``crop``. Run data-parallel with
``torchrun --nproc_per_node N -m graphdoc pretrain ...``.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from graphdoc.backbones import BACKBONES
from graphdoc.cli.common import DEVICE_HELP, PRECISION_HELP, add_field_arguments, fields_from, logger
from graphdoc.config import PRECISIONS
from graphdoc.errors import GraphDocError
from graphdoc.training.config import OBJECTIVES


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("pretrain", help="pretrain a model contrastively on unlabelled documents",
                            description=__doc__)
    parser.add_argument("--corpus", action="append", metavar="PATH_OR_NAME",
                        help="JSON lines, CSV/TSV, BEIR folder, text folder, MediaWiki dump or a named corpus such as "
                             "openwebtext; repeat to read several in turn (with --resume: default, those the run "
                             "read)")
    parser.add_argument("--output", required=True, metavar="DIR",
                        help="run folder: checkpoints, log.csv, and the trained model in DIR/model")
    parser.add_argument("--config", default=None, metavar="YAML",
                        help="pretraining config with 'model' and 'pretrain' sections (a file, or a built-in one by "
                             "name: pretrain-default, pretrain-paper, docsplit-minilm, docsplit-bert, "
                             "docsplit-longformer)")
    parser.add_argument("--model", default=None, metavar="NAME_OR_DIR",
                        help="start from this graphdoc model or Hugging Face encoder instead of the config's")
    parser.add_argument("--backbone", choices=tuple(BACKBONES), default=None,
                        help="graph: GAT layers over passage graphs; flat: the encoder alone (default: the "
                             "--model's own if it is a saved model, else the config's, else graph)")
    parser.add_argument("--objective", choices=OBJECTIVES, default=None,
                        help="graph: half, ict, docsplit; flat: docsplit, simcse, crop (overrides the config)")
    parser.add_argument("--frozen-encoder", action=argparse.BooleanOptionalAction, default=None,
                        help="train the graph layers only, over cached passage vectors (overrides the config; "
                             "without --config the encoder trains too)")
    parser.add_argument("--max-steps", type=int, default=None, metavar="N", help="overrides the config")
    parser.add_argument("--max-seconds", type=float, default=None, metavar="S",
                        help="stop once the training loop has run S seconds (overrides the config)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="N",
                        help="documents per step over all processes (overrides the config)")
    parser.add_argument("--epochs", type=int, default=None, metavar="N", help="overrides the config")
    parser.add_argument("--seed", type=int, default=None, metavar="N",
                        help="seeds the heads trained beside the model, the shuffle and the sub-documents drawn "
                             "(overrides the config; default 42; a model built on a plain encoder starts its graph "
                             "layers the same whatever the seed)")
    parser.add_argument("--cache-dir", default=None, metavar="DIR",
                        help="passage vector cache of the frozen mode (default DIR/passage_cache)")
    add_field_arguments(parser, recorded="with --resume, those the run recorded")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the latest checkpoint in --output, with the run's recorded settings, "
                             "corpus, start model and precision; options given apply on top and must match the "
                             "run's (but --max-seconds and --cache-dir)")
    parser.add_argument("--device", default=None, help=DEVICE_HELP)
    parser.add_argument("--precision", choices=PRECISIONS, default=None, help=PRECISION_HELP)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graphdoc.fileio import check_recorded_inputs
    from graphdoc.training import pretrain
    from graphdoc.training.run_folder import recorded_run

    rank = int(os.environ.get("RANK", "0"))
    if rank != 0 and not args.verbose:  # under torchrun process 0 logs; the others would repeat its lines
        logging.getLogger().setLevel(logging.ERROR)
    if not args.output.strip():  # Path("") is the working folder
        raise GraphDocError("--output is empty: name the run's folder")
    args.output = Path(args.output)
    if args.output.exists() and not args.output.is_dir():
        raise GraphDocError(f"--output {args.output} exists and is not a folder")
    recorded = recorded_run(args.output) if args.resume else None
    corpus = args.corpus or _recorded_corpus(recorded, args)
    model = args.model or (recorded.model if recorded else None)
    check_recorded_inputs(args.output, {"--corpus": None if args.corpus else corpus,
                                        "--model": None if args.model else model})
    precision = args.precision or (recorded.precision if recorded else None)
    setup = _setup(args, model, recorded.setup if recorded else None)
    result = pretrain(corpus, args.output, setup, model=model, resume=args.resume, device=args.device,
                      precision=precision, show_progress_bar=not args.quiet, fields=fields_from(args))
    if rank != 0:
        return 0  # under torchrun, process 0 reports
    logger.info("%s (%d empty and %d too short documents skipped); %.1f documents/s, %.2f steps/s, peak memory "
                "%.0f MiB", describe_run(result), result.empty_skipped, result.one_passage_skipped,
                result.documents_per_s, result.steps_per_s, result.peak_cuda_mib or result.peak_rss_mib)
    if result.time_up:
        logger.warning("stopped by the time budget (max_seconds) after step %d of %d", result.steps,
                       result.total_steps)
    logger.info("model saved in %s", result.model_dir)
    return 0


def _setup(args: argparse.Namespace, model: str | None, recorded):
    """The run's settings: on resume without ``--config`` the ``recorded`` ones (naming ``model``, the start model
    loaded), else the config file's (or the defaults), as a new run reads them; the options given on top (a resume
    checks them against the run's)."""
    from dataclasses import replace

    from graphdoc.serialization import saved_backbone
    from graphdoc.training import load_setup

    backbone = args.backbone or saved_backbone(model)
    if recorded is not None and args.config is None:
        setup = recorded
        if model is not None:  # (recorded as the run was given it, maybe a path relative to another folder)
            encoder = replace(setup.model.passage_encoder, model_name_or_path=model)
            setup = replace(setup, model=replace(setup.model, passage_encoder=encoder))
    else:
        setup = load_setup(args.config, backbone)
    if backbone is not None:
        setup = setup.with_backbone(backbone)
    return setup.with_overrides(
        objective=args.objective, frozen_encoder=args.frozen_encoder, max_steps=args.max_steps,
        max_seconds=args.max_seconds,
        batch_size=args.batch_size, epochs=args.epochs, seed=args.seed, cache_dir=args.cache_dir)


def _recorded_corpus(recorded, args: argparse.Namespace) -> list[str]:
    """The corpus a resumed run read, when ``--corpus`` is not given (one error line when it is not known)."""
    if not args.resume:
        raise GraphDocError("--corpus is needed: the documents to pretrain on")
    if recorded is None:
        raise GraphDocError(f"--corpus is needed: {args.output} holds no checkpoint of a pretraining run to take it "
                            "from")
    if not recorded.sources:
        raise GraphDocError(f"--corpus is needed: the checkpoint in {args.output} is from a graphdoc that did not "
                            "record the corpus paths")
    return recorded.sources


def describe_run(result) -> str:
    """``400 steps, 20 epochs over 80 documents``; within the first epoch ``3 steps over 12 documents``."""
    steps = _plural(result.steps, "step")
    if result.epoch == 0 or not result.distinct_documents:  # the corpus's size is known after one epoch
        return f"{steps} over {_plural(result.documents_used, 'document')}"
    epochs = round(result.documents_used / result.distinct_documents, 2)
    return f"{steps}, {_plural(epochs, 'epoch')} over {_plural(result.distinct_documents, 'document')}"


def _plural(count: float, noun: str) -> str:
    return f"{count:,g} {noun}" + ("" if count == 1 else "s")
