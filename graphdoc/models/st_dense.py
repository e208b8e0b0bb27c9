"""sentence-transformers' ``Dense`` module: a linear layer (and activation) on the pooled passage vector.

Models such as LaBSE, distiluse-base-multilingual and the GTR / sentence-T5 family end their pipeline with one:
without it their passage vectors are not the ones they were trained to produce. Read from and written to a
sentence-transformers model folder (``N_Dense/config.json`` and ``N_Dense/model.safetensors``); the weights'
names are sentence-transformers' own, so a folder graphdoc writes loads in sentence-transformers too.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import torch
from torch import nn

from graphdoc.errors import ModelLoadError
from graphdoc.fileio import read_safetensors

WEIGHTS = "model.safetensors"
PICKLED_WEIGHTS = "pytorch_model.bin"
#: where sentence-transformers' ``Dense`` reads and writes by default: the pooled vector
SENTENCE_EMBEDDING = "sentence_embedding"
_CONFIG_KEYS = frozenset({"in_features", "out_features", "bias", "activation_function", "module_input_name",
                          "module_output_name", "use_residual"})


class Dense(nn.Module):
    r"""``activation(linear(x))`` (plus ``x``, or a bias-free linear map of it, with ``use_residual``), as
    sentence-transformers' ``Dense`` computes it.

    Shapes: :meth:`forward`: ``[..., in_features]`` -> ``[..., out_features]``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 activation: nn.Module | None = None, use_residual: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features, self.bias = in_features, out_features, bias
        self.use_residual = use_residual
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.activation_function = activation if activation is not None else nn.Identity()  # as there
        if use_residual and in_features != out_features:
            self.residual = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.activation_function(self.linear(x))
        if self.use_residual:
            out = out + (x if self.in_features == self.out_features else self.residual(x))
        return out

    def config(self) -> dict:
        """The ``config.json`` sentence-transformers writes for this layer."""
        config = {"in_features": self.in_features, "out_features": self.out_features, "bias": self.bias,
                  "activation_function": _fullname(type(self.activation_function))}
        if self.use_residual:  # left out at its default, as sentence-transformers does (older releases load it)
            config["use_residual"] = True
        return config

    def save(self, folder: Path) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(self.config(), indent=2) + "\n", encoding="utf-8")
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(tensors, str(folder / WEIGHTS), metadata={"format": "pt"})

    def extra_repr(self) -> str:
        return f"use_residual={self.use_residual}" if self.use_residual else ""


def applies_to_pooled_vector(config: dict) -> bool:
    """Whether a ``Dense`` config maps the pooled vector to itself (the default), which graphdoc applies; one
    reading or writing other features (token vectors, say) is not applied."""
    return all(config.get(key) in (None, SENTENCE_EMBEDDING) for key in ("module_input_name", "module_output_name"))


def read_config(folder: Path) -> dict:
    """A ``Dense`` module's ``config.json``; a missing or broken one is one :class:`ModelLoadError` line."""
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(f"{path} is missing (a Dense module's settings)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{path}: cannot read it ({getattr(exc, 'msg', None) or exc})") from None
    if not isinstance(config, dict):
        raise ModelLoadError(f"{path}: expected a JSON object")
    return config


def load(folder: Path, config: dict) -> Dense:
    """The ``Dense`` module in ``folder`` (its :func:`read_config` ``config``), weights from safetensors."""
    path = folder / "config.json"
    for key in ("in_features", "out_features"):
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ModelLoadError(f"{path}: {key} must be a positive integer; got {value!r}")
    unknown = sorted(set(config) - _CONFIG_KEYS)
    if unknown:
        raise ModelLoadError(f"{path}: unknown Dense setting(s) {', '.join(unknown)}")
    layer = Dense(config["in_features"], config["out_features"], bias=bool(config.get("bias", True)),
                  activation=_activation(config.get("activation_function"), path),
                  use_residual=bool(config.get("use_residual", False)))
    weights = folder / WEIGHTS
    if not weights.is_file():
        if (folder / PICKLED_WEIGHTS).is_file():
            raise ModelLoadError(f"{folder / PICKLED_WEIGHTS}: graphdoc loads no pickled weights; re-save the model "
                                 f"with sentence-transformers >= 3 (it writes {WEIGHTS})")
        # (a hub model's pickled file is not fetched just to name it: the message covers both cases)
        raise ModelLoadError(f"{folder} has no {WEIGHTS} (the Dense module's weights; graphdoc loads no pickled "
                             f"{PICKLED_WEIGHTS}: re-save the model with sentence-transformers >= 3)")
    state = read_safetensors(weights)
    expected = {k: tuple(v.shape) for k, v in layer.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in state.items()}
    if found != expected:
        raise ModelLoadError(f"{weights}: weights {_shapes(found)} do not fit {path} "
                             f"(in_features {layer.in_features}, out_features {layer.out_features}, bias "
                             f"{str(layer.bias).lower()}): expected {_shapes(expected)}")
    layer.load_state_dict({k: v.float() for k, v in state.items()})
    return layer


def _activation(name, path: Path) -> nn.Module:
    """The activation a config names: a ``torch.nn`` module class, built without arguments; Tanh when unset,
    as in sentence-transformers. Nothing outside ``torch.nn`` is imported."""
    if name is None:
        return nn.Tanh()
    cls = getattr(nn, name.rsplit(".", 1)[-1], None) if isinstance(name, str) else None
    known = inspect.isclass(cls) and issubclass(cls, nn.Module)
    if not (known and name in {_fullname(cls), f"torch.nn.{cls.__name__}"}):
        raise ModelLoadError(f"{path}: activation_function {name!r} is not a torch.nn module class (such as "
                             "torch.nn.modules.activation.Tanh); graphdoc applies those only")
    try:
        return cls()
    except TypeError:
        raise ModelLoadError(f"{path}: activation_function {name} needs arguments; graphdoc builds it "
                             "without any") from None


def _fullname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _shapes(shapes: dict[str, tuple[int, ...]]) -> str:
    return ", ".join(f"{k} {list(v)}" for k, v in sorted(shapes.items())) or "(none)"
