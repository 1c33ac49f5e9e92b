"""Module attributes imported on first use, for packages whose imports must stay light.

``import harombe_core`` (and each adapter package) must not pull in numpy, torch, LangChain or a
database driver before a feature needs them, yet their public names should be importable from
the package itself. A package lists where each name lives and gets its ``__getattr__`` and
``__dir__`` from :func:`lazy_attributes`; the first access imports the module and caches the
value in the package, so later accesses cost nothing.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from harombe_core.errors import requires_packages

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str,
    where: Mapping[str, str],
    public: Iterable[str],
    *,
    extra: tuple[str, tuple[str, ...]] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for module ``package``: ``where`` maps a name to the module
    defining it, and ``dir()`` shows exactly ``public`` (the package's ``__all__``).

    ``extra=("langchain", ("langchain_core", ...))`` names the extra the package is built on
    and the packages it brings: a name whose module cannot be imported because one of them is
    missing raises :class:`~harombe_core.errors.MissingExtraError` with the command that
    installs the extra, not a bare ``ModuleNotFoundError`` from deep inside the import.
    """
    namespace = vars(sys.modules[package])
    shown = sorted(public)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        needs = (
            requires_packages(f"{package}.{name}", *extra)
            if extra is not None
            else contextlib.nullcontext()
        )
        with needs:
            value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return list(shown)

    return __getattr__, __dir__
