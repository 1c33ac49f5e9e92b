"""HarombeRetriever: past conversation turns as LangChain ``Document``s.

It asks the core for search hits (by meaning, by keyword, or both fused) scoped to a user or a
session, and turns each hit into a Document whose metadata says where the turn came from and
how well it matched, so a RAG prompt can cite it and a filter can drop weak matches.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, field_validator

from harombe_core import MemoryManager
from harombe_core.errors import InvalidInputError
from harombe_core.integration import (
    Call,
    Flow,
    Work,
    adrive,
    check_search_scope,
    drive,
    hit_metadata,
    install_command,
)
from harombe_core.models import SearchHit
from harombe_core.validate import MAX_TOP_K, check_count, known_arguments, pydantic_errors
from langchain_harombe.history import resolve_manager

__all__ = ["HarombeRetriever", "SearchType", "hit_to_document"]

SearchType = Literal["hybrid", "similarity", "mmr"]


def hit_to_document(hit: SearchHit) -> Document:
    """A Document for one hit; ``metadata`` carries provenance and scores."""
    message = hit.message
    metadata = hit_metadata(hit, vector_key="vector_score", keyword_key="keyword_score")
    metadata["name"] = message.name
    metadata["score"] = hit.score
    return Document(
        page_content=message.content,
        metadata=metadata,
        id=None if message.id is None else str(message.id),
    )


class HarombeRetriever(BaseRetriever):
    """Retrieve stored messages relevant to a query.

    Args:
        manager: A :class:`~harombe_core.MemoryManager` (share the application's one), or
        storage_path: a database path; the retriever then opens its own manager with
            ``manager_options`` (semantic memory on by default, as in ``MemoryManager``).
        k: How many documents to return; ``retriever.invoke(query, k=2)`` overrides it per call.
        user_id / session_id: Only this user's / this session's messages are searched (enforced
            by the store, whatever the vector index returns). One of them is required unless
            ``all_users=True``. With both, the session must be the user's, and a session named
            without a user must have no owner (``SessionOwnershipError`` otherwise).
        all_users: Search every user's sessions (a single-user application, or an operator's
            tool). Off by default, so a retriever built without a user never returns another
            user's messages.
        min_similarity: Drop hits whose cosine similarity is below this (semantic memory only).
        exclude_session_id: Search everywhere but this session (typically the current one).
        search_type: ``"hybrid"`` (vector + keyword, fused; keyword only when semantic memory is
            off), ``"similarity"`` (vector only) or ``"mmr"`` (hybrid, then diversified by
            maximal marginal relevance with ``mmr_lambda``; 1.0 is pure relevance).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    manager: MemoryManager | None = None
    storage_path: str | None = None
    k: int = Field(default=4, ge=0)
    user_id: str | None = None
    session_id: str | None = None
    min_similarity: float | None = None
    search_type: SearchType = "hybrid"
    mmr_lambda: float = Field(default=0.5, ge=0.0, le=1.0)
    exclude_session_id: str | None = None
    all_users: bool = False
    manager_options: dict[str, Any] = Field(default_factory=dict)

    _manager: MemoryManager | None = PrivateAttr(default=None)

    @field_validator("storage_path", mode="before")
    @classmethod
    def _path_to_str(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    def __init__(self, **data: Any) -> None:
        # LangChain's retrievers ignore an unknown field: a misspelt ``top_k`` would be dropped.
        known_arguments("HarombeRetriever", type(self).model_fields, data)
        with pydantic_errors("HarombeRetriever"):  # a bad field is an InvalidInputError too
            super().__init__(**data)
        # Here rather than in a pydantic validator, which would wrap the typed error.
        check_search_scope("HarombeRetriever", self.user_id, self.session_id, self.all_users)

    def _memory(self) -> MemoryManager:
        if self._manager is None:
            self._manager, _ = resolve_manager(
                self.manager,
                self.storage_path,
                self.manager_options,
                owner="HarombeRetriever",
            )
        return self._manager

    def _k(self, overrides: dict[str, Any]) -> int:
        k = check_count(overrides.pop("k", self.k), "k")
        if overrides:
            raise InvalidInputError(
                f"unknown retriever arguments {sorted(overrides)}; only k can be overridden."
            )
        return k

    def search_hits(self, query: str, k: int) -> list[SearchHit]:
        """The scored hits behind :meth:`invoke` (useful to inspect scores directly)."""
        return drive(self._search_hits(query, k))

    async def asearch_hits(self, query: str, k: int) -> list[SearchHit]:
        """The scored hits behind :meth:`ainvoke` (async twin of :meth:`search_hits`)."""
        return await adrive(self._search_hits(query, k))

    def _search_hits(self, query: str, k: int) -> Flow[list[SearchHit]]:
        """:meth:`search_hits` written once, over the manager's sync/async pairs (so the async
        path reads the store one operation per worker-thread hop, never a whole call)."""
        k = check_count(k, "k", high=MAX_TOP_K)  # a public method: None is no "default" here
        # Opening a manager from storage_path opens files: off the event loop when async.
        if self._manager is None and self.storage_path is not None:
            yield Work(self._memory)
        manager = self._memory()
        if k == 0:
            return []
        if self.session_id is not None and not self.all_users:
            # A session named without a user must have no owner (see check_search_scope).
            yield Call(
                manager.check_owner,
                self.session_id,
                self.user_id,
                exact=True,
                native=manager.acheck_owner,
            )
        options: dict[str, Any] = {}
        if self.exclude_session_id is not None:
            options["exclude_session_id"] = self.exclude_session_id
        if self.search_type != "hybrid":
            if not manager.semantic_enabled:
                raise InvalidInputError(
                    f"search_type={self.search_type!r} needs semantic memory, which this "
                    "manager does not have; open it with embedding='default' "
                    f"({install_command('onnx')}) or use search_type='hybrid' (keyword only)."
                )
            if self.search_type == "similarity":
                options["keyword_weight"] = 0.0
            else:
                options["mmr_lambda"] = self.mmr_lambda
        # A message with no text (an assistant turn that only called a tool) is no document:
        # leave it out, and ask for more hits until k with text are found or none are left.
        top_k = k
        while True:
            hits: list[SearchHit] = yield Call(
                manager.search,
                query,
                top_k=top_k,
                session_id=self.session_id,
                user_id=self.user_id,
                min_similarity=self.min_similarity,
                native=manager.asearch,
                **options,
            )
            texts = [h for h in hits if h.message.content.strip()]
            if len(texts) >= k or len(hits) < top_k or top_k >= MAX_TOP_K:
                return texts[:k]
            top_k = min(top_k * 2, MAX_TOP_K)  # the most one search returns

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k = self._k(dict(kwargs))
        return [hit_to_document(h) for h in self.search_hits(query, k)]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k = self._k(dict(kwargs))
        hits = await self.asearch_hits(query, k)
        return [hit_to_document(h) for h in hits]

    def close(self) -> None:
        """Close the manager this retriever opened from ``storage_path`` (not a shared one)."""
        if self._manager is not None and self.manager is None:
            self._manager.close()
        self._manager = None
