"""Shared fixtures: fresh stores (in-memory and on disk) that are always closed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harombe_core.manager import MemoryManager


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
