"""An import killed at any moment leaves all of its file or none of it, and runs again.

Real processes: ``harombe import`` and a script calling ``import_file`` import a 300-session
export (threads, per-message and session summaries) into SQLite and PostgreSQL and are killed
with SIGKILL, once while their transaction is writing (seen from outside: SQLite's write lock
held, a PostgreSQL backend holding a transaction id) and at random moments. After each kill the
store holds no session of the file or every one exactly as an uninterrupted import leaves it;
running the same import again then finishes it (or, when the kill came after the commit, says
the sessions are already there and changes nothing).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from harombe_core.manager import MemoryManager
from harombe_core.migrate import session_checksum
from harombe_core.store import ops

SESSIONS, PER_SESSION = 300, 10
_API = (
    "import sys\n"
    "from harombe_core import MemoryManager\n"
    "from harombe_core.export import import_file\n"
    "with MemoryManager(sys.argv[1], embedding=None) as mm:\n"
    "    print(len(import_file(mm, sys.argv[2]).session_ids))\n"
)
_databases = itertools.count()

State = dict[str, tuple[int, str]]


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same 300 sessions (threads, summaries) as a JSON bundle and as JSONL, made by the
    import benchmark's generator."""
    spec = importlib.util.spec_from_file_location(
        "bench_import", Path(__file__).parents[2] / "benchmarks" / "bench_import.py"
    )
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    folder = tmp_path_factory.mktemp("exports")
    return {
        fmt: bench.make_export(folder / f"all.{fmt}", SESSIONS, PER_SESSION, fmt)
        for fmt in ("json", "jsonl")
    }


@pytest.fixture(params=["sqlite", "postgres"])
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], str]:
    """Makes a new, initialised, empty store and returns its location."""

    def make() -> str:
        if request.param == "sqlite":
            location = str(tmp_path / f"kill{next(_databases)}.db")
        else:
            server = request.getfixturevalue("pg_server")
            location = server.create_database(f"k{os.getpid()}_{next(_databases)}")
        MemoryManager(location, embedding=None).close()  # the schema exists before the import
        return location

    return make


def _command(kind: str, location: str, path: Path) -> list[str]:
    if kind == "cli":
        return [
            sys.executable, "-c", "from harombe_core.cli import main; main()",
            "import", str(path), "--db", location, "--no-embed",  # the transaction is the point
        ]
    return [sys.executable, "-c", _API, location, str(path)]


def _writing(location: str) -> bool:
    """Whether another process is inside a write transaction on ``location`` right now."""
    if location.startswith("postgresql://"):
        with psycopg.connect(location, autocommit=True) as conn:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = "
                "l.pid WHERE a.datname = current_database() AND l.locktype = 'transactionid' "
                "AND l.pid <> pg_backend_pid())"
            ).fetchone()
            return bool(row and row[0])
    probe = sqlite3.connect(location, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:  # "database is locked": the import holds the write lock
        return True
    finally:
        probe.close()


def _state(location: str) -> State:
    with MemoryManager(location, embedding=None) as mm:
        if not location.startswith("postgresql://"):
            assert mm.store.query("PRAGMA integrity_check") == [("ok",)]  # type: ignore[attr-defined]
        return {
            s.id: session_checksum(mm.store, s) for s in mm.store.run(ops.list_sessions(limit=None))
        }


def _kill(command: list[str], location: str, after: float | None) -> str:
    """Run ``command`` and SIGKILL it ``after`` seconds, or (None) once it is writing."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if after is None:
        deadline = time.monotonic() + 120
        while proc.poll() is None and not _writing(location) and time.monotonic() < deadline:
            time.sleep(0.005)
        point = "while writing" if proc.poll() is None else "after it finished"
    else:
        time.sleep(after)
        point = f"after {after:.2f} s" + (" (already finished)" if proc.poll() is not None else "")
    proc.send_signal(signal.SIGKILL)  # a no-op once it has exited and been reaped
    proc.communicate()
    return point


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "fmt"), [("cli", "json"), ("api", "jsonl")])
def test_import_killed_at_any_moment_is_all_or_nothing_and_reruns(
    kind: str, fmt: str, exports: dict[str, Path], fresh: Callable[[], str]
) -> None:
    path = exports[fmt]
    reference = fresh()
    started = time.monotonic()
    done = subprocess.run(
        _command(kind, reference, path), capture_output=True, text=True, timeout=300, check=False
    )
    duration = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    expected = _state(reference)
    assert len(expected) == SESSIONS
    assert {n for n, _ in expected.values()} == {PER_SESSION}

    seed = random.randrange(1 << 30)
    moments: list[float | None] = [None, *random.Random(seed).sample(range(1000), 2)]
    for moment in moments:
        location = fresh()
        command = _command(kind, location, path)
        after = None if moment is None else duration * moment / 1000
        point = _kill(command, location, after)
        state = _state(location)
        assert state in ({}, expected), (
            f"killed {point} (seed {seed}): {len(state)} of {SESSIONS} sessions, "
            f"{sum(n for n, _ in state.values())} messages"
        )
        again = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        if state:  # the kill came after the commit: nothing to finish, nothing changed
            assert again.returncode != 0
            assert "already in the store" in again.stderr
        else:
            assert again.returncode == 0, f"re-run after a kill {point}: {again.stderr}"
        assert _state(location) == expected, f"re-run after a kill {point} (seed {seed})"
