"""The manifest of an index folder: what built it, with which settings, and how far it got."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from graphdoc.errors import GraphDocError, IndexMismatchError
from graphdoc.fileio import atomic_write
from graphdoc.fingerprint import weights_fingerprint as model_fingerprint

MANIFEST_NAME = "manifest.json"
FORMAT = "graphdoc.index"
FORMAT_VERSION = 1


@dataclass
class SourceProgress:
    """One corpus fed into the index: how many of its documents (in reading order) are in shards."""

    corpus: str
    part: str = "1/1"
    documents_read: int = 0
    complete: bool = False


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
    finalized: bool = False
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    graphdoc_version: str = ""
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    def save(self, folder: Path) -> None:
        with atomic_write(folder / MANIFEST_NAME, "w", encoding="utf-8") as handle:
            json.dump(asdict(self), handle, indent=2)
            handle.write("\n")

    @classmethod
    def load(cls, folder: Path) -> "Manifest":
        path = folder / MANIFEST_NAME
        if not path.is_file():
            raise GraphDocError(f"{folder} is not a graphdoc index (no {MANIFEST_NAME})")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise GraphDocError(f"{path}: unreadable manifest ({exc})") from None
        if data.get("format") != FORMAT:
            raise GraphDocError(f"{path}: not a graphdoc index manifest")
        if data.get("format_version", 0) > FORMAT_VERSION:
            raise GraphDocError(f"{path}: index format {data['format_version']} is newer than this "
                                f"graphdoc understands ({FORMAT_VERSION}); upgrade graphdoc")
        data["sources"] = [SourceProgress(**s) for s in data.get("sources", [])]
        return cls(**data)

    def source(self, corpus: str, part: str) -> SourceProgress | None:
        return next((s for s in self.sources if s.corpus == corpus and s.part == part), None)


def model_identity(model) -> dict[str, Any]:
    """The settings of a model that decide its vectors, and a fingerprint of its weights."""
    cfg = model.config.to_dict()
    encoder = dict(cfg["passage_encoder"])
    # the name is informational (the fingerprint identifies weights); batching and precision
    # change speed, not vectors
    for transient in ("model_name_or_path", "max_tokens_per_batch", "precision"):
        encoder.pop(transient, None)
    return {"name": cfg["passage_encoder"]["model_name_or_path"], "path": model.name_or_path,
            "fingerprint": model_fingerprint(model),
            "chunker": cfg["chunker"], "passage_encoder": encoder, "graph": cfg["graph"]}


def first_difference(expected: dict[str, Any], actual: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first setting (``"chunker.max_words"``, ..., then ``"fingerprint"``) two identities disagree on."""
    for section in ("chunker", "passage_encoder", "graph"):
        for key, value in expected.get(section, {}).items():
            other = actual.get(section, {}).get(key)
            if other != value:
                return f"{section}.{key}", value, other
    if expected.get("fingerprint") != actual.get("fingerprint"):
        return "fingerprint", expected.get("fingerprint"), actual.get("fingerprint")
    return None


def check_identity(expected: dict[str, Any], actual: dict[str, Any], where: Path) -> None:
    """Refuse a model whose identity differs from the index's, naming the first differing setting."""
    difference = first_difference(expected, actual)
    if difference is None:
        return
    name, value, other = difference
    if name != "fingerprint":
        raise IndexMismatchError(f"index {where} was built with {name}={value!r}, the model has {name}={other!r}")
    raise IndexMismatchError(
        f"index {where} was built with model {expected.get('name')!r} (weights "
        f"{str(value)[:12]}), not {actual.get('name')!r} (weights "
        f"{str(other)[:12]}): pass --model with the index's model")
