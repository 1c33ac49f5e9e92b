"""``HarombeRetriever``: past messages as LlamaIndex nodes, for any engine that takes a retriever.

Each hit becomes a ``TextNode`` whose text is the message (``role: content``) and whose metadata
says where it came from (session, role, time, message id), scored by harombe's hybrid search.
Plug it into ``CondensePlusContextChatEngine`` or ``ContextChatEngine`` to answer from what was
said in earlier conversations.
"""

from __future__ import annotations

import os
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType, TextNode

from harombe_core import MemoryManager
from harombe_core.errors import InvalidInputError
from harombe_core.integration import Call, Flow, adrive, check_search_scope, drive, hit_metadata
from harombe_core.models import SearchHit
from harombe_core.validate import check_count, check_query, keywords_checked, optional_id
from llamaindex_harombe._owned import OwnedManager
from llamaindex_harombe.memory import (
    DEFAULT_EMBEDDING,
    DEFAULT_STORAGE_PATH,
    DEFAULT_VECTOR_STORE,
)

__all__ = ["HarombeRetriever", "hit_to_node"]

_HIDDEN_FROM_LLM = ["message_id", "session_id", "role", "name", "score_vector", "score_keyword"]


def hit_to_node(hit: SearchHit) -> NodeWithScore:
    """One search hit as a scored node (stable id: the message's id)."""
    m = hit.message
    metadata = hit_metadata(hit, vector_key="score_vector", keyword_key="score_keyword")
    if m.name:
        metadata["name"] = m.name
    node = TextNode(
        id_=f"harombe-message-{m.id}",
        text=f"{m.role}: {m.content}",
        metadata=metadata,
        excluded_llm_metadata_keys=list(_HIDDEN_FROM_LLM),
        excluded_embed_metadata_keys=list(metadata),
    )
    return NodeWithScore(node=node, score=float(hit.score))


def _checked(query: Any) -> QueryType:
    """A query LlamaIndex's retrieve can take: a str, or a QueryBundle of one (checked text)."""
    if isinstance(query, QueryBundle):
        check_query(query.query_str)
        return query
    if not isinstance(query, str):
        raise InvalidInputError(
            f"retrieve takes a query string or a QueryBundle, got {type(query).__name__}."
        )
    return check_query(query)


class HarombeRetriever(OwnedManager, BaseRetriever):
    """Retrieves past messages relevant to a query.

    Scope it with ``session_id`` (one conversation) or ``user_id`` (everything a user said, the
    store enforces it); one of them is required unless ``all_users=True`` (a single-user
    application), so a retriever never hands one user's messages to another by default. With
    both, the session must be the user's, and a session named without a user must have no
    owner (``SessionOwnershipError`` otherwise).
    ``exclude_session_id`` leaves out the conversation in progress, whose messages the engine's
    memory already shows the model. Opened from a ``storage_path``, it searches by meaning and by
    keyword with the bundled offline model (``embedding=None``: keywords only).
    """

    @keywords_checked
    def __init__(
        self,
        *,
        manager: MemoryManager | None = None,
        storage_path: str | os.PathLike[str] | None = None,
        embedding: str | None = DEFAULT_EMBEDDING,
        vector_store: str | None = DEFAULT_VECTOR_STORE,
        top_k: int = 5,
        session_id: str | None = None,
        user_id: str | None = None,
        exclude_session_id: str | None = None,
        all_users: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if manager is not None and storage_path is not None:
            raise InvalidInputError("pass storage_path or manager, not both.")
        check_count(top_k, "top_k")
        for name, value in (
            ("session_id", session_id),
            ("user_id", user_id),
            ("exclude_session_id", exclude_session_id),
        ):
            optional_id(value, name)
        check_search_scope("HarombeRetriever", user_id, session_id, all_users)
        self._take_manager(manager, storage_path or DEFAULT_STORAGE_PATH, embedding, vector_store)
        self.top_k = top_k
        self.session_id = session_id
        self.user_id = user_id
        self.exclude_session_id = exclude_session_id
        self.all_users = all_users
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def retrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        """Past messages relevant to a query string or ``QueryBundle``, best first."""
        return super().retrieve(_checked(str_or_query_bundle))

    async def aretrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        """Async twin of :meth:`retrieve`."""
        return await super().aretrieve(_checked(str_or_query_bundle))

    def _search_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {
            "top_k": self.top_k,
            "session_id": self.session_id,
            "user_id": self.user_id,
        }
        if self.exclude_session_id is not None:
            args["exclude_session_id"] = self.exclude_session_id
        return args

    def _nodes(self, query_bundle: QueryBundle) -> Flow[list[NodeWithScore]]:
        """:meth:`_retrieve` written once over the manager's sync/async pairs, so the async
        path reads the store one operation per worker-thread hop. A session named without a
        user must have no owner (see ``check_search_scope``)."""
        if not query_bundle.query_str.strip():
            return []
        m = self._manager
        if self.session_id is not None and not self.all_users:
            yield Call(
                m.check_owner, self.session_id, self.user_id, exact=True, native=m.acheck_owner
            )
        hits: list[SearchHit] = yield Call(
            m.search, query_bundle.query_str, native=m.asearch, **self._search_args()
        )
        return [hit_to_node(h) for h in hits]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return drive(self._nodes(query_bundle))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await adrive(self._nodes(query_bundle))
