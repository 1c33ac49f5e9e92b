"""A file harombe refuses is left exactly as it was found: same bytes, same mtime, same mode,
and nothing created beside it (no ``-wal``, ``-shm`` or ``-journal``), whether it sits idle or
another program has it open at that moment. Files harombe creates are its owner's alone (0600),
and so are their ``-wal`` and ``-shm``."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harombe_core import MemoryManager, Message
from harombe_core.errors import (
    EncryptionKeyError,
    HarombeError,
    NotAHarombeDatabaseError,
    SchemaTooNewError,
)
from harombe_core.store.sqlite import SCHEMA_VERSION, SQLiteStore
from tests.core.test_bad_input import (
    _other_app,
    _other_app_wal,
    _text_file,
    _truncated_harombe,
)
from tests.reliability.openers import context


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns, stat.S_IMODE(p.stat().st_mode))
        for p in sorted(folder.iterdir())
    }


def _harombe(path: Path, count: int = 300) -> None:
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        mm.save_messages(
            "s", [Message(role="user", content=f"message {i} " * 40) for i in range(count)]
        )


def _damaged(path: Path) -> None:
    _harombe(path)
    data = bytearray(path.read_bytes())
    middle = (len(data) // 4096 // 2) * 4096
    data[middle : middle + 4096] = b"\xa5" * 4096  # one page of the messages destroyed
    path.write_bytes(bytes(data))


def _newer(path: Path) -> None:
    _harombe(path, 3)
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()


def _encrypted(path: Path) -> None:
    pytest.importorskip("sqlcipher3")
    with MemoryManager(path, embedding=None, encryption_key="right key") as mm:
        mm.save_message("s", Message(role="user", content="secret"))


MAKERS: dict[str, tuple[Callable[[Path], None], dict[str, Any], type[HarombeError]]] = {
    "text file": (_text_file, {}, NotAHarombeDatabaseError),
    "another application's database": (_other_app, {}, NotAHarombeDatabaseError),
    "another application's WAL database": (_other_app_wal, {}, NotAHarombeDatabaseError),
    "damaged harombe database": (_damaged, {}, NotAHarombeDatabaseError),
    "truncated harombe database": (_truncated_harombe, {}, NotAHarombeDatabaseError),
    "newer schema": (_newer, {}, SchemaTooNewError),
    "encrypted, wrong key": (_encrypted, {"encryption_key": "wrong key"}, EncryptionKeyError),
    "encrypted, no key": (_encrypted, {}, NotAHarombeDatabaseError),
    "plain, opened with a key": (_other_app_wal, {"encryption_key": "k"}, EncryptionKeyError),
}

OPENERS: dict[str, Callable[..., object]] = {
    # The defaults a user types first (semantic memory on): the store refuses before any
    # embedder or vector index is made.
    "MemoryManager": lambda path, **kw: MemoryManager(path, **kw),
    "SQLiteStore": lambda path, **kw: SQLiteStore(path, **kw),
}


@pytest.mark.parametrize("opener", list(OPENERS))
@pytest.mark.parametrize("case", list(MAKERS))
def test_a_refused_file_is_left_exactly_as_found(tmp_path: Path, case: str, opener: str) -> None:
    make, options, error = MAKERS[case]
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "memory.db"
    make(path)
    before = _snapshot(folder)
    with pytest.raises(error) as caught:
        OPENERS[opener](path, **options)
    assert str(path) in str(caught.value)
    assert _snapshot(folder) == before


def test_the_refusals_say_what_is_wrong(tmp_path: Path) -> None:
    messages = {}
    for case in ("text file", "truncated harombe database", "damaged harombe database"):
        path = tmp_path / f"{case}.db"
        MAKERS[case][0](path)
        with pytest.raises(NotAHarombeDatabaseError) as caught:
            MemoryManager(path, embedding=None)
        messages[case] = str(caught.value)
    assert "is not a SQLite database" in messages["text file"]
    assert "is truncated" in messages["truncated harombe database"]
    assert "Restore it from a backup" in messages["truncated harombe database"]
    assert "is a damaged harombe database" in messages["damaged harombe database"]


def _hold(path: str, make: str, ready: Any, done: Any) -> None:
    """Another program with the file open: its -wal and -shm exist while it runs."""
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode = WAL")
    raw.execute("PRAGMA wal_autocheckpoint = 0")
    if make == "foreign":
        raw.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        raw.execute("INSERT INTO invoices (total) VALUES (1.5)")
    else:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    ready.set()
    done.wait(60)
    raw.close()


@pytest.fixture
def held(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "memory.db"
    if request.param == "newer":
        _harombe(path, 3)
    ctx = context()
    ready, done = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(path), request.param, ready, done))
    holder.start()
    try:
        assert ready.wait(60)
        yield path
    finally:
        done.set()
        holder.join(timeout=60)
    assert holder.exitcode == 0


@pytest.mark.parametrize(
    ("held", "error"),
    [("foreign", NotAHarombeDatabaseError), ("newer", SchemaTooNewError)],
    indirect=["held"],
)
def test_a_refused_file_in_use_elsewhere_is_left_as_found(
    held: Path, error: type[HarombeError]
) -> None:
    before = _snapshot(held.parent)
    assert {"memory.db-wal", "memory.db-shm"} <= set(before)
    with pytest.raises(error):
        MemoryManager(held, embedding=None)
    assert _snapshot(held.parent) == before


def test_database_and_its_wal_and_shm_are_the_owners_alone(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    old = os.umask(0o022)  # the usual umask would make them 0644
    try:
        with MemoryManager(path, embedding=None) as one, MemoryManager(path, embedding=None):
            one.save_message("s", Message(role="user", content="private"))
            modes = {
                p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()
            }
    finally:
        os.umask(old)
    assert modes == {"memory.db": 0o600, "memory.db-wal": 0o600, "memory.db-shm": 0o600}
