"""Bad input of every kind: a typed HarombeError that says how to fix it, and nothing changed."""

from __future__ import annotations

import os
import sqlite3
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harombe_core import (
    HarombeError,
    InvalidBudgetError,
    InvalidInputError,
    InvalidMessageError,
    MemoryManager,
    Message,
    NotAHarombeDatabaseError,
)
from harombe_core.models import MAX_CONTENT_CHARS
from harombe_core.store.sqlite import SQLiteStore

SQL_NASTIES = [
    "'; DROP TABLE messages; --",
    '" OR 1=1 --',
    "x') ; DELETE FROM sessions; --",
    "%_*?[]\\",
    "Robert'); DROP TABLE sessions;--",
]


def _snapshot(mm: MemoryManager) -> tuple[Any, ...]:
    sessions = mm.list_sessions(limit=None)
    return (
        sessions,
        {s.id: mm.get_messages(s.id) for s in sessions},
        mm.stats()["messages"],
    )


@pytest.fixture
def full(manager: MemoryManager) -> MemoryManager:
    """A store with something in it, to check that bad calls leave it exactly as it was."""
    sid = manager.create_session(
        session_id="main", system_prompt="sys", metadata={"k": "v"}, user_id="u1"
    )
    manager.save_messages(
        sid, [Message(role="user", content="hello"), Message(role="assistant", content="hi")]
    )
    return manager


_FakeCall = Callable[[MemoryManager], object]

