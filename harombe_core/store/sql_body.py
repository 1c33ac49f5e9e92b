"""One transaction of plain SQL on either SQL backend, for tables kept beside the messages.

The LangGraph store of the LangChain adapter and ``harombe migrate`` keep and copy tables that
the message-store protocol does not model (``store_items``, ``store_vectors``). Rather than one
implementation per backend, such code is written once as a *body*: a generator that yields
:class:`Step` s (SQL with ``?`` placeholders) and receives :class:`StepResult` s. A
:class:`SqlRunner` runs a body in one transaction with the store's own locking, retries and
error types: on SQLite through :meth:`SQLiteStore.transaction`, on PostgreSQL through
:meth:`PostgresStore.run_body` (applied exactly once when a retry follows a connection lost
at COMMIT); the async twins run the same in a worker thread (``flows.off_loop``) on both.
:meth:`SqlRunner.read` runs a body that only reads in one consistent snapshot without taking
SQLite's write lock, and a body can append messages to a session in its own transaction with
:meth:`SqlRunner.add_messages` (the operation :func:`~harombe_core.store.ops.add_messages`, as
steps).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from harombe_core.errors import InvalidInputError
from harombe_core.flows import off_loop
from harombe_core.store import ops
from harombe_core.store.runner import MORE, Body, Step, StepResult, drive, drive_first

if TYPE_CHECKING:
    from harombe_core.models import Message

__all__ = ["Body", "SqlRunner", "Step", "StepResult", "drive", "sql_runner"]

T = TypeVar("T")


class SqlRunner:
    """Runs bodies on one store; :meth:`step` writes a ``?`` statement in its dialect."""

    #: Whether the store's write transactions run one at a time (SQLite's lock the whole file),
    #: so what a write transaction's statement checks holds until it commits, without the row
    #: locks (:meth:`for_update`) a PostgreSQL body takes to order writers.
    writes_one_at_a_time = True

    def for_update(self, alias: str) -> str:
        """The clause that locks the rows a SELECT of table ``alias`` reads until the
        transaction ends ("" on SQLite, whose write transactions lock the whole file).

        On PostgreSQL it is the lock an UPDATE of the row takes (``FOR NO KEY UPDATE``): it
        orders every writer of the row (they take it too, or update the row), but does not
        hold up an insert that only references the row (a foreign key's check takes ``KEY
        SHARE``), such as a task's pending writes beside a checkpoint put of its thread."""
        return ""

    def __init__(self, store: Any) -> None:
        self.store = store

    def step(self, sql: str, params: Sequence[Any] = ()) -> Step:
        """A statement written with ``?`` placeholders, in this backend's style (the store's
        :class:`~harombe_core.store.runner.Dialect` writes it; SQLite's is ``?`` itself, so
        the statement is built here, without that call: a checkpoint put asks several)."""
        return Step(sql, params)

    def run(
        self,
        factory: Callable[[], Body[T]],
        *,
        exactly_once: bool = False,
        adds_messages: bool = True,
        first_alone: bool = False,
        text_free: bool = False,
    ) -> T:
        """Run the body ``factory()`` makes, in one transaction (``factory`` may run again on
        a retry, so it must build a fresh generator each time). ``adds_messages=False``: the
        body adds no message, so SQLite's keyword indexer is not woken for it.

        ``first_alone=True`` for a body that usually asks a single statement, and whose first
        statement has written nothing when the body asks another (a write that checks its own
        condition, such as a checkpointer's pending writes): that statement runs alone and
        commits by itself, without the BEGIN and COMMIT around it; a body that asks a second
        one is dropped and run again from its start in one transaction. (On PostgreSQL that
        lone statement is not recorded for ``exactly_once``: running it twice, as a retry after
        a lost connection does, must change nothing.)

        ``text_free=True``: the body's result holds no text of a user (flags, counts, random
        tokens), so PostgreSQL leaves the ``exactly_once`` record of it to expire instead of
        deleting it after the call (a round trip less). Nothing to do on SQLite."""
        if first_alone:
            done = self.store.transaction(
                lambda c: drive_first(c, factory()), adds_messages=adds_messages, begin=False
            )
            if done is not MORE:
                return done
        return self.store.transaction(lambda c: drive(c, factory()), adds_messages=adds_messages)

    async def arun(
        self,
        factory: Callable[[], Body[T]],
        *,
        exactly_once: bool = False,
        adds_messages: bool = True,
        first_alone: bool = False,
        text_free: bool = False,
    ) -> T:
        """:meth:`run` without blocking the event loop: in a worker thread, one hop."""
        return await off_loop(
            self.run,
            factory,
            exactly_once=exactly_once,
            adds_messages=adds_messages,
            first_alone=first_alone,
            text_free=text_free,
        )

    def read(self, factory: Callable[[], Body[T]]) -> T:
        """Run a body that only reads, in one consistent snapshot (no write lock on SQLite)."""
        return self.store.snapshot(lambda c: drive(c, factory()))

    async def aread(self, factory: Callable[[], Body[T]]) -> T:
        """:meth:`read` without blocking the event loop: in a worker thread, one hop."""
        return await off_loop(self.read, factory)

    def read_one(self, factory: Callable[[], Body[T]]) -> T:
        """:meth:`read` for a body that usually asks a single statement (a checkpoint read
        whose blobs this process holds): that statement runs alone, without the BEGIN and
        COMMIT around it, as one statement already reads one consistent snapshot. A body that
        asks a second one is dropped and run again from its start by :meth:`read`, so every
        answer still comes from one snapshot."""
        done = self.store.snapshot(lambda c: drive_first(c, factory()), begin=False)
        return self.read(factory) if done is MORE else done

    async def aread_one(self, factory: Callable[[], Body[T]]) -> T:
        """:meth:`read_one` without blocking the event loop: in a worker thread, one hop."""
        return await off_loop(self.read_one, factory)

    def add_messages(
        self, session_id: str, messages: Sequence[Message], **options: Any
    ) -> Body[list[int]]:
        """:func:`~harombe_core.store.ops.add_messages` (with its ``user_id`` and
        ``replace_ids`` options) as steps of the caller's body: same checks, same rows (token
        counts must be set)."""
        return ops.add_messages(session_id, messages, **options).body(self.store.dialect)


