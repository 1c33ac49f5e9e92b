"""HarombeRetriever: document metadata, scoping, per-call k, search types, async."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harombe_core.errors import InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.testing import FakeEmbedder
from langchain_harombe import HarombeRetriever


@pytest.fixture
def semantic(tmp_path: Path) -> Iterator[MemoryManager]:
    with MemoryManager(
        str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma"
    ) as manager:
        manager.save_messages(
            "trip",
            [
                Message(role="user", content="I am planning a trip to Lisbon in May", name="Ann"),
                Message(role="assistant", content="Lisbon in May is warm and sunny"),
            ],
            user_id="ann",
        )
        manager.save_messages(
            "cook",
            [
                Message(role="user", content="How long do I boil pasta?"),
                Message(role="assistant", content="Boil pasta for ten minutes"),
            ],
            user_id="bob",
        )
        manager.flush()
        yield manager


def test_documents_carry_provenance_and_scores(semantic: MemoryManager) -> None:
    docs = HarombeRetriever(manager=semantic, k=2, user_id="ann").invoke("trip to Lisbon")
    assert docs[0].page_content == "I am planning a trip to Lisbon in May"
    meta = docs[0].metadata
    assert (meta["session_id"], meta["role"], meta["name"]) == ("trip", "user", "Ann")
    assert isinstance(meta["message_id"], int)
    assert docs[0].id == str(meta["message_id"])
    assert meta["score"] > 0
    assert meta["vector_score"] is not None
    assert meta["created_at"].endswith("+00:00")


def test_user_and_session_scopes_are_enforced(semantic: MemoryManager) -> None:
    docs = HarombeRetriever(manager=semantic, k=4, user_id="bob").invoke("trip to Lisbon")
    assert {d.metadata["session_id"] for d in docs} <= {"cook"}
    docs = HarombeRetriever(manager=semantic, k=4, session_id="trip", user_id="ann").invoke("pasta")
    assert {d.metadata["session_id"] for d in docs} <= {"trip"}
    docs = HarombeRetriever(
        manager=semantic, k=4, exclude_session_id="trip", all_users=True
    ).invoke("Lisbon")
    assert all(d.metadata["session_id"] != "trip" for d in docs)


@pytest.mark.parametrize("search_type", ["hybrid", "similarity", "mmr"])
def test_search_types_and_k_override(semantic: MemoryManager, search_type: str) -> None:
    retriever = HarombeRetriever(
        manager=semantic,
        k=3,
        search_type=search_type,
        all_users=True,  # type: ignore[arg-type]
    )
    assert len(retriever.invoke("boil pasta", k=1)) == 1
    docs = retriever.invoke("boil pasta")
    assert len(docs) == 3
    assert "pasta" in docs[0].page_content


def test_min_similarity_drops_weak_matches(semantic: MemoryManager) -> None:
    docs = HarombeRetriever(manager=semantic, k=4, min_similarity=0.99, all_users=True).invoke(
        "Lisbon"
    )
    assert docs == []


async def test_async_matches_sync(semantic: MemoryManager) -> None:
    retriever = HarombeRetriever(manager=semantic, k=2, user_id="bob")
    assert await retriever.ainvoke("pasta", k=2) == retriever.invoke("pasta", k=2)


def test_keyword_only_and_errors(tmp_path: Path) -> None:
    with MemoryManager(str(tmp_path / "k.db"), embedding=None) as manager:
        manager.save_message("s", Message(role="user", content="quantum entanglement"))
        docs = HarombeRetriever(manager=manager, all_users=True).invoke("entanglement")
        assert [d.page_content for d in docs] == ["quantum entanglement"]
        assert docs[0].metadata["keyword_score"] > 0
        with pytest.raises(InvalidInputError, match="semantic memory"):
            HarombeRetriever(manager=manager, session_id="s", search_type="similarity").invoke("x")
        with pytest.raises(InvalidInputError, match="k must be"):
            HarombeRetriever(manager=manager, session_id="s").invoke("x", k=-1)
        with pytest.raises(InvalidInputError, match="only k"):
            HarombeRetriever(manager=manager, session_id="s").invoke("x", top=3)
    with pytest.raises(InvalidInputError, match="not both"):
        HarombeRetriever(manager=manager, storage_path="x.db", user_id="u").invoke("x")


def test_an_assistant_turn_with_only_tool_calls_is_never_a_document(tmp_path: Path) -> None:
    """A tool-calling turn has no text; its neighbours lift its rank, but an empty document
    tells a chain nothing, so it is left out and k documents with text are still returned."""
    with MemoryManager(
        str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma"
    ) as manager:
        turns: list[Message] = []
        for i in range(4):
            call = {"id": f"c{i}", "name": "weather", "args": {"city": "Lisbon"}}
            turns += [
                Message(role="user", content=f"What is the weather in Lisbon on day {i}?"),
                Message(role="assistant", content="", tool_calls=[call]),
                Message(role="tool", content=f"Lisbon day {i}: sunny", tool_call_id=f"c{i}"),
                Message(role="assistant", content=f"Lisbon is sunny on day {i}."),
            ]
        manager.save_messages("trip", turns, user_id="ann")
        manager.flush()
        for search_type in ("hybrid", "similarity", "mmr"):
            retriever = HarombeRetriever(
                manager=manager, k=12, user_id="ann", search_type=search_type
            )
            docs = retriever.invoke("weather in Lisbon")
            assert len(docs) == 12
            assert all(d.page_content.strip() for d in docs)


@pytest.mark.parametrize("k", [None, "3", 2.5, True, -1, 10**30])
async def test_search_hits_refuses_a_bad_k_with_a_typed_error(tmp_path: Path, k: object) -> None:
    """``search_hits``/``asearch_hits`` are public: a k that is not a count up to the search
    limit is an InvalidInputError naming k (None once failed with a bare TypeError)."""
    with MemoryManager(str(tmp_path / "k.db"), embedding=None) as manager:
        manager.save_message("s", Message(role="user", content="quantum entanglement"))
        retriever = HarombeRetriever(manager=manager, all_users=True)
        with pytest.raises(InvalidInputError, match="k must be"):
            retriever.search_hits("entanglement", k)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="k must be"):
            await retriever.asearch_hits("entanglement", k)  # type: ignore[arg-type]
