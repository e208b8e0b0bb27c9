"""``graphdoc finetune``: supervised fine-tuning for ranking or classification; the model ends in OUTPUT/model.

Ranking: ``--corpus C --queries Q --qrels R [--dev-qrels R2]`` (or ``--folds K`` for k-fold
cross-validation over the judged queries). Classification: ``--train T --dev D [--test E]``
(JSON lines, or CSV/TSV, with a ``label``), ``--few-shot K`` for K examples per class over ``--repeats`` seeds,
``--objective supcon`` for supervised contrastive training over sub-documents.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from graphdoc.backbones import BACKBONES
from graphdoc.cli.common import (
    DEVICE_HELP,
    PRECISION_HELP,
    add_field_arguments,
    embeds_no_passages,
    fields_from,
    logger,
    saved_embeds_no_passages,
    warn_max_passages_unused,
)
from graphdoc.config import NEGATIVE_POOLS, PRECISIONS, read_config_file
from graphdoc.errors import GraphDocError

NEEDS = {"ranking": ("corpus", "queries", "qrels"), "classification": ("train", "dev")}
#: each task's own options: giving one to the other task is an error
OPTIONS = {"ranking": ("corpus", "queries", "qrels", "dev_qrels", "folds", "negative_pool"),
           "classification": ("train", "dev", "test", "few_shot", "repeats", "objective", "temperature",
                              "label_field")}
SCORE_NAMES = {"macro_f1": "macro-F1"}  # as the closing line spells the scores of finetune.json


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("finetune", help="fine-tune a model for ranking or classification", description=__doc__)
    parser.add_argument("--task", choices=tuple(NEEDS),
                        help="what to fine-tune for (with --resume: default, the run's)")
    parser.add_argument("--output", required=True, metavar="DIR", help="run folder; the model in DIR/model")
    parser.add_argument("--config", default=None, metavar="YAML",
                        help="a YAML/JSON file, or a built-in config by name: finetune-ranking, finetune-classification")
    parser.add_argument("--model", default=None, metavar="NAME_OR_DIR", help="the model to start from")
    parser.add_argument("--backbone", choices=tuple(BACKBONES), default=None,
                        help="graph: GAT layers over the passage graph; flat: the encoder alone, which trains "
                             "with --no-frozen-encoder (default: the --model's own if saved, else the config's)")
    rank = parser.add_argument_group("ranking")
    rank.add_argument("--corpus", metavar="PATH", help="documents to rank (JSON lines, BEIR folder, ...)")
    rank.add_argument("--queries", metavar="PATH", help="queries (queries.jsonl, BEIR folder, TSV, TREC topics, a .txt of one query a line)")
    rank.add_argument("--qrels", metavar="PATH", help="training judgements")
    rank.add_argument("--dev-qrels", metavar="PATH", help="dev judgements: evaluated every epoch, best kept")
    rank.add_argument("--folds", type=int, default=None, metavar="K", help="k-fold cross-validation over queries")
    rank.add_argument("--negative-pool", choices=NEGATIVE_POOLS, default=None,
                      help="hard negatives from any corpus document, or only from documents judged relevant to "
                           "some training query (for corpora whose documents are split between training and test "
                           "queries; default: the config's, corpus)")
    cls = parser.add_argument_group("classification")
    cls.add_argument("--train", metavar="PATH", help="labelled training documents: JSON lines or CSV/TSV whose "
                                                     "records have a label")
    cls.add_argument("--dev", metavar="PATH", help="labelled dev documents")
    cls.add_argument("--test", metavar="PATH", help="labelled test documents (scored with the best model)")
    cls.add_argument("--label-field", default=None, metavar="FIELD",
                     help="the record field (CSV/TSV column) holding each document's class (default: label)")
    cls.add_argument("--few-shot", type=int, default=None, metavar="K", help="K examples per class")
    cls.add_argument("--repeats", type=int, default=None, metavar="N",
                     help="few-shot seeds, with --few-shot (default: the config's, 10)")
    cls.add_argument("--objective", default=None, choices=("cross_entropy", "supcon"),
                     help="cross_entropy (default): the head's loss trains the model; supcon: supervised "
                          "contrastive over sub-documents, the head trained as a probe")
    cls.add_argument("--temperature", type=float, default=None, metavar="T",
                     help="the supcon loss's temperature, with --objective supcon (default: the config's, 0.1)")
    train = parser.add_argument_group(
        "training", "These override the --config file's settings; without --config, the defaults of "
                    "graphdoc.finetune.RankingConfig or ClassificationConfig apply (shown as ranking / "
                    "classification).")
    train.add_argument("--frozen-encoder", action=argparse.BooleanOptionalAction, default=None,
                       help="train the graph layers (and head) over cached passage vectors (default: frozen)")
    train.add_argument("--epochs", type=int, default=None, metavar="N",
                       help=_default_help("passes over the training data", "epochs"))
    train.add_argument("--batch-size", type=int, default=None, metavar="N",
                       help=_default_help("examples per optimiser step", "batch_size"))
    train.add_argument("--lr", type=float, default=None, help=_default_help("learning rate of the model", "lr"))
    train.add_argument("--seed", type=int, default=None, metavar="N",
                       help=_default_help("seeds the new heads, the example order and the negatives drawn (a model built on a "
                                          "plain encoder starts its graph layers the same whatever the seed)", "seed"))
    train.add_argument("--max-passages", type=int, default=None, metavar="N",
                       help=_default_help("passages kept per document (its first ones)", "max_passages"))
    train.add_argument("--cache-dir", default=None, metavar="DIR",
                       help="passage vector cache (frozen mode; default: DIR/passage_cache)")
    add_field_arguments(parser)
    parser.add_argument("--resume", action="store_true",
                        help="continue from the latest checkpoint in --output, with the task, settings, inputs, start "
                             "model and options the run recorded (DIR/finetune_config.json); options given apply on "
                             "top and must match the run's (but --cache-dir and --repeats)")
    parser.add_argument("--device", default=None, help=DEVICE_HELP)
    parser.add_argument("--precision", choices=PRECISIONS, default=None, help=PRECISION_HELP)
    parser.set_defaults(func=run)


def _default_help(text: str, name: str) -> str:
    from graphdoc.finetune.config import ClassificationConfig, RankingConfig

    values = [f"{getattr(cls, name):g}" for cls in (RankingConfig, ClassificationConfig)]
    defaults = values[0] if values[0] == values[1] else " / ".join(values)
    return f"{text} (default: the config's; without --config {defaults})"


def run(args: argparse.Namespace) -> int:
    from graphdoc.finetune import check_one_process, finetune_classification, finetune_ranking
    from graphdoc.finetune.record import read_record

    check_one_process()  # before the model and data are read
    if not args.output.strip():
        raise GraphDocError("--output is empty: name the run's folder")
    output = Path(args.output)
    if output.exists() and not output.is_dir():
        raise GraphDocError(f"--output {output} exists and is not a folder")
    recorded = _take_recorded_options(args, read_record(output) if args.resume else None)
    _check_task_options(args, output)
    common = {"frozen_encoder": args.frozen_encoder, "epochs": args.epochs, "batch_size": args.batch_size,
              "lr": args.lr, "seed": args.seed, "max_passages": args.max_passages, "cache_dir": args.cache_dir}
    setup = _setup(args, recorded)
    model_config = _model_config(args, setup)
    fields = fields_from(args)
    if args.task == "ranking":
        config = setup.with_overrides("ranking", negative_pool=args.negative_pool, **common).ranking
        result = finetune_ranking(args.corpus, args.queries, args.qrels, output, dev_qrels=args.dev_qrels,
                                  config=config, model=args.model, model_config=model_config, folds=args.folds,
                                  resume=args.resume, device=args.device, precision=args.precision,
                                  backbone=args.backbone, show_progress_bar=not args.quiet, fields=fields)
    else:
        config = setup.with_overrides("classification", shots=args.few_shot, repeats=args.repeats,
                                      objective=args.objective, temperature=args.temperature,
                                      **common).classification
        _check_classification_options(args, config)
        _warn_of_an_unused_cap(args, config, model_config)
        result = finetune_classification(args.train, args.dev, output, test=args.test, config=config,
                                         model=args.model, model_config=model_config, resume=args.resume,
                                         device=args.device, precision=args.precision, backbone=args.backbone,
                                         show_progress_bar=not args.quiet, fields=fields,
                                         label_field=args.label_field or "label")
    _report(result, f"{config.eval_mode} {config.eval_measure}" if args.task == "ranking" else "accuracy", output)
    return 0


def _warn_of_the_other_tasks_section(args: argparse.Namespace) -> None:
    """A config file with settings for the other task only is most likely the wrong file: say so (read already,
    and valid)."""
    if args.config is None:
        return
    sections = read_config_file(args.config)
    other = "classification" if args.task == "ranking" else "ranking"
    if isinstance(sections, dict) and other in sections and args.task not in sections:
        logger.warning("%s has settings for %s and none for %s: --task %s runs with the built-in %s settings",
                       args.config, other, args.task, args.task, args.task)


def _take_recorded_options(args: argparse.Namespace, record: dict | None) -> dict | None:
    """On resume, give each option not given the value the run recorded: its task, inputs, ``--folds``, model,
    backbone, precision, fields and label field (an input or model folder gone since is one error line). Returns
    the ``record`` taken; ``None`` when there is none, or it is of another ``--task`` (refused later, if the
    folder holds that run)."""
    from graphdoc.fileio import check_recorded_inputs

    if record is None or args.task not in (None, record["task"]):
        return None
    args.task = record["task"]
    recorded = {**record["inputs"], "model": record.get("model"), "backbone": record.get("backbone"),
                "precision": record.get("precision")}
    recorded.update({"folds": record["run"].get("folds")} if args.task == "ranking" else
                    {"label_field": record.get("label_field")})
    taken = {name: value for name, value in recorded.items()
             if name in vars(args) and getattr(args, name) is None}  # (a record edited by hand may name others)
    for name, value in taken.items():
        setattr(args, name, value)
    paths = ("model", *record["inputs"])  # (the others are no paths)
    check_recorded_inputs(args.output, {_flag(name): value for name, value in taken.items() if name in paths})
    if fields_from(args) is None:
        for role, name in (record.get("fields") or {}).items():
            setattr(args, f"{role}_field", name)
    return record


def _setup(args: argparse.Namespace, record: dict | None):
    """The run's settings: on resume without ``--config`` the ``record``'s, else the config file's (or the
    defaults), as a new run reads them; then ``--backbone``'s model."""
    from graphdoc.finetune import FinetuneSetup, load_finetune_setup
    from graphdoc.serialization import saved_backbone

    if record is not None and args.config is None:
        model = record.get("model_config") or {}
        setup = FinetuneSetup.from_dict({"backbone": model.get("backbone", "graph"), "model": model.get("settings", {}),
                                         args.task: record[args.task]})
    else:
        setup = load_finetune_setup(args.config, args.backbone or saved_backbone(args.model))
        _warn_of_the_other_tasks_section(args)
    return setup if args.backbone is None else setup.with_backbone(args.backbone)


