"""What a context read costs as a session grows, and what a threaded LangChain append costs.

One session per size (default 1,000, 50,000 and 200,000 messages): alternating user and
assistant turns of 12 words from a small vocabulary, every 1,000th message marked important,
and parent links forming threads (a new root every 50 user turns, so the threaded path is not
the whole history). Each store is built once into ``--cache-dir`` and reused by later runs: the
rows go in through ``store.add_messages`` in transactions of 10,000, with ``token_count`` counted
by the approximate counter.

For each size and each strategy (simple, summarization, hybrid, threaded, and the full budget
with a query), ``get_context(sid, strategy, 2000)`` runs on a fresh copy of the file, so the
first summarization call sees the whole unsummarised backlog. Reported, each with its ratio to
the smallest size (a ratio over 3 is marked ``> 3x``):

* ``cold``: the first call. A backlog longer than ``SYNC_FOLD`` (64) messages is handed to
  the background folder, and the call uses the summary folded so far.
* ``second``: the next call, made while the background may still be folding.
* ``calls``: after ``flush()`` (which waits for the background folding), how many calls it
  took until the summary stopped moving (2: none).
* ``warm``: the median of ``--repeat`` calls once the summary has caught up (the steady state
  of a session in use, where each call folds only what was added since the last), and
  ``async``: as many ``aget_context`` calls, then the tracemalloc peak of one more call.
* ``window``: how many messages the call returns. Hybrid's grows with the session here
  (every 1,000th message is important, and all that fit are kept): its time follows the
  window it returns, not the history behind it.

So like is compared with like: a call that folds a step at 1,000 messages with one that folds a
step at 200,000, and a caught-up call with a caught-up call.

Then ``HarombeChatMessageHistory(strategy="threaded")`` with the linear selector: the median of
20 appends (a user + assistant pair each) into a session that already holds 100 and 3,000
messages, and their ratio (with ``--embedding-selector`` also with the embedding selector on
``harombe_core.testing.FakeEmbedder``, for information).

Run ``python benchmarks/bench_context.py --help``.
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
import random
import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.strategies import ContextBudget
from harombe_core.tokens import ApproximateTokenCounter

SESSION = "bench-session"
USER = "bench-user"
BUDGET_TOKENS = 2000
BATCH = 10_000
#: A new thread root every this many messages (50 user turns).
THREAD_SPAN = 100
IMPORTANT_EVERY = 1000
STRATEGIES = ("simple", "summarization", "hybrid", "threaded", "budget")
WORDS = [
    "garden",
    "river",
    "budget",
    "lisbon",
    "sourdough",
    "marathon",
    "invoice",
    "schedule",
    "kernel",
    "violin",
    "harbour",
    "lantern",
    "orchard",
    "ledger",
    "compass",
    "meadow",
    "pepper",
    "quartz",
    "saddle",
    "tunnel",
    "velvet",
    "walnut",
    "yogurt",
    "zephyr",
    "anchor",
    "bramble",
    "cobalt",
    "dynamo",
    "ember",
    "falcon",
    "glacier",
    "hazel",
    "ivory",
    "jasmine",
    "kettle",
]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(12))


def _parent(index: int, first_id: int) -> int | None:
    """The parent of the ``index``-th message (0-based) whose own id is ``first_id + index``."""
    if index % THREAD_SPAN == 0:
        return None
    return first_id + index - 1


def build(size: int, cache_dir: Path) -> Path:
    """The cached store of ``size`` messages, built on first use."""
    path = cache_dir / f"context_{size}.db"
    if path.exists():
        return path
    partial = path.with_suffix(".building")
    for leftover in cache_dir.glob(partial.name + "*"):
        leftover.unlink()
    rng = random.Random(size)
    counter = ApproximateTokenCounter()
    started = time.perf_counter()
    mm = MemoryManager(str(partial), embedding=None, token_counter="approximate")
    try:
        mm.create_session("You are a helpful assistant.", None, USER, session_id=SESSION)
        store = mm.store
        first_id: int | None = None
        for start in range(0, size, BATCH):
            batch: list[Message] = []
            for index in range(start, min(start + BATCH, size)):
                message = Message(
                    role="user" if index % 2 == 0 else "assistant",
                    content=_text(rng),
                    metadata={"important": True} if index % IMPORTANT_EVERY == 500 else {},
                )
                parent = None if first_id is None else _parent(index, first_id)
                batch.append(
                    message.with_ids(token_count=counter.count_message(message), parent_id=parent)
                )
            ids = store.run(ops.add_messages(SESSION, batch))
            if first_id is None:  # the ids of a fresh file are consecutive: link the first batch
                first_id = ids[0]
                for offset, message_id in enumerate(ids):
                    parent = _parent(offset, first_id)
                    if parent is not None:
                        store.run(ops.set_parent(message_id, parent))
            if ids != list(range(first_id + start, first_id + start + len(ids))):
                raise RuntimeError("message ids are not consecutive; cannot link threads")
        store.rebuild_keyword_index()
    finally:
        mm.close()
    for suffix in ("", "-wal", "-shm"):
        source = Path(str(partial) + suffix)
        if source.exists():
            source.rename(Path(str(path) + suffix))
    print(f"built {size:,} messages in {time.perf_counter() - started:.1f} s -> {path}")
    return path


def _call(mm: MemoryManager, strategy: str) -> Callable[[], Any]:
    if strategy == "budget":
        return lambda: mm.get_context(
            SESSION, "simple", BUDGET_TOKENS, query="lisbon sourdough", budget=ContextBudget()
        )
    return lambda: mm.get_context(SESSION, strategy, BUDGET_TOKENS)


def _acall(mm: MemoryManager, strategy: str) -> Callable[[], Any]:
    if strategy == "budget":
        return lambda: mm.aget_context(
            SESSION, "simple", BUDGET_TOKENS, query="lisbon sourdough", budget=ContextBudget()
        )
    return lambda: mm.aget_context(SESSION, strategy, BUDGET_TOKENS)


def _ms(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def measure(path: Path, strategy: str, repeat: int, work: Path) -> dict[str, float]:
    """Cold, warm median, async median (ms) and peak (MB) of one strategy on a copy of ``path``."""
    copy = work / f"{strategy}_{path.name}"
    shutil.copyfile(path, copy)
    mm = MemoryManager(str(copy), embedding=None, token_counter="approximate")
    try:
        call = _call(mm, strategy)
        cold = _ms(call)
        step = _ms(call)
        mm.flush()  # a long backlog is folded in the background: wait for it
        catch_up = 2 + _catch_up(mm, call)
        warm = statistics.median(_ms(call) for _ in range(repeat))
        window = len(call())
        acall = _acall(mm, strategy)

        async def timed() -> list[float]:
            # One event loop for all the calls, as an application has: what is timed is the
            # call, not the start of a loop.
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                await acall()
                times.append((time.perf_counter() - started) * 1000)
            return times

        async_ms = statistics.median(asyncio.run(timed()))
        tracemalloc.start()
        call()
        peak = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
    finally:
        mm.close()
        for leftover in work.glob(copy.name + "*"):
            leftover.unlink()
    return {
        "cold": cold,
        "step": step,
        "calls": catch_up,
        "warm": warm,
        "window": window,
        "async": async_ms,
        "peak": peak,
    }


def _catch_up(mm: MemoryManager, call: Callable[[], Any]) -> int:
    """Call until the stored summary stops moving (each call folds one bounded step of the
    backlog); returns how many more calls that took. Strategies without a summary take none."""
    calls, reached = 0, mm.get_session(SESSION).summary_until_id
    while True:
        call()
        now = mm.get_session(SESSION).summary_until_id
        if now == reached:
            return calls
        calls, reached = calls + 1, now


def _ratio(value: float, base: float) -> str:
    ratio = value / base if base > 0 else float("inf")
    return f"{ratio:.1f}x" + (" > 3x" if ratio > 3 else "")


def context_table(sizes: list[int], repeat: int, cache_dir: Path) -> None:
    paths = {size: build(size, cache_dir) for size in sizes}
    results: dict[tuple[str, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        for strategy in STRATEGIES:
            for size in sizes:
                results[strategy, size] = measure(paths[size], strategy, repeat, Path(tmp))
                r = results[strategy, size]
                print(
                    f"  {strategy:<13} {size:>8,}: cold {r['cold']:9.1f} ms  second "
                    f"{r['step']:9.1f} ms  calls {r['calls']:4.0f}  warm {r['warm']:9.1f} ms  "
                    f"async {r['async']:9.1f} ms  peak {r['peak']:7.1f} MB",
                    flush=True,
                )
    print(f"\nget_context(sid, strategy, {BUDGET_TOKENS}), ratio to {sizes[0]:,} messages")
    columns = ("cold", "step", "warm", "async")
    header = f"{'strategy':<13} {'messages':>9} {'calls':>6} {'window':>6}"
    for name in ("cold ms", "second ms", "warm ms", "async ms"):
        header += f" {name:>9} {'ratio':>10}"
    print(header + f" {'peak MB':>8}")
    for strategy in STRATEGIES:
        base = results[strategy, sizes[0]]
        for size in sizes:
            r = results[strategy, size]
            line = f"{strategy:<13} {size:>9,} {r['calls']:6.0f} {r['window']:6.0f}"
            for column in columns:
                line += f" {r[column]:9.1f} {_ratio(r[column], base[column]):>10}"
            print(line + f" {r['peak']:8.1f}")


def _prefill(mm: MemoryManager, session_id: str, count: int) -> None:
    """``count`` messages threaded as the linear selector threads them: each under the last."""
    counter = ApproximateTokenCounter()
    rng = random.Random(count)
    mm.create_session(None, None, None, session_id=session_id)
    previous: int | None = None
    for index in range(count):
        message = Message(role="user" if index % 2 == 0 else "assistant", content=_text(rng))
        prepared = message.with_ids(token_count=counter.count_message(message), parent_id=previous)
        previous = mm.store.run(ops.add_messages(session_id, [prepared]))[0]


def append_median(count: int, selector: str, appends: int = 20) -> float:
    """Median ms of one threaded append (user + assistant) onto ``count`` stored messages."""
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_harombe import HarombeChatMessageHistory

    embedding: Any = None
    if selector == "embedding":
        from harombe_core.testing import FakeEmbedder

        embedding = FakeEmbedder()
    mm = MemoryManager(":memory:", embedding=embedding, token_counter="approximate")
    try:
        session_id = f"append-{count}"
        _prefill(mm, session_id, count)
        rng = random.Random(-count)
        history = HarombeChatMessageHistory(
            session_id, manager=mm, strategy="threaded", node_selector=selector
        )
        times = [
            _ms(lambda: history.add_messages([HumanMessage(_text(rng)), AIMessage(_text(rng))]))
            for _ in range(appends)
        ]
    finally:
        mm.close()
    return statistics.median(times)


def append_table(selectors: list[str]) -> None:
    print("\nthreaded LangChain append (HarombeChatMessageHistory), median of 20")
    for selector in selectors:
        small, large = append_median(100, selector), append_median(3000, selector)
        print(
            f"  {selector:<9} selector: 100 msgs {small:7.2f} ms   3,000 msgs {large:7.2f} ms   "
            f"ratio {_ratio(large, small)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 50_000, 200_000])
    parser.add_argument("--repeat", type=int, default=5, help="warm calls per figure")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "harombe_bench_context",
        help="where the built stores are kept between runs",
    )
    parser.add_argument("--skip-context", action="store_true", help="only the append figures")
    parser.add_argument("--skip-append", action="store_true", help="only the context figures")
    parser.add_argument(
        "--embedding-selector",
        action="store_true",
        help="also time the append with the embedding selector (informational)",
    )
    args = parser.parse_args()
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    if not args.skip_context:
        context_table(sorted(args.sizes), args.repeat, args.cache_dir)
    if not args.skip_append:
        append_table(["linear", "embedding"] if args.embedding_selector else ["linear"])


if __name__ == "__main__":
    main()
