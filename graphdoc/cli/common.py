"""Arguments and helpers shared by several subcommands."""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace

from graphdoc.backbones import BACKBONES, DEFAULT_BACKBONE, FLAT
from graphdoc.config import PRECISIONS, check_count, from_dict, model_section
from graphdoc.errors import GraphDocError
from graphdoc.flat_config import DOCUMENT_MODES, FlatModelConfig

logger = logging.getLogger("graphdoc.cli")

PRECISION_HELP = ("passage encoder arithmetic: auto (bf16/fp16 on CUDA, fp32 on a CPU), fp32, fp16, or bf16 (also "
                  "on CPUs with native bfloat16, about 1.7x as fast) (default: the model's own)")
#: the help of every --device option
DEVICE_HELP = "cpu, cuda, cuda:N or mps (default: CUDA when present)"


def add_model_arguments(parser: argparse.ArgumentParser, batches: bool = True) -> None:
    """The options that choose and run a model; ``batches=False`` for a command that embeds one pair or one
    document (``compare``, ``plot attention``), where ``--batch-size`` would change nothing."""
    group = parser.add_argument_group("model")
    group.add_argument("--model", default=None, metavar="NAME_OR_DIR",
                       help="a saved graphdoc model, or any Hugging Face encoder id or folder "
                            "(default: the built-in all-MiniLM-L6-v2)")
    group.add_argument("--config", default=None, metavar="YAML",
                       help="model config for a model built on a plain encoder: a YAML/JSON file, or a built-in "
                            "one by name (default, section-graph, graph-roberta-paper)")
    group.add_argument("--backbone", choices=tuple(BACKBONES), default=None,
                       help="graph: GAT layers over the passage graph; flat: the encoder alone "
                            "(default: a saved model's own, else graph)")
    group.add_argument("--flat-document", choices=DOCUMENT_MODES, default=None,
                       help="flat backbone's document vector: first = title and text truncated to the "
                            "encoder's limit (FirstP, default), mean = the mean of its passage vectors")
    group.add_argument("--max-passages", type=int, default=None, metavar="N",
                       help="passages kept per document, its first N (default: the model's chunker cap, 100 unless "
                            "its config sets another; 0: no cap" + ("; documents added to an index: the index's cap)"
                                                                    if parser.prog.endswith(" index") else ")"))
    group.add_argument("--device", default=None, help=DEVICE_HELP)
    group.add_argument("--precision", choices=PRECISIONS, default=None, help=PRECISION_HELP)
    if batches:
        group.add_argument("--batch-size", type=int, default=32, metavar="N", help="documents per batch")
    else:  # scripts written when these commands listed it keep working, with a warning (see load_model)
        group.add_argument("--batch-size", type=int, default=None, dest="ignored_batch_size", help=argparse.SUPPRESS)


def add_nprobe_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nprobe", type=int, default=None, metavar="N",
                        help="an IVF index's lists each search visits (default: an eighth of them, 16 to 256); "
                             "more: higher recall, slower")


def counted(n: int, what: str) -> str:
    """``n`` things in words: ``1 document``, ``0 documents``, ``2 documents`` (``what`` is the plural)."""
    return f"{n} {what.removesuffix('s') if n == 1 else what}"


def add_field_arguments(parser: argparse.ArgumentParser, recorded: str = "") -> None:
    """``--id-field``, ``--text-field`` and ``--title-field``: the record fields (CSV/TSV columns) a JSON lines, BEIR
    or CSV/TSV corpus names its documents' id, text and title with. ``recorded``: where the defaults come from
    first (an index's own record of a corpus)."""
    from graphdoc.documents import ID_KEYS, TEXT_KEYS

    group = parser.add_argument_group("corpus fields", "for JSON lines, BEIR and CSV/TSV corpora whose records name "
                                      "them otherwise; a named field must be in every record, and the default "
                                      "keys it replaces are kept as metadata")
    first = f"{recorded}, else " if recorded else ""
    for role, defaults in (("id", ID_KEYS), ("text", TEXT_KEYS + ("sections",)), ("title", ("title",))):
        group.add_argument(f"--{role}-field", default=None, metavar="NAME",
                           help=f"the field holding each document's {role} (default: {first}"
                                f"{', '.join(defaults[:-1]) + ' or ' if len(defaults) > 1 else ''}{defaults[-1]})")


