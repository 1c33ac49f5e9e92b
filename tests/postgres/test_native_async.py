"""The manager's async methods run the store's own async path: on PostgreSQL no thread hop.

Each manager operation is one flow (harombe_core.flows); its async twin awaits the store's
operations on the store's async runner (``arun``), native on PostgreSQL. With
``asyncio.to_thread`` made to fail, every async method below must still work on PostgreSQL; on
SQLite the same calls must go through worker threads, since its I/O blocks.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.models import Message


async def _exercise(mm: MemoryManager) -> None:
    """Every manager a-method whose flow has a native form on PostgreSQL."""
    sid = await mm.acreate_session(user_id="ann", metadata={"topic": "billing"})
    assert await mm.asave_message(sid, Message(role="user", content="hello"), user_id="ann") > 0
    ids = await mm.asave_messages(
        sid,
        [Message(role="assistant", content="hi Ann"), Message(role="user", content="bye")],
        user_id="ann",
    )
    assert len(ids) == 2
    contents = ["hello", "hi Ann", "bye"]
    assert [m.content for m in await mm.aget_messages(sid, user_id="ann")] == contents
    assert [m.content for m in await mm.aget_messages(sid, after_id=ids[0])] == ["bye"]
    assert [m.content for m in await mm.aload_session(sid, user_id="ann")] == contents
    session = await mm.aget_session(sid, user_id="ann")
    assert session is not None
    assert session.user_id == "ann"
    assert session.metadata == {"topic": "billing"}
    owned = await mm.acheck_owner(sid, "ann", exact=True)
    assert owned is not None
    assert [s.id for s in await mm.alist_sessions(user_id="ann")] == [sid]
    window = await mm.aget_window(sid, 10_000, user_id="ann")
    assert [m.content for m in window.messages] == contents
    for budget in (1, 8, 12, 20, 10_000):  # the async pages stop where the sync window does
        assert await mm.aget_window(sid, budget) == mm.get_window(sid, budget)
        recent = await mm.aget_recent_messages(sid, budget, start_on_user=True)
        assert recent == mm.get_recent_messages(sid, budget, start_on_user=True)
    assert await mm.aget_session("unknown-session") is None
    assert await mm.aload_session("unknown-session") == []


async def test_async_methods_on_postgres_never_hop_a_thread(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_thread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("asyncio.to_thread was called on the PostgreSQL async path")

    with MemoryManager(pg_url, embedding=None) as mm:
        monkeypatch.setattr(asyncio, "to_thread", no_thread)
        await _exercise(mm)
        monkeypatch.undo()


async def test_the_same_calls_on_sqlite_run_in_worker_threads(
    tmp_path: Path, thread_hops: list[str]
) -> None:
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        await _exercise(mm)
    # every store operation hops once, through the store's own runner
    assert thread_hops.count("SQLiteStore.run") >= 10
