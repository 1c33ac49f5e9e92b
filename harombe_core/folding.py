"""The process's background worker: derived work off the request path, on one thread.

Each kind of job is a :class:`SummaryFolder` (named for the first kind it served) with its own
step, linger and priority; one thread (``harombe-worker``) serves every folder of the process,
one job at a time, the ready job of the highest priority first and, among equals, round robin
over the folders and, within one, over the keys waiting. A step is short (one batch, one fold,
one transaction) and a job with more to do goes to the back of its line, so a job of a higher
priority handed over meanwhile waits for one step, never for a whole backlog. Its kinds, in
priority order:

* the sessions of checkpointed LangGraph threads (``langchain_harombe.checkpoint``), lingering
  so that the puts of a turn become one job, and done at exit: the messages every other kind
  derives from (:data:`SESSIONS`);
* SQLite's keyword index (:mod:`harombe_core.store.fts`): one catch-up transaction per step,
  cheap, and what makes a fresh message found by its words through the index (:data:`KEYWORDS`);
* embeddings (:mod:`harombe_core.vectors.worker`): one batch per step, from a window of pending
  messages sorted by length, so a fresh message is found by meaning (:data:`VECTORS`);
* summary backlogs (:mod:`harombe_core.context`): a long imported session has a backlog of
  thousands of messages no summary covers yet. Folding it on ``get_context`` made the first
  calls pay for it (20-100 ms per step of ``memory.summary_chunk`` messages, or an LLM call
  with an LLM summariser). Instead the request path hands the session over and uses the
  summary folded so far; each step is stored as it is done (what it finished survives a
  kill) (:data:`SUMMARIES`);
* fact extraction (:mod:`harombe_core.facts.memory`), last as it may call an LLM (:data:`FACTS`).

``flush()`` waits until every key handed to a folder is done as far as asked; ``drain()`` does
the waiting jobs on the calling thread (a read that must see its own writes); ``close()`` drops
what is still waiting and waits for the job in hand, so the store can be closed after it.

**Exit.** The thread is a daemon, started on the first hand-over of the process (so the cost of
starting a thread is paid once, not by every manager's first call). A step may be inside
native code (a batch embedded by ONNX Runtime, Chroma, an LLM client), and a daemon thread cut
off there while the interpreter finalises can abort the process ("terminate called without an
active exception", exit code 134); so when the interpreter starts to shut down (threading's
exit hooks, before the ``atexit`` handlers and before any module is torn down) the jobs of
folders made with ``drain_at_exit`` are done, then the thread is told to stop and waited for
(at most :data:`EXIT_WAIT` seconds) while it finishes the step in hand. What it had not done is
derived again later: pending embeddings, keyword entries and checkpointed sessions by the next
open (:mod:`harombe_core.store.rederive`).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable

__all__ = [
    "ERASURE",
    "FACTS",
    "KEYWORDS",
    "SESSIONS",
    "SUMMARIES",
    "VECTORS",
    "FoldStep",
    "SummaryFolder",
]

log = logging.getLogger("harombe_core.manager")

#: One step of a session's backlog, up to a message id: True if more remains after it.
FoldStep = Callable[[str, int], bool]

#: Seconds the thread waits, when work arrives after it was idle, before its first step: the
#: call that handed the work over returns first instead of sharing the GIL with the step.
SETTLE_SECONDS = 0.02

#: Seconds the interpreter waits at exit for the step in hand (a batch takes well under a
#: second; a model being converted on the worker a few seconds).
EXIT_WAIT = 30.0

# Priorities of the kinds of jobs (higher first). What makes a saved message readable and
# searchable goes before what summarises it or learns from it.
#: Checkpointed threads' sessions: the messages themselves (cheap; reads drain them anyway).
SESSIONS = 3
#: SQLite's keyword index: one short transaction for every message saved since the last.
KEYWORDS = 2
#: Embeddings: one batch per step.
VECTORS = 1
#: Summary backlogs: one fold of ``memory.summary_chunk`` messages per step.
SUMMARIES = 0
#: Fact extraction: may call an LLM.
FACTS = -1
#: Erasing deleted text from the files (store/erasure.py): once deletions have paused.
ERASURE = -2

_cond = threading.Condition()
_queue: deque[SummaryFolder] = deque()  # folders with sessions waiting, round robin
_drained_at_exit: weakref.WeakSet[SummaryFolder] = weakref.WeakSet()
_folders: weakref.WeakSet[SummaryFolder] = weakref.WeakSet()  # every folder (for fork)
_thread: threading.Thread | None = None
_stopping = False


class SummaryFolder:
    """The sessions one context builder has handed to the background, and their fold step."""

    def __init__(
        self,
        step: FoldStep,
        *,
        linger: float = 0.0,
        priority: int = SUMMARIES,
        drain_at_exit: bool = False,
    ) -> None:
        """``linger``: seconds a job waits after it is first asked for, so that the requests
        of a burst (the puts of an agent turn) become one job. ``priority``: a ready job of a
        folder with a higher one goes first (equal ones take turns). ``drain_at_exit``: the
        jobs still waiting when the interpreter exits are done then (cheap jobs only: the exit
        waits for them)."""
        self._step = step
        self._linger = linger
        self.priority = priority
        #: Session id -> the message id its summary must reach (insertion order: round robin).
        self._wanted: dict[str, int] = {}
        #: Session id -> when its job may start (``time.monotonic()``), if not at once.
        self._ready: dict[str, float] = {}
        self._busy = False
        self._closed = False
        if drain_at_exit:
            _drained_at_exit.add(self)
        _folders.add(self)

    def request(self, session_id: str, until_id: int, *, delay: float | None = None) -> None:
        """Fold ``session_id``'s summary up to message ``until_id`` in the background (a job
        not waiting yet starts after the folder's linger, or after ``delay`` seconds)."""
        with _cond:
            if self._closed or _stopping:
                return
            new = session_id not in self._wanted
            wait = self._linger if delay is None else delay
            if new and wait > 0:
                self._ready[session_id] = time.monotonic() + wait
            self._wanted[session_id] = max(until_id, self._wanted.get(session_id, until_id))
            if self not in _queue and not self._busy:
                _queue.append(self)
            start = _ensure_thread()
            if new:  # a job already waiting is not due sooner: the thread sleeps on
                _cond.notify_all()
        if start is not None:  # outside the lock: the new thread takes it at once
            start.start()

    def pending(self) -> int:
        """Sessions waiting to be folded (the one being folded included)."""
        with _cond:
            return len(self._wanted) + (1 if self._busy else 0)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every session handed over is folded as far as asked; False if
        ``timeout`` (seconds) passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with _cond:
            while (self._wanted or self._busy) and not self._closed and not _stopping:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                _cond.wait(left)
        return True

    def drain(self) -> None:
        """Do now, on the calling thread, every job waiting, after the one in hand: for a
        reader that must see what the background still owes (a job that fails is logged and
        handed back to the background)."""
        with _cond:
            if not self._wanted and not self._busy:
                return
            on_thread = threading.current_thread() is _thread
            while self._busy and not on_thread and not self._closed:
                _cond.wait()
            if self._closed or self._busy:  # the worker's own job reads: it has it in hand
                return
            waiting = dict(self._wanted)
            self._wanted.clear()
            self._ready.clear()
            if self in _queue:
                _queue.remove(self)
            self._busy = True
        failed: dict[str, int] = {}
        try:
            for session_id, until_id in waiting.items():
                try:
                    while self._step(session_id, until_id):
                        pass
                except Exception as exc:
                    log.warning("session %s: background job failed (%s)", session_id, exc)
                    failed[session_id] = until_id
        finally:
            with _cond:
                self._busy = False
                for session_id, until_id in failed.items():
                    self._wanted[session_id] = max(until_id, self._wanted.get(session_id, 0))
                if self._wanted and self not in _queue and not self._closed:
                    _queue.append(self)
                _cond.notify_all()

    def close(self) -> None:
        """Drop what is waiting and wait for the step in hand (the rest is folded later)."""
        with _cond:
            self._closed = True
            self._wanted.clear()
            self._ready.clear()
            if self in _queue:
                _queue.remove(self)
            on_thread = threading.current_thread() is _thread
            while self._busy and not on_thread:
                _cond.wait()


