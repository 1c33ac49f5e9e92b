"""Recall for the LangChain side: which past turns may be added to what a model is sent.

The agent middleware and ``harombe chat`` both add relevant earlier turns (the user's and the
assistant's) to the model's system message. Which sessions may be searched is the part that
must not differ between them: a known user's other sessions, or, for a caller acting for nobody,
only this session's older turns (recall never crosses into sessions that are not known to be the
same user's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harombe_core.integration import Call, Flow, drive

if TYPE_CHECKING:  # `harombe chat --help` reads the default without loading the manager
    from harombe_core import MemoryManager
    from harombe_core.models import Message

__all__ = ["DEFAULT_RECALL_TOKENS", "recall", "recalling"]

#: Tokens of relevant past turns (the user's and the assistant's) added to the system message by
#: the agent middleware and ``harombe chat`` unless told otherwise; 0 turns recall off.
DEFAULT_RECALL_TOKENS = 500


def recall(
    manager: MemoryManager,
    query: str,
    *,
    session_id: str,
    user_id: str | None,
    max_tokens: int,
) -> list[Message]:
    """Past turns relevant to ``query`` that fit ``max_tokens``, best first (none for an empty
    query or budget)."""
    return drive(
        recalling(manager, query, session_id=session_id, user_id=user_id, max_tokens=max_tokens)
    )


def recalling(
    manager: MemoryManager,
    query: str,
    *,
    session_id: str,
    user_id: str | None,
    max_tokens: int,
) -> Flow[list[Message]]:
    """:func:`recall` as a flow (the agent middleware's async path awaits the manager's
    ``aget_relevant_context``)."""
    if max_tokens <= 0 or not query.strip():
        return []
    scope: dict[str, Any] = (
        {"session_id": session_id}
        if user_id is None
        else {"user_id": user_id, "exclude_session_id": session_id}
    )
    found: list[Message] = yield Call(
        manager.get_relevant_context,
        query,
        max_tokens=max_tokens,
        native=manager.aget_relevant_context,
        **scope,
    )
    return found
