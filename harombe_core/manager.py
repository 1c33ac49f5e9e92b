"""MemoryManager: the façade an application (or an adapter) talks to.

It owns one store and, when semantic memory is on, the embedder, vector index and background
indexer derived from it. Every I/O method has an ``a``-prefixed async twin that runs the sync
method on a worker thread, so SQLite and model calls never block the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

from harombe_core.errors import InvalidInputError, InvalidMessageError, SessionNotFoundError
from harombe_core.models import Message, SearchHit, Session
from harombe_core.store.base import UNSET, MessageStore
from harombe_core.strategies import Window, check_budget, window_newest
from harombe_core.tokens import TokenCounter, resolve_token_counter

if TYPE_CHECKING:
    from harombe_core.config import MemoryConfig
    from harombe_core.retrieval import Retriever

__all__ = ["MemoryManager", "open_store"]

log = logging.getLogger(__name__)


def open_store(
    storage_path: str | os.PathLike[str] | MessageStore, *, encryption_key: str | None = None
) -> MessageStore:
    """A store for a path (SQLite), a ``postgresql://`` URL, or an existing store object.

    ``encryption_key`` (else ``HAROMBE_DB_KEY``) encrypts a SQLite file with SQLCipher.
    """
    if not isinstance(storage_path, (str, os.PathLike)):
        if isinstance(storage_path, MessageStore):
            return storage_path
        raise InvalidInputError(
            f"storage_path must be a file path, ':memory:' or a postgresql:// URL, got "
            f"{type(storage_path).__name__}."
        )
    location = os.fspath(storage_path)
    if location.startswith(("postgresql://", "postgres://")):
        from harombe_core.store.postgres import PostgresStore

        return PostgresStore(location)
    from harombe_core.store.sqlite import SQLiteStore

    return SQLiteStore(location, encryption_key=encryption_key)


def _message_list(messages: Any, what: str) -> list[Any]:
    """The messages of a bulk call as a list, refusing a lone message or a non-iterable."""
    if type(messages) is list:  # the common case, checked first: save_message goes this way
        return messages
    if isinstance(messages, (str, bytes, Message, Mapping)) or not isinstance(messages, Iterable):
        raise InvalidMessageError(
            f"{what} takes a list of messages, got {type(messages).__name__}; wrap a single "
            "message in a list or call save_message()."
        )
    return list(messages)


def _id_list(values: Any, what: str) -> list[int]:
    """Message ids as ints, refusing a lone value, a non-iterable or a non-integer id."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise InvalidInputError(f"{what} must be a list of message ids, got {values!r:.80}.")
    import numbers

    items = list(values)
    if any(isinstance(i, bool) or not isinstance(i, numbers.Integral) for i in items):
        raise InvalidInputError(f"{what} must contain only integer message ids.")
    return [int(i) for i in items]


