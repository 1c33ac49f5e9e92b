"""What a long-lived manager's operations cost for its check of work a killed process left owed.

A ``MemoryManager`` that stays open asks the database again, at most every
``harombe_core.store.rederive.PROBE_SECONDS``, whether a checkpointed session is owed (one
primary-key probe); between two checks an operation reads the clock. Three managers on one
file, timed in interleaved rounds of the same read (a session's newest messages), so the
machine's load falls on all alike:

* **no check**: the watcher removed (what a manager cost before it existed);
* **check not due**: the default, the clock read per operation;
* **check every operation**: ``HAROMBE_OWED_PROBE_SECONDS=0``, the probe on every operation
  (the bound: what a check costs when it runs).

Prints microseconds per read and the ratios to "no check". Run
``python benchmarks/bench_owed_probe.py --help``.
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
from collections.abc import Callable

from harombe_core import MemoryManager


def _timed(read: Callable[[], object], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        read()
    return (time.perf_counter() - start) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median kept)")
    parser.add_argument("--reads", type=int, default=2000, help="reads per manager per round")
    args = parser.parse_args()
    names = ("no check", "check not due", "check every operation")
    times: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as folder:
        db = os.path.join(folder, "m.db")
        unchecked = MemoryManager(db, embedding=None)
        unchecked._owed.close()  # the watcher removed
        default = MemoryManager(db, embedding=None)
        unchecked.save_messages("s", [{"role": "user", "content": f"m {i}"} for i in range(200)])
        for _ in range(args.rounds):
            for name, mm in (("no check", unchecked), ("check not due", default)):
                times[name].append(_timed(lambda mm=mm: mm.get_newest_messages("s", 5), args.reads))
            # watchers are per database: one checking at every operation checks for every
            # manager's reads, so it is open only while it is timed
            os.environ["HAROMBE_OWED_PROBE_SECONDS"] = "0"
            try:
                every = MemoryManager(db, embedding=None)
            finally:
                del os.environ["HAROMBE_OWED_PROBE_SECONDS"]
            with every:
                times["check every operation"].append(
                    _timed(lambda mm=every: mm.get_newest_messages("s", 5), args.reads)
                )
        default.close()
        unchecked.close()
    base = statistics.median(times["no check"])
    print(f"{'manager':<24}{'us/read':>10}{'ratio':>8}")
    for name, found in times.items():
        median = statistics.median(found)
        print(f"{name:<24}{median:>10.1f}{median / base:>8.2f}")


if __name__ == "__main__":
    main()
