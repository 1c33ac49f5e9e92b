"""A turn owed by a checkpointing process killed AFTER a long-lived manager opened is picked up
by that manager without a restart: its operations check the marks again at most once every
``PROBE_SECONDS`` (a moved clock here, never a sleep), and ``flush()`` checks at once. The
same for a real ``harombe serve`` answering httpx on 127.0.0.1.

The writer is a real process (an agent checkpointed by ``HarombeSaver``, its background worker
held) killed with SIGKILL once its turns are committed and its session still owed (see
``test_owed_without_saver.py``, whose writer this is).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harombe_core import MemoryManager
from harombe_core.errors import ConfigError
from harombe_core.store import pending, rederive
from tests.reliability.test_owed_without_saver import (
    _EXPECTED,
    _WORDS,
    _due,
    _kill_while_owed,
    _texts,
)

pytestmark = pytest.mark.slow


class Clock:
    """The clock the checks are timed by, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    moved = Clock()
    monkeypatch.setattr(pending, "_clock", moved)
    return moved


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per check of the marks (the indexed statements), counted."""
    counted: list[int] = []
    real = rederive._marked

    def marked() -> object:
        counted.append(1)
        return real()

    monkeypatch.setattr(rederive, "_marked", marked)
    return counted


def test_a_long_lived_manager_picks_up_a_turn_owed_after_it_opened(
    clock: Clock, checks: list[int], tmp_path: Path
) -> None:
    db = str(tmp_path / "m.db")
    with MemoryManager(db, embedding=None) as mm:
        assert mm.get_messages("thread") == []
        _kill_while_owed(db)
        assert _due(db) == [("thread",)]
        before = len(checks)
        for _ in range(20):  # between two checks an operation asks nothing of the database
            assert mm.get_messages("thread") == []
        assert len(checks) == before
        clock.now += rederive.PROBE_SECONDS
        assert _texts(mm.get_messages("thread")) == _EXPECTED  # the read that checked sees it
        assert len(checks) == before + 1
        assert _due(db) == []
        for _ in range(20):
            mm.get_messages("thread")
        assert len(checks) == before + 1, "at most one check per interval"
        mm.flush()
        assert f"turn {_WORDS[0]}" in [h.message.content for h in mm.search(_WORDS[0])]


def test_flush_checks_at_once(clock: Clock, tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    with MemoryManager(db, embedding=None) as mm:
        assert mm.list_sessions() == []
        _kill_while_owed(db)
        assert mm.get_messages("thread") == []  # the clock has not moved
        mm.flush()
        assert _due(db) == []
        assert _texts(mm.get_messages("thread")) == _EXPECTED


def test_the_interval_is_set_by_the_environment(
    monkeypatch: pytest.MonkeyPatch, checks: list[int], tmp_path: Path
) -> None:
    db = str(tmp_path / "m.db")
    monkeypatch.setenv("HAROMBE_OWED_PROBE_SECONDS", "0")
    with MemoryManager(db, embedding=None) as mm:
        before = len(checks)
        mm.get_messages("thread")
        mm.get_messages("thread")
        assert len(checks) == before + 2
    monkeypatch.setenv("HAROMBE_OWED_PROBE_SECONDS", "soon")
    with pytest.raises(ConfigError, match="HAROMBE_OWED_PROBE_SECONDS"):
        MemoryManager(db, embedding=None)


def test_a_closed_manager_checks_no_more(clock: Clock, checks: list[int], tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    mm = MemoryManager(db, embedding=None)
    mm.close()
    with MemoryManager(db, embedding=None) as other:
        before = len(checks)
        clock.now += rederive.PROBE_SECONDS
        other.get_messages("thread")
        assert len(checks) == before + 1  # this manager's check only


def test_harombe_serve_picks_up_a_turn_owed_after_it_started(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A real server (a process of its own: its clock cannot be moved, so it checks at every
    operation here), a real writer killed while the server runs, and httpx."""
    pytest.importorskip("fastapi")
    import httpx

    from harombe_core.server.process import ServerProcess, create_key_cli

    db = str(tmp_path / "served.db")
    key = create_key_cli(db, user="ann")
    monkeypatch.setenv("HAROMBE_OWED_PROBE_SECONDS", "0")
    server = ServerProcess(db).start()
    try:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
            assert http.get("/api/sessions").json() == []
            _kill_while_owed(db)
            got = http.get("/api/sessions/thread/messages")
            assert got.status_code == 200, got.text
            assert [(m["role"], m["content"]) for m in got.json()] == _EXPECTED
            found = http.get("/api/search", params={"q": _WORDS[1]}).json()
            assert f"turn {_WORDS[1]}" in [hit["message"]["content"] for hit in found]
    finally:
        server.stop()
    assert _due(db) == []


def test_postgres_a_long_lived_manager_picks_up_a_turn_owed_after_it_opened(
    clock: Clock, pg_url: str
) -> None:
    with MemoryManager(pg_url, embedding=None) as mm:
        assert mm.get_messages("thread") == []
        _kill_while_owed(pg_url)
        assert mm.get_messages("thread") == []
        clock.now += rederive.PROBE_SECONDS
        assert _texts(mm.get_messages("thread")) == _EXPECTED
