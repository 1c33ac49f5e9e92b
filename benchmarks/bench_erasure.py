"""What deleting costs: the delete call, and the close that erases what it left in the files.

Two stores of the same ``--messages`` messages (``--sessions`` sessions), built alike in one
run. In one a session is deleted before close, in the other nothing is; both are then closed.
The difference between the two closes is the erasure (FTS5 ``optimize`` and a WAL checkpoint;
with ``--chroma``, rebuilding the embedded Chroma collection from the stored vectors and
vacuuming its folder). Also timed: ``delete_session`` itself and deleting one message with
``replace_messages`` (which re-indexes the next message).

Vectors come from harombe's FakeEmbedder (no model), so the numbers are about storage, not
embedding. Run ``python benchmarks/bench_erasure.py --help``.
"""

# ruff: noqa: E402  (imports follow the sys.path guard below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from harombe_core import MemoryManager, Message
from harombe_core.testing import FakeEmbedder

#: The words messages are made of (a small vocabulary, so each word is in many messages).
WORDS = "garden river piano guitar painting camping hiking pottery recipe bakery museum violin"
WORDS += " concert festival beach mountain sunset library novel poetry school teacher doctor"
WORDS += " family sister brother parents wedding birthday dinner kitchen coffee breakfast yoga"


VOCABULARY = WORDS.split()


def build(path: Path, messages: int, sessions: int, chroma: bool) -> MemoryManager:
    rng = random.Random(1)
    if chroma:
        mm = MemoryManager(str(path), embedding=FakeEmbedder(), vector_store="chroma")
    else:
        mm = MemoryManager(str(path), embedding=None)
    per = messages // sessions
    for s in range(sessions):
        batch = [
            Message(role="user", content=" ".join(rng.choices(VOCABULARY, k=rng.randint(8, 30))))
            for _ in range(per)
        ]
        mm.save_messages(f"s{s}", batch)
    mm.flush()
    return mm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000, help="messages per store")
    parser.add_argument("--sessions", type=int, default=100, help="sessions they fall in")
    parser.add_argument("--chroma", action="store_true", help="with an embedded Chroma index")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        kept = build(Path(folder) / "kept.db", args.messages, args.sessions, args.chroma)
        erased = build(Path(folder) / "erased.db", args.messages, args.sessions, args.chroma)
        times = []
        for s in range(1, 8):  # the median of seven, each in its own session
            ids = [m.id for m in erased.get_messages(f"s{s}", limit=3)]
            t0 = time.perf_counter()
            erased.replace_messages(f"s{s}", [ids[1]])
            times.append(time.perf_counter() - t0)
        one_message = statistics.median(times)
        t0 = time.perf_counter()
        erased.delete_session("s0")
        one_session = time.perf_counter() - t0
        t0 = time.perf_counter()
        kept.close()
        close_kept = time.perf_counter() - t0
        t0 = time.perf_counter()
        erased.close()
        close_erased = time.perf_counter() - t0
    index = "SQLite + embedded Chroma" if args.chroma else "SQLite (keyword index only)"
    print(f"{args.messages:,} messages in {args.sessions} sessions, {index}")
    print(f"  replace_messages (one message, median): {one_message * 1000:8.1f} ms")
    size = args.messages // args.sessions
    print(f"  delete_session ({size} messages):   {one_session * 1000:8.1f} ms")
    print(f"  close, nothing deleted:           {close_kept * 1000:8.1f} ms")
    print(f"  close after the deletes:          {close_erased * 1000:8.1f} ms")
    print(f"  ratio close erased / close kept:  {close_erased / max(close_kept, 1e-9):8.1f}x")


if __name__ == "__main__":
    main()
