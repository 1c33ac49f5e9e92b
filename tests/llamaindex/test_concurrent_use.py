"""Many tasks on one conversation at once, as an async server runs them, beside LlamaIndex's own.

LlamaIndex's ``Memory`` (on its SQL chat store) is the control: concurrent ``aput_messages``
keep each batch together; a read sees its own write; ``get_all`` after ``reset`` is empty.
Concurrent ``aset`` calls leave one of the histories (``Memory``'s own SQL store does not
promise it: it deletes, then inserts in a second step). The regression tests make the
interleaving that merged two histories happen deterministically: another call commits just
before this one's write starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import BaseMemory, Memory
from llama_index.core.storage.chat_store import SimpleChatStore
from sqlalchemy.ext.asyncio import create_async_engine

from harombe_core import MemoryManager
from llamaindex_harombe import HarombeChatStore, HarombeDBChatStore, HarombeMemory
from tests.interleave import interleave

TASKS = 30


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def texts(messages: list[ChatMessage]) -> list[str]:
    return [m.content or "" for m in messages]


@pytest.fixture
async def memories(tmp_path: Path) -> AsyncIterator[Callable[[str, bool], list[BaseMemory]]]:
    """``memories(kind, separate)``: TASKS handles on one session, one object or one each
    (Memory's aiosqlite engine is disposed in the test's loop, harombe's store closed)."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'control.db'}")
    manager = MemoryManager(str(tmp_path / "harombe.db"), embedding=None)

    def make(kind: str, separate: bool) -> list[BaseMemory]:
        def one() -> BaseMemory:
            if kind == "Memory":
                return Memory.from_defaults(
                    session_id="s", token_limit=100_000, async_engine=engine
                )
            return HarombeMemory.from_defaults(
                manager=manager, session_id="s", user_id="ann", token_limit=100_000
            )

        return [one() for _ in range(TASKS)] if separate else [one()] * TASKS

    try:
        yield make
    finally:
        manager.close()
        await engine.dispose()


KINDS = ("Memory", "HarombeMemory")


@pytest.mark.parametrize("separate", [False, True], ids=["one-object", "one-each"])
@pytest.mark.parametrize("kind", KINDS)
async def test_thirty_tasks_put_get_set_and_reset_as_llamaindex_memory_does(
    memories: Callable[[str, bool], list[BaseMemory]], kind: str, separate: bool
) -> None:
    handles = memories(kind, separate)
    await handles[0].aget_all()  # (Memory creates its table on first use, racily otherwise)

    async def put_then_get(i: int) -> list[str]:
        await handles[i].aput_messages(
            [user(f"u{i}"), ChatMessage(role="assistant", content=f"a{i}")]
        )
        return texts(await handles[i].aget())

    seen = await asyncio.gather(*(put_then_get(i) for i in range(TASKS)))
    stored = texts(await handles[0].aget_all())
    assert sorted(stored) == sorted(
        [f"u{i}" for i in range(TASKS)] + [f"a{i}" for i in range(TASKS)]
    )
    # each batch stays together, and every task reads its own write
    assert all(stored[k + 1] == "a" + stored[k][1:] for k in range(0, len(stored), 2))
    assert all(f"u{i}" in seen[i] for i in range(TASKS))

    await asyncio.gather(
        *(handles[i].aset([user(f"set{i}-{j}") for j in range(3)]) for i in range(TASKS))
    )
    after_sets = texts(await handles[0].aget_all())
    if kind == "HarombeMemory":  # one set, whole, as SimpleChatStore's assignment leaves
        assert len(after_sets) == 3
        assert len({t.split("-")[0] for t in after_sets}) == 1
    # (LlamaIndex's SQL store deletes, then inserts in a second session: its concurrent sets
    # usually leave one history, and sometimes two merged.)

    await handles[3].areset()
    assert await handles[7].aget_all() == []
    assert await handles[7].aget() == []
    await handles[5].aput(user("after reset"))
    assert texts(await handles[0].aget_all()) == ["after reset"]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_set_racing_another_set_leaves_one_history_not_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        mine = HarombeMemory.from_defaults(manager=mm, session_id="s", user_id="ann")
        other = HarombeMemory.from_defaults(manager=mm, session_id="s", user_id="ann")
        mine.put_messages([user("old 1"), user("old 2")])
        interleave(monkeypatch, mm, lambda: other.set([user("theirs")]))
        if mode == "sync":
            mine.set([user("mine")])
        else:
            await mine.aset([user("mine")])
        # the set that committed last is the history, as SimpleChatStore's dict assignment
        assert texts(mine.get_all()) == ["mine"]
        assert mm.get_session("s").message_count == 1


@pytest.mark.parametrize("store_kind", ["HarombeChatStore", "HarombeDBChatStore"])
async def test_a_chat_store_set_racing_another_set_leaves_one_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_kind: str
) -> None:
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        control = SimpleChatStore()
        control.set_messages("k", [user("theirs")])
        control.set_messages("k", [user("mine")])
        if store_kind == "HarombeChatStore":
            store = HarombeChatStore(manager=mm, user_id="ann")
            store.set_messages("k", [user("old")])
            interleave(monkeypatch, mm, lambda: store.set_messages("k", [user("theirs")]))
            await store.aset_messages("k", [user("mine")])
            got = store.get_messages("k")
        else:
            db_store = HarombeDBChatStore(manager=mm, user_id="ann")
            await db_store.set_messages("k", [user("old")])
            theirs = HarombeChatStore(manager=mm, user_id="ann")
            interleave(monkeypatch, mm, lambda: theirs.set_messages("k", [user("theirs")]))
            await db_store.set_messages("k", [user("mine")])
            got = await db_store.get_messages("k")
        assert texts(got) == texts(control.get_messages("k")) == ["mine"]


