"""A checksum of a session that does not depend on the ids a backend assigned.

Migration verifies a copy with it: two stores hold the same session when every field of the
session and of each message matches, threads expressed as positions in the session.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from harombe_core.models import Message, Session
from harombe_core.store import ops
from harombe_core.store.base import MessageStore

__all__ = ["session_checksum"]


def _canonical(message: Message, position: dict[int, int], summary: Any) -> list[Any]:
    parent = message.parent_id
    return [
        message.role,
        message.content,
        message.name,
        message.tool_calls,
        message.tool_call_id,
        message.metadata,
        message.created_at.isoformat(),
        message.token_count,
        None if parent is None else position.get(parent, f"external:{parent}"),
        summary,
    ]


def session_checksum(store: MessageStore, session: Session) -> tuple[int, str]:
    """(message count, SHA-256) of a session, independent of the ids the backend assigned."""
    messages = store.run(ops.get_messages(session.id))
    position = {int(m.id or 0): n for n, m in enumerate(messages)}
    summaries = store.run(ops.get_message_summaries([int(m.id or 0) for m in messages]))
    digest = hashlib.sha256()
    head = [
        session.id,
        session.user_id,
        session.system_prompt,
        store.run(ops.system_prompt_tokens(session.id)),
        session.metadata,
        session.created_at.isoformat(),
        session.summary,
        session.summary_data,
        None if session.summary_until_id is None else position.get(session.summary_until_id),
    ]
    digest.update(json.dumps(head, sort_keys=True, ensure_ascii=False).encode())
    for message in messages:
        row = _canonical(message, position, summaries.get(int(message.id or 0)))
        digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode())
    return len(messages), digest.hexdigest()
