"""Recall of past messages for the retriever, the memory block and RAG in ``HarombeMemory``.

One place decides how a query becomes scored messages: the manager's hybrid search (meaning and
keywords) when it has one, else the store's keyword index alone. Scoping is passed down to the
store, which enforces it; a session excluded from recall (the one being talked in, whose
messages are already in the window) is filtered here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from harombe_core.manager import MemoryManager
from harombe_core.models import SearchHit
from harombe_core.store.base import SearchScope

__all__ = ["arecall", "format_context", "recall"]


def recall(
    manager: MemoryManager,
    query: str,
    *,
    top_k: int,
    session_id: str | None = None,
    user_id: str | None = None,
    exclude_session_id: str | None = None,
) -> list[SearchHit]:
    """The ``top_k`` best messages for ``query`` within the scope, best first."""
    if not query.strip() or top_k <= 0:
        return []
    wanted = top_k * 3 if exclude_session_id is not None else top_k
    search = getattr(manager, "search", None)
    if callable(search):
        hits: list[SearchHit] = list(
            search(query, top_k=wanted, session_id=session_id, user_id=user_id)
        )
    else:
        scope = SearchScope(user_id=user_id, session_id=session_id)
        hits = [
            SearchHit(message=h.message, score=h.score, keyword_score=h.score)
            for h in manager.store.keyword_search(query, limit=wanted, scope=scope)
        ]
    if exclude_session_id is not None:
        hits = [h for h in hits if h.message.session_id != exclude_session_id]
    return hits[:top_k]


async def arecall(
    manager: MemoryManager,
    query: str,
    *,
    top_k: int,
    session_id: str | None = None,
    user_id: str | None = None,
    exclude_session_id: str | None = None,
) -> list[SearchHit]:
    """Async twin of :func:`recall` (the search runs on a worker thread)."""
    return await asyncio.to_thread(
        recall,
        manager,
        query,
        top_k=top_k,
        session_id=session_id,
        user_id=user_id,
        exclude_session_id=exclude_session_id,
    )


HEADER = "Relevant context from earlier conversations:"


def format_context(hits: Sequence[SearchHit], manager: MemoryManager, max_tokens: int) -> str:
    """The hits as one block of text for a system message, cut to ``max_tokens``.

    Oldest first, each line dated and attributed, so the model reads recalled turns as history
    and not as instructions. Returns "" when nothing fits.
    """
    counter: Any = manager.token_counter
    lines: list[str] = []
    used = counter.count_text(HEADER) + 3
    for hit in sorted(hits, key=lambda h: h.message.created_at):
        m = hit.message
        line = f"[{m.created_at:%Y-%m-%d}] {m.role}: {m.content}"
        cost = counter.count_text(line) + 1
        if used + cost > max_tokens:
            continue
        lines.append(line)
        used += cost
    if not lines:
        return ""
    return "\n".join([HEADER, *lines])
