"""LangGraph's stores and ``HarombeStore``, opened the way LangGraph's own store tests open them.

LangGraph's tests build their stores with ``SqliteStore.from_conn_string(conn_str, index=...,
ttl=...)`` then ``setup()``, ``async with AsyncSqliteStore.from_conn_string(...)``, and
``InMemoryStore(index=...)``. :mod:`upstream_plugin` binds those names, per run, to a class
below: LangGraph's own (the control) or harombe's (``HarombeStore`` on a ``MemoryManager`` opened
on the same connection string, ``":memory:"`` or a file).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiosqlite
from langgraph.store.sqlite import SqliteStore
from langgraph.store.sqlite.aio import AsyncSqliteStore

from harombe_core import MemoryManager
from langchain_harombe import HarombeStore

SECOND = 1_000_000  # microseconds
OPENED: list[HarombeStore] = []  # harombe's stores open in the current test
# ``HAROMBE_UPSTREAM_BACKEND=postgres`` (run.py --postgres): harombe's stores live in PostgreSQL,
# one fresh database per connection string of a test, on one local server for the whole run.
POSTGRES = os.environ.get("HAROMBE_UPSTREAM_BACKEND") == "postgres"
_server: Any = None
_databases: dict[str, str] = {}
_names = itertools.count()


def location(conn_string: str) -> str:
    """Where harombe opens what the test calls ``conn_string``: the same path on SQLite; on
    PostgreSQL a fresh database (the same one for the same file within a test)."""
    if not POSTGRES:
        return conn_string
    if conn_string != ":memory:" and conn_string in _databases:
        return _databases[conn_string]
    url = fresh_postgres_database()
    if conn_string != ":memory:":
        _databases[conn_string] = url
    return url


def fresh_postgres_database() -> str:
    """The URL of a new database on the run's PostgreSQL server (started on first use)."""
    global _server
    if _server is None:
        from harombe_core.store.pg_server import EmbeddedPostgres

        _server = EmbeddedPostgres()
        _server.start()
    return str(_server.create_database(f"upstream{os.getpid()}_{next(_names)}"))


def use_server(server: Any) -> None:
    """Put harombe's databases on ``server`` (one the run started for the framework's tests)."""
    global _server
    _server = server


def stop_server() -> None:
    """Stop the PostgreSQL server of the run, if one was started."""
    global _server
    if _server is not None:
        _server.cleanup()
        _server = None


def connect(path: str) -> Any:
    """A SQLite connection that can load sqlite-vec, as LangGraph's SQLite stores need: from
    ``sqlcipher3`` where Python's ``sqlite3`` cannot load extensions (an unkeyed sqlcipher
    database is a plain SQLite file)."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    import sqlcipher3

    return sqlcipher3.connect(path, check_same_thread=False, isolation_level=None)


class LangGraphSqliteStore(SqliteStore):
    """LangGraph's ``SqliteStore``; ``from_conn_string`` on :func:`connect`."""

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(  # type: ignore[override]
        cls, conn_string: str, **options: Any
    ) -> Iterator[LangGraphSqliteStore]:
        conn = connect(conn_string)
        try:
            yield cls(conn, **options)
        finally:
            conn.close()


class LangGraphAsyncSqliteStore(AsyncSqliteStore):
    """LangGraph's ``AsyncSqliteStore``; ``from_conn_string`` on :func:`connect`."""

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(  # type: ignore[override]
        cls, conn_string: str, **options: Any
    ) -> AsyncIterator[LangGraphAsyncSqliteStore]:
        async with aiosqlite.Connection(lambda: connect(conn_string), 64) as conn:
            yield cls(conn, **options)


class HarombeSqliteStore(HarombeStore):
    """``HarombeStore`` opened as LangGraph's tests open ``SqliteStore``."""

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(cls, conn_string: str, **options: Any) -> Iterator[HarombeSqliteStore]:
        with MemoryManager(location(conn_string), embedding=None) as manager:
            store = cls(manager, **options)
            OPENED.append(store)
            try:
                yield store
            finally:
                OPENED.remove(store)
                store.close()

    def setup(self) -> None:
        """Nothing to do: the manager migrated its database when it opened it."""


class HarombeAsyncSqliteStore:
    """``HarombeStore`` opened as LangGraph's tests open ``AsyncSqliteStore``.

    ``AsyncSqliteStore`` is async-only, so its TTL methods are coroutines (``await
    store.sweep_ttl()``, ``await store.start_ttl_sweeper()``); ``HarombeStore`` has both
    flavours, and those names are its sync ones (``asweep_ttl`` is the async twin). This wrapper
    maps the async-only names to harombe's; everything else is the store's own.
    """

    def __init__(self, store: HarombeStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, **options: Any
    ) -> AsyncIterator[HarombeAsyncSqliteStore]:
        with HarombeSqliteStore.from_conn_string(conn_string, **options) as store:
            yield cls(store)

    async def setup(self) -> None:
        """Nothing to do: the manager migrated its database when it opened it."""

    async def sweep_ttl(self) -> int:
        return await self._store.asweep_ttl()

    async def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> Any:
        return self._store.start_ttl_sweeper(sweep_interval_minutes)

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        return self._store.stop_ttl_sweeper(timeout)


class HarombeMemoryStore(HarombeStore):
    """``HarombeStore`` opened as LangGraph's tests open ``InMemoryStore(index=...)``."""

    def __init__(self, *, index: Any = None) -> None:
        super().__init__(storage_path=location(":memory:"), index=index)
        OPENED.append(self)


def close_all() -> None:
    """Close the stores a test left open (``InMemoryStore`` has no close)."""
    while OPENED:
        OPENED.pop().close()
    _databases.clear()


def _sweeping() -> bool:
    return any(store._sweeper is not None and store._sweeper.is_alive() for store in OPENED)


class MovedClock:
    """harombe's store clock (``langchain_harombe.store._now``), moved by a test's sleeps.

    LangGraph's stores read SQLite's ``CURRENT_TIMESTAMP``, so their runs of the TTL tests
    really sleep; harombe's move this clock by the same amounts, and really sleep only while a
    TTL sweeper thread must get its turn.
    """

    def __init__(self) -> None:
        self.now = int(time.time() * SECOND)

    def __call__(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += int(seconds * SECOND)
        if _sweeping():
            time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        self.now += int(seconds * SECOND)
        if _sweeping():
            await asyncio.sleep(seconds)
        else:
            await asyncio.sleep(0)


class MovedTime:
    """Stands for the ``time`` module in a test module during harombe's runs."""

    def __init__(self, clock: MovedClock) -> None:
        self.sleep = clock.sleep
        self.time = time.time
        self.monotonic = time.monotonic
        self.perf_counter = time.perf_counter


class MovedAsyncio:
    """Stands for the ``asyncio`` module in a test module during harombe's runs."""

    def __init__(self, clock: MovedClock) -> None:
        self.sleep = clock.asleep

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)
