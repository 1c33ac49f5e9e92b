"""Fixtures for the LlamaIndex adapter: offline models, no network, stores that are closed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from llama_index.core import Settings
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.memory import BaseMemory, ChatMemoryBuffer, Memory
from pytest_socket import disable_socket, enable_socket
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from harombe_core.manager import MemoryManager
from harombe_core.testing import FakeEmbedder
from llamaindex_harombe import HarombeMemory

#: LlamaIndex's memories (the controls) and ours, for tests of LlamaIndex's memory contract.
MEMORY_KINDS = ("ChatMemoryBuffer", "Memory", "HarombeMemory")
BuildMemory = Callable[..., BaseMemory]


@pytest.fixture(autouse=True)
def offline_llamaindex() -> Iterator[None]:
    """LlamaIndex's defaults (OpenAI models) would reach the network: mocks instead, no sockets."""
    llm, embed = Settings._llm, Settings._embed_model
    Settings.llm = MockLLM()
    Settings.embed_model = MockEmbedding(embed_dim=8)
    disable_socket(allow_unix_socket=True)
    try:
        yield
    finally:
        enable_socket()
        Settings._llm, Settings._embed_model = llm, embed


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "memory.db")


@pytest.fixture
def semantic_manager(tmp_path: Path) -> Iterator[MemoryManager]:
    """Hybrid search over a real ChromaDB with the deterministic FakeEmbedder."""
    path = str(tmp_path / "semantic.db")
    mm = MemoryManager(path, embedding=FakeEmbedder(), vector_store="chroma")
    try:
        yield mm
    finally:
        mm.close()


@pytest.fixture
async def build_memory(tmp_path: Path) -> AsyncIterator[BuildMemory]:
    """``build_memory(kind, history_tokens)``: a memory of one of ``MEMORY_KINDS``.

    ``ChatMemoryBuffer`` and ``HarombeMemory`` get ``history_tokens`` as ``token_limit``;
    ``Memory`` as ``token_limit`` with ``chat_history_token_ratio=1.0`` (its whole limit for the
    conversation) and ``token_flush_size=flush``. Memory's aiosqlite engines are disposed in the
    test's loop (a leaked connection reports "Event loop is closed" during a later test);
    harombe's stores are real SQLite files, closed at the end.
    """
    engines: list[AsyncEngine] = []
    managers: list[MemoryManager] = []

    def make(kind: str, limit: int, *, flush: int = 1, session_id: str = "s") -> BaseMemory:
        if kind == "ChatMemoryBuffer":
            return ChatMemoryBuffer.from_defaults(token_limit=limit)
        if kind == "Memory":
            engines.append(create_async_engine("sqlite+aiosqlite:///:memory:"))
            return Memory.from_defaults(
                session_id=session_id,
                token_limit=limit,
                chat_history_token_ratio=1.0,
                token_flush_size=flush,
                async_engine=engines[-1],
            )
        assert kind == "HarombeMemory"
        managers.append(MemoryManager(str(tmp_path / f"{len(managers)}.db"), embedding=None))
        return HarombeMemory.from_defaults(
            manager=managers[-1], session_id=session_id, token_limit=limit
        )

    try:
        yield make
    finally:
        for engine in engines:
            await engine.dispose()
        for manager in managers:
            manager.close()
