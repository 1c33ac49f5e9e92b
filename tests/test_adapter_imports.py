"""The adapters use only the public API of ``harombe_core``.

Every module of ``langchain_harombe`` and ``llamaindex_harombe`` is parsed, and every way it
reaches the core (``from harombe_core... import name``, ``import harombe_core...``, and
``importlib.import_module("harombe_core...")``, at any depth: inside functions and
``TYPE_CHECKING`` blocks too) must name a public module and, for ``from`` imports, a name in
that module's ``__all__``. The public modules are ``harombe_core`` itself and the documented
submodules listed below (``docs/integrations.md``); anything else is an internal module that
may move or split without notice, and an adapter reaching into it fails here.

``harombe_core.server`` is not an adapter: it is part of the core package (the ``harombe
serve`` application, layered with the command line in ``tests/core/test_layers.py``), not a
bridge to another framework, so it is held to the layering rules instead.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = ("langchain_harombe", "llamaindex_harombe")
#: The public surface: the package's ``__all__`` and the documented submodules' ``__all__``.
PUBLIC_MODULES = (
    "harombe_core",
    "harombe_core.errors",
    "harombe_core.models",
    "harombe_core.tokens",
    "harombe_core.validate",
    "harombe_core.embeddings",
    "harombe_core.testing",
    "harombe_core.cli_app",
    "harombe_core.integration",
)


def public_names(module: str) -> set[str]:
    return set(importlib.import_module(module).__all__)


def core_references(tree: ast.AST) -> Iterator[tuple[int, str, str | None]]:
    """``(line, module, name)`` for every reference to a core module (name None: the module)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "harombe_core":
                for alias in node.names:
                    yield node.lineno, node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "harombe_core":
                    yield node.lineno, alias.name, None
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and node.args[0].value.split(".")[0] == "harombe_core"
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id == "import_module")
            )
        ):
            yield node.lineno, node.args[0].value, None


def violations(source: str, where: str) -> list[str]:
    """What in ``source`` reaches past the public surface, as ``where:line: reason``."""
    found = []
    for line, module, name in core_references(ast.parse(source)):
        if module not in PUBLIC_MODULES:
            target = module if name is None else f"{module}.{name}"
            found.append(f"{where}:{line}: {target} (internal module {module})")
        elif name is not None and name not in public_names(module):
            found.append(f"{where}:{line}: {module}.{name} (not in {module}.__all__)")
    return found


def adapter_files() -> list[Path]:
    return [path for package in ADAPTERS for path in sorted((ROOT / package).rglob("*.py"))]


def test_adapters_import_only_the_public_api() -> None:
    found = []
    for path in adapter_files():
        found += violations(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not found, "adapters reach into core internals:\n" + "\n".join(found)


def test_the_scan_sees_every_adapter_module() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in adapter_files()}
    assert {"langchain_harombe/history.py", "llamaindex_harombe/memory.py"} <= names
    references = sum(
        1 for p in adapter_files() for _ in core_references(ast.parse(p.read_text("utf-8")))
    )
    assert references > 100  # the adapters do use the core: the scan is not reading nothing


@pytest.mark.parametrize(
    "source",
    [
        "from harombe_core.store.sqlite import to_micros",
        "from harombe_core.manager import MemoryManager",
        "import harombe_core.store.rows",
        "from harombe_core.errors import Fix",  # errors.__all__ is the error classes only
        "from harombe_core import _errors",
        "def f():\n    from harombe_core.strategies import Window\n",
        "if TYPE_CHECKING:\n    from harombe_core.context import ContextBuilder\n",
        "importlib.import_module('harombe_core.store.sql_body')",
    ],
)
def test_an_internal_import_is_caught(source: str) -> None:
    assert violations(source, "adapter.py")


@pytest.mark.parametrize(
    "source",
    [
        "from harombe_core import MemoryManager, Message",
        "from harombe_core.integration import to_micros, items",
        "from harombe_core.errors import InvalidInputError",
        "import harombe_core",
    ],
)
def test_public_imports_pass(source: str) -> None:
    assert violations(source, "adapter.py") == []


def test_every_public_module_is_documented_and_resolves() -> None:
    page = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    for module in PUBLIC_MODULES:
        assert f"`{module}`" in page, f"{module} is public but not in docs/integrations.md"
        mod = importlib.import_module(module)
        for name in mod.__all__:
            assert getattr(mod, name) is not None, f"{module}.{name}"
    integration = importlib.import_module("harombe_core.integration")
    for name in integration.__all__:
        assert f"`{name}`" in page, f"harombe_core.integration.{name} is not documented"
