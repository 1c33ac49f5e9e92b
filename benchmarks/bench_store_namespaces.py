"""How fast ``HarombeStore.list_namespaces`` answers beside LangGraph's ``SqliteStore``.

Both stores (files in one temp directory, WAL) are filled with one item in each of ``--namespaces``
namespaces ``("users", "u<i>", "<kind>")`` (kinds: memories, profile, notes), then each query is
timed ``--repeat`` times, the two stores interleaved, median reported with the ratio
SqliteStore / harombe (above 1: harombe is faster). The queries are the shapes an app asks:
a plain page, a page cut to ``max_depth`` 2 (one name per user), a wildcard prefix
``("users", "*", "profile")``, a suffix, and a deep page (``offset`` 5,000).

``--upgrade 10000,100000`` times instead the first open of a file written before the index
on the namespaces' sort key (the last migration builds it), beside opening it once upgraded.

Run ``python benchmarks/bench_store_namespaces.py --help``.
"""

# ruff: noqa: E402  (imports follow the sys.path guard below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

KINDS = ("memories", "profile", "notes")

QUERIES: dict[str, dict[str, Any]] = {
    "first page (limit 100)": {"limit": 100},
    "max_depth=2, limit 100": {"max_depth": 2, "limit": 100},
    "prefix users.*.profile": {"prefix": ("users", "*", "profile"), "limit": 100},
    "suffix notes, max_depth=2": {"suffix": ("notes",), "max_depth": 2, "limit": 100},
    "offset 5000, limit 100": {"offset": 5000, "limit": 100},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=10_000, help="namespaces to fill")
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per query")
    parser.add_argument(
        "--upgrade",
        default="",
        help="comma-separated namespace counts: time the first open of an older file instead",
    )
    args = parser.parse_args(argv)
    if args.upgrade:
        for count in args.upgrade.split(","):
            _upgrade(int(count))
        return 0

    from langgraph.store.sqlite import SqliteStore

    from harombe_core.manager import MemoryManager
    from langchain_harombe import HarombeStore

    with (
        tempfile.TemporaryDirectory() as tmp,
        MemoryManager(str(Path(tmp) / "h.db"), embedding=None) as manager,
        SqliteStore.from_conn_string(str(Path(tmp) / "lg.db")) as lg,
    ):
        lg.setup()
        ours = HarombeStore(manager)
        names = [("users", f"u{i // 3}", KINDS[i % 3]) for i in range(args.namespaces)]
        for store in (ours, lg):
            for start in range(0, len(names), 500):
                store.batch(
                    [_put(ns) for ns in names[start : start + 500]]  # one transaction a chunk
                )
        print(f"{args.namespaces:,} namespaces, median of {args.repeat} calls (ms)")
        print(f"{'query':32} {'harombe':>9} {'SqliteStore':>12} {'ratio':>7}")
        for label, kw in QUERIES.items():
            times: dict[str, list[float]] = {"h": [], "lg": []}
            for _ in range(args.repeat):
                for key, store in (("h", ours), ("lg", lg)):
                    start = time.perf_counter()
                    store.list_namespaces(**kw)
                    times[key].append(time.perf_counter() - start)
            h, g = (statistics.median(times[k]) * 1000 for k in ("h", "lg"))
            print(f"{label:32} {h:9.2f} {g:12.2f} {g / h:6.1f}x")
    return 0


def _upgrade(count: int) -> None:
    """Fill a file with ``count`` namespaces, take it back to the schema before the index
    (drop it, lower the version), then time its first open (the migration builds the index)
    and a second one."""
    import sqlite3

    from harombe_core.manager import MemoryManager
    from harombe_core.store.schema import SCHEMA_VERSION
    from langchain_harombe import HarombeStore

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "old.db"
        with MemoryManager(str(path), embedding=None) as manager:
            store = HarombeStore(manager)
            names = [("users", f"u{i // 3}", KINDS[i % 3]) for i in range(count)]
            for start in range(0, len(names), 5000):
                store.batch([_put(ns) for ns in names[start : start + 5000]])
        raw = sqlite3.connect(path)
        raw.execute("DROP INDEX store_items_ns_order")
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
        raw.commit()
        raw.close()
        opened = []
        for _ in range(2):
            start = time.perf_counter()
            MemoryManager(str(path), embedding=None).close()
            opened.append((time.perf_counter() - start) * 1000)
        print(
            f"{count:,} namespaces: first open of the older file {opened[0]:.0f} ms "
            f"(index built), next open {opened[1]:.0f} ms"
        )


def _put(ns: tuple[str, ...]) -> Any:
    from langgraph.store.base import PutOp

    return PutOp(ns, "k", {"v": 1}, index=False)


if __name__ == "__main__":
    raise SystemExit(main())
