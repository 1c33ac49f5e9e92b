"""PostgreSQL stopped and restarted under load: writers retry and resume, nothing acknowledged
is lost or duplicated, and order within each session holds."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from harombe_core.errors import (
    StoreBusyError,
    StoreError,
    StoreReadOnlyError,
    StoreUnavailableError,
)
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.store.pg_server import EmbeddedPostgres
from harombe_core.store.postgres import _MIGRATION_LOCK, PostgresStore


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_server_restart_under_load(pg_server: EmbeddedPostgres, pg_url: str, mode: str) -> None:
    store = PostgresStore(pg_url, max_size=8, retry_seconds=60)
    stop = threading.Event()
    acked: dict[str, list[tuple[int, str]]] = {f"w{i}": [] for i in range(4)}
    errors: list[BaseException] = []

    def writer(sid: str) -> None:
        n = 0
        try:
            while not stop.is_set():
                content = f"{sid}-{n}"
                ids = store.run(
                    ops.add_messages(
                        sid,
                        [
                            Message(role="user", content=content, token_count=1),
                            Message(role="assistant", content=content + "-a", token_count=1),
                        ],
                    )
                )
                acked[sid].append((ids[0], content))
                acked[sid].append((ids[1], content + "-a"))
                n += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(sid,)) for sid in acked]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        before = sum(len(v) for v in acked.values())
        pg_server.stop(mode)
        time.sleep(2.0)
        during = sum(len(v) for v in acked.values())
        pg_server.start()
        deadline = time.monotonic() + 30
        while sum(len(v) for v in acked.values()) < during + 40 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert before > 0
    assert sum(len(v) for v in acked.values()) >= during + 40  # writers resumed
    for sid, written in acked.items():
        stored = [(m.id, m.content) for m in store.run(ops.get_messages(sid))]
        assert stored == written  # every ack exactly once, in order, nothing unacknowledged
        assert store.run(ops.count_messages(sid)) == len(written)
    store.close()


def test_unreachable_server_gives_a_typed_error(pg_server: EmbeddedPostgres) -> None:
    url = f"postgresql://postgres@127.0.0.1:{pg_server.port + 1}/nothing"
    with pytest.raises(StoreUnavailableError, match="could not be reached") as info:
        PostgresStore(url, retry_seconds=1, connect_timeout=1)
    # the cause libpq gave, not the pool's "cannot be reused" after its first timeout
    assert "Connection refused" in str(info.value)
    assert "cannot be reused" not in str(info.value)


def test_a_database_that_does_not_exist_is_said_at_once_not_retried(
    pg_server: EmbeddedPostgres,
) -> None:
    """Waiting cannot fix a wrong database name: the error comes on the first attempt (a retry
    would take the hour given here) and names what to check."""
    url = f"postgresql://postgres@127.0.0.1:{pg_server.port}/no_such_database"
    with pytest.raises(StoreUnavailableError, match="does not exist") as info:
        PostgresStore(url, retry_seconds=3600, connect_timeout=1)
    assert "Check the host, port, database name, user and password" in str(info.value)


def test_an_unknown_user_is_said_at_once_without_the_password(
    pg_server: EmbeddedPostgres,
) -> None:
    url = f"postgresql://nobody_here:hunter2@127.0.0.1:{pg_server.port}/postgres"
    with pytest.raises(StoreUnavailableError, match="does not exist") as refused:
        PostgresStore(url, retry_seconds=3600)
    assert "hunter2" not in str(refused.value)


def _limit(url: str, setting: str) -> None:
    """Set a DBA's limit on the database (new connections get it, as with ALTER ROLE)."""
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET {setting}')


@pytest.mark.parametrize("setting", ["lock_timeout = '100ms'", "statement_timeout = '100ms'"])
def test_a_dba_timeout_is_a_typed_busy_error_not_thirty_seconds_of_retries(
    pg_url: str, setting: str
) -> None:
    _limit(pg_url, setting)
    store = PostgresStore(pg_url, retry_seconds=5)
    store.run(ops.add_messages("s", [Message(role="user", content="kept", token_count=1)]))
    with psycopg.connect(pg_url) as blocker:
        blocker.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(StoreBusyError, match="timeout"):
            store.run(ops.add_messages("s", [Message(role="user", content="no", token_count=1)]))
    assert [m.content for m in store.run(ops.get_messages("s"))] == ["kept"]
    store.close()


def test_opens_wait_for_a_migration_whatever_the_roles_lock_timeout(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    _limit(pg_url, "lock_timeout = '50ms'")
    opened: list[PostgresStore] = []
    with psycopg.connect(pg_url, autocommit=True) as migrating:
        migrating.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
        opener = threading.Thread(target=lambda: opened.append(PostgresStore(pg_url)))
        opener.start()
        while not migrating.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()[0]:
            time.sleep(0.01)
        time.sleep(0.2)  # past the role's lock_timeout: the opener must still be waiting
        migrating.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))
    opener.join(60)
    assert len(opened) == 1
    opened[0].close()


def test_a_read_only_replica_opens_for_reads(pg_url: str) -> None:
    """A store pointed at a replica (every transaction read-only) reads; writes are refused
    with the typed error, and opening no longer tries to create anything."""
    store = PostgresStore(pg_url)
    store.run(ops.add_messages("s", [Message(role="user", content="kept", token_count=1)]))
    store.close()
    _limit(pg_url, "default_transaction_read_only = on")
    replica = PostgresStore(pg_url)
    try:
        assert [m.content for m in replica.run(ops.get_messages("s"))] == ["kept"]
        with pytest.raises(StoreReadOnlyError, match="primary"):
            replica.run(ops.add_messages("s", [Message(role="user", content="x", token_count=1)]))
    finally:
        replica.close()


def test_an_atomic_block_ended_by_idle_in_transaction_timeout_is_typed_and_left_whole(
    pg_url: str,
) -> None:
    _limit(pg_url, "idle_in_transaction_session_timeout = '100ms'")
    name = pg_url.rsplit("/", 1)[1]
    store = PostgresStore(pg_url)

    def paused_block() -> None:
        store.run(ops.add_messages("s", [Message(role="user", content="a", token_count=1)]))
        with psycopg.connect(pg_url, autocommit=True) as watcher:
            while watcher.execute(  # until the server has ended the idle transaction
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                "AND state = 'idle in transaction'",
                (name,),
            ).fetchone()[0]:
                time.sleep(0.01)
        store.run(ops.add_messages("s", [Message(role="user", content="b", token_count=1)]))

    with pytest.raises(StoreBusyError, match="idle_in_transaction_session_timeout"):
        store.atomic(paused_block)
    assert store.run(ops.get_messages("s")) == []  # nothing of the block was applied
    store.close()


@pytest.mark.parametrize("search_path", ["nosuch", "app1"])
def test_a_search_path_harombe_cannot_use_is_named_at_open(pg_url: str, search_path: str) -> None:
    """A search_path naming no schema, or one without pgvector's: the error says to fix it
    (the extension is installed in public, which app1 leaves out)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA app1")
    with pytest.raises(StoreError, match="must name an existing schema"):
        PostgresStore(f"{pg_url}?options=-csearch_path%3D{search_path}")
    PostgresStore(f"{pg_url}?options=-csearch_path%3Dapp1,public").close()  # as the error says
