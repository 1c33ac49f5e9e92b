"""Chat-store writes that read the key's messages and rewrite them (an insert at an index,
``set_messages``, a delete at an index, the DB store's FIFO moves) stay right when other
writers commit meanwhile: each is one transaction, so no message is lost or written twice.

Before, the read and the rewrite were two transactions; a writer in between made the rewrite
stale, and two inserts at index 0 at once each wrote the tail again (duplicates).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage

from harombe_core.manager import MemoryManager
from harombe_core.store.pg_server import EmbeddedPostgres
from llamaindex_harombe import HarombeChatStore, HarombeDBChatStore


@pytest.fixture(params=["file", "postgres"])
def manager(
    request: pytest.FixtureRequest, tmp_path: Path, pg_server: EmbeddedPostgres
) -> Iterator[MemoryManager]:
    """A file database and PostgreSQL (whose transactions do not lock a whole database, so a
    rewrite there must lock the session's row). The server is asked for up front: it starts
    before this directory's fixture blocks sockets."""
    if request.param == "postgres":
        location = request.getfixturevalue("pg_url")
    else:
        location = str(tmp_path / "c.db")
    mm = MemoryManager(location, embedding=None)
    try:
        yield mm
    finally:
        mm.close()


def _user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def test_a_writer_committing_between_an_inserts_read_and_rewrite_duplicates_nothing(
    manager: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving forced where it can happen: another insert commits right after this
    insert's read returns, on the read's own await. An insert is now one transaction (its read
    is no separate await, so nothing gets in); before, the other insert landed in between and
    this one wrote the old tail again."""
    store = HarombeChatStore(manager=manager)
    store.add_message("k", _user("old"))
    real = manager.aget_messages
    interleaved: list[bool] = []

    async def read_then_let_another_write(*args: Any, **kwargs: Any) -> Any:
        stored = await real(*args, **kwargs)
        if not interleaved:
            interleaved.append(True)
            await store.async_add_message("k", _user("other"), idx=0)
        return stored

    monkeypatch.setattr(manager, "aget_messages", read_then_let_another_write)
    asyncio.run(store.async_add_message("k", _user("mine"), idx=0))
    contents = [m.content for m in store.get_messages("k")]
    assert sorted(contents) == sorted(["mine", "old"] + ["other"] * len(interleaved))
    assert contents[-1] == "old"


def test_many_tasks_inserting_at_an_index_each_land_exactly_once(
    manager: MemoryManager,
) -> None:
    """12 tasks x 5 messages on one key, every other one inserted at index 0 and some tasks
    failing half-way: every acknowledged message is there once, nothing else is."""
    store = HarombeChatStore(manager=manager)
    acknowledged: list[str] = []

    async def task(k: int) -> None:
        for j in range(5):
            if k % 4 == 3 and j == 2:
                raise RuntimeError("this task fails half-way")
            text = f"t{k}m{j}"
            await store.async_add_message("k", _user(text), idx=0 if j % 2 == 0 else None)
            acknowledged.append(text)

    async def run_all() -> list[Any]:
        tasks = [task(k) for k in range(12)]
        return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 120)

    outcomes = asyncio.run(run_all())
    assert sum(isinstance(o, RuntimeError) for o in outcomes) == 3
    contents = collections.Counter(m.content for m in store.get_messages("k"))
    assert contents == collections.Counter(acknowledged)
    assert len(acknowledged) == 9 * 5 + 3 * 2


def test_concurrent_deletes_at_an_index_each_delete_their_own_message(
    manager: MemoryManager,
) -> None:
    store = HarombeChatStore(manager=manager)
    for n in range(6):
        store.add_message("k", _user(f"m{n}"))

    async def run_all() -> list[Any]:
        return await asyncio.gather(*(store.adelete_message("k", 0) for _ in range(4)))

    removed = asyncio.run(run_all())
    assert sorted(m.content for m in removed) == ["m0", "m1", "m2", "m3"]
    assert [m.content for m in store.get_messages("k")] == ["m4", "m5"]


def test_db_chat_store_fifo_moves_under_concurrent_writers(manager: MemoryManager) -> None:
    """``delete_oldest_messages`` from several tasks at once removes distinct messages."""
    store = HarombeDBChatStore(manager=manager)

    async def run_all() -> list[Any]:
        await store.add_messages("k", [_user(f"m{n}") for n in range(8)])
        return await asyncio.gather(*(store.delete_oldest_messages("k", 2) for _ in range(3)))

    removed = asyncio.run(run_all())
    gone = sorted(m.content for batch in removed for m in batch)
    assert gone == [f"m{n}" for n in range(6)]
    assert [m.content for m in asyncio.run(store.get_messages("k"))] == ["m6", "m7"]
