"""A full disk raises, never freezes the process: on the in-database index and with Chroma.

Each run is a child process that fills its database under a file-size limit (``RLIMIT_FSIZE``
at the database's size plus 40 KB, ``SIGXFSZ`` ignored so a write gets ``EFBIG`` like on a full
disk) while the background embedder writes vectors, then reads, searches, flushes with a
timeout and closes. Every run must end with a typed ``StorageFullError``, every acknowledged
message readable and nothing else, search working, and the database intact.

Why many runs: with ChromaDB the failure depended on which thread met the limit first. When
Chroma's own write failed ("disk I/O error"), its next call could block forever inside its Rust
code while holding the GIL, freezing every thread (9 runs in 25 before the fix, see
``ChromaVectorIndex._make_room``). The wall-clock guard below is minutes long: it fails a run
only when it really hangs, never because the machine is slow.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.testing import FakeEmbedder

RUNS = 25
HEADROOM = 40_000
#: A run that has not finished after this long is hung (a run takes seconds).
HANG_SECONDS = 300

CHILD = textwrap.dedent(
    """
    import faulthandler, json, resource, signal, sys
    from harombe_core.errors import HarombeError, StorageFullError
    from harombe_core.manager import MemoryManager
    from harombe_core.models import Message
    from harombe_core.testing import FakeEmbedder

    db, vector_store, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    faulthandler.dump_traceback_later({hang}, exit=True)  # a hang leaves its stacks behind
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, as on a full disk, not a kill
    mm = MemoryManager(db, embedding=FakeEmbedder(), vector_store=vector_store,
                       token_counter="approximate")
    mm.flush()
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    acked, error = 0, None
    for i in range(10_000):
        try:
            mm.save_messages("s", [Message(role="user", content=f"{{i}} " + "lorem ipsum " * 150)])
            acked += 1
            mm.flush(timeout=60)
        except HarombeError as exc:
            error = type(exc).__name__
            break
    flushed = None
    try:
        mm.flush(timeout=5)  # returns or raises in time, never waits on a stuck write
        flushed = "returned"
    except HarombeError as exc:
        flushed = type(exc).__name__
    report = {{
        "acked": acked,
        "error": error,
        "flush": flushed,
        "read": len(mm.get_messages("s")),
        "found": [m.content for m in mm.search_similar("written before the limit", top_k=5,
                                                       session_id="s")],
    }}
    mm.close()
    print(json.dumps(report))
    """
).format(hang=HANG_SECONDS - 30)


def _seed(folder: Path, vector_store: str) -> tuple[Path, int]:
    db = folder / "full.db"
    with MemoryManager(str(db), embedding=FakeEmbedder(), vector_store=vector_store) as mm:
        mm.save_message("s", Message(role="user", content="written before the limit"))
        mm.flush()
    size = sum(p.stat().st_size for p in folder.iterdir() if p.name.startswith("full.db-wal"))
    return db, db.stat().st_size + size + HEADROOM


def _run(folder: Path, vector_store: str) -> dict:
    db, limit = _seed(folder, vector_store)
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(db), vector_store, str(limit)],
            capture_output=True,
            text=True,
            timeout=HANG_SECONDS,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"a run hung for {HANG_SECONDS} s: {exc.stderr}")
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    with sqlite3.connect(db) as con:
        report["integrity"] = con.execute("PRAGMA integrity_check").fetchone()[0]
    with MemoryManager(str(db), embedding=None) as mm:
        report["after"] = len(mm.get_messages("s"))
    return report


@pytest.mark.parametrize("vector_store", ["database", "chroma"])
def test_a_full_disk_raises_storage_full_and_never_hangs(tmp_path: Path, vector_store: str) -> None:
    folders = [tmp_path / f"run{n}" for n in range(RUNS)]
    for folder in folders:
        folder.mkdir()
    with ThreadPoolExecutor(max_workers=3) as pool:
        reports = list(pool.map(lambda f: _run(f, vector_store), folders))
    for report in reports:
        assert report["error"] == "StorageFullError", report
        assert report["flush"] in ("returned", "StorageFullError"), report
        assert report["acked"] >= 1, report  # the limit left room for a few messages
        assert report["read"] == 1 + report["acked"], report  # each acknowledged, no other
        assert report["after"] == report["read"], report  # and still there after reopening
        assert "written before the limit" in report["found"], report  # search still works
        assert report["integrity"] == "ok", report


GUARDS = textwrap.dedent(
    """
    import json, resource, signal, sys
    from pathlib import Path
    import numpy as np
    from harombe_core.errors import VectorIndexError
    from harombe_core.vectors.chroma import ChromaVectorIndex

    folder, guard = Path(sys.argv[1]), sys.argv[2]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    index = ChromaVectorIndex(mode="persistent", path=str(folder))
    vectors = np.eye(4, 8, dtype=np.float32)
    index.upsert([1, 2, 3, 4], vectors, [{"session_id": "s"}] * 4)
    if guard == "latch":  # the room check off: Chroma meets the limit itself
        index._make_room = lambda adding: None
    largest = max(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    resource.setrlimit(resource.RLIMIT_FSIZE, (largest + 1_000, largest + 1_000))
    said = []
    for n in range(3):
        big = np.random.default_rng(n).random((2_000, 8), dtype=np.float32)
        try:
            index.upsert(list(range(100 + n * 2_000, 100 + (n + 1) * 2_000)), big,
                         [{"session_id": "s"}] * 2_000)
            said.append("written")
        except VectorIndexError as exc:
            said.append(str(exc))
    print(json.dumps(said))
    """
)


@pytest.mark.parametrize("guard", ["room", "latch"])
def test_chroma_is_not_written_without_room_nor_called_after_a_failed_write(
    tmp_path: Path, guard: str
) -> None:
    pytest.importorskip("chromadb")
    try:
        done = subprocess.run(
            [sys.executable, "-c", GUARDS, str(tmp_path / "index"), guard],
            capture_output=True,
            text=True,
            timeout=HANG_SECONDS,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"a Chroma write under a file-size limit hung: {exc.stderr}")
    assert done.returncode == 0, done.stderr[-4000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    if guard == "room":  # refused before Chroma is asked, every time
        assert all("was not written" in s for s in said), said
    else:  # Chroma failed once; it is not called again
        assert "written" not in said, said
        assert all("for want of space" in s for s in said), said
