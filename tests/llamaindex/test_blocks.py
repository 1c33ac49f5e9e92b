"""HarombeMemoryBlock inside LlamaIndex's Memory: flushed turns and past sessions recalled,
sessions and users kept apart even when one block serves many interleaved sessions."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.storage.chat_store.base_db import MessageStatus
from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore
from sqlalchemy.ext.asyncio import create_async_engine

from harombe_core.errors import InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from llamaindex_harombe import HarombeDBChatStore, HarombeMemoryBlock
from tests.llamaindex.engine_turn import run_python


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def memory_with(block: HarombeMemoryBlock, session_id: str, **kwargs: object) -> Memory:
    return Memory.from_defaults(
        session_id=session_id,
        token_limit=120,
        token_flush_size=20,
        chat_history_token_ratio=0.5,
        memory_blocks=[block],
        **kwargs,  # type: ignore[arg-type]
    )


def filler(tag: str, n: int) -> list[ChatMessage]:
    return [
        (user if i % 2 == 0 else assistant)(f"{tag} small talk number {i} about nothing much")
        for i in range(n)
    ]


def system_message(text: str) -> Message:
    return Message(role="system", content=text)


def system_text(messages: list[ChatMessage]) -> str:
    return "\n".join(m.content or "" for m in messages if m.role.value == "system")


async def test_flushed_turns_are_recalled(semantic_manager: MemoryManager) -> None:
    # Upstream's default queue (SQLAlchemy on aiosqlite), on an engine disposed in this loop:
    # a leaked aiosqlite connection reports "Event loop is closed" from its thread later on.
    engine = create_async_engine("sqlite+aiosqlite:///:memory:")
    block = HarombeMemoryBlock(manager=semantic_manager)
    memory = memory_with(
        block, "s1", chat_store=SQLAlchemyChatStore(table_name="queue", async_engine=engine)
    )
    try:
        await memory.aput_messages(
            [user("My locker code is 4417."), assistant("Saved your locker code.")]
        )
        await memory.aput_messages(filler("s1", 12))
        queue = await memory.sql_store.get_messages("s1", status=MessageStatus.ACTIVE)
        assert queue
        assert all("4417" not in (m.content or "") for m in queue)
        await semantic_manager.aflush()
        # the flushed fact is no longer in the short-term queue but comes back through the block
        window = await memory.aget(input="what is my locker code?")
        assert "4417" in system_text(window)
        assert "4417" in " ".join(m.content for m in semantic_manager.get_messages("s1"))
    finally:
        await engine.dispose()


def test_interleaved_sessions_stay_apart(semantic_manager: MemoryManager) -> None:
    # One block shared by two memories, used in turn: upstream's VectorMemoryBlock answers the
    # second session with the first one's filter (issue 22701 upstream).
    # Called synchronously, as in a notebook, with the queue in harombe as the README pairs them.
    block = HarombeMemoryBlock(manager=semantic_manager, persist_flushed=False)
    store = HarombeDBChatStore(manager=semantic_manager)
    alice = memory_with(block, "alice-session", chat_store=store)
    bob = memory_with(block, "bob-session", chat_store=store)
    for i in range(8):
        alice.put(user(f"alice secret ingredient is saffron, round {i}"))
        bob.put(user(f"bob secret ingredient is paprika, round {i}"))
        alice.put(assistant("noted"))
        bob.put(assistant("noted"))
    semantic_manager.flush()
    for _ in range(2):  # asking twice, alternately, is where a pinned filter shows
        a = system_text(alice.get(input="what is the secret ingredient?"))
        b = system_text(bob.get(input="what is the secret ingredient?"))
        assert "saffron" in a
        assert "paprika" not in a
        assert "paprika" in b
        assert "saffron" not in b


async def test_user_scope_recalls_past_sessions_of_that_user_only(
    semantic_manager: MemoryManager,
) -> None:
    semantic_manager.save_messages(
        "ann-old", [{"role": "user", "content": "I am allergic to peanuts"}], user_id="ann"
    )
    semantic_manager.save_messages(
        "ben-old", [{"role": "user", "content": "I am allergic to shellfish"}], user_id="ben"
    )
    semantic_manager.flush()
    block = HarombeMemoryBlock(manager=semantic_manager, scope="user", user_id="ann")
    text = await block.aget([user("what am I allergic to?")], session_id="ann-new")
    assert "peanuts" in text
    assert "shellfish" not in text
    with pytest.raises(InvalidInputError, match="user_id"):
        HarombeMemoryBlock(manager=semantic_manager, scope="user")


async def test_window_messages_are_not_recalled_again(manager: MemoryManager) -> None:
    block = HarombeMemoryBlock(manager=manager)
    await block.aput([user("the tide is high at noon")], session_id="s")
    visible = [user("the tide is high at noon")]
    assert await block.aget(visible, session_id="s") == ""
    assert "noon" in await block.aget([user("when is the tide high?")], session_id="s")


async def test_persist_flushed_off_with_harombe_db_store(db: str) -> None:
    # With Memory's queue already in harombe, flushed turns are searchable without copies.
    store = HarombeDBChatStore(db)
    block = HarombeMemoryBlock(manager=store.manager, persist_flushed=False)
    memory = memory_with(block, "s", chat_store=store)
    await memory.aput_messages([user("The wifi password is heron42."), assistant("ok")])
    await memory.aput_messages(filler("s", 12))
    stored = store.manager.get_messages("s")
    assert sum("heron42" in m.content for m in stored) == 1
    assert len(stored) == 14
    window = await memory.aget(input="what is the wifi password?")
    assert "heron42" in system_text(window)
    store.close()


@pytest.mark.parametrize("queue", ["SQLAlchemyChatStore", "HarombeDBChatStore"])
async def test_readme_pairing_keeps_each_message_once_in_order(db: str, queue: str) -> None:
    # The README's pairing, block with its defaults: Memory's queue in harombe, and the block
    # on the same database. Flushed messages are already stored there: storing them again
    # doubled the history and put the copies back in the queue, after newer messages.
    engine = create_async_engine("sqlite+aiosqlite:///:memory:")
    store: HarombeDBChatStore | None = None
    if queue == "HarombeDBChatStore":
        store = HarombeDBChatStore(db)
        chat_store: Any = store
    else:
        chat_store = SQLAlchemyChatStore(table_name="queue", async_engine=engine)
    block = HarombeMemoryBlock(storage_path=db)
    memory = Memory.from_defaults(
        session_id="s",
        token_limit=60,
        token_flush_size=10,
        chat_history_token_ratio=0.5,
        memory_blocks=[block],
        chat_store=chat_store,
    )
    put = [user("The ferry leaves at 7:40."), assistant("Noted."), *filler("s", 6)]
    try:
        for message in put:
            await memory.aput(message)
        every = await memory.aget_all()
        assert [m.content for m in every] == [m.content for m in put]  # plain Memory's 8
        window = [m for m in await memory.aget() if m.role.value != "system"]
        assert 0 < len(window) < len(put)
        assert [m.content for m in window] == [m.content for m in put[-len(window) :]]
        stored = [m.content for m in block.manager.get_messages("s")]
        if store is None:  # the block keeps what Memory flushed from its own queue
            assert stored == [m.content for m in put[: len(put) - len(window)]]
        else:  # the queue is in harombe already: every message once, in order
            assert stored == [m.content for m in put]
        block.manager.flush()
        recalled = await memory.aget(input="when does the ferry leave?")
        assert "7:40" in system_text(recalled)
    finally:
        await engine.dispose()
        block.close()
        if store is not None:
            store.close()


def test_block_serialises_its_location(db: str) -> None:
    block = HarombeMemoryBlock(storage_path=db, scope="all", top_k=3)
    data = block.model_dump()
    block.close()
    assert data["storage_path"] == db
    again = HarombeMemoryBlock(**data)
    assert (again.scope, again.top_k) == ("all", 3)
    again.close()


FACTS = [
    "We fly to Lisbon on the 3rd of May.",
    "The boat is called Marigold.",
    "Tea with no sugar.",
    "The hotel is near the river.",
    "Flight number TP 1234.",
]


async def test_over_the_token_limit_recall_is_shortened_weakest_first_not_dropped(
    manager: MemoryManager,
) -> None:
    # Memory asks every block whose priority is not 0 to shrink when the prompt is over its
    # token_limit; a block without atruncate (StaticMemoryBlock here, and LlamaIndex's
    # VectorMemoryBlock) loses its whole text. The recall block keeps its best messages.
    from llama_index.core.memory import StaticMemoryBlock

    block = HarombeMemoryBlock(manager=manager, priority=1, name="recall", top_k=5)
    control = StaticMemoryBlock(name="notes", static_content="Ann likes window seats.", priority=1)
    memory = Memory.from_defaults(
        session_id="trip",
        token_limit=60,
        chat_history_token_ratio=0.5,
        token_flush_size=10,
        memory_blocks=[control, block],
    )
    for i, fact in enumerate(FACTS):
        await memory.aput_messages([user(fact), assistant(f"Noted {i}.")])
    question = user("When do we fly to Lisbon, and on which flight?")
    await memory.aput(question)
    recalled = await block.aget([question], session_id="trip")
    assert "Lisbon" in recalled
    assert "Marigold" in recalled  # (everything flushed is recalled while there is room)

    prompt = system_text(await memory.aget())
    assert "window seats" not in prompt  # the control's whole text went
    assert "We fly to Lisbon on the 3rd of May." in prompt  # the best recalled message stayed
    assert "Marigold" not in prompt  # the weakest went

    size = manager.count_tokens([system_message(recalled)])
    shorter = await block.atruncate(recalled, 20)
    assert shorter is not None
    assert manager.count_tokens([system_message(shorter)]) <= size - 20
    assert await block.atruncate(recalled, size) is None  # not even the best one fits
    assert await block.atruncate("text this block never gave", 1) is None


OTHER_PROCESS_TURNS = """
import asyncio, sys
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory
from llamaindex_harombe import HarombeDBChatStore, HarombeMemoryBlock

