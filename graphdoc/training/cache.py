"""A disk cache of passage-encoder vectors, for training the graph layers over a frozen encoder.

Each passage is encoded once; its vector is kept under the encoder's identity (a fingerprint of its
weights, its pooling settings and its mixed precision) and a hash of the token ids the encoder sees, so a
change of model, pooling, precision, tokenizer output, title handling or chunking can never serve a stale
vector.

Layout (plain files, no pickle; shards are append-only and safe to share between processes)::

    ROOT/<encoder key>/encoder.json            what the key stands for, and the vector size
    ROOT/<encoder key>/vectors-<id>.npy        float32 [rows, hidden]
    ROOT/<encoder key>/vectors-<id>.json       {"keys": [...]}: row i of the .npy; written last,
                                               so a shard without it is incomplete and ignored
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import uuid
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from graphdoc.device import autocast_dtype
from graphdoc.errors import GraphDocError
from graphdoc.fileio import atomic_write
from graphdoc.fingerprint import architecture_fingerprint, weights_fingerprint
from graphdoc.models.passage_encoder import PassageEncoder
from graphdoc.modes import eval_mode

logger = logging.getLogger(__name__)

CACHE_NAME = "passage_cache"  # the frozen mode's passage vectors in a run's folder, unless cache_dir is set


def cache_folder(cache_dir: str | Path | None, output: Path) -> Path:
    """Where a run into ``output`` keeps its passage vectors: ``cache_dir`` (``--cache-dir``), else in ``output``."""
    return Path(cache_dir) if cache_dir else output / CACHE_NAME

FORMAT = "graphdoc.passage_cache"


def encoder_identity(encoder: PassageEncoder) -> dict:
    """What decides a passage encoder's vectors for given token ids: weights, architecture configuration, pooling,
    ``Dense`` modules, normalisation, precision; not where the model was read from, so a copy in another folder
    shares the vectors (``model`` names it in ``encoder.json`` only)."""
    identity = {"format": FORMAT, "fingerprint": weights_fingerprint(encoder),
                "architecture": architecture_fingerprint(encoder.model.config), "pooling": encoder.pooling,
                "normalize": encoder.normalize, "dimension": encoder.hidden_size}
    if len(encoder.dense):  # a Dense module's activation has no weights to fingerprint
        identity["dense"] = [module.config() for module in encoder.dense]
    dtype = autocast_dtype(next(encoder.parameters()).device, encoder.config.precision)
    if dtype is not None:  # mixed-precision vectors are kept apart from full-precision ones
        identity["autocast"] = str(dtype).removeprefix("torch.")
    return identity


def _key(identity: dict) -> str:
    """The cache folder of an encoder identity."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def _legacy_key(identity: dict, encoder: PassageEncoder) -> str:
    """The folder an earlier graphdoc gave an encoder: keyed by its path, without architecture and ``Dense``."""
    old = {key: value for key, value in identity.items() if key not in ("architecture", "dense")}
    return _key({**old, "model": encoder.config.model_name_or_path})


def discard_empty_cache(root: str | Path) -> None:
    """Remove a cache folder ``root`` that a failed run made, as far as it holds no vectors: an encoder folder
    with nothing but its ``encoder.json``, then ``root`` itself if that left it empty. Another run sharing
    ``root`` keeps every vector it wrote (and makes its folder again for the next; see
    :meth:`PassageVectorCache.flush`)."""
    root = Path(root)
    if not root.is_dir() or root.is_symlink():
        return
    for folder in root.iterdir():
        if folder.is_dir() and not folder.is_symlink() and [p.name for p in folder.iterdir()] == ["encoder.json"]:
            with contextlib.suppress(FileNotFoundError):
                (folder / "encoder.json").unlink()
            with contextlib.suppress(OSError):
                folder.rmdir()
    with contextlib.suppress(OSError):
        root.rmdir()


def passage_key(token_ids: Sequence[int]) -> str:
    """A 128-bit hash of a passage's encoder input (its token ids)."""
    return hashlib.blake2b(np.asarray(token_ids, dtype=np.int64).tobytes(), digest_size=16).hexdigest()


