"""Module attributes imported on first use, for packages whose imports must stay light.

``import harombe_core`` (and each adapter package) must not pull in numpy, torch, LangChain or a
database driver before a feature needs them, yet their public names should be importable from
the package itself. A package lists where each name lives and gets its ``__getattr__`` and
``__dir__`` from :func:`lazy_attributes`; the first access imports the module and caches the
value in the package, so later accesses cost nothing.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, where: Mapping[str, str], public: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for module ``package``: ``where`` maps a name to the module
    defining it, and ``dir()`` shows exactly ``public`` (the package's ``__all__``)."""
    namespace = vars(sys.modules[package])
    shown = sorted(public)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return list(shown)

    return __getattr__, __dir__
