"""The store protocol: the one place that holds the truth.

Everything else (vector index, keyword index, thread graph, summaries) is derived from what a
store returns, so a backend only has to get these operations right, each in one transaction.
The protocol is synchronous; :class:`~harombe_core.manager.MemoryManager` gives every call an
async twin that runs it off the event loop.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from harombe_core.models import Message, Session

if TYPE_CHECKING:
    from harombe_core.store.runner import Dialect, Op

__all__ = ["UNSET", "AtomicBlock", "KeywordHit", "MessageStore", "SearchScope",
           "adjacent_ids_sql"]

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
    """The statement behind :meth:`MessageStore.adjacent_ids`, for both SQL dialects.

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
    """What every backend (SQLite, Postgres) implements, with identical meaning. Reads and
    writes beyond these are operations of :mod:`~harombe_core.store.ops` run by :meth:`run`
    / :meth:`arun`, the context strategies' O(window) reads among them."""

    location: str
    #: Which SQL the store speaks: ``dialect.name`` is "sqlite" or "postgres".
    dialect: Dialect

    def run(self, op: Op[T]) -> T:
        """Run one operation (:mod:`harombe_core.store.ops`) in one transaction."""
        ...

    async def arun(self, op: Op[T]) -> T:
        """:meth:`run` without blocking the event loop (native async on PostgreSQL)."""
        ...

    # sessions -----------------------------------------------------------------------------
    def create_session(
        self,
        session_id: str,
        *,
        user_id: str | None = None,
        system_prompt: str | None = None,
        system_prompt_tokens: int = 0,
        metadata: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
    ) -> Session: ...

    def get_session(self, session_id: str) -> Session | None: ...

    def update_session(
        self,
        session_id: str,
        *,
        user_id: Any = UNSET,
        system_prompt: Any = UNSET,
        system_prompt_tokens: Any = UNSET,
        metadata: Any = UNSET,
        summary: Any = UNSET,
        summary_data: Any = UNSET,
        summary_until_id: Any = UNSET,
    ) -> None: ...

    def system_prompt_tokens(self, session_id: str) -> int: ...

    def list_sessions(
        self, *, limit: int | None = 10, user_id: str | None = None, offset: int = 0
    ) -> list[Session]: ...

    def delete_session(self, session_id: str) -> bool: ...

    def delete_sessions_before(self, cutoff: datetime) -> list[str]: ...

    # messages -----------------------------------------------------------------------------
    def add_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        user_id: str | None = None,
        replace_ids: Sequence[int] = (),
    ) -> list[int]:
        """Append ``messages``; ``replace_ids`` (of this session) go in the same transaction."""
        ...

    def get_messages(
        self,
        session_id: str,
        *,
        after_id: int | None = None,
        limit: int | None = None,
    ) -> list[Message]: ...

    def iter_newest(self, session_id: str) -> Iterator[Message]: ...

    def get_messages_by_ids(
        self, ids: Sequence[int], scope: SearchScope | None = None
    ) -> list[Message]: ...

    def adjacent_ids(self, ids: Sequence[int]) -> dict[int, tuple[int | None, int | None]]:
        """For each existing id: the ids just before and after it in its session (or None)."""
        ...

    def count_messages(self, session_id: str | None = None) -> int: ...

    def clear_session(self, session_id: str) -> int: ...

    def set_parent(self, message_id: int, parent_id: int | None) -> None: ...

    def set_message_summary(self, message_id: int, summary: Mapping[str, Any] | None) -> None: ...

    def get_message_summaries(self, ids: Sequence[int]) -> dict[int, dict[str, Any]]: ...

    # derived indexes ------------------------------------------------------------------------
    def keyword_search(
        self, query: str, *, limit: int = 10, scope: SearchScope | None = None
    ) -> list[KeywordHit]: ...

    def pending_embeddings(self, limit: int) -> list[tuple[Message, str]]: ...

    def pending_count(self) -> int: ...

    def mark_embedded(self, ids: Sequence[int]) -> None: ...

    def reset_embedded(self) -> int: ...

    def rebuild_keyword_index(self) -> int: ...

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...

    def stats(self) -> dict[str, Any]: ...

    def atomic(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` as one transaction that every store call it makes on this thread joins:
        its writes commit together or not at all. ``fn`` may be run again (a retried
        transaction), and on PostgreSQL its result must be JSON-serialisable."""
        ...

    def close(self) -> None: ...
