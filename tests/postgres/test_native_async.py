"""The manager's async methods run the store's own async path: one thread hop per operation.

Each manager operation is one flow (harombe_core.flows); its async twin awaits the store's
operations on the store's async runner (``arun``), which on both backends runs the sync
operation in a worker thread (``flows.off_loop``). So every hop is one store operation (none
wraps a whole call), and the async answers equal the sync ones.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops

#: The hop of a write: one store operation and the wake-up of the background workers.
WRITE_HOP = "MemoryManager._commit_and_wake"


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


async def test_async_methods_on_postgres_hop_once_per_store_operation(
    pg_url: str, thread_hops: list[str]
) -> None:
    with MemoryManager(pg_url, embedding=None) as mm:
        await _exercise(mm)
    # every hop is one store operation through the store's own runner, as on SQLite
    assert thread_hops.count("PostgresStore.run") >= 10
    # a write's one operation hops with its wake-up of the background workers, so a cancelled
    # caller cannot skip the wake-up (``MemoryManager._commit_and_wake``: one ``run`` inside)
    assert set(thread_hops) <= {"PostgresStore.run", WRITE_HOP}, thread_hops


async def test_the_same_calls_on_sqlite_run_in_worker_threads(
    tmp_path: Path, thread_hops: list[str]
) -> None:
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        await _exercise(mm)
    # every store operation hops once, through the store's own runner
    assert thread_hops.count("SQLiteStore.run") >= 10
    # a write's one operation hops with its wake-up of the background workers, so a cancelled
    # caller cannot skip the wake-up (``MemoryManager._commit_and_wake``: one ``run`` inside)
    assert set(thread_hops) <= {"SQLiteStore.run", WRITE_HOP}, thread_hops


def _context_session(mm: MemoryManager) -> str:
    """A session of ann's with a threaded tail, important turns, a summary of her past
    session, a fact and an open task: every read a context can make has something to read."""
    old = mm.create_session("Be brief.", user_id="ann", session_id="old")
    mm.save_messages(old, [Message(role="user", content="I live in Lisbon, I play the cello")])
    mm.end_session(old)
    mm.add_fact("ann", "Renew the passport", kind="task")
    sid = mm.create_session("Be brief.", user_id="ann", session_id="now")
    previous = None
    for i in range(60):
        role = "user" if i % 2 == 0 else "assistant"
        meta = {"important": True} if i % 9 == 4 else {}
        message = Message(role=role, content=f"turn {i} about the cello", metadata=meta)
        linked = previous if i >= 50 else None  # the newest ten turns are one thread
        previous = mm.store.run(
            ops.add_messages(sid, [message.with_ids(token_count=6, parent_id=linked)])
        )[0]
    mm.summarize_session(sid)  # no backlog: nothing is left to fold on the request path
    return sid


#: Every kind of context: each strategy, a framework's counting, the newest turn kept whatever
#: the budget, and the budgeted context with the owner's profile, tasks and past sessions.
_CONTEXTS: list[dict[str, Any]] = [
    *(
        {"strategy": s, "max_tokens": 80, "keep_last": 4}
        for s in ("simple", "summarization", "hybrid", "threaded")
    ),
    {"strategy": "hybrid", "max_tokens": 80, "keep_last": 4, "token_counter": "text"},
    {"strategy": "threaded", "max_tokens": 5, "keep_newest_turn": True, "token_counter": "text"},
    {"strategy": "simple", "max_tokens": 5, "keep_newest_turn": True},
    {"strategy": "summarization", "max_tokens": 2000, "budget": True, "user_id": "ann"},
]


def _shown(context: list[Message]) -> list[tuple[Any, ...]]:
    """What a model is sent (the blocks a context makes are stamped with the time they are
    made, so their ``created_at`` is left out)."""
    return [(m.role, m.content, m.id, m.token_count, m.metadata.get("harombe")) for m in context]


def _kwargs(mm: MemoryManager, asked: dict[str, Any]) -> dict[str, Any]:
    from harombe_core.strategies import ContextBudget
    from harombe_core.tokens import TextTokenCounter

    kwargs = dict(asked)
    if kwargs.get("token_counter") == "text":
        kwargs["token_counter"] = TextTokenCounter(mm.token_counter)
    if kwargs.get("budget"):
        kwargs["budget"] = ContextBudget()
    return kwargs


async def _hops_once_per_read(mm: MemoryManager, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Each context's async answer equals the sync one, and the async call hops to a worker
    thread once per store operation the sync call runs (no hop wraps the whole call); returns
    the operations run."""
    ran: list[str] = []
    every: set[str] = set()
    hops: list[str] = []
    real = asyncio.to_thread

    async def counting(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args, **kwargs)

    sid = _context_session(mm)
    run, caller = mm.store.run, threading.get_ident()

    def running(op: Any) -> Any:
        if threading.get_ident() == caller:  # not a background thread's work
            ran.append(op.body.__qualname__)
        return run(op)

    for asked in _CONTEXTS:
        kwargs = _kwargs(mm, asked)
        ran.clear()
        hops.clear()
        with monkeypatch.context() as patched:
            patched.setattr(mm.store, "run", running)
            want = _shown(mm.get_context(sid, **kwargs))
        if asked.get("budget"):  # every kind of read had something to read
            assert {"tasks", "summaries", "summary"} <= {kind for *_, kind in want}, want
        with monkeypatch.context() as patched:
            patched.setattr(asyncio, "to_thread", counting)
            assert _shown(await mm.aget_context(sid, **kwargs)) == want, asked
        assert ran
        assert hops == ["run"] * len(ran), (asked, hops, ran)
        every.update(name.split(".")[0] for name in ran)
    return every


async def test_aget_context_on_postgres_hops_once_per_read(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aget_context is one flow: every read it makes is one store operation in a worker thread,
    as on SQLite, and it answers what get_context does."""
    with MemoryManager(pg_url, embedding=None) as mm:
        ran = await _hops_once_per_read(mm, monkeypatch)
    assert {"session_and_prompt", "newest_rows", "important_before", "thread_path"} <= ran


async def test_aget_context_on_sqlite_hops_once_per_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite the same flow hops to a worker thread once per store operation, as every
    other flow does: no hop wraps the whole call."""
    with MemoryManager(str(tmp_path / "c.db"), embedding=None) as mm:
        await _hops_once_per_read(mm, monkeypatch)
