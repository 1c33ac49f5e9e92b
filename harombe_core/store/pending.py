"""Derived rows still owed to a database by a background job of this process: read your writes.

Some rows are derived from others and written off the request path, in a later transaction of
a background job: the LangGraph checkpointer (``langchain_harombe``) writes a thread's
checkpoint on the request path and the thread's messages into its harombe session afterwards.
The store is the one place every read of messages and sessions passes, so it is where a read
in the same process is made to see them: before it runs, the store calls :func:`settle`,
which has every job registered for the database apply what it still owes, on the calling
thread (or waits for the one a worker has in hand). Nothing registered (the common case) costs
one dictionary lookup.

A job registers a *drain* (a callable that applies, or waits for, everything it owes) under
the database's location, held weakly so a forgotten owner never keeps work alive.
``MemoryManager.flush()`` and ``close()`` settle too, so a flushed or closed database holds
every derived row. A drain runs with further settling turned off on its thread: it reads and
writes through the same store, and must not wait for itself.

A *watcher* (:func:`watch`) is called by :func:`settle` after the drains, as they are, but at
most once every ``every`` seconds: a long-lived process asks the database now and then
whether another process, since killed, left work owed (:mod:`harombe_core.store.rederive`).
Between its turns it costs a read of the clock per settle. :func:`expire` makes the watchers
of a location due at the next settle (``flush()`` asks so).
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["expire", "owed", "register", "settle", "settling", "watch"]

_lock = threading.Lock()
#: location -> drains registered for it (weak references to bound methods or functions).
_drains: dict[str, list[weakref.ref[Callable[[], None]]]] = {}
_local = threading.local()
#: The clock watchers are timed by (tests move it instead of sleeping).
_clock: Callable[[], float] = time.monotonic


@dataclass(eq=False)
class _Watcher:
    fn: weakref.ref[Callable[[], None]]
    every: float
    due: float


#: location -> its watchers; and when the first of them is due (what settle checks first).
_watchers: dict[str, list[_Watcher]] = {}
_watch_due: dict[str, float] = {}


def _weak(fn: Callable[[], None]) -> weakref.ref[Callable[[], None]]:
    if hasattr(fn, "__self__"):
        return weakref.WeakMethod(fn)  # type: ignore[arg-type]
    return weakref.ref(fn)


def watch(location: str, fn: Callable[[], None], every: float) -> Callable[[], None]:
    """Have :func:`settle` of ``location`` call ``fn()`` (as a drain, after the drains) at
    most once every ``every`` seconds, the first time ``every`` seconds from now; returns the
    function that stops it. ``fn`` is held weakly, as a drain is."""
    watcher = _Watcher(_weak(fn), every, _clock() + every)
    with _lock:
        _watchers.setdefault(location, []).append(watcher)
        _rewatch(location)

    def unwatch() -> None:
        with _lock:
            mine = _watchers.get(location, [])
            if watcher in mine:
                mine.remove(watcher)
            _rewatch(location)

    return unwatch


def expire(location: str) -> None:
    """Make every watcher of ``location`` due at the next :func:`settle`."""
    with _lock:
        for watcher in _watchers.get(location, ()):
            watcher.due = -math.inf
        _rewatch(location)


def _rewatch(location: str) -> None:
    """Recompute when the location's first watcher is due (under ``_lock``)."""
    live = [w for w in _watchers.get(location, ()) if w.fn() is not None]
    if live:
        _watchers[location] = live
        _watch_due[location] = min(w.due for w in live)
    else:
        _watchers.pop(location, None)
        _watch_due.pop(location, None)


def _due_watchers(location: str) -> list[Callable[[], None]]:
    """The watchers of ``location`` due now, each then set to its next turn."""
    due = _watch_due.get(location)
    if due is None:
        return []
    now = _clock()
    if now < due:
        return []
    found = []
    with _lock:
        for watcher in _watchers.get(location, ()):
            fn = watcher.fn()
            if fn is not None and watcher.due <= now:
                watcher.due = now + watcher.every
                found.append(fn)
        _rewatch(location)
    return found


def register(location: str, drain: Callable[[], None]) -> Callable[[], None]:
    """Have :func:`settle` of ``location`` call ``drain()``; returns the function that
    unregisters it. ``drain`` is held weakly (a bound method lives as long as its object)."""
    ref = _weak(drain)
    with _lock:
        _drains.setdefault(location, []).append(ref)

    def unregister() -> None:
        with _lock:
            refs = _drains.get(location, [])
            if ref in refs:
                refs.remove(ref)
            if not refs:
                _drains.pop(location, None)

    return unregister


def owed(location: str) -> bool:
    """Whether any job is registered for ``location`` (a cheap check before :func:`settle`)."""
    return location in _drains and not getattr(_local, "active", False)


def settle(location: str, block: Any = None, *, check: bool = False) -> None:
    """Apply (or wait for) every derived write owed to ``location`` by this process's jobs;
    not inside an ``atomic()`` block (``block``, the store's ``AtomicBlock``, has a handle on
    this thread): a job waiting for the block's lock would never run. ``check``: every
    watcher of the location is due now (:func:`expire`)."""
    if check:
        expire(location)
    if location not in _drains:
        due = _watch_due.get(location)
        if due is None or _clock() < due:  # nothing owed here, no watcher due: the hot path
            return
    if getattr(_local, "active", False) or (block is not None and block.handle is not None):
        return
    with _lock:
        refs = list(_drains.get(location, ()))
    _local.active = True
    try:
        for ref in refs:
            drain = ref()
            if drain is not None:
                drain()
        for watcher in _due_watchers(location):
            watcher()
    finally:
        _local.active = False
    if any(ref() is None for ref in refs):  # owners gone: forget them
        with _lock:
            live = [ref for ref in _drains.get(location, ()) if ref() is not None]
            if live:
                _drains[location] = live
            else:
                _drains.pop(location, None)


def settling() -> bool:
    """Whether this thread is running a drain (its reads must not settle again)."""
    return bool(getattr(_local, "active", False))


def _new_lock_in_child() -> None:
    """A forked child has only the forking thread: a lock another thread of the parent held
    at that moment (registering, or copying the drains to settle) would stay held forever."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_in_child)
