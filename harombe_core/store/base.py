"""The store protocol: the one place that holds the truth.

Everything else (vector index, keyword index, thread graph, summaries) is derived from what a
store returns, so a backend only has to get these operations right, each in one transaction.
Every operation is an :class:`~harombe_core.store.runner.Op` of :mod:`harombe_core.store.ops`
that a store runs with ``run`` (or ``arun``, without blocking the event loop).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar, runtime_checkable

from harombe_core.errors import CorruptRowError
from harombe_core.models import Message

if TYPE_CHECKING:
    from harombe_core.store.runner import Dialect, Op

__all__ = [
    "UNSET",
    "AtomicBlock",
    "ClosesOnExit",
    "KeywordHit",
    "MessageStore",
    "OnCorrupt",
    "SearchScope",
    "adjacent_ids_sql",
]

T = TypeVar("T")


class _Unset:
    """Marker for "leave this field as it is" in updates, where ``None`` means "clear it"."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()

#: What is told of a row passed over as unreadable (None: it is raised).
OnCorrupt = Callable[[CorruptRowError], None] | None


@dataclass(frozen=True, slots=True)
class SearchScope:
    """Who may be seen by a search. Enforced by the store, never only by a vector filter."""

    user_id: str | None = None
    session_id: str | None = None
    roles: tuple[str, ...] | None = None
    since: datetime | None = None
    until: datetime | None = None
    #: A session left out (the one being answered, when asking for the relevant past): in
    #: the scope itself, so its own matches never fill the candidates the others need.
    exclude_session_id: str | None = None
    #: Where a row edited outside harombe that cannot be read goes when the search passes over
    #: it (recall that enriches a prompt: one bad row must not fail every turn of its user);
    #: None, the default, raises its CorruptRowError (a caller who asked for results must
    #: know some could not be read). Not part of what the scope admits, so not compared.
    on_corrupt: OnCorrupt = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class KeywordHit:
    """A message matched by the keyword index; ``score`` is BM25 made positive (higher: better)."""

    message: Message
    score: float


class AtomicBlock(threading.local):
    """A store's :meth:`~MessageStore.atomic` block on the current thread.

    ``handle`` is the connection (SQLite) or cursor (PostgreSQL) the block's transaction runs
    on, None outside a block; store calls made while it is set run on it. The first failure of
    such a call dooms the block: the block raises it even if the caller caught it, because the
    call may have written half of what it meant to (and PostgreSQL aborts the transaction).
    """

    handle: Any = None
    failure: BaseException | None = None

    @contextlib.contextmanager
    def open(self, handle: Any) -> Iterator[None]:
        """Calls on this thread join the transaction on ``handle`` while this is open."""
        self.handle, self.failure = handle, None
        try:
            yield
        finally:
            self.handle = None

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """A store call inside the block: its error is recorded as the block's failure."""
        try:
            yield
        except BaseException as exc:
            if self.failure is None:
                self.failure = exc
            raise

    def result(self, value: T) -> T:
        """``value``, unless a call inside the block failed: then that failure."""
        if self.failure is not None:
            raise self.failure
        return value


def adjacent_ids_sql(id_condition: str) -> str:
    """The statement behind :func:`harombe_core.store.ops.adjacent_ids`, for both SQL dialects.

    ``id_condition`` selects the wanted rows of ``messages m`` (``m.id IN (?, ?)`` or
    ``m.id = ANY(%s)``). Each neighbour is one seek on the ``(session_id, id)`` index, so the
    cost follows the number of ids asked for, never the length of their sessions.
    """
    return (
        "SELECT m.id, "
        "(SELECT p.id FROM messages p WHERE p.session_id = m.session_id AND p.id < m.id "
        "ORDER BY p.id DESC LIMIT 1), "
        "(SELECT n.id FROM messages n WHERE n.session_id = m.session_id AND n.id > m.id "
        "ORDER BY n.id LIMIT 1) "
        f"FROM messages m WHERE {id_condition}"
    )


@runtime_checkable
class MessageStore(Protocol):
    """What every backend (SQLite, Postgres) implements, with identical meaning.

    As narrow as LangGraph's ``BaseStore``: every operation on sessions and messages is an
    :class:`~harombe_core.store.runner.Op` of :mod:`harombe_core.store.ops`, written once for
    both dialects, and a store only runs it (``store.run(ops.get_session(sid))``, ``await
    store.arun(...)``) in one transaction with its own locking, retries and error types. An
    operation that differs by backend in more than its SQL has a body per dialect (the
    keyword search: FTS5 with a tail scored in Python, or PostgreSQL full text), so a store
    is ``run``/``arun``, ``atomic`` and ``close``, plus where it is and which SQL it speaks.
    A read that spans several operations is a flow of them
    (:func:`~harombe_core.context_reads.read_newest` reads a session newest first, a page per
    operation).
    """

    location: str
    #: Which SQL the store speaks: ``dialect.name`` is "sqlite" or "postgres".
    dialect: Dialect

    def run(self, op: Op[T]) -> T:
        """Run one operation (:mod:`harombe_core.store.ops`) in one transaction."""
        ...

    async def arun(self, op: Op[T]) -> T:
        """:meth:`run` without blocking the event loop (in a worker thread, one hop)."""
        ...

    def atomic(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` as one transaction that every store call it makes on this thread joins:
        its writes commit together or not at all. ``fn`` may be run again (a retried
        transaction), and on PostgreSQL its result must be JSON-serialisable."""
        ...

    def close(self) -> None: ...


class ClosesOnExit:
    """Mixin: ``with obj as o:`` binds ``obj`` itself and calls ``obj.close()`` on leaving.

    What holds a database open (a manager, a chat memory, a checkpointer, a local PostgreSQL
    server) is closed when its ``with`` block ends, an error or not; the protocol is the same
    for all of them, so it is written once, beside the store's own ``close``. The class
    defines ``close``; it must be safe to call more than once.
    """

    def close(self) -> None:  # pragma: no cover - every user defines its own
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
