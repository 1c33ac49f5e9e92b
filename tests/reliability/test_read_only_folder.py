"""A database its user may read but not write opens for reading: reads and searches work,
writes raise StoreReadOnlyError, and nothing is created beside it or changed in it.

Root may write anywhere, so each check runs in a forked child that drops to ``nobody`` (uid and
gid 65534) first; run as another user, it runs in the test process itself. The folder and file
are root's, mode 0755 and 0644: readable by everyone, writable by root alone.
"""

from __future__ import annotations

import json
import os
import resource  # noqa: F401  (imported before the fork: the child may not read the stdlib)
import shutil
import sqlite3
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harombe_core import MemoryManager, Message
from harombe_core.errors import StoreReadOnlyError
from tests.core.test_store_sqlite import _write_version_one
from tests.reliability.openers import context

UNPRIVILEGED = 65534  # nobody / nogroup


def unprivileged(check: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``check()`` run by a user who cannot write the test's files; its JSON-able result."""
    if os.geteuid() != 0:
        return check()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(UNPRIVILEGED)
            os.setuid(UNPRIVILEGED)
        except OSError as exc:
            payload: dict[str, Any] = {"skip": str(exc)}
        else:
            try:
                payload = {"result": check()}
            except BaseException:
                payload = {"error": traceback.format_exc()}
        os.write(write_end, json.dumps(payload).encode("utf-8"))
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    payload = json.loads(data)
    if "skip" in payload:
        pytest.skip(f"cannot drop root privileges to uid {UNPRIVILEGED} here: {payload['skip']}")
    if "error" in payload:
        pytest.fail(f"the unprivileged check failed:\n{payload['error']}")
    return dict(payload["result"])


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder everyone can read and enter (pytest's own tmp tree is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="harombe-ro-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        path.chmod(0o755)
        shutil.rmtree(path)


def _lock(folder: Path, folder_mode: int = 0o755) -> None:
    """Make the folder's files readable by everyone and writable by root alone."""
    for file in folder.iterdir():
        file.chmod(0o644)
    folder.chmod(folder_mode)


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def _write(db: Path, texts: list[str], *, search: bool = False) -> None:
    with MemoryManager(db, embedding=None, token_counter="approximate") as mm:
        for n, text in enumerate(texts):
            mm.save_message(f"s{n % 2}", Message(role="user", content=text), user_id="ann")
        if search:
            mm.search("index everything now")


TEXTS = ["the spare key is under the blue flowerpot", "the train leaves at nine", "pay rent"]


def _read_everything(db: Path) -> dict[str, Any]:
    """Open as the unprivileged user, read and search, try every kind of write."""
    out: dict[str, Any] = {}
    with MemoryManager(db, embedding=None, token_counter="approximate") as mm:
        out["read_only"] = mm.store.read_only  # type: ignore[attr-defined]
        out["messages"] = sorted(
            m.content for s in ("s0", "s1") for m in mm.get_messages(s)
        )
        out["window"] = [m.content for m in mm.get_recent_messages("s0", 1000)]
        out["sessions"] = sorted(s.id for s in mm.list_sessions(user_id="ann"))
        out["search"] = [h.message.content for h in mm.search("where is the spare key?")]
        out["stats"] = mm.stats()["messages"]
        refused = []
        writes: dict[str, Callable[[], object]] = {
            "save_message": lambda: mm.save_message("s0", Message(role="user", content="x")),
            "create_session": lambda: mm.create_session(session_id="new"),
            "delete_session": lambda: mm.delete_session("s0"),
            "update_session": lambda: mm.update_session("s0", metadata={"k": 1}),
        }
        for name, write in writes.items():
            try:
                write()
            except StoreReadOnlyError as exc:
                refused.append((name, str(exc)))
        out["refused"] = refused
        out["after"] = sorted(m.content for s in ("s0", "s1") for m in mm.get_messages(s))
    return out


def _assert_read_everything(out: dict[str, Any], db: Path, texts: list[str]) -> None:
    assert out["read_only"] is True
    assert out["messages"] == sorted(texts)
    assert out["window"] == [t for n, t in enumerate(texts) if n % 2 == 0]
    assert out["sessions"] == ["s0", "s1"]
    assert out["search"][0] == texts[0]
    assert out["stats"] == len(texts)
    assert [name for name, _ in out["refused"]] == [
        "save_message", "create_session", "delete_session", "update_session"
    ]
    for _, message in out["refused"]:
        assert str(db) in message
        assert "cannot be written" in message
        assert "reading only" in message
    assert out["after"] == sorted(texts)


def test_a_closed_database_in_a_read_only_folder_opens_for_reading(folder: Path) -> None:
    db = folder / "memory.db"
    _write(db, TEXTS)  # never searched: the last close brought the keyword index up to date
    _lock(folder)
    before = _snapshot(folder)
    out = unprivileged(lambda: _read_everything(db))
    _assert_read_everything(out, db, TEXTS)
    assert _snapshot(folder) == before  # no -wal, -shm or journal, no byte or mtime changed


def _hold_open(db: str, texts: list[str], ready: Any, done: Any) -> None:
    """Another program using the database: writes, keeps it open (a live -wal), then closes."""
    with MemoryManager(db, embedding=None, token_counter="approximate") as mm:
        for n, text in enumerate(texts):
            mm.save_message(f"s{n % 2}", Message(role="user", content=text), user_id="ann")
        mm.search("index everything now")
        ready.set()
        done.wait(60)


def test_a_database_in_use_by_its_writer_is_read_through_its_wal(folder: Path) -> None:
    db = folder / "memory.db"
    ctx = context()
    ready, done = ctx.Event(), ctx.Event()
    writer = ctx.Process(target=_hold_open, args=(str(db), TEXTS, ready, done))
    writer.start()
    try:
        assert ready.wait(60)
        assert Path(f"{db}-wal").exists()
        _lock(folder)
        out = unprivileged(lambda: _read_everything(db))
    finally:
        done.set()
        writer.join(timeout=60)
    assert writer.exitcode == 0
    _assert_read_everything(out, db, TEXTS)


def test_a_wal_without_its_shm_in_a_read_only_folder_is_refused_clearly(folder: Path) -> None:
    source = folder / "source"
    source.mkdir()
    db = source / "memory.db"
    raw = sqlite3.connect(db)
    with MemoryManager(db, embedding=None) as mm:
        mm.save_message("s", Message(role="user", content="in the log only"))
        raw.execute("PRAGMA wal_autocheckpoint = 0")  # keeps the -wal when it closes below
        copy = folder / "copy"
        copy.mkdir()
        shutil.copy(db, copy / "memory.db")
        shutil.copy(f"{db}-wal", copy / "memory.db-wal")
    raw.close()
    shutil.rmtree(source)
    _lock(copy)
    before = _snapshot(copy)

    def open_it() -> dict[str, Any]:
        try:
            MemoryManager(copy / "memory.db", embedding=None)
        except StoreReadOnlyError as exc:
            return {"error": str(exc)}
        return {"error": None}

    message = unprivileged(open_it)["error"]
    assert message is not None
    assert "memory.db-shm" in message
    assert "writable folder" in message
    assert _snapshot(copy) == before


@pytest.mark.parametrize("case", ["older schema", "new file"])
def test_what_would_need_a_write_to_open_is_refused(folder: Path, case: str) -> None:
    db = folder / "memory.db"
    if case == "older schema":
        _write_version_one(db)
    _lock(folder)
    before = _snapshot(folder)

    def open_it() -> dict[str, Any]:
        try:
            MemoryManager(db, embedding=None)
        except StoreReadOnlyError as exc:
            return {"error": str(exc)}
        return {"error": None}

    message = unprivileged(open_it)["error"]
    assert message is not None
    assert str(db) in message
    assert _snapshot(folder) == before


def test_a_read_only_file_in_a_writable_folder_opens_for_reading(folder: Path) -> None:
    db = folder / "memory.db"
    _write(db, TEXTS)
    _lock(folder, folder_mode=0o777)
    before = db.read_bytes()
    out = unprivileged(lambda: _read_everything(db))
    _assert_read_everything(out, db, TEXTS)
    assert db.read_bytes() == before
