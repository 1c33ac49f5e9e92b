"""The chat store's reads follow what they return: deleting by position reads up to that
position (from the start or from the end), never the whole conversation, and lengths are
counted by SQL."""

from __future__ import annotations

from pathlib import Path

from llama_index.core.base.llms.types import ChatMessage

from harombe_core import MemoryManager, Message
from llamaindex_harombe.chat_store import HarombeChatStore
from tests.llamaindex.test_memory_window_reads import rows_read


def test_deleting_by_position_reads_up_to_the_position(tmp_path: Path) -> None:
    mm = MemoryManager(str(tmp_path / "c.db"), embedding=None)
    try:
        store = HarombeChatStore(manager=mm)
        mm.create_session(session_id="long")
        mm.save_messages("long", [Message(role="user", content=f"m{n}") for n in range(2000)])
        with rows_read() as seen:
            assert store.delete_last_message("long") == ChatMessage(role="user", content="m1999")
            assert store.delete_message("long", -3) == ChatMessage(role="user", content="m1996")
            assert store.delete_message("long", 2) == ChatMessage(role="user", content="m2")
        # 1 + 3 + 3 rows (every call read all 2,000 messages before)
        assert seen[0] == 1 + 3 + 3
        assert store.delete_message("long", 5000) is None  # past the end: nothing removed
        assert store.delete_message("long", -5000) is None
        assert len(store.get_messages("long")) == 1997
    finally:
        mm.close()


async def test_async_deletes_by_position_read_up_to_the_position(tmp_path: Path) -> None:
    mm = MemoryManager(str(tmp_path / "c.db"), embedding=None)
    try:
        store = HarombeChatStore(manager=mm)
        mm.create_session(session_id="long")
        mm.save_messages("long", [Message(role="user", content=f"m{n}") for n in range(50)])
        with rows_read() as seen:
            assert await store.adelete_last_message("long") == ChatMessage(
                role="user", content="m49"
            )
            assert await store.adelete_message("long", 1) == ChatMessage(role="user", content="m1")
        assert seen[0] == 1 + 2
        assert [m.content for m in await store.aget_messages("long")][:2] == ["m0", "m2"]
    finally:
        mm.close()