def fields_from(args: argparse.Namespace):
    """The :class:`graphdoc.corpus.Fields` of ``--id-field``/``--text-field``/``--title-field``; ``None`` when none
    is given (a reader's defaults, or what an index recorded)."""
    from graphdoc.corpus import Fields

    given = {role: getattr(args, f"{role}_field", None) for role in ("id", "text", "title")}
    if all(value is None for value in given.values()):
        return None
    return Fields(**given)


def stdin_corpus(command: str, fields):
    """The JSON lines piped in (``--corpus -``), read whole, as documents in memory (a
    :class:`~graphdoc.corpus.MemoryCorpus` named by their content, so the same lines piped again are known again:
    a stopped run goes on). Each line is checked as a JSON lines file's record is (``fields`` names its fields), a
    bad one named ``<stdin>:LINE``."""
    import sys
    from pathlib import Path

    from graphdoc.corpus import MemoryCorpus
    from graphdoc.corpus.files import decoded_lines
    from graphdoc.corpus.jsonl import checked_records

    if sys.stdin is None or sys.stdin.isatty():
        raise GraphDocError(f"--corpus -: nothing is piped in (pipe JSON lines into graphdoc {command}, or give a "
                            "file)")
    name = Path("<stdin>")
    records = [record for record, _ in checked_records(name, fields, decoded_lines(name, sys.stdin.buffer))]
    if not records:
        raise GraphDocError("--corpus -: standard input holds no JSON lines")
    return MemoryCorpus(records, name="the JSON lines piped in")


def stdin_queries() -> dict[str, str]:
    """The queries piped in (``--queries -``), read whole, in any format a queries file may have that is read from
    its lines: JSON lines (a first line starting ``{``), ``query-id<TAB>text`` lines, TREC topics, or one query a
    line (ids: line numbers). A problem is named at ``<stdin>:LINE``, as in a file."""
    import sys
    import tempfile
    from pathlib import Path

    from graphdoc.corpus import read_queries
    from graphdoc.errors import InputError

    if sys.stdin is None or sys.stdin.isatty():
        raise GraphDocError("--queries -: nothing is piped in (pipe queries into the command, or give a file)")
    data = sys.stdin.buffer.read()
    first = next((line for line in data.lstrip(b"\xef\xbb\xbf").splitlines() if line.strip()), b"")
    if not first:
        raise GraphDocError("--queries -: standard input holds no queries")
    suffix = ".jsonl" if first.lstrip().startswith(b"{") else ".txt"  # (.txt: topics, tab-separated or lines)
    with tempfile.TemporaryDirectory(prefix="graphdoc-queries-") as folder:
        file = Path(folder) / ("stdin" + suffix)
        file.write_bytes(data)
        try:
            return dict(read_queries(file))
        except InputError as err:  # named as the input it was, not the file it went through
            raise InputError(str(err).replace(str(file), "<stdin>")) from None


def check_at_least_one(flag: str, value: int | None) -> None:
    """Refuse a count option below 1 (``None``: not given, the default applies)."""
    if value is not None:
        check_count(flag, value)


