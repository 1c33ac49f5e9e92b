"""LlamaIndex's ``AsyncDBChatStore`` contract over its ``SQLAlchemyChatStore`` and ours.

``Memory(sql_store=...)`` keeps its FIFO queue in an ``AsyncDBChatStore``; the only one in
llama-index-core is ``SQLAlchemyChatStore`` (``tests/storage/chat_store/test_sql.py`` upstream),
so its behaviour is the contract: every case here runs over it and over
``HarombeDBChatStore``. Then ``Memory`` itself on each store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus
from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore
from sqlalchemy import select
from sqlalchemy.ext.asyncio import create_async_engine

from harombe_core.errors import InvalidInputError
from llamaindex_harombe import HarombeDBChatStore


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def contents(messages: list[ChatMessage]) -> list[str]:
    return [m.content or "" for m in messages]


@pytest.fixture(params=["SQLAlchemyChatStore", "HarombeDBChatStore"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncDBChatStore]:
    if request.param == "SQLAlchemyChatStore":
        # disposed in the loop that opened it: a leaked aiosqlite connection reports
        # "Event loop is closed" from its thread during a later test
        engine = create_async_engine("sqlite+aiosqlite:///:memory:")
        try:
            yield SQLAlchemyChatStore(table_name="test_messages", async_engine=engine)
        finally:
            await engine.dispose()
        return
    harombe = HarombeDBChatStore(str(tmp_path / "memory.db"), embedding=None)
    try:
        yield harombe
    finally:
        harombe.close()


async def row_ids(store: AsyncDBChatStore, key: str) -> list[int]:
    """The ids ``delete_message`` takes: rows of the SQL table, messages of the harombe store."""
    if isinstance(store, SQLAlchemyChatStore):
        session_factory, table = await store._initialize()
        async with session_factory() as session:
            result = await session.execute(
                select(table.c.id).where(table.c.key == key).order_by(table.c.id)
            )
            return [row[0] for row in result.fetchall()]
    assert isinstance(store, HarombeDBChatStore)
    return [m.id for m in store.manager.get_messages(key) if m.id is not None]


async def test_add_and_get_messages(store: AsyncDBChatStore) -> None:
    await store.add_message("user1", user("hello"))
    await store.add_message("user1", assistant("world"))
    messages = await store.get_messages("user1")
    assert [(m.role.value, m.content) for m in messages] == [
        ("user", "hello"),
        ("assistant", "world"),
    ]
    assert await store.get_messages("nonexistent") == []


async def test_add_messages_batch_and_count(store: AsyncDBChatStore) -> None:
    await store.add_messages("k", [user("hello"), assistant("world"), user("how are you?")])
    assert contents(await store.get_messages("k")) == ["hello", "world", "how are you?"]
    assert await store.count_messages("k") == 3
    assert await store.count_messages("nonexistent") == 0


async def test_set_messages_replaces_every_message_of_the_key(store: AsyncDBChatStore) -> None:
    await store.add_messages("k", [user("old 1"), assistant("old 2"), user("old 3")])
    await store.archive_oldest_messages("k", 2)
    await store.set_messages("k", [user("replaced1"), assistant("replaced2")])
    assert contents(await store.get_messages("k")) == ["replaced1", "replaced2"]
    # Memory.set means "this is the history": archived messages go too
    assert contents(await store.get_messages("k", status=None)) == ["replaced1", "replaced2"]


async def test_delete_message_by_row_id(store: AsyncDBChatStore) -> None:
    await store.add_messages(
        "delete_user", [user("message1"), assistant("message2"), user("message3")]
    )
    await store.add_message("other", user("someone else's"))
    ids = await row_ids(store, "delete_user")
    deleted = await store.delete_message("delete_user", ids[1])
    assert deleted is not None
    assert deleted.content == "message2"
    assert contents(await store.get_messages("delete_user")) == ["message1", "message3"]
    # an id that is gone, or that belongs to another key, deletes nothing
    assert await store.delete_message("delete_user", ids[1]) is None
    (other_id,) = await row_ids(store, "other")
    assert await store.delete_message("delete_user", other_id) is None
    assert contents(await store.get_messages("other")) == ["someone else's"]


async def test_delete_message_reaches_archived_rows(store: AsyncDBChatStore) -> None:
    await store.add_messages("k", [user("a"), assistant("b")])
    await store.archive_oldest_messages("k", 1)
    first = (await row_ids(store, "k"))[0]
    deleted = await store.delete_message("k", first)
    assert deleted is not None
    assert deleted.content == "a"
    assert contents(await store.get_messages("k", status=None)) == ["b"]


async def test_delete_messages_of_one_key(store: AsyncDBChatStore) -> None:
    await store.add_message("user1", user("user1_message"))
    await store.add_message("user2", user("user2_message"))
    await store.delete_messages("user1")
    assert await store.get_messages("user1") == []
    assert len(await store.get_messages("user2")) == 1


async def test_delete_messages_by_status(store: AsyncDBChatStore) -> None:
    await store.add_messages("k", [user("a"), assistant("b"), user("c")])
    await store.archive_oldest_messages("k", 2)
    await store.delete_messages("k", status=MessageStatus.ARCHIVED)
    assert contents(await store.get_messages("k", status=None)) == ["c"]
    await store.delete_messages("k", status=MessageStatus.ACTIVE)
    assert await store.get_messages("k", status=None) == []


async def test_delete_oldest_messages(store: AsyncDBChatStore) -> None:
    await store.add_messages("k", [user("oldest"), assistant("middle"), user("newest")])
    deleted = await store.delete_oldest_messages("k", 1)
    assert contents(deleted) == ["oldest"]
    assert contents(await store.get_messages("k")) == ["middle", "newest"]


async def test_archive_oldest_messages(store: AsyncDBChatStore) -> None:
    await store.add_messages("k", [user("oldest"), assistant("middle"), user("newest")])
    assert contents(await store.archive_oldest_messages("k", 1)) == ["oldest"]
    assert contents(await store.get_messages("k", status=MessageStatus.ACTIVE)) == [
        "middle",
        "newest",
    ]
    assert contents(await store.get_messages("k", status=MessageStatus.ARCHIVED)) == ["oldest"]
    assert await store.count_messages("k", status=None) == 3
    # archived later, listed in the order written
    await store.add_message("k", user("late"), status=MessageStatus.ARCHIVED)
    assert contents(await store.get_messages("k", status=MessageStatus.ARCHIVED)) == [
        "oldest",
        "late",
    ]


async def test_limit_and_offset(store: AsyncDBChatStore) -> None:
    await store.add_messages("p", [user(f"message{i}") for i in range(1, 6)])
    assert contents(await store.get_messages("p", limit=2)) == ["message1", "message2"]
    assert contents(await store.get_messages("p", offset=2)) == [
        "message3",
        "message4",
        "message5",
    ]
    assert contents(await store.get_messages("p", limit=2, offset=1)) == ["message2", "message3"]


async def test_pages_of_each_status(store: AsyncDBChatStore) -> None:
    """limit/offset pages of the active, archived and all messages, with archived ones both
    before the active queue and marked among it, as SQLAlchemyChatStore pages them."""
    await store.add_messages("q", [user(f"m{i}") for i in range(6)])
    await store.archive_oldest_messages("q", 2)
    await store.add_message("q", user("late0"), status=MessageStatus.ARCHIVED)
    await store.add_messages("q", [user("m6"), user("m7")])
    await store.add_message("q", user("late1"), status=MessageStatus.ARCHIVED)
    await store.add_message("q", user("m8"))
    expected = {
        MessageStatus.ACTIVE: ["m2", "m3", "m4", "m5", "m6", "m7", "m8"],
        MessageStatus.ARCHIVED: ["m0", "m1", "late0", "late1"],
    }
    everything = ["m0", "m1", "m2", "m3", "m4", "m5", "late0", "m6", "m7", "late1", "m8"]
    for status, want in [*expected.items(), (None, everything)]:
        for limit, offset in [(1, 0), (2, 1), (3, 4), (5, 5), (20, 0), (2, 30)]:
            got = await store.get_messages("q", status=status, limit=limit, offset=offset)
            assert contents(got) == want[offset : offset + limit], (status, limit, offset)


async def test_a_page_reads_its_rows_not_the_whole_queue(
    tmp_path: Path, sqlite_statements: list[str]
) -> None:
    """get_messages(limit, offset) asks the database for offset + limit messages (counted by
    running the traced SQL), however long the active queue is."""
    import sqlite3

    traced = sqlite_statements
    path = str(tmp_path / "memory.db")
    store = HarombeDBChatStore(path, embedding=None)
    try:
        await store.add_messages("k", [user(f"m{i}") for i in range(300)])
        await store.archive_oldest_messages("k", 100)
        traced.clear()
        page = await store.get_messages("k", limit=3, offset=2)
        assert contents(page) == ["m102", "m103", "m104"]
        selects = [s for s in traced if s.startswith("SELECT") and "FROM messages" in s]
        with sqlite3.connect(path) as raw:
            assert sum(len(raw.execute(s).fetchall()) for s in selects) == 5
    finally:
        store.close()


async def test_get_keys(store: AsyncDBChatStore) -> None:
    for key in ("keys_user1", "keys_user2", "keys_user3"):
        await store.add_message(key, user(f"{key}_message"))
    assert set(await store.get_keys()) == {"keys_user1", "keys_user2", "keys_user3"}
    # a key is its messages: once they are all deleted it is no longer listed
    await store.delete_messages("keys_user2")
    assert set(await store.get_keys()) == {"keys_user1", "keys_user3"}


# LlamaIndex's Memory on each store ------------------------------------------------------------


async def test_memory_on_the_store(store: AsyncDBChatStore) -> None:
    # test_memory_custom_chat_store.py::test_waterfall_archives_into_custom_chat_store
    memory = Memory(
        token_limit=1000,
        token_flush_size=700,
        chat_history_token_ratio=0.9,
        session_id="test_user",
        sql_store=store,
    )
    await memory.aput_messages([user("x " * 500), assistant("y " * 500), user("z " * 500)])
    window = await memory.aget()
    assert len(window) == 1
    assert "z " in (window[0].content or "")
    assert await store.count_messages("test_user", status=MessageStatus.ARCHIVED) == 2
    assert len(await memory.aget_all()) == 3
    await memory.aset([user("again")])
    assert contents(await memory.aget_all()) == ["again"]
    await memory.areset()
    assert await memory.aget_all() == []


async def test_a_message_id_that_is_not_an_int_is_a_typed_error(tmp_path: Path) -> None:
    store = HarombeDBChatStore(str(tmp_path / "memory.db"), embedding=None)
    await store.add_message("k", user("hello"))
    try:
        with pytest.raises(InvalidInputError, match="message id"):
            await store.delete_message("k", "0")  # type: ignore[arg-type]
        assert contents(await store.get_messages("k")) == ["hello"]
    finally:
        store.close()
