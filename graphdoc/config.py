"""Configuration: one plain dataclass per component, saved as JSON, loaded from JSON or YAML.

YAML files in ``configs/`` map one to one onto :class:`ModelConfig` (sections ``chunker``,
``passage_encoder``, ``graph``); an unknown key is an error that lists the valid ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, TypeVar

from graphdoc.errors import ArgumentTypeError, GraphDocError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
#: passage pooling: sentence-transformers' ``Pooling`` modes, by its names
POOLING_MODES = ("cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
PRECISIONS = ("auto", "fp32", "fp16", "bf16")
NEGATIVE_POOLS = ("corpus", "judged")  # ranking fine-tuning: where hard negatives come from

T = TypeVar("T")


def _check_choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise GraphDocError(f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}")


#: the fewest tokens a passage may have: fewer would cut sentences into single characters
MIN_SEQ_LENGTH = 8
#: the largest seed a run takes: NumPy's global seed must be below 2**32, with room for the seeds derived from it
#: (each pretraining process adds its rank; few-shot runs and folds add their number)
MAX_SEED = 2 ** 31 - 1


def check_count(name: str, value: Any) -> None:
    """A count (a batch size, results per query, a search depth): an integer of at least 1, else one error line."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{name} must be an integer; got {value!r}")
    if value < 1:
        raise GraphDocError(f"{name} must be at least 1; got {value!r}")


