"""The async side of the PostgreSQL store: one ``AsyncConnectionPool`` on a private event loop.

Why not a pool on the caller's loop: a psycopg ``AsyncConnectionPool`` belongs to the loop that
opened it (its workers are tasks of that loop), while a store outlives loops: ``asyncio.run``
called twice, a notebook, pytest-asyncio's loop per test, and ``MemoryManager.close()`` called
after the loop has gone. A pool left on a closing loop hangs that loop's shutdown (the pool's
workers swallow the cancellation ``asyncio.run`` sends them while they connect, so the loop
waits for them forever) or leaves a pending task and open connections behind. So the store owns
one loop on a daemon thread, started on the first async call, and every async call runs there as
one task: the caller's loop only awaits the result (one hop per call, never a worker thread of
the caller's loop), any number of caller loops share one pool, and :meth:`AsyncPool.close`
closes it synchronously from any thread, loop or none.

A caller's cancellation cancels its task on the pool's loop and waits for it to finish (the
transaction rolled back or committed) before the ``CancelledError`` goes on, exactly as a call
running on the caller's own loop would.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from psycopg_pool import AsyncConnectionPool

from harombe_core.errors import StoreError

__all__ = ["AsyncPool"]

T = TypeVar("T")

Work = Callable[[AsyncConnectionPool], Coroutine[Any, Any, T]]


class AsyncPool:
    """An ``AsyncConnectionPool`` on its own event loop thread, usable from every caller loop.

    ``make_pool`` builds the (unopened) pool; it is called on the private loop, so the pool's
    tasks belong to that loop. Nothing starts until the first :meth:`run`.
    """

    def __init__(self, make_pool: Callable[[], AsyncConnectionPool], *, name: str) -> None:
        self._make_pool = make_pool
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: AsyncConnectionPool | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def _start(self) -> tuple[asyncio.AbstractEventLoop, AsyncConnectionPool]:
        """The private loop and its pool, started on first use (once, whatever the threads)."""
        with self._lock:
            if self._closed:
                raise StoreError(f"{self._name}: the store is closed; open a new MemoryManager.")
            if self._loop is None or self._pool is None:
                ready: concurrent.futures.Future[None] = concurrent.futures.Future()
                thread = threading.Thread(
                    target=self._serve, args=(ready,), name=f"{self._name}-async", daemon=True
                )
                thread.start()
                ready.result()
                self._thread = thread
            assert self._loop is not None
            assert self._pool is not None
            return self._loop, self._pool

    def _serve(self, ready: concurrent.futures.Future[None]) -> None:
        """The private thread: open the pool (without waiting for connections), then serve."""
        # A selector loop on every platform: psycopg's async connections cannot run on the
        # proactor loop that Windows uses by default.
        loop = asyncio.SelectorEventLoop()
        try:
            self._pool = loop.run_until_complete(self._open())
        except BaseException as exc:
            loop.close()
            ready.set_exception(exc)
            return
        self._loop = loop
        ready.set_result(None)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _open(self) -> AsyncConnectionPool:
        pool = self._make_pool()
        await pool.open(wait=False)
        return pool

    async def run(self, work: Work[T]) -> T:
        """Await ``work(pool)`` run on the private loop, from whatever loop the caller is on."""
        loop, pool = self._start()
        outcome: concurrent.futures.Future[T] = concurrent.futures.Future()
        started: list[asyncio.Task[T]] = []

        def start() -> None:  # on the private loop
            if self._closed:
                outcome.set_exception(self._closed_error())
                return
            task = loop.create_task(work(pool))
            self._tasks.add(task)
            task.add_done_callback(lambda t: self._settle(t, outcome))
            started.append(task)

        def cancel() -> None:  # on the private loop, always after start()
            for task in started:
                task.cancel()

        try:
            loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop was stopped by a close() since _start()
            raise self._closed_error() from None
        waiting = asyncio.wrap_future(outcome)
        try:
            return await asyncio.shield(waiting)
        except asyncio.CancelledError:
            if not waiting.done():
                loop.call_soon_threadsafe(cancel)
                # Let the transaction finish (rolled back, or committed if it already was)
                # before the caller goes on, as a call on its own loop would.
                await asyncio.wait([waiting])
            raise

    def _settle(self, task: asyncio.Task[T], outcome: concurrent.futures.Future[T]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            if self._closed:
                outcome.set_exception(self._closed_error())
            else:
                outcome.cancel()
        elif (exc := task.exception()) is not None:
            outcome.set_exception(exc)
        else:
            outcome.set_result(task.result())

    def _closed_error(self) -> StoreError:
        return StoreError(
            f"{self._name}: the store was closed during the call; open a new MemoryManager."
        )

    async def _shutdown(self) -> None:
        """On the private loop: cancel the calls still running, then close the pool."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._pool is not None:
            await self._pool.close()

    def close(self) -> None:
        """Cancel running calls, close the pool and stop the thread. Safe to call twice, from
        any thread, with or without a running event loop (it blocks while the pool closes)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:  # pragma: no cover - only from inside a call
            loop.call_soon(loop.stop)
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
