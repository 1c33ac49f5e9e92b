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
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["owed", "register", "settle", "settling"]

_lock = threading.Lock()
#: location -> drains registered for it (weak references to bound methods or functions).
_drains: dict[str, list[weakref.ref[Callable[[], None]]]] = {}
_local = threading.local()


def register(location: str, drain: Callable[[], None]) -> Callable[[], None]:
    """Have :func:`settle` of ``location`` call ``drain()``; returns the function that
    unregisters it. ``drain`` is held weakly (a bound method lives as long as its object)."""
    bound = hasattr(drain, "__self__")
    ref: weakref.ref[Callable[[], None]] = (
        weakref.WeakMethod(drain) if bound else weakref.ref(drain)  # type: ignore[arg-type]
    )
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


def settle(location: str, block: Any = None) -> None:
    """Apply (or wait for) every derived write owed to ``location`` by this process's jobs;
    not inside an ``atomic()`` block (``block``, the store's ``AtomicBlock``, has a handle on
    this thread): a job waiting for the block's lock would never run."""
    if location not in _drains or getattr(_local, "active", False):
        return
    if block is not None and block.handle is not None:
        return
    with _lock:
        refs = list(_drains.get(location, ()))
    _local.active = True
    try:
        for ref in refs:
            drain = ref()
            if drain is not None:
                drain()
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
