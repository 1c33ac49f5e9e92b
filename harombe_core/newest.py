"""Reading a session's newest messages for a token window, from sync or async pages.

A window takes messages newest first until its budget is spent
(:func:`~harombe_core.strategies.window_newest`), so the store must read no further than the
first message that does not fit, whatever the session's length. These read exactly that far:
from the store's lazy ``iter_newest`` pages, or from its async ``aiter_newest`` pages where it
has them (PostgreSQL), so an async window on PostgreSQL needs no thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from harombe_core.models import Message

__all__ = ["anewest_until", "newest_until"]


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
