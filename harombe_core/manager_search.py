"""MemoryManager's search side: hybrid retrieval, RAG context, backfill and reindex.

Kept apart from the session and message methods so each file reads as one job; the methods
delegate to :class:`~harombe_core.retrieval.Retriever` and the semantic indexer, and
:class:`~harombe_core.manager.MemoryManager` inherits them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from harombe_core.errors import InvalidInputError
from harombe_core.flows import Flow, Work, twins
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

S = TypeVar("S")
P = ParamSpec("P")


def _messages_only(
    search: Callable[Concatenate[S, P], Flow[list[SearchHit]]],
) -> Callable[Concatenate[S, P], Flow[list[Message]]]:
    """``search`` returning only the messages (each as it was saved), with its arguments:
    ``search_similar`` is ``search`` without the scores, so it cannot drift from it."""

    @functools.wraps(search)
    def _search_similar(self: S, /, *args: P.args, **kwargs: P.kwargs) -> Flow[list[Message]]:
        hits = yield from search(self, *args, **kwargs)
        return [hit.message for hit in hits]

    signature = inspect.signature(search).replace(return_annotation="Flow[list[Message]]")
    setattr(_search_similar, "__signature__", signature)  # noqa: B010 - not a declared attribute
    _search_similar.__doc__ = "The messages most relevant to ``query``, best first, as saved."
    _search_similar.__name__ = "_search_similar"
    _search_similar.__qualname__ = search.__qualname__.rpartition(".")[0] + "._search_similar"
    return _search_similar


class SearchMethods:
    """Search, RAG context and index maintenance over the manager's store and semantic memory."""

    _store: MessageStore
    _semantic: Any
    _config: MemoryConfig | None
    _retriever_cache: Retriever | None

    if TYPE_CHECKING:

        @property
        def config(self) -> MemoryConfig: ...

        def _owner_named(self, session_id: str, user_id: str | None) -> Flow[None]: ...

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

    def _search(
        self,
        query: str,
        top_k: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        min_similarity: float | None = None,
        **options: Any,
    ) -> Flow[list[SearchHit]]:
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
        yield from self._check_scope(session_id, user_id)
        hits: list[SearchHit] = yield Work(
            self.retriever.search, query, top_k, session_id, user_id, min_similarity, **options
        )
        return hits

    search, asearch = twins(_search)

    search_similar, asearch_similar = twins(_messages_only(_search))

    def _search_by_topic(
        self, topic: str, top_k: int | None = None, user_id: str | None = None, **options: Any
    ) -> Flow[list[Session]]:
        """Sessions that talk most about ``topic``, best first."""
        sessions: list[Session] = yield Work(
            self.retriever.search_by_topic, topic, top_k, user_id, **options
        )
        return sessions

    search_by_topic, asearch_by_topic = twins(_search_by_topic)

    def _get_relevant_context(
        self,
        query: str,
        max_tokens: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        exclude_session_id: str | None = None,
        **options: Any,
    ) -> Flow[list[Message]]:
        """Relevant past messages that fit ``max_tokens`` (default ``rag.max_context_tokens``)."""
        yield from self._check_scope(session_id, user_id)
        messages: list[Message] = yield Work(
            self.retriever.get_relevant_context,
            query,
            max_tokens,
            session_id,
            user_id,
            exclude_session_id,
            **options,
        )
        return messages

    get_relevant_context, aget_relevant_context = twins(_get_relevant_context)

    def _check_scope(self, session_id: str | None, user_id: str | None) -> Flow[None]:
        """A search naming a user and a session: the session must be the user's. (The store
        scopes the hits either way; this makes the mistake an error instead of no hits.)"""
        if session_id is not None:
            yield from self._owner_named(session_id, user_id)

    @staticmethod
    def format_context(messages: Sequence[Message]) -> str:
        """Retrieved messages as the RAG system-prompt text, with dates and speakers."""
        from harombe_core.retrieval import format_context

        messages = check_list(messages, "format_context", of="messages", single=(Message,))
        if not all(isinstance(m, Message) for m in messages):
            raise InvalidInputError("format_context takes harombe Message objects only.")
        return format_context(messages)

    def _backfill_embeddings(
        self, batch_size: int = 100, *, progress: Progress = True
    ) -> Flow[int]:
        """Embed every message not yet embedded (with a progress bar); returns how many.

        ``progress`` as for :meth:`flush`. Raises InvalidInputError when semantic memory is off
        (nothing to embed with).
        """
        check_count(batch_size, "batch_size", low=1, high=MAX_BATCH_SIZE)
        check_progress(progress)
        semantic = self._require_semantic("backfill_embeddings")
        embedded: int = yield Work(semantic.backfill, batch_size, progress=progress)
        return embedded

    backfill_embeddings, abackfill_embeddings = twins(_backfill_embeddings)

    def _reindex(
        self,
        batch_size: int = 100,
        *,
        embedding: Any = None,
        vector_store: Any = "chroma",
        progress: Progress = True,
        reembed: bool = False,
    ) -> Flow[dict[str, int]]:
        """Rebuild the keyword and vector indexes from the store; safe to repeat.

        Pass ``embedding`` to switch to another model (every message is embedded again);
        otherwise vectors kept in SQLite are re-inserted without running the model.
        ``progress`` as for :meth:`flush` (a bar by default).
        """
        check_count(batch_size, "batch_size", low=1, high=MAX_BATCH_SIZE)
        check_progress(progress)
        check_flag(reembed, "reembed")
        counts: dict[str, int] = yield Work(
            self._rebuild_indexes, batch_size, embedding, vector_store, progress, reembed
        )
        return counts

    reindex, areindex = twins(_reindex)

    def _rebuild_indexes(
        self, batch_size: int, embedding: Any, vector_store: Any, progress: Progress, reembed: bool
    ) -> dict[str, int]:
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
