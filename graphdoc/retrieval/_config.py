"""Shared helpers for the plain-dataclass configurations of the retrieval package."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from graphdoc.errors import GraphDocError

T = TypeVar("T")


def config_from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
    """Build dataclass `cls` from `data`; unknown keys are an error that lists the valid ones."""
    if not isinstance(data, Mapping):
        raise GraphDocError(f"{cls.__name__} expects a mapping, got {type(data).__name__}")
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(valid), key=str)
    if unknown:
        raise GraphDocError(
            f"unknown {cls.__name__} key(s) {', '.join(map(repr, unknown))}; valid keys: {', '.join(valid)}"
        )
    return cls(**data)


def check_choice(what: str, value: Any, choices: Iterable[Any]) -> None:
    """Raise a one-line GraphDocError when `value` is not one of `choices`."""
    choices = list(choices)
    if value not in choices:
        raise GraphDocError(f"unknown {what} {value!r}; valid: {', '.join(map(repr, choices))}")
