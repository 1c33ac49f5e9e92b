"""The hybrid and threaded windows read from a store in O(window) rows.

:func:`~harombe_core.strategies.hybrid_window` and
:func:`~harombe_core.strategies.thread_path_newest_first` decide from a whole session; read that
way, a context of 2,000 tokens costs O(history) (seconds and a hundred MB at 200,000 messages).
The functions here give the very same windows from the rows the window can use: the newest
``keep_last`` messages and the important ones that still fit (a page at a time, through an
index that holds only important messages), or the thread of the newest message up to one
message past the budget.
"""

from __future__ import annotations

import itertools

from harombe_core.models import Message
from harombe_core.store.base import MessageStore
from harombe_core.strategies import (
    IMPORTANCE_THRESHOLD,
    Window,
    hybrid_recent,
    hybrid_window,
    is_important,
    reserve_system,
    window_newest,
)

__all__ = ["hybrid_from_store", "newest_messages", "thread_window_from_store"]

#: Most important messages read per statement by :func:`hybrid_from_store`.
IMPORTANT_PAGE = 256


def newest_messages(store: MessageStore, session_id: str, count: int) -> list[Message]:
    """The session's newest ``count`` messages, newest first."""
    return list(itertools.islice(store.iter_newest(session_id), count))


def hybrid_from_store(
    store: MessageStore,
    session_id: str,
    newest: list[Message],
    max_tokens: int,
    *,
    system: list[Message],
    summary: Message | None,
    keep_last: int,
    start_on_user: bool = False,
    threshold: float = IMPORTANCE_THRESHOLD,
) -> Window:
    """``hybrid_window`` over the whole session, given its newest ``keep_last + 1`` messages.

    The important older messages are read newest first, each page asking only for those that
    fit the tokens still left, which is exactly the order and test ``hybrid_window`` applies:
    a message skipped there is never read here.
    """
    budget = max_tokens - reserve_system(system, max_tokens)
    head = newest[:keep_last]
    important: list[Message] = []
    if len(newest) > keep_last:
        left = budget - hybrid_recent(head, budget, start_on_user)[1]
        before = head[-1].id if head else None
        typical = max(1, sum(m.token_count or 0 for m in newest) // max(len(newest), 1))
        while True:
            # About as many rows as the tokens left can take (judged by the newest
            # messages' size), so a full budget is read in one statement, without spare rows.
            size = min(max(left // typical + 4, 8), IMPORTANT_PAGE)
            page = store.important_before(session_id, before, threshold, left, size)
            for message in page:
                cost = message.token_count or 0
                if cost <= left and is_important(message, threshold):
                    important.append(message)
                    left -= cost
            if len(page) < size:
                break
            before = page[-1].id
    return hybrid_window(
        head + important,
        max_tokens,
        system=system,
        summary=summary,
        keep_last=keep_last,
        start_on_user=start_on_user,
        importance_threshold=threshold,
    )


def thread_window_from_store(
    store: MessageStore,
    session_id: str,
    max_tokens: int,
    *,
    system: list[Message],
    start_on_user: bool = False,
) -> Window | None:
    """``window_newest`` over the newest message's thread, or None for a session that was
    never threaded (no message has a parent: it is one linear thread, the simple window)."""
    if not store.is_threaded(session_id):
        return None
    reserved = sum(m.token_count or 0 for m in system)
    path = store.thread_path(session_id, max(max_tokens - reserved, 0))
    return window_newest(path, max_tokens, reserved_tokens=reserved, start_on_user=start_on_user)
