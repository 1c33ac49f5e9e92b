"""One PostgreSQL store, many event loops: nothing is left on a caller's loop.

An app calls a manager's async methods from several loops (``asyncio.run`` twice, a notebook,
pytest-asyncio's loop per test) and closes the manager synchronously, often after the loop has
gone. A connection pool left on a caller's loop made that loop's shutdown wait forever for the
pool's workers, and left pending tasks and open connections behind; the store's async path now
runs each operation on its one sync pool in a worker thread (``flows.off_loop``), so no loop
owns anything of the store. The first test runs in a subprocess (a hang fails by the generous
timeout, not by a timing threshold) and records unraisable exceptions with
``sys.unraisablehook``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from harombe_core.errors import StoreError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops

_SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, sys, threading
    from harombe_core.manager import MemoryManager
    from harombe_core.models import Message

    unraisable = []
    sys.unraisablehook = lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.object!r}")

    mm = MemoryManager(sys.argv[1], embedding=None)

    async def use(n):
        sid = await mm.acreate_session(user_id="ann")
        await mm.asave_messages(sid, [Message(role="user", content=f"hi {n}")] * 3, user_id="ann")
        assert len(await mm.aload_session(sid, user_id="ann")) == 3
        # Concurrent calls too, so a pool on this loop would have grown (and connected) here.
        await asyncio.gather(*(mm.aget_session(sid, user_id="ann") for _ in range(8)))
        left = asyncio.all_tasks() - {asyncio.current_task()}
        assert not left, f"the store left tasks on the caller's loop: {left}"

    asyncio.run(use(1))
    asyncio.run(use(2))
    loop = asyncio.new_event_loop()  # a loop closed without asyncio.run's clean-up
    loop.run_until_complete(use(3))
    loop.close()
    mm.close()  # synchronously, after every loop it served has gone
    gc.collect()
    assert not unraisable, unraisable
    # A closed loop's default executor threads are the loop's, not the store's: close() tells
    # them to stop without waiting, so wait for them here before counting what is left.
    for thread in threading.enumerate():
        if thread.name.startswith("asyncio_"):
            thread.join(timeout=120)
    threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    assert not threads, threads
    print("clean")
    """
)


def test_loops_that_come_and_go_leave_nothing_behind(pg_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", _SCRIPT, pg_url],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "error"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "clean"


def test_one_store_serves_loops_on_several_threads_at_once(pg_url: str) -> None:
    with MemoryManager(pg_url, embedding=None) as mm:
        sid = mm.create_session(user_id="ann")
        errors: list[BaseException] = []

        def worker(n: int) -> None:
            async def save() -> None:
                for i in range(5):
                    await mm.asave_message(sid, Message(role="user", content=f"{n}-{i}"))

            try:
                asyncio.run(save())
            except BaseException as exc:  # reported below, with its thread
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert sorted(m.content for m in mm.load_session(sid)) == sorted(
            f"{n}-{i}" for n in range(4) for i in range(5)
        )


async def test_a_cancelled_call_is_settled_when_the_cancellation_arrives(pg_url: str) -> None:
    """Cancelled at every point of its run, a save is stored once or not at all, and which of
    the two is already decided (and visible) when the caller sees ``CancelledError``."""
    with MemoryManager(pg_url, embedding=None) as mm:
        seen: dict[str, int] = {}
        for ticks in range(40):
            sid = await mm.acreate_session(user_id="ann")
            task = asyncio.ensure_future(
                mm.asave_message(sid, Message(role="user", content="x"), user_id="ann")
            )
            for _ in range(ticks):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            seen[sid] = len(mm.load_session(sid))
        for sid, count in seen.items():
            assert count in (0, 1)
            assert len(await mm.aload_session(sid)) == count


async def test_calls_after_close_raise_a_typed_error(pg_url: str) -> None:
    mm = MemoryManager(pg_url, embedding=None)
    sid = await mm.acreate_session(user_id="ann")
    mm.close()
    with pytest.raises(StoreError, match="closed"):
        await mm.store.arun(ops.get_session(sid))
