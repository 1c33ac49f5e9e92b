"""A real ``harombe serve`` for the tests, on 127.0.0.1 and a free port, with keys for two
users (ann, bob) and an admin, each made by the real ``harombe keys create``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

from harombe_core.server.process import ServerProcess, create_key_cli


@dataclass
class Served:
    """A running server, its database and its keys."""

    server: ServerProcess
    db: str
    ann: str
    bob: str
    admin: str

    @property
    def url(self) -> str:
        return self.server.url

    def http(self, key: str | None) -> httpx.Client:
        """An httpx client sending ``key`` as its Bearer key (none for ``None``)."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def serve(db: str) -> Served:
    keys = {
        "ann": create_key_cli(db, user="ann"),
        "bob": create_key_cli(db, user="bob"),
        "admin": create_key_cli(db, admin=True),
    }
    return Served(ServerProcess(db).start(), db, **keys)


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server on a fresh SQLite file for every test here that needs no server of its own
    (each test uses session ids of its own, so they cannot meet)."""
    db = str(tmp_path_factory.mktemp("served") / "memory.db")
    running = serve(db)
    try:
        yield running
    finally:
        running.server.stop()


@pytest.fixture
def fresh_db(tmp_path: Path) -> str:
    return str(tmp_path / "memory.db")