BAD_CALLS: list[tuple[str, _FakeCall, type[HarombeError], str]] = [
    # messages
    ("unknown role", lambda m: m.save_message("main", {"role": "robot", "content": "x"}),
     InvalidMessageError, "use one of"),
    ("non-string content", lambda m: m.save_message("main", {"role": "user", "content": 42}),
     InvalidMessageError, "must be a str"),
    ("list content", lambda m: m.save_message("main", {"role": "user", "content": ["a"]}),
     InvalidMessageError, "Serialise"),
    ("content too large", lambda m: m.save_message(
        "main", {"role": "user", "content": "x" * (MAX_CONTENT_CHARS + 1)}),
     InvalidMessageError, "Split it"),
    ("NUL in content", lambda m: m.save_message("main", {"role": "user", "content": "a\x00"}),
     InvalidMessageError, "NUL"),
    ("lone surrogate in content", lambda m: m.save_message(
        "main", {"role": "user", "content": "bad \udcff"}), InvalidMessageError, "surrogate"),
    ("lone surrogate in metadata", lambda m: m.save_message(
        "main", {"role": "user", "content": "x", "metadata": {"k": "\ud800"}}),
     InvalidMessageError, "Unicode"),
    ("message is a string", lambda m: m.save_message("main", "hello"),  # type: ignore[arg-type]
     InvalidMessageError, "harombe Message"),
    ("message is None", lambda m: m.save_message("main", None),  # type: ignore[arg-type]
     InvalidMessageError, "harombe Message"),
    ("bulk of None", lambda m: m.save_messages("main", None),  # type: ignore[arg-type]
     InvalidMessageError, "list of messages"),
    ("bulk of one message", lambda m: m.save_messages(
        "main", Message(role="user", content="x")), InvalidMessageError, "wrap a single"),
    ("bulk with a bad one last", lambda m: m.save_messages(
        "main", [{"role": "user", "content": "ok"}, {"role": "user", "content": None}]),
     InvalidMessageError, "must be a str"),
    ("metadata not JSON", lambda m: m.save_message(
        "main", {"role": "user", "content": "x", "metadata": {"f": {1, 2}}}),
     InvalidMessageError, "JSON"),
    # ids
    ("session id int", lambda m: m.save_message(7, Message(role="user", content="x")),  # type: ignore[arg-type]
     InvalidInputError, "non-empty str"),
    ("session id empty", lambda m: m.save_message("", Message(role="user", content="x")),
     InvalidInputError, "non-empty str"),
    ("session id NUL", lambda m: m.save_message("a\x00b", Message(role="user", content="x")),
     InvalidInputError, "NUL"),
    ("session id surrogate", lambda m: m.save_message("s\udc80", Message(role="user", content="x")),
     InvalidInputError, "Decode it as UTF-8"),
    ("session id too long", lambda m: m.load_session("x" * 513), InvalidInputError, "512"),
    ("user id int", lambda m: m.save_message(
        "new", Message(role="user", content="x"), user_id=5),  # type: ignore[arg-type]
     InvalidInputError, "user_id"),
    ("create with bad user", lambda m: m.create_session(user_id=["u"]),  # type: ignore[arg-type]
     InvalidInputError, "user_id"),
    ("create with bad prompt", lambda m: m.create_session(system_prompt=5),  # type: ignore[arg-type]
     InvalidInputError, "system_prompt"),
    ("create with bad metadata", lambda m: m.create_session(metadata=["x"]),  # type: ignore[arg-type]
     InvalidInputError, "dict"),
    ("create duplicate", lambda m: m.create_session(session_id="main"),
     InvalidInputError, "already exists"),
    # budgets and counts
    ("negative budget", lambda m: m.get_recent_messages("main", -1), InvalidBudgetError, ">= 0"),
    ("float budget", lambda m: m.get_recent_messages("main", 10.5),  # type: ignore[arg-type]
     InvalidBudgetError, "int"),
    ("bool budget", lambda m: m.get_window("main", True), InvalidBudgetError, "int"),
    ("string budget", lambda m: m.get_window("main", "100"),  # type: ignore[arg-type]
     InvalidBudgetError, "int"),
    ("negative limit", lambda m: m.list_sessions(limit=-1), InvalidInputError, "non-negative"),
    ("string limit", lambda m: m.get_messages("main", limit="3"),  # type: ignore[arg-type]
     InvalidInputError, "limit"),
    ("bool after_id", lambda m: m.get_messages("main", after_id=True),
     InvalidInputError, "after_id"),
    ("list_sessions user int", lambda m: m.list_sessions(user_id=3),  # type: ignore[arg-type]
     InvalidInputError, "user_id"),
    ("negative days", lambda m: m.prune_old_sessions(-1), InvalidInputError, "days"),
    ("nan days", lambda m: m.prune_old_sessions(float("nan")), InvalidInputError, "days"),
    ("infinite days", lambda m: m.prune_old_sessions(float("inf")), InvalidInputError, "days"),
    ("huge days", lambda m: m.prune_old_sessions(10**12), InvalidInputError, "days"),
    ("bool days", lambda m: m.prune_old_sessions(True), InvalidInputError, "days"),
    ("string days", lambda m: m.prune_old_sessions("30"),  # type: ignore[arg-type]
     InvalidInputError, "days"),
    # sessions
    ("update metadata not a dict", lambda m: m.update_session("main", metadata="x"),
     InvalidInputError, "dict"),
    ("update metadata not JSON", lambda m: m.update_session("main", metadata={"a": object()}),
     InvalidInputError, "JSON"),
    ("update prompt int", lambda m: m.update_session("main", system_prompt=1),
     InvalidInputError, "system_prompt"),
    ("update user int", lambda m: m.update_session("main", user_id=1),
     InvalidInputError, "user_id"),
    ("delete with int id", lambda m: m.delete_session(1),  # type: ignore[arg-type]
     InvalidInputError, "session_id"),
    ("clear with None id", lambda m: m.clear_session(None),  # type: ignore[arg-type]
     InvalidInputError, "session_id"),
]


@pytest.mark.parametrize(
    ("call", "error", "fix"),
    [pytest.param(c, e, f, id=name) for name, c, e, f in BAD_CALLS],
)
def test_bad_calls_are_typed_and_change_nothing(
    full: MemoryManager, call: _FakeCall, error: type[HarombeError], fix: str
) -> None:
    before = _snapshot(full)
    with pytest.raises(error, match=fix) as caught:
        call(full)
    assert isinstance(caught.value, HarombeError)
    assert _snapshot(full) == before


