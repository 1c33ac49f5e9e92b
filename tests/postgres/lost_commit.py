"""A connection lost just after COMMIT: the write landed, its answer never arrived."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg


@contextlib.contextmanager
def lose_first_commit_answer(store: Any) -> Iterator[list[bool]]:
    """The first transaction that records a write commits, then its connection drops before
    the answer arrives (reads before it are answered normally)."""
    pool, keyed = store._pool, store._keyed
    real = pool.connection
    wrote: list[bool] = []
    lost: list[bool] = []

    def recording(*args: Any) -> Any:
        value = yield from keyed(*args)
        wrote.append(True)
        return value

    @contextlib.contextmanager
    def connection(*args: object, **kwargs: object) -> Iterator[object]:
        with real(*args, **kwargs) as conn:
            yield conn
        if wrote and not lost:
            lost.append(True)
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    pool.connection, store._keyed = connection, recording
    try:
        yield lost
    finally:
        pool.connection, store._keyed = real, keyed
