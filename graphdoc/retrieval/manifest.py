"""The manifest of an index folder: what built it, with which settings, and how far it got."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from graphdoc.config import LEGACY_PASSAGE_ENCODER, TRANSIENT_ENCODER_SETTINGS
from graphdoc.errors import GraphDocError, IndexMismatchError
from graphdoc.fileio import atomic_write
from graphdoc.fingerprint import weights_fingerprint as model_fingerprint

MANIFEST_NAME = "manifest.json"
FORMAT = "graphdoc.index"
FORMAT_VERSION = 2  # 2: bm25.terms (graphdoc before it refuses the field; this format says to upgrade)


@dataclass
class SourceProgress:
    """One corpus fed into the index: how many of its documents (in reading order) are in shards."""

    corpus: str
    part: str = "1/1"
    documents_read: int = 0
    complete: bool = False
    #: a local corpus when it was complete: [files, bytes, latest modification ns, digest] (progress.corpus_state)
    state: list[int] | None = None
    #: the shards its documents went into (``None``: not recorded, as before graphdoc kept it, or merged)
    shards: list[str] | None = None
    #: the record fields it was read with (:meth:`graphdoc.corpus.Fields.to_dict`); ``None``: the default keys, as
    #: every index built before graphdoc kept it (not saved then, so that an earlier graphdoc reads the manifest)
    fields: dict[str, str] | None = None
    #: the arithmetic its passages were encoded in (``fp32``, ``bf16``, ``fp16``: :func:`graphdoc.device.arithmetic`),
    #: which a run resuming it must compute in too; ``None``: not recorded (before graphdoc kept it), not saved then
    precision: str | None = None
    #: read no further by choice (:func:`graphdoc.retrieval.stopping.stop_reading`): ``complete`` too, so that its
    #: documents read are kept and it is not read again; saved only when true (an earlier graphdoc refuses it)
    stopped: bool = False

    def part_documents(self) -> int | None:
        """How many of the documents read are its part's (a ``--shard I/N`` part reads every N-th document from
        the I-th; a whole corpus all of them); ``None`` for a part that is not I/N (a damaged manifest's)."""
        try:
            number, parts = part_number(self.part) - 1, split_of(self.part)
            return max(0, (self.documents_read - number + parts - 1) // parts)
        except (ValueError, IndexError, AttributeError, TypeError, ZeroDivisionError):
            return None


@dataclass
class Manifest:
    """Settings and progress of an index; saved as ``manifest.json``.

    ``model`` holds the model's name, weights fingerprint and the settings that shape its vectors
    (chunker, passage encoder, graph); opening the index with a model whose identity differs is
    refused, naming the first setting that differs.
    """

    model: dict[str, Any]
    dimension: int
    metric: str = "cosine"
    faiss_factory: str = "Flat"
    bm25: dict[str, Any] = field(default_factory=dict)
    fusion: dict[str, Any] = field(default_factory=dict)
    dense: dict[str, Any] = field(default_factory=dict)
    store_passages: bool = True
    shards: list[str] = field(default_factory=list)
    sources: list[SourceProgress] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    #: deleted documents: id -> how many shards the index had when it was deleted (its rows in those shards are
    #: left out of ``final/``; one added again later, in a later shard, is back). Saved only when not empty.
    deleted: dict[str, int] = field(default_factory=dict)
    #: documents a shard holds (``--shard-size``), kept for a run resuming or adding without it; ``None``: not
    #: recorded (an index built before graphdoc kept it: such a run takes the default, 1,000)
    shard_size: int | None = None
    finalized: bool = False
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    graphdoc_version: str = ""
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    def save(self, folder: Path) -> None:
        data = asdict(self)
        for source in data["sources"]:
            for name in ("fields", "precision", "stopped"):  # (not recorded: as graphdoc before them saved it)
                if not source[name]:
                    del source[name]
        if data["shard_size"] is None:
            del data["shard_size"]
        if not data["deleted"]:  # an index without deletions keeps the manifest an earlier graphdoc reads
            del data["deleted"]
        with atomic_write(folder / MANIFEST_NAME, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")

    @classmethod
    def load(cls, folder: Path) -> "Manifest":
        path = folder / MANIFEST_NAME
        if not folder.exists():
            raise GraphDocError(f"index folder not found: {folder}")
        if not folder.is_dir():
            raise GraphDocError(f"{folder} is a file, not an index folder")
        if not path.is_file():
            raise GraphDocError(f"{folder} is not a graphdoc index (no {MANIFEST_NAME})")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise GraphDocError(f"{path}: unreadable manifest ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise GraphDocError(f"{path}: not a graphdoc index manifest")
        _check_type(path, "format_version", data.get("format_version", 0), int)
        if data.get("format_version", 0) > FORMAT_VERSION:
            raise GraphDocError(f"{path}: index format {data['format_version']} is newer than this "
                                f"graphdoc understands ({FORMAT_VERSION}); upgrade graphdoc")
        _check_fields(path, cls, data)
        for name, settings in (("bm25", "BM25Config"), ("dense", "DenseSettings"), ("fusion", "FusionConfig")):
            _check_fields(path, _settings_class(settings), data.get(name) or {}, f"{name}.", required=False)
        sources = data.get("sources", [])
        for source in sources if isinstance(sources, list) else [None]:
            _check_fields(path, SourceProgress, source, "sources[].")
        _check_values(path, data)
        data["sources"] = [SourceProgress(**s) for s in sources]
        for source in data["sources"]:  # kept as typed before graphdoc wrote parts as I/N (" 1/2", "01/2")
            try:
                source.part = normal_part(source.part)
            except (ValueError, IndexError, AttributeError):
                pass  # not a part: left for the checks that read it to name
        from graphdoc.retrieval.bm25 import with_legacy_terms  # (bm25s is imported only when used)

        data["bm25"] = with_legacy_terms(data.get("bm25", {}))  # an index built before BM25 had "terms"
        _check_settings(path, data)
        data["format_version"] = FORMAT_VERSION  # as it is saved again: with the fields of this format
        encoder = data["model"].get("passage_encoder") if isinstance(data["model"], dict) else None
        if isinstance(encoder, dict):  # an index built before a setting existed was built without it
            data["model"]["passage_encoder"] = {**encoder, **{k: v for k, v in LEGACY_PASSAGE_ENCODER.items()
                                                             if k not in encoder}}
        return cls(**data)

    def is_deleted(self, doc_id: str, shard: int) -> bool:
        """Whether the row of ``doc_id`` in shard number ``shard`` (0, 1, ... in :attr:`shards`) is deleted."""
        return shard < self.deleted.get(doc_id, 0)

    def source(self, corpus: str, part: str) -> SourceProgress | None:
        return next((s for s in self.sources if s.corpus == corpus and s.part == part), None)

    def whole(self, corpus: str) -> list[SourceProgress]:
        """The complete sources that together hold all of ``corpus``: its ``1/1``, or every part of one
        ``--shard I/N`` split (as a merge of those parts has); ``[]`` when none do."""
        complete = [s for s in self.sources if s.corpus == corpus and s.complete]
        for source in complete:
            parts = [s for s in complete if split_of(s.part) == split_of(source.part)]
            if len({s.part for s in parts}) == split_of(source.part):
                return sorted(parts, key=lambda s: part_number(s.part))
        return []


def split_of(part: str) -> int:
    """``"2/4"`` -> 4, the number of parts of its split."""
    return int(part.split("/")[1])


def part_number(part: str) -> int:
    """``"2/4"`` -> 2."""
    return int(part.split("/")[0])


def normal_part(part: str) -> str:
    """A part as manifests keep it: ``" 01/2"`` -> ``"1/2"``."""
    return f"{part_number(part)}/{split_of(part)}"


#: the name of a shard folder in ``shards/`` (``00000``, ``00001``, ...): nothing a manifest names leaves the folder
SHARD_NAME = re.compile(r"\d{5,}")
#: the JSON type of each manifest field (``None`` allowed where the field's default is ``None``)
_TYPES = {"model": dict, "dimension": int, "metric": str, "faiss_factory": str, "bm25": dict, "fusion": dict,
          "dense": dict, "store_passages": bool, "shards": list, "sources": list, "counts": dict, "deleted": dict,
          "finalized": bool, "created": str, "graphdoc_version": str, "format": str, "format_version": int,
          "shard_size": (int, type(None))}
_SOURCE_TYPES = {"corpus": str, "part": str, "documents_read": int, "complete": bool, "state": (list, type(None)),
                 "shards": (list, type(None)), "fields": (dict, type(None)), "precision": (str, type(None)),
                 "stopped": bool}
#: the arithmetics a source may record (:data:`graphdoc.device.ARITHMETIC_NAMES`' names)
ARITHMETICS = ("fp32", "bf16", "fp16")
_MODEL_TYPES = {"name": (str, type(None)), "path": (str, type(None)), "fingerprint": (str, type(None)),
                "chunker": dict, "passage_encoder": dict, "graph": dict}
#: how a message names each JSON type
_JSON_NAMES = {dict: "a JSON object", list: "a list", str: "a string", int: "an integer", float: "a number",
               bool: "true or false", type(None): "null"}


def _check_type(path: Path, name: str, value: Any, kind: type | tuple[type, ...]) -> None:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        wanted = " or ".join(_JSON_NAMES[k] for k in kinds)
        raise GraphDocError(f"{path}: {name} must be {wanted}; got {json.dumps(value)[:80]}")


def _check_values(path: Path, data: dict[str, Any]) -> None:
    """Refuse, naming the field, a manifest value of the wrong JSON type, a count below zero, or a shard name that
    is not one (``../x`` would read, and an add delete, outside the index folder): a hand-edited or damaged
    manifest is one error line before anything is read or removed."""
    for name, kind in _TYPES.items():
        if name in data:
            _check_type(path, name, data[name], kind)
    for name, kind in _MODEL_TYPES.items():
        if name in data["model"]:
            _check_type(path, f"model.{name}", data["model"][name], kind)
    if data["dimension"] < 1:
        raise GraphDocError(f"{path}: dimension must be at least 1; got {data['dimension']}")
    if data.get("shard_size") is not None and data["shard_size"] < 1:
        raise GraphDocError(f"{path}: shard_size must be at least 1; got {data['shard_size']}")
    for name, count in data.get("counts", {}).items():
        _check_type(path, f"counts.{name}", count, (int, float))
    _check_deleted(path, data.get("deleted", {}), len(data.get("shards", [])))
    shard_lists = [("shards", data.get("shards", []))]
    for source in data.get("sources", []):
        for name, kind in _SOURCE_TYPES.items():
            if name in source:
                _check_type(path, f"sources[].{name}", source[name], kind)
        if source.get("documents_read", 0) < 0:
            raise GraphDocError(f"{path}: sources[].documents_read must not be negative")
        _check_source_fields(path, source.get("fields"))
        if source.get("stopped") and not source.get("complete"):
            raise GraphDocError(f"{path}: sources[].stopped is true for {json.dumps(source.get('corpus'))[:80]}, whose "
                                "complete is false (a corpus stopped is read no further: complete)")
        if source.get("precision") not in (None, *ARITHMETICS):
            raise GraphDocError(f"{path}: sources[].precision must be one of {', '.join(ARITHMETICS)}; got "
                                f"{json.dumps(source['precision'])[:80]}")
        shard_lists.append(("sources[].shards", source.get("shards") or []))
    for name, shards in shard_lists:
        for shard in shards:
            if not isinstance(shard, str) or not SHARD_NAME.fullmatch(shard):
                raise GraphDocError(f"{path}: {name} holds {json.dumps(shard)[:80]}, not a shard name (00000, 00001, "
                                    "...)")


def _check_deleted(path: Path, deleted: dict, shards: int) -> None:
    """Refuse a ``deleted`` entry that is not a shard count the index has (1 to its number of shards)."""
    for doc_id, count in deleted.items():
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= shards:
            raise GraphDocError(f"{path}: deleted[{doc_id!r}] must be a number of shards from 1 to {shards} (the "
                                f"shards the index had when the document was deleted); got {json.dumps(count)[:80]}")


def _check_source_fields(path: Path, fields: dict | None) -> None:
    from graphdoc.corpus.fields import Fields
    from graphdoc.errors import InputError

    try:
        Fields.from_dict(fields)
    except InputError as exc:
        raise GraphDocError(f"{path}: sources[].fields is not usable ({exc})") from None


def _check_settings(path: Path, data: dict[str, Any]) -> None:
    """Refuse BM25, dense or fusion settings that would fail when the index is searched or added to."""
    for name, make in (("bm25", lambda d: _settings_class("BM25Config").from_dict(d)),
                       ("dense", lambda d: _settings_class("DenseSettings")(**d)),
                       ("fusion", lambda d: _settings_class("FusionConfig").from_dict(d))):
        if data.get(name):
            try:
                make(data[name])
            except (GraphDocError, TypeError, ValueError) as exc:
                raise GraphDocError(f"{path}: its {name} settings are not usable ({exc})") from None


def _settings_class(name: str) -> type:
    # imported here: these modules are heavier than a manifest needs to be loaded
    from graphdoc.retrieval.bm25 import BM25Config
    from graphdoc.retrieval.dense_searcher import DenseSettings
    from graphdoc.retrieval.fusion import FusionConfig

    return {"BM25Config": BM25Config, "DenseSettings": DenseSettings, "FusionConfig": FusionConfig}[name]


def _check_fields(path: Path, cls: type, data: Any, prefix: str = "", required: bool = True) -> None:
    """Refuse, naming ``path``, a JSON object with a field ``cls`` does not have or without one it needs."""
    if not isinstance(data, dict):
        raise GraphDocError(f"{path}: {prefix.rstrip('.') or 'the manifest'} must be a JSON object")
    fields = dataclasses.fields(cls)
    unknown = sorted(set(data) - {f.name for f in fields})
    if unknown:
        raise GraphDocError(f"{path}: unexpected field {prefix + unknown[0]!r}")
    needed = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [name for name in needed if name not in data] if required else []
    if missing:
        raise GraphDocError(f"{path}: missing field {prefix + missing[0]!r}")


def model_identity(model) -> dict[str, Any]:
    """The settings of a model that decide its vectors, and a fingerprint of its weights."""
    cfg = model.config.to_dict()
    encoder = dict(cfg["passage_encoder"])
    for transient in TRANSIENT_ENCODER_SETTINGS:
        encoder.pop(transient, None)
    from graphdoc.chunker import CHUNKER_VERSION

    return {"name": cfg["passage_encoder"]["model_name_or_path"], "path": model.name_or_path,
            "fingerprint": model_fingerprint(model),
            "chunker": {**cfg["chunker"], "version": CHUNKER_VERSION}, "passage_encoder": encoder,
            "graph": cfg["graph"], "encoder": encoder_identity(model.passage_encoder)}


#: the Hugging Face configuration entries that change what an encoder computes from the same weights (sizes are in
#: the weights' fingerprint): recorded by name, so that a transformers release adding entries changes nothing
ARCHITECTURE_KEYS = ("model_type", "hidden_act", "hidden_activation", "activation_function", "layer_norm_eps",
                     "layer_norm_epsilon", "rms_norm_eps", "norm_eps", "num_attention_heads", "num_key_value_heads",
                     "position_embedding_type", "pad_token_id", "rope_theta", "attention_window")


def encoder_identity(encoder) -> dict[str, Any]:
    """What the weights' fingerprint does not tell of a passage encoder: the architecture settings that change its
    vectors (:data:`ARCHITECTURE_KEYS`) and a digest of its tokenizer's vocabulary (a tokenizer that is not the
    model's gives other token ids)."""
    config = encoder.model.config.to_dict()
    architecture = {key: config[key] for key in ARCHITECTURE_KEYS
                    if key in config and isinstance(config[key], (str, int, float, bool, type(None)))}
    vocabulary = sorted(encoder.tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0]))
    digest = hashlib.blake2b(json.dumps(vocabulary, ensure_ascii=False).encode("utf-8"), digest_size=16)
    return {"architecture": architecture, "vocabulary": digest.hexdigest()}


def chunker_version(identity: dict[str, Any]) -> int:
    """The chunking a model identity records (an index made before it was recorded: 1)."""
    chunker = identity.get("chunker")
    return chunker.get("version", 1) if isinstance(chunker, dict) else 1


def first_difference(expected: dict[str, Any], actual: dict[str, Any],
                     ignore: tuple[str, ...] = ()) -> tuple[str, Any, Any] | None:
    """The first setting (``"chunker.max_words"``, ..., then ``"fingerprint"``) two identities disagree on, the
    settings named in ``ignore`` left out."""
    for section in ("chunker", "passage_encoder", "graph"):
        for key, value in expected.get(section, {}).items():
            if section == "chunker" and key == "version" or f"{section}.{key}" in ignore:
                continue  # (the chunker's version: warned of where documents are added, not refused)
            other = actual.get(section, {}).get(key)
            if other != value:
                return f"{section}.{key}", value, other
    if expected.get("fingerprint") != actual.get("fingerprint"):
        return "fingerprint", expected.get("fingerprint"), actual.get("fingerprint")
    # (an identity recorded before graphdoc kept these, or an entry one transformers release lacks: not compared)
    was, now = expected.get("encoder") or {}, actual.get("encoder") or {}
    for key, value in (was.get("architecture") or {}).items():
        if key in (now.get("architecture") or {}) and now["architecture"][key] != value:
            return f"encoder.{key}", value, now["architecture"][key]
    if was.get("vocabulary") and now.get("vocabulary") and was["vocabulary"] != now["vocabulary"]:
        return "encoder.vocabulary", was["vocabulary"], now["vocabulary"]
    return None


def check_identity(expected: dict[str, Any], actual: dict[str, Any], where: Path,
                   ignore: tuple[str, ...] = ()) -> None:
    """Refuse a model whose identity differs from the index's, naming the first differing setting (those named in
    ``ignore`` left out)."""
    difference = first_difference(expected, actual, ignore)
    if difference is None:
        return
    name, value, other = difference
    built, given = (str(identity.get("path") or identity.get("name")) for identity in (expected, actual))
    if name == "encoder.vocabulary":
        raise IndexMismatchError(f"index {where} was built with a tokenizer of another vocabulary than this model's "
                                 f"(the index's model is {built!r}, this one {given!r}): pass the index's model "
                                 "(--model) with its own tokenizer files")
    if name != "fingerprint":
        models = f" (the index's model is {built!r}, this one {given!r})" if built != given else ""
        cap = (f" (the index's passage cap: give --max-passages {value or 0}, or set it in the model's config)"
               if name == "chunker.max_passages" else "")
        raise IndexMismatchError(f"index {where} was built with {name}={value!r}, the model has {name}={other!r}"
                                 f"{models}{cap}")
    if built == given:  # the same folder or hub id, other weights: retrained in place, or another revision
        raise IndexMismatchError(
            f"index {where} was built with model {built!r} when its weights were {str(value)[:12]}; they are now "
            f"{str(other)[:12]}: rebuild the index, or pass the model it was built with (--model)")
    raise IndexMismatchError(
        f"index {where} was built with model {built!r} (weights {str(value)[:12]}), not {given!r} (weights "
        f"{str(other)[:12]}): pass the index's model (--model)")
