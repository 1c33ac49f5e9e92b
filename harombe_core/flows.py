"""Sync and async twins written once: an operation is a flow, two small drivers run it.

An operation that has both a sync and an ``a``-prefixed async form (``get_window`` /
``aget_window``, ``summarize_session`` / ``asummarize_session``) is written once, as a generator
that *yields* the I/O it needs and *receives* its result (the shape of httpx's ``auth_flow``):

.. code-block:: python

    def _window(self, session_id: str) -> Flow[list[Message]]:
        session = yield Run(self.store, ops.get_session(session_id))
        messages = yield Work(expensive_pure_function, session)
        return messages

:func:`drive` runs such a flow on the calling thread; :func:`adrive` runs it on the event loop,
where each request uses its native async form when it has one (a model's ``acall``, a
vector index's ``aquery``) and otherwise runs in a worker thread, so async never blocks the
loop. The logic, the checks and the error handling exist once, so the twins cannot
drift apart. A public pair is written out where it is read, two short methods:

.. code-block:: python

    def get_window(self, session_id: str) -> Window:
        return drive(self._window(session_id))

    async def aget_window(self, session_id: str) -> Window:
        return await adrive(self._window(session_id))

A store operation (:mod:`harombe_core.store.ops`, a body of SQL steps) is the request
:class:`Run`: ``store.run(op)`` on the sync path, ``await store.arun(op)`` on the async one
(one worker thread per operation, on both backends).

An exception raised by a request is thrown into the flow at its ``yield``, so a flow handles
failures with an ordinary ``try``/``except`` on both paths alike.

Work with no async form runs in a worker thread through :func:`off_loop`, the library's one
thread hop: the async driver's for :class:`Call` and :class:`Work`, and below the flows, the
store's ``arun`` (SQLite and PostgreSQL alike, over their sync drivers, which first settle
derived rows owed to the database).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, Protocol, TypeVar

__all__ = [
    "Call",
    "Flow",
    "Parallel",
    "Request",
    "Run",
    "Runner",
    "Subflow",
    "Work",
    "adrive",
    "drive",
    "off_loop",
]

T = TypeVar("T")


async def off_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a worker thread, so blocking work (a store operation, a local
    model, a user's plain function) never runs on the event loop: the one thread hop of the
    library.

    A thread cannot be interrupted, so a cancelled caller waits for ``fn`` to finish before its
    ``CancelledError`` goes on: a store operation has then committed or rolled back (a cancelled
    save is stored exactly once or not at all, and the caller never races its own transaction),
    exactly as a call awaited on the caller's own loop would end. ``fn``'s own outcome is then
    dropped (its exception is retrieved, so no "never retrieved" warning is logged).
    """
    work = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():
            try:
                await asyncio.wait([work])
            except asyncio.CancelledError:  # cancelled again: the thread still has to finish
                continue
        if not work.cancelled():
            work.exception()
        raise


class Request:
    """One piece of I/O a flow needs; it knows how to run itself on either path."""

    def run(self) -> Any:
        """Run on the calling thread (the sync driver)."""
        raise NotImplementedError

    async def arun(self) -> Any:
        """Run without blocking the event loop (the async driver)."""
        raise NotImplementedError


Flow = Generator[Request, Any, T]
"""An operation written once: yields :class:`Request` objects, returns its result."""


class Call(Request, Generic[T]):
    """Call ``fn(*args, **kwargs)``; async awaits ``native`` with the same arguments if given.

    Without ``native`` the async driver runs ``fn`` in a worker thread (one hop per request), so
    blocking I/O (SQLite, a local model) never runs on the event loop.
    """

    __slots__ = ("args", "fn", "kwargs", "native")

    def __init__(
        self,
        fn: Callable[..., T],
        *args: Any,
        native: Callable[..., Awaitable[T]] | None = None,
        **kwargs: Any,
    ) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.native = native

    def run(self) -> T:
        return self.fn(*self.args, **self.kwargs)

    async def arun(self) -> T:
        if self.native is not None:
            return await self.native(*self.args, **self.kwargs)
        return await off_loop(self.fn, *self.args, **self.kwargs)

    def __repr__(self) -> str:
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        return f"Call({name}, native={self.native is not None})"


class Work(Call[T]):
    """CPU or model work with no async form (flush, backfill, reindex): a thread when async."""

    __slots__ = ()

    def __init__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> None:
        super().__init__(fn, *args, **kwargs)