def _optional_count(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{what} must be a non-negative int or None, got {value!r}.")
    return value


def _optional_text(value: Any, what: str) -> None:
    if value is not None and not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a str or None, got {type(value).__name__}.")


def _as_message(value: Any) -> Message:
    if isinstance(value, Message):
        return value
    if isinstance(value, Mapping):
        return Message.from_dict(value)
    raise InvalidMessageError(
        f"expected a harombe Message (or a dict with role and content), got "
        f"{type(value).__name__}. Adapters convert framework messages for you."
    )


class MemoryManager:
    """Sessions, messages, token windows and (with semantic memory) search, over one store.

    ``storage_path`` is a SQLite file (``~`` expanded; ``":memory:"`` for a throwaway store) or a
    ``postgresql://`` URL. ``embedding`` and ``vector_store`` choose semantic memory: the default
    is the bundled all-MiniLM-L6-v2 model with an embedded ChromaDB beside the database; pass
    ``None`` for either to keep only the store and its keyword index.
    """

    def __init__(
        self,
        storage_path: str | os.PathLike[str] | MessageStore = ":memory:",
        *,
        max_history_tokens: int = 4096,
        embedding: Any = "default",
        vector_store: Any = "chroma",
        token_counter: Any = "exact",
        config: MemoryConfig | None = None,
        encryption_key: str | None = None,
    ) -> None:
        self.max_history_tokens = check_budget(max_history_tokens, "max_history_tokens")
        self.token_counter: TokenCounter = resolve_token_counter(token_counter)
        self._store = open_store(storage_path, encryption_key=encryption_key)
        self._config = config
        self._semantic: Any = None
        try:
            if embedding is not None and vector_store is not None:
                self._semantic = self._open_semantic(embedding, vector_store)
        except BaseException:
            self._store.close()
            raise

    # construction -------------------------------------------------------------------------
    def _open_semantic(self, embedding: Any, vector_store: Any) -> Any:
        from harombe_core.vectors.indexer import open_semantic_memory

        return open_semantic_memory(
            self._store, embedding=embedding, vector_store=vector_store, config=self._config
        )

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
    def config(self) -> MemoryConfig:
        """The configuration in force (defaults if none was given)."""
        if self._config is None:
            from harombe_core.config import MemoryConfig

            self._config = MemoryConfig()
        return self._config

    @property
    def embedder(self) -> Any:
        """The embedder of semantic memory (an ``Embedder``), or None when it is off."""
        return None if self._semantic is None else self._semantic.embedder

    @property
    def semantic_enabled(self) -> bool:
        """True when messages are embedded and searchable by meaning."""
        return self._semantic is not None

    # sessions -----------------------------------------------------------------------------
    def create_session(
        self,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        user_id: str | None = None,
        *,
        session_id: str | None = None,
    ) -> str:
        """Create a session and return its id (a new UUID unless ``session_id`` is given).

        Raises InvalidInputError for a malformed id, metadata or an id already in use.
        """
        sid = session_id if session_id is not None else uuid.uuid4().hex
        _optional_text(system_prompt, "system_prompt")
        tokens = self._system_prompt_tokens(system_prompt)
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidInputError(f"metadata must be a dict, got {type(metadata).__name__}.")
        Message(role="system", content="", metadata=dict(metadata or {}))  # validates JSON
        self._store.create_session(
            sid,
            user_id=user_id,
            system_prompt=system_prompt,
            system_prompt_tokens=tokens,
            metadata=metadata,
        )
        return sid

    def _system_prompt_tokens(self, system_prompt: str | None) -> int:
        if system_prompt is None:
            return 0
        return self.token_counter.count_message(Message(role="system", content=system_prompt))

    def load_session(self, session_id: str) -> Session:
        """The session's record. Raises SessionNotFoundError if it does not exist."""
        session = self._store.get_session(session_id)
        if session is None:
            raise SessionNotFoundError(
                f"no session {session_id!r} in {self._store.location}; list them with "
                "list_sessions() or create it with create_session()."
            )
        return session

    def session_exists(self, session_id: str) -> bool:
        return self._store.get_session(session_id) is not None

    def update_session(
        self,
        session_id: str,
        *,
        system_prompt: Any = UNSET,
        metadata: Any = UNSET,
        user_id: Any = UNSET,
    ) -> None:
        """Change a session's system prompt, metadata or owner (unset arguments are kept)."""
        tokens: Any = UNSET
        if system_prompt is not UNSET:
            if system_prompt is not None and not isinstance(system_prompt, str):
                raise InvalidInputError("system_prompt must be a str or None.")
            tokens = self._system_prompt_tokens(system_prompt)
        if metadata is not UNSET and metadata is not None:
            if not isinstance(metadata, Mapping):
                raise InvalidInputError(
                    f"metadata must be a dict or None, got {type(metadata).__name__}."
                )
            Message(role="system", content="", metadata=dict(metadata))  # validates JSON
        if user_id is not UNSET:
            _optional_text(user_id, "user_id")
        self._store.update_session(
            session_id,
            system_prompt=system_prompt,
            system_prompt_tokens=tokens,
            metadata=metadata,
            user_id=user_id,
        )

    def list_sessions(self, limit: int | None = 10, user_id: str | None = None) -> list[Session]:
        """Sessions with the most recent activity first."""
        limit = _optional_count(limit, "limit")
        _optional_text(user_id, "user_id")
        return self._store.list_sessions(limit=limit, user_id=user_id)

    def delete_session(self, session_id: str) -> bool:
        """Delete a session and all its messages (and their vectors). True if it existed."""
        deleted = self._store.delete_session(session_id)
        if deleted and self._semantic is not None:
            self._semantic.forget_sessions([session_id])
        return deleted

    def clear_session(self, session_id: str) -> int:
        """Delete a session's messages but keep the session; returns how many were removed."""
        removed = self._store.clear_session(session_id)
        if removed and self._semantic is not None:
            self._semantic.forget_sessions([session_id])
        return removed

    def prune_old_sessions(self, days: int) -> int:
        """Delete sessions with no activity in the last ``days`` days; returns how many."""
        if (
            isinstance(days, bool)
            or not isinstance(days, (int, float))
            or not 0 <= days <= 3_000_000  # NaN fails too; beyond ~8,000 years nothing is older
        ):
            raise InvalidInputError(
                f"days must be a number of days between 0 and 3,000,000, got {days!r}."
            )
        cutoff = datetime.now(UTC) - timedelta(days=days)
        removed = self._store.delete_sessions_before(cutoff)
        if removed and self._semantic is not None:
            self._semantic.forget_sessions(removed)
        return len(removed)

    # messages -----------------------------------------------------------------------------
    def _prepare(self, message: Any) -> Message:
        msg = _as_message(message)
        return msg.with_ids(token_count=self.token_counter.count_message(msg))

    def save_message(
        self, session_id: str, message: Message | Mapping[str, Any], *, user_id: str | None = None
    ) -> int:
        """Store one message and return its id; an unknown session id is created.

        Returns as soon as the row is committed; embedding happens in the background (see
        :meth:`flush`). Raises InvalidMessageError for a message that cannot be stored.
        """
        return self.save_messages(session_id, [message], user_id=user_id)[0]

    def save_messages(
        self,
        session_id: str,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        user_id: str | None = None,
    ) -> list[int]:
        """Store many messages in one transaction (all or none); returns their ids in order."""
        prepared = [self._prepare(m) for m in _message_list(messages, "save_messages")]
        if not prepared:
            return []
        ids = self._store.add_messages(session_id, prepared, user_id=user_id)
        if self._semantic is not None:
            self._semantic.notify()
        return ids

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
        doomed = _id_list(delete_ids, "delete_ids")
        prepared = [self._prepare(m) for m in _message_list(messages, "replace_messages")]
        if not prepared and not doomed:
            return []
        ids = self._store.add_messages(
            session_id, prepared, user_id=user_id, replace_ids=doomed
        )
        if self._semantic is not None and prepared:
            self._semantic.notify()
        return ids

    async def areplace_messages(
        self,
        session_id: str,
        delete_ids: Sequence[int],
        messages: Iterable[Message | Mapping[str, Any]] = (),
        *,
        user_id: str | None = None,
    ) -> list[int]:
        doomed = _id_list(delete_ids, "delete_ids")
        batch = _message_list(messages, "areplace_messages")
        return await asyncio.to_thread(
            self.replace_messages, session_id, doomed, batch, user_id=user_id
        )

    def get_messages(
        self, session_id: str, *, limit: int | None = None, after_id: int | None = None
    ) -> list[Message]:
        """Every message of a session in order (or ``limit`` of them after ``after_id``)."""
        limit = _optional_count(limit, "limit")
        after_id = _optional_count(after_id, "after_id")
        return self._store.get_messages(session_id, after_id=after_id, limit=limit)

    def get_recent_messages(
        self,
        session_id: str,
        max_tokens: int | None = None,
        *,
        include_system: bool = True,
        start_on_user: bool = False,
    ) -> list[Message]:
        """The newest messages that fit ``max_tokens`` (default ``max_history_tokens``).

        Oldest first; the session's system prompt leads and is counted. Reads only the rows it
        returns (plus one), whatever the session's length.
        """
        return self.get_window(
            session_id, max_tokens, include_system=include_system, start_on_user=start_on_user
        ).messages

    def get_window(
        self,
        session_id: str,
        max_tokens: int | None = None,
        *,
        include_system: bool = True,
        start_on_user: bool = False,
    ) -> Window:
        """Like :meth:`get_recent_messages`, with the token total the window costs."""
        budget = self.max_history_tokens if max_tokens is None else check_budget(max_tokens)
        session = self._store.get_session(session_id)
        if session is None:
            return Window(messages=[], tokens=0)
        system: list[Message] = []
        reserved = 0
        if include_system and session.system_prompt is not None:
            reserved = self._store.system_prompt_tokens(session_id)
            system = [
                Message(
                    role="system",
                    content=session.system_prompt,
                    session_id=session_id,
                    created_at=session.created_at,
                    token_count=reserved,
                )
            ]
        window = window_newest(
            self._store.iter_newest(session_id),
            budget,
            reserved_tokens=reserved,
            start_on_user=start_on_user,
        )
        return Window(messages=system + window.messages, tokens=window.tokens)

    def count_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens these messages cost under this manager's counter (overhead included)."""
        if isinstance(messages, (str, bytes, Message, Mapping)) or not isinstance(
            messages, Iterable
        ):
            raise InvalidMessageError("count_tokens takes a list of messages.")
        return self.token_counter.count_messages([_as_message(m) for m in messages])

    # search, RAG context, backfill and reindex (harombe_core.retrieval) ---------------------
    @property
    def retriever(self) -> Retriever:
        """The hybrid retriever over this store; keyword-only when semantic memory is off."""
        from harombe_core.retrieval import RetrievalSettings, Retriever

        cached = getattr(self, "_retriever_cache", None)
        if cached is None or cached.semantic is not self._semantic:
            settings = RetrievalSettings.from_config(self.config.rag)
            cached = Retriever(self._store, self._semantic, settings)
            self._retriever_cache = cached
        return cached

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
        ``temporal_decay``, ``mmr_lambda``, ``vector_weight``, ``keyword_weight``. Without
        semantic memory this is keyword (BM25) search and ``retriever.mode == "keyword"``.
        """
        return self.retriever.search(query, top_k, session_id, user_id, min_similarity, **options)

    def search_similar(
        self,
        query: str,
        top_k: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        min_similarity: float | None = None,
        **options: Any,
    ) -> list[Message]:
        """The messages most relevant to ``query``, best first, each as it was saved."""
        return self.retriever.search_similar(
            query, top_k, session_id, user_id, min_similarity, **options
        )

    def search_by_topic(
        self, topic: str, top_k: int | None = None, user_id: str | None = None, **options: Any
    ) -> list[Session]:
        """Sessions that talk most about ``topic``, best first."""
        return self.retriever.search_by_topic(topic, top_k, user_id, **options)

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
        return self.retriever.get_relevant_context(
            query, max_tokens, session_id, user_id, exclude_session_id, **options
        )

    @staticmethod
    def format_context(messages: Sequence[Message]) -> str:
        """Retrieved messages as the RAG system-prompt text, with dates and speakers."""
        from harombe_core.retrieval import format_context

        return format_context(messages)

    def backfill_embeddings(self, batch_size: int = 100, *, progress: bool = True) -> int:
        """Embed every message not yet embedded (with a progress bar); returns how many.

        Raises InvalidInputError when semantic memory is off (nothing to embed with).
        """
        return self._require_semantic("backfill_embeddings").backfill(batch_size, progress=progress)

    def reindex(
        self,
        batch_size: int = 100,
        *,
        embedding: Any = None,
        vector_store: Any = "chroma",
        progress: bool = True,
        reembed: bool = False,
    ) -> dict[str, int]:
        """Rebuild the keyword and vector indexes from the store; safe to repeat.

        Pass ``embedding`` to switch to another model (every message is embedded again);
        otherwise vectors kept in SQLite are re-inserted without running the model.
        """
        keyword = self._store.rebuild_keyword_index()
        semantic = self._semantic
        if embedding is not None or semantic is None:
            from harombe_core.vectors.indexer import open_semantic_memory

            semantic = open_semantic_memory(
                self._store,
                embedding="default" if embedding is None else embedding,
                vector_store=vector_store,
                config=self._config,
                allow_model_change=True,
                start=False,
            )
        try:
            vectors = semantic.reindex(batch_size, progress=progress, reembed=reembed)
        except BaseException:
            if semantic is not self._semantic:
                semantic.close()
            raise
        if semantic is not self._semantic:
            if self._semantic is not None:
                self._semantic.close()
            self._semantic = semantic
        semantic.start()
        return {"keyword_rows": keyword, "vectors": vectors}

    def _require_semantic(self, what: str) -> Any:
        if self._semantic is None:
            raise InvalidInputError(
                f"{what} needs semantic memory; open the MemoryManager with "
                "embedding='default' (and vector_store='chroma')."
            )
        return self._semantic

    async def asearch(self, query: str, *args: Any, **kwargs: Any) -> list[SearchHit]:
        return await asyncio.to_thread(self.search, query, *args, **kwargs)

    async def asearch_similar(self, query: str, *args: Any, **kwargs: Any) -> list[Message]:
        return await asyncio.to_thread(self.search_similar, query, *args, **kwargs)

    async def asearch_by_topic(self, topic: str, *args: Any, **kwargs: Any) -> list[Session]:
        return await asyncio.to_thread(self.search_by_topic, topic, *args, **kwargs)

    async def aget_relevant_context(self, query: str, *args: Any, **kwargs: Any) -> list[Message]:
        return await asyncio.to_thread(self.get_relevant_context, query, *args, **kwargs)

    async def abackfill_embeddings(self, batch_size: int = 100, *, progress: bool = True) -> int:
        return await asyncio.to_thread(self.backfill_embeddings, batch_size, progress=progress)

    async def areindex(self, batch_size: int = 100, **kwargs: Any) -> dict[str, int]:
        return await asyncio.to_thread(self.reindex, batch_size, **kwargs)

    # end of search, RAG context, backfill and reindex ----------------------------------------

    # semantic memory lifecycle ------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> None:
        """Block until every saved message is embedded and searchable (no-op without semantic)."""
        if self._semantic is not None:
            self._semantic.flush(timeout)

    def stats(self) -> dict[str, Any]:
        """Counts of sessions, users, messages, tokens and pending embeddings, and file size."""
        return self._store.stats()

    def close(self) -> None:
        """Stop the background indexer and close the store. Safe to call twice."""
        if self._semantic is not None:
            self._semantic.close()
            self._semantic = None
        self._store.close()

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # async twins ----------------------------------------------------------------------------
    async def acreate_session(
        self,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        user_id: str | None = None,
        *,
        session_id: str | None = None,
    ) -> str:
        return await asyncio.to_thread(
            self.create_session, system_prompt, metadata, user_id, session_id=session_id
        )

    async def aload_session(self, session_id: str) -> Session:
        return await asyncio.to_thread(self.load_session, session_id)

    async def alist_sessions(
        self, limit: int | None = 10, user_id: str | None = None
    ) -> list[Session]:
        return await asyncio.to_thread(self.list_sessions, limit, user_id)

    async def adelete_session(self, session_id: str) -> bool:
        return await asyncio.to_thread(self.delete_session, session_id)

    async def aclear_session(self, session_id: str) -> int:
        return await asyncio.to_thread(self.clear_session, session_id)

    async def aprune_old_sessions(self, days: int) -> int:
        return await asyncio.to_thread(self.prune_old_sessions, days)

    async def asave_message(
        self, session_id: str, message: Message | Mapping[str, Any], *, user_id: str | None = None
    ) -> int:
        return await asyncio.to_thread(self.save_message, session_id, message, user_id=user_id)

    async def asave_messages(
        self,
        session_id: str,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        user_id: str | None = None,
    ) -> list[int]:
        batch = _message_list(messages, "asave_messages")
        return await asyncio.to_thread(self.save_messages, session_id, batch, user_id=user_id)

    async def aget_messages(
        self, session_id: str, *, limit: int | None = None, after_id: int | None = None
    ) -> list[Message]:
        return await asyncio.to_thread(
            self.get_messages, session_id, limit=limit, after_id=after_id
        )

    async def aget_recent_messages(
        self,
        session_id: str,
        max_tokens: int | None = None,
        *,
        include_system: bool = True,
        start_on_user: bool = False,
    ) -> list[Message]:
        return await asyncio.to_thread(
            self.get_recent_messages,
            session_id,
            max_tokens,
            include_system=include_system,
            start_on_user=start_on_user,
        )

    async def aupdate_session(
        self,
        session_id: str,
        *,
        system_prompt: Any = UNSET,
        metadata: Any = UNSET,
        user_id: Any = UNSET,
    ) -> None:
        await asyncio.to_thread(
            self.update_session,
            session_id,
            system_prompt=system_prompt,
            metadata=metadata,
            user_id=user_id,
        )

    async def aget_window(
        self,
        session_id: str,
        max_tokens: int | None = None,
        *,
        include_system: bool = True,
        start_on_user: bool = False,
    ) -> Window:
        return await asyncio.to_thread(
            self.get_window,
            session_id,
            max_tokens,
            include_system=include_system,
            start_on_user=start_on_user,
        )

    async def astats(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.stats)

    async def __aenter__(self) -> MemoryManager:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aflush(self, timeout: float | None = None) -> None:
        await asyncio.to_thread(self.flush, timeout)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    # context strategies and session summaries ----------------------------------------------
    # (strategies: harombe_core.strategies; summaries: harombe_core.summarize)
    @property
    def summarizer(self) -> Any:
        """What summarises sessions: extractive (no model) unless set to a Summarizer or an LLM."""
        current = getattr(self, "_summarizer", None)
        if current is None:
            from harombe_core.summarize import ExtractiveSummarizer

            current = ExtractiveSummarizer()
            self._summarizer: Any = current
        return current

    @summarizer.setter
    def summarizer(self, value: Any) -> None:
        from harombe_core.summarize import resolve_summarizer

        self._summarizer = resolve_summarizer(value)

    def _context_message(self, text: str, kind: str) -> Message:
        message = Message(role="system", content=text, metadata={"harombe": kind})
        return message.with_ids(token_count=self.token_counter.count_message(message))

    def summarize_session(self, session_id: str, *, until_id: int | None = None) -> Any:
        """Bring the session's stored summary up to date, incrementally; returns it.

        Only messages after ``summary_until_id`` (and up to ``until_id`` if given) are read and
        summarised, merged into the previous summary, and stored with the new
        ``summary_until_id``: nothing is summarised twice. A failing summariser is logged and the
        extractive one is used instead; messages are never touched. Returns a
        :class:`~harombe_core.summarize.SessionSummary`, or None if there is nothing to summarise.
        """
        from harombe_core.errors import SummarizationError
        from harombe_core.summarize import ExtractiveSummarizer, SessionSummary

        session = self.load_session(session_id)
        previous = None
        if session.summary_data:
            data = {k: v for k, v in session.summary_data.items() if k != "embedding"}
            previous = SessionSummary.from_dict(data)
        fresh = self._store.get_messages(session_id, after_id=session.summary_until_id)
        if until_id is not None:
            fresh = [m for m in fresh if m.id is not None and m.id <= until_id]
        if not fresh:
            return previous
        try:
            summary = self.summarizer.summarize_session(fresh, previous)
        except SummarizationError as exc:
            log.warning("session %s: summariser failed (%s); using extractive", session_id, exc)
            summary = ExtractiveSummarizer().summarize_session(fresh, previous)
        self._store_summary(session_id, summary, fresh[-1].id)
        return summary

    def _store_summary(self, session_id: str, summary: Any, until_id: int | None) -> None:
        data = summary.to_dict()
        embedder = self.embedder
        if embedder is not None and summary.summary:
            vector = embedder.embed_query(summary.as_text())
            data["embedding"] = {"model": embedder.name, "vector": [float(x) for x in vector]}
        self._store.update_session(
            session_id, summary=summary.summary, summary_data=data, summary_until_id=until_id
        )

    def end_session(self, session_id: str) -> Any:
        """The session-end pipeline: summary, facts, topics, outcome, and (with semantic memory)
        the summary's embedding, stored on the session; returns the ``SessionSummary``."""
        return self.summarize_session(session_id)

    def search_summaries(
        self, query: str, top_k: int = 5, user_id: str | None = None
    ) -> list[tuple[Session, float]]:
        """Sessions whose stored summary matches ``query`` best: by meaning when semantic memory
        is on (the stored summary embeddings), else by shared words. Best first."""
        import re

        sessions = [s for s in self._store.list_sessions(limit=None, user_id=user_id) if s.summary]
        embedder = self.embedder
        scored: list[tuple[Session, float]] = []
        if embedder is not None:
            q = embedder.embed_query(query)
            for s in sessions:
                emb = (s.summary_data or {}).get("embedding") or {}
                vector = emb.get("vector")
                if vector and emb.get("model") == embedder.name and len(vector) == len(q):
                    scored.append((s, float(sum(a * b for a, b in zip(q, vector, strict=True)))))
        else:
            words = set(re.findall(r"\w+", query.lower()))
            for s in sessions:
                text = (s.summary or "") + " " + " ".join((s.summary_data or {}).get("topics", []))
                found = words & set(re.findall(r"\w+", text.lower()))
                if found:
                    scored.append((s, len(found) / max(len(words), 1)))
        scored.sort(key=lambda pair: -pair[1])
        return scored[:top_k]

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
    ) -> list[Message]:
        """The messages to send a model for ``session_id``, never over ``max_tokens``.

        ``strategy``: ``"simple"`` (the token window), ``"summarization"`` (a summary of older
        messages, then the newest ``keep_last``), ``"hybrid"`` (also keeps messages marked
        important: ``metadata["important"] is True`` or ``metadata["importance"] >= 0.7``) or
        ``"threaded"`` (the path from the thread root to the newest message). The system prompt
        comes first and is always kept. Given a ``budget``
        (:class:`~harombe_core.strategies.ContextBudget`), the seed's full context is built:
        system prompt, ``user_profile``, summaries of the user's recent sessions, past messages
        relevant to ``query``, the current session, and a free buffer.
        """
        from harombe_core.strategies import (
            fit_block,
            hybrid_window,
            summarization_window,
            thread_path_newest_first,
        )

        total = self.max_history_tokens if max_tokens is None else check_budget(max_tokens)
        if strategy not in ("simple", "summarization", "hybrid", "threaded"):
            raise InvalidInputError(
                f"unknown strategy {strategy!r}; use 'simple', 'summarization', 'hybrid' or "
                "'threaded'."
            )
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
            raise InvalidInputError(f"keep_last must be an int >= 0, got {keep_last!r}.")
        session = self._store.get_session(session_id)
        if session is None:
            return []
        system: list[Message] = []
        if session.system_prompt is not None:
            system = [
                Message(
                    role="system",
                    content=session.system_prompt,
                    session_id=session_id,
                    created_at=session.created_at,
                    token_count=self._store.system_prompt_tokens(session_id),
                )
            ]
        system_cost = sum(m.token_count or 0 for m in system)
        if system_cost > total:
            from harombe_core.errors import InvalidBudgetError

            raise InvalidBudgetError(
                f"max_tokens={total} cannot hold the system prompt ({system_cost} tokens); raise "
                "max_tokens or shorten the system prompt."
            )
        extra: list[Message] = []
        if budget is not None:
            extra = self._budget_blocks(session, total, system, budget, query, user_profile)
            total -= sum(m.token_count or 0 for m in extra)
            total -= int(budget.buffer * total)
        every = self._store.get_messages(session_id) if strategy == "threaded" else []
        if strategy == "threaded" and not any(m.parent_id is not None for m in every):
            strategy = "simple"  # a session that was never threaded is one linear thread
        if strategy == "simple":
            window = self.get_window(session_id, total, start_on_user=start_on_user)
            messages = window.messages
        elif strategy == "threaded":
            path = thread_path_newest_first(every)
            window = window_newest(
                path,
                total,
                reserved_tokens=sum(m.token_count or 0 for m in system),
                start_on_user=start_on_user,
            )
            messages = system + window.messages
        else:
            import itertools

            stream = self._store.iter_newest(session_id)
            if strategy == "summarization":  # only the newest keep_last (+1 for the boundary)
                newest = list(itertools.islice(stream, keep_last + 1))
            else:  # hybrid looks at every older message for important ones
                newest = list(stream)
            older_than_recent = newest[keep_last:]
            summary = None
            if older_than_recent:
                boundary = older_than_recent[0].id
                known = self._store.get_session(session_id)
                if known is None or known.summary_until_id is None or (
                    boundary is not None and known.summary_until_id < boundary
                ):
                    self.summarize_session(session_id, until_id=boundary)
                stored = self._store.get_session(session_id)
                if stored is not None and stored.summary:
                    summary = self._context_message(
                        "Summary of the earlier conversation:\n" + stored.summary, "summary"
                    )
            fn = summarization_window if strategy == "summarization" else hybrid_window
            messages = fn(
                newest,
                total,
                system=system,
                summary=summary,
                keep_last=keep_last,
                start_on_user=start_on_user,
            ).messages
        if extra:
            messages = messages[: len(system)] + fit_block(extra, 10**9) + messages[len(system) :]
        return messages

    def _budget_blocks(
        self,
        session: Session,
        total: int,
        system: list[Message],
        budget: Any,
        query: str | None,
        user_profile: str | None,
    ) -> list[Message]:
        """User profile, recent session summaries and relevant past messages, each in its share."""
        from harombe_core.strategies import fit_block

        rest = total - sum(m.token_count or 0 for m in system)
        blocks: list[Message] = []
        if user_profile:
            profile = self._context_message("User profile:\n" + user_profile, "profile")
            blocks += fit_block([profile], int(budget.user_profile * rest))
        others = [
            s
            for s in self._store.list_sessions(limit=6, user_id=session.user_id)
            if s.id != session.id and s.summary
        ][:5]
        if others:
            lines = [f"- {s.updated_at:%Y-%m-%d}: {s.summary}" for s in others]
            note = self._context_message("Recent sessions:\n" + "\n".join(lines), "summaries")
            blocks += fit_block([note], int(budget.session_summaries * rest))
        if query:
            past = self.get_relevant_context(
                query,
                max_tokens=max(int(budget.relevant_past * rest) - 20, 0),
                user_id=session.user_id,
                exclude_session_id=session.id,
            )
            if past:
                note = self._context_message(self.format_context(past), "relevant")
                blocks += fit_block([note], int(budget.relevant_past * rest))
        return blocks

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
    ) -> list[Message]:
        """Async twin of :meth:`get_context`."""
        return await asyncio.to_thread(
            lambda: self.get_context(
                session_id,
                strategy,
                max_tokens,
                start_on_user=start_on_user,
                keep_last=keep_last,
                query=query,
                budget=budget,
                user_profile=user_profile,
            )
        )

    async def asummarize_session(self, session_id: str, *, until_id: int | None = None) -> Any:
        """Async twin of :meth:`summarize_session`."""
        return await asyncio.to_thread(
            lambda: self.summarize_session(session_id, until_id=until_id)
        )

    async def aend_session(self, session_id: str) -> Any:
        """Async twin of :meth:`end_session`."""
        return await asyncio.to_thread(self.end_session, session_id)

    async def asearch_summaries(
        self, query: str, top_k: int = 5, user_id: str | None = None
    ) -> list[tuple[Session, float]]:
        """Async twin of :meth:`search_summaries`."""
        return await asyncio.to_thread(self.search_summaries, query, top_k, user_id)

    # end of context strategies and session summaries ---------------------------------------
