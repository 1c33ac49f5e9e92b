"""LlamaIndex chat stores on the harombe database.

``HarombeChatStore`` is a ``BaseChatStore``: hand it to ``ChatMemoryBuffer`` (or any memory that
takes ``chat_store=``) and the buffer's history outlives the process. ``HarombeDBChatStore`` is an
``AsyncDBChatStore`` for LlamaIndex's newer ``Memory(sql_store=...)``, with its active/archived
FIFO queue kept in the same database. In both a chat-store *key* is a harombe session id, so the
messages are also visible to harombe's search, export and CLI.

Keys are global, as in LlamaIndex's ``SimpleChatStore``. A store given a ``user_id`` acts for that
user: the sessions it creates are theirs, ``get_keys`` lists only theirs, and a key naming
another user's session (or one without an owner) is refused with ``SessionOwnershipError``
instead of being read or written. A store without a ``user_id`` acts for nobody: it reaches
only sessions that have no owner. (``ChatMemoryBuffer``'s default key is the same
``"chat_history"`` for everyone: give each user their own ``chat_store_key``.)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, cast

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr
from llama_index.core.storage.chat_store import loading
from llama_index.core.storage.chat_store.base import BaseChatStore
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus

from harombe_core import MemoryManager
from harombe_core.errors import InvalidInputError
from harombe_core.integration import Body, Call, Flow, SqlRunner, Work, adrive, drive, sql_runner
from harombe_core.models import Message, Session
from harombe_core.validate import (
    MAX_COUNT,
    check_count,
    check_location,
    known_arguments,
    optional_count,
    optional_id,
    pydantic_errors,
)
from llamaindex_harombe._owned import OwnedManager
from llamaindex_harombe.convert import from_llamaindex, from_llamaindex_list, to_llamaindex
from llamaindex_harombe.memory import (
    DEFAULT_STORAGE_PATH,
    describe_manager,
    embedding_field,
    vector_store_field,
)

__all__ = ["HarombeChatStore", "HarombeDBChatStore", "holds_its_queue"]


class _ManagedStore(OwnedManager, BaseModel):
    """Fields and plumbing shared by both stores: where the database is, and the manager."""

    storage_path: str = Field(default=DEFAULT_STORAGE_PATH, description="SQLite file or URL.")
    embedding: str | None = embedding_field()
    vector_store: str | None = vector_store_field()
    user_id: str | None = Field(
        default=None,
        description="The user this store acts for: owner of the sessions it creates, and the "
        "only user whose sessions it reads or writes.",
    )

    _manager: MemoryManager = PrivateAttr()
    _owns_manager: bool = PrivateAttr(default=True)

    def __init__(
        self,
        storage_path: str | os.PathLike[str] | None = None,
        *,
        manager: MemoryManager | None = None,
        **data: Any,
    ) -> None:
        known_arguments(type(self).__name__, [*type(self).model_fields, "class_name"], data)
        if manager is not None:
            location, embedding, vector_store = describe_manager(manager)
            data.setdefault("embedding", embedding)
            data.setdefault("vector_store", vector_store)
            storage_path = storage_path or location
        data["storage_path"] = check_location(storage_path or DEFAULT_STORAGE_PATH)
        with pydantic_errors(type(self).__name__):
            super().__init__(**data)
        optional_id(self.user_id, "user_id")
        self._take_manager(manager, self.storage_path, self.embedding, self.vector_store)

    # Each operation is written once, as a flow (harombe_core.flows) over the manager's public
    # sync/async pairs: a sync method drives it on the calling thread, an async one with the
    # manager's async methods (one thread hop per store operation), so the event loop never blocks.
    def _check(self, key: str) -> Flow[Session | None]:
        """The key's session if this store may use it (None if new); else
        SessionOwnershipError."""
        m = self._manager
        owned = Call(m.check_owner, key, self.user_id, exact=True, native=m.acheck_owner)
        session: Session | None = yield owned
        return session

    def _read(
        self, key: str, *, after_id: int | None = None, limit: int | None = None
    ) -> Flow[list[Message]]:
        """The key's messages (``limit`` of them after ``after_id``), without the owner check."""
        m = self._manager
        options = {"after_id": after_id, "limit": limit, "user_id": self.user_id}
        messages: list[Message] = yield Call(m.get_messages, key, native=m.aget_messages, **options)
        return messages

    def _stored(self, key: str) -> Flow[list[Message]]:
        yield from self._check(key)
        return (yield from self._read(key))

    def _rewrite(
        self, key: str, doomed: Sequence[int], messages: Sequence[Message] = ()
    ) -> Flow[None]:
        m = self._manager
        replace = m.replace_messages
        yield Call(replace, key, doomed, messages, user_id=self.user_id, native=m.areplace_messages)

    def _delete_ids(self, key: str, victims: list[Message]) -> Flow[list[Message]]:
        """Delete ``victims`` (messages of ``key``) and return them."""
        yield from self._rewrite(key, [m.id for m in victims if m.id is not None])
        return victims

    def _atomically(self, key: str, make: Callable[[], Flow[list[Message]]]) -> Flow[list[Message]]:
        """The flow ``make()`` (a read of ``key``'s messages and the rewrite built from it; it
        returns the messages it removed or archived) as one transaction of the store, holding
        the key's session against other writers. One committing between the read and the
        rewrite made the rewrite stale: two inserts at an index at once each wrote the tail
        again (duplicated messages), and two deletes at one index removed one message.
        SQLite's write transaction locks the file; PostgreSQL locks the session's row first.
        The store calls run synchronously inside ``manager.atomic`` (one thread hop when
        async); a dropped PostgreSQL connection may run the block again, hence a factory, and
        its result must be JSON there, hence dicts."""
        manager = self._manager
        runner = sql_runner(manager.store)

        def block() -> list[dict[str, Any]]:
            if not runner.writes_one_at_a_time:
                runner.run(lambda: _lock_session(runner, key))
            return [m.to_dict() for m in drive(make())]

        removed: list[dict[str, Any]] = yield Work(manager.atomic, block)
        return [Message.from_dict(m) for m in removed]

    def _keys(self, *, with_messages: bool = False) -> Flow[list[str]]:
        """The sessions this store may list (no user: unowned ones), oldest first like the
        insertion order of LlamaIndex's stores; ``with_messages``: only those holding any."""
        m = self._manager
        listed = Call(m.list_sessions, limit=None, user_id=self.user_id, native=m.alist_sessions)
        sessions: list[Session] = yield listed
        mine = [
            s
            for s in sessions
            if s.user_id == self.user_id and (s.message_count > 0 or not with_messages)
        ]
        return [s.id for s in sorted(mine, key=lambda s: (s.created_at, s.id))]