class Runner(Protocol):
    """What :class:`Run` needs of a store: its ``run``/``arun`` pair.

    Named here, below the store, so the flows depend on no store module: every
    :class:`~harombe_core.store.base.MessageStore` is one, and an operation is whatever that
    store runs (an :class:`~harombe_core.store.runner.Op`).
    """

    def run(self, op: Any, /) -> Any: ...

    async def arun(self, op: Any, /) -> Any: ...


class Run(Request):
    """One store operation: ``store.run(op)``, or ``await store.arun(op)`` when async (which
    runs ``store.run(op)`` in a worker thread, on every backend)."""

    __slots__ = ("op", "store")

    def __init__(self, store: Runner, op: Any) -> None:
        self.store = store
        self.op = op

    def run(self) -> Any:
        return self.store.run(self.op)

    async def arun(self) -> Any:
        return await self.store.arun(self.op)

    def __repr__(self) -> str:
        return f"Run({self.op.body.__qualname__})"


class Subflow(Request, Generic[T]):
    """A flow as one request, so :class:`Parallel` can overlap it with others: driven by
    :func:`drive` on the sync path and :func:`adrive` on the async one (its own requests
    take their own hops; the flow itself takes none)."""

    __slots__ = ("flow",)

    def __init__(self, flow: Flow[T]) -> None:
        self.flow = flow

    def run(self) -> T:
        return drive(self.flow)

    async def arun(self) -> T:
        return await adrive(self.flow)


class Parallel(Request):
    """Several requests whose results the caller needs together, as a list in the same order.

    Both paths overlap them, for example a keyword search (SQLite releases the GIL) with the
    embedding of the query: async runs them concurrently (``asyncio.gather``); sync runs the
    first on the calling thread and the others on the flows' shared worker threads, waiting
    for all of them before it returns or raises.
    """

    __slots__ = ("requests",)

    def __init__(self, *requests: Request) -> None:
        self.requests = requests

    def run(self) -> list[Any]:
        if not self.requests:
            return []
        first, *others = self.requests
        pending = [_workers().submit(request.run) for request in others]
        try:
            results = [first.run()]
        finally:
            concurrent.futures.wait(pending)
        return results + [future.result() for future in pending]

    async def arun(self) -> list[Any]:
        return list(await asyncio.gather(*(request.arun() for request in self.requests)))


_WORKERS: concurrent.futures.ThreadPoolExecutor | None = None
_WORKERS_LOCK = threading.Lock()


def _workers() -> concurrent.futures.ThreadPoolExecutor:
    """The threads :class:`Parallel` overlaps sync requests on (shared, made on first use)."""
    global _WORKERS
    with _WORKERS_LOCK:
        if _WORKERS is None:
            _WORKERS = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="harombe-flow")
        return _WORKERS


def _forget_workers_in_child() -> None:
    """A forked child has none of the parent's pool threads, but its copy of the pool counts
    them (as idle): work submitted to it would wait forever. The child makes its own."""
    global _WORKERS, _WORKERS_LOCK
    _WORKERS, _WORKERS_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_workers_in_child)


class _Steps(Generic[T]):
    """Advances a flow: sends it each result, or throws in the request's exception."""

    __slots__ = ("_flow", "outcome", "value")

    def __init__(self, flow: Flow[T]) -> None:
        self._flow = flow
        self.outcome: tuple[bool, Any] | None = None  # (succeeded, result or exception)

    def next(self) -> Request | None:
        """The next request, or None once the flow has returned (its result is ``value``)."""
        try:
            if self.outcome is None:
                return next(self._flow)
            succeeded, result = self.outcome
            return self._flow.send(result) if succeeded else self._flow.throw(result)
        except StopIteration as done:
            self.value: T = done.value
            return None


def drive(flow: Flow[T]) -> T:
    """Run a flow on the calling thread and return its result."""
    steps = _Steps(flow)
    while (request := steps.next()) is not None:
        try:
            steps.outcome = (True, request.run())
        except Exception as exc:  # thrown into the flow, which handles or re-raises it
            steps.outcome = (False, exc)
    return steps.value


async def adrive(flow: Flow[T]) -> T:
    """Run a flow without blocking the event loop and return its result."""
    steps = _Steps(flow)
    while (request := steps.next()) is not None:
        try:
            steps.outcome = (True, await request.arun())
        except Exception as exc:  # thrown into the flow, which handles or re-raises it
            steps.outcome = (False, exc)
    return steps.value
