"""The windows read from a store in O(window) rows.

The token window reads the newest messages up to the first that does not fit
(:func:`newest_until` over the lazy pages of :func:`newest_first`, or :func:`anewest_until`
over :func:`anewest_first`'s, each page a store operation, so an async window on PostgreSQL
needs no thread).

Each read takes ``charge``: what a message costs against the budget, as a copy of it carrying
that cost in ``token_count`` (the stored count by default, or a framework's own counting, see
:class:`~harombe_core.tokens.TextTokenCounter`).

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
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Iterator

from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.store.base import MessageStore
from harombe_core.store.rows import row_to_message
from harombe_core.strategies import (
    IMPORTANCE_THRESHOLD,
    Window,
    hybrid_recent,
    hybrid_window,
    is_important,
    reserve_system,
    window_newest,
)
from harombe_core.validate import check_id

__all__ = [
    "Charge",
    "anewest_first",
    "anewest_until",
    "charged",
    "hybrid_from_store",
    "newest_first",
    "newest_messages",
    "newest_until",
    "thread_newest_first",
    "thread_window_from_store",
]

#: Most important messages read per statement by :func:`hybrid_from_store`.
IMPORTANT_PAGE = 256
#: The first page of :func:`newest_first` (most windows fit in it); each next one is twice
#: the size, up to :data:`NEWEST_PAGE_MAX`.
NEWEST_PAGE = 32
NEWEST_PAGE_MAX = 512

#: A message -> the same message carrying what it costs against the budget in ``token_count``.
Charge = Callable[[Message], Message]


def stored(message: Message) -> Message:
    """The default charge: the count stored with the message."""
    return message


def charged(messages: Iterable[Message], charge: Charge) -> Iterator[Message]:
    """``messages`` (lazily, so a window still stops reading once it is full), each charged."""
    return messages if charge is stored else map(charge, messages)  # type: ignore[return-value]


def newest_first(store: MessageStore, session_id: str) -> Iterator[Message]:
    """The session's messages newest first, read lazily: a token window stops reading as
    soon as it is full. Each page is its own statement (:func:`~harombe_core.store.ops.
    newest_page`), so no statement stays open between pages and a closing store or a fork
    never waits for a half-read window."""
    check_id(session_id, "session_id")
    before, size = None, NEWEST_PAGE
    while True:
        page = store.run(ops.newest_page(session_id, before, size))
        yield from map(row_to_message, page)
        if len(page) < size:
            return
        before, size = page[-1][0], min(size * 2, NEWEST_PAGE_MAX)


async def anewest_first(store: MessageStore, session_id: str) -> AsyncIterator[Message]:
    """:func:`newest_first` with each page read by ``await store.arun(...)``."""
    check_id(session_id, "session_id")
    before, size = None, NEWEST_PAGE
    while True:
        page = await store.arun(ops.newest_page(session_id, before, size))
        for row in page:
            yield row_to_message(row)
        if len(page) < size:
            return
        before, size = page[-1][0], min(size * 2, NEWEST_PAGE_MAX)


def newest_messages(
    store: MessageStore, session_id: str, count: int, charge: Charge = stored
) -> list[Message]:
    """The session's newest ``count`` messages, newest first."""
    return list(itertools.islice(charged(newest_first(store, session_id), charge), count))


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
    charge: Charge = stored,
    slack: int | None = 0,
) -> Window:
    """``hybrid_window`` over the whole session, given its newest ``keep_last + 1`` messages
    (charged).

    The important older messages are read newest first, each page asking only for those that
    fit the tokens still left, which is exactly the order and test ``hybrid_window`` applies:
    a message skipped there is never read here. ``slack`` is the most ``charge`` can put a
    message below its stored count (None: unknown, the store then filters by importance only).
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
            bound = sys.maxsize if slack is None else left + slack
            page = store.run(ops.important_before(session_id, before, threshold, bound, size))
            for message in charged(page, charge):
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


def thread_newest_first(
    store: MessageStore,
    session_id: str,
    budget: int,
    charge: Charge = stored,
    *,
    whole_turn: bool = False,
) -> list[Message] | None:
    """The newest message's thread, newest first and charged, at least one message past
    ``budget`` (or to its root); with ``whole_turn``, also back to its newest user message.
    None for a session that was never threaded (it is one linear thread).

    The store walks the thread by stored counts; a charge below them needs more of it, so the
    walk is repeated with a doubled allowance until the charged path is long enough (once,
    with the stored counts)."""
    if not store.run(ops.is_threaded(session_id)):
        return None
    allowance = max(budget, 0)
    while True:
        path = store.run(ops.thread_path(session_id, allowance))
        walked = sum(m.token_count or 0 for m in path)
        whole = not path or path[-1].parent_id is None or walked <= allowance
        costed = list(charged(path, charge))
        spent = sum(m.token_count or 0 for m in costed)
        if whole or (spent > budget and (not whole_turn or any(m.role == "user" for m in costed))):
            return costed
        allowance = allowance * 2 + 64


def thread_window_from_store(
    store: MessageStore,
    session_id: str,
    max_tokens: int,
    *,
    system: list[Message],
    start_on_user: bool = False,
    charge: Charge = stored,
) -> Window | None:
    """``window_newest`` over the newest message's thread, or None for a session that was
    never threaded (no message has a parent: it is one linear thread, the simple window)."""
    reserved = sum(m.token_count or 0 for m in system)
    path = thread_newest_first(store, session_id, max(max_tokens - reserved, 0), charge)
    if path is None:
        return None
    return window_newest(path, max_tokens, reserved_tokens=reserved, start_on_user=start_on_user)


def newest_until(newest_first: Iterable[Message], spend: int) -> list[Message]:
    """The newest messages up to and including the first that does not fit ``spend`` tokens."""
    taken: list[Message] = []
    used = 0
    for message in newest_first:
        taken.append(message)
        used += message.token_count or 0
        if used > spend:
            break
    return taken


async def anewest_until(newest_first: AsyncIterator[Message], spend: int) -> list[Message]:
    """:func:`newest_until` over async pages."""
    taken: list[Message] = []
    used = 0
    async for message in newest_first:
        taken.append(message)
        used += message.token_count or 0
        if used > spend:
            break
    return taken
