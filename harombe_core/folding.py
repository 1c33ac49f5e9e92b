"""Summary backlogs folded off the request path, on a background thread.

A long imported session has a backlog of thousands of messages no summary covers yet. Folding
it on ``get_context`` made the first calls pay for it (20-100 ms per step of
``memory.summary_chunk`` messages, or an LLM call with an LLM summariser). Instead the request
path hands the session to a :class:`SummaryFolder` and uses the summary folded so far; the
folder's thread folds one step at a time, round robin over the sessions waiting, each step
stored as it is done (what it finished survives a kill). ``flush()`` waits until every
session handed over is folded up to what was asked.

The thread is started on the first hand-over and is a daemon: a program that never closes
its memory still exits (a fold step is SQL and Python, or an LLM call over HTTP; nothing that
aborts the process when the interpreter ends it). :meth:`SummaryFolder.close` stops it and
waits for the step in hand, so the store can then be closed under it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["FoldStep", "SummaryFolder"]

log = logging.getLogger("harombe_core.manager")

#: One step of a session's backlog, up to a message id: True if more remains after it.
FoldStep = Callable[[str, int], bool]


class SummaryFolder:
    """A background thread that folds sessions' summary backlogs, one step at a time."""

    def __init__(self, step: FoldStep) -> None:
        self._step = step
        self._cond = threading.Condition()
        #: Session id -> the message id its summary must reach (insertion order: round robin).
        self._wanted: dict[str, int] = {}
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def request(self, session_id: str, until_id: int) -> None:
        """Fold ``session_id``'s summary up to message ``until_id`` in the background."""
        with self._cond:
            if self._closed:
                return
            self._wanted[session_id] = max(until_id, self._wanted.get(session_id, until_id))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="harombe-summary-folder", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def pending(self) -> int:
        """Sessions waiting to be folded (the one being folded included)."""
        with self._cond:
            return len(self._wanted) + (1 if self._busy else 0)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every session handed over is folded as far as asked; False if
        ``timeout`` (seconds) passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while (self._wanted or self._busy) and not self._closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        """Stop the thread after the step in hand (the rest is folded by a later call)."""
        with self._cond:
            self._closed = True
            self._wanted.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._wanted and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                session_id = next(iter(self._wanted))
                until_id = self._wanted.pop(session_id)
                self._busy = True
            more = False
            try:
                more = self._step(session_id, until_id)
            except Exception as exc:  # a failed fold is retried by the next call that asks
                log.warning("session %s: background summary failed (%s)", session_id, exc)
            finally:
                with self._cond:
                    self._busy = False
                    if more and not self._closed:  # to the back of the line: round robin
                        wanted = max(until_id, self._wanted.pop(session_id, until_id))
                        self._wanted[session_id] = wanted
                    self._cond.notify_all()
