"""MemoryManager's search side: hybrid retrieval, RAG context, backfill and reindex.

:class:`Searcher` is a part the manager composes: it holds the semantic memory (which a reindex
may switch on or to another model) and the :class:`~harombe_core.retrieval.Retriever` over
the store and that memory, re-made when the memory changes. Its search flows take the
retriever's own parameters (defined once, there); the manager's public methods forward to them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from harombe_core.derive import annotation_text, named_like
from harombe_core.errors import InvalidInputError
from harombe_core.flows import Flow, Work
from harombe_core.models import Message, SearchHit, Session
from harombe_core.owned import named_owner
from harombe_core.progress import Progress, check_progress
from harombe_core.retrieval import Retriever, check_search_options
from harombe_core.store.base import MessageStore
from harombe_core.validate import check_count, check_flag, check_list

#: Most messages one embedding batch may hold (a bigger one only costs memory).
MAX_BATCH_SIZE = 100_000

if TYPE_CHECKING:
    from harombe_core.config import MemoryConfig

__all__ = ["Searcher"]

P = ParamSpec("P")
T = TypeVar("T")

_SEARCH_DOC = """\
Hybrid (vector + keyword) search, best first, with scores; see ``Retriever.search``.

``top_k``, ``min_similarity``, ``temporal_decay`` and the weights default to the
``rag:`` config. Options: ``roles``, ``since``, ``until``, ``exclude_session_id``,
``temporal_decay``, ``mmr_lambda``, ``vector_weight``, ``keyword_weight``, and the
context evidence weights ``neighbor_weight``, ``session_weight``, ``speaker_weight``,
``time_weight``, ``length_weight``, ``statement_weight``, ``person_weight`` and
``feedback_weight`` (see :class:`~harombe_core.retrieval.RetrievalSettings`); ``now``
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
) -> Callable[Concatenate[Searcher, P], Flow[T]]:
    """The flow for the retriever's entry point ``template``, with its parameters (the
    retriever defines them once), run on :attr:`Searcher.retriever` in a worker.

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

    def flow(self: Searcher, /, *args: P.args, **kwargs: P.kwargs) -> Flow[T]:
        try:
            given = signature.bind(self, *args, **kwargs).arguments
        except TypeError as exc:  # what Python says of a bad call, naming the method
            raise TypeError(f"{method}() {exc}") from None
        if options_first:
            check_search_options(given.get("options", {}))
        if given.get("session_id") is not None:
            yield from named_owner(self.store, given["session_id"], given.get("user_id"))
        found: T = yield Work(getattr(self.retriever, method), *args, **kwargs)
        return found

    returns = f"Flow[{annotation_text(result)}]"
    named_like(flow, template, name=method + "_flow", doc=doc, returns=returns, owner="Searcher")
    return flow


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

    search_flow = _on_retriever(
        Retriever.search_similar,
        list[SearchHit],
        call="search",
        options_first=True,
        doc=_SEARCH_DOC,
    )
    search_similar_flow = _on_retriever(
        Retriever.search_similar,
        list[Message],
        options_first=True,
        doc="The messages most relevant to ``query``, best first, as saved.",
    )
    search_by_topic_flow = _on_retriever(
        Retriever.search_by_topic,
        list[Session],
        doc="Sessions that talk most about ``topic``, best first.",
    )
    get_relevant_context_flow = _on_retriever(
        Retriever.get_relevant_context,
        list[Message],
        doc="Relevant past messages that fit ``max_tokens`` (default ``rag.max_context_tokens``).",
    )

    @staticmethod
    def format_context(messages: Sequence[Message]) -> str:
        """Retrieved messages as the RAG system-prompt text, with dates and speakers."""
        from harombe_core.retrieval import format_context

        messages = check_list(messages, "format_context", of="messages", single=(Message,))
        if not all(isinstance(m, Message) for m in messages):
            raise InvalidInputError("format_context takes harombe Message objects only.")
        return format_context(messages)

    def backfill_embeddings_flow(
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

    def reindex_flow(
        self,
        batch_size: int = 100,
        *,
        embedding: Any = None,
        vector_store: Any = "database",
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

    def _rebuild_indexes(
        self, batch_size: int, embedding: Any, vector_store: Any, progress: Progress, reembed: bool
    ) -> dict[str, int]:
        keyword = self.store.rebuild_keyword_index()
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
