"""The message-store methods both SQL stores share, each one :mod:`~harombe_core.store.ops`
operation run by the store's own :meth:`run`.

A store provides ``run(op)`` (one transaction, with its locking, retries and error types),
``arun(op)`` and ``location``; :class:`StoreMethods` turns the operations into the methods of
the :class:`~harombe_core.store.base.MessageStore` protocol, written once for both backends.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from harombe_core.errors import InvalidInputError, SessionNotFoundError
from harombe_core.models import Message, Session
from harombe_core.store import ops
from harombe_core.store.base import SearchScope
from harombe_core.store.rows import check_id, row_to_message, session_changes
from harombe_core.store.runner import Body, Dialect, Op

__all__ = ["StoreMethods", "check_created", "create_session_op"]

T = TypeVar("T")

#: What a new session may be given (the rest of a session starts empty).
_CREATE_FIELDS = {"user_id", "system_prompt", "system_prompt_tokens", "metadata"}


class StoreMethods:
    """The store methods that are one operation each (see :mod:`harombe_core.store.ops`)."""

    location: str
    #: The store's SQL dialect: ``store.dialect.name`` is "sqlite" or "postgres".
    dialect: Dialect

    if TYPE_CHECKING:  # every store defines them (one transaction per op, its own driver)

        def run(self, op: Op[T]) -> T: ...

        async def arun(self, op: Op[T]) -> T: ...

    # sessions ---------------------------------------------------------------------------------
    def create_session(
        self, session_id: str, *, created_at: datetime | None = None, **fields: Any
    ) -> Session:
        """A new session with the given ``user_id``, ``system_prompt``,
        ``system_prompt_tokens`` and ``metadata`` (each checked as :meth:`update_session`
        checks it); InvalidInputError if the id is taken (the stored session is kept)."""
        check_created(self.run(create_session_op(session_id, created_at, fields)), session_id)
        session = self.get_session(session_id)
        assert session is not None
        return session

    def get_session(self, session_id: str) -> Session | None:
        return self.run(ops.get_session(session_id))

    def update_session(self, session_id: str, **fields: Any) -> None:
        """Change the given fields of a session (``user_id``, ``system_prompt``,
        ``system_prompt_tokens``, ``metadata``, ``summary``, ``summary_data``,
        ``summary_until_id``); each is checked as :meth:`create_session` checks it.
        SessionNotFoundError if there is no such session."""
        check_id(session_id, "session_id")
        changes = session_changes(**fields)
        if changes and self.run(ops.update_session(session_id, changes)) == 0:
            raise SessionNotFoundError(f"no session {session_id!r} in {self.location}")

    def system_prompt_tokens(self, session_id: str) -> int:
        return self.run(ops.system_prompt_tokens(session_id))

    def list_sessions(
        self, *, limit: int | None = 10, user_id: str | None = None, offset: int = 0
    ) -> list[Session]:
        return self.run(ops.list_sessions(limit, user_id, offset))

    def delete_session(self, session_id: str) -> bool:
        return bool(self.run(ops.delete_session(session_id)))

    def delete_sessions_before(self, cutoff: datetime) -> list[str]:
        """Delete sessions with no activity since ``cutoff``; returns their ids."""
        return self.run(ops.delete_sessions_before(cutoff))

    # messages ---------------------------------------------------------------------------------
    def add_messages(
        self, session_id: str, messages: Sequence[Message], **options: Any
    ) -> list[int]:
        """Insert messages (creating the session if needed), in one transaction; their ids.

        Options: ``user_id`` (the session's owner, checked) and ``replace_ids`` (messages of
        this session deleted in the same transaction, so a framework's "replace the history"
        or "delete message i" never leaves half a history).
        """
        return self.run(ops.add_messages(session_id, messages, **options))

    def add_messages_body(
        self, session_id: str, messages: Sequence[Message], **options: Any
    ) -> Body[list[int]]:
        """:meth:`add_messages` as steps of another body, in its transaction."""
        return ops.add_messages(session_id, messages, **options).body(self.dialect)

    def get_messages(
        self, session_id: str, *, after_id: int | None = None, limit: int | None = None
    ) -> list[Message]:
        return self.run(ops.get_messages(session_id, after_id, limit))

    def iter_newest(self, session_id: str) -> Iterator[Message]:
        """The session's messages newest first, fetched lazily a page at a time (pages that
        double from 32 rows, each its own statement: no statement stays open between pages,
        so a closing store or a fork never waits for a half-read iteration)."""
        check_id(session_id, "session_id")
        before, size = None, 32
        while True:
            rows = self.run(ops.newest_rows(session_id, before, size))
            yield from map(row_to_message, rows)
            if len(rows) < size:
                return
            before, size = int(rows[-1][0]), min(size * 2, 256)

    def get_messages_by_ids(
        self, ids: Sequence[int], scope: SearchScope | None = None
    ) -> list[Message]:
        """Messages with these ids that fall inside ``scope``, in the order of ``ids``."""
        op = ops.get_messages_by_ids(ids, scope)
        return self.run(op) if len(ids) else []

    def adjacent_ids(self, ids: Sequence[int]) -> dict[int, tuple[int | None, int | None]]:
        """For each existing id: the ids just before and after it in its session (or None)."""
        op = ops.adjacent_ids(ids)
        return self.run(op) if len(ids) else {}

    def count_messages(self, session_id: str | None = None) -> int:
        return self.run(ops.count_messages(session_id))

    def scope_size(self, scope: SearchScope) -> int | None:
        """Messages a session or user scope can hold (an upper bound); None if unscoped."""
        return self.run(ops.scope_size(scope))

    def clear_session(self, session_id: str) -> int:
        return self.run(ops.clear_session(session_id))

    def set_parent(self, message_id: int, parent_id: int | None) -> None:
        self.run(ops.set_parent(message_id, parent_id))

    def set_message_summary(self, message_id: int, summary: Mapping[str, Any] | None) -> None:
        self.run(ops.set_message_summary(message_id, summary))

    def get_message_summaries(self, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        op = ops.get_message_summaries(ids)
        return self.run(op) if len(ids) else {}

    # derived indexes and metadata -------------------------------------------------------------
    def mark_embedded(self, ids: Sequence[int]) -> None:
        op = ops.mark_embedded(ids)
        if len(ids):
            self.run(op)

    def reset_embedded(self) -> int:
        return int(self.run(ops.reset_embedded()))

    def get_meta(self, key: str) -> str | None:
        return self.run(ops.get_meta(key))

    def set_meta(self, key: str, value: str) -> None:
        self.run(ops.set_meta(key, value))


def create_session_op(
    session_id: str, created_at: datetime | None, fields: Mapping[str, Any]
) -> Op[bool]:
    """The operation that creates a session with ``fields`` (``user_id``, ``system_prompt``,
    ``system_prompt_tokens``, ``metadata``); it returns False if the id is taken."""
    unknown = set(fields) - _CREATE_FIELDS
    if unknown:
        raise TypeError(f"create_session() got unexpected keyword arguments {sorted(unknown)}")
    when = created_at or datetime.now(UTC)
    return ops.create_session(session_id, session_changes(**fields), when)


def check_created(done: bool, session_id: str) -> None:
    """InvalidInputError unless :func:`create_session_op` created the session."""
    if not done:
        raise InvalidInputError(
            f"session {session_id!r} already exists; load it with load_session() or "
            "choose another id."
        )
