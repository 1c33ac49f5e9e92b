"""Every MemoryManager method, sync and async, over an in-memory and a file database."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from harombe_core import (
    HarombeError,
    InvalidInputError,
    MemoryManager,
    Message,
    SessionOwnershipError,
    StoreError,
)
from harombe_core.store import ops
from harombe_core.store.sqlite import SQLiteStore
from harombe_core.strategies import Window


def _user(text: str, **kwargs: object) -> Message:
    return Message(role="user", content=text, **kwargs)  # type: ignore[arg-type]


def _stored(message: Message, mid: int, sid: str, tokens: int) -> Message:
    return message.with_ids(id=mid, session_id=sid, token_count=tokens)


# sessions -------------------------------------------------------------------------------------
def test_create_and_get_session(manager: MemoryManager) -> None:
    sid = manager.create_session(
        system_prompt="You are helpful", metadata={"topic": "x", "n": [1, 2]}, user_id="u1"
    )
    session = manager.get_session(sid)
    assert session is not None
    assert session.id == sid
    assert session.user_id == "u1"
    assert session.system_prompt == "You are helpful"
    assert session.metadata == {"topic": "x", "n": [1, 2]}
    assert session.message_count == 0
    assert session.created_at.tzinfo is not None
    assert manager.session_exists(sid)


def test_create_session_with_chosen_id_and_duplicate(manager: MemoryManager) -> None:
    assert manager.create_session(session_id="chosen") == "chosen"
    with pytest.raises(InvalidInputError, match="already exists"):
        manager.create_session(session_id="chosen")


def test_load_session_is_the_history_with_the_system_prompt_first(
    manager: MemoryManager,
) -> None:
    """load_session returns the conversation history, ready to send a model."""
    sid = manager.create_session(system_prompt="You are helpful", user_id="u1")
    ids = manager.save_messages(
        sid, [_user("hi"), Message(role="assistant", content="hello"), _user("bye")]
    )
    history = manager.load_session(sid)
    assert [(m.role, m.content) for m in history] == [
        ("system", "You are helpful"),
        ("user", "hi"),
        ("assistant", "hello"),
        ("user", "bye"),
    ]
    assert [m.id for m in history[1:]] == ids
    assert history[0].token_count == manager.get_window(sid, 1000).messages[0].token_count
    assert history == manager.get_recent_messages(sid, max_tokens=100_000)
    assert manager.load_session(sid, user_id="u1") == history
    without_prompt = manager.create_session()
    manager.save_message(without_prompt, _user("only this"))
    assert [m.content for m in manager.load_session(without_prompt)] == ["only this"]


def test_an_unknown_session_is_empty_not_an_error(manager: MemoryManager) -> None:
    assert manager.load_session("nope") == []
    assert manager.get_session("nope") is None
    assert not manager.session_exists("nope")


def test_update_session(manager: MemoryManager) -> None:
    sid = manager.create_session(system_prompt="old", metadata={"a": 1}, user_id="u1")
    manager.update_session(sid, system_prompt="a much longer new system prompt")
    session = manager.get_session(sid)
    assert session is not None
    assert session.system_prompt == "a much longer new system prompt"
    assert session.metadata == {"a": 1}  # unset arguments are kept
    assert session.user_id == "u1"
    manager.update_session(sid, metadata={"b": [True, None]}, user_id="u2")
    session = manager.get_session(sid)
    assert session is not None
    assert (session.metadata, session.user_id) == ({"b": [True, None]}, "u2")
    # the stored system-prompt cost follows the new prompt
    window = manager.get_window(sid, 1000)
    expected = manager.count_tokens([Message(role="system", content=session.system_prompt or "")])
    assert window.tokens == expected
    manager.update_session(sid, system_prompt=None)
    assert manager.get_window(sid, 1000).messages == []
    manager.update_session("missing", system_prompt="made by an update", user_id="u3")
    made = manager.get_session("missing")
    assert made is not None
    assert (made.system_prompt, made.user_id, made.metadata) == ("made by an update", "u3", {})
    assert manager.load_session("missing")[0].token_count == manager.count_tokens(
        [Message(role="system", content="made by an update")]
    )


# messages ------------------------------------------------------------------------------------
def test_save_message_returns_id_and_creates_unknown_session(manager: MemoryManager) -> None:
    assert not manager.session_exists("fresh")
    first = manager.save_message("fresh", _user("hello"), user_id="u9")
    second = manager.save_message("fresh", {"role": "assistant", "content": "hi"})
    assert isinstance(first, int)
    assert second > first
    session = manager.get_session("fresh")
    assert session is not None
    assert session.user_id == "u9"
    assert session.message_count == 2
    assert [m.id for m in manager.get_messages("fresh")] == [first, second]


def test_save_message_stores_token_count(manager: MemoryManager) -> None:
    message = _user("The quick brown fox jumps over the lazy dog.")
    mid = manager.save_message("s", message)
    (stored,) = manager.get_messages("s")
    assert stored.id == mid
    assert stored.token_count == manager.token_counter.count_message(message)
    assert stored.token_count == manager.count_tokens([message])


def test_reads_return_exactly_what_was_saved(manager: MemoryManager) -> None:
    when = datetime(2021, 3, 4, 5, 6, 7, 891011, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}}
    messages = [
        _user("héllo 👋", name="Ann", metadata={"k": "v", "nested": {"x": [1, 2.5, None]}}),
        Message(role="assistant", content="", tool_calls=[call], created_at=when),
        Message(role="tool", content='{"ok":true}', tool_call_id="call_1", name="f"),
        Message(role="system", content="note"),
    ]
    ids = manager.save_messages("s", messages)
    got = manager.get_messages("s")
    expected = [
        _stored(m, i, "s", manager.token_counter.count_message(m))
        for m, i in zip(messages, ids, strict=True)
    ]
    assert got == expected
    assert got[1].created_at == when
    assert got[1].created_at.microsecond == 891011


def test_save_messages_bulk_is_one_transaction(manager: MemoryManager) -> None:
    manager.save_message("s", _user("kept"))
    before = manager.get_messages("s")
    with pytest.raises(InvalidInputError):
        manager.save_messages("s", [_user("a"), _user("b"), {"role": "robot", "content": "x"}])
    assert manager.get_messages("s") == before
    assert manager.save_messages("s", []) == []
    ids = manager.save_messages("s", (_user(str(i)) for i in range(50)))
    assert len(ids) == 50
    assert ids == sorted(ids)
    assert manager.get_session("s").message_count == 51


def test_save_messages_rolls_back_when_the_database_refuses(tmp_path: Path) -> None:
    """All or none even when the failure comes from SQLite itself, mid-transaction."""
    path = str(tmp_path / "m.db")
    with MemoryManager(path, embedding=None) as mm:
        mm.save_message("s", _user("kept"))
    raw = sqlite3.connect(path)
    raw.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN new.content = 'poison' "
        "BEGIN SELECT RAISE(ABORT, 'refused'); END"
    )
    raw.commit()
    raw.close()
    with MemoryManager(path, embedding=None) as mm:
        with pytest.raises(HarombeError, match="refused"):
            mm.save_messages("s", [_user("a"), _user("b"), _user("poison"), _user("c")])
        assert [m.content for m in mm.get_messages("s")] == ["kept"]
        assert mm.get_session("s").message_count == 1


def test_get_messages_limit_and_after_id(manager: MemoryManager) -> None:
    ids = manager.save_messages("s", [_user(str(i)) for i in range(10)])
    assert [m.content for m in manager.get_messages("s", limit=3)] == ["0", "1", "2"]
    after = manager.get_messages("s", after_id=ids[6])
    assert [m.content for m in after] == ["7", "8", "9"]
    assert [m.content for m in manager.get_messages("s", after_id=ids[2], limit=2)] == ["3", "4"]
    assert manager.get_messages("unknown") == []


def test_get_recent_messages_and_window(manager: MemoryManager) -> None:
    sid = manager.create_session(system_prompt="Be brief.")
    manager.save_messages(sid, [_user(f"message number {i}") for i in range(20)])
    per_message = manager.get_messages(sid)[0].token_count or 0
    system_cost = manager.count_tokens([Message(role="system", content="Be brief.")])
    budget = system_cost + 3 * per_message
    recent = manager.get_recent_messages(sid, max_tokens=budget)
    assert recent[0].role == "system"
    assert recent[0].content == "Be brief."
    assert [m.content for m in recent[1:]] == [f"message number {i}" for i in (17, 18, 19)]
    window = manager.get_window(sid, budget)
    assert isinstance(window, Window)
    assert window.messages == recent
    assert window.tokens == budget
    no_system = manager.get_recent_messages(sid, max_tokens=budget, include_system=False)
    assert len(no_system) == budget // per_message  # the system prompt's share is free again
    assert manager.get_recent_messages("missing", max_tokens=100) == []


def test_get_recent_messages_defaults_to_max_history_tokens(tmp_path: Path) -> None:
    with MemoryManager(":memory:", embedding=None, max_history_tokens=30) as mm:
        mm.save_messages("s", [_user("one two three four") for _ in range(20)])
        window = mm.get_window("s")
        assert 0 < window.tokens <= 30
        assert sum(m.token_count or 0 for m in window.messages) == window.tokens


def test_list_sessions_newest_activity_first(manager: MemoryManager) -> None:
    a = manager.create_session(user_id="u1")
    b = manager.create_session(user_id="u2")
    c = manager.create_session(user_id="u1")
    assert [s.id for s in manager.list_sessions()] == [c, b, a]
    manager.save_message(a, _user("activity moves a to the front"))
    assert [s.id for s in manager.list_sessions()] == [a, c, b]
    assert [s.id for s in manager.list_sessions(limit=2)] == [a, c]
    assert [s.id for s in manager.list_sessions(user_id="u1")] == [a, c]
    assert [s.id for s in manager.list_sessions(limit=1, user_id="u1")] == [a]
    assert manager.list_sessions(user_id="nobody") == []
    assert manager.list_sessions(limit=0) == []
    assert len(manager.list_sessions(limit=None)) == 3


def test_delete_session_cascades(manager: MemoryManager) -> None:
    keep = manager.create_session()
    gone = manager.create_session()
    manager.save_messages(keep, [_user("keep me")])
    manager.save_messages(gone, [_user("x"), _user("y")])
    assert manager.delete_session(gone) is True
    assert manager.delete_session(gone) is False
    assert not manager.session_exists(gone)
    assert manager.get_messages(gone) == []
    assert [m.content for m in manager.get_messages(keep)] == ["keep me"]
    assert manager.stats()["messages"] == 1
    assert manager.store.keyword_search("x y keep") != []  # the index holds only what is left
    assert all(h.message.session_id == keep for h in manager.store.keyword_search("x y keep"))


def test_set_messages_replaces_the_whole_history_in_one_step(tmp_path: Path) -> None:
    # What "set the history" means in the frameworks: every message there when it commits
    # goes (with its vector), also one added after the caller last read the session.
    from harombe_core.testing import FakeEmbedder

    with MemoryManager(
        str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma"
    ) as mm:
        sid = mm.create_session(system_prompt="sys", user_id="ann")
        mm.save_messages(sid, [_user("the harbour opens at six"), _user("tide tables")])
        mm.flush()
        ids = mm.set_messages(sid, [_user("kayak rental")], user_id="ann")
        mm.flush()
        assert [m.id for m in mm.get_messages(sid)] == ids
        assert [m.content for m in mm.get_messages(sid)] == ["kayak rental"]
        assert mm.get_session(sid).message_count == 1
        assert mm.get_session(sid).system_prompt == "sys"
        found = mm.search("harbour tide kayak", user_id="ann")
        assert {h.message.content for h in found} == {"kayak rental"}
        assert mm.set_messages(sid, [], user_id="ann") == []
        assert mm.get_messages(sid) == []
        with pytest.raises(SessionOwnershipError):
            mm.set_messages(sid, [_user("not mine")], user_id="bob")


def test_clear_session_keeps_the_session(manager: MemoryManager) -> None:
    sid = manager.create_session(system_prompt="sys", metadata={"a": 1})
    manager.save_messages(sid, [_user("x"), _user("y")])
    assert manager.clear_session(sid) == 2
    session = manager.get_session(sid)
    assert session.message_count == 0
    assert session.system_prompt == "sys"
    assert manager.get_messages(sid) == []
    assert manager.clear_session(sid) == 0


def test_prune_old_sessions(manager: MemoryManager) -> None:
    old = datetime.now(UTC) - timedelta(days=40)
    manager.store.run(ops.create_session("old", created_at=old))
    manager.store.run(ops.create_session("recent-ish", created_at=old + timedelta(days=15)))
    manager.save_message("old-but-active", _user("now"))
    assert manager.prune_old_sessions(30) == 1
    assert not manager.session_exists("old")
    assert manager.session_exists("recent-ish")
    assert manager.prune_old_sessions(20) == 1
    assert manager.prune_old_sessions(0.5) == 0
    assert [s.id for s in manager.list_sessions()] == ["old-but-active"]


def test_stats(manager: MemoryManager) -> None:
    manager.create_session(user_id="u1")
    manager.save_messages("s2", [_user("a b c"), _user("d")], user_id="u2")
    stats = manager.stats()
    assert stats["sessions"] == 2
    assert stats["users"] == 2
    assert stats["messages"] == 2
    assert stats["tokens"] == sum(m.token_count or 0 for m in manager.get_messages("s2"))
    assert stats["schema_version"] >= 1


def test_flush_without_semantic_memory_is_a_no_op(manager: MemoryManager) -> None:
    assert manager.semantic_enabled is False
    manager.save_message("s", _user("x"))
    manager.flush()
    manager.flush(timeout=0.1)


def test_close_and_context_manager(db_path: str) -> None:
    with MemoryManager(db_path, embedding=None) as mm:
        mid = mm.save_message("s", _user("persisted"))
    with pytest.raises(StoreError, match="closed"):
        mm.get_messages("s")
    mm.close()  # a second close is harmless
    with MemoryManager(db_path, embedding=None) as again:
        assert [m.id for m in again.get_messages("s")] == [mid]


def test_store_object_can_be_passed(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "x.db")
    with MemoryManager(store, embedding=None) as mm:
        assert mm.store is store
        mm.save_message("s", _user("x"))
    assert store.location.endswith("x.db")


# async twins -----------------------------------------------------------------------------------
async def test_async_twins_in_a_running_loop(manager: MemoryManager) -> None:
    asyncio.get_running_loop()  # we are inside the event loop
    sid = await manager.acreate_session(system_prompt="sys", metadata={"m": 1}, user_id="u")
    assert (await manager.aget_session(sid)).metadata == {"m": 1}
    mid = await manager.asave_message(sid, _user("hello"))
    ids = await manager.asave_messages(sid, [_user("a"), _user("b")])
    assert ids[0] > mid
    assert [m.content for m in await manager.aget_messages(sid)] == ["hello", "a", "b"]
    recent = await manager.aget_recent_messages(sid, max_tokens=1000)
    assert [m.content for m in recent] == ["sys", "hello", "a", "b"]
    window = await manager.aget_window(sid, 1000)
    assert window.messages == recent
    await manager.aupdate_session(sid, metadata={"m": 2})
    assert (await manager.aget_session(sid)).metadata == {"m": 2}
    assert [m.content for m in await manager.aload_session(sid)] == ["sys", "hello", "a", "b"]
    assert [s.id for s in await manager.alist_sessions(limit=5, user_id="u")] == [sid]
    assert (await manager.astats())["messages"] == 3
    await manager.aflush()
    assert await manager.aclear_session(sid) == 3
    assert await manager.aprune_old_sessions(1) == 0
    assert await manager.adelete_session(sid) is True
    assert await manager.aload_session(sid) == []
    assert await manager.aget_session(sid) is None


async def test_async_context_manager_closes(db_path: str) -> None:
    async with MemoryManager(db_path, embedding=None) as mm:
        await mm.asave_message("s", _user("x"))
    with pytest.raises(StoreError):
        mm.get_messages("s")


async def test_async_twins_do_not_block_the_event_loop(manager: MemoryManager) -> None:
    """A ticker keeps running while large writes and reads are awaited."""
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    batch = [_user(f"message {i} " + "word " * 50) for i in range(3000)]
    before = ticks
    await manager.asave_messages("s", batch)
    during_write = ticks - before
    before = ticks
    for _ in range(20):
        await manager.aget_messages("s")
    during_read = ticks - before
    stop.set()
    await task
    assert during_write > 1
    assert during_read > 1


async def test_async_errors_are_typed(manager: MemoryManager) -> None:
    with pytest.raises(InvalidInputError):
        await manager.asave_message("s", {"role": "robot", "content": "x"})
    with pytest.raises(InvalidInputError):
        await manager.asave_messages("s", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await manager.aget_recent_messages("s", max_tokens=-1)
