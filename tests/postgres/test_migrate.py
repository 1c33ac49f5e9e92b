"""`harombe migrate`: SQLite to PostgreSQL and back, threads and summaries kept, resumable,
verified."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from harombe_core.cli import app
from harombe_core.errors import InvalidInputError, StoreNotFoundError
from harombe_core.manager import MemoryManager
from harombe_core.migrate import MigrationError, migrate, session_checksum
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.store.pg_server import EmbeddedPostgres

T0 = datetime(2024, 1, 1, tzinfo=UTC)
runner = CliRunner()


def _fill(url: str, sessions: int = 6, per_session: int = 40) -> dict[str, tuple[int, str]]:
    with MemoryManager(url, embedding=None) as mm:
        for s in range(sessions):
            sid = mm.create_session(f"prompt {s}", {"n": s, "q": "it's"}, user_id=f"u{s % 3}",
                                    session_id=f"session-{s}")
            ids = mm.save_messages(sid, [
                Message(role="user" if i % 2 == 0 else "assistant", content=f"s{s} turn {i} ✓",
                        metadata={"i": i}, created_at=T0 + timedelta(minutes=i))
                for i in range(per_session)
            ])
            for i in range(1, len(ids)):
                mm.store.run(ops.set_parent(ids[i], ids[i - 1] if i % 5 else ids[0]))  # a real tree
            mm.store.run(ops.set_message_summary(ids[3], {"title": "t", "summary": f"s{s}"}))
            mm.store.run(
                ops.update_session(
                    sid, summary=f"summary {s}", summary_data={"k": s}, summary_until_id=ids[10]
                )
            )
        # a thread that points into another session
        other = mm.get_messages("session-0")[0].id
        last = mm.get_messages(f"session-{sessions - 1}")[-1].id
        mm.store.run(ops.set_parent(int(last or 0), other))
        return {
            s.id: session_checksum(mm.store, s) for s in mm.store.run(ops.list_sessions(limit=None))
        }


def _checksums(url: str) -> dict[str, tuple[int, str]]:
    with MemoryManager(url, embedding=None) as mm:
        return {
            s.id: session_checksum(mm.store, s) for s in mm.store.run(ops.list_sessions(limit=None))
        }


def test_sqlite_to_postgres_and_back(tmp_path: Path, pg_url: str) -> None:
    src = str(tmp_path / "src.db")
    expected = _fill(src)
    report = migrate(src, pg_url, batch_size=7, progress=False)
    assert report.verified
    assert (report.sessions, report.messages) == (6, 240)
    assert _checksums(pg_url) == expected
    back = str(tmp_path / "back.db")
    migrate(pg_url, back, progress=False)
    assert _checksums(back) == expected
    with MemoryManager(back, embedding=None) as a, MemoryManager(src, embedding=None) as b:
        ids = [s.id for s in b.list_sessions(limit=None)]
        assert [s.id for s in a.list_sessions(limit=None)] == ids
        assert a.list_sessions()[0].updated_at == b.list_sessions()[0].updated_at


def test_interrupted_migration_resumes_without_duplicates(tmp_path: Path, pg_url: str) -> None:
    src = str(tmp_path / "src.db")
    expected = _fill(src)
    seen = 0

    def crash(n: int) -> None:
        nonlocal seen
        seen += n
        if seen >= 100:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        migrate(src, pg_url, batch_size=9, progress=False, on_batch=crash)
    partial = _checksums(pg_url)
    assert 0 < sum(n for n, _ in partial.values()) < 240
    report = migrate(src, pg_url, batch_size=9, progress=False)
    assert report.verified
    assert report.copied_messages == 240 - sum(n for n, _ in partial.values())
    assert _checksums(pg_url) == expected
    again = migrate(src, pg_url, progress=False)  # a third run copies nothing
    assert (again.copied_messages, again.skipped_sessions) == (0, 6)


def test_cli_killed_with_sigkill_then_rerun(tmp_path: Path, pg_server: EmbeddedPostgres) -> None:
    src = str(tmp_path / "src.db")
    expected = _fill(src, sessions=4, per_session=400)
    dst = pg_server.create_database("migrate_kill")
    from harombe_core.cli import app

    sub = ["migrate"] if len(app.registered_commands) > 1 else []  # typer flattens one command
    cmd = [sys.executable, "-c", "from harombe_core.cli import main; main()", *sub,
           "--from", src, "--to", dst, "--batch-size", "1", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    copied = 0
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        try:
            with psycopg.connect(dst) as conn:
                copied = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        except psycopg.errors.UndefinedTable:  # schema not created yet
            continue
        if copied >= 200:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert copied >= 200, proc.stderr.read() if proc.stderr else ""
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert "verified" in rerun.stdout
    assert _checksums(dst) == expected


def test_refuses_a_foreign_session_with_the_same_id(tmp_path: Path, pg_url: str) -> None:
    src = str(tmp_path / "src.db")
    _fill(src, sessions=1, per_session=12)
    with MemoryManager(pg_url, embedding=None) as mm:
        mm.save_message("session-0", Message(role="user", content="something else"))
    with pytest.raises(MigrationError):
        migrate(src, pg_url, progress=False)


def _has_store(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass('harombe_schema') IS NOT NULL").fetchone()
        return bool(row and row[0])


def test_a_database_without_a_store_is_no_source_and_gets_none(
    tmp_path: Path, pg_url: str
) -> None:
    destination = tmp_path / "new.db"
    for way in ("api", "cli"):
        if way == "api":
            with pytest.raises(StoreNotFoundError, match="holds no harombe store"):
                migrate(pg_url, str(destination), progress=False)
        else:
            result = runner.invoke(
                app, ["migrate", "--from", pg_url, "--to", str(destination), "--no-progress"]
            )
            assert result.exit_code == 1
            assert result.stderr.startswith("error: ")
            assert "holds no harombe store" in result.stderr
            assert len(result.stderr.strip().splitlines()) == 1
        assert not _has_store(pg_url)  # nothing created at the source ...
        assert list(tmp_path.iterdir()) == []  # ... nor at the destination


def test_a_missing_database_is_no_source(pg_server: EmbeddedPostgres, tmp_path: Path) -> None:
    url = pg_server.create_database("exists_migrate")
    missing = url.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(StoreNotFoundError, match="does not exist"):
        migrate(missing, str(tmp_path / "new.db"), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_sqlite_source_creates_no_postgres_store(tmp_path: Path, pg_url: str) -> None:
    with pytest.raises(StoreNotFoundError, match="no database at"):
        migrate(str(tmp_path / "nope.db"), pg_url, progress=False)
    assert not _has_store(pg_url)
    assert list(tmp_path.iterdir()) == []


def test_the_same_database_at_both_ends_is_refused(pg_url: str) -> None:
    MemoryManager(pg_url, embedding=None).close()
    spelled_out = pg_url + "?connect_timeout=5"  # another spelling of the same database
    for destination in (pg_url, spelled_out):
        with pytest.raises(InvalidInputError, match="are the same store"):
            migrate(pg_url, destination, progress=False)


def test_a_server_moved_to_postgres_keeps_its_api_keys(tmp_path: Path, pg_url: str) -> None:
    """A team moving ``harombe serve`` from its SQLite file to PostgreSQL with ``harombe
    migrate`` keeps the keys its apps and assistants hold: each key's hash, user, label and
    revocation are copied (a revoked key stays revoked), and a re-run copies none twice."""
    from harombe_core.server.keys import create_key, list_keys, resolve_key, revoke_key

    path = str(tmp_path / "served.db")
    with MemoryManager(path, embedding=None) as mm:
        mm.save_message(mm.create_session(user_id="ann"), Message(role="user", content="hi"))
        anns, _ = create_key(mm.store, user_id="ann", label="app1")
        admin, _ = create_key(mm.store, admin=True)
        old, old_record = create_key(mm.store, user_id="bob")
        assert revoke_key(mm.store, old_record.id)
        listed = list_keys(mm.store)
    report = migrate(path, pg_url, progress=False)
    assert (report.api_keys, report.copied_api_keys) == (3, 3)
    assert report.verified
    with MemoryManager(pg_url, embedding=None) as moved:
        assert list_keys(moved.store) == listed
        scope = resolve_key(moved.store, anns)
        assert scope is not None
        assert scope.user_id == "ann"
        admin_scope = resolve_key(moved.store, admin)
        assert admin_scope is not None
        assert admin_scope.admin
        assert resolve_key(moved.store, old) is None  # revoked there too
    again = migrate(path, pg_url, progress=False)
    assert (again.api_keys, again.copied_api_keys) == (3, 0)
