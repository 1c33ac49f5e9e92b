"""The SQLite store: schema versions, WAL, file mode, indexes, locking, keyword catch-up."""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
import threading
from pathlib import Path

import pytest

from harombe_core import MemoryManager, Message, SchemaTooNewError, StoreBusyError, StoreError
from harombe_core.store import ops
from harombe_core.store import sqlite as sqlite_module
from harombe_core.store.rows import MESSAGE_COLUMNS
from harombe_core.store.sqlite import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, SQLiteStore


def _user(text: str) -> Message:
    return Message(role="user", content=text)


def _version(path: Path | str) -> int:
    with sqlite3.connect(path) as raw:
        return int(raw.execute("PRAGMA user_version").fetchone()[0])


def _tables(path: Path | str) -> set[str]:
    raw = sqlite3.connect(path)
    try:
        return {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        raw.close()


def _write_version_one(path: Path) -> None:
    """A database exactly as the first released schema left it, with one message in it."""
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode = WAL")
    raw.execute("BEGIN")
    for statement in MIGRATIONS[0]:
        raw.execute(statement)
    raw.execute("PRAGMA user_version = 1")
    raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    raw.execute(
        "INSERT INTO sessions (id, created_at, updated_at, message_count) VALUES ('old', 1, 1, 1)"
    )
    raw.execute(
        "INSERT INTO messages (session_id, role, content, metadata, created_at, token_count) "
        "VALUES ('old', 'user', 'written by version one about zebras', '{}', 1000000, 9)"
    )
    raw.execute(
        "INSERT INTO messages_fts (rowid, content, context) "
        "VALUES (1, 'written by version one about zebras', '')"
    )
    raw.execute("COMMIT")
    raw.close()


def test_new_file_is_ours_at_the_current_version(db_path: str) -> None:
    SQLiteStore(db_path).close()
    assert _version(db_path) == SCHEMA_VERSION
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert {"sessions", "messages", "harombe_meta"} <= _tables(db_path)


def test_wal_and_file_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "deeper" / "dir" / "memory.db"  # parents are created
    store = SQLiteStore(path)
    try:
        store.run(ops.create_session("s"))
        with sqlite3.connect(path) as raw:
            assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        wal = Path(f"{path}-wal")
        assert wal.exists()
        assert stat.S_IMODE(os.stat(wal).st_mode) == 0o600  # SQLite copies the file's mode
    finally:
        store.close()


def test_the_wal_shrinks_back_after_a_long_read_lets_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader held open stops checkpoints and the -wal grows; once it lets go, the next
    checkpoint gives the file back down to the limit instead of keeping its largest size for as
    long as the app runs (a week-long process must not keep a -wal the size of its import)."""
    from harombe_core.store import sqlite_file

    limit = 256 * 1024
    monkeypatch.setattr(sqlite_file, "WAL_SIZE_LIMIT", limit)
    path = str(tmp_path / "m.db")
    wal = path + "-wal"
    manager = MemoryManager(path, embedding=None, vector_store=None)
    try:
        sid = manager.create_session()
        body = "x " * 1000

        def write(batches: int) -> None:
            for b in range(batches):
                manager.save_messages(
                    sid, [Message(role="user", content=f"{b} {i} {body}") for i in range(100)]
                )

        reader = sqlite3.connect(path)
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM messages").fetchone()
        write(30)  # over the 1,000-page auto-checkpoint, which cannot pass the reader
        grown = os.path.getsize(wal)
        assert grown > 4 * 1024 * 1024
        reader.rollback()
        reader.close()
        write(2)  # the first write after the checkpoint restarts the -wal, cut to the limit
        # it then holds only those two batches; with no limit (-1) it would stay at `grown`
        assert os.path.getsize(wal) < grown // 2
    finally:
        manager.close()


def test_tilde_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    store = SQLiteStore("~/memories/m.db")
    store.close()
    assert store.location == str(tmp_path / "memories" / "m.db")
    assert (tmp_path / "memories" / "m.db").exists()


def test_an_older_file_migrates_forward(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    _write_version_one(path)
    with MemoryManager(path, embedding=None) as mm:
        assert _version(path) == SCHEMA_VERSION
        (old,) = mm.get_messages("old")
        assert old.content == "written by version one about zebras"
        mm.save_message("old", _user("new message about zebras too"))
        hits = mm.store.keyword_search("zebras")
        assert sorted(h.message.content for h in hits) == [
            "new message about zebras too",
            "written by version one about zebras",
        ]


def test_each_migration_is_applied_once_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.db"
    with MemoryManager(path, embedding=None) as mm:
        mm.save_message("s", _user("before the upgrade"))
    extra = [
        "CREATE TABLE upgrade_probe (n INTEGER)",
        "INSERT INTO upgrade_probe (n) SELECT COUNT(*) FROM messages",
    ]
    monkeypatch.setattr(sqlite_module, "MIGRATIONS", [*MIGRATIONS, extra])
    monkeypatch.setattr(sqlite_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    for _ in range(2):  # the second open finds nothing to do
        SQLiteStore(path).close()
    assert _version(path) == SCHEMA_VERSION + 1
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT n FROM upgrade_probe").fetchall() == [(1,)]


def test_a_failing_migration_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.db"
    with MemoryManager(path, embedding=None) as mm:
        mm.save_message("s", _user("kept"))
    broken = ["CREATE TABLE half_done (n INTEGER)", "SELECT no_such_column FROM messages"]
    monkeypatch.setattr(sqlite_module, "MIGRATIONS", [*MIGRATIONS, broken])
    monkeypatch.setattr(sqlite_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(StoreError):
        SQLiteStore(path)
    monkeypatch.undo()
    assert _version(path) == SCHEMA_VERSION
    assert "half_done" not in _tables(path)
    with MemoryManager(path, embedding=None) as mm:
        assert [m.content for m in mm.get_messages("s")] == ["kept"]


def test_a_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with MemoryManager(path, embedding=None) as mm:
        mm.save_message("s", _user("from the future"))
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = path.read_bytes()
    with pytest.raises(SchemaTooNewError, match="Upgrade harombe-memory"):
        MemoryManager(path, embedding=None)
    assert path.read_bytes() == before
    assert _version(path) == SCHEMA_VERSION + 1


def test_an_empty_sqlite_file_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).execute("PRAGMA user_version = 0").connection.close()
    with MemoryManager(path, embedding=None) as mm:
        mm.save_message("s", _user("x"))
    assert _version(path) == SCHEMA_VERSION


@pytest.mark.parametrize(
    ("sql", "index"),
    [
        (
            f"SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = ? "
            "ORDER BY m.id DESC",
            "messages_session",
        ),
        (
            f"SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = ? "
            "AND m.id > ? ORDER BY m.id LIMIT ?",
            "messages_session",
        ),
        (
            "SELECT * FROM sessions ORDER BY updated_at DESC, rowid DESC LIMIT 9",
            "sessions_updated",
        ),
        (
            "SELECT * FROM sessions WHERE user_id = ? "
            "ORDER BY updated_at DESC, rowid DESC LIMIT 9",
            "sessions_user_updated",
        ),
    ],
)
def test_queries_use_indexes(db_path: str, sql: str, index: str) -> None:
    SQLiteStore(db_path).close()
    with sqlite3.connect(db_path) as raw:
        params = [None] * sql.count("?")
        plan = " ".join(r[-1] for r in raw.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    assert index in plan
    assert "SCAN m " not in plan + " "
    assert "TEMP B-TREE FOR ORDER BY" not in plan  # ties on the time may be sorted, no more


def test_writers_wait_for_a_lock_then_succeed(db_path: str) -> None:
    store = SQLiteStore(db_path, busy_timeout_ms=20, max_retries=12)
    blocker = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, lambda: blocker.execute("COMMIT"))
    release.start()
    try:
        mm = MemoryManager(store, embedding=None)
        mid = mm.save_message("s", _user("after the lock"))
        assert [m.id for m in mm.get_messages("s")] == [mid]
    finally:
        release.join()
        blocker.close()
        store.close()


def test_a_lock_held_past_every_retry_is_a_typed_error(db_path: str) -> None:
    store = SQLiteStore(db_path, busy_timeout_ms=1, max_retries=2)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreBusyError, match="concurrent writers"):
            MemoryManager(store, embedding=None).save_message("s", _user("x"))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    with MemoryManager(store, embedding=None) as mm:
        assert mm.get_messages("s") == []


def test_keyword_index_catches_up_and_follows_deletes(db_path: str) -> None:
    with MemoryManager(db_path, embedding=None) as mm:
        mm.save_messages("a", [_user("where did I park the bicycle"), _user("in the garage")])
        mm.save_message("b", _user("bicycle repair shop"))
        assert mm.store.index_keywords() == 3
        assert mm.store.index_keywords() == 0  # idempotent
        mm.save_message("b", _user("a new bicycle bell"))
        hits = mm.store.keyword_search("bicycle")
        # three say "bicycle"; "in the garage" is found through the question it answers
        assert sorted(h.message.content for h in hits) == [
            "a new bicycle bell",
            "bicycle repair shop",
            "in the garage",
            "where did I park the bicycle",
        ]
        mm.delete_session("b")
        assert {h.message.session_id for h in mm.store.keyword_search("bicycle")} == {"a"}
        assert mm.store.rebuild_keyword_index() == 2
        assert len(mm.store.keyword_search("bicycle garage")) == 2


def test_in_memory_stores_are_private() -> None:
    with MemoryManager(":memory:", embedding=None) as one, MemoryManager(
        ":memory:", embedding=None
    ) as two:
        one.save_message("s", _user("only in one"))
        assert two.get_messages("s") == []
        assert one.stats()["bytes"] == 0


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_threads_that_come_and_go_reuse_connections(db_path: str) -> None:
    """Frameworks run each step on a fresh worker thread (LangGraph's executor does): every
    thread that ever wrote must not keep a connection (and its file descriptors) open."""
    with MemoryManager(db_path, embedding=None) as mm:
        mm.save_message("warm", _user("first"))

        def step(i: int) -> None:
            mm.save_message("s", _user(f"step {i}"))
            assert mm.get_messages("s", limit=1)

        before = _open_descriptors()
        for i in range(200):  # one thread at a time, each new
            worker = threading.Thread(target=step, args=(i,))
            worker.start()
            worker.join()
        assert _open_descriptors() - before <= 4  # not one or more per thread
        assert len(mm.get_messages("s")) == 200


def test_an_operation_interrupted_inside_its_transaction_leaves_none_open(db_path: str) -> None:
    """Ctrl-C (a notebook's interrupt) lands between any two bytecodes, so an operation may stop
    between its BEGIN and the try that would roll it back. Its connection goes back to the pool:
    the next write on it failed with "cannot start a transaction within a transaction", and its
    write lock kept every other connection waiting. The unacknowledged transaction is rolled
    back as the connection is handed back."""
    with MemoryManager(db_path, embedding=None) as mm:
        mm.save_message("s", _user("before"))
        file = mm.store._file

        def interrupted() -> None:
            with file.connection() as conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("DELETE FROM messages")
                raise KeyboardInterrupt  # where the signal lands, before any ROLLBACK

        with pytest.raises(KeyboardInterrupt):
            interrupted()
        mm.save_message("s", _user("after"))  # this thread: the same connection again
        errors: list[BaseException] = []

        def other() -> None:
            try:
                mm.save_message("t", _user("from another thread"))
            except BaseException as exc:  # reported below
                errors.append(exc)

        worker = threading.Thread(target=other)
        worker.start()
        worker.join()
        assert errors == []
        assert [m.content for m in mm.get_messages("s")] == ["before", "after"]


def test_an_interrupt_just_after_the_write_lock_is_taken_does_not_keep_it(db_path: str) -> None:
    """The in-process write lock was released only if ``acquire`` had returned True to the code:
    an interrupt landing right after it returned kept the lock for good, and every later write
    of the process waited the busy timeout. The KeyboardInterrupt is raised here exactly there,
    as the acquire call returns."""
    with MemoryManager(db_path, embedding=None) as mm:
        mm.save_message("s", _user("before"))
        writer = mm.store._file._writer

        def interrupt_as_acquire_returns(frame: object, event: str, arg: object) -> None:
            if event == "c_return" and getattr(arg, "__self__", None) is writer:
                sys.setprofile(None)
                raise KeyboardInterrupt

        sys.setprofile(interrupt_as_acquire_returns)
        try:
            with pytest.raises(KeyboardInterrupt):
                mm.save_message("s", _user("interrupted"))
        finally:
            sys.setprofile(None)
        free: list[bool] = []

        def try_the_lock() -> None:  # from another thread: the lock may be re-entrant
            free.append(writer.acquire(blocking=False))
            if free[-1]:
                writer.release()

        other = threading.Thread(target=try_the_lock)
        other.start()
        other.join()
        assert free == [True], "the write lock was left held"
        mm.save_message("s", _user("after"))
        assert [m.content for m in mm.get_messages("s")] == ["before", "after"]
