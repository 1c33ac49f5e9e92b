"""PostgreSQL stopped and restarted under load: writers retry and resume, nothing acknowledged
is lost or duplicated, and order within each session holds."""

from __future__ import annotations

import threading
import time

import pytest

from harombe_core.errors import StoreUnavailableError
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.store.pg_server import EmbeddedPostgres
from harombe_core.store.postgres import PostgresStore


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