def _check_task_options(args: argparse.Namespace, output: Path) -> None:
    """One error line for no ``--task``, a missing option of it, one of the other task, or bad ``--folds``."""
    if args.task is None:
        held = f" ({output} records no run to resume)" if args.resume else ""
        raise GraphDocError(f"--task is needed: ranking or classification{held}")
    missing = [_flag(name) for name in NEEDS[args.task] if getattr(args, name) is None]
    if missing:
        held = f" ({output} records none of them to resume with)" if args.resume else ""
        raise GraphDocError(f"--task {args.task} needs {', '.join(missing)}{held}")
    other = next(task for task in OPTIONS if task != args.task)
    stray = [_flag(name) for name in OPTIONS[other] if getattr(args, name) is not None]
    if stray:
        raise GraphDocError(f"--task {args.task} does not take {', '.join(stray)} (for --task {other} only)")
    if args.folds is not None and args.folds < 2:
        raise GraphDocError(f"--folds must be at least 2; got {args.folds}")
    if args.folds is not None and args.dev_qrels is not None:
        raise GraphDocError("--folds does not take --dev-qrels: k-fold cross-validation holds out its own dev share "
                            "of each fold's training queries (ranking.fold_dev_fraction)")


def _check_classification_options(args: argparse.Namespace, config) -> None:
    """Refuse a classification option that the run's settings (flags and config together) would ignore."""
    if args.temperature is not None and config.objective != "supcon":
        raise GraphDocError(f"--temperature is the supcon loss's; the objective is {config.objective} "
                            "(add --objective supcon)")
    if args.repeats is not None and config.shots is None:
        raise GraphDocError("--repeats counts few-shot runs; it needs --few-shot K")


