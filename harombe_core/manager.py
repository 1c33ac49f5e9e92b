"""MemoryManager: the façade an application (or an adapter) talks to.

It owns one store and, when semantic memory is on, the embedder, vector index and background
indexer derived from it. Every I/O method has an ``a``-prefixed async twin, written out beside
it; both drive one flow (:mod:`harombe_core.flows`), so they check and do the same things. The
async twin runs each of the store's operations, and any other blocking work (models), in a
worker thread, so the event loop is never blocked.
"""

from __future__ import annotations

import functools
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from harombe_core.context import ContextBuilder
from harombe_core.context_reads import (
    named_owner,
    newest_messages,
    newest_until,
    owned_session,
    owned_session_and_prompt,
    read_newest,
)
from harombe_core.erasing import (
    DeletionEraser,
    Erasure,
    delete_user_sessions,
    erase,
    erase_deleted,
    prune_cutoff,
)
from harombe_core.errors import InvalidInputError
from harombe_core.flows import Flow, Run, Work, adrive, drive
from harombe_core.manager_facts import UserMemoryMethods
from harombe_core.manager_search import Searcher
from harombe_core.models import Message, SearchHit, Session
from harombe_core.owners import legacy_session_key, session_key
from harombe_core.progress import Progress, check_progress
from harombe_core.store import ops
from harombe_core.store.base import UNSET, ClosesOnExit, MessageStore
from harombe_core.store.encryption import check_key
from harombe_core.store.pending import settle
from harombe_core.store.rederive import Rederived, start_jobs
from harombe_core.strategies import Window, window_newest
from harombe_core.tokens import TokenCounter, resolve_token_counter
from harombe_core.validate import (
    check_budget,
    check_config,
    check_count,
    check_flag,
    check_id,
    check_list,
    check_location,
    keywords_checked,
    optional_count,
    optional_id,
    optional_number,
    optional_time,
)
from harombe_core.write_inputs import as_message, costed, id_list, message_list, session_fields

if TYPE_CHECKING:
    from harombe_core.config import MemoryConfig
    from harombe_core.retrieval import Retriever
    from harombe_core.store.runner import Op

__all__ = ["MemoryManager", "open_store"]

log = logging.getLogger(__name__)

#: Longest wait flush() accepts, in seconds (a day; the clock cannot represent much more).
MAX_WAIT_SECONDS = 86_400.0
T = TypeVar("T")


def _nothing() -> None:
    """What stops watching for erasures when nothing watches."""


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


