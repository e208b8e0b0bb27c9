"""Supervised fine-tuning of graphdoc models: ranking (contrastive, hard negatives) and classification.

Example::

    from graphdoc.finetune import finetune_ranking, finetune_classification

    summary = finetune_ranking("corpus.jsonl.gz", "queries.jsonl", "qrels/train.tsv", "runs/ft",
                               dev_qrels="qrels/dev.tsv")
    model = GraphDocEncoder.from_pretrained("runs/ft/model")

    summary = finetune_classification("train.jsonl.gz", "dev.jsonl.gz", "runs/cls")
    classifier = DocumentClassifier.from_pretrained("runs/cls/model")
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import re
from pathlib import Path
from typing import Any, Callable

from graphdoc.config import check_precision
from graphdoc.errors import GraphDocError
from graphdoc.fileio import check_output_folder, writer_lock
from graphdoc.finetune.config import (
    ClassificationConfig,
    FinetuneSetup,
    RankingConfig,
    TrainingConfig,
    load_finetune_setup,
)
from graphdoc.finetune.predict import predict, read_predictions
from graphdoc.lazy import lazy_names

__all__ = ["ClassificationConfig", "DocumentClassifier", "FinetuneSetup", "RankingConfig", "TrainingConfig",
           "finetune_classification", "finetune_ranking", "load_finetune_setup", "load_start_model", "predict",
           "read_predictions"]

logger = logging.getLogger(__name__)

# the classifier imports torch and the model: loaded on first use (the CLI's parser reads the configs' defaults)
_LAZY = {"DocumentClassifier": "graphdoc.finetune.classifier"}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


def load_start_model(model: Any = None, model_config=None, device: str | None = None, backbone: str | None = None,
                     precision: str | None = None):
    """The model to fine-tune: a model object, a saved graphdoc model (of ``backbone`` when given), or a Hugging
    Face encoder built as ``backbone`` with ``model_config`` (a :class:`~graphdoc.config.ModelConfig` or
    :class:`~graphdoc.flat_config.FlatModelConfig`, converted to ``backbone``'s when it differs; ``model``
    ``None``: the config's encoder, else the built-in default). ``precision``, when given, replaces the
    passage encoder's own (``passage_encoder.precision``)."""
    loaded = _load_start_model(model, model_config, device, backbone)
    if precision is not None:
        loaded.passage_encoder.config.precision = check_precision(precision)
    return loaded


def _load_start_model(model: Any, model_config, device: str | None, backbone: str | None):
    from graphdoc.backbones import config_backbone, convert_model_config, load_model, model_config_class
    from graphdoc.serialization import backbone_of, saved_backbone

    if model is not None and not isinstance(model, (str, Path)):
        if backbone is not None and backbone_of(model) != backbone:
            raise GraphDocError(f"the model to fine-tune is a {backbone_of(model)} model, not a {backbone} one")
        return model
    name = None if model is None else str(model)
    if saved_backbone(name) is not None:
        if model_config is not None:  # as graphdoc embed does
            logger.warning("ignoring the given config's model settings: %s is a saved graphdoc model with its own",
                           name)
        return load_model(name, backbone=backbone, device=device)
    if backbone is not None:
        model_config = convert_model_config(model_config or model_config_class(backbone)(), backbone)
    if name is None and model_config is not None:
        name = model_config.passage_encoder.model_name_or_path
    return load_model(name, backbone=config_backbone(model_config) if model_config is not None else backbone,
                      config=model_config, device=device)


def check_one_process() -> None:
    """Fine-tuning is not data-parallel: under ``torchrun`` every process would run the whole job into one folder."""
    world_size = os.environ.get("WORLD_SIZE", "1").strip()
    if world_size not in ("", "1"):
        raise GraphDocError(f"fine-tuning runs in one process, not data-parallel (WORLD_SIZE is {world_size}): "
                            "run graphdoc finetune without torchrun (only pretrain runs under torchrun)")


def _one_writer(function: Callable) -> Callable:
    """Run ``function`` holding the writer lock of its ``output`` folder: a second run into it stops at once
    (``another graphdoc process is writing DIR``) instead of both writing checkpoints, log and model."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def one_writer(*args, **kwargs):
        check_one_process()
        output = signature.bind(*args, **kwargs).arguments["output"]
        if not isinstance(output, (str, os.PathLike)) or not str(output).strip() or os.path.isfile(output):
            return function(*args, **kwargs)  # it says what is wrong with the name
        check_output_folder(output)
        with writer_lock(Path(output)):
            return function(*args, **kwargs)

    return one_writer


@_one_writer
def finetune_ranking(corpus, queries, qrels, output: str | Path, *, dev_qrels=None,
                     config: RankingConfig | None = None, model: Any = None, model_config=None,
                     folds: int | None = None, resume: bool = False, bm25=None, split: str | None = None,
                     device: str | None = None, precision: str | None = None, backbone: str | None = None,
                     show_progress_bar: bool | None = None, fields=None) -> dict:
    """Fine-tune for retrieval on judged queries; with ``folds``, k-fold cross-validation over them.

    Args:
        corpus, queries, qrels: paths (or documents, ``{id: text}``, ``{qid: {doc: rel}}`` in memory).
        fields: the record fields of the corpus's ids, texts and titles (:class:`graphdoc.corpus.Fields`); a
            resumed run checks what it read (ids, titles, texts), so other fields are another corpus.
        output: the run folder; the model ends in ``output/model`` (``output/fold-N/model`` per fold).
        dev_qrels: queries scored after every epoch; the best epoch's model is kept.
        model, model_config, backbone: the model to start from (see :func:`load_start_model`); a flat
            model trains its encoder (``frozen_encoder`` false).
        precision: the passage encoder's arithmetic, replacing the model's own (``None`` keeps it).
        bm25: a :class:`BM25Index` over the corpus in its order (default: built here).
        show_progress_bar: a bar per epoch (default: when the ``graphdoc`` logger shows INFO).
    Returns the summary also written as ``output/finetune.json`` (``crossval.json`` with ``folds``). The run's
    inputs, settings and start model are recorded in ``output/finetune_config.json``
    (:mod:`graphdoc.finetune.record`), which ``graphdoc finetune --resume`` takes the options not given from.
    """
    from graphdoc.finetune.crossval import cross_validate
    from graphdoc.finetune.data import (
        load_ranking_data,
        read_known_qrels,
        read_qrels_arg,
        read_ranking_sources,
    )
    from graphdoc.finetune.inputs import open_cache
    from graphdoc.finetune.loop import MODEL_DIR, check_run_folder, check_start_model, run_kind
    from graphdoc.finetune.ranking_trainer import RankingTrainer
    from graphdoc.finetune.record import record_run
    from graphdoc.retrieval.trec import unwritable_ids
    from graphdoc.retrieval.tuning import assign_folds
    from graphdoc.serialization import check_save_target

    if folds is not None and folds < 2:
        raise GraphDocError(f"folds must be at least 2; got {folds}")
    config = config or RankingConfig()
    output = _output_folder(output, config.cache_dir, (corpus,))
    # every input read and checked now: a bad one is one line before a model loads or a folder is made
    train, dev = read_qrels_arg(qrels), read_qrels_arg(dev_qrels) if dev_qrels is not None else None
    sources = read_ranking_sources(corpus, queries, split, fields)
    train = read_known_qrels(train, sources, train=True, name=_name(qrels))
    if dev is not None:
        dev = read_known_qrels(dev, sources, name=_name(dev_qrels))
    if folds is not None:  # more folds than judged queries: one line now, as cross_validate would say it
        assign_folds([q for q, judged in train.items() if any(r > 0 for r in judged.values())], folds,
                     config.fold_seed)
        bad = unwritable_ids([d.id for d in sources.documents])  # the runs it writes name every document
        if bad:
            raise GraphDocError(f"{_name(corpus) or 'the corpus'}: {len(bad)} document id(s) cannot go into the "
                                f"TREC runs cross-validation writes (empty or with whitespace), e.g. {bad[0]!r}")
    kind = run_kind("ranking", folds=folds)
    check_run_folder(output, kind, resume, config.cache_dir)
    if folds is None:  # the run ends by saving there: a folder of the user's is refused now, not after training
        check_save_target(output / MODEL_DIR)
    given, model = model, load_start_model(model, model_config, device, backbone, precision)
    check_start_model(output, model, resume)
    record = functools.partial(record_run, output, config, kind, {"corpus": corpus, "queries": queries, "qrels": qrels,
                                                                  "dev_qrels": dev_qrels}, model=given,
                               model_config=model_config, backbone=backbone, precision=precision, fields=fields)
    record(ended=False)
    if config.frozen_encoder and not hasattr(model, "forward_passage_vectors"):
        raise GraphDocError("a flat model has nothing to train over a frozen encoder: fine-tune it with "
                            "frozen_encoder false (--no-frozen-encoder) or use a graph model")
    cache = open_cache(model, config.frozen_encoder, config.cache_dir, output)
    data = load_ranking_data(model, sources, cache=cache, max_passages=config.max_passages, bm25=bm25)
    if folds is not None:
        result = cross_validate(model, config, data, train, output, folds, resume, show_progress_bar=show_progress_bar)
    else:
        result = RankingTrainer(model, config, data, train, output, dev, show_progress_bar).train(resume)
    record(ended=True)
    return result


def _check_labels(splits: dict[str, list], sources: dict[str, Any], config: ClassificationConfig) -> list[str]:
    """The training set's classes, sorted, once the splits are checked before a model loads or a folder is made:
    two or more classes, no dev or test label unseen in training, and ``config.shots`` of each in few-shot mode."""
    from graphdoc.finetune.classification import labels_of
    from graphdoc.finetune.fewshot import sample_per_class

    known = set(labels_of(splits["train"]))
    if len(known) < 2:
        raise GraphDocError(f"{sources['train']}: every training document has the label {known.pop()!r}; a "
                            "classifier needs two or more classes")
    for name in ("dev", "test"):
        unknown = sorted(set(labels_of(splits.get(name, []))) - known)
        if unknown:
            raise GraphDocError(f"{sources[name]}: labels not in the training set: {', '.join(map(repr, unknown))}")
    if config.shots is not None:  # a class short of examples is an error before any passage is encoded
        sample_per_class(dict(zip([d.id for d in splits["train"]], labels_of(splits["train"]))), config.shots,
                         config.seed)
    return sorted(known)


def _output_folder(output: str | Path, cache_dir: str | Path | None = None, sources: tuple = ()) -> Path:
    """The run folder; an empty name (which would be the working directory) is an error, and so is a run folder
    or passage cache folder (``cache_dir``) that a file stands in the way of, or that lies inside a corpus folder
    among ``sources`` (its files would be read as documents)."""
    from graphdoc.corpus import check_outside_corpus

    if not str(output).strip():
        raise GraphDocError("the output folder name is empty: name the run's folder (--output DIR)")
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise GraphDocError(f"output {output} exists and is not a folder")
    for folder, flag in ((output, "--output"), (cache_dir, "--cache-dir")):
        if folder is not None:
            check_output_folder(folder, flag)
            for source in sources:
                check_outside_corpus(source, folder, flag, "the run's files")
    if cache_dir is not None and Path(cache_dir).resolve().is_relative_to(output.resolve()):
        from graphdoc.finetune.loop import HALFWAY_DIR, MODEL_DIR
        from graphdoc.training.cache import CACHE_NAME
        from graphdoc.training.checkpoint import CHECKPOINTS_DIR

        within = Path(cache_dir).resolve().relative_to(output.resolve()).parts[:1]
        if within and (within[0] in (MODEL_DIR, CHECKPOINTS_DIR, HALFWAY_DIR)
                       or re.fullmatch(r"(seed|fold)-[0-9]+", within[0])):
            raise GraphDocError(f"--cache-dir {cache_dir} is inside {output / within[0]}, which the run writes and "
                                f"replaces: put the passage cache elsewhere (by default it is {output / CACHE_NAME})")
    return output


def _name(source) -> str | None:
    """A path's name for messages (``None`` for data given in memory)."""
    return str(source) if isinstance(source, (str, Path)) else None


@_one_writer
def finetune_classification(train, dev, output: str | Path, *, test=None, config: ClassificationConfig | None = None,
                            model: Any = None, model_config=None, resume: bool = False,
                            device: str | None = None, precision: str | None = None,
                            backbone: str | None = None, show_progress_bar: bool | None = None,
                            fields=None, label_field: str = "label") -> dict:
    """Fine-tune a linear head (and the graph layers; the encoder too unless frozen) on labelled documents.

    ``config.objective``: ``cross_entropy`` through the head, or ``supcon`` (supervised contrastive over
    sub-documents, the head trained as a probe on the detached document vectors).

    ``model``, ``model_config``, ``backbone``: the model to start from (see :func:`load_start_model`); a
    frozen flat model trains the head alone, over document vectors computed once. ``precision``: the
    passage encoder's arithmetic, replacing the model's own (``None`` keeps it).

    ``train``/``dev``/``test``: JSON lines (or CSV/TSV) with a ``label`` field (``label_field`` names another;
    ``fields``: the record fields of their ids, texts and titles, :class:`graphdoc.corpus.Fields`). With ``config.shots`` set, few-shot mode:
    ``shots`` examples per class, ``repeats`` seeds, scored on ``test`` (default ``dev``).
    ``show_progress_bar``: a bar per epoch (default: when the ``graphdoc`` logger shows INFO).
    Returns the summary (``output/finetune.json``, or ``output/fewshot.json``), with dev/test scores.
    """
    from graphdoc.finetune.classification import (
        SUPCON_NEEDS_LAYERS,
        ClassificationTrainer,
        evaluate_classifier,
        prepare_inputs,
        read_labelled,
    )
    from graphdoc.finetune.classifier import DocumentClassifier
    from graphdoc.finetune.fewshot import few_shot
    from graphdoc.finetune.inputs import open_cache
    from graphdoc.finetune.loop import (
        MODEL_DIR,
        check_run_folder,
        check_start_model,
        run_kind,
        seed_everything,
        write_summary,
    )
    from graphdoc.finetune.record import record_run

    config = config or ClassificationConfig()
    seed_everything(config.seed)  # the new graph layers and head start the same in every run
    output = _output_folder(output, config.cache_dir, (train, dev, test))
    splits = {"train": read_labelled(train, "train", fields, label_field),
              "dev": read_labelled(dev, "dev", fields, label_field)}
    if test is not None:
        splits["test"] = read_labelled(test, "test", fields, label_field)
    classes = _check_labels(splits, {"train": train, "dev": dev, "test": test}, config)
    kind = run_kind("classification", shots=config.shots)
    check_run_folder(output, kind, resume, config.cache_dir)
    if config.shots is None:  # the run ends by saving there: a folder of the user's is refused now
        DocumentClassifier.check_save_target(output / MODEL_DIR)
    encoder = load_start_model(model, model_config, device, backbone, precision)
    check_start_model(output, encoder, resume)
    record = functools.partial(record_run, output, config, kind, {"train": train, "dev": dev, "test": test},
                               model=model, model_config=model_config, backbone=backbone, precision=precision,
                               fields=fields, label_field=label_field)
    record(ended=False)
    if config.objective == "supcon" and config.frozen_encoder and not hasattr(encoder, "forward_passage_vectors"):
        raise GraphDocError(SUPCON_NEEDS_LAYERS)  # before the passages are encoded
    cache = open_cache(encoder, config.frozen_encoder, config.cache_dir, output)
    data = prepare_inputs(encoder, [d for docs in splits.values() for d in docs], cache, config.max_passages)
    keys = {name: [d.id for d in docs] for name, docs in splits.items()}
    classifier = DocumentClassifier(encoder, classes, config.dropout)
    if config.shots is not None:
        result = few_shot(classifier, config, data, keys["train"], keys.get("test", keys["dev"]), output,
                          config.shots, config.repeats, resume, show_progress_bar)
        record(ended=True)
        return result
    trainer = ClassificationTrainer(classifier, config, data, keys["train"], output, keys["dev"], show_progress_bar)
    summary = trainer.train(resume)
    best = DocumentClassifier.from_pretrained(output / "model", device=device)
    if cache is not None:
        best.encoder.passage_encoder.requires_grad_(False)
    data.set_model(best.encoder)
    summary["dev_scores"] = evaluate_classifier(best, data, keys["dev"])
    if "test" in keys:
        summary["test_scores"] = evaluate_classifier(best, data, keys["test"])
    record(ended=True)
    return write_summary(output, summary)
