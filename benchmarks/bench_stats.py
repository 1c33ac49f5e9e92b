"""What ``MemoryManager.stats()`` costs on a large file, beside raw SQLite counts.

``stats()`` counts exactly (sessions, users, messages, the sum of token counts, messages
waiting for an embedding): each is a scan of its table, O(messages), not a maintained counter
that a kill, an import or another process's write could leave wrong. This script fills one
file with ``--messages`` messages (bulk, not timed) over ``--sessions`` sessions, then times,
interleaved, median of ``--repeat``:

* ``mm.stats()``;
* raw ``sqlite3``: ``SELECT count(*) FROM messages`` (the floor: SQLite's fastest count, over
  its smallest index);
* raw ``sqlite3``: ``SELECT count(*), sum(token_count) FROM messages`` (the same question as
  stats' messages and tokens, answered by a table scan).

Run ``python benchmarks/bench_stats.py --help``.
"""

# ruff: noqa: E402  (imports follow the sys.path guard below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages to fill")
    parser.add_argument("--sessions", type=int, default=100, help="sessions they are spread on")
    parser.add_argument("--repeat", type=int, default=15, help="timed calls of each")
    args = parser.parse_args(argv)

    from harombe_core import MemoryManager, Message

    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "m.db")
        with MemoryManager(path, embedding=None) as mm:
            per = args.messages // args.sessions
            for s in range(args.sessions):
                sid = mm.create_session(user_id=f"u{s % 10}")
                mm.save_messages(
                    sid,
                    [
                        Message(
                            role="user" if i % 2 else "assistant", content=f"message {i} of {s}"
                        )
                        for i in range(per)
                    ],
                )
            raw = sqlite3.connect(path)
            calls: dict[str, Callable[[], Any]] = {
                "mm.stats()": mm.stats,
                "raw count(*)": lambda: raw.execute("SELECT count(*) FROM messages").fetchone(),
                "raw count(*), sum(tokens)": lambda: raw.execute(
                    "SELECT count(*), sum(token_count) FROM messages"
                ).fetchone(),
            }
            times: dict[str, list[float]] = {k: [] for k in calls}
            for _ in range(args.repeat):
                for label, call in calls.items():
                    start = time.perf_counter()
                    call()
                    times[label].append(time.perf_counter() - start)
            raw.close()
            floor = statistics.median(times["raw count(*)"])
            print(f"{per * args.sessions:,} messages, median of {args.repeat} calls")
            for label, spent in times.items():
                median = statistics.median(spent)
                print(f"{label:28} {median * 1000:8.2f} ms  {median / floor:6.1f}x the floor")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