class MemoryManager(UserMemoryMethods, ClosesOnExit):
    """Sessions, messages, token windows and (with semantic memory) search, over one store.

    ``storage_path`` is a SQLite file (``~`` expanded; ``":memory:"`` for a throwaway store) or a
    ``postgresql://`` URL. ``embedding`` and ``vector_store`` choose semantic memory: the default
    is the bundled all-MiniLM-L6-v2 model with its vectors inside the database (``"database"``;
    ``"chroma"`` adds ChromaDB); pass ``None`` for either to keep only the store and its keywords.

    It composes the store, a :class:`~harombe_core.manager_search.Searcher` (search), a
    :class:`~harombe_core.context.ContextBuilder` and user memory (``user_memory=``: facts).
    """

    @keywords_checked
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
        self._eraser: DeletionEraser | None = None
        self._unwatch: Callable[[], None] = _nothing
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
        self._eraser = self._deletion_eraser()
        # What a killed process left owed to the database (a checkpointed turn's session) is
        # derived before this manager's first read (harombe_core.store.rederive).
        self._owed = Rederived()
        try:
            self._owed = start_jobs(self)
        except BaseException:
            self.close()
            raise

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

    def _deletion_eraser(self) -> DeletionEraser | None:
        """What erases deleted text from the files while this manager stays open, once
        deletions pause (``memory.erase_after_seconds``); None where nothing is on disk to
        erase that way (a private in-memory store, PostgreSQL) or when it is turned off."""
        idle = self.config.memory.erase_after_seconds
        file = getattr(self._store, "file", None)  # (a SQLite file's; PostgreSQL has none)
        if idle is None or file is None or getattr(self._store, "erase_deleted", None) is None:
            return None
        if self._store.location == ":memory:":
            return None
        store, searcher = self._store, self._searcher
        eraser = DeletionEraser(
            lambda: erase_deleted(store, searcher.semantic),
            idle,
            recorded=getattr(store, "erasure_debt", None),
        )
        # Armed by the deletion's own commit, whichever code made it (this manager, an
        # adapter's SQL, a trigger): every write that records an erasure owed calls it.
        self._unwatch = file.on_erasure_owed(eraser.deleted)
        return eraser

    @property
    def store(self) -> MessageStore:
        """The underlying store (the source of truth)."""
        return self._store

    @property
    def _semantic(self) -> Any:
        """The store's semantic memory (None when off), held by the search side."""
        return self._searcher.semantic

    # The parts' settings, read (and set) where they live, so both always agree.
    @property
    def config(self) -> MemoryConfig:
        """The configuration in force (defaults if none was given)."""
        return self._searcher.config

    @property
    def embedder(self) -> Any:
        """The embedder of semantic memory (an ``Embedder``), or None when it is off."""
        return self._searcher.embedder

    @property
    def vector_store(self) -> str | None:
        """The vector store semantic search uses, as named: ``"database"`` (the default: the
        vectors inside the database), ``"chroma"``, ``"pgvector"``, ``"custom"`` (an index
        object); None when semantic memory is off."""
        return self._searcher.vector_store

    @property
    def retriever(self) -> Retriever:
        """The hybrid retriever over this store; keyword-only when semantic memory is off."""
        return self._searcher.retriever

    @property
    def summarizer(self) -> Any:
        """What summarises sessions: extractive (no model) unless set to a Summarizer or an LLM."""
        return self._context.summarizer

    @summarizer.setter
    def summarizer(self, value: Any) -> None:
        self._context.summarizer = value

    @property
    def summary_chunk(self) -> int:
        """At most this many messages are summarised per step (``memory.summary_chunk``).

        How a backlog is folded: :attr:`harombe_core.context.ContextBuilder.summary_chunk`.
        """
        return self._context.summary_chunk

    @summary_chunk.setter
    def summary_chunk(self, value: int) -> None:
        self._context.summary_chunk = value

    @property
    def max_history_tokens(self) -> int:
        """The default token budget."""
        return self._context.max_history_tokens

    @max_history_tokens.setter
    def max_history_tokens(self, value: int) -> None:
        self._context.max_history_tokens = value

    @property
    def token_counter(self) -> TokenCounter:
        """What counts tokens (a TokenCounter)."""
        return self._context.token_counter

    @token_counter.setter
    def token_counter(self, value: TokenCounter) -> None:
        self._context.token_counter = value

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
    # Each operation is one flow (harombe_core.flows) whose store work is requests (a store
    # operation is a Run: the store's own async runner on PostgreSQL, a worker thread on
    # SQLite); its sync method drives it in place, its a-twin on the event loop. Written
    # once, the two agree; written out, an editor follows both.
    def create_session(
        self,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        user_id: str | None = None,
        *,
        session_id: str | None = None,
        created_at: datetime | str | None = None,
    ) -> str:
        """Create a session and return its id (a new UUID unless ``session_id`` is given).

        ``created_at`` (default now; a datetime or ISO 8601 string, naive taken as UTC) dates a
        session of past history, as an import of old conversations has: its last activity is
        then its newest message, so ``list_sessions`` and pruning order it by when it happened
        rather than by when it was imported.

        Raises InvalidInputError for a malformed id, metadata, time or an id already in use.
        """
        return drive(self._create_session(system_prompt, metadata, user_id, session_id, created_at))

    async def acreate_session(
        self,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        user_id: str | None = None,
        *,
        session_id: str | None = None,
        created_at: datetime | str | None = None,
    ) -> str:
        """Create a session and return its id (async twin of :meth:`create_session`)."""
        return await adrive(
            self._create_session(system_prompt, metadata, user_id, session_id, created_at)
        )

    def _create_session(
        self,
        system_prompt: str | None,
        metadata: Mapping[str, Any] | None,
        user_id: str | None,
        session_id: str | None,
        created_at: datetime | str | None = None,
    ) -> Flow[str]:
        sid = optional_id(session_id, "session_id") or uuid.uuid4().hex
        optional_id(user_id, "user_id")
        session_fields(system_prompt, metadata)
        when = optional_time(created_at, "created_at")
        tokens = self._system_prompt_tokens(system_prompt)
        yield Run(
            self._store,
            ops.create_session(
                sid,
                user_id=user_id,
                system_prompt=system_prompt,
                system_prompt_tokens=tokens,
                metadata=metadata,
                created_at=when,
            ),
        )
        return sid

    def _system_prompt_tokens(self, system_prompt: str | None) -> int:
        if system_prompt is None:
            return 0
        return self.token_counter.count_message(Message(role="system", content=system_prompt))

    def get_session(self, session_id: str, *, user_id: str | None = None) -> Session | None:
        """The session's record (owner, system prompt, metadata, counts, summary), or None for
        an unknown session. Raises SessionOwnershipError if ``user_id`` is given and does not
        own it."""
        return drive(owned_session(self._store, session_id, user_id))

    async def aget_session(self, session_id: str, *, user_id: str | None = None) -> Session | None:
        """The session's record, or None (async twin of :meth:`get_session`)."""
        return await adrive(owned_session(self._store, session_id, user_id))

    def load_session(self, session_id: str, *, user_id: str | None = None) -> list[Message]:
        """The session's conversation history: its system prompt first (when it has one), then
        every message in order. An unknown session has no history: ``[]``.

        For the newest messages that fit a token budget, use :meth:`get_recent_messages`.
        Raises SessionOwnershipError if ``user_id`` is given and does not own the session.
        """
        return drive(self._load_session(session_id, user_id))

    async def aload_session(self, session_id: str, *, user_id: str | None = None) -> list[Message]:
        """The session's history (async twin of :meth:`load_session`)."""
        return await adrive(self._load_session(session_id, user_id))

    def _load_session(self, session_id: str, user_id: str | None) -> Flow[list[Message]]:
        found = yield from owned_session_and_prompt(self._store, session_id, user_id)
        if found is None:
            return []
        messages: list[Message] = yield Run(self._store, ops.get_messages(session_id))
        return found[1] + messages

    def session_exists(self, session_id: str) -> bool:
        """True if a session with this id is stored."""
        return self._store.run(ops.get_session(check_id(session_id, "session_id"))) is not None

    def check_owner(
        self, session_id: str, user_id: str | None, *, exact: bool = False
    ) -> Session | None:
        """The session (None if it does not exist yet), if ``user_id`` may use it.

        A session belongs to the user it was created for. ``user_id=None`` (the application
        itself) may use any session; a named user only their own, so a session owned by
        another user or by none raises SessionOwnershipError (see :mod:`harombe_core.owners`).
        Every method that takes ``user_id`` next to a session id checks it this way, and
        writes check it again inside their transaction. With ``exact=True`` the owner must be
        ``user_id`` itself, so ``None`` reaches only sessions without an owner: what an adapter
        acting for nobody may use.
        """
        return drive(owned_session(self._store, session_id, user_id, exact=exact))

    async def acheck_owner(
        self, session_id: str, user_id: str | None, *, exact: bool = False
    ) -> Session | None:
        """The session, if ``user_id`` may use it (async twin of :meth:`check_owner`)."""
        return await adrive(owned_session(self._store, session_id, user_id, exact=exact))

    def conversation_session_id(self, user_id: str, conversation_id: str) -> str:
        """The session id of ``user_id``'s conversation ``conversation_id``.

        Distinct pairs never share an id (:func:`~harombe_core.owners.session_key`). A history
        that earlier versions stored under the plain ``"{user}:{conversation}"`` id (different
        only for ids containing ``:`` or ``%``) is found and continued when that session
        belongs to ``user_id``; nothing needs migrating.
        """
        key = session_key(user_id, conversation_id)
        legacy = legacy_session_key(user_id, conversation_id)
        if legacy != key and self._store.run(ops.get_session(key)) is None:
            old = self._store.run(ops.get_session(legacy))
            if old is not None and old.user_id == user_id:
                return legacy
        return key

    def update_session(
        self,
        session_id: str,
        *,
        system_prompt: Any = UNSET,
        metadata: Any = UNSET,
        user_id: Any = UNSET,
    ) -> None:
        """Change a session's system prompt, metadata or owner (unset arguments are kept).

        Like every write, it creates an unknown session (with these values), in one
        transaction with the check.
        """
        drive(self._update_session(session_id, system_prompt, metadata, user_id))

    async def aupdate_session(
        self,
        session_id: str,
        *,
        system_prompt: Any = UNSET,
        metadata: Any = UNSET,
        user_id: Any = UNSET,
    ) -> None:
        """Change a session's fields (async twin of :meth:`update_session`)."""
        await adrive(self._update_session(session_id, system_prompt, metadata, user_id))

    def _update_session(
        self, session_id: str, system_prompt: Any, metadata: Any, user_id: Any
    ) -> Flow[None]:
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
            if self._store.run(ops.get_session(session_id)) is None:
                owner = None if user_id is UNSET else user_id
                self._store.run(ops.create_session(session_id, user_id=owner))
            self._store.run(
                ops.update_session(
                    session_id,
                    system_prompt=system_prompt,
                    system_prompt_tokens=tokens,
                    metadata=metadata,
                    user_id=user_id,
                )
            )

        yield Work(self._store.atomic, apply)
        if user_id is not UNSET and self._semantic is not None:
            # file its vectors under the new owner
            yield Work(self._semantic.session_moved, session_id, user_id)

    def list_sessions(self, limit: int | None = 10, user_id: str | None = None) -> list[Session]:
        """Sessions with the most recent activity first."""
        return drive(self._list_sessions(limit, user_id))

    async def alist_sessions(
        self, limit: int | None = 10, user_id: str | None = None
    ) -> list[Session]:
        """Sessions, most recent activity first (async twin of :meth:`list_sessions`)."""
        return await adrive(self._list_sessions(limit, user_id))

    def _list_sessions(self, limit: int | None, user_id: str | None) -> Flow[list[Session]]:
        limit = optional_count(limit, "limit")
        user_id = optional_id(user_id, "user_id")
        sessions: list[Session] = yield Run(self._store, ops.list_sessions(limit, user_id, 0))
        return sessions

    def _drop(
        self, delete: Callable[[str], Op[T]], session_id: str, user_id: str | None
    ) -> Flow[T]:
        """Delete a session's rows with the operation ``delete(session_id)``, and the vectors
        of what went."""
        yield from named_owner(self._store, session_id, user_id)
        sid = check_id(session_id, "session_id")
        run = functools.partial(self._store.run, delete(sid))
        gone = yield Work(erase, self._semantic, run, lambda g: [sid] * bool(g))
        return gone

    def delete_session(self, session_id: str, *, user_id: str | None = None) -> bool:
        """Delete a session and all its messages (and their vectors). True if it existed.
        Once it returns no search finds them; once the store is closed no byte of them is left
        in its files (docs/deletion.md). With ``user_id``, only that user's session."""
        return bool(drive(self._drop(ops.delete_session, session_id, user_id)))

    async def adelete_session(self, session_id: str, *, user_id: str | None = None) -> bool:
        """Delete a session and its messages (async twin of :meth:`delete_session`)."""
        return bool(await adrive(self._drop(ops.delete_session, session_id, user_id)))

    def clear_session(self, session_id: str, *, user_id: str | None = None) -> int:
        """Delete a session's messages but keep the session; returns how many were removed.
        With ``user_id``, only that user's session (else SessionOwnershipError)."""
        return int(drive(self._drop(ops.clear_session, session_id, user_id)))

    async def aclear_session(self, session_id: str, *, user_id: str | None = None) -> int:
        """Delete a session's messages (async twin of :meth:`clear_session`)."""
        return int(await adrive(self._drop(ops.clear_session, session_id, user_id)))

    def prune_old_sessions(self, days: float) -> int:
        """Delete sessions with no activity in the last ``days`` days; returns how many."""
        return drive(self._prune_old_sessions(days))

    async def aprune_old_sessions(self, days: float) -> int:
        """Delete inactive sessions (async twin of :meth:`prune_old_sessions`)."""
        return await adrive(self._prune_old_sessions(days))

    def _prune_old_sessions(self, days: float) -> Flow[int]:
        cutoff, store = prune_cutoff(days), self._store
        gone = yield Work(
            erase, self._semantic, lambda: store.run(ops.delete_sessions_before(cutoff)), list
        )
        return len(gone)

    def forget_user(self, user_id: str) -> int:
        """Delete everything of ``user_id`` (GDPR erasure) in one transaction, erased as
        :meth:`delete_session` erases: sessions, messages, vectors, keywords, summaries,
        checkpoints, facts (not LangGraph store items: no user owns them). Returns sessions."""
        return drive(self._forget_user(user_id))

    async def aforget_user(self, user_id: str) -> int:
        """Delete everything of ``user_id`` (async twin of :meth:`forget_user`)."""
        return await adrive(self._forget_user(user_id))

    def _forget_user(self, user_id: str) -> Flow[int]:
        uid, store = check_id(user_id, "user_id"), self._store
        gone = yield Work(erase, self._semantic, lambda: delete_user_sessions(store, uid), list)
        return len(gone)

    def erase_deleted(self) -> Erasure:
        """Erase now, with the store open, every byte deleted data still leaves in the files:
        the keyword index's old segments are merged, the WAL truncated and an embedded Chroma
        folder emptied and vacuumed (it refills from the database in the background) - what
        close does after a deletion. The background worker does this by itself once deletions
        pause (``memory.erase_after_seconds``); call it for an erasure that must be on disk
        before you answer. Returns an :class:`~harombe_core.erasing.Erasure`; when a reader
        with an older snapshot kept the WAL from being truncated it is not ``complete`` and
        the background tries again (writers never wait for that). See docs/deletion.md."""
        return drive(self._erase_deleted())

    async def aerase_deleted(self) -> Erasure:
        """Erase deleted data from the files now (async twin of :meth:`erase_deleted`)."""
        return await adrive(self._erase_deleted())

    def _erase_deleted(self) -> Flow[Erasure]:
        done: Erasure = yield Work(erase_deleted, self._store, self._semantic)
        return done

    # messages -----------------------------------------------------------------------------
    def _write(
        self,
        session_id: str,
        delete_ids: Sequence[int] | None,
        messages: Iterable[Message | Mapping[str, Any]],
        user_id: str | None,
        what: str,
    ) -> Flow[list[int]]:
        """Delete ``delete_ids`` (None: every message of the session) and append ``messages``
        in one transaction of the store."""
        check_id(session_id, "session_id")
        optional_id(user_id, "user_id")
        doomed = None if delete_ids is None else id_list(delete_ids, "delete_ids")
        prepared = yield from costed(messages, what, self.token_counter)
        if not prepared and doomed == []:
            return []
        replace = ops.replace_messages(session_id, prepared, user_id=user_id, replace_ids=doomed)
        # The commit and what it owes the background (dropping deleted vectors from the index,
        # waking the embedder and the fact extractor) as one request: one thread hop when
        # async, which a cancelled caller waits for, as erase() does for sessions. A
        # cancellation between them left vectors in the index, or committed messages
        # unextracted until the session's next write. (The delete's commit arms the
        # background eraser itself.)
        ids: list[int] = yield Work(self._commit_and_wake, session_id, replace, bool(prepared))
        return ids

    def _commit_and_wake(
        self, session_id: str, replace: Op[tuple[list[int], list[int]]], added: bool
    ) -> list[int]:
        """Run ``replace``, drop the vectors of the messages it deleted from the index, then
        wake the background embedder and fact extractor (which never blocks)."""
        removed, ids = self._store.run(replace)
        if self._semantic is not None:
            if removed:
                self._semantic.forget_messages(removed)
            if added:
                self._semantic.notify()
        self._facts.notify(session_id)
        return list(ids)

    def save_message(
        self, session_id: str, message: Message | Mapping[str, Any], *, user_id: str | None = None
    ) -> int:
        """Store one message and return its id; an unknown session id is created.

        Returns as soon as the row is committed; embedding happens in the background (see
        :meth:`flush`). Raises InvalidMessageError for a message that cannot be stored, and
        SessionOwnershipError if ``user_id`` is given and the session is not that user's (a
        new session is created for ``user_id``).
        """
        return drive(self._write(session_id, (), [message], user_id, "save_messages"))[0]

    async def asave_message(
        self, session_id: str, message: Message | Mapping[str, Any], *, user_id: str | None = None
    ) -> int:
        """Store one message and return its id (async twin of :meth:`save_message`)."""
        return (await adrive(self._write(session_id, (), [message], user_id, "save_messages")))[0]

    def save_messages(
        self,
        session_id: str,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        user_id: str | None = None,
    ) -> list[int]:
        """Store many messages in one transaction (all or none); returns their ids in order."""
        return drive(self._write(session_id, (), messages, user_id, "save_messages"))

    async def asave_messages(
        self,
        session_id: str,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        user_id: str | None = None,
    ) -> list[int]:
        """Store many messages in one transaction (async twin of :meth:`save_messages`)."""
        return await adrive(self._write(session_id, (), messages, user_id, "save_messages"))

    def replace_messages(
        self,
        session_id: str,
        delete_ids: Sequence[int],
        messages: Iterable[Message | Mapping[str, Any]] = (),
        *,
        user_id: str | None = None,
    ) -> list[int]:
        """Delete ``delete_ids`` of a session and append ``messages``, in one transaction.

        What a framework's "set the history" or "delete message i" needs without ever leaving
        half a history; returns the new messages' ids. Ids of other sessions are ignored.
        """
        return drive(self._write(session_id, delete_ids, messages, user_id, "replace_messages"))

    async def areplace_messages(
        self,
        session_id: str,
        delete_ids: Sequence[int],
        messages: Iterable[Message | Mapping[str, Any]] = (),
        *,
        user_id: str | None = None,
    ) -> list[int]:
        """Delete and append in one transaction (async twin of :meth:`replace_messages`)."""
        write = self._write(session_id, delete_ids, messages, user_id, "replace_messages")
        return await adrive(write)

    def set_messages(
        self,
        session_id: str,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        user_id: str | None = None,
    ) -> list[int]:
        """Make ``messages`` the session's whole history, in one transaction; their new ids.

        What a framework's "set the history" means (LlamaIndex's ``Memory.set``, a chat store's
        ``set_messages``): every message the session holds when the transaction runs goes, so
        concurrent sets leave one of the histories, never both. An unknown session is created.
        With ``user_id``, only that user's session (else SessionOwnershipError).
        """
        return drive(self._write(session_id, None, messages, user_id, "set_messages"))

    async def aset_messages(
        self,
        session_id: str,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        user_id: str | None = None,
    ) -> list[int]:
        """Replace a session's history (async twin of :meth:`set_messages`)."""
        return await adrive(self._write(session_id, None, messages, user_id, "set_messages"))

    def get_messages(
        self,
        session_id: str,
        *,
        limit: int | None = None,
        after_id: int | None = None,
        user_id: str | None = None,
    ) -> list[Message]:
        """Every message of a session in order (or ``limit`` of them after ``after_id``).

        With ``user_id``, only that user's session (else SessionOwnershipError)."""
        return drive(self._get_messages(session_id, limit, after_id, user_id))

    async def aget_messages(
        self,
        session_id: str,
        *,
        limit: int | None = None,
        after_id: int | None = None,
        user_id: str | None = None,
    ) -> list[Message]:
        """A session's messages in order (async twin of :meth:`get_messages`)."""
        return await adrive(self._get_messages(session_id, limit, after_id, user_id))

    def _get_messages(
        self, session_id: str, limit: int | None, after_id: int | None, user_id: str | None
    ) -> Flow[list[Message]]:
        limit = optional_count(limit, "limit")
        after_id = optional_count(after_id, "after_id")
        yield from named_owner(self._store, session_id, user_id)
        read = ops.get_messages(check_id(session_id, "session_id"), after_id, limit)
        messages: list[Message] = yield Run(self._store, read)
        return messages

    def count_messages(
        self,
        session_id: str,
        *,
        after_id: int | None = None,
        unless_metadata: Mapping[str, str] | None = None,
        user_id: str | None = None,
    ) -> int:
        """How many messages the session holds (0 for an unknown session), by one SQL ``COUNT``
        over its own index range (:func:`~harombe_core.store.ops.count_session_messages`):
        ``after_id`` counts only newer ones, ``unless_metadata`` leaves out those whose
        metadata holds any of these key -> string pairs. With ``user_id``, only that user's
        session (else SessionOwnershipError)."""
        return drive(self._count_messages(session_id, after_id, unless_metadata, user_id))

    async def acount_messages(
        self,
        session_id: str,
        *,
        after_id: int | None = None,
        unless_metadata: Mapping[str, str] | None = None,
        user_id: str | None = None,
    ) -> int:
        """How many messages the session holds (async twin of :meth:`count_messages`)."""
        return await adrive(self._count_messages(session_id, after_id, unless_metadata, user_id))

    def _count_messages(
        self,
        session_id: str,
        after_id: int | None,
        unless_metadata: Mapping[str, str] | None,
        user_id: str | None,
    ) -> Flow[int]:
        op = ops.count_session_messages(session_id, after_id, unless_metadata)
        if (yield from owned_session(self._store, session_id, user_id)) is None:
            return 0
        count: int = yield Run(self._store, op)
        return count

    def get_window(
        self,
        session_id: str,
        max_tokens: int | None = None,
        *,
        include_system: bool = True,
        start_on_user: bool = False,
        user_id: str | None = None,
    ) -> Window:
        """Like :meth:`get_recent_messages`, with the token total the window costs."""
        return drive(
            self._get_window(session_id, max_tokens, include_system, start_on_user, user_id)
        )

    async def aget_window(
        self,
        session_id: str,
        max_tokens: int | None = None,
        *,
        include_system: bool = True,
        start_on_user: bool = False,
        user_id: str | None = None,
    ) -> Window:
        """The window with its token total (async twin of :meth:`get_window`)."""
        return await adrive(
            self._get_window(session_id, max_tokens, include_system, start_on_user, user_id)
        )

    def get_recent_messages(
        self,
        session_id: str,
        max_tokens: int | None = None,
        *,
        include_system: bool = True,
        start_on_user: bool = False,
        user_id: str | None = None,
    ) -> list[Message]:
        """The newest messages that fit ``max_tokens`` (default ``max_history_tokens``).

        Oldest first; the session's system prompt leads and is counted. Reads only the rows it
        returns (plus one), whatever the session's length. With ``user_id``, only that user's
        session (else SessionOwnershipError).
        """
        return drive(
            self._get_window(session_id, max_tokens, include_system, start_on_user, user_id)
        ).messages

    async def aget_recent_messages(
        self,
        session_id: str,
        max_tokens: int | None = None,
        *,
        include_system: bool = True,
        start_on_user: bool = False,
        user_id: str | None = None,
    ) -> list[Message]:
        """The newest messages that fit (async twin of :meth:`get_recent_messages`)."""
        window = await adrive(
            self._get_window(session_id, max_tokens, include_system, start_on_user, user_id)
        )
        return window.messages

    def get_newest_messages(
        self, session_id: str, count: int, *, user_id: str | None = None
    ) -> list[Message]:
        """The session's newest ``count`` messages, oldest first (``messages[-count:]``),
        read from the end in one statement, whatever the session's length. With ``user_id``,
        only that user's session (else SessionOwnershipError)."""
        return drive(self._newest_messages(session_id, count, user_id))

    async def aget_newest_messages(
        self, session_id: str, count: int, *, user_id: str | None = None
    ) -> list[Message]:
        """The newest ``count`` messages (async twin of :meth:`get_newest_messages`)."""
        return await adrive(self._newest_messages(session_id, count, user_id))

    def _newest_messages(
        self, session_id: str, count: int, user_id: str | None
    ) -> Flow[list[Message]]:
        count = check_count(count, "count")
        if (yield from owned_session(self._store, session_id, user_id)) is None:
            return []
        newest = yield from newest_messages(self._store, session_id, count)
        return newest[::-1]

    def get_newest_user_message(
        self, session_id: str, *, user_id: str | None = None
    ) -> Message | None:
        """The session's newest user message that has text (what a memory recalls for when
        it is not told the user's input), or None. Reads newest first only as far back as
        that message. With ``user_id``, only that user's session (else
        SessionOwnershipError)."""
        return drive(self._newest_user_message(session_id, user_id))

    async def aget_newest_user_message(
        self, session_id: str, *, user_id: str | None = None
    ) -> Message | None:
        """The newest user message with text (async twin of :meth:`get_newest_user_message`)."""
        return await adrive(self._newest_user_message(session_id, user_id))

    def _newest_user_message(self, session_id: str, user_id: str | None) -> Flow[Message | None]:
        if (yield from owned_session(self._store, session_id, user_id)) is None:
            return None

        def said(message: Message) -> bool:
            return message.role == "user" and bool(message.content.strip())

        newest = yield from read_newest(self._store, session_id, said, page=8)
        return newest[-1] if newest and said(newest[-1]) else None

    def _get_window(
        self,
        session_id: str,
        max_tokens: int | None,
        include_system: bool,
        start_on_user: bool,
        user_id: str | None,
    ) -> Flow[Window]:
        budget = self.max_history_tokens if max_tokens is None else check_budget(max_tokens)
        check_flag(include_system, "include_system")
        check_flag(start_on_user, "start_on_user")
        found = yield from owned_session_and_prompt(self._store, session_id, user_id)
        if found is None:
            return Window(messages=[], tokens=0)
        system = found[1] if include_system else []
        # The prompt is kept even when it alone exceeds the budget (``tokens`` then says so):
        # a window without its instructions would mislead the model more than an overrun.
        reserved = sum(m.token_count or 0 for m in system)
        # The newest rows are read page by page until the budget is spent (the reader of
        # get_context too), then the window is cut from them.
        newest = yield from newest_until(self._store, session_id, budget - reserved)
        window = window_newest(
            newest, budget, reserved_tokens=reserved, start_on_user=start_on_user
        )
        return Window(messages=system + window.messages, tokens=window.tokens)

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

    # the search side (Searcher) ------------------------------------------------------------
    def search(
        self,
        query: str,
        top_k: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        min_similarity: float | None = None,
        **options: Any,
    ) -> list[SearchHit]:
        """Hybrid (vector + keyword) search, best first, with scores; see ``Retriever.search``.

        ``top_k``, ``min_similarity``, ``temporal_decay`` and the weights default to the
        ``rag:`` config. Options: ``roles``, ``since``, ``until``, ``exclude_session_id``,
        ``temporal_decay``, ``mmr_lambda``, ``vector_weight``, ``keyword_weight``, and the
        context evidence weights ``neighbor_weight``, ``session_weight``, ``speaker_weight``,
        ``time_weight``, ``length_weight``, ``statement_weight``, ``person_weight``,
        ``name_free_weight``, ``feedback_weight`` and ``fact_weight`` (the user's facts as
        extra keys of the messages they came from; see
        :class:`~harombe_core.retrieval.RetrievalSettings`); ``now`` anchors relative times in
        the query ("last week"); ``skip_unreadable=True`` leaves out a row edited outside
        harombe that cannot be read, with one warning, instead of raising its CorruptRowError
        (as recall for a prompt does). Without semantic memory this is keyword (BM25) search and
        ``retriever.mode == "keyword"``. Given both ``session_id`` and ``user_id``, the
        session must be that user's (else SessionOwnershipError), as everywhere a user names
        a session.
        """
        search = self._searcher.search
        return drive(search(query, top_k, session_id, user_id, min_similarity, **options))

    async def asearch(
        self,
        query: str,
        top_k: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        min_similarity: float | None = None,
        **options: Any,
    ) -> list[SearchHit]:
        """Hybrid search with scores (async twin of :meth:`search`)."""
        search = self._searcher.search
        return await adrive(search(query, top_k, session_id, user_id, min_similarity, **options))

    def search_similar(
        self,
        query: str,
        top_k: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        min_similarity: float | None = None,
        **options: Any,
    ) -> list[Message]:
        """The messages most relevant to ``query``, best first, as saved."""
        search = self._searcher.search
        hits = drive(search(query, top_k, session_id, user_id, min_similarity, **options))
        return [hit.message for hit in hits]

    async def asearch_similar(
        self,
        query: str,
        top_k: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        min_similarity: float | None = None,
        **options: Any,
    ) -> list[Message]:
        """The most relevant messages (async twin of :meth:`search_similar`)."""
        search = self._searcher.search
        hits = await adrive(search(query, top_k, session_id, user_id, min_similarity, **options))
        return [hit.message for hit in hits]

    def search_by_topic(
        self, topic: str, top_k: int | None = None, user_id: str | None = None, **options: Any
    ) -> list[Session]:
        """Sessions that talk most about ``topic``, best first."""
        return drive(self._searcher.search_by_topic(topic, top_k, user_id, **options))

    async def asearch_by_topic(
        self, topic: str, top_k: int | None = None, user_id: str | None = None, **options: Any
    ) -> list[Session]:
        """Sessions about ``topic`` (async twin of :meth:`search_by_topic`)."""
        return await adrive(self._searcher.search_by_topic(topic, top_k, user_id, **options))

    def get_relevant_context(
        self,
        query: str,
        max_tokens: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        exclude_session_id: str | None = None,
        **options: Any,
    ) -> list[Message]:
        """Relevant past messages that fit ``max_tokens`` (default ``rag.max_context_tokens``)."""
        context = self._searcher.get_relevant_context
        return drive(context(query, max_tokens, session_id, user_id, exclude_session_id, **options))

    async def aget_relevant_context(
        self,
        query: str,
        max_tokens: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        exclude_session_id: str | None = None,
        **options: Any,
    ) -> list[Message]:
        """Relevant past messages (async twin of :meth:`get_relevant_context`)."""
        context = self._searcher.get_relevant_context
        flow = context(query, max_tokens, session_id, user_id, exclude_session_id, **options)
        return await adrive(flow)

    format_context = staticmethod(Searcher.format_context)

    def backfill_embeddings(self, batch_size: int = 100, *, progress: Progress = True) -> int:
        """Embed every message not yet embedded (with a progress bar); returns how many.

        ``progress`` as for :meth:`flush`. Raises InvalidInputError when semantic memory is off
        (nothing to embed with).
        """
        return drive(self._searcher.backfill_embeddings(batch_size, progress))

    async def abackfill_embeddings(
        self, batch_size: int = 100, *, progress: Progress = True
    ) -> int:
        """Embed what is not embedded yet (async twin of :meth:`backfill_embeddings`)."""
        return await adrive(self._searcher.backfill_embeddings(batch_size, progress))

    def reindex(
        self,
        batch_size: int = 100,
        *,
        embedding: Any = None,
        vector_store: Any = "database",
        progress: Progress = True,
        reembed: bool = False,
    ) -> dict[str, int]:
        """Rebuild the keyword and vector indexes from the store; safe to repeat.

        Pass ``embedding`` to switch to another model (every message is embedded again);
        otherwise vectors kept in SQLite are re-inserted without running the model.
        ``progress`` as for :meth:`flush` (a bar by default).
        """
        rebuild = self._searcher.reindex
        return drive(rebuild(batch_size, embedding, vector_store, progress, reembed))

    async def areindex(
        self,
        batch_size: int = 100,
        *,
        embedding: Any = None,
        vector_store: Any = "database",
        progress: Progress = True,
        reembed: bool = False,
    ) -> dict[str, int]:
        """Rebuild the keyword and vector indexes (async twin of :meth:`reindex`)."""
        rebuild = self._searcher.reindex
        return await adrive(rebuild(batch_size, embedding, vector_store, progress, reembed))

    # the context side (ContextBuilder) -------------------------------------------------------
    def get_context(
        self,
        session_id: str,
        strategy: str = "simple",
        max_tokens: int | None = None,
        *,
        start_on_user: bool = False,
        keep_last: int = 6,
        query: str | None = None,
        budget: Any = None,
        user_profile: str | None = None,
        user_id: str | None = None,
        token_counter: TokenCounter | None = None,
        keep_newest_turn: bool = False,
    ) -> list[Message]:
        """The messages to send a model for ``session_id``, never over ``max_tokens``.

        See :meth:`ContextBuilder.context_flow <harombe_core.context.ContextBuilder.context_flow>`
        for the strategies (``simple``, ``summarization``, ``hybrid``, ``threaded``), the
        ``budget`` with the user's profile, open tasks, past summaries and recall, and the
        adapters' options: ``token_counter`` (charge as a framework counts) and
        ``keep_newest_turn`` (send the newest turn even when it does not fit).
        """
        return drive(
            self._context.context_flow(
                session_id,
                strategy,
                max_tokens,
                start_on_user=start_on_user,
                keep_last=keep_last,
                query=query,
                budget=budget,
                user_profile=user_profile,
                user_id=user_id,
                token_counter=token_counter,
                keep_newest_turn=keep_newest_turn,
            )
        )

    async def aget_context(
        self,
        session_id: str,
        strategy: str = "simple",
        max_tokens: int | None = None,
        *,
        start_on_user: bool = False,
        keep_last: int = 6,
        query: str | None = None,
        budget: Any = None,
        user_profile: str | None = None,
        user_id: str | None = None,
        token_counter: TokenCounter | None = None,
        keep_newest_turn: bool = False,
    ) -> list[Message]:
        """The messages to send a model (async twin of :meth:`get_context`: its reads are
        awaited on the store's async path, one thread hop per read)."""
        return await adrive(
            self._context.context_flow(
                session_id,
                strategy,
                max_tokens,
                start_on_user=start_on_user,
                keep_last=keep_last,
                query=query,
                budget=budget,
                user_profile=user_profile,
                user_id=user_id,
                token_counter=token_counter,
                keep_newest_turn=keep_newest_turn,
            )
        )

    def summarize_session(
        self, session_id: str, *, until_id: int | None = None, user_id: str | None = None
    ) -> Any:
        """Bring the session's stored summary up to date, incrementally; returns it.

        See :meth:`ContextBuilder.summarize_session
        <harombe_core.context.ContextBuilder.summarize_session>`: nothing is summarised twice,
        and a failing summariser falls back to the extractive one. With ``user_id``, only that
        user's session (else SessionOwnershipError).
        """
        return self._context.summarize_session(session_id, until_id=until_id, user_id=user_id)

    async def asummarize_session(
        self, session_id: str, *, until_id: int | None = None, user_id: str | None = None
    ) -> Any:
        """Bring the session's summary up to date (async twin of :meth:`summarize_session`)."""
        return await adrive(self._context.summarize_flow(session_id, until_id, user_id))

    def end_session(self, session_id: str, *, user_id: str | None = None) -> Any:
        """The session-end pipeline: summary, facts, topics, outcome, and (with semantic memory)
        the summary's embedding, stored on the session; returns the ``SessionSummary`` (None
        when there is nothing to summarise, as for an unknown session).

        Then, when the session has an owner, the facts, preferences and tasks of its messages
        not yet extracted go into the owner's user memory, and the session's outcome is
        recorded unless the application set one: ongoing while it left open tasks, else
        resolved."""
        return drive(self._end_session(session_id, user_id))

    async def aend_session(self, session_id: str, *, user_id: str | None = None) -> Any:
        """The session-end pipeline (async twin of :meth:`end_session`)."""
        return await adrive(self._end_session(session_id, user_id))

    def _end_session(self, session_id: str, user_id: str | None) -> Flow[Any]:
        summary = yield from self._context.summarize_flow(session_id, None, user_id)
        yield from self._facts.end_session(session_id)
        return summary

    def search_summaries(
        self, query: str, top_k: int = 5, user_id: str | None = None
    ) -> list[tuple[Session, float]]:
        """Sessions whose stored summary matches ``query`` best: by meaning when semantic memory
        is on (the stored summary embeddings), else by shared words. Best first.

        Only the summarised sessions in scope are read (with ``user_id``, that user's, through
        an index), and only their summaries; the ``top_k`` winners are then read whole.
        """
        return drive(self._context.search_summaries(query, top_k, user_id))

    async def asearch_summaries(
        self, query: str, top_k: int = 5, user_id: str | None = None
    ) -> list[tuple[Session, float]]:
        """Sessions whose summary matches ``query`` (async twin of :meth:`search_summaries`)."""
        return await adrive(self._context.search_summaries(query, top_k, user_id))

    @staticmethod
    def _one(request: Work[T]) -> Flow[T]:
        """A flow of one request of work (a sync method the async twin runs off the loop)."""
        result: T = yield request
        return result

    # semantic memory lifecycle ------------------------------------------------------------
    def notify_written(self, *, deleted_sessions: Iterable[str] = ()) -> None:
        """Keep semantic memory in step with rows written outside this manager's own methods.

        For code that writes messages through the store's runner in its own transaction (the
        LangGraph checkpointer records a thread's messages with its checkpoint): wakes the
        background embedder and drops the vectors of ``deleted_sessions`` (the deletion's own
        commit has the background erase their bytes from the files, as after the manager's own
        deletions). Returns at once.
        """
        named = [
            check_id(sid, "deleted_sessions item")
            for sid in check_list(deleted_sessions, "deleted_sessions", of="session ids")
        ]
        if self._semantic is None:
            return
        # Only sessions that are really gone: a live session's vectors are never dropped here.
        deleted = [sid for sid in named if self._store.run(ops.get_session(sid)) is None]
        if deleted:
            self._semantic.forget_sessions(deleted)
        self._semantic.notify()

    def flush(self, timeout: float | None = None, *, progress: Progress = None) -> None:
        """Block until every saved message is in the keyword index and (with semantic memory)
        embedded, and summary backlogs are folded (all in the background), so searches and
        summaries then repeat exactly. ``progress``: ``None`` shows a bar on stderr when it is a
        terminal and the backlog is large, ``True`` always, ``False`` never; a callable
        ``progress(done, total)`` is called as batches complete. Raises EmbeddingError if the
        model fails or ``timeout`` (seconds) passes first."""
        drive(self._flush(timeout, progress))

    async def aflush(self, timeout: float | None = None, *, progress: Progress = None) -> None:
        """Wait until background work has caught up (async twin of :meth:`flush`)."""
        await adrive(self._flush(timeout, progress))

    def _flush(self, timeout: float | None, progress: Progress) -> Flow[None]:
        check_progress(progress)
        timeout = optional_number(timeout, "timeout", low=0, high=MAX_WAIT_SECONDS)
        # derived rows still owed, and (checked now) what a process killed since left owed
        yield Work(settle, getattr(self._store, "location", ""), check=True)
        if self._semantic is not None:
            yield Work(self._semantic.flush, timeout, progress=progress)
        yield Work(self._context.flush_summaries, timeout)
        keywords = getattr(self._store, "index_keywords", None)  # SQLite indexes in background
        if keywords is not None:
            yield Work(keywords)
        yield from self._flush_facts()

    def stats(self) -> dict[str, Any]:
        """Counts of sessions, users, messages, tokens and pending embeddings, and file size.

        The counts are exact, read from the rows themselves (nothing a kill, an import or
        another process's write could leave stale), so the call scans the messages table:
        O(messages), about 14 ms for 100,000 messages on SQLite, 11x a raw ``count(*)``
        (``benchmarks/bench_stats.py``). Call it for a report, not on every request."""
        return drive(self._stats())

    async def astats(self) -> dict[str, Any]:
        """Counts and file size (async twin of :meth:`stats`)."""
        return await adrive(self._stats())

    def _stats(self) -> Flow[dict[str, Any]]:
        counts: dict[str, Any] = yield Run(self._store, ops.stats())
        return {"location": self._store.location, **counts}

    def close(self) -> None:
        """Give back this manager's share of semantic memory, then close the store.

        The last manager (or adapter) on a database in this process stops the background
        indexer and closes the vector index first; messages still waiting to be embedded are
        not embedded now (they are committed: the next open embeds them; call :meth:`flush`
        first to have them searchable before closing). Safe to call twice.
        """
        self._release()

    async def aclose(self) -> None:
        """Close the manager (async twin of :meth:`close`)."""
        if not self._closed:
            await adrive(self._one(Work(self._release)))

    def _release(self) -> None:
        if self._closed:
            return
        self._closed = True
        settle(getattr(self._store, "location", ""))  # derived rows owed are written first
        self._owed.close()
        if self._eraser is not None:
            self._unwatch()
            self._eraser.close()  # the close below erases what is still owed
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
