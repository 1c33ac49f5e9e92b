"""LlamaIndex's chat store deletes as harombe promises: once ``delete_message`` returns no
search finds the text (not even through the next message, whose keyword entry and vector held
it), and after close no byte of it is left in the database, its WAL or the Chroma folder."""

from __future__ import annotations

from pathlib import Path

from llama_index.core.llms import ChatMessage

from harombe_core import MemoryManager
from harombe_core.testing import FakeEmbedder
from llamaindex_harombe import HarombeChatStore
from tests.reliability.test_deletion import files_holding, found_anywhere, token


def test_delete_message_and_delete_messages_leave_nothing(tmp_path: Path) -> None:
    secret, other, control = token(), token(), token()
    db = tmp_path / "m.db"
    with MemoryManager(str(db), embedding=FakeEmbedder(), vector_store="chroma") as mm:
        chats = HarombeChatStore(manager=mm)
        chats.set_messages(
            "chat",
            [
                ChatMessage(role="user", content="what should I keep safe"),
                ChatMessage(role="user", content=f"my password is {secret}"),
                ChatMessage(role="assistant", content=f"understood, I keep it safe {control}"),
            ],
        )
        chats.set_messages("gone", [ChatMessage(role="user", content=f"forget {other}")])
        mm.flush()
        assert len(mm.store.keyword_search(secret, limit=5)) == 2  # itself and its answer
        removed = chats.delete_message("chat", 1)
        assert removed is not None
        assert secret in str(removed.content)
        assert found_anywhere(mm, secret) == []
        assert mm.store.keyword_search(secret, limit=5) == []
        assert chats.delete_messages("gone") is not None
        assert found_anywhere(mm, other) == []
        mm.flush()
        assert found_anywhere(mm, secret) == []
        assert [m.content for m in chats.get_messages("chat")][1].endswith(control)
    assert files_holding(tmp_path, secret) == []
    assert files_holding(tmp_path, other) == []
    assert "m.db" in files_holding(tmp_path, control)
