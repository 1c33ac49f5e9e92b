"""The open-time cost of the migration that re-indexes Chinese, Japanese and Korean text
(SQLite schema 17, store/unspaced.py) on a file written before it.

An old-format file (schema 16, each run of Han, kana or Hangul one keyword token) of
``--messages`` messages, ``--cjk`` percent of them holding such text, is built once per share
(0 and the given one). Timed in the same run, on fresh copies of it, median of ``--rounds``:

* ``migration``: the migration's statements alone (a raw connection defining
  ``harombe_spaced``, as harombe's do), in one transaction;
* ``open old``: ``MemoryManager(path)`` opened and closed on the old file (the migration and
  everything else an open does);
* ``open new``: the same on a file already migrated (what every later open costs);
* ``scan``: the peer, ``SELECT count(*)`` reading every row's text of the keyword index
  (``messages_fts``), the least any re-index must read.

Run ``python benchmarks/bench_migration.py --help``.
"""

# ruff: noqa: E402  (imports follow the sys.path guard below)
from __future__ import annotations

import os
import sys

# Run as a script, this folder is sys.path[0]; a sibling benchmark named like a stdlib module
# (threading.py) must not shadow the standard library.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import argparse
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import schema, sqlite_file
from harombe_core.store import sqlite as sqlite_module
from harombe_core.store.fts import set_keyword_mark
from harombe_core.store.unspaced import spaced

ENGLISH = [
    "We talked about the trip to the coast and what to pack for it",
    "The meeting moved to Thursday afternoon because of the holiday",
    "She recommended a book about the history of bicycles in Europe",
    "My sister is learning to play the cello and practises every evening",
]
CJK = [
    "東京で寿司を食べました。とても美味しかった",
    "我昨天在北京买了一辆自行车",
    "어제 서울에서 친구를 만났어요",
]


def build(path: Path, messages: int, share: float, seed: int = 7) -> None:
    """An old-format file as harombe wrote it at schema 16, of ``messages`` messages."""
    old = len(schema.MIGRATIONS) - 1
    with (
        mock.patch.object(sqlite_module, "MIGRATIONS", schema.MIGRATIONS[:old]),
        mock.patch.object(sqlite_module, "SCHEMA_VERSION", old),
        mock.patch.object(sqlite_file, "spaced", lambda text: text),
        MemoryManager(path, embedding=None) as mm,
    ):
        mm.save_message("s", Message(role="user", content="hello"), user_id="u")
    rng = random.Random(seed)
    conn = sqlite3.connect(path)
    first = conn.execute("SELECT * FROM messages").fetchone()
    columns = [c[1] for c in conn.execute("PRAGMA table_info(messages)")]
    content_at = columns.index("content")
    rows, fts = [], []
    previous = "hello"
    for i in range(messages - 1):
        pool = CJK if rng.random() < share else ENGLISH
        text = f"{rng.choice(pool)} {i}"
        row = list(first)
        row[0] = first[0] + 1 + i
        row[content_at] = text
        rows.append(row)
        fts.append((row[0], text, previous))
        previous = text
    marks = ", ".join("?" * len(columns))
    with conn:
        conn.executemany(f"INSERT INTO messages VALUES ({marks})", rows)
        conn.executemany("INSERT INTO messages_fts (rowid, content, context) VALUES (?, ?, ?)", fts)
        set_keyword_mark(conn, first[0] + messages - 1)
    conn.close()


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _migration(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.create_function("harombe_spaced", 1, spaced, deterministic=True)
    conn.execute("BEGIN")
    for statement in schema.MIGRATIONS[-1]:
        conn.execute(statement)
    conn.execute("COMMIT")
    conn.close()


def _open(path: Path) -> None:
    with MemoryManager(path, embedding=None):
        pass


def _scan(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("SELECT count(*) FROM messages_fts WHERE content || context <> ''").fetchone()
    conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--cjk", type=float, default=2.0, help="percent of messages")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for percent in (0.0, args.cjk):
            base = Path(tmp) / f"old-{percent}.db"
            build(base, args.messages, percent / 100)
            times: dict[str, list[float]] = {"migration": [], "open old": [], "open new": []}
            times["scan"] = []
            for r in range(args.rounds):
                copy = Path(tmp) / f"copy-{r}.db"
                shutil.copy(base, copy)
                times["scan"].append(_timed(lambda: _scan(copy)))  # noqa: B023
                times["migration"].append(_timed(lambda: _migration(copy)))  # noqa: B023
                shutil.copy(base, copy)
                times["open old"].append(_timed(lambda: _open(copy)))  # noqa: B023
                times["open new"].append(_timed(lambda: _open(copy)))  # noqa: B023
                copy.unlink()
            scan = statistics.median(times["scan"])
            print(f"{args.messages} messages, {percent:g}% CJK (median of {args.rounds}):")
            for name, values in times.items():
                median = statistics.median(values)
                print(f"  {name:10s} {median * 1000:9.1f} ms  {median / scan:7.1f}x scan")


if __name__ == "__main__":
    main()