class HarombeChatStore(_ManagedStore, BaseChatStore):
    """A ``BaseChatStore`` whose keys are harombe sessions.

    Same meaning as LlamaIndex's ``SimpleChatStore`` (its behaviour is the contract), but every
    call is one transaction in SQLite: ``set_messages`` replaces, ``add_message`` appends (or
    inserts at ``idx``), ``delete_*`` return what they removed or None.
    """

    @classmethod
    def class_name(cls) -> str:
        return "HarombeChatStore"

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        drive(self._set(key, messages))

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        await adrive(self._set(key, messages))

    def _set(self, key: str, messages: list[ChatMessage]) -> Flow[None]:
        converted = from_llamaindex_list(messages, "set_messages")
        yield from self._atomically(key, lambda: self._set_converted(key, converted))

    def _set_converted(self, key: str, converted: list[Message]) -> Flow[list[Message]]:
        if (yield from self._check(key)) is None and not converted:
            yield from self._create(key)  # SimpleChatStore then lists the key, with no messages
            return []
        old = yield from self._read(key)
        yield from self._rewrite(key, [m.id for m in old if m.id is not None], converted)
        return old

    def _create(self, key: str) -> Flow[None]:
        """The key's session, with no messages, owned by this store's user; if another caller
        created it meanwhile, that one stands (when this store may use it)."""
        m = self._manager
        try:
            yield Call(
                m.create_session, user_id=self.user_id, session_id=key, native=m.acreate_session
            )
        except InvalidInputError:
            if (yield from self._check(key)) is None:  # not a race: the id itself was refused
                raise

    def get_messages(self, key: str) -> list[ChatMessage]:
        return [to_llamaindex(m) for m in drive(self._stored(key))]

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        return [to_llamaindex(m) for m in await adrive(self._stored(key))]

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        """Append ``message``; with ``idx``, insert it before the message now at ``idx``."""
        drive(self._add(key, message, idx))

    async def async_add_message(
        self, key: str, message: ChatMessage, idx: int | None = None
    ) -> None:
        """:meth:`add_message` without blocking the event loop."""
        await adrive(self._add(key, message, idx))

    async def aadd_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        """The ``a``-prefixed name for :meth:`async_add_message`."""
        await adrive(self._add(key, message, idx))

    def _add(self, key: str, message: ChatMessage, idx: int | None) -> Flow[None]:
        converted = from_llamaindex(message)
        yield from self._check(key)
        if idx is None:
            m = self._manager
            yield Call(m.save_message, key, converted, user_id=self.user_id, native=m.asave_message)
            return
        yield from self._atomically(key, lambda: self._insert(key, converted, _index(idx)))

    def _insert(self, key: str, converted: Message, idx: int) -> Flow[list[Message]]:
        """Insert ``converted`` before the message now at ``idx`` (in one transaction)."""
        stored = yield from self._read(key)
        position = min(idx, len(stored)) if idx >= 0 else max(len(stored) + idx, 0)
        tail = stored[position:]
        # Ids are the order, so the messages after the insertion point are written again after
        # the new one, in the same transaction.
        doomed = [m.id for m in tail if m.id is not None]
        yield from self._rewrite(key, doomed, [converted, *(_fresh(m) for m in tail)])
        return []  # (the tail is written again after it: nothing is gone)

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """Remove the key and its messages; returns them, or None if the key is unknown."""
        return drive(self._delete_key(key))

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        return await adrive(self._delete_key(key))

    def _delete_key(self, key: str) -> Flow[list[ChatMessage] | None]:
        if (yield from self._check(key)) is None:
            return None
        removed = [to_llamaindex(m) for m in (yield from self._read(key))]
        m = self._manager
        yield Call(m.delete_session, key, user_id=self.user_id, native=m.adelete_session)
        return removed

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Remove the message at ``idx`` (negative counts from the end); None if out of range."""
        return drive(self._delete_at(key, idx))

    async def adelete_message(self, key: str, idx: int) -> ChatMessage | None:
        return await adrive(self._delete_at(key, idx))

    def delete_last_message(self, key: str) -> ChatMessage | None:
        return drive(self._delete_at(key, -1))

    async def adelete_last_message(self, key: str) -> ChatMessage | None:
        return await adrive(self._delete_at(key, -1))

    def _at(self, key: str, idx: int) -> Flow[Message | None]:
        """The message at ``idx`` (negative counts from the end), None if out of range; reads
        the session only as far as that message, from its start or from its end."""
        yield from self._check(key)
        if idx >= 0:
            head = yield from self._read(key, limit=idx + 1)
            return head[idx] if len(head) > idx else None
        m = self._manager
        newest = Call(m.get_newest_messages, key, -idx, native=m.aget_newest_messages)
        tail: list[Message] = yield newest
        return tail[0] if len(tail) == -idx else None

    def _delete_at(self, key: str, idx: int) -> Flow[ChatMessage | None]:
        idx = _index(idx)
        removed = yield from self._atomically(
            key, lambda: self._delete_found(key, self._at(key, idx))
        )
        return to_llamaindex(removed[0]) if removed else None

    def _delete_found(self, key: str, found: Flow[Message | None]) -> Flow[list[Message]]:
        """Delete from ``key`` the message the flow ``found`` finds (if any); return it."""
        doomed = yield from found
        if doomed is None:
            return []
        return (yield from self._delete_ids(key, [doomed]))

    def get_keys(self) -> list[str]:
        """Every key (session), oldest first, like the insertion order of SimpleChatStore."""
        return drive(self._keys())

    async def aget_keys(self) -> list[str]:
        return await adrive(self._keys())


def _lock_session(runner: SqlRunner, key: str) -> Body[None]:
    """Hold ``key`` against other rewrites until the transaction ends (PostgreSQL).

    The session's row is locked as other writers of it lock it; but a key's first messages
    come before its row exists, and two inserts at an index racing then each rewrote the
    other's messages again (a message stored twice). So the key itself is locked first, by a
    transaction-scoped advisory lock on its hash (a collision only makes two keys wait for
    each other)."""
    yield runner.step("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", (key,))
    yield runner.step(f"SELECT id FROM sessions s WHERE s.id = ?{runner.for_update('s')}", (key,))


def _index(value: Any, what: str = "idx") -> int:
    """A list position: an int, negative ones counting from the end as in Python."""
    return check_count(value, what, low=-MAX_COUNT)


def _status_arg(value: Any, *, optional: bool) -> MessageStatus | None:
    """A MessageStatus (or its value, "active" / "archived"); None means every status."""
    if value is None and optional:
        return None
    try:
        return MessageStatus(value)
    except ValueError:
        raise InvalidInputError(
            f"status must be MessageStatus.ACTIVE or MessageStatus.ARCHIVED"
            f"{' or None' if optional else ''}, got {type(value).__name__}."
        ) from None


def _fresh(message: Message) -> Message:
    """A stored message as a new one (store-assigned fields cleared) to write it again."""
    return message.with_ids(id=None, session_id=None, token_count=None, parent_id=None)


#: Session metadata key: id of the newest message archived by ``archive_oldest_messages``.
ARCHIVED_THROUGH_KEY = "li_archived_through"
#: Message metadata key marking a message written with status ARCHIVED.
STATUS_KEY = "li_status"


def holds_its_queue(session: Session) -> bool:
    """True if ``Memory`` has archived messages of this session through a HarombeDBChatStore:
    what it flushes from the session's queue is then already in the session, in order."""
    return ARCHIVED_THROUGH_KEY in session.metadata


