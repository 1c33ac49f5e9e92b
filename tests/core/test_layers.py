"""The library's modules stay in layers, without cycles, private reach-ins or giant files.

A module imports only from its own layer or a lower one (imports inside functions count too:
a lazy import is still a dependency), no import cycle exists between library modules, no
module uses another module's ``_``-prefixed name (``store._run``, ``from x import _helper``),
and no module grows into a giant (over 1,000 lines). Each rule has an allow-list of the
violations that exist today; the lists may only shrink, so a fixed violation fails the test
until it is removed from its list.

Modules are sized by cohesion: one module per job, split where the job splits and merged where
two modules do one job, not at a line count. A 700-line cap split modules mid-thought (files at
698 and 699 lines, shims and one-function modules), so the ceiling is now an alarm for a module
that has become several things at once (the 3,000-line class of the anti-patterns); the one
module past it (the manager: the public API written out) is listed with its reason.

The layers, low to high (a module not listed makes the test fail, so every new module is
placed on purpose):

0. errors, limits, validate, models, config, tokens, owners, query_time, text, jsonstream,
   checkpoint_safety, folding (the background worker)
1. store/*, embeddings/*, flows
2. vectors/*
3. llm, strategies, summarize, thread_graph, selectors, ranking
4. retrieval, threads, context
5. manager (composing its parts: context.ContextBuilder, manager_search.Searcher)
6. chat_memory, export, migrate, demo, graph_render, testing
7. cli, server/* (``harombe serve``), integration (the adapters' toolkit), the ``harombe_core``
   package itself
8. the adapters: langchain_harombe, llamaindex_harombe
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("harombe_core", "langchain_harombe", "llamaindex_harombe")
#: A module past this holds several jobs: split it by job (not at this line).
MAX_LINES = 1000

# Module (or package prefix, ending in ".") -> layer. The longest matching entry wins.
LAYERS: dict[str, int] = {
    **dict.fromkeys(
        [
            "errors",
            "limits",
            "validate",
            "models",
            "config",
            "tokens",
            "owners",
            "query_time",
            "jsonstream",
            "progress",
            "lazy",
            "folding",  # the background worker (stdlib only): stores and indexes hand it jobs
            "checkpoint_safety",
        ],
        0,
    ),
    "store.": 1,
    "store": 1,
    # the one sync/async mechanism, beside the store (its SQLite hop and the drains of owed
    # rows run through the flows' one thread hop; a Run request names a store operation)
    "flows": 1,
    "store.items": 1,  # key/value items with vectors (the LangGraph store's tables)
    "embeddings.": 1,
    "embeddings": 1,
    # user memory: what is stored (models), store operations and the pure rules beside them
    # (consolidation, the offline extractor), the LLM extractor, the part the manager composes.
    "facts": 0,
    "facts.models": 0,
    "facts.ops": 1,
    "facts.consolidate": 1,
    "facts.extract": 1,
    "facts.llm": 3,
    "facts.memory": 4,
    "vectors.": 2,
    "vectors": 2,
    **dict.fromkeys(
        [
            "derive",
            "llm",
            "strategies",
            "context_reads",
            "write_inputs",
            "erasing",
            "summarize",
            "thread_graph",
            "selectors",
            "ranking",
        ],
        3,
    ),
    # manager_search: the manager's search side, composed over the Retriever.
    **dict.fromkeys(
        ["retrieval", "threads", "threader", "manager_search", "manager_facts", "context"], 4
    ),
    "manager": 5,
    **dict.fromkeys(
        [
            "chat_memory",
            "export",
            "export.",
            "migrate",
            "migrate.",
            "demo",
            "graph_render",
            "testing",
        ],
        6,
    ),
    "cli": 7,
    "cli_app": 7,
    "cli_check": 7,  # `harombe check PATH|URL` (integrity of a SQLite file or a PostgreSQL store)
    "cli_facts": 7,  # `harombe facts` and `harombe profile` (user memory)
    "cli_forget": 7,  # `harombe forget --user U` (erasure)
    # the integration toolkit: what the adapters may use beyond harombe_core's __all__
    "integration": 7,
    # harombe serve: the JSON API, MCP server, inspector and client, beside the command line
    "server": 7,
    "server.": 7,
    "": 7,  # harombe_core/__init__.py
}
ADAPTER_LAYER = 8

# Today's violations. These lists only shrink: remove an entry once it is fixed.
ALLOWED_UPWARD: set[tuple[str, str]] = set()
ALLOWED_CYCLES: set[frozenset[str]] = set()
ALLOWED_PRIVATE: set[tuple[str, str]] = set()
# manager: one job (the public API: every method and its async twin written out where an
# editor and a type checker can follow them, each a short call into the part that does the
# work); long by breadth, not by mixing jobs.
ALLOWED_LONG: set[str] = {"harombe_core.manager"}


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    imports: set[str] = field(default_factory=set)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _load() -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = _module_name(path)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            modules[name] = Module(name, path, tree)
    for module in modules.values():
        module.imports = set(_imports(module, modules))
    return modules


def _is_package(module: Module) -> bool:
    return module.path.name == "__init__.py"


def _imports(module: Module, modules: dict[str, Module]) -> Iterator[str]:
    """Every library module ``module`` imports, anywhere in its body."""
    package = module.name if _is_package(module) else module.name.rpartition(".")[0]
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name, modules)
                if target:
                    yield target
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(package, node.module, node.level)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                target = submodule if submodule in modules else _known(base, modules)
                if target and target != module.name:
                    yield target


def _absolute(package: str, name: str | None, level: int) -> str:
    if level == 0:
        return name or ""
    parts = package.split(".")
    if level > 1:
        parts = parts[: -(level - 1)]
    return ".".join([*parts, name] if name else parts)


def _known(name: str, modules: dict[str, Module]) -> str | None:
    """The library module ``name`` refers to (a package if ``name`` is inside one)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def layer(name: str) -> int:
    """The layer of library module ``name``; fails for a module the table does not place."""
    top, _, rest = name.partition(".")
    if top != "harombe_core":
        return ADAPTER_LAYER
    best: str | None = None
    for key in LAYERS:
        matches = rest == key or (key.endswith(".") and rest.startswith(key))
        if matches and (best is None or len(key) > len(best)):
            best = key
    if best is None:
        pytest.fail(f"{name} has no layer: add it to LAYERS in {Path(__file__).name}")
    return LAYERS[best]


