"""A session's reads, as flows: who may read it, and its windows in O(window) rows.

Every manager method that takes ``user_id`` next to a session id checks it with
:func:`owned_session` (and so do the manager's composed parts, its search side and its context
builder, each with only the store in hand): the session's read, and the owner's check on it.
A window's first read is :func:`owned_session_and_prompt`, the same check with the session's
system prompt in the same statement; then its newest rows.

Every read here is a store operation yielded as a :class:`~harombe_core.flows.Run` request,
so the one code runs on both paths: ``drive`` calls ``store.run``, ``adrive`` awaits
``store.arun`` (one worker-thread hop per read, on both backends). The
token window, ``get_window``/``get_recent_messages`` and every strategy of ``get_context``
share one newest-first reader (:func:`read_newest`): it reads a session's rows newest first, a
page at a time, and stops at the first message its caller has enough with (the first that does
not fit a budget, the ``count``-th, the newest user message).

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

import sys
from collections.abc import Callable, Iterable, Iterator

from harombe_core.flows import Flow, Run
from harombe_core.models import Message, Session
from harombe_core.owners import check_owner
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
from harombe_core.validate import check_flag, check_id, optional_id

__all__ = [
    "Charge",
    "charged",
    "hybrid_from_store",
    "named_owner",
    "newest_messages",
    "newest_turn_from_store",
    "newest_until",
    "owned_session",
    "owned_session_and_prompt",
    "read_newest",
    "thread_newest_first",
    "thread_window_from_store",
]


# who may read it --------------------------------------------------------------------------
def owned_session(
    store: MessageStore, session_id: str, user_id: str | None, *, exact: bool = False
) -> Flow[Session | None]:
    """The session (None if it does not exist yet), if ``user_id`` may use it.

    ``user_id=None`` (the application itself) may use any session; a named user only their
    own, so a session owned by another user or by none raises SessionOwnershipError (see
    :mod:`harombe_core.owners`). With ``exact=True`` the owner must be ``user_id`` itself.
    """
    optional_id(user_id, "user_id")
    check_flag(exact, "exact")
    session: Session | None = yield Run(store, ops.get_session(check_id(session_id, "session_id")))
    if session is not None:
        check_owner(session_id, session.user_id, user_id, exact=exact)
    return session


def owned_session_and_prompt(
    store: MessageStore, session_id: str, user_id: str | None
) -> Flow[tuple[Session, list[Message]] | None]:
    """:func:`owned_session` with the session's system prompt as the message that leads its
    history (:func:`~harombe_core.store.ops.session_and_prompt`), read in the same statement:
    a window reads both, then its newest rows, in two store operations."""
    optional_id(user_id, "user_id")
    found: tuple[Session, list[Message]] | None = yield Run(
        store, ops.session_and_prompt(check_id(session_id, "session_id"))
    )
    if found is not None:
        check_owner(session_id, found[0].user_id, user_id)
    return found


def named_owner(store: MessageStore, session_id: str, user_id: str | None) -> Flow[None]:
    """Check the owner only when a user is named (the application may use any session)."""
    if user_id is not None:
        yield from owned_session(store, session_id, user_id)


# its windows ----------------------------------------------------------------------------------
#: Most important messages read per statement by :func:`hybrid_from_store`.
IMPORTANT_PAGE = 256
#: The first page of :func:`newest_until` (most windows fit in one), and the largest page
#: (each next page doubles until then, so a long window takes a few statements, not dozens).
FIRST_PAGE = 32
LAST_PAGE = 256

#: A message -> the same message carrying what it costs against the budget in ``token_count``.
Charge = Callable[[Message], Message]


def stored(message: Message) -> Message:
    """The default charge: the count stored with the message."""
    return message


def charged(messages: Iterable[Message], charge: Charge) -> Iterator[Message]:
    """``messages`` (lazily, so a window still stops reading once it is full), each charged."""
    return messages if charge is stored else map(charge, messages)  # type: ignore[return-value]


def read_newest(
    store: MessageStore,
    session_id: str,
    enough: Callable[[Message], bool],
    charge: Charge = stored,
    *,
    page: int = FIRST_PAGE,
) -> Flow[list[Message]]:
    """The session's messages newest first, each charged, up to and including the first for
    which ``enough`` is true (or to the oldest): the one newest-first reader of the library.

    Pages of ``page`` rows, then twice as many each time up to :data:`LAST_PAGE`; only the rows
    taken are turned into messages."""
    taken: list[Message] = []
    before: int | None = None
    size = max(int(page), 1)
    while True:
        rows = yield Run(store, ops.newest_rows(session_id, before, size))
        for row in rows:
            message = charge(row_to_message(row))
            taken.append(message)
            if enough(message):
                return taken
        if len(rows) < size:
            return taken
        before = int(rows[-1][0])
        size = min(size * 2, max(LAST_PAGE, size))


def newest_until(
    store: MessageStore, session_id: str, spend: int, charge: Charge = stored
) -> Flow[list[Message]]:
    """The newest messages up to and including the first that does not fit ``spend`` tokens:
    all a token window (:func:`~harombe_core.strategies.window_newest`) can use."""
    used = 0

    def full(message: Message) -> bool:
        nonlocal used
        used += message.token_count or 0
        return used > spend

    return (yield from read_newest(store, session_id, full, charge))


def newest_messages(
    store: MessageStore, session_id: str, count: int, charge: Charge = stored
) -> Flow[list[Message]]:
    """The session's newest ``count`` messages, newest first (one statement)."""
    if count <= 0:
        return []
    taken = 0

    def full(message: Message) -> bool:
        nonlocal taken
        taken += 1
        return taken >= count

    return (yield from read_newest(store, session_id, full, charge, page=count))


def newest_turn_from_store(
    store: MessageStore, session_id: str, charge: Charge = stored
) -> Flow[list[Message]]:
    """The session's messages newest first, back to its newest user message: what
    :func:`~harombe_core.strategies.newest_turn` needs (a few rows, read a small page)."""
    return (yield from read_newest(store, session_id, lambda m: m.role == "user", charge, page=8))


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
) -> Flow[Window]:
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
            op = ops.important_before(session_id, before, threshold, bound, size)
            page: list[Message] = yield Run(store, op)
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
) -> Flow[list[Message] | None]:
    """The newest message's thread, newest first and charged, at least one message past
    ``budget`` (or to its root); with ``whole_turn``, also back to its newest user message.
    None for a session that was never threaded (it is one linear thread).

    The store walks the thread by stored counts; a charge below them needs more of it, so the
    walk is repeated with a doubled allowance until the charged path is long enough (once,
    with the stored counts)."""
    if not (yield Run(store, ops.is_threaded(session_id))):
        return None
    allowance = max(budget, 0)
    while True:
        path: list[Message] = yield Run(store, ops.thread_path(session_id, allowance))
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
) -> Flow[Window | None]:
    """``window_newest`` over the newest message's thread, or None for a session that was
    never threaded (no message has a parent: it is one linear thread, the simple window)."""
    reserved = sum(m.token_count or 0 for m in system)
    path = yield from thread_newest_first(store, session_id, max(max_tokens - reserved, 0), charge)
    if path is None:
        return None
    return window_newest(path, max_tokens, reserved_tokens=reserved, start_on_user=start_on_user)
