"""MemoryManager's search side: hybrid retrieval, RAG context, backfill and reindex.

Kept apart from the session and message methods so each file reads as one job; the methods
delegate to :class:`~harombe_core.retrieval.Retriever` and the semantic indexer, and
:class:`~harombe_core.manager.MemoryManager` inherits them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harombe_core.errors import InvalidInputError
from harombe_core.models import Message, SearchHit, Session
from harombe_core.progress import Progress, check_progress
from harombe_core.store.base import MessageStore
from harombe_core.validate import check_count, check_flag, check_list

#: Most messages one embedding batch may hold (a bigger one only costs memory).
MAX_BATCH_SIZE = 100_000

if TYPE_CHECKING:
    from harombe_core.config import MemoryConfig
    from harombe_core.retrieval import Retriever

__all__ = ["SearchMethods"]


class SearchMethods:
    """Search, RAG context and index maintenance over the manager's store and semantic memory."""

    _store: MessageStore
    _semantic: Any
    _config: MemoryConfig | None
    _retriever_cache: Retriever | None

    if TYPE_CHECKING:

        @property
        def config(self) -> MemoryConfig: ...

        def check_owner(
            self, session_id: str, user_id: str | None, *, exact: bool = False
        ) -> Session | None: ...

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
        ``temporal_decay``, ``mmr_lambda``, ``vector_weight``, ``keyword_weight``, and the
        context evidence weights ``neighbor_weight``, ``session_weight``, ``speaker_weight``,
        ``time_weight`` (see :class:`~harombe_core.retrieval.RetrievalSettings`); ``now``
        anchors relative times in the query ("last week"). Without semantic memory this is
        keyword (BM25) search and ``retriever.mode == "keyword"``.
        Given both ``session_id`` and ``user_id``, the session must be that user's (else
        SessionOwnershipError), as everywhere a user names a session.
        """
        from harombe_core.retrieval import check_search_options

        check_search_options(options)
        self._check_scope(session_id, user_id)
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
        self._check_scope(session_id, user_id)
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
        self._check_scope(session_id, user_id)
        return self.retriever.get_relevant_context(
            query, max_tokens, session_id, user_id, exclude_session_id, **options
        )

    def _check_scope(self, session_id: str | None, user_id: str | None) -> None:
        """A search naming a user and a session: the session must be the user's. (The store
        scopes the hits either way; this makes the mistake an error instead of no hits.)"""
        if session_id is not None and user_id is not None:
            self.check_owner(session_id, user_id)

    @staticmethod
    def format_context(messages: Sequence[Message]) -> str:
        """Retrieved messages as the RAG system-prompt text, with dates and speakers."""
        from harombe_core.retrieval import format_context

        messages = check_list(messages, "format_context", of="messages", single=(Message,))
        if not all(isinstance(m, Message) for m in messages):
            raise InvalidInputError("format_context takes harombe Message objects only.")
        return format_context(messages)

    def backfill_embeddings(self, batch_size: int = 100, *, progress: Progress = True) -> int:
        """Embed every message not yet embedded (with a progress bar); returns how many.

        ``progress`` as for :meth:`flush`. Raises InvalidInputError when semantic memory is off
        (nothing to embed with).
        """
        check_count(batch_size, "batch_size", low=1, high=MAX_BATCH_SIZE)
        check_progress(progress)
        return self._require_semantic("backfill_embeddings").backfill(batch_size, progress=progress)

    def reindex(
        self,
        batch_size: int = 100,
        *,
        embedding: Any = None,
        vector_store: Any = "chroma",
        progress: Progress = True,
        reembed: bool = False,
    ) -> dict[str, int]:
        """Rebuild the keyword and vector indexes from the store; safe to repeat.

        Pass ``embedding`` to switch to another model (every message is embedded again);
        otherwise vectors kept in SQLite are re-inserted without running the model.
        ``progress`` as for :meth:`flush` (a bar by default).
        """
        check_count(batch_size, "batch_size", low=1, high=MAX_BATCH_SIZE)
        check_progress(progress)
        check_flag(reembed, "reembed")
        keyword = self._store.rebuild_keyword_index()
        from harombe_core.vectors.indexer import resolve_embedder_spec

        embedder = None if embedding is None else resolve_embedder_spec(embedding)
        if self._semantic is None:
            from harombe_core.vectors.shared import acquire_semantic

            self._semantic = acquire_semantic(
                self._store,
                embedding="default" if embedder is None else embedder,
                vector_store=vector_store,
                config=self._config,
                allow_model_change=True,
            )
        # The semantic memory is shared by every manager on this database in this process:
        # switching its model switches it for all of them.
        vectors = self._semantic.reindex(
            batch_size, progress=progress, reembed=reembed, embedder=embedder
        )
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

    async def abackfill_embeddings(
        self, batch_size: int = 100, *, progress: Progress = True
    ) -> int:
        return await asyncio.to_thread(self.backfill_embeddings, batch_size, progress=progress)

    async def areindex(self, batch_size: int = 100, **kwargs: Any) -> dict[str, int]:
        return await asyncio.to_thread(self.reindex, batch_size, **kwargs)
