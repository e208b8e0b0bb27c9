"""Contrastive pretraining of graphdoc models on unlabelled documents.

Example::

    import graphdoc
    from graphdoc.training import load_setup, pretrain

    setup = load_setup("pretrain-default")          # a graph model, objective half
    result = pretrain(["corpus.jsonl.gz"], "runs/pretrain", setup)
    model = graphdoc.load_model(result.model_dir)

    setup = load_setup("docsplit-minilm")           # a flat model, docsplit + 0.1 x MLM
    result = pretrain(["corpus.jsonl.gz"], "runs/docsplit", setup)

Run it over several processes with ``torchrun --nproc_per_node N -m graphdoc pretrain ...``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from graphdoc.training.config import PretrainConfig, PretrainSetup, load_setup
from graphdoc.training.result import PretrainResult

if TYPE_CHECKING:
    from graphdoc.corpus import Fields
    from torch import nn

__all__ = ["PretrainConfig", "PretrainResult", "PretrainSetup", "load_setup", "pretrain"]

logger = logging.getLogger(__name__)


def pretrain(corpus: str | Sequence[str], output: str | Path, setup: PretrainSetup | None = None, *,
             model: "nn.Module | str | None" = None, resume: bool = False, device: str | None = None,
             precision: str | None = None, show_progress_bar: bool | None = None,
             fields: "Fields | None" = None) -> PretrainResult:
    """Pretrain a graphdoc model (``setup.backbone``: graph or flat) contrastively on the documents of ``corpus``.

    Args:
        corpus: one source or several, read in turn: JSON lines, BEIR folder, text folder, MediaWiki
            dump, or a named corpus such as ``openwebtext`` (streamed; needs ``max_steps``).
        output: the run's folder; the trained model ends in ``output/model``.
        setup: the model to build and the training settings (default: :class:`PretrainSetup()`).
        model: start from this model (a :class:`GraphDocEncoder` or :class:`FlatEncoder` of the setup's
            backbone, a saved graphdoc model of it, or any Hugging Face encoder, built with
            ``setup.model``) instead of ``setup.model``'s encoder.
        resume: continue from the latest checkpoint in ``output`` (the same result as a run that was
            never interrupted). Checkpoints keep the settings, the sources' absolute paths, the start model and
            the ``precision`` given: ``graphdoc pretrain --output DIR --resume`` goes on with them
            (:func:`graphdoc.training.run_folder.recorded_run`).
        device: ``cpu``, ``cuda`` or ``cuda:N``; under torchrun each process takes its local GPU.
        precision: the passage encoder's arithmetic (``auto``, ``fp32``, ``fp16``, ``bf16``), replacing the
            model's own ``passage_encoder.precision`` (also on resume); ``None`` keeps it.
        show_progress_bar: a tqdm bar with loss, learning rate and documents/s (default: when the
            ``graphdoc`` logger shows INFO).
        fields: the record fields of every source's ids, texts and titles (:class:`graphdoc.corpus.Fields`; JSON
            lines, BEIR and CSV/TSV sources). Kept in each checkpoint: ``None`` resumes with the recorded ones,
            others are refused.
    """
    import torch.distributed as dist

    from graphdoc.config import check_precision
    from graphdoc.corpus.fields import as_fields
    from graphdoc.errors import GraphDocError
    from graphdoc.training.distributed import init_from_env, shutdown
    from graphdoc.training.trainer import Trainer

    if not isinstance(corpus, (str, os.PathLike, list, tuple)):
        raise TypeError(f"corpus must be a path or name, or a list of them; got a {type(corpus).__name__}")
    if setup is not None and not isinstance(setup, PretrainSetup):
        hint = " (build one with PretrainSetup.from_dict)" if isinstance(setup, dict) else \
            " (read a file or a built-in config with load_setup)" if isinstance(setup, (str, os.PathLike)) else ""
        raise TypeError(f"setup must be a PretrainSetup; got a {type(setup).__name__}{hint}")
    sources = [str(corpus)] if isinstance(corpus, (str, os.PathLike)) else [str(s) for s in corpus]
    if not sources:
        raise GraphDocError("no corpus to pretrain on")
    if precision is not None:
        check_precision(precision)  # before anything is loaded or written
    show = logger.getEffectiveLevel() <= logging.INFO if show_progress_bar is None else show_progress_bar
    joined_here = not dist.is_initialized()
    ctx, resolved = init_from_env(device)
    try:
        trainer = Trainer(setup or PretrainSetup(), sources, Path(output), ctx, resolved, show,
                          as_fields(fields))
        with trainer.lock:  # released when the run ends, whatever the way
            try:
                trainer.start(model, resume, precision)
                return trainer.train()
            except BaseException as err:
                trainer.keep_cache()  # the passage vectors encoded so far are written, whatever stopped the run
                if isinstance(err, GraphDocError):  # e.g. no usable document: a new run folder is not left half-made
                    trainer.discard_new_output()
                raise
    finally:
        if joined_here:
            shutdown(ctx)
