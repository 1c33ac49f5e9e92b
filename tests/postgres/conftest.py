"""Backends for the PostgreSQL tests; the server itself (``pg_server``, ``pg_url``) is started by
the shared conftest one level up."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.store.pg_server import EmbeddedPostgres

_counter = itertools.count()


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
