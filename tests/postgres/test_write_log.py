"""The exactly-once write log of the PostgreSQL store stays small and stays exactly-once.

Every write records a key in ``harombe_writes`` so that a retry after a connection lost at
COMMIT returns the first result instead of writing twice. Writes delete expired keys as they go,
so the table holds about the last few minutes of writes however many there were, and a key is
never deleted while its write may still be retried.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import psycopg
import pytest

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops, postgres
from tests.postgres.lost_commit import lose_first_commit_answer


def _count(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT COUNT(*) FROM harombe_writes").fetchone()
        return int(row[0]) if row else 0


def _expire_all(url: str) -> None:
    """Make every key already written as old as one no retry can need (time passing)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE harombe_writes SET forget_after = now() - interval '1 second'")


def test_many_writes_keep_the_log_bounded(pg_url: str) -> None:
    rounds, per_round = 8, 150
    with MemoryManager(pg_url, embedding=None) as mm:
        for r in range(rounds):
            for i in range(per_round):
                mm.save_message(f"s{r}", Message(role="user", content=f"{r}.{i}"))
            # Each round's writes deleted every expired key of the rounds before.
            assert _count(pg_url) == per_round
            _expire_all(pg_url)
        assert mm.store.run(ops.count_messages()) == rounds * per_round


def test_keys_outlive_every_retry_of_their_write(pg_url: str) -> None:
    with MemoryManager(pg_url, embedding=None) as mm:
        mm.save_message("s", Message(role="user", content="hello"))
        store: Any = mm.store
        with psycopg.connect(pg_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT EXTRACT(EPOCH FROM forget_after - at) FROM harombe_writes"
            ).fetchone()
        assert row is not None
        # A retry looks its key up at most retry window + one connection attempt + backoff
        # after the write began; the key lives minutes longer than that.
        assert float(row[0]) > store._retry_seconds + store._connect_timeout + 60
        # Pruning by hand never deletes a key that may still be looked up, whatever the age.
        assert store.prune_write_log(older_than_hours=0) == 0
        assert _count(pg_url) == 1
        _expire_all(pg_url)
        assert store.prune_write_log(older_than_hours=0) == 1


def test_a_retry_after_a_lost_commit_applies_once_while_writes_prune(pg_url: str) -> None:
    with MemoryManager(pg_url, embedding=None) as mm:
        for i in range(100):
            mm.save_message("old", Message(role="user", content=f"old {i}"))
        _expire_all(pg_url)
        store: Any = mm.store
        store._writes = itertools.count(0)  # the next write prunes, in its own transaction
        with lose_first_commit_answer(store) as lost:
            ids = mm.save_messages("s", [Message(role="user", content=f"m{i}") for i in range(3)])
        assert lost == [True]
        assert [m.id for m in mm.get_messages("s")] == ids  # stored once, ids as answered
        assert _count(pg_url) == 1  # the pruning write kept its own key and deleted the rest


@pytest.mark.parametrize("writes", [1, 64, 65])
def test_every_keyed_write_records_one_key(pg_url: str, writes: int) -> None:
    with MemoryManager(pg_url, embedding=None) as mm:
        for i in range(writes):
            mm.save_message("s", Message(role="user", content=str(i)))
        assert _count(pg_url) == writes


def test_keys_expire_after_their_lifetime_in_real_time(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a retry window of a fraction of a second, keys written a moment ago are deleted by
    the next pruning write once that moment has passed."""
    monkeypatch.setattr(postgres, "_WRITE_LOG_SLACK", 0.0)
    store = postgres.PostgresStore(pg_url, retry_seconds=0.2, connect_timeout=1)
    try:
        with MemoryManager(store, embedding=None) as mm:
            for i in range(postgres._PRUNE_EVERY):
                mm.save_message("s", Message(role="user", content=f"first {i}"))
            time.sleep(1.5)  # longer than the keys' 1.2 s lifetime
            mm.save_message("s", Message(role="user", content="prunes"))
            assert _count(pg_url) == 1
    finally:
        store.close()


def test_a_retry_returns_a_recorded_text_result_then_no_row_holds_it(pg_url: str) -> None:
    """A result holding text is recorded for a retry and deleted once the call has it: the
    retry after a lost COMMIT still returns it (the block ran once), and no row keeps it."""
    with MemoryManager(pg_url, embedding=None) as mm:
        mm.save_messages("s", [Message(role="user", content=f"pin {i} zq81x") for i in range(2)])
        store: Any = mm.store
        runs: list[int] = []

        def block() -> list[str]:
            runs.append(1)
            texts = [m.content for m in store.run(ops.get_messages("s"))]
            store.run(ops.clear_session("s"))
            return texts

        with lose_first_commit_answer(store) as lost:
            removed = store.atomic(block)
        assert lost == [True]
        assert removed == ["pin 0 zq81x", "pin 1 zq81x"]
        assert runs == [1]  # the retry found the key: the block was not run again
        assert mm.get_messages("s") == []
        with psycopg.connect(pg_url, autocommit=True) as conn:
            rows = conn.execute("SELECT result FROM harombe_writes").fetchall()
        assert not any("zq81x" in r[0] for r in rows)