@pytest.mark.parametrize("nasty", SQL_NASTIES)
def test_sql_metacharacters_are_stored_verbatim(full: MemoryManager, nasty: str) -> None:
    before = _snapshot(full)
    sid = full.create_session(session_id=nasty, system_prompt=nasty, user_id=nasty,
                              metadata={nasty: nasty})
    mid = full.save_message(sid, Message(role="user", content=nasty, name=nasty,
                                         metadata={"q": nasty, nasty: [nasty]}))
    (stored,) = full.get_messages(nasty)
    assert stored.id == mid
    assert stored.content == nasty
    assert stored.name == nasty
    assert stored.metadata == {"q": nasty, nasty: [nasty]}
    session = full.get_session(nasty)
    assert (session.user_id, session.system_prompt, session.metadata) == (
        nasty, nasty, {nasty: nasty}
    )
    assert [s.id for s in full.list_sessions(user_id=nasty)] == [nasty]
    assert full.list_sessions(user_id="' OR '1'='1") == []
    assert full.store.keyword_search(nasty) is not None  # quoted for FTS5 too: no syntax error
    # everything that was there before is still there, unchanged
    assert full.delete_session(nasty)
    assert _snapshot(full) == before


def test_async_bad_input_is_typed(full: MemoryManager) -> None:
    import asyncio

    async def go() -> None:
        with pytest.raises(InvalidMessageError):
            await full.asave_messages("main", "not a list")  # type: ignore[arg-type]
        with pytest.raises(InvalidBudgetError):
            await full.aget_recent_messages("main", -5)

    before = _snapshot(full)
    asyncio.run(go())
    assert _snapshot(full) == before


# files that are not harombe databases --------------------------------------------------------
def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(
        b"IEND", b""
    )


def _text_file(path: Path) -> None:
    path.write_text("Dear diary,\nthis is not a database.\n" * 50, encoding="utf-8")


def _png_file(path: Path) -> None:
    path.write_bytes(_png())


def _other_app(path: Path) -> None:
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    raw.executemany("INSERT INTO invoices (total) VALUES (?)", [(i * 1.5,) for i in range(100)])
    raw.commit()
    raw.close()


def _other_app_wal(path: Path) -> None:
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA journal_mode = WAL")
    raw.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, body TEXT)")  # a name we use too
    raw.execute("INSERT INTO messages (body) VALUES ('theirs')")
    raw.commit()
    raw.close()