class HarombeDBChatStore(_ManagedStore, AsyncDBChatStore):
    """An ``AsyncDBChatStore`` so ``Memory(sql_store=HarombeDBChatStore(...))`` uses harombe.

    ``Memory`` archives the oldest messages of its FIFO queue as it fills. Archiving here writes
    one number (the id of the newest archived message) instead of rewriting rows, so it costs the
    same whatever the history's length, and archived messages stay searchable by harombe.
    """

    @classmethod
    def class_name(cls) -> str:
        return "HarombeDBChatStore"

    # status bookkeeping ---------------------------------------------------------------------
    def _archived_through(self, key: str) -> Flow[int]:
        session = yield from self._check(key)
        if session is None:
            return 0
        value = session.metadata.get(ARCHIVED_THROUGH_KEY, 0)
        return int(value) if isinstance(value, int) else 0

    def _status(self, message: Message, through: int) -> MessageStatus:
        if message.metadata.get(STATUS_KEY) == MessageStatus.ARCHIVED.value:
            return MessageStatus.ARCHIVED
        if message.id is not None and message.id <= through:
            return MessageStatus.ARCHIVED
        return MessageStatus.ACTIVE

    def _select(self, key: str, status: MessageStatus | None) -> Flow[list[Message]]:
        status = _status_arg(status, optional=True)
        if status is None:
            return (yield from self._stored(key))
        through = yield from self._archived_through(key)
        if status == MessageStatus.ACTIVE:
            # Memory reads the active queue on every put: read only the rows after the archived
            # prefix, so the cost follows the queue, not the whole history.
            stored = yield from self._read(key, after_id=through or None)
        else:
            stored = yield from self._stored(key)
        return [m for m in stored if self._status(m, through) == status]

    def _count(self, key: str, status: MessageStatus | None) -> Flow[int]:
        """:meth:`_select`'s length counted in SQL: the active messages are those after the
        archived prefix without the ARCHIVED mark, the archived ones all the others."""
        status = _status_arg(status, optional=True)
        through = yield from self._archived_through(key)  # checks the key is this store's
        m = self._manager
        count, acount = m.count_messages, m.acount_messages
        total: int = yield Call(count, key, user_id=self.user_id, native=acount)
        if status is None:
            return total
        active: int = yield Call(
            count,
            key,
            after_id=through or None,
            unless_metadata={STATUS_KEY: MessageStatus.ARCHIVED.value},
            user_id=self.user_id,
            native=acount,
        )
        return active if status == MessageStatus.ACTIVE else total - active

    def _convert(self, messages: Sequence[ChatMessage], status: MessageStatus) -> list[Message]:
        status = _status_arg(status, optional=False) or MessageStatus.ACTIVE
        extra = {STATUS_KEY: status.value} if status == MessageStatus.ARCHIVED else None
        return from_llamaindex_list(messages, "add_messages", metadata=extra)

    # the operations, each a flow the async API drives ----------------------------------------
    def _get(
        self, key: str, status: MessageStatus | None, limit: int | None, offset: int | None
    ) -> Flow[list[ChatMessage]]:
        limit = optional_count(limit, "limit")
        start = optional_count(offset, "offset") or 0
        if limit is None:
            selected = yield from self._select(key, status)
            return [to_llamaindex(m) for m in selected[start:]]
        return [
            to_llamaindex(m) for m in (yield from self._page(key, status, start + limit))[start:]
        ]

    def _page(self, key: str, status: MessageStatus | None, end: int) -> Flow[list[Message]]:
        """The first ``end`` messages of :meth:`_select`, read ``end`` rows at a time from
        the database (after the archived prefix for the active ones), so a page of a long
        history reads about ``offset + limit`` rows, not the whole queue."""
        status = _status_arg(status, optional=True)
        if status is None:
            yield from self._check(key)
            through = 0
        else:
            through = yield from self._archived_through(key)
        cursor = (through or None) if status == MessageStatus.ACTIVE else None
        found: list[Message] = []
        while len(found) < end:
            want = end - len(found)
            batch = yield from self._read(key, after_id=cursor, limit=want)
            found += [m for m in batch if status is None or self._status(m, through) == status]
            if len(batch) < want or batch[-1].id is None:
                break
            cursor = batch[-1].id
        return found[:end]

    def _add(self, key: str, messages: Sequence[ChatMessage], status: MessageStatus) -> Flow[None]:
        yield from self._check(key)
        m = self._manager
        converted = self._convert(messages, status)
        yield Call(m.save_messages, key, converted, user_id=self.user_id, native=m.asave_messages)

    def _set(
        self, key: str, messages: Sequence[ChatMessage], status: MessageStatus
    ) -> Flow[list[Message]]:
        """The key's whole history becomes ``messages`` (archived ones go too, as in
        ``SQLAlchemyChatStore``: ``Memory.set`` means "this is the conversation")."""
        converted = self._convert(messages, status)
        old = yield from self._stored(key)
        yield from self._rewrite(key, [m.id for m in old if m.id is not None], converted)
        return old

    def _delete_id(self, key: str, row_id: int) -> Flow[list[Message]]:
        """The message whose id is ``row_id``, if it is the key's, deleted and returned."""
        row_id = check_count(
            row_id, "delete_message's message id (from get_messages)", low=-MAX_COUNT
        )
        if (yield from self._check(key)) is None or row_id < 1:
            return []
        found = yield from self._read(key, after_id=row_id - 1, limit=1)
        if not found or found[0].id != row_id:
            return []
        return (yield from self._delete_ids(key, found))

    def _delete_status(self, key: str, status: MessageStatus | None) -> Flow[list[Message]]:
        status = _status_arg(status, optional=True)
        if status is None:
            yield from self._check(key)
            m = self._manager
            yield Call(m.clear_session, key, user_id=self.user_id, native=m.aclear_session)
            return []
        return (yield from self._delete_ids(key, (yield from self._select(key, status))))

    def _delete_oldest(self, key: str, n: int) -> Flow[list[Message]]:
        if _index(n, "n") <= 0:
            return []
        active = yield from self._select(key, MessageStatus.ACTIVE)
        return (yield from self._delete_ids(key, active[:n]))

    def _archive_oldest(self, key: str, n: int) -> Flow[list[Message]]:
        active = (yield from self._select(key, MessageStatus.ACTIVE))[: max(_index(n, "n"), 0)]
        if not active:
            return []
        mm = self._manager
        session = yield Call(mm.get_session, key, user_id=self.user_id, native=mm.aget_session)
        metadata = {} if session is None else dict(session.metadata)
        metadata[ARCHIVED_THROUGH_KEY] = max(m.id or 0 for m in active)
        yield Call(mm.update_session, key, metadata=metadata, native=mm.aupdate_session)
        return active

    # AsyncDBChatStore -------------------------------------------------------------------------
    async def get_messages(
        self,
        key: str,
        status: MessageStatus | None = MessageStatus.ACTIVE,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[ChatMessage]:
        return await adrive(self._get(key, status, limit, offset))

    async def count_messages(
        self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE
    ) -> int:
        return await adrive(self._count(key, status))

    async def add_message(
        self, key: str, message: ChatMessage, status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        await adrive(self._add(key, [message], status))

    async def add_messages(
        self,
        key: str,
        messages: list[ChatMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:
        await adrive(self._add(key, messages, status))

    async def set_messages(
        self,
        key: str,
        messages: list[ChatMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:
        await adrive(self._atomically(key, lambda: self._set(key, messages, status)))

    async def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Delete the message whose id is ``idx`` and return it (None if the key has no such
        message), as ``SQLAlchemyChatStore`` does with its row ids. The ids are harombe's
        message ids (``store.manager.get_messages(key)``)."""
        removed = await adrive(self._atomically(key, lambda: self._delete_id(key, idx)))
        return to_llamaindex(removed[0]) if removed else None

    async def delete_messages(self, key: str, status: MessageStatus | None = None) -> None:
        await adrive(self._atomically(key, lambda: self._delete_status(key, status)))

    async def delete_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        removed = await adrive(self._atomically(key, lambda: self._delete_oldest(key, n)))
        return [to_llamaindex(m) for m in removed]

    async def archive_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        archived = await adrive(self._atomically(key, lambda: self._archive_oldest(key, n)))
        return [to_llamaindex(m) for m in archived]

    async def get_keys(self) -> list[str]:
        """Keys holding messages, as ``SQLAlchemyChatStore`` lists them (its keys are rows)."""
        return await adrive(self._keys(with_messages=True))


# ChatMemoryBuffer.from_dict finds its chat store's class by name in LlamaIndex's registry, which
# lists only SimpleChatStore: without this entry a buffer on HarombeChatStore could be saved but
# not restored ("Invalid ChatStore name"). The dict holds where the store is, never its messages.
_registry = cast(dict[str, type[BaseChatStore]], loading.RECOGNIZED_CHAT_STORES)
_registry.setdefault(HarombeChatStore.class_name(), HarombeChatStore)
