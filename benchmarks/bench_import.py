"""How much memory and time ``harombe import`` takes, as the export grows.

For each size (default 300 sessions of 100 messages, and 3 times that), an export of a whole
store (one JSON bundle, as ``harombe export`` writes it) is made in a temporary folder, then:

* memory: the peak of Python allocations (``tracemalloc``) while reading the file three ways:
  ``json.loads`` of the whole text (how imports used to start), every record held at once
  (``export.read_records``), and a session at a time (``export.iter_records``, what
  ``import_file`` does). The streamed figure should stay flat as the file grows;
* time: ``export.import_file`` into a new SQLite file (checking the file, then writing it all in
  one transaction), beside the floor of a raw ``sqlite3`` ``executemany`` of the same messages
  into an equivalent table in one transaction, and optionally into PostgreSQL.

Figures are printed with the ratios between peers of the same run. Run
``python benchmarks/bench_import.py --help``.
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
import gc
import json
import sqlite3
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harombe_core import export as ex
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def make_export(path: Path, sessions: int, per_session: int, fmt: str = "json") -> Path:
    """A store of ``sessions`` sessions (ids ``s0000``, ...; threads, a per-message summary,
    a session summary) written to ``path`` in ``fmt``, as ``harombe export`` writes it."""
    with MemoryManager(":memory:", embedding=None) as mm:
        for s in range(sessions):
            sid = mm.create_session(
                f"prompt {s}", {"n": s}, user_id=f"u{s % 7}", session_id=f"s{s:04d}"
            )
            ids = mm.save_messages(
                sid,
                [
                    Message(
                        role="user" if i % 2 == 0 else "assistant",
                        content=f"session {s} turn {i} " + "some words of the turn " * 8,
                        metadata={"i": i},
                        created_at=T0 + timedelta(minutes=s * 1000 + i),
                    )
                    for i in range(per_session)
                ],
            )
            for i in range(1, len(ids), 3):
                mm.store.run(ops.set_parent(ids[i], ids[i - 1]))
            mm.store.run(ops.set_message_summary(ids[0], {"title": "t", "summary": f"s{s}"}))
            mm.store.run(ops.update_session(sid, summary=f"summary {s}", summary_until_id=ids[-1]))
        return ex.write_text(path, ex.export_store(mm, fmt))


def peak_mib(fn: Callable[[], object]) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def streamed(path: Path) -> int:
    return sum(len(r.messages) for r in ex.iter_records(path))


def raw_floor(path: Path, db: Path) -> float:
    """Seconds for raw sqlite3 to insert the export's messages in one transaction."""
    rows = [
        (r.session_id, m.role, m.content, json.dumps(m.metadata), m.created_at.isoformat())
        for r in ex.iter_records(path)
        for m in r.messages
    ]
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, "
        "content TEXT, metadata TEXT, created_at TEXT)"
    )
    conn.execute("CREATE INDEX messages_session ON messages (session_id, id)")
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO messages (session_id, role, content, metadata, created_at) "
        "VALUES (?, ?, ?, ?, ?)",
        rows,
    )
    conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


def timed_import(path: Path, location: str) -> float:
    with MemoryManager(location, embedding=None) as mm:
        started = time.perf_counter()
        ex.import_file(mm, path)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[300, 900])
    parser.add_argument("--messages", type=int, default=100, help="messages per session")
    parser.add_argument("--postgres-url", help="also import into this (empty) database")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for sessions in args.sessions:
            path = make_export(Path(folder) / f"export{sessions}.json", sessions, args.messages)
            size = path.stat().st_size / 2**20
            whole = peak_mib(lambda path=path: json.loads(path.read_bytes()))
            held = peak_mib(lambda path=path: ex.read_records(path))
            stream = peak_mib(lambda path=path: streamed(path))
            print(
                f"{sessions} sessions x {args.messages} messages, {size:.1f} MiB file: peak "
                f"memory json.loads {whole:.1f} MiB, all records {held:.1f} MiB, streamed "
                f"{stream:.1f} MiB (streamed / json.loads = {stream / whole:.3f})"
            )
            floor = raw_floor(path, Path(folder) / f"raw{sessions}.db")
            harombe = timed_import(path, str(Path(folder) / f"harombe{sessions}.db"))
            line = (
                f"  import: harombe SQLite {harombe:.2f} s, raw sqlite3 floor {floor:.2f} s "
                f"(harombe / floor = {harombe / floor:.1f})"
            )
            if args.postgres_url:
                from harombe_core.store.postgres import PostgresStore

                store = PostgresStore(args.postgres_url)
                store.close()
                pg = timed_import(path, args.postgres_url)
                line += f", harombe PostgreSQL {pg:.2f} s (PostgreSQL / floor = {pg / floor:.1f})"
                with MemoryManager(args.postgres_url, embedding=None) as mm:
                    for session in mm.list_sessions(limit=None):
                        mm.delete_session(session.id)
            print(line)


if __name__ == "__main__":
    main()