def _ensure_thread() -> threading.Thread | None:
    """The thread to start (caller holds ``_cond`` and starts it after), or None if running."""
    global _thread
    if _thread is not None and (_thread.is_alive() or _thread.ident is None):
        return None
    _thread = threading.Thread(target=_run, name="harombe-worker", daemon=True)
    _register_exit_hook()
    return _thread


def _run() -> None:
    while True:
        with _cond:
            idle = not _queue
            while not _queue and not _stopping:
                _cond.wait()
            if idle:  # a full pause: later hand-overs (notify_all) do not cut it short
                settled = time.monotonic() + SETTLE_SECONDS
                while not _stopping and (left := settled - time.monotonic()) > 0:
                    _cond.wait(left)
            if _stopping:
                return
            folder, session_id, soonest = _next_job()
            if folder is None:  # every job waiting still lingers (or none is left)
                if soonest is not None:
                    _cond.wait(max(0.0, soonest - time.monotonic()))
                continue
            until_id = folder._wanted.pop(session_id)
            folder._ready.pop(session_id, None)
            folder._busy = True
        more = False
        try:
            more = folder._step(session_id, until_id)
        except Exception as exc:  # a failed fold is retried by the next call that asks for it
            log.warning("%s: background job failed (%s)", session_id, exc)
        finally:
            with _cond:
                folder._busy = False
                if not folder._closed:
                    if more:  # to the back of the folder's line
                        wanted = max(until_id, folder._wanted.pop(session_id, until_id))
                        folder._wanted[session_id] = wanted
                    if folder._wanted and folder not in _queue:
                        _queue.append(folder)
                _cond.notify_all()