class PassageVectorCache:
    """Passage vectors of one frozen encoder, read from and appended to ``root``.

    :meth:`encode` returns the vectors of any token sequences, encoding only the ones not seen before;
    new vectors are written out as a shard every ``shard_size`` rows and on :meth:`flush`.
    ``hits`` and ``misses`` count lookups.
    """

    def __init__(self, root: str | Path, encoder: PassageEncoder, shard_size: int = 8192) -> None:
        identity = encoder_identity(encoder)
        self.folder = Path(root) / _key(identity)
        legacy = Path(root) / _legacy_key(identity, encoder)
        if not self.folder.exists() and legacy.is_dir():
            self.folder = legacy  # as written before the key left the path out (with its path: the same model)
        identity = {**identity, "model": encoder.config.model_name_or_path}  # shown in encoder.json, not keyed
        self.encoder = encoder
        self.shard_size = shard_size
        self.hits = self.misses = 0
        self._shards: list[np.ndarray] = []
        self._index: dict[str, tuple[int, int]] = {}  # passage key -> (shard, row)
        self._pending: dict[str, np.ndarray] = {}
        self._loaded: set[str] = set()
        self._identity = identity
        self._open()

    def __len__(self) -> int:
        return len(self._index) + len(self._pending)

    def _open(self) -> None:
        self._make_folder()
        self.refresh()
        logger.info("passage cache %s: %d vectors", self.folder, len(self._index))

    def _make_folder(self) -> None:
        """The cache folder and its ``encoder.json``, made again if a failed run sharing ``root`` removed them
        before this one wrote a shard (see :func:`discard_empty_cache`)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        info = self.folder / "encoder.json"
        if not info.is_file():
            with atomic_write(info, "w", encoding="utf-8") as handle:
                json.dump(self._identity, handle, indent=2)

    def refresh(self) -> None:
        """Load the shards written since the last look (e.g. by other training processes)."""
        for keys_file in sorted(self.folder.glob("vectors-*.json")):
            if keys_file.name not in self._loaded:
                self._load_shard(keys_file)

    def _load_shard(self, keys_file: Path) -> None:
        try:
            keys = json.loads(keys_file.read_text(encoding="utf-8"))["keys"]
            vectors = np.load(keys_file.with_suffix(".npy"), mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, KeyError) as exc:
            raise GraphDocError(f"passage cache shard {keys_file} is unreadable ({exc}); delete it") from None
        if vectors.shape != (len(keys), self.encoder.hidden_size):
            raise GraphDocError(f"passage cache shard {keys_file} does not match its keys; delete it")
        shard = len(self._shards)
        self._shards.append(vectors)
        self._loaded.add(keys_file.name)
        for row, key in enumerate(keys):
            self._index.setdefault(key, (shard, row))

    def encode(self, token_ids: Sequence[Sequence[int]]) -> torch.Tensor:
        """The vectors of ``P`` token sequences, in order: ``[P, hidden]`` float32 on the encoder's device."""
        keys = [passage_key(ids) for ids in token_ids]
        missing = list(dict.fromkeys(k for k in keys if k not in self._index and k not in self._pending))
        if missing:
            first = {k: ids for k, ids in zip(keys, token_ids)}
            self._encode_missing(missing, [list(first[k]) for k in missing])
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        rows = np.stack([self._lookup(k) for k in keys]) if keys else np.empty((0, self.encoder.hidden_size))
        device = next(self.encoder.parameters()).device
        return torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32)).to(device)

    def _lookup(self, key: str) -> np.ndarray:
        if key in self._pending:
            return self._pending[key]
        shard, row = self._index[key]
        return self._shards[shard][row]

    def _encode_missing(self, keys: list[str], token_ids: list[list[int]]) -> None:
        with eval_mode(self.encoder), torch.inference_mode():
            vectors = self.encoder.encode_ids(token_ids).float().cpu().numpy()
        self._pending.update(zip(keys, vectors))
        if len(self._pending) >= self.shard_size:
            self.flush()

    def flush(self) -> None:
        """Write the vectors encoded since the last flush as a new shard."""
        if not self._pending:
            return
        keys = list(self._pending)
        vectors = np.stack([self._pending[k] for k in keys]).astype(np.float32)
        name = f"vectors-{uuid.uuid4().hex[:16]}"
        with atomic_write(self.folder / f"{name}.npy", "wb") as handle:
            np.save(handle, vectors, allow_pickle=False)
        with atomic_write(self.folder / f"{name}.json", "w", encoding="utf-8") as handle:
            json.dump({"keys": keys}, handle)
        self._make_folder()  # atomic_write made the folder if a failed run removed it: encoder.json too
        self._load_shard(self.folder / f"{name}.json")
        self._pending.clear()