async def turns(db: str) -> None:
    store = HarombeDBChatStore(db, user_id="ann", embedding=None)
    block = HarombeMemoryBlock(manager=store.manager, user_id="ann")
    memory = Memory.from_defaults(session_id="s", token_limit=60, token_flush_size=10,
        chat_history_token_ratio=0.5, memory_blocks=[block], chat_store=store)
    for text in ["The spare key is under the blue pot.", "ok 1", "Another thing.", "ok 2"]:
        role = "assistant" if text.startswith("ok") else "user"
        await memory.aput(ChatMessage(role=role, content=text))
    store.close()

asyncio.run(turns(sys.argv[1]))
"""


async def test_two_processes_share_the_queue_and_the_recall_of_one_file(db: str) -> None:
    # A web app with two workers: this process keeps its Memory open while another process
    # adds turns to the same session on the same file. Each message is stored once, in order;
    # this process's queue continues after the other's turns; what the other flushed is
    # recalled here.
    store = HarombeDBChatStore(db, user_id="ann", embedding=None)
    block = HarombeMemoryBlock(manager=store.manager, user_id="ann")
    memory = Memory.from_defaults(
        session_id="s",
        token_limit=60,
        token_flush_size=10,
        chat_history_token_ratio=0.5,
        memory_blocks=[block],
        chat_store=store,
    )
    try:
        await memory.aput_messages([user("Hello from the first worker."), assistant("hi")])
        run_python("-c", OTHER_PROCESS_TURNS, db)
        await memory.aput_messages(filler("later", 6))
        stored = [m.content for m in store.manager.get_messages("s")]
        expected = ["Hello from the first worker.", "hi", "The spare key is under the blue pot."]
        assert stored[:3] == expected
        assert len(stored) == len(set(stored)) == 12
        assert [m.content for m in await memory.aget_all()] == stored
        window = await memory.aget(input="where is the spare key?")
        assert "blue pot" in system_text(window)
        assert "blue pot" not in [m.content for m in window if m.role.value != "system"]
    finally:
        store.close()
