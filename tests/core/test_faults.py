"""Faults on SQLite: a writer killed mid-transaction, a full disk, a read-only file, a lost or
corrupted vector index. Each is provoked for real (signals, rlimits, permissions), in bounded time.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harombe_core.errors import StoreReadOnlyError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops

PY = sys.executable


def _child(
    code: str, *, demote: bool = False, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    preexec = None
    if demote and os.geteuid() == 0:
        def preexec() -> None:  # root ignores file modes: become nobody to feel them
            os.setgid(65534)
            os.setuid(65534)
    return subprocess.run([PY, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=preexec, check=False)


def _integrity(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def test_writer_killed_with_sigkill_mid_transaction(tmp_path: Path) -> None:
    db = tmp_path / "kill.db"
    code = f"""
        import sys
        from harombe_core.manager import MemoryManager
        from harombe_core.models import Message
        mm = MemoryManager({str(db)!r}, embedding=None, token_counter="approximate")
        n = 0
        while True:
            # 200 messages per transaction: a SIGKILL almost always lands inside one
            ids = mm.save_messages("s", [Message(role="user", content=f"b{{n}} m{{i}}",
                                                 metadata={{"batch": n}}) for i in range(200)])
            print(n, ids[0], ids[-1], flush=True)
            n += 1
    """
    proc = subprocess.Popen([PY, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    acked = []
    deadline = time.monotonic() + 60
    while len(acked) < 5 and time.monotonic() < deadline:
        acked.append(proc.stdout.readline().split())
    time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    acked += [line.split() for line in proc.stdout.read().splitlines()]
    assert len(acked) >= 5
    assert _integrity(db) == "ok"
    with MemoryManager(str(db), embedding=None, token_counter="approximate") as mm:
        messages = mm.get_messages("s")
        batches: dict[int, int] = {}
        for m in messages:
            batches[m.metadata["batch"]] = batches.get(m.metadata["batch"], 0) + 1
        assert set(batches.values()) == {200}  # every batch whole or absent, never half
        assert {int(a[0]) for a in acked} <= set(batches)  # nothing acknowledged was lost
        assert [m.id for m in messages] == sorted(m.id for m in messages)
        assert len({m.content for m in messages}) == len(messages)  # no duplicates
        assert mm.get_session("s").message_count == len(messages)
        mm.save_message("s", Message(role="user", content="still writable"))


def test_disk_full_gives_storage_full_and_an_intact_database(tmp_path: Path) -> None:
    db = tmp_path / "full.db"
    with MemoryManager(str(db), embedding=None) as mm:
        mm.save_message("s", Message(role="user", content="before the disk filled"))
    wal = Path(f"{db}-wal")
    size = db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    code = f"""
        import json, resource, signal
        from harombe_core.errors import HarombeError
        from harombe_core.manager import MemoryManager
        from harombe_core.models import Message
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
        mm = MemoryManager({str(db)!r}, embedding=None, token_counter="approximate")
        resource.setrlimit(resource.RLIMIT_FSIZE, ({size} + 400_000, {size} + 400_000))
        acked, error = 0, None
        try:
            for i in range(100_000):
                mm.save_messages("s", [Message(role="user", content=f"{{i}} " + "x" * 4000)])
                acked += 1
        except HarombeError as exc:
            error = type(exc).__name__
            message = str(exc)
        print(json.dumps({{"acked": acked, "error": error, "message": message}}))
    """
    result = _child(code)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["error"] == "StorageFullError"
    assert "full" in report["message"]
    assert report["acked"] > 0
    assert _integrity(db) == "ok"
    with MemoryManager(str(db), embedding=None) as mm:
        messages = mm.get_messages("s")
        assert messages[0].content == "before the disk filled"
        assert len(messages) == 1 + report["acked"]  # every acknowledged write, nothing more
        mm.save_message("s", Message(role="user", content="space again"))


def test_read_only_database_file(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with MemoryManager(str(db), embedding=None) as mm:
        mm.save_message("s", Message(role="user", content="readable"))
    as_root = os.geteuid() == 0
    if as_root:  # root ignores file modes; the immutable attribute binds even root
        subprocess.run(["chattr", "+i", str(db)], check=True)
    else:
        db.chmod(0o444)
    try:
        with MemoryManager(str(db), embedding=None) as mm:
            assert [m.content for m in mm.get_messages("s")] == ["readable"]
            with pytest.raises(StoreReadOnlyError, match="cannot be written"):
                mm.save_message("s", Message(role="user", content="nope"))
            with pytest.raises(StoreReadOnlyError):
                mm.create_session(session_id="new")
            assert [m.content for m in mm.get_messages("s")] == ["readable"]
            assert mm.get_recent_messages("s", 100)[0].content == "readable"
    finally:
        if as_root:
            subprocess.run(["chattr", "-i", str(db)], check=True)
        db.chmod(0o600)


def _semantic(db: Path) -> MemoryManager:
    from harombe_core.testing import FakeEmbedder

    return MemoryManager(str(db), embedding=FakeEmbedder(), vector_store="chroma")


@pytest.mark.parametrize("damage", ["deleted", "corrupted"])
def test_vector_index_lost_under_a_live_store_is_rebuilt(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "memory.db"
    with _semantic(db) as mm:
        mm.save_messages(
            "s", [Message(role="user", content=f"note about topic {i}") for i in range(30)]
        )
        mm.flush()
        assert mm.search_similar("note about topic 7", top_k=3)
    chroma = Path(f"{db}.chroma")
    assert chroma.is_dir()
    from chromadb.api.shared_system_client import SharedSystemClient

    SharedSystemClient.clear_system_cache()  # as a new process would start
    if damage == "deleted":
        shutil.rmtree(chroma)
    else:
        for file in chroma.rglob("*"):
            if file.is_file():
                file.write_bytes(b"\x00garbage" * 64)
    caplog.set_level(logging.INFO)
    with _semantic(db) as mm:
        mm.flush()
        deadline = time.monotonic() + 30
        while mm._semantic.index.count() < 30 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert mm._semantic.index.count() == 30
        hits = mm.search_similar("note about topic 7", top_k=3)
        assert hits
        assert mm.store.run(ops.count_messages()) == 30
    assert any("index" in r.getMessage().lower() for r in caplog.records)
