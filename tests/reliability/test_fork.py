"""A child forked while the background worker runs (``multiprocessing`` with the fork start
method, a pre-forking server) carries on with what it inherited.

Only the forking thread survives a fork: the child has no ``harombe-worker`` thread, no copy of
the native threads of the parent's Chroma client, and file locks that belong to the parent.
Each test forks while the parent's worker has work in hand or waiting, then uses the
inherited objects in the child, which must finish (a hang is caught by a join timeout) and
leave everything the child wrote stored and found.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from harombe_core import MemoryManager, Message
from harombe_core.folding import SummaryFolder
from harombe_core.testing import FakeEmbedder, hold_background

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

#: Seconds a child may take before it counts as hung (a guard, not a measure: it finishes in
#: well under a second).
HANG = 60


def _join(process: Any) -> int | None:
    process.join(HANG)
    if process.is_alive():
        process.kill()
        process.join()
        return None
    return int(process.exitcode)


def _flush_inherited(folder: SummaryFolder) -> None:
    os._exit(0 if folder.flush() else 1)


def test_a_child_flush_does_not_wait_for_the_parents_waiting_jobs() -> None:
    """Jobs handed to the parent's worker and still waiting at the fork are the parent's to
    do; left in the child's copy of the folder, with no thread to do them, they kept the
    child's ``flush()`` waiting forever."""
    done: list[int] = []
    folder = SummaryFolder(lambda _key, _until: done.append(os.getpid()) or False)
    ctx = multiprocessing.get_context("fork")
    with hold_background():  # the job below waits behind the holding one
        folder.request("session", 1)
        child = ctx.Process(target=_flush_inherited, args=(folder,))
        child.start()
        assert _join(child) == 0
    assert folder.flush(timeout=HANG)
    folder.close()
    assert done == [os.getpid()]  # done once, by the parent


def _save_flush_search(manager: MemoryManager, pipe: Any) -> None:
    try:
        manager.save_message("child", Message(role="user", content="a giraffe at the zoo"))
        manager.flush(timeout=HANG)
        hits = manager.search("giraffe", top_k=5, session_id="child")
        pipe.send([h.message.content for h in hits])
    except BaseException as exc:  # reported to the parent, which fails the test
        pipe.send(f"{type(exc).__name__}: {exc}")
    finally:
        os._exit(0)


@pytest.mark.skipif(importlib.util.find_spec("chromadb") is None, reason="needs chromadb")
def test_a_child_flushes_and_searches_through_an_inherited_chroma_manager(
    tmp_path: Path,
) -> None:
    """The child embeds on ``flush()`` with the manager it inherited. The parent's embedding
    file lock raised RuntimeError there (filelock refuses a lock inherited across fork), and
    once past it the child's call into its copy of the parent's Chroma client never
    returned; the child now stores its vectors in the database and searches them exactly."""
    manager = MemoryManager(str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma")
    manager.save_message("parent", Message(role="user", content="a zebra on the plain"))
    manager.flush()
    ctx = multiprocessing.get_context("fork")
    reader, writer = ctx.Pipe(duplex=False)
    with hold_background():  # the parent's worker is busy at the fork
        manager.save_message("parent", Message(role="user", content="a zebra drinking"))
        child = ctx.Process(target=_save_flush_search, args=(manager, writer))
        child.start()
        assert _join(child) == 0
    assert reader.poll(HANG)
    assert reader.recv() == ["a giraffe at the zoo"]
    manager.flush()  # the parent files the child's vector into its index
    assert [h.message.content for h in manager.search("giraffe", session_id="child")] == [
        "a giraffe at the zoo"
    ]
    assert len(manager.search("zebra", session_id="parent")) == 2
    manager.close()


def _search_fresh(db: str, pipe: Any) -> None:
    try:
        with MemoryManager(db, embedding=FakeEmbedder()) as manager:
            manager.save_message("child", Message(role="user", content="a giraffe at the zoo"))
            hits = manager.search("giraffe", top_k=5, session_id="child")
            pipe.send([h.message.content for h in hits])
    except BaseException as exc:
        pipe.send(f"{type(exc).__name__}: {exc}")
    finally:
        os._exit(0)


def test_a_child_searches_after_the_parent_searched(tmp_path: Path) -> None:
    """A hybrid search overlaps its keyword and vector sides on a small shared thread pool.
    The child's copy of the parent's pool counted the parent's threads, which fork does not
    copy, as idle: the child's first search waited forever, even on a manager of its own."""
    with MemoryManager(str(tmp_path / "parent.db"), embedding=FakeEmbedder()) as manager:
        manager.save_message("s", Message(role="user", content="a zebra on the plain"))
        assert manager.search("zebra", top_k=5)  # the pool exists, its thread idle
        ctx = multiprocessing.get_context("fork")
        reader, writer = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_search_fresh, args=(str(tmp_path / "child.db"), writer))
        child.start()
        assert _join(child) == 0
        assert reader.poll(HANG)
        assert reader.recv() == ["a giraffe at the zoo"]


def _settle_in_child(location: str, pipe: Any) -> None:
    from harombe_core.store import pending

    pending.settle(location)  # with the parent's drain registered: runs it, here
    pipe.send("settled")
    os._exit(0)


def test_a_child_forked_while_a_thread_held_the_owed_work_lock_still_reads() -> None:
    """Every read settles the work owed to its database under a short lock; a thread holding
    it at the moment of the fork left it held forever in the child, whose first read of that
    database then never returned."""
    import threading

    from harombe_core.store import pending

    ran: list[int] = []

    def drain() -> None:
        ran.append(os.getpid())

    unregister = pending.register("/forked/owed.db", drain)
    inside, done = threading.Event(), threading.Event()

    def hold() -> None:
        with pending._lock:  # what register() and settle() hold for a moment
            inside.set()
            done.wait(HANG)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(HANG)
        ctx = multiprocessing.get_context("fork")
        reader, writer = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_settle_in_child, args=("/forked/owed.db", writer))
        child.start()
        assert _join(child) == 0
        assert reader.poll(HANG)
        assert reader.recv() == "settled"
    finally:
        done.set()
        holder.join()
        unregister()
