"""The manager's deletions, as each runs on one worker thread: the rows, then their vectors.

Both run in one step so that an async caller that stops waiting (a cancelled task) cannot
leave the vectors behind: the thread runs to the end whatever its caller does. What the index
files still hold after that is erased when the index closes, and what the database file holds
when it closes (:mod:`harombe_core.store.erasure`; user guide: ``docs/deletion.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from harombe_core.store import ops
from harombe_core.store.base import MessageStore
from harombe_core.validate import check_number

__all__ = ["delete_user_sessions", "erase", "prune_cutoff"]

T = TypeVar("T")


def erase(semantic: Any, delete: Callable[[], T], sessions: Callable[[T], list[str]]) -> T:
    """Run a store ``delete``, then drop from the vector index (``semantic``, None when off)
    the vectors of the ``sessions(result)`` it removed; returns the delete's result."""
    gone = delete()
    removed = sessions(gone)
    if removed and semantic is not None:
        semantic.forget_sessions(removed)
    return gone


def delete_user_sessions(store: MessageStore, user_id: str) -> list[str]:
    """Delete every session of ``user_id`` and every fact of their user memory, in one
    transaction; the sessions' ids."""
    from harombe_core.facts.ops import delete_user_facts

    def block() -> list[str]:
        owned = store.run(ops.list_sessions(limit=None, user_id=user_id))
        gone = [s.id for s in owned if store.run(ops.delete_session(s.id))]
        store.run(delete_user_facts(user_id))
        return gone

    return store.atomic(block)


def prune_cutoff(days: Any) -> datetime:
    """The time before which a session idle for ``days`` days was last active."""
    # Beyond ~8,000 years nothing can be older; the cutoff stops at the first storable time.
    span = check_number(days, "days", low=0, high=3_000_000)
    now = datetime.now(UTC)
    oldest = datetime.min.replace(tzinfo=UTC)
    return oldest if span >= (now - oldest).days else now - timedelta(days=span)
