"""Names a package exports but imports on first use (PEP 562), so that importing it stays light."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_names(package: str, names: dict[str, str],
               package_globals: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__``: each of ``names`` (name -> the module that defines it) is
    imported when first asked for, and listed by ``dir()`` (and tab completion) with the package's own names."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(package_globals) | set(names))

    return __getattr__, __dir__