def _warn_of_an_unused_cap(args: argparse.Namespace, config, model_config) -> None:
    """Say that ``--max-passages`` changes nothing when the start model embeds no passages (flat FirstP) and the
    objective reads whole documents alone (supcon's sub-documents are drawn from the capped passages)."""
    from graphdoc.backbones import config_backbone
    from graphdoc.serialization import saved_backbone

    if args.max_passages is None or config.objective != "cross_entropy":
        return
    if saved_backbone(args.model) is not None:  # its own settings (a config's model section is ignored)
        unused = saved_embeds_no_passages(args.model)
    else:
        unused = embeds_no_passages(config_backbone(model_config), model_config)
    if unused:
        warn_max_passages_unused()


def _model_config(args: argparse.Namespace, setup):
    """The model settings to build a plain encoder with; ``None`` for a saved model unless the config file gives
    a ``model:`` section (which the API then warns it ignores)."""
    from graphdoc.config import read_config_file
    from graphdoc.serialization import saved_backbone

    if args.model is None or saved_backbone(args.model) is None:
        return setup.model
    given = args.config is not None and "model" in read_config_file(args.config)
    return setup.model if given else None


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def _report(result: dict, measure: str, output: Path) -> None:
    """A readable closing line: what the run kept, its scores and where they are (the JSON file holds the rest)."""
    if "folds" in result:  # k-fold ranking
        alphas = ", ".join(f"{fold['alpha']:.2f}" for fold in result["folds"])
        scores = result["scores"]
        logger.info("%d-fold cross-validation over %d queries: dense %s %.4f, hybrid %.4f (fusion alpha per fold: "
                    "%s); runs %s and %s; details in %s", len(result["folds"]), result["queries"], result["measure"],
                    scores["dense"], scores["hybrid"], alphas, result["dense_run"], result["hybrid_run"],
                    output / "crossval.json")
    elif "runs" in result:  # few-shot classification
        acc, f1 = result["accuracy"], result["macro_f1"]
        logger.info("%d-shot, %d runs: accuracy %.4f +- %.4f, macro-F1 %.4f +- %.4f; details in %s", result["shots"],
                    result["repeats"], acc["mean"], acc["std"], f1["mean"], f1["std"], output / "fewshot.json")
    else:
        best = "no dev score" if result["best"] is None else \
            f"best dev {measure} {result['best']:.4f} at epoch {result['best_epoch']} of {result['epochs']}"
        scores = "".join(f"; {split} " + ", ".join(f"{SCORE_NAMES.get(name, name)} {value:.4f}"
                                                   for name, value in result[key].items())
                         for split, key in (("dev", "dev_scores"), ("test", "test_scores")) if key in result)
        logger.info("%s%s; model in %s; %.0f s, peak RSS %.0f MiB; details in %s", best, scores, result["model_dir"],
                    result["wall_s"], result["peak_rss_mib"], output / "finetune.json")
