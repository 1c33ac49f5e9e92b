"""Which public reads grow with the store: each read timed at two store sizes, with the ratio.

Builds two keyword-only SQLite stores (``embedding=None``; vectors do not matter here) of
``--small`` and ``--large`` messages spread over 200 sessions of 5 users, cached under
``$TMPDIR/harombe_bench_scale`` (built once), then times each read (median of ``--repeat``) and
prints small, large and large/small. A read whose ratio follows the store size (not what it
returns) is a scaling bug. Each read's SQL is traced and run through ``EXPLAIN QUERY PLAN``;
a full table scan is printed under the read. There is no peer library for a store-wide read
survey, so none runs here (bench_store.py compares windows with LangChain and LlamaIndex).

    python benchmarks/bench_scale.py --small 1000 --large 100000
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
from typing import Any

from harombe_core import MemoryManager, Message
from harombe_core.store import sqlite_file

SESSIONS, USERS = 200, 5
TRACE: list[str] = []


def _traced(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def connect(self: Any) -> Any:
        conn = original(self)
        conn.set_trace_callback(TRACE.append)
        return conn

    return connect


def build(n: int) -> str:
    """The cached store of ``n`` messages (built on first use)."""
    folder = os.path.join(tempfile.gettempdir(), "harombe_bench_scale")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"store_{n}.db")
    if os.path.exists(path):
        return path
    with MemoryManager(path + ".part", embedding=None, vector_store=None) as m:
        for s in range(SESSIONS):
            sid = f"s{s}"
            m.create_session(session_id=sid, user_id=f"u{s % USERS}")
            m.save_messages(
                sid,
                [
                    Message(
                        role="user" if i % 2 == 0 else "assistant",
                        content=f"Turn {i} of {sid}: the irrigation budget, item {i * 7 % 101}",
                    )
                    for i in range(n // SESSIONS)
                ],
            )
    os.replace(path + ".part", path)
    return path


def reads(m: MemoryManager) -> dict[str, Callable[[], Any]]:
    return {
        "get_context": lambda: m.get_context("s7", max_tokens=2000),
        "get_context hybrid": lambda: m.get_context(
            "s7", strategy="hybrid", max_tokens=2000, query="irrigation"
        ),
        "get_window": lambda: m.get_window("s7", max_tokens=2000),
        "get_messages limit=10": lambda: m.get_messages("s7", limit=10),
        "count_messages": lambda: m.count_messages("s7"),
        "list_sessions": lambda: m.list_sessions(limit=10),
        "list_sessions user": lambda: m.list_sessions(limit=10, user_id="u1"),
        "search rare term": lambda: m.search("s7", top_k=5),
        "search common, session": lambda: m.search("irrigation", session_id="s7", top_k=5),
        "search common, user": lambda: m.search("irrigation", user_id="u1", top_k=5),
        "search common, all": lambda: m.search("irrigation", top_k=5),
        "search_summaries": lambda: m.search_summaries("irrigation", user_id="u1"),
        "get_newest_messages": lambda: m.get_newest_messages("s7", 5),
        "get_newest_user_message": lambda: m.get_newest_user_message("s7"),
        "get_facts": lambda: m.get_facts("u1"),
        "get_profile": lambda: m.get_profile("u1"),
        "stats": lambda: m.stats(),
    }


def measure(n: int, repeat: int) -> dict[str, tuple[float, list[str]]]:
    path = build(n)
    out: dict[str, tuple[float, list[str]]] = {}
    check = sqlite3.connect(path)
    with MemoryManager(path, embedding=None, vector_store=None) as m:
        for name, fn in reads(m).items():
            fn()  # warm
            TRACE.clear()
            fn()
            scans = []
            for sql in TRACE:
                if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
                    continue
                try:
                    plan = check.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
                except sqlite3.Error:
                    continue
                scans += [
                    r[-1]
                    for r in plan
                    if r[-1].startswith("SCAN ")
                    and "USING" not in r[-1]
                    and "CONSTANT" not in r[-1]
                    and "sqlite_sequence" not in r[-1]
                    and "_config" not in r[-1]
                ]
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            out[name] = (statistics.median(times), sorted(set(scans)))
    check.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sqlite_file.SQLiteFile._connect = _traced(sqlite_file.SQLiteFile._connect)  # type: ignore[method-assign]
    small, large = measure(args.small, args.repeat), measure(args.large, args.repeat)
    print(f"{'read':26s} {args.small:>10,d} {args.large:>10,d}  ratio")
    for name, (t_small, _) in small.items():
        t_large, scans = large[name]
        ratio = t_large / t_small if t_small else float("nan")
        print(f"{name:26s} {t_small * 1e3:8.2f}ms {t_large * 1e3:8.2f}ms {ratio:6.1f}x")
        for scan in scans:
            print(f"{'':28s}full scan: {scan}")


if __name__ == "__main__":
    main()
