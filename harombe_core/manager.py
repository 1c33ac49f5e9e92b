"""MemoryManager: the façade an application (or an adapter) talks to.

It owns one store and, when semantic memory is on, the embedder, vector index and background
indexer derived from it. Every I/O method has an ``a``-prefixed async twin; both are made from
one flow (:mod:`harombe_core.flows`), so they check and do the same things. The async twin runs
the store's own async methods where it has them (PostgreSQL) and otherwise does the blocking
work (SQLite, models) in a worker thread, so the event loop is never blocked.
"""

from __future__ import annotations

import inspect
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from harombe_core.context import ContextBuilder
from harombe_core.context_reads import anewest_until, newest_until
from harombe_core.derive import converted, forwarded, in_thread, part_property
from harombe_core.erasing import delete_user_sessions, erase, prune_cutoff
from harombe_core.errors import InvalidInputError
from harombe_core.flows import Call, Flow, Work, twins
from harombe_core.manager_facts import UserMemoryMethods
from harombe_core.manager_search import Searcher
from harombe_core.models import Message, Session
from harombe_core.owned import named_owner, owned_session
from harombe_core.owners import legacy_session_key, session_key
from harombe_core.progress import Progress, check_progress
from harombe_core.store import ops
from harombe_core.store.base import UNSET, MessageStore
from harombe_core.store.closing import ClosesOnExit
from harombe_core.store.encryption import check_key
from harombe_core.strategies import Window, window_newest
from harombe_core.tokens import TokenCounter, resolve_token_counter
from harombe_core.validate import (
    check_budget,
    check_config,
    check_flag,
    check_id,
    check_list,
    check_location,
    optional_count,
    optional_id,
    optional_number,
)
from harombe_core.write_inputs import as_message, costed, id_list, message_list, session_fields

if TYPE_CHECKING:
    from harombe_core.config import MemoryConfig

__all__ = ["MemoryManager", "open_store"]

log = logging.getLogger(__name__)

#: Longest wait flush() accepts, in seconds (a day; the clock cannot represent much more).
MAX_WAIT_SECONDS = 86_400.0
T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


def open_store(
    storage_path: str | os.PathLike[str] | MessageStore, *, encryption_key: str | None = None
) -> MessageStore:
    """A store for a path (SQLite), a ``postgresql://`` URL, or an existing store object.

    Each SQLite store returned is this opener's own (closing it closes only it), but every store
    on one file in this process shares the file's connections, which close with the last of
    them (:mod:`harombe_core.store.sqlite_file`). ``encryption_key`` (else ``HAROMBE_DB_KEY``)
    encrypts a SQLite file with SQLCipher; every opener of one file must pass the same key.
    """
    from harombe_core.store.encryption import check_key

    check_key(encryption_key)  # an empty key is refused wherever the store lives
    if isinstance(storage_path, MessageStore):
        return storage_path
    location = check_location(storage_path)
    if location.startswith(("postgresql://", "postgres://")):
        from harombe_core.store.postgres import PostgresStore

        return PostgresStore(location)
    from harombe_core.store.sqlite import SQLiteStore

    return SQLiteStore(location, encryption_key=encryption_key)


