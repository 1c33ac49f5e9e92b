"""LangGraph's checkpoint savers and ``HarombeSaver``, opened the way LangGraph's saver tests
open them.

LangGraph's saver tests build ``InMemorySaver()`` / ``InMemorySaver(serde=...)``, ``with
SqliteSaver.from_conn_string(":memory:")`` and ``async with
AsyncSqliteSaver.from_conn_string(":memory:")``. :mod:`upstream_plugin` binds those names, per
run, to LangGraph's class (the control) or to a class below: ``HarombeSaver`` on its own manager
opened where the test says (``":memory:"`` or a file; a fresh PostgreSQL database with
``run.py --postgres``), closed when the test ends. LangGraph's PostgreSQL saver tests
(``PostgresSaver(conn)``, ``AsyncPostgresSaver(pool)``) get ``HarombeSaver`` on a fresh
database of the same server.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph_stores import fresh_postgres_database, location

from langchain_harombe import HarombeSaver

OPENED: list[HarombeSaver] = []  # harombe's savers open in the current test


class HarombeMemorySaver(HarombeSaver):
    """``HarombeSaver`` opened as the tests open ``InMemorySaver(serde=..., factory=...)``:
    on a database of its own (``factory``, the in-memory dicts' type, has no counterpart)."""

    def __init__(self, *, serde: SerializerProtocol | None = None, factory: Any = None) -> None:
        super().__init__(storage_path=location(":memory:"), serde=serde)
        OPENED.append(self)


class HarombeSqliteSaver(HarombeSaver):
    """``HarombeSaver`` opened as the tests open ``SqliteSaver`` / ``AsyncSqliteSaver``:
    ``from_conn_string`` as a sync or async context manager (one saver does both)."""

    @classmethod
    @contextlib.contextmanager
    def _opened(cls, conn_string: str, **options: Any) -> Iterator[HarombeSaver]:
        saver = HarombeSaver(storage_path=location(conn_string), **options)
        OPENED.append(saver)
        try:
            yield saver
        finally:
            if saver in OPENED:
                OPENED.remove(saver)
                saver.close()

    @classmethod
    def from_conn_string(cls, conn_string: str, **options: Any) -> Any:  # type: ignore[override]
        return _Both(cls._opened(conn_string, **options))


class HarombePostgresSaver(HarombeSaver):
    """``HarombeSaver`` opened as the tests open ``PostgresSaver(conn_or_pool, pipe=...)`` and
    ``AsyncPostgresSaver(...)``: on a fresh database of the run's PostgreSQL server, not on the
    test's own (the test drops its database while harombe's connection pool would still hold
    it); the connection, pool and pipeline are LangGraph's ways in and have no counterpart."""

    def __init__(
        self, conn: Any = None, pipe: Any = None, serde: SerializerProtocol | None = None
    ) -> None:
        super().__init__(storage_path=fresh_postgres_database(), serde=serde)
        OPENED.append(self)


class _Both:
    """A context manager usable with ``with`` and ``async with``, as ``HarombeSaver``'s is."""

    def __init__(self, opened: contextlib.AbstractContextManager[HarombeSaver]) -> None:
        self._opened = opened

    def __enter__(self) -> HarombeSaver:
        return self._opened.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self._opened.__exit__(*exc)

    async def __aenter__(self) -> HarombeSaver:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return self.__exit__(*exc)


def bindings() -> dict[str, tuple[Any, Any]]:
    return {
        "InMemorySaver": (InMemorySaver, HarombeMemorySaver),
        "SqliteSaver": (SqliteSaver, HarombeSqliteSaver),
        "AsyncSqliteSaver": (AsyncSqliteSaver, HarombeSqliteSaver),
        "PostgresSaver": (PostgresSaver, HarombePostgresSaver),
        "AsyncPostgresSaver": (AsyncPostgresSaver, HarombePostgresSaver),
    }


def close_all() -> None:
    """Close the savers a test left open (``InMemorySaver`` has no close)."""
    while OPENED:
        OPENED.pop().close()
