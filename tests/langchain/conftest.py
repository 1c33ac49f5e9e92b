"""Fixtures of the LangChain adapter's tests: a database on each backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harombe_core.manager import MemoryManager


@pytest.fixture(params=["file", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "memory.db")


@pytest.fixture
def backend_manager(location: str) -> Iterator[MemoryManager]:
    """A MemoryManager without semantic memory on :func:`location`."""
    mm = MemoryManager(location, embedding=None)
    try:
        yield mm
    finally:
        mm.close()
