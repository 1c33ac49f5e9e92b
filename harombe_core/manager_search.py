"""MemoryManager's search side: hybrid retrieval, RAG context, backfill and reindex.

Kept apart from the session and message methods so each file reads as one job; the methods
delegate to :class:`~harombe_core.retrieval.Retriever` and the semantic indexer, and
:class:`~harombe_core.manager.MemoryManager` inherits them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from harombe_core.derive import annotation_text, named_like
from harombe_core.errors import InvalidInputError
from harombe_core.flows import Flow, Work, twins
from harombe_core.models import Message, SearchHit, Session
from harombe_core.progress import Progress, check_progress
from harombe_core.retrieval import Retriever, check_search_options
from harombe_core.store.base import MessageStore
from harombe_core.validate import check_count, check_flag, check_list

#: Most messages one embedding batch may hold (a bigger one only costs memory).
MAX_BATCH_SIZE = 100_000

if TYPE_CHECKING:
    from harombe_core.config import MemoryConfig

__all__ = ["SearchMethods"]

P = ParamSpec("P")
T = TypeVar("T")

_SEARCH_DOC = """\
Hybrid (vector + keyword) search, best first, with scores; see ``Retriever.search``.

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


def _on_retriever(
    template: Callable[Concatenate[Retriever, P], Any],
    result: type[T],
    *,
    doc: str,
    call: str | None = None,
    options_first: bool = False,
) -> Callable[Concatenate[SearchMethods, P], Flow[T]]:
    """The manager's flow for the retriever's entry point ``template``, with its parameters
    (the retriever defines them once), run on :attr:`SearchMethods.retriever` in a worker.

    ``call`` names the retriever method to run when it is not ``template`` itself: the
    manager's ``search`` takes ``search_similar``'s arguments (the options as keywords) and
    runs ``search``, which keeps the scores. ``result`` is what the flow returns. A search
    naming a session first checks that the session is the user's, as every manager method
    does (the store scopes the hits either way; this makes the mistake an error instead of no
    hits); ``options_first`` refuses an unknown option before that check. Everything else is
    checked where it is used, by the retriever.
    """
    signature = inspect.signature(template)
    method = call or template.__name__

    def flow(self: SearchMethods, /, *args: P.args, **kwargs: P.kwargs) -> Flow[T]:
        try:
            given = signature.bind(self, *args, **kwargs).arguments
        except TypeError as exc:  # what Python says of a bad call, naming the method
            raise TypeError(f"{method}() {exc}") from None
        if options_first:
            check_search_options(given.get("options", {}))
        if given.get("session_id") is not None:
            yield from self._owner_named(given["session_id"], given.get("user_id"))
        found: T = yield Work(getattr(self.retriever, method), *args, **kwargs)
        return found

    returns = f"Flow[{annotation_text(result)}]"
    named_like(flow, template, name="_" + method, doc=doc, returns=returns, owner="SearchMethods")
    return flow


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
        from harombe_core.retrieval import RetrievalSettings

        cached = getattr(self, "_retriever_cache", None)
        if cached is None or cached.semantic is not self._semantic:
            settings = RetrievalSettings.from_config(self.config.rag)
            cached = Retriever(self._store, self._semantic, settings)
            self._retriever_cache = cached
        return cached

    search, asearch = twins(
        _on_retriever(
            Retriever.search_similar,
            list[SearchHit],
            call="search",
            options_first=True,
            doc=_SEARCH_DOC,
        )
    )
    search_similar, asearch_similar = twins(
        _on_retriever(
            Retriever.search_similar,
            list[Message],
            options_first=True,
            doc="The messages most relevant to ``query``, best first, as saved.",
        )
    )
    search_by_topic, asearch_by_topic = twins(
        _on_retriever(
            Retriever.search_by_topic,
            list[Session],
            doc="Sessions that talk most about ``topic``, best first.",
        )
    )
    get_relevant_context, aget_relevant_context = twins(
        _on_retriever(
            Retriever.get_relevant_context,
            list[Message],
            doc="Relevant past messages that fit ``max_tokens`` "
            "(default ``rag.max_context_tokens``).",
        )
    )

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
