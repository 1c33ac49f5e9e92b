"""The LlamaIndex adapters' async methods cancelled at every await point (see
tests/core/test_cancellation_sweep.py for the method): the chat store (appends, inserts at an
index, set and delete) and ``HarombeMemory`` (put, set, get; linear and threaded). After each
cancel the call took effect fully or not at all, the object still works, and every
acknowledged write is stored once and found."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage

from harombe_core.manager import MemoryManager
from harombe_core.testing import FakeEmbedder
from llamaindex_harombe import HarombeChatStore, HarombeMemory
from tests.core.test_cancellation_sweep import HopCanceller, _word, sweep_session
from tests.core.test_cancellation_sweep import canceller as canceller  # (the fixture)

Made = tuple[Callable[[], Awaitable[Any]], list[str]]


def _note(word: str, role: str = "user") -> ChatMessage:
    return ChatMessage(role=role, content=f"note {word}")


def test_chat_store_cancelled_at_every_await(tmp_path: Path, canceller: HopCanceller) -> None:
    with MemoryManager(str(tmp_path / "m.db"), embedding=FakeEmbedder()) as mm:
        store = HarombeChatStore(manager=mm, user_id="u")
        acknowledged: list[str] = []

        def add(idx: int | None) -> Callable[[], Made]:
            def make() -> Made:
                word = _word()
                return (lambda: store.async_add_message("k", _note(word), idx=idx)), [word]

            return make

        def delete() -> Made:
            return (lambda: store.adelete_message("scratch", 0)), []

        def replace() -> Made:
            words = [_word(), _word()]
            return (lambda: store.aset_messages("scratch", [_note(w) for w in words])), []

        async def still_works() -> None:
            word = _word()
            await store.async_add_message("k", _note(word))
            acknowledged.append(word)
            await store.aget_messages("k")

        makes = [add(None), add(0), add(-1), delete, replace]
        sweep_session(canceller, mm, "k", makes, still_works, acknowledged)


@pytest.mark.parametrize("strategy", ["simple", "threaded"])
def test_memory_cancelled_at_every_await(
    tmp_path: Path, canceller: HopCanceller, strategy: str
) -> None:
    with MemoryManager(str(tmp_path / "m.db"), embedding=FakeEmbedder()) as mm:
        memory = HarombeMemory.from_defaults(
            manager=mm, session_id="m", user_id="u", strategy=strategy
        )
        acknowledged: list[str] = []

        def put() -> Made:
            word = _word()
            return (lambda: memory.aput(_note(word))), [word]

        def read() -> Made:
            return (lambda: memory.aget(input="note")), []

        async def still_works() -> None:
            word = _word()
            await memory.aput(_note(word, "assistant"))
            acknowledged.append(word)
            await memory.aget()

        sweep_session(canceller, mm, "m", [put, read], still_works, acknowledged)
