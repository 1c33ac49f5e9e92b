"""What opening a database costs for the check of rows a killed process still owed.

Every ``MemoryManager`` open asks the database whether a checkpointed session is still owed
(``harombe_core.store.rederive``: one primary-key probe) and loads LangChain only if one is.

* **Nothing owed**: open + first read + close of a manager on an existing file (kept open by
  another manager, as in an application), with the check and with it patched out, interleaved
  in one run so the machine's load falls on both alike.
* **A session owed**: a fresh process importing ``harombe_core``, opening the file and reading
  once, with nothing owed and with one session owed (the open then loads the LangChain adapter
  and writes the session before the read).

Run ``python benchmarks/bench_open_owed.py --help``.
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
import subprocess
import tempfile
import time

import harombe_core.manager as manager_module
from harombe_core import MemoryManager, Message
from harombe_core.store.rederive import Rederived, start_jobs

_CHECKPOINT = """
import itertools, sys
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from harombe_core import MemoryManager
from langchain_harombe import HarombeSaver
with MemoryManager(sys.argv[1], embedding=None) as mm, HarombeSaver(mm) as saver:
    replies = (AIMessage(f"reply {n}") for n in itertools.count())
    agent = create_agent(GenericFakeChatModel(messages=replies), [], checkpointer=saver)
    agent.invoke({"messages": [HumanMessage("hello")]}, {"configurable": {"thread_id": "t"}})
"""

_READ = """
import sys, time
start = time.perf_counter()
from harombe_core import MemoryManager
mm = MemoryManager(sys.argv[1], embedding=None)
count = len(mm.get_messages("t"))
print(time.perf_counter() - start, count)
"""


def nothing_owed(db: str, rounds: int) -> tuple[float, float]:
    """Median seconds of open + read + close (with the check, without it)."""
    with MemoryManager(db, embedding=None) as mm:
        sid = mm.create_session()
        mm.save_messages(sid, [Message(role="user", content=f"m {i}") for i in range(50)])
    keep = MemoryManager(db, embedding=None)

    def once() -> float:
        start = time.perf_counter()
        mm = MemoryManager(db, embedding=None)
        mm.get_messages(sid)
        mm.close()
        return time.perf_counter() - start

    checked, unchecked = [], []
    try:
        for _ in range(rounds):
            manager_module.start_jobs = start_jobs
            checked.append(once())
            manager_module.start_jobs = lambda manager: Rederived()
            unchecked.append(once())
    finally:
        manager_module.start_jobs = start_jobs
        keep.close()
    return statistics.median(checked), statistics.median(unchecked)


def one_owed(db: str, rounds: int) -> tuple[float, float]:
    """Median seconds of a fresh process's import + open + first read (nothing owed, one
    session owed: marked again before each run)."""
    subprocess.run([sys.executable, "-c", _CHECKPOINT, db], check=True)

    def run(marked: bool) -> float:
        if marked:
            with sqlite3.connect(db) as raw:
                raw.execute("INSERT OR IGNORE INTO checkpoint_mirror_due (thread_id) VALUES ('t')")
            raw.close()
        out = subprocess.run(
            [sys.executable, "-c", _READ, db], capture_output=True, text=True, check=True
        )
        seconds, count = out.stdout.split()
        assert count == "2", out.stdout
        return float(seconds)

    clean, owed = [], []
    for _ in range(rounds):
        clean.append(run(False))
        owed.append(run(True))
    return statistics.median(clean), statistics.median(owed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000, help="opens per variant in-process")
    parser.add_argument("--processes", type=int, default=5, help="fresh processes per variant")
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    checked, unchecked = nothing_owed(os.path.join(folder, "a.db"), args.rounds)
    extra = (checked - unchecked) * 1e6
    print(
        f"nothing owed, open+read+close: with the check {checked * 1e6:.0f} us, without "
        f"{unchecked * 1e6:.0f} us ({checked / unchecked:.3f}x, +{extra:.1f} us)"
    )
    clean, owed = one_owed(os.path.join(folder, "b.db"), args.processes)
    print(
        f"fresh process, import+open+first read: nothing owed {clean * 1e3:.0f} ms, one session "
        f"owed {owed * 1e3:.0f} ms ({owed / clean:.2f}x)"
    )


if __name__ == "__main__":
    main()
