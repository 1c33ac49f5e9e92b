"""A keyword search never waits for the write lock, and finds what the index does not hold yet.

Writers do not index (store/fts.py): a background thread catches the index up after they
commit. A search reads the index plus the unindexed messages (the tail), which it scores with
FTS5's own BM25. The unindexed tail is made the way it happens for real: a writer process
SIGKILLed right after its save returned, before its indexer ran.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harombe_core import MemoryManager, Message
from harombe_core.store import fts, ops
from harombe_core.store.base import SearchScope
from harombe_core.store.sqlite import SQLiteStore
from tests.reliability.test_read_only_folder import folder, unprivileged

__all__ = ["folder"]  # the fixture, used by name below

ROOT = Path(__file__).resolve().parents[2]
FILLER = [
    "we walked to the lake on sunday",
    "the weather was fine and the lake was calm",
    "a balloon drifted over the hills",
    "I booked a table for dinner by the lake",
    "the train to the coast leaves at nine",
]
FRESH = "a zeppelin landed by the lake this morning"


def _killed_writer(path: Path, texts: list[str], session: str = "fresh") -> None:
    """Save ``texts`` in a real process that is SIGKILLed as soon as the save returns, with
    the background worker held so that it cannot index them first."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from harombe_core import MemoryManager, Message
        from harombe_core.testing import hold_background
        mm = MemoryManager({str(path)!r}, embedding=None, token_counter="approximate")
        with hold_background():
            mm.save_messages({session!r}, [Message(role="user", content=t) for t in {texts!r}],
                             user_id="u")
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], env=env, check=False, timeout=120)
    assert done.returncode == -9


def _unindexed(path: Path) -> int:
    raw = sqlite3.connect(path)
    try:
        (mark,) = raw.execute(
            "SELECT value FROM harombe_meta WHERE key = 'keyword_index_upto'"
        ).fetchone()
        (latest,) = raw.execute("SELECT MAX(id) FROM messages").fetchone()
    finally:
        raw.close()
    return int(latest) - int(mark)


@pytest.fixture
def with_tail(tmp_path: Path) -> Path:
    """A file whose newest message is committed but not in the keyword index."""
    path = tmp_path / "tail.db"
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        mm.save_messages("old", [Message(role="user", content=t) for t in FILLER], user_id="u")
    _killed_writer(path, [FRESH])
    assert _unindexed(path) == 1
    return path


def test_a_message_is_found_before_it_is_indexed_and_ranks_the_same_after(
    with_tail: Path,
) -> None:
    store = SQLiteStore(with_tail)
    try:
        before = store.keyword_search("zeppelin lake", limit=3)
        scoped = store.keyword_search("zeppelin lake", limit=3, scope=SearchScope(user_id="u"))
        store.index_keywords()
        assert _unindexed(with_tail) == 0
        after = store.keyword_search("zeppelin lake", limit=3)
        scoped_after = store.keyword_search(
            "zeppelin lake", limit=3, scope=SearchScope(user_id="u")
        )
    finally:
        store.close()
    assert before[0].message.content == FRESH
    assert scoped[0].message.content == FRESH
    # scored with the user's own statistics, the tail counting as part of them: the same
    # before and after it is indexed
    assert [h.message.id for h in scoped] == [h.message.id for h in scoped_after]
    assert [h.score for h in scoped] == pytest.approx([h.score for h in scoped_after], rel=1e-9)
    assert [h.message.id for h in before] == [h.message.id for h in after]
    # the tail is scored with FTS5's own formula, on the same totals it then uses
    assert before[0].score == pytest.approx(after[0].score, rel=1e-6)


def test_a_search_completes_while_another_process_holds_the_write_lock(
    with_tail: Path,
) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
            import sqlite3, sys
            c = sqlite3.connect({str(with_tail)!r}, isolation_level=None)
            c.execute("BEGIN IMMEDIATE")
            print("locked", flush=True)
            sys.stdin.readline()
            c.execute("ROLLBACK")
            """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        # a writer here would give up after 50 ms; the search must not need the lock at all
        store = SQLiteStore(with_tail, busy_timeout_ms=50, max_retries=0)
        try:
            hits = store.keyword_search("zeppelin", limit=5)
            assert [h.message.content for h in hits] == [FRESH]
            assert _unindexed(with_tail) == 1  # nobody could index it: it came from the tail
        finally:
            assert holder.stdin is not None
            holder.stdin.write("\n")
            holder.stdin.flush()
            holder.wait(timeout=30)
            store.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_read_only_copy_finds_the_messages_its_writer_did_not_index(folder: Path) -> None:
    db = folder / "memory.db"
    with MemoryManager(db, embedding=None, token_counter="approximate") as mm:
        mm.save_messages("old", [Message(role="user", content=t) for t in FILLER], user_id="u")
    _killed_writer(db, [FRESH])
    # the killed writer leaves its WAL behind; fold it in so the copy is one closed file
    raw = sqlite3.connect(db)
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    for extra in ("-wal", "-shm"):
        Path(f"{db}{extra}").unlink(missing_ok=True)
    for file in folder.iterdir():
        file.chmod(0o444)
    folder.chmod(0o555)
    assert _unindexed(db) == 1

    def search() -> dict[str, Any]:
        with MemoryManager(db, embedding=None, token_counter="approximate") as mm:
            hits = mm.store.keyword_search("zeppelin lake", limit=2)
            return {
                "read_only": mm.store.read_only,
                "hits": [h.message.content for h in hits],
            }

    try:
        out = unprivileged(search)
    finally:
        folder.chmod(0o755)
    assert out["read_only"] is True
    assert out["hits"][0] == FRESH


def test_messages_saved_by_many_threads_are_all_indexed_by_close(tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:

        def write(n: int) -> None:
            for i in range(20):
                mm.save_message(f"s{n}", Message(role="user", content=f"kettle {n} {i}"))

        threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(mm.store.keyword_search("kettle", limit=100)) == 80
    assert _unindexed(path) == 0  # the last close caught up whatever the thread had not
    # the file's keyword job left the background worker with its last close
    assert not [f for f in fts._INDEXERS if f.location == str(path.resolve())]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_indexes_on_its_own_background_worker(tmp_path: Path) -> None:
    path = tmp_path / "fork.db"
    store = SQLiteStore(path)
    try:
        store.run(
            ops.add_messages("s", [Message(role="user", content="parent kettle", token_count=2)])
        )
        store.index_keywords()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 1
            try:
                child = Message(role="user", content="child kettle", token_count=2)
                store.run(ops.add_messages("s", [child]))
                deadline = time.monotonic() + 20
                while _unindexed(path) and time.monotonic() < deadline:
                    time.sleep(0.02)  # the child's own background worker catches up
                code = 0 if _unindexed(path) == 0 else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert {h.message.content for h in store.keyword_search("kettle")} == {
            "parent kettle",
            "child kettle",
        }
    finally:
        store.close()


def test_cached_term_counts_above_the_row_count_still_score() -> None:
    """Counts cached before rows were deleted (or indexed) can exceed the rows left: the tail is
    still scored, as FTS5 scores a term found in every row, instead of failing the search."""
    from harombe_core.store.fts import TermCounts, score_tail, split_tail

    split = split_tail([("boats and harbours", ""), ("nothing here", "")])
    stale = TermCounts(rows=3, upto=10, tokens=9, rows_of={"boats": 50})
    scores = score_tail(split, ["boats"], stale)
    assert scores[0] > 0.0
    assert scores[1] == 0.0
