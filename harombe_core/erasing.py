"""The manager's deletions, as each runs on one worker thread: the rows, then their vectors.

Both run in one step so that an async caller that stops waiting (a cancelled task) cannot
leave the vectors behind: the thread runs to the end whatever its caller does. What the index
files still hold after that is erased when the index closes, and what the database file holds
when it closes (:mod:`harombe_core.store.erasure`; user guide: ``docs/deletion.md``).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from harombe_core.errors import HarombeError
from harombe_core.store import ops
from harombe_core.store.base import MessageStore
from harombe_core.validate import check_number

__all__ = [
    "DeletionEraser",
    "Erasure",
    "delete_user_sessions",
    "erase",
    "erase_deleted",
    "prune_cutoff",
]

T = TypeVar("T")

log = logging.getLogger("harombe_core.manager")

#: The job's key on the background worker (one per eraser).
_JOB = "erase-deleted"
#: The key of the look for a debt another process recorded and left (see
#: :meth:`DeletionEraser.check_recorded`).
_CHECK = "erase-recorded"
#: Seconds between those looks (at least the eraser's ``idle``): one indexed read each.
RECORDED_CHECK_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Erasure:
    """What :meth:`MemoryManager.erase_deleted` left: ``complete`` when no deleted text is
    left in the store's files (the database, its WAL, an embedded Chroma folder)."""

    #: Bytes the WAL still holds because a reader with an older snapshot kept it from being
    #: truncated (0 when it was truncated); the background eraser tries again.
    wal_bytes_left: int = 0
    #: False when an embedded vector index still holds deleted vectors (it could not be
    #: reopened at once: another process took its folder); erased at its owner's close.
    vectors_erased: bool = True

    @property
    def complete(self) -> bool:
        """True when nothing deleted is left on disk."""
        return self.wal_bytes_left == 0 and self.vectors_erased


def erase_deleted(store: MessageStore, semantic: Any) -> Erasure:
    """Pay the erasure the store's deletions owe, with everything open (see
    :meth:`MemoryManager.erase_deleted`): the vector index's files first (its debt is
    settled by a write to the database), then the keyword index and the WAL."""
    vectors = semantic.erase_deleted() if semantic is not None else True
    eraser = getattr(store, "erase_deleted", None)
    left = int(eraser()) if eraser is not None else 0
    return Erasure(wal_bytes_left=left, vectors_erased=vectors)


class DeletionEraser:
    """Runs :func:`erase_deleted` on the background worker once deletions have paused for
    ``idle`` seconds, so a process that never closes (a server) still leaves no deleted text
    on disk. Debounced: a burst of deletions is erased once, ``idle`` seconds after its last
    one; an erasure a reader kept from finishing is retried ``idle`` seconds later.

    ``clock`` (``time.monotonic``) is injectable so tests decide when "idle" is; the step is
    :meth:`run_due` (the worker calls it; a test may too).

    ``recorded`` (the debt the file records now, None when nothing is owed) lets it pay a
    debt another process left: see :meth:`check_recorded`, which the worker runs every
    ``max(RECORDED_CHECK_SECONDS, idle)`` seconds."""

    def __init__(
        self,
        run: Callable[[], Erasure],
        idle: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        recorded: Callable[[], str | None] | None = None,
    ) -> None:
        from harombe_core.folding import ERASURE, SummaryFolder

        self._run = run
        self.idle = idle
        self._clock = clock
        self._last: float | None = None
        self._recorded = recorded
        self._seen: str | None = None
        self._paid: str | None = None
        self._check_every = max(RECORDED_CHECK_SECONDS, idle)
        # Held weakly by its (always waiting) look: a manager dropped without close is still
        # collected, and gives its file back.
        ref = weakref.ref(self)
        self._jobs = SummaryFolder(
            lambda key, until: (eraser := ref()) is not None and eraser._step(key, until),
            priority=ERASURE,
        )
        if recorded is not None:
            self._jobs.request(_CHECK, 0, delay=self._check_every)

    def deleted(self) -> None:
        """A deletion was committed: erase ``idle`` seconds after the last of a burst (returns
        at once)."""
        self._last = self._clock()
        self._jobs.request(_JOB, 0, delay=self.idle)

    def run_due(self) -> Erasure | None:
        """Erase now if deletions have paused for ``idle`` seconds (by ``clock``); returns
        what was left, or None when it is not due yet (then it is asked for again)."""
        last = self._last
        if last is None:
            return None
        wait = last + self.idle - self._clock()
        if wait > 0:  # another deletion came meanwhile: wait until the burst is over
            self._jobs.request(_JOB, 0, delay=wait)
            return None
        self._last = None
        result = self._run()
        if not result.complete:  # a reader held the WAL, or another process the index
            self._last = self._clock()
            self._jobs.request(_JOB, 0, delay=max(self.idle, 0.1))
        return result

    def check_recorded(self) -> Erasure | None:
        """Pay a debt the file records that no deletion of this process armed, once it has
        stood unchanged since the previous look (``max(RECORDED_CHECK_SECONDS, idle)``
        seconds apart): the process that deleted would have paid it ``idle`` seconds after
        its last deletion, so it was killed, or is not a manager (a script's SQL, an old
        version). Without this a server open for weeks kept another process's deleted text
        in the WAL and the keyword index (or its Chroma folder) until it closed. Returns what
        was left, or None when nothing was done (costs one indexed read)."""
        if self._recorded is None:
            return None
        token = self._recorded()
        seen, self._seen = self._seen, token
        if token is None or token != seen or token == self._paid or self._last is not None:
            # Nothing owed, a new deletion (its maker pays), one this eraser paid its part of
            # (what stays recorded is another process's to pay), or armed already.
            return None
        self._last = self._clock() - self.idle  # due now
        result = self.run_due()
        if result is not None and result.complete:
            self._paid = token
        return result

    def _step(self, key: str, _until: int) -> bool:
        try:
            if key == _CHECK:
                try:
                    self.check_recorded()
                finally:
                    self._jobs.request(_CHECK, 0, delay=self._check_every)
            else:
                self.run_due()
        except HarombeError as exc:  # the debt stays recorded: close (or a retry) pays it
            log.warning("could not erase deleted text yet: %s", exc)
        return False

    def close(self) -> None:
        """Stop (the close that follows erases what is still owed)."""
        self._jobs.close()


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