MODULES = _load()


def test_every_module_has_a_layer() -> None:
    for name in MODULES:
        layer(name)


def test_no_module_imports_a_higher_layer() -> None:
    upward = {
        (module.name, target)
        for module in MODULES.values()
        for target in module.imports
        if layer(target) > layer(module.name)
    }
    assert upward - ALLOWED_UPWARD == set(), "imports of a higher layer"
    assert ALLOWED_UPWARD - upward == set(), "fixed: remove them from ALLOWED_UPWARD"


def _cycles() -> set[frozenset[str]]:
    """The strongly connected groups of modules (Tarjan), each a set of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: set[frozenset[str]] = set()

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in sorted(MODULES[name].imports):
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == name:
                    break
            if len(group) > 1:
                groups.add(frozenset(group))

    for name in sorted(MODULES):
        if name not in index:
            visit(name)
    return groups


def _without_packages(groups: set[frozenset[str]]) -> set[frozenset[str]]:
    """Cycles that remain once a package's ``__init__`` re-exporting its submodules is set
    aside: ``store/__init__`` importing ``store.sqlite`` which imports ``store.base`` is how
    Python packages work, not a cycle between two jobs."""
    packages = {name for name, module in MODULES.items() if _is_package(module)}
    kept = set()
    for group in groups:
        rest = group - packages
        if len(rest) > 1 and _still_cycle(rest):
            kept.add(frozenset(rest))
    return kept


def _still_cycle(group: frozenset[str] | set[str]) -> bool:
    """Whether ``group`` still has a cycle using only edges between its own members."""
    seen: dict[str, int] = {}

    def cyclic(name: str) -> bool:
        seen[name] = 1
        for target in MODULES[name].imports & group:
            if seen.get(target) == 1 or (target not in seen and cyclic(target)):
                return True
        seen[name] = 2
        return False

    return any(name not in seen and cyclic(name) for name in sorted(group))


def test_no_import_cycle() -> None:
    cycles = _without_packages(_cycles())
    assert cycles - ALLOWED_CYCLES == set(), "import cycles between library modules"
    assert ALLOWED_CYCLES - cycles == set(), "fixed: remove them from ALLOWED_CYCLES"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_privates(module: Module) -> set[str]:
    """The ``_`` names a module defines: functions, classes, methods, assigned names and
    attributes (``self._x = ...``) anywhere in it."""
    names: set[str] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.rpartition(".")[2])
    return {name for name in names if _private(name)}


def _private_uses(modules: dict[str, Module]) -> set[tuple[str, str]]:
    """(module, private name) for each use of a ``_`` name another library module defines.

    ``from x import _name`` and ``import``-ing a ``_module`` from outside its package count,
    and so does ``something._name`` when ``_name`` is not the using module's own (``store._run``
    from vectors/ is another module's). ``self._x`` and ``cls._x`` are the object's own members,
    inherited ones included.
    """
    own = {name: _defined_privates(module) for name, module in modules.items()}
    everyone: set[str] = set().union(*own.values())
    uses: set[tuple[str, str]] = set()
    for module in modules.values():
        package = module.name if _is_package(module) else module.name.rpartition(".")[0]
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(package, node.module, node.level)
                target = _known(base, modules)
                if target is None:
                    continue
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    if submodule in modules:
                        if _outside_private_module(module.name, submodule):
                            uses.add((module.name, submodule))
                    elif _private(alias.name) and target != module.name:
                        uses.add((module.name, submodule))
                if _outside_private_module(module.name, base):
                    uses.add((module.name, base))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if _known(alias.name, modules) and _outside_private_module(
                        module.name, alias.name
                    ):
                        uses.add((module.name, alias.name))
            elif (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and not _own_object(node.value)
                and node.attr not in own[module.name]
                and node.attr in everyone
            ):
                uses.add((module.name, node.attr))
    return uses


def _own_object(node: ast.expr) -> bool:
    """``self``/``cls``: an object's own members, inherited ones included, are not a reach-in."""
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _outside_private_module(user: str, imported: str) -> bool:
    """Whether ``imported`` has a ``_`` part whose package does not contain ``user``."""
    parts = imported.split(".")
    for i, part in enumerate(parts):
        if _private(part):
            owner = ".".join(parts[:i])
            return not (user == owner or user.startswith(owner + "."))
    return False