def _next_job() -> tuple[SummaryFolder | None, str, float | None]:
    """The next (folder, session) whose job may start: of the folders with a ready job, the
    first in line of the highest priority (the line turns round robin), and its oldest ready
    session; or (None, "", when the soonest waiting job may start). Caller holds ``_cond``."""
    now = time.monotonic()
    soonest: float | None = None
    best: tuple[int, int, SummaryFolder, str] | None = None
    for position, folder in enumerate(_queue):
        for session_id in folder._wanted:
            ready = folder._ready.get(session_id, 0.0)
            if ready <= now:
                if best is None or folder.priority > best[0]:
                    best = (folder.priority, position, folder, session_id)
                break
            soonest = ready if soonest is None else min(soonest, ready)
    for empty in [f for f in _queue if not f._wanted]:
        _queue.remove(empty)
    if best is None:
        return None, "", soonest
    _queue.remove(best[2])
    return best[2], best[3], None


def _stop_at_exit(wait: float = EXIT_WAIT) -> None:
    """Do the waiting jobs of folders that asked for it, then stop the thread after the step
    in hand, waiting at most ``wait`` seconds."""
    global _stopping
    for folder in list(_drained_at_exit):
        folder.drain()
    with _cond:
        _stopping = True
        _cond.notify_all()
        thread = _thread
    if thread is not None and thread.ident is not None:
        thread.join(wait)


_hooked = False


def _register_exit_hook() -> None:
    """threading's exit hooks run before atexit handlers and before daemon threads are cut
    off (caller holds ``_cond``)."""
    global _hooked
    if _hooked:
        return
    register = getattr(threading, "_register_atexit", None)
    try:
        (register or atexit.register)(_stop_at_exit)
    except RuntimeError:  # the interpreter is already shutting down
        atexit.register(_stop_at_exit)
    _hooked = True


def _forget_in_child() -> None:
    """A forked child has no copy of the thread (and a lock held by it stays held); the jobs
    waiting for it are the parent's to do (the child hands over its own)."""
    global _cond, _thread
    _cond = threading.Condition()
    _queue.clear()
    _drained_at_exit.clear()  # the parent's jobs are the parent's to do
    _thread = None
    for folder in list(_folders):  # a job the parent's thread had in hand is not in hand here
        folder._busy = False
        # Nor are the jobs waiting for the parent's thread: left here, with no thread to do
        # them, they would keep the child's flush() waiting forever.
        folder._wanted.clear()
        folder._ready.clear()


os.register_at_fork(after_in_child=_forget_in_child)
