"""PostgreSQL runs a body pipelined: each statement is sent as the body yields it, and the body
waits for the server only where it reads a result, so BEGIN and the statements whose answers
it does not read share round trips; COMMIT follows by itself once pipeline mode is left (so
nothing reaches a pooler after the transaction ends: tests/postgres/test_pgbouncer.py). A
failure anywhere still rolls the whole body back, and the connection goes back to the pool
clean.

The waits are counted where the driver waits (a pipeline sync to read an answer, leaving the
pipeline, the COMMIT after it, a lone statement run outside a transaction), not timed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage

from harombe_core import MemoryManager
from harombe_core.errors import InvalidInputError
from harombe_core.store import postgres
from harombe_core.store.postgres import PostgresStore
from harombe_core.store.runner import Body, Step
from langchain_harombe import HarombeSaver
from tests.langchain.test_deletion import _graph


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStore]:
    """A store of one connection (so a call after a failure reuses the failed one's) and a
    table ``t`` of its own."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    opened = PostgresStore(pg_url, max_size=1)
    try:
        yield opened
    finally:
        opened.close()


class Waits:
    """Every wait for the server, as ``"read"`` (an answer read mid-body), ``"leave"``
    (leaving the pipeline: every answer still due), ``"commit"`` (COMMIT, after it) or
    ``"alone"`` (a lone statement), with the saver method it was in (``None`` outside one)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, str]] = []
        self.local = threading.local()
        self.lock = threading.Lock()

    def add(self, kind: str) -> None:
        with self.lock:
            self.seen.append((getattr(self.local, "method", None), kind))

    def kinds(self) -> list[str]:
        return [kind for _, kind in self.seen]


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> Waits:
    found = Waits()
    sync, leave, alone = psycopg.Pipeline.sync, psycopg.Pipeline.__exit__, postgres._alone
    execute = psycopg.Connection.execute

    def counted_sync(self: psycopg.Pipeline) -> None:
        found.add("read")
        sync(self)

    def counted_exit(self: psycopg.Pipeline, *exc_info: Any) -> None:
        found.add("leave")
        leave(self, *exc_info)

    def counted_execute(self: psycopg.Connection[Any], query: Any, *args: Any, **kw: Any) -> Any:
        if query == "COMMIT":
            found.add("commit")
        return execute(self, query, *args, **kw)

    def counted_alone(conn: Any, body: Any) -> Any:
        found.add("alone")
        return alone(conn, body)

    monkeypatch.setattr(psycopg.Pipeline, "sync", counted_sync)
    monkeypatch.setattr(psycopg.Pipeline, "__exit__", counted_exit)
    monkeypatch.setattr(psycopg.Connection, "execute", counted_execute)
    monkeypatch.setattr(postgres, "_alone", counted_alone)
    return found


def _rows(store: PostgresStore) -> list[tuple[int, str]]:
    def body() -> Body[list[tuple[int, str]]]:
        return [tuple(r) for r in (yield Step("SELECT k, v FROM t ORDER BY k")).rows]

    return store.run_body(body)


def test_a_body_waits_for_the_server_only_where_it_reads_an_answer(
    store: PostgresStore, waits: Waits
) -> None:
    def body() -> Body[int]:
        yield Step("INSERT INTO t VALUES (%s, %s)", (1, "a"))
        yield Step("INSERT INTO t VALUES (%s, %s)", (2, "b"))
        count: int = (yield Step("SELECT count(*) FROM t")).rows[0][0]
        yield Step("INSERT INTO t VALUES (%s, %s)", (3, "c"))
        return count

    assert store.run_body(body, exactly_once=True) == 2
    # BEGIN and both inserts went with the count; the last insert and the write-log record
    # with the end of the pipeline; then COMMIT.
    assert waits.kinds() == ["read", "leave", "commit"]
    assert _rows(store) == [(1, "a"), (2, "b"), (3, "c")]


def test_a_statement_that_fails_unread_rolls_back_the_whole_body(
    store: PostgresStore, waits: Waits, caplog: pytest.LogCaptureFixture
) -> None:
    def body() -> Body[None]:
        yield Step("INSERT INTO t VALUES (%s, %s)", (1, "a"))
        yield Step("INSERT INTO t VALUES (%s, %s)", (2, None))  # NOT NULL: refused
        yield Step("INSERT INTO t VALUES (%s, %s)", (3, "c"))

    with caplog.at_level(logging.DEBUG, logger="psycopg"):
        with pytest.raises(InvalidInputError, match="cannot be stored"):
            store.run_body(body, exactly_once=True)
        assert _rows(store) == []  # on the same (only) connection, back in the pool clean
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    def good() -> Body[int]:
        done = yield Step("INSERT INTO t VALUES (%s, %s)", (4, "d"))
        return int(done.rowcount)

    assert store.run_body(good, exactly_once=True) == 1
    assert _rows(store) == [(4, "d")]


def test_a_body_that_raises_after_statements_it_did_not_read_writes_nothing(
    store: PostgresStore,
) -> None:
    def body() -> Body[None]:
        yield Step("INSERT INTO t VALUES (%s, %s)", (1, "a"))
        yield Step("INSERT INTO t VALUES (%s, %s)", (2, "b"))
        raise InvalidInputError("refused by the body itself")

    with pytest.raises(InvalidInputError, match="refused by the body"):
        store.run_body(body, exactly_once=True)
    assert _rows(store) == []


def test_a_lone_first_statement_runs_alone_and_a_longer_body_runs_again_whole(
    store: PostgresStore, waits: Waits
) -> None:
    def body(key: int) -> Body[str]:
        found = (yield Step("SELECT v FROM t WHERE k = %s", (key,))).rows
        if found:
            return str(found[0][0])
        yield Step("INSERT INTO t VALUES (%s, %s)", (key, "new"))
        return "inserted"

    assert store.run_body(lambda: body(1), first_alone=True) == "inserted"
    # dropped, then run in a transaction
    assert waits.kinds() == ["alone", "read", "leave", "commit"]
    waits.seen.clear()
    assert store.run_body(lambda: body(1), first_alone=True) == "new"
    assert waits.kinds() == ["alone"]
    assert _rows(store) == [(1, "new")]


def test_a_checkpointer_turn_waits_three_times_per_put_and_once_per_other_call(
    pg_url: str, waits: Waits, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A steady turn of a thread: its read, its pending writes and its puts."""
    for name in ("put", "put_writes", "get_tuple"):
        method = getattr(HarombeSaver, name)

        def tagged(
            self: HarombeSaver, *args: Any, _name: str = name, _method: Any = method, **kwargs: Any
        ) -> Any:
            waits.local.method = _name
            try:
                return _method(self, *args, **kwargs)
            finally:
                waits.local.method = None

        monkeypatch.setattr(HarombeSaver, name, tagged)
    config = {"configurable": {"thread_id": "t"}}
    with MemoryManager(pg_url, embedding=None) as mm:
        graph = _graph(HarombeSaver(mm))
        for turn in range(2):
            graph.invoke({"messages": [HumanMessage(f"turn {turn}")]}, config)
        mm.flush()
        waits.seen.clear()
        graph.invoke({"messages": [HumanMessage("a steady turn")]}, config)
        calls = [(method, kind) for method, kind in waits.seen if method is not None]
    assert sorted(set(calls)) == [
        ("get_tuple", "alone"),
        ("put", "commit"),
        ("put", "leave"),
        ("put", "read"),
        ("put_writes", "alone"),
    ]
    puts = [kind for method, kind in calls if method == "put"]
    # each put: its state, the rest of its statements, its commit
    assert puts.count("read") == puts.count("leave") == puts.count("commit") > 0
