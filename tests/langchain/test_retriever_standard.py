"""LangChain's own standard retriever suite, run unmodified against HarombeRetriever."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from langchain_tests.integration_tests import RetrieversIntegrationTests

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.testing import FakeEmbedder
from langchain_harombe import HarombeRetriever


@cache
def _database() -> str:
    """A database with more matching turns than any test asks for (built once per run)."""
    path = str(Path(tempfile.mkdtemp(prefix="harombe-retriever-")) / "memory.db")
    with MemoryManager(path, embedding=None) as manager:
        for i in range(6):
            manager.save_messages(
                f"s{i}",
                [
                    Message(role="user", content=f"What is an example query number {i}?"),
                    Message(role="assistant", content=f"Query {i} is an example of a search."),
                ],
                user_id="u1",
            )
    return path


class TestHarombeRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[HarombeRetriever]:
        return HarombeRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {
            "storage_path": _database(),
            "manager_options": {"embedding": None},
            "user_id": "u1",
        }

    @property
    def retriever_query_example(self) -> str:
        return "example query"


@cache
def _semantic_database() -> str:
    """The same turns, embedded (deterministic FakeEmbedder, real ChromaDB)."""
    path = str(Path(tempfile.mkdtemp(prefix="harombe-retriever-sem-")) / "memory.db")
    with MemoryManager(path, embedding=FakeEmbedder(), vector_store="chroma") as manager:
        for i in range(6):
            manager.save_messages(
                f"s{i}",
                [
                    Message(role="user", content=f"What is an example query number {i}?"),
                    Message(role="assistant", content=f"Query {i} is an example of a search."),
                ],
                user_id="u1",
            )
        manager.flush()
    return path


class TestHarombeRetrieverSemanticStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[HarombeRetriever]:
        return HarombeRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {
            "storage_path": _semantic_database(),
            "manager_options": {"embedding": FakeEmbedder(), "vector_store": "chroma"},
            "search_type": "mmr",
            "user_id": "u1",
        }

    @property
    def retriever_query_example(self) -> str:
        return "example query"
