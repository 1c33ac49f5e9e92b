"""MemoryManager's search side: hybrid retrieval, RAG context, backfill and reindex.

:class:`Searcher` is a part the manager composes: it holds the semantic memory (which a reindex
may switch on or to another model) and the :class:`~harombe_core.retrieval.Retriever` over
the store and that memory, re-made when the memory changes. Its search flows take the
retriever's own parameters (defined once, there); the manager's public methods forward to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harombe_core.context_reads import named_owner
from harombe_core.errors import InvalidInputError
from harombe_core.flows import Flow, Work
from harombe_core.models import Message, SearchHit, Session
from harombe_core.progress import Progress, check_progress
from harombe_core.retrieval import Retriever, check_search_options
from harombe_core.store import ops
from harombe_core.store.base import MessageStore
from harombe_core.validate import check_count, check_flag, check_list

#: Most messages one embedding batch may hold (a bigger one only costs memory).
MAX_BATCH_SIZE = 100_000

if TYPE_CHECKING:
    from harombe_core.config import MemoryConfig

__all__ = ["Searcher"]


class Searcher:
    """Search, RAG context and index maintenance over a store and its semantic memory.

    ``semantic`` is the store's semantic memory (shared by every manager on the database in
    this process), or None for keyword search only; a reindex may switch it on. ``config``
    is the configuration the manager was given (None: the defaults).
    """

    def __init__(self, store: MessageStore, semantic: Any, config: MemoryConfig | None) -> None:
        self.store = store
        self.semantic = semantic
        #: The configuration given, or the defaults once :attr:`config` was asked for.
        self.configured = config
        self._retriever: Retriever | None = None

    @property
    def config(self) -> MemoryConfig:
        """The configuration in force (defaults if none was given)."""
        if self.configured is None:
            from harombe_core.config import MemoryConfig

            self.configured = MemoryConfig()
        return self.configured

    @property
    def embedder(self) -> Any:
        """The embedder of semantic memory (an ``Embedder``), or None when it is off."""
        return None if self.semantic is None else self.semantic.embedder

    @property
    def vector_store(self) -> str | None:
        """The vector store semantic search uses, as named: ``"database"`` (the default: the
        vectors inside the database), ``"chroma"``, ``"pgvector"``, ``"custom"`` (an index
        object); None when semantic memory is off."""
        return None if self.semantic is None else self.semantic.vector_store

    @property
    def retriever(self) -> Retriever:
        """The hybrid retriever over this store; keyword-only when semantic memory is off."""
        from harombe_core.retrieval import RetrievalSettings

        cached = self._retriever
        if cached is None or cached.semantic is not self.semantic:
            settings = RetrievalSettings.from_config(self.config.rag)
            cached = Retriever(self.store, self.semantic, settings)
            self._retriever = cached
        return cached

    def search(
        self,
        query: str,
        top_k: int | None,
        session_id: str | None,
        user_id: str | None,
        min_similarity: float | None,
        **options: Any,
    ) -> Flow[list[SearchHit]]:
        """The flow of ``MemoryManager.search``: an unknown option is refused first, then a
        session named for a user must be that user's (the store scopes the hits either way;
        this makes the mistake an error instead of no hits)."""
        check_search_options(options)
        yield from self._owned(session_id, user_id)
        search = self.retriever.search_flow
        return (yield from search(query, top_k, session_id, user_id, min_similarity, **options))

    def search_by_topic(
        self, topic: str, top_k: int | None, user_id: str | None, **options: Any
    ) -> Flow[list[Session]]:
        """The flow of ``MemoryManager.search_by_topic``."""
        return (yield from self.retriever.search_by_topic_flow(topic, top_k, user_id, **options))

    def get_relevant_context(
        self,
        query: str,
        max_tokens: int | None,
        session_id: str | None,
        user_id: str | None,
        exclude_session_id: str | None,
        **options: Any,
    ) -> Flow[list[Message]]:
        """The flow of ``MemoryManager.get_relevant_context``."""
        yield from self._owned(session_id, user_id)
        context = self.retriever.get_relevant_context_flow
        return (
            yield from context(
                query, max_tokens, session_id, user_id, exclude_session_id, **options
            )
        )

    def _owned(self, session_id: str | None, user_id: str | None) -> Flow[None]:
        if session_id is not None:
            yield from named_owner(self.store, session_id, user_id)

    @staticmethod
    def format_context(messages: Sequence[Message]) -> str:
        """Retrieved messages as the RAG system-prompt text, with dates and speakers."""
        from harombe_core.retrieval import format_context

        messages = check_list(messages, "format_context", of="messages", single=(Message,))
        if not all(isinstance(m, Message) for m in messages):
            raise InvalidInputError("format_context takes harombe Message objects only.")
        return format_context(messages)

    def backfill_embeddings(self, batch_size: int, progress: Progress) -> Flow[int]:
        """The flow of ``MemoryManager.backfill_embeddings`` (InvalidInputError when semantic
        memory is off: nothing to embed with)."""
        check_count(batch_size, "batch_size", low=1, high=MAX_BATCH_SIZE)
        check_progress(progress)
        semantic = self._require_semantic("backfill_embeddings")
        embedded: int = yield Work(semantic.backfill, batch_size, progress=progress)
        return embedded

    def reindex(
        self,
        batch_size: int,
        embedding: Any,
        vector_store: Any,
        progress: Progress,
        reembed: bool,
    ) -> Flow[dict[str, int]]:
        """The flow of ``MemoryManager.reindex``: the keyword and vector indexes rebuilt from
        the store (with ``embedding``, by another model)."""
        check_count(batch_size, "batch_size", low=1, high=MAX_BATCH_SIZE)
        check_progress(progress)
        check_flag(reembed, "reembed")
        counts: dict[str, int] = yield Work(
            self._rebuild_indexes, batch_size, embedding, vector_store, progress, reembed
        )
        return counts

    def _rebuild_indexes(
        self, batch_size: int, embedding: Any, vector_store: Any, progress: Progress, reembed: bool
    ) -> dict[str, int]:
        keyword = self.store.run(ops.rebuild_keyword_index())
        from harombe_core.vectors.choice import resolve_embedder_spec

        embedder = None if embedding is None else resolve_embedder_spec(embedding)
        if self.semantic is None:
            from harombe_core.vectors.shared import acquire_semantic

            self.semantic = acquire_semantic(
                self.store,
                embedding="default" if embedder is None else embedder,
                vector_store=vector_store,
                config=self.configured,
                allow_model_change=True,
            )
        # The semantic memory is shared by every manager on this database in this process:
        # switching its model switches it for all of them.
        vectors = self.semantic.reindex(
            batch_size, progress=progress, reembed=reembed, embedder=embedder
        )
        return {"keyword_rows": keyword, "vectors": vectors}

    def _require_semantic(self, what: str) -> Any:
        if self.semantic is None:
            raise InvalidInputError(
                f"{what} needs semantic memory; open the MemoryManager with "
                "embedding='default' (and a vector_store, 'database' by default)."
            )
        return self.semantic