def _check_positive_or_null(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise GraphDocError(f"{name} must be at least 1 or null; got {value}")


def _check_probability(name: str, value: float) -> None:
    """A dropout rate: 1 or more would drop everything."""
    if not 0 <= value < 1:
        raise GraphDocError(f"{name} must be at least 0 and below 1; got {value}")


def check_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else a one-line error."""
    _check_choice("precision", precision, PRECISIONS)
    return precision


@dataclass
class ChunkerConfig:
    """How documents are split into passages.

    Args:
        max_words: passage length limit in words (whole sentences are packed up to it).
        max_passages: cap on passages per document (the paper uses 50 in training, 100 at inference);
            ``None`` for no cap. What the cap cuts is counted and logged.
        title: prepend the document title to the encoder input of the ``first`` passage, of ``all``
            passages, or ``none``; a passage whose first line is already the title (a Markdown
            file's ``# Title``) is left as it is.
    """

    max_words: int = 100
    max_passages: int | None = 100
    title: str = "first"

    def __post_init__(self) -> None:
        check_types(self, "chunker")
        if self.max_words < 1:
            raise GraphDocError(f"chunker.max_words must be at least 1; got {self.max_words}")
        if self.max_passages is not None and self.max_passages < 1:
            raise GraphDocError(f"chunker.max_passages must be at least 1 or null; got {self.max_passages}")
        _check_choice("chunker.title", self.title, ("first", "all", "none"))


@dataclass
class PassageEncoderConfig:
    """The Hugging Face encoder that gives each passage its node vector.

    ``pooling``/``normalize``/``max_seq_length`` set to ``None`` mean "as the checkpoint was trained"
    (read from its sentence-transformers files when present, else CLS pooling, last-token pooling for a
    decoder-only model, no normalisation and the tokenizer's limit); they are resolved when the model is loaded
    and saved resolved.

    ``query_prompt``/``passage_prompt``: text put before every query / every passage (and FirstP input), as
    E5's ``"query: "`` and ``"passage: "``; ``None`` means the checkpoint's sentence-transformers prompts
    (``query``; ``document``, ``passage`` or ``corpus``; else its default prompt), ``""`` none.
    """

    model_name_or_path: str = DEFAULT_MODEL
    pooling: str | None = None
    normalize: bool | None = None
    max_seq_length: int | None = None
    projection_dim: int | None = None
    query_prompt: str | None = None
    passage_prompt: str | None = None
    max_tokens_per_batch: int = 8192
    precision: str = "auto"

    def __post_init__(self) -> None:
        check_types(self, "passage_encoder")
        if self.pooling is not None:
            _check_choice("passage_encoder.pooling", self.pooling, POOLING_MODES)
        _check_choice("passage_encoder.precision", self.precision, PRECISIONS)
        # 0 is an error, not "unset": only null means "as the checkpoint was trained" / "no projection"
        if self.max_seq_length is not None and self.max_seq_length < MIN_SEQ_LENGTH:
            raise GraphDocError(f"passage_encoder.max_seq_length must be at least {MIN_SEQ_LENGTH} (tokens, special "
                                f"ones included) or null; got {self.max_seq_length}")
        _check_positive_or_null("passage_encoder.projection_dim", self.projection_dim)
        if self.max_tokens_per_batch < 1:
            raise GraphDocError("passage_encoder.max_tokens_per_batch must be positive")


#: ``passage_encoder`` settings added after models, indexes and checkpoints were first written, with the value
#: that was in effect before them: what one written earlier is compared as
LEGACY_PASSAGE_ENCODER = {"query_prompt": "", "passage_prompt": ""}
#: ``passage_encoder`` settings that do not decide a passage's vector: the name is informational (a weights
#: fingerprint identifies them), batching changes speed, and precision is recorded apart, as the arithmetic it
#: computes in on the device (graphdoc.device.arithmetic: per corpus of an index, in embed's saved part)
TRANSIENT_ENCODER_SETTINGS = ("model_name_or_path", "max_tokens_per_batch", "precision")


@dataclass
class GraphConfig:
    """The document graph and the graph attention layers run over it.

    Args:
        graph_type: ``full`` (all nodes connected) or ``section`` (passages of a section connected,
            the document node linked to the first passage of each section).
        num_layers: number of residual GAT layers (T in the paper).
        heads: attention heads per layer (concatenated; the hidden size must be divisible by it).
        dropout: dropout on each layer's residual branch.
        attention_dropout: dropout on the attention coefficients.
    """

    graph_type: str = "full"
    num_layers: int = 2
    heads: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.1

    def __post_init__(self) -> None:
        check_types(self, "graph")
        _check_choice("graph.graph_type", self.graph_type, ("full", "section"))
        if self.num_layers < 0:
            raise GraphDocError(f"graph.num_layers must be >= 0; got {self.num_layers}")
        if self.heads < 1:
            raise GraphDocError(f"graph.heads must be >= 1; got {self.heads}")
        _check_probability("graph.dropout", self.dropout)
        _check_probability("graph.attention_dropout", self.attention_dropout)


@dataclass
class ModelConfig:
    """Everything that defines a graphdoc model."""

    chunker: ChunkerConfig = field(default_factory=ChunkerConfig)
    passage_encoder: PassageEncoderConfig = field(default_factory=PassageEncoderConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)

    def __post_init__(self) -> None:
        check_sections(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelConfig":
        return from_dict(cls, data)


def check_sections(config: Any) -> None:
    """Give a model config's sections their own dataclasses: a mapping becomes one (``ModelConfig(chunker={
    "max_words": 50})``), and anything else (another backbone's section, a str) is a one-line error naming the
    section, which would otherwise fail when the model first encodes, or be saved and refused on loading."""
    for f in dataclasses.fields(config):
        kind = f.default_factory if f.default_factory is not dataclasses.MISSING else None
        if kind is None or not dataclasses.is_dataclass(kind):
            continue
        value = getattr(config, f.name)
        if isinstance(value, Mapping):
            setattr(config, f.name, from_dict(kind, value, f.name))
        elif type(value) is not kind:
            raise GraphDocError(f"config section {f.name} must be a {kind.__name__} (or a mapping of its keys); got "
                                f"a {type(value).__name__}")


def from_dict(cls: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """Build a (nested) dataclass from a mapping; unknown keys are an error naming the valid ones."""
    if not isinstance(data, Mapping):
        raise GraphDocError(f"config section {where or cls.__name__!r} must be a mapping")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields), key=str)  # (YAML keys may be numbers, on, no...)
    if unknown:
        prefix = f"{where}." if where else ""
        raise GraphDocError(
            f"unknown config key {prefix}{unknown[0]}; valid keys: {', '.join(prefix + k for k in fields)}")
    kwargs = {}
    for name, value in data.items():
        default = fields[name].default_factory if fields[name].default_factory is not dataclasses.MISSING else None
        if default is not None and dataclasses.is_dataclass(default):
            value = from_dict(default, value, f"{where}.{name}" if where else name)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise GraphDocError(f"bad config for {where or cls.__name__}: {exc}") from None
    except GraphDocError as exc:  # a section's checks name its keys by the section alone: name them in full
        outer, _, own = where.rpartition(".")
        if outer and str(exc).startswith(f"{own}."):
            raise GraphDocError(f"{outer}.{exc}") from None
        raise


#: a field's annotated type -> how an error names it
TYPE_NAMES = {"int": "an integer", "float": "a number", "bool": "a boolean (true or false)", "str": "a string"}


def check_types(config: Any, where: str = "") -> None:
    """Check a dataclass's settings against their annotated types in place; one-line error naming the key.

    Numbers accept YAML strings such as ``5e-5`` (PyYAML reads one without a dot as text) and floats
    accept integers; booleans must be YAML booleans (the string ``"no"`` is true) and strings strings.
    ``None`` passes only where the type allows it.
    """
    prefix = f"{where}." if where else ""
    for f in dataclasses.fields(config):
        kind, _, rest = str(f.type).partition(" |")
        value = getattr(config, f.name)
        if kind not in TYPE_NAMES or (value is None and "None" in rest):
            continue
        checked = _as_type(kind, value)
        if checked is None:
            raise GraphDocError(f"{prefix}{f.name} must be {TYPE_NAMES[kind]}; got {value!r}")
        setattr(config, f.name, checked)


def _as_type(kind: str, value: Any) -> Any:
    """``value`` as a ``kind`` (a key of :data:`TYPE_NAMES`), or ``None`` when it is not one."""
    if kind == "str" and isinstance(value, os.PathLike):
        return os.fspath(value)  # a path setting given as a Path
    if kind in ("bool", "str"):
        return value if isinstance(value, bool if kind == "bool" else str) else None
    if isinstance(value, str):
        try:
            value = float(value) if kind == "float" else int(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int if kind == "int" else (int, float)):
        return None
    return float(value) if kind == "float" else value


#: The configs that ship with graphdoc (``graphdoc/configs/NAME.yaml``), read by name: ``--config section-graph``.
CONFIG_DIR = Path(__file__).resolve().parent / "configs"


def builtin_configs() -> list[str]:
    """The names of the configs that ship with graphdoc."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def config_path(path: str | Path) -> Path:
    """The file ``path`` names: a file, else a built-in config by name (``section-graph``, ``section-graph.yaml``,
    or, from any folder, ``configs/section-graph.yaml`` and ``graphdoc/configs/section-graph.yaml`` as earlier
    docs and the checkout write it; said in a log line then, as a file of the user's may have been meant); one
    clear error when neither."""
    path = Path(path)
    if path.is_file():
        return path
    if path.parent in (Path("."), Path("configs"), Path("graphdoc/configs")) and path.suffix in ("", ".yaml"):
        builtin = CONFIG_DIR / f"{path.stem if path.suffix else path.name}.yaml"
        if builtin.is_file():
            if path.parent != Path("."):
                logger.info("%s is no file here: reading graphdoc's built-in config %s", path, builtin.stem)
            return builtin
    raise GraphDocError(f"config file not found: {path} (built-in configs: {', '.join(builtin_configs())})")


def read_config_file(path: str | Path) -> Any:
    """The data of a JSON or YAML config file, or of a built-in config named (see :func:`config_path`); one clear
    error when it is missing or unreadable."""
    path = config_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise GraphDocError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            _check_no_duplicate_keys(text)
            data = yaml.safe_load(text)
            return {} if data is None else data  # an empty file (or comments only): the defaults
        except yaml.YAMLError as exc:
            raise GraphDocError(f"{path}: invalid YAML ({str(exc).splitlines()[0]})") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise GraphDocError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    except _DuplicateKey as exc:
        raise GraphDocError(f"{path}: the key {exc.args[0]!r} is given twice in one object (the last would win "
                            "silently)") from None


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateKey(key)
        data[key] = value
    return data


def _check_no_duplicate_keys(text: str) -> None:
    """Refuse a key given twice in one YAML mapping (PyYAML keeps the last silently). Read from the composed
    node tree, before merge keys (``<<: *anchor``, whose keys a mapping may override) are flattened into it."""
    import yaml

    stack, seen = [yaml.compose(text, Loader=yaml.SafeLoader)], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:  # (an alias is the anchored node again)
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            lines: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                stack += [key, value]
                if key.tag == "tag:yaml.org,2002:merge" or not isinstance(key, yaml.ScalarNode):
                    continue
                line = key.start_mark.line + 1
                first = lines.get((key.tag, key.value))
                if first is not None:
                    where = f"line {line}" if first == line else f"lines {first} and {line}"
                    raise yaml.constructor.ConstructorError(None, None, f"the key {key.value!r} is given twice, on "
                                                            f"{where} (the last would win silently)", key.start_mark)
                lines[(key.tag, key.value)] = line
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value


def model_section(path: str | Path) -> tuple[Any, str | None, str]:
    """The model settings a config file (or a built-in config named) holds, the backbone it names, and where
    they are in it (for error messages: ``"model"`` or ``""``): a model config is all model settings; a
    ``pretrain``/``finetune`` config holds them in its ``model`` section (and may name a ``backbone``)."""
    data = read_config_file(path)
    if isinstance(data, dict) and isinstance(data.get("model"), dict):
        logger.info("using the model section of %s", path)
        return data["model"], data.get("backbone"), "model"
    return data, None, ""


def load_config_file(path: str | Path, cls: type[T] = ModelConfig) -> T:
    """Read a JSON or YAML config file into ``cls``; an error in its settings names the file."""
    data = read_config_file(path)
    with naming_file(path):
        return from_dict(cls, data)


@contextlib.contextmanager
def naming_file(path: str | Path) -> Iterator[None]:
    """Errors raised inside start with ``path`` (a config file's settings being checked), once."""
    try:
        yield
    except GraphDocError as exc:
        if str(exc).startswith(f"{path}:"):
            raise
        try:
            named = type(exc)(f"{path}: {exc}")  # (an ArgumentTypeError stays one)
        except TypeError:
            named = GraphDocError(f"{path}: {exc}")
        raise named from None