def exchange(question: str) -> list[ChatMessage]:
    return [user(question), ChatMessage(role="assistant", content=f"re: {question}")]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_threaded_turns_written_at_once_continue_one_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # Another memory's turn commits after this one chose where its turn hangs (the end of the
    # session then) and before it writes: the turn must still continue the session as it now
    # ends, as two turns one after another do, not start a branch that hides the other's.
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:

        def threaded() -> HarombeMemory:
            return HarombeMemory.from_defaults(
                manager=mm,
                session_id="s",
                user_id="ann",
                strategy="threaded",
                thread_selector="linear",
            )

        mine, theirs = threaded(), threaded()
        mine.put_messages(exchange("first"))
        interleave(monkeypatch, mm, lambda: theirs.put_messages(exchange("theirs")))
        if mode == "sync":
            mine.put_messages(exchange("mine"))
        else:
            await mine.aput_messages(exchange("mine"))
        stored = mm.get_messages("s")
        assert [m.parent_id for m in stored[1:]] == [m.id for m in stored[:-1]]
        everything = ["first", "re: first", "theirs", "re: theirs", "mine", "re: mine"]
        assert texts(await mine.aget()) == everything
        assert texts(theirs.get()) == everything


@pytest.mark.parametrize("last", [True, False], ids=["delete_last_message", "delete_message"])
async def test_deletes_racing_each_other_delete_two_messages_as_simple_chat_store_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, last: bool
) -> None:
    ten = [user(f"m{i}") for i in range(10)]
    control = SimpleChatStore()
    control.set_messages("k", ten)
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        store = HarombeChatStore(manager=mm, user_id="ann")
        store.set_messages("k", ten)

        async def delete(chat_store: Any) -> ChatMessage | None:
            if last:
                return await chat_store.adelete_last_message("k")  # type: ignore[no-any-return]
            return await chat_store.adelete_message("k", 0)  # type: ignore[no-any-return]

        theirs: list[ChatMessage | None] = []
        interleave(
            monkeypatch, mm, lambda: theirs.append(store.delete_message("k", -1 if last else 0))
        )
        mine = await delete(store)
        expected = [control.delete_message("k", -1 if last else 0) for _ in range(2)]
        assert texts([theirs[0], mine]) == texts(expected)  # type: ignore[list-item]
        assert texts(store.get_messages("k")) == texts(control.get_messages("k"))