def test_no_module_uses_another_modules_private_names() -> None:
    uses = _private_uses(MODULES)
    assert uses - ALLOWED_PRIVATE == set(), "private names used from another module"
    assert ALLOWED_PRIVATE - uses == set(), "fixed: remove them from ALLOWED_PRIVATE"


def test_no_giant_module() -> None:
    long = {
        name
        for name, module in MODULES.items()
        if len(module.path.read_text(encoding="utf-8").splitlines()) > MAX_LINES
    }
    assert long - ALLOWED_LONG == set(), f"modules over {MAX_LINES} lines: split them by job"
    assert ALLOWED_LONG - long == set(), "under the limit now: remove them from ALLOWED_LONG"


def test_the_checks_see_violations() -> None:
    """The rules catch what they claim to, on modules made up for the purpose."""
    assert _absolute("harombe_core.store", "base", 1) == "harombe_core.store.base"
    assert _absolute("harombe_core.store", "errors", 2) == "harombe_core.errors"
    assert layer("harombe_core.store.sqlite") == 1
    assert layer("harombe_core.export.records") == 6
    assert layer("langchain_harombe.history") == ADAPTER_LAYER
    assert _outside_private_module("langchain_harombe.x", "harombe_core.embeddings._http")
    assert not _outside_private_module(
        "harombe_core.embeddings.openai", "harombe_core.embeddings._http"
    )
    source = (
        "def f(store):\n"
        "    from harombe_core.manager import MemoryManager\n"
        "    from harombe_core.store.sqlite import _helper\n"
        "    self._own()\n"
        "    return store._run()\n"
    )
    fake = Module("harombe_core.store.fake", ROOT / "harombe_core/store/fake.py", ast.parse(source))
    owner = Module(
        "harombe_core.store.sqlite",
        ROOT / "harombe_core/store/sqlite.py",
        ast.parse(
            "def _helper(): ...\nclass S:\n    def _run(self): ...\n    def _own(self): ...\n"
        ),
    )
    manager = Module("harombe_core.manager", ROOT / "harombe_core/manager.py", ast.parse(""))
    modules = {m.name: m for m in (fake, owner, manager)}
    fake.imports = set(_imports(fake, modules))
    assert fake.imports == {"harombe_core.manager", "harombe_core.store.sqlite"}
    assert layer("harombe_core.manager") > layer(fake.name)
    assert _private_uses(modules) == {
        (fake.name, "harombe_core.store.sqlite._helper"),
        (fake.name, "_run"),
    }