class _PostgresRunner(SqlRunner):
    writes_one_at_a_time = False

    def for_update(self, alias: str) -> str:
        return f" FOR NO KEY UPDATE OF {alias}"

    def step(self, sql: str, params: Sequence[Any] = ()) -> Step:
        step: Step = self.store.dialect.step(sql, params)
        return step

    def run(
        self,
        factory: Callable[[], Body[T]],
        *,
        exactly_once: bool = False,
        adds_messages: bool = True,
        first_alone: bool = False,
        text_free: bool = False,
    ) -> T:
        return self.store.run_body(
            factory, exactly_once=exactly_once, first_alone=first_alone, text_free=text_free
        )

    def read(self, factory: Callable[[], Body[T]]) -> T:
        return self.store.run_body(factory)

    def read_one(self, factory: Callable[[], Body[T]]) -> T:
        return self.store.run_body(factory, first_alone=True)


def sql_runner(store: Any) -> SqlRunner:
    """The runner for ``store`` (by ``store.dialect.name``); InvalidInputError if it is
    neither SQLite nor PostgreSQL."""
    name = getattr(getattr(store, "dialect", None), "name", None)
    if name == "sqlite":
        return SqlRunner(store)
    if name == "postgres":
        return _PostgresRunner(store)
    raise InvalidInputError(
        f"{type(store).__name__} holds no SQL tables beside the messages; use a SQLite "
        "database path or a postgresql:// URL."
    )