def _truncated_harombe(path: Path) -> None:
    with MemoryManager(path, embedding=None) as mm:
        mm.save_messages(
            "s", [Message(role="user", content=f"message {i} " * 40) for i in range(300)]
        )
    data = path.read_bytes()
    assert len(data) > 8 * 4096
    path.write_bytes(data[: len(data) // 2])


def _header_only(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 20)


def _garbage_after_header(path: Path) -> None:
    _other_app(path)
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the schema page is destroyed
    path.write_bytes(bytes(data))


FOREIGN = {
    "text file": _text_file,
    "png": _png_file,
    "another app's database": _other_app,
    "another app's WAL database": _other_app_wal,
    "truncated harombe database": _truncated_harombe,
    "sqlite header only": _header_only,
    "damaged schema page": _garbage_after_header,
}


@pytest.mark.parametrize("make", FOREIGN.values(), ids=list(FOREIGN))
@pytest.mark.parametrize("opener", ["manager", "store", "config"])
def test_foreign_files_are_refused_untouched(
    tmp_path: Path, make: Callable[[Path], None], opener: str
) -> None:
    path = tmp_path / "not-ours.db"
    make(path)
    siblings = sorted(p.name for p in tmp_path.iterdir())
    before = path.read_bytes()
    openers: dict[str, Callable[[], object]] = {
        "manager": lambda: MemoryManager(path, embedding=None),
        "store": lambda: SQLiteStore(str(path)),
        "config": lambda: MemoryManager.from_config(
            {"memory": {"storage_path": str(path)}, "vector_store": {"enabled": False}}
        ),
    }
    with pytest.raises(NotAHarombeDatabaseError) as caught:
        openers[opener]()
    message = str(caught.value)
    assert str(path) in message
    assert "left untouched" in message or "Restore" in message
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == siblings  # no -wal or -shm left behind


def test_a_directory_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "folder.db"
    folder.mkdir()
    with pytest.raises(NotAHarombeDatabaseError, match="directory; pass a file path"):
        MemoryManager(folder, embedding=None)
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("bad", [123, 4.5, None, b"bytes.db", ["a.db"], object()])
def test_wrong_storage_path_types(bad: object) -> None:
    with pytest.raises(HarombeError, match="storage_path"):
        MemoryManager(bad, embedding=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "fix"),
    [
        ("sqlite:///chat.db", "harombe takes the file's path, 'chat.db'"),
        ("sqlite:////srv/chat.db", "harombe takes the file's path, '/srv/chat.db'"),
        ("sqlite://", "harombe takes ':memory:'"),
        ("postgresql+psycopg://u@db/app", "harombe takes the plain 'postgresql://u@db/app'"),
        ("mysql://u@db/app", "SQLite file (pass its path) or PostgreSQL"),
    ],
)
def test_a_sqlalchemy_url_says_what_to_pass(
    url: str, fix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LangChain's and LlamaIndex's SQL stores take SQLAlchemy URLs; taken as a file name,
    ``sqlite:///chat.db`` made a folder ``sqlite:`` in the working directory."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match="storage_path") as info:
        MemoryManager(url, embedding=None)
    assert fix in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_refusing_a_file_leaves_the_good_store_alone(tmp_path: Path) -> None:
    good = tmp_path / "good.db"
    with MemoryManager(good, embedding=None) as mm:
        mm.save_message("s", Message(role="user", content="precious"))
        before = _snapshot(mm)
        bad = tmp_path / "bad.db"
        _text_file(bad)
        with pytest.raises(NotAHarombeDatabaseError):
            MemoryManager(bad, embedding=None)
        assert _snapshot(mm) == before


def _write_in_place(path: Path, data: bytes, offset: int) -> None:
    """Write ``data`` at ``offset`` without truncating, as SQLite writes pages (called while no
    SQLite connection of this process has the file open, so no lock can be dropped)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def test_a_file_mid_checkpoint_is_not_mistaken_for_a_truncated_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's checkpoint writes page 1 before the pages that grow the file.

    Reproduce that window (header promising more pages than the file holds) and complete the
    file once the open has looked at it and found it short, as SQLite completes it: the
    missing pages are written in place, so the file only grows (never truncated and rewritten,
    which no SQLite writer does: a file emptied for a moment is a new database). The open
    must wait it out and read every message. The completion is tied to the open's first look,
    not to a timer, so a busy machine cannot reorder the two.
    """
    from harombe_core.store import sqlite_checks

    path = tmp_path / "live.db"
    with MemoryManager(path, embedding=None) as mm:
        mm.save_messages("s", [Message(role="user", content=f"m{i} " * 40) for i in range(300)])
    data = path.read_bytes()
    half = len(data) // 2
    path.write_bytes(data[:half])
    looks: list[str] = []
    inspect = sqlite_checks._inspect_once

    def look_then_finish(*args: Any) -> Any:
        problem = inspect(*args)
        looks.append(type(problem).__name__)
        if len(looks) == 1:
            _write_in_place(path, data[half:], half)
        return problem

    monkeypatch.setattr(sqlite_checks, "_inspect_once", look_then_finish)
    with MemoryManager(path, embedding=None) as mm:
        assert len(mm.get_recent_messages("s", max_tokens=10**9)) == 300
    assert looks == ["NotAHarombeDatabaseError", "NoneType"]


def test_a_file_rewritten_from_empty_is_waited_for_not_taken_as_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cp backup.db memory.db`` truncates the file, then writes it. An open that looks in
    between sees an empty file: it had pages a moment ago, so the open waits for them instead
    of writing a new schema into it (which the copy would then overwrite, or mix with)."""
    from harombe_core.store import sqlite_checks

    path = tmp_path / "restored.db"
    with MemoryManager(path, embedding=None) as mm:
        mm.save_messages("s", [Message(role="user", content=f"m{i}") for i in range(30)])
    data = path.read_bytes()
    looks: list[int] = []
    inspect = sqlite_checks._inspect_once

    def look_while_copying(*args: Any) -> Any:
        if not looks:
            os.truncate(path, 0)  # cp has opened the file with O_TRUNC
        problem = inspect(*args)
        looks.append(path.stat().st_size)
        if len(looks) == 2:
            _write_in_place(path, data, 0)  # ... and now writes it
        return problem

    monkeypatch.setattr(sqlite_checks, "_inspect_once", look_while_copying)
    with MemoryManager(path, embedding=None) as mm:
        assert len(mm.get_recent_messages("s", max_tokens=10**9)) == 30
    assert looks == [0, 0, len(data)]