def load_model(args: argparse.Namespace, passages: bool = True):
    """The model named by ``--model``/``--config``/``--backbone``; the config's encoder when no model is named.
    ``passages``: whether the command reads the documents' passages, not their vectors alone (see
    :func:`set_max_passages`)."""
    from graphdoc import backbones
    from graphdoc.serialization import saved_backbone

    check_at_least_one("--batch-size", getattr(args, "batch_size", None))
    if getattr(args, "ignored_batch_size", None) is not None:
        logger.warning("--batch-size is ignored: this command embeds one document or one pair, not batches")
    saved = saved_backbone(args.model)
    config_file = args.config
    if saved is not None and config_file:  # not read: a config for another backbone is no error here
        logger.warning("ignoring the given config %s: %s is a saved graphdoc model with its own", config_file,
                       args.model)
        config_file = None
    section, file_backbone, where = model_section(config_file) if config_file else (None, None, "")
    chosen = args.backbone or (file_backbone if saved is None else None)
    backbone = chosen or saved or DEFAULT_BACKBONE
    config = None
    if config_file:
        config, read_as = _config_file(config_file, section, where, backbone, chosen is None and saved is None)
        if read_as != backbone:
            chosen = backbone = read_as
    if args.flat_document is not None:
        if backbone != FLAT:
            raise GraphDocError(f"--flat-document needs --backbone flat; the model's backbone is {backbone}")
        if saved is None:  # a saved model brings its own config: its document mode is replaced after loading
            config = config or FlatModelConfig()
            config = replace(config, graph=replace(config.graph, document=args.flat_document))
    name = args.model  # None: the encoder the config names, else the default
    model = backbones.load_model(name, backbone=chosen, config=config, device=args.device)
    if args.flat_document is not None and saved is not None:
        model.config = replace(model.config, graph=replace(model.config.graph, document=args.flat_document))
    if getattr(args, "precision", None) is not None:
        model.passage_encoder.config.precision = args.precision
    set_max_passages(model, args, passages)
    return model


def max_passages_given(args: argparse.Namespace) -> tuple[bool, int | None]:
    """Whether ``--max-passages`` was given, and the cap it sets (``None`` for 0: no cap); a negative one is
    refused."""
    value = getattr(args, "max_passages", None)
    if value is None:
        return False, None
    if value < 0:
        raise GraphDocError(f"--max-passages must be at least 0 (0: no cap); got {value}")
    return True, value or None


def set_max_passages(model, args: argparse.Namespace, passages: bool = True) -> None:
    """Give ``model``'s chunker the cap of ``--max-passages``, when given. A command that reads document vectors
    alone (``passages=False``) of a model that makes them without passages (a flat model in document mode
    ``first``) is told that the cap changes nothing."""
    from graphdoc.serialization import backbone_of

    given, cap = max_passages_given(args)
    if not given:
        return
    model.config.chunker.max_passages = cap
    if not passages and embeds_no_passages(backbone_of(model), model.config):
        warn_max_passages_unused("--flat-document mean embeds passages")


def embeds_no_passages(backbone: str, config) -> bool:
    """Whether a model of ``backbone`` and ``config`` makes a document's vector without its passages: a flat model
    in document mode first (FirstP), which embeds its title and text as one sequence."""
    return backbone == FLAT and config.graph.document == "first"


def saved_embeds_no_passages(path) -> bool:
    """:func:`embeds_no_passages` of the saved model folder ``path``, told by its config.json alone; ``False`` for
    anything else, a config the loader refuses included (the loader says why)."""
    import json
    from pathlib import Path

    from graphdoc.serialization import CONFIG_NAME, saved_backbone

    if saved_backbone(path) != FLAT:
        return False
    try:
        model = json.loads((Path(path) / CONFIG_NAME).read_text(encoding="utf-8"))["model"]
        return embeds_no_passages(FLAT, FlatModelConfig.from_dict(model))
    except (GraphDocError, KeyError, TypeError, ValueError):
        return False


def warn_max_passages_unused(remedy: str = "") -> None:
    """Say that ``--max-passages`` changes nothing for a model that :func:`embeds_no_passages` (``remedy``: what
    would read passages, if the command offers it)."""
    logger.warning("--max-passages does not apply to this model: a flat model in document mode first (FirstP) "
                   "embeds a document's title and text as one sequence cut at the encoder's limit, not its passages"
                   "%s", f" ({remedy})" if remedy else "")


def _config_file(path: str, data, where: str, backbone: str, guessed: bool):
    """The model settings ``data`` of ``path`` (its section ``where``, or all of it) and the backbone they are for:
    ``backbone``, or, when it was not given (nor a saved model's) and they read as flat-backbone settings only
    (``graph: {graph_type: flat, document: first}``), the flat one."""
    from graphdoc import backbones
    from graphdoc.serialization import config_class_of

    def read(name: str):
        return from_dict(config_class_of(backbones.backbone_class(name)), data, where)

    config, flat = backbones.read_as_flat_if_not(lambda: read(backbone), path,
                                                 (lambda: read(FLAT)) if guessed and backbone != FLAT else None, data)
    return config, FLAT if flat else backbone