def _on(part: str, template: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """The manager's method running ``template`` on its composed ``part`` (same signature)."""
    return forwarded(template, part, owner="MemoryManager")


class MemoryManager(UserMemoryMethods, ClosesOnExit):
    """Sessions, messages, token windows and (with semantic memory) search, over one store.

    ``storage_path`` is a SQLite file (``~`` expanded; ``":memory:"`` for a throwaway store) or a
    ``postgresql://`` URL. ``embedding`` and ``vector_store`` choose semantic memory: the default
    is the bundled all-MiniLM-L6-v2 model with its vectors inside the database (``"database"``;
    ``"chroma"`` adds ChromaDB); pass ``None`` for either to keep only the store and its keywords.

    It composes the store, a :class:`~harombe_core.manager_search.Searcher` (search), a
    :class:`~harombe_core.context.ContextBuilder` and user memory (``user_memory=``: facts).
    """

    def __init__(
        self,
        storage_path: str | os.PathLike[str] | MessageStore = ":memory:",
        *,
        max_history_tokens: int = 4096,
        embedding: Any = "default",
        vector_store: Any = "database",
        token_counter: Any = "exact",
        config: MemoryConfig | None = None,
        encryption_key: str | None = None,
        user_memory: bool | None = None,
        fact_extractor: Any = None,
    ) -> None:
        budget = check_budget(max_history_tokens, "max_history_tokens")
        counter: TokenCounter = resolve_token_counter(token_counter)
        if config is not None:
            check_config(config)
            vector_store = config.vector_store.chosen(vector_store)
        if encryption_key is not None:
            check_key(encryption_key)  # refused before anything is created
        semantic = embedding is not None and vector_store is not None
        if semantic:
            # A missing extra is reported before the database is created, not after.
            from harombe_core.vectors.choice import check_semantic_parts

            check_semantic_parts(embedding, vector_store, storage_path, config, encryption_key)
        self._store = open_store(storage_path, encryption_key=encryption_key)
        self._closed = False
        memory: Any = None
        if semantic:
            try:  # shared with every other manager or adapter on this database in this process
                from harombe_core.vectors.shared import acquire_semantic

                memory = acquire_semantic(
                    self._store, embedding=embedding, vector_store=vector_store, config=config
                )
            except BaseException:
                self._store.close()
                raise
        self._searcher = Searcher(self._store, memory, config)
        self._context = ContextBuilder(
            self._store, self._searcher, max_history_tokens=budget, token_counter=counter
        )
        self._facts = self._user_memory(config, user_memory, fact_extractor)

    # construction -------------------------------------------------------------------------
    @classmethod
    def from_config(cls, source: Any) -> MemoryManager:
        """Build from a YAML path or mapping (see :mod:`harombe_core.config`).

        ``memory.auto_prune_days`` prunes inactive sessions as the store opens.
        """
        from harombe_core.config import load_config

        config = load_config(source)
        semantic = config.memory.enabled and config.vector_store.enabled
        manager = cls(
            config.memory.storage_path,
            max_history_tokens=config.memory.max_history_tokens,
            embedding=config.vector_store.embedding_model if semantic else None,
            vector_store=config.vector_store.provider if semantic else None,
            token_counter=config.memory.token_counter,
            config=config,
            encryption_key=config.memory.encryption_key,
        )
        if config.memory.auto_prune_days:
            pruned = manager.prune_old_sessions(config.memory.auto_prune_days)
            if pruned:
                days = config.memory.auto_prune_days
                log.info("pruned %d sessions older than %d days", pruned, days)
        return manager

    @property
    def store(self) -> MessageStore:
        """The underlying store (the source of truth)."""
        return self._store

    @property
    def _semantic(self) -> Any:
        """The store's semantic memory (None when off), held by the search side."""
        return self._searcher.semantic

    config = part_property("_searcher", Searcher.config)
    embedder = part_property("_searcher", Searcher.embedder)
    vector_store = part_property("_searcher", Searcher.vector_store)
    retriever = part_property("_searcher", Searcher.retriever)
    summarizer = part_property("_context", ContextBuilder.summarizer)
    summary_chunk = part_property("_context", ContextBuilder.summary_chunk)
    max_history_tokens: int = part_property(
        "_context", "max_history_tokens", doc="The default token budget.", settable=True
    )
    token_counter: TokenCounter = part_property(
        "_context", "token_counter", doc="What counts tokens (a TokenCounter).", settable=True
    )

    @property
    def semantic_enabled(self) -> bool:
        """True when messages are embedded and searchable by meaning."""
        return self._semantic is not None

    def __repr__(self) -> str:
        """Where the memory lives and whether it searches by meaning; no I/O, so it is safe
        on a closed manager and costs nothing on a large store."""
        semantic = self._semantic
        parts = [repr(self._store.location)]
        if semantic is None:
            parts.append("semantic=off")
        else:
            parts += [
                "semantic=on",
                f"embedding={semantic.embedder.name!r}",
                f"vector_store={semantic.index_name!r}",
            ]
        parts.append(f"max_history_tokens={self.max_history_tokens}")
        if self._closed:
            parts.append("closed")
        return f"MemoryManager({', '.join(parts)})"

    # sessions -----------------------------------------------------------------------------
    # Each operation is one flow (harombe_core.flows): its store calls are requests, so the
    # sync method runs them in place and the async one uses the store's own async methods
    # where it has them (Postgres) and a worker thread otherwise. Written once, they agree.
    def _call(self, name: str, *args: Any, **kwargs: Any) -> Call[Any]:
        """The store's method ``name`` as a request (its native ``a``-method when async)."""
        return Call.method(self._store, name, *args, **kwargs)

    def _create_session(
        self,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        user_id: str | None = None,
        *,
        session_id: str | None = None,
    ) -> Flow[str]:
        """Create a session and return its id (a new UUID unless ``session_id`` is given).

        Raises InvalidInputError for a malformed id, metadata or an id already in use.
        """
        sid = optional_id(session_id, "session_id") or uuid.uuid4().hex
        optional_id(user_id, "user_id")
        session_fields(system_prompt, metadata)
        tokens = self._system_prompt_tokens(system_prompt)
        yield self._call(
            "create_session",
            sid,
            user_id=user_id,
            system_prompt=system_prompt,
            system_prompt_tokens=tokens,
            metadata=metadata,
        )
        return sid

    create_session, acreate_session = twins(_create_session)

    def _system_prompt_tokens(self, system_prompt: str | None) -> int:
        if system_prompt is None:
            return 0
        return self.token_counter.count_message(Message(role="system", content=system_prompt))

    def _system_prompt(self, session: Session) -> Flow[list[Message]]:
        """The message that leads the session's history (none without a system prompt)."""
        if session.system_prompt is None:
            return []
        system: list[Message] = yield Work(self._context.system_prompt_message, session)
        return system

    def _get_session(self, session_id: str, *, user_id: str | None = None) -> Flow[Session | None]:
        """The session's record (owner, system prompt, metadata, counts, summary), or None for
        an unknown session. Raises SessionOwnershipError if ``user_id`` is given and does not
        own it."""
        return (yield from self._check_owner(session_id, user_id))

    get_session, aget_session = twins(_get_session)

    def _load_session(self, session_id: str, *, user_id: str | None = None) -> Flow[list[Message]]:
        """The session's conversation history: its system prompt first (when it has one), then
        every message in order. An unknown session has no history: ``[]``.

        For the newest messages that fit a token budget, use :meth:`get_recent_messages`.
        Raises SessionOwnershipError if ``user_id`` is given and does not own the session.
        """
        session = yield from self._check_owner(session_id, user_id)
        if session is None:
            return []
        system = yield from self._system_prompt(session)
        messages: list[Message] = yield self._call("get_messages", session_id)
        return system + messages

    load_session, aload_session = twins(_load_session)

    def session_exists(self, session_id: str) -> bool:
        """True if a session with this id is stored."""
        return self._store.get_session(check_id(session_id, "session_id")) is not None

    def _check_owner(
        self, session_id: str, user_id: str | None, *, exact: bool = False
    ) -> Flow[Session | None]:
        """The session (None if it does not exist yet), if ``user_id`` may use it.

        A session belongs to the user it was created for. ``user_id=None`` (the application
        itself) may use any session; a named user only their own, so a session owned by
        another user or by none raises SessionOwnershipError (see :mod:`harombe_core.owners`).
        Every method that takes ``user_id`` next to a session id checks it this way, and
        writes check it again inside their transaction. With ``exact=True`` the owner must be
        ``user_id`` itself, so ``None`` reaches only sessions without an owner: what an adapter
        acting for nobody may use.
        """
        return (yield from owned_session(self._store, session_id, user_id, exact=exact))

    check_owner, acheck_owner = twins(_check_owner)

    def conversation_session_id(self, user_id: str, conversation_id: str) -> str:
        """The session id of ``user_id``'s conversation ``conversation_id``.

        Distinct pairs never share an id (:func:`~harombe_core.owners.session_key`). A history
        that earlier versions stored under the plain ``"{user}:{conversation}"`` id (different
        only for ids containing ``:`` or ``%``) is found and continued when that session
        belongs to ``user_id``; nothing needs migrating.
        """
        key = session_key(user_id, conversation_id)
        legacy = legacy_session_key(user_id, conversation_id)
        if legacy != key and self._store.get_session(key) is None:
            old = self._store.get_session(legacy)
            if old is not None and old.user_id == user_id:
                return legacy
        return key

    def _update_session(
        self,
        session_id: str,
        *,
        system_prompt: Any = UNSET,
        metadata: Any = UNSET,
        user_id: Any = UNSET,
    ) -> Flow[None]:
        """Change a session's system prompt, metadata or owner (unset arguments are kept).

        Like every write, it creates an unknown session (with these values), in one
        transaction with the check.
        """
        check_id(session_id, "session_id")
        session_fields(
            None if system_prompt is UNSET else system_prompt,
            None if metadata is UNSET else metadata,
        )
        if user_id is not UNSET:
            optional_id(user_id, "user_id")
        tokens: Any = UNSET
        if system_prompt is not UNSET:
            tokens = self._system_prompt_tokens(system_prompt)

        def apply() -> None:
            if self._store.get_session(session_id) is None:
                owner = None if user_id is UNSET else user_id
                self._store.create_session(session_id, user_id=owner)
            self._store.update_session(
                session_id,
                system_prompt=system_prompt,
                system_prompt_tokens=tokens,
                metadata=metadata,
                user_id=user_id,
            )

        yield Work(self._store.atomic, apply)
        if user_id is not UNSET and self._semantic is not None:
            # file its vectors under the new owner
            yield Work(self._semantic.session_moved, session_id, user_id)

    update_session, aupdate_session = twins(_update_session)

    def _list_sessions(
        self, limit: int | None = 10, user_id: str | None = None
    ) -> Flow[list[Session]]:
        """Sessions with the most recent activity first."""
        limit = optional_count(limit, "limit")
        user_id = optional_id(user_id, "user_id")
        sessions: list[Session] = yield self._call("list_sessions", limit=limit, user_id=user_id)
        return sessions

    list_sessions, alist_sessions = twins(_list_sessions)

    def _drop(self, delete: Callable[[str], T], session_id: str, user_id: str | None) -> Flow[T]:
        """Delete a session's rows with the store's ``delete``, and the vectors of what went."""
        yield from named_owner(self._store, session_id, user_id)
        sid = check_id(session_id, "session_id")
        return (yield Work(erase, self._semantic, lambda: delete(sid), lambda g: [sid] * bool(g)))

    def _delete_session(self, session_id: str, *, user_id: str | None = None) -> Flow[bool]:
        """Delete a session and all its messages (and their vectors). True if it existed.
        Once it returns no search finds them; once the store is closed no byte of them is left
        in its files (docs/deletion.md). With ``user_id``, only that user's session."""
        return bool((yield from self._drop(self._store.delete_session, session_id, user_id)))

    delete_session, adelete_session = twins(_delete_session)

    def _clear_session(self, session_id: str, *, user_id: str | None = None) -> Flow[int]:
        """Delete a session's messages but keep the session; returns how many were removed.
        With ``user_id``, only that user's session (else SessionOwnershipError)."""
        return int((yield from self._drop(self._store.clear_session, session_id, user_id)))

    clear_session, aclear_session = twins(_clear_session)

    def _prune_old_sessions(self, days: float) -> Flow[int]:
        """Delete sessions with no activity in the last ``days`` days; returns how many."""
        cutoff, store = prune_cutoff(days), self._store
        gone = yield Work(erase, self._semantic, lambda: store.delete_sessions_before(cutoff), list)
        return len(gone)

    prune_old_sessions, aprune_old_sessions = twins(_prune_old_sessions)

    def _forget_user(self, user_id: str) -> Flow[int]:
        """Delete everything of ``user_id`` (GDPR erasure) in one transaction, erased as
        :meth:`delete_session` erases: sessions, messages, vectors, keywords, summaries,
        checkpoints, facts (not LangGraph store items: no user owns them). Returns sessions."""
        uid, store = check_id(user_id, "user_id"), self._store
        gone = yield Work(erase, self._semantic, lambda: delete_user_sessions(store, uid), list)
        return len(gone)

    forget_user, aforget_user = twins(_forget_user)

    # messages -----------------------------------------------------------------------------
    def _write(
        self,
        session_id: str,
        delete_ids: Sequence[int],
        messages: Iterable[Message | Mapping[str, Any]],
        user_id: str | None,
        what: str,
    ) -> Flow[list[int]]:
        """Delete ``delete_ids`` and append ``messages`` in one transaction of the store."""
        check_id(session_id, "session_id")
        optional_id(user_id, "user_id")
        doomed = id_list(delete_ids, "delete_ids")
        prepared = yield from costed(messages, what, self.token_counter)
        if not prepared and not doomed:
            return []
        extra = {"replace_ids": doomed} if doomed else {}
        ids: list[int] = yield self._call(
            "add_messages", session_id, prepared, user_id=user_id, **extra
        )
        if doomed and self._semantic is not None:
            yield Work(self._semantic.forget_messages, doomed)
        if self._semantic is not None and prepared:
            self._semantic.notify()  # wakes the background embedder: never blocks
        self._facts.notify(session_id)  # wakes the background fact extractor (if on)
        return ids

    def _save_message(
        self, session_id: str, message: Message | Mapping[str, Any], *, user_id: str | None = None
    ) -> Flow[int]:
        """Store one message and return its id; an unknown session id is created.

        Returns as soon as the row is committed; embedding happens in the background (see
        :meth:`flush`). Raises InvalidMessageError for a message that cannot be stored, and
        SessionOwnershipError if ``user_id`` is given and the session is not that user's (a
        new session is created for ``user_id``).
        """
        ids = yield from self._save_messages(session_id, [message], user_id=user_id)
        return ids[0]

    save_message, asave_message = twins(_save_message)

    def _save_messages(
        self,
        session_id: str,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        user_id: str | None = None,
    ) -> Flow[list[int]]:
        """Store many messages in one transaction (all or none); returns their ids in order."""
        return (yield from self._write(session_id, (), messages, user_id, "save_messages"))

    save_messages, asave_messages = twins(_save_messages)

    def _replace_messages(
        self,
        session_id: str,
        delete_ids: Sequence[int],
        messages: Iterable[Message | Mapping[str, Any]] = (),
        *,
        user_id: str | None = None,
    ) -> Flow[list[int]]:
        """Delete ``delete_ids`` of a session and append ``messages``, in one transaction.

        What a framework's "set the history" or "delete message i" needs without ever leaving
        half a history; returns the new messages' ids. Ids of other sessions are ignored.
        """
        return (
            yield from self._write(session_id, delete_ids, messages, user_id, "replace_messages")
        )

    replace_messages, areplace_messages = twins(_replace_messages)

    def _get_messages(
        self,
        session_id: str,
        *,
        limit: int | None = None,
        after_id: int | None = None,
        user_id: str | None = None,
    ) -> Flow[list[Message]]:
        """Every message of a session in order (or ``limit`` of them after ``after_id``).

        With ``user_id``, only that user's session (else SessionOwnershipError)."""
        limit = optional_count(limit, "limit")
        after_id = optional_count(after_id, "after_id")
        yield from named_owner(self._store, session_id, user_id)
        messages: list[Message] = yield self._call(
            "get_messages", check_id(session_id, "session_id"), after_id=after_id, limit=limit
        )
        return messages

    get_messages, aget_messages = twins(_get_messages)

    def _count_messages(
        self,
        session_id: str,
        *,
        after_id: int | None = None,
        unless_metadata: Mapping[str, str] | None = None,
        user_id: str | None = None,
    ) -> Flow[int]:
        """How many messages the session holds (0 for an unknown session), by one SQL ``COUNT``
        over its own index range (:func:`~harombe_core.store.ops.count_session_messages`):
        ``after_id`` counts only newer ones, ``unless_metadata`` leaves out those whose
        metadata holds any of these key -> string pairs. With ``user_id``, only that user's
        session (else SessionOwnershipError)."""
        op = ops.count_session_messages(session_id, after_id, unless_metadata)
        if (yield from self._check_owner(session_id, user_id)) is None:
            return 0
        count: int = yield Call(self._store.run, op, native=self._store.arun)
        return count

    count_messages, acount_messages = twins(_count_messages)

    def _get_window(
        self,
        session_id: str,
        max_tokens: int | None = None,
        *,
        include_system: bool = True,
        start_on_user: bool = False,
        user_id: str | None = None,
    ) -> Flow[Window]:
        """Like :meth:`get_recent_messages`, with the token total the window costs."""
        budget = self.max_history_tokens if max_tokens is None else check_budget(max_tokens)
        check_flag(include_system, "include_system")
        check_flag(start_on_user, "start_on_user")
        session = yield from self._check_owner(session_id, user_id)
        if session is None:
            return Window(messages=[], tokens=0)
        system = (yield from self._system_prompt(session)) if include_system else []
        # The prompt is kept even when it alone exceeds the budget (``tokens`` then says so):
        # a window without its instructions would mislead the model more than an overrun.
        reserved = sum(m.token_count or 0 for m in system)
        # The newest rows are read page by page until the budget is spent (the store's async
        # pages on PostgreSQL), then the window is cut from them.
        spend = budget - reserved
        pages = getattr(self._store, "aiter_newest", None)
        newest: list[Message] = yield Call(
            lambda: newest_until(self._store.iter_newest(session_id), spend),
            native=(lambda: anewest_until(pages(session_id), spend))
            if inspect.isasyncgenfunction(pages)
            else None,
        )
        window = window_newest(
            newest, budget, reserved_tokens=reserved, start_on_user=start_on_user
        )
        return Window(messages=system + window.messages, tokens=window.tokens)

    get_window, aget_window = twins(_get_window)

    get_recent_messages, aget_recent_messages = twins(
        converted(
            _get_window,
            lambda window: window.messages,
            list[Message],
            name="_get_recent_messages",
            doc="""The newest messages that fit ``max_tokens`` (default ``max_history_tokens``).

            Oldest first; the session's system prompt leads and is counted. Reads only the rows it
            returns (plus one), whatever the session's length. With ``user_id``, only that user's
            session (else SessionOwnershipError).
            """,
        )
    )

    def count_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens these messages cost under this manager's counter (overhead included)."""
        batch = message_list(messages, "count_tokens")
        return self.token_counter.count_messages([as_message(m) for m in batch])

    def atomic(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` so that every write it makes through this manager commits together, or
        none does (if it raises, or the process dies): one transaction of the store.

        ``fn`` may run more than once (a transaction retried after a dropped connection), so it
        must only read and write this manager's store; on PostgreSQL its result must be
        JSON-serialisable. New messages are embedded in the background once it has committed;
        sessions deleted inside lose their vectors at once, even if the block then rolls back
        (``harombe reindex`` restores them). Async methods called inside do not join it.
        """
        if not callable(fn):
            raise InvalidInputError(f"atomic takes a function to run, got {type(fn).__name__}.")
        result = self._store.atomic(fn)
        if self._semantic is not None:
            self._semantic.notify()
        return result

    # the search side (Searcher) and the context side (ContextBuilder) ---------------------
    search, asearch = twins(_on("_searcher", Searcher.search_flow))
    search_similar, asearch_similar = twins(_on("_searcher", Searcher.search_similar_flow))
    search_by_topic, asearch_by_topic = twins(_on("_searcher", Searcher.search_by_topic_flow))
    get_relevant_context, aget_relevant_context = twins(
        _on("_searcher", Searcher.get_relevant_context_flow)
    )
    format_context = staticmethod(Searcher.format_context)
    backfill_embeddings, abackfill_embeddings = twins(
        _on("_searcher", Searcher.backfill_embeddings_flow)
    )
    reindex, areindex = twins(_on("_searcher", Searcher.reindex_flow))

    # Each async twin runs its sync method (a subclass's override too) in a worker thread.
    get_context = _on("_context", ContextBuilder.get_context)
    aget_context = in_thread(get_context)
    summarize_session = _on("_context", ContextBuilder.summarize_session)
    asummarize_session = in_thread(summarize_session)
    end_session = _on("_context", ContextBuilder.end_session)
    aend_session = in_thread(end_session)
    search_summaries = _on("_context", ContextBuilder.search_summaries)
    asearch_summaries = in_thread(search_summaries)

    # semantic memory lifecycle ------------------------------------------------------------
    def notify_written(self, *, deleted_sessions: Iterable[str] = ()) -> None:
        """Keep semantic memory in step with rows written outside this manager's own methods.

        For code that writes messages through the store's runner in its own transaction (the
        LangGraph checkpointer records a thread's messages with its checkpoint): wakes the
        background embedder and drops the vectors of ``deleted_sessions``. Returns at once.
        """
        named = [
            check_id(sid, "deleted_sessions item")
            for sid in check_list(deleted_sessions, "deleted_sessions", of="session ids")
        ]
        if self._semantic is None:
            return
        # Only sessions that are really gone: a live session's vectors are never dropped here.
        deleted = [sid for sid in named if self._store.get_session(sid) is None]
        if deleted:
            self._semantic.forget_sessions(deleted)
        self._semantic.notify()

    def _flush(self, timeout: float | None = None, *, progress: Progress = None) -> Flow[None]:
        """Block until every saved message is in the keyword index and (with semantic memory)
        embedded, and summary backlogs are folded (all in the background), so searches and
        summaries then repeat exactly. ``progress``: ``None`` shows a bar on stderr when it is a
        terminal and the backlog is large, ``True`` always, ``False`` never; a callable
        ``progress(done, total)`` is called as batches complete. Raises EmbeddingError if the
        model fails or ``timeout`` (seconds) passes first."""
        check_progress(progress)
        timeout = optional_number(timeout, "timeout", low=0, high=MAX_WAIT_SECONDS)
        if self._semantic is not None:
            yield Work(self._semantic.flush, timeout, progress=progress)
        yield Work(self._context.flush_summaries, timeout)
        keywords = getattr(self._store, "index_keywords", None)  # SQLite indexes in background
        if keywords is not None:
            yield Work(keywords)
        yield from self._flush_facts()

    flush, aflush = twins(_flush)

    def _stats(self) -> Flow[dict[str, Any]]:
        """Counts of sessions, users, messages, tokens and pending embeddings, and file size."""
        stats: dict[str, Any] = yield self._call("stats")
        return stats

    stats, astats = twins(_stats)

    def _close(self) -> Flow[None]:
        """Give back this manager's share of semantic memory, then close the store.

        The last manager (or adapter) on a database in this process stops the background
        indexer and closes the vector index first; messages still waiting to be embedded are
        not embedded now (they are committed: the next open embeds them; call :meth:`flush`
        first to have them searchable before closing). Safe to call twice.
        """
        if not self._closed:
            yield Work(self._release)

    close, aclose = twins(_close)

    def _release(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._facts.close()
        self._context.close()  # the background folder stops before the store closes
        semantic, self._searcher.semantic = self._searcher.semantic, None
        close_store = True
        try:
            if semantic is not None:
                from harombe_core.vectors.shared import release_semantic

                close_store = release_semantic(semantic, self._store)
        finally:
            if close_store:
                self._store.close()

    async def __aenter__(self) -> MemoryManager:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
