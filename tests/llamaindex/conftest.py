"""Fixtures for the LlamaIndex adapter: offline models, no network, stores that are closed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_index.core import Settings
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from pytest_socket import disable_socket, enable_socket

from harombe_core.manager import MemoryManager
from harombe_core.testing import FakeEmbedder


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
