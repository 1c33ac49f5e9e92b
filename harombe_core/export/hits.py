"""A search hit as the plain metadata a framework's document or node carries.

The LangChain retriever's ``Document`` and the LlamaIndex retriever's ``TextNode`` say the same
things about a hit: which stored message it is, where it was said and when, and how well the
vector and keyword searches matched it. What they say is decided here once; each adapter only
names the score keys its framework's users know and adds what is its own.
"""

from __future__ import annotations

from typing import Any

from harombe_core.models import SearchHit

__all__ = ["hit_metadata"]


def hit_metadata(hit: SearchHit, *, vector_key: str, keyword_key: str) -> dict[str, Any]:
    """The hit's message id, session, role and time (ISO 8601), plus its vector and keyword
    scores under ``vector_key`` and ``keyword_key`` where that search matched it."""
    message = hit.message
    metadata: dict[str, Any] = {
        "message_id": message.id,
        "session_id": message.session_id,
        "role": message.role,
        "created_at": message.created_at.isoformat(),
    }
    if hit.vector_score is not None:
        metadata[vector_key] = hit.vector_score
    if hit.keyword_score is not None:
        metadata[keyword_key] = hit.keyword_score
    return metadata
