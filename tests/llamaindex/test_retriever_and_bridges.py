"""HarombeRetriever nodes, and the bridges: LlamaIndex embeddings and LLMs inside harombe."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import BaseModel
from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.llms.mock import MockLLMWithChatMemoryOfLastCall
from llama_index.core.schema import NodeWithScore, QueryBundle

import llamaindex_harombe
from harombe_core.errors import InvalidInputError
from harombe_core.manager import MemoryManager
from llamaindex_harombe import (
    HarombeMemory,
    HarombeRetriever,
    LlamaIndexEmbedder,
    LlamaIndexLLM,
)


def seed(manager: MemoryManager) -> None:
    manager.save_messages(
        "trip",
        [
            {"role": "user", "content": "We are flying to Lisbon on the 3rd of May"},
            {"role": "assistant", "content": "Lisbon in May is lovely"},
        ],
        user_id="ann",
    )
    manager.save_messages(
        "food", [{"role": "user", "content": "I like grilled sardines"}], user_id="ann"
    )
    manager.save_messages(
        "other", [{"role": "user", "content": "Flying to Lisbon next week"}], user_id="ben"
    )
    manager.flush()


def test_nodes_are_scored_past_messages(semantic_manager: MemoryManager) -> None:
    seed(semantic_manager)
    retriever = HarombeRetriever(manager=semantic_manager, user_id="ann", top_k=2)
    nodes = retriever.retrieve("when do we fly to Lisbon?")
    assert all(isinstance(n, NodeWithScore) for n in nodes)
    assert len(nodes) == 2
    best = nodes[0]
    assert best.node.get_content() == "user: We are flying to Lisbon on the 3rd of May"
    assert best.node.metadata["session_id"] == "trip"
    assert best.node.node_id == f"harombe-message-{best.node.metadata['message_id']}"
    assert (best.score or 0) >= (nodes[1].score or 0)
    assert all(n.node.metadata["session_id"] != "other" for n in nodes)  # ben's
    # the message id and session are for the application, not the model
    assert "session_id" not in best.node.get_content(metadata_mode="llm")  # type: ignore[arg-type]


async def test_async_retrieve_matches(semantic_manager: MemoryManager) -> None:
    seed(semantic_manager)
    retriever = HarombeRetriever(manager=semantic_manager, session_id="food", user_id="ann")
    nodes = await retriever.aretrieve(QueryBundle("sardines"))
    assert [n.node.metadata["session_id"] for n in nodes] == ["food"]
    assert [n.node.node_id for n in retriever.retrieve("sardines")] == [
        n.node.node_id for n in nodes
    ]
    excluded = HarombeRetriever(manager=semantic_manager, user_id="ann", exclude_session_id="food")
    assert all(n.node.metadata["session_id"] != "food" for n in excluded.retrieve("sardines"))
    assert retriever.retrieve("   ") == []


def test_in_condense_plus_context_engine(semantic_manager: MemoryManager) -> None:
    seed(semantic_manager)
    llm = MockLLMWithChatMemoryOfLastCall(max_tokens=3, is_chat_model=True)
    engine = CondensePlusContextChatEngine.from_defaults(
        retriever=HarombeRetriever(manager=semantic_manager, user_id="ann"),
        llm=llm,
        memory=HarombeMemory.from_defaults(
            manager=semantic_manager, session_id="now", user_id="ann", rag=False
        ),
        skip_condense=True,
    )
    response = engine.chat("which city are we flying to?")
    assert response.source_nodes
    assert llm.last_chat_messages is not None
    sent = "\n".join(m.content or "" for m in llm.last_chat_messages)
    assert "3rd of May" in sent


def test_bad_retriever_arguments(manager: MemoryManager, db: str) -> None:
    with pytest.raises(InvalidInputError):
        HarombeRetriever(manager=manager, top_k=-1)
    with pytest.raises(InvalidInputError, match="not both"):
        HarombeRetriever(manager=manager, storage_path=db)


# bridges -----------------------------------------------------------------------------------


async def test_llamaindex_embedding_as_harombe_embedder() -> None:
    embedder = LlamaIndexEmbedder(MockEmbedding(embed_dim=16))
    assert embedder.dimension == 16
    assert embedder.name == "llamaindex:MockEmbedding:unknown"
    vectors = embedder.embed(["a", "b"])
    assert vectors.shape == (2, 16)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert embedder.embed_query("q").shape == (16,)
    assert (await embedder.aembed(["x"])).shape == (1, 16)
    assert (await embedder.aembed_query("x")).shape == (16,)
    assert embedder.embed([]).shape == (0, 16)
    with pytest.raises(InvalidInputError):
        LlamaIndexEmbedder("not a model")  # type: ignore[arg-type]


def test_llamaindex_embedder_drives_semantic_memory(tmp_path: object) -> None:
    embedder = LlamaIndexEmbedder(MockEmbedding(embed_dim=8), dimension=8)
    path = f"{tmp_path}/bridge.db"
    with MemoryManager(path, embedding=embedder, vector_store="chroma") as mm:
        assert mm.semantic_enabled
        mm.save_message("s", {"role": "user", "content": "hello there"})
        mm.flush()
        assert [h.message.content for h in mm.search("hello")] == ["hello there"]


async def test_llamaindex_llm_as_core_hook() -> None:
    hook = LlamaIndexLLM(MockLLM())
    assert hook("summarise this") == "summarise this"  # MockLLM echoes
    assert await hook.acall("again") == "again"
    chat = LlamaIndexLLM(MockLLMWithChatMemoryOfLastCall(is_chat_model=True))
    assert "hello" in chat("hello")
    assert chat.llm.last_chat_messages == [ChatMessage(role="user", content="hello")]  # type: ignore[attr-defined]
    with pytest.raises(InvalidInputError):
        LlamaIndexLLM(lambda p: p)  # type: ignore[arg-type]


def test_public_api_is_exactly_all() -> None:
    public = {n for n in dir(llamaindex_harombe) if not n.startswith("_")}
    modules = {"blocks", "chat_store", "convert", "embeddings", "llm", "memory", "retriever"}
    assert public - modules == set(llamaindex_harombe.__all__)
    for name in llamaindex_harombe.__all__:
        assert getattr(llamaindex_harombe, name) is not None


def test_every_component_searches_by_meaning_by_default(tmp_path: Path) -> None:
    # One default everywhere: the core's (bundled offline MiniLM + Chroma), as in LangChain's
    # retriever. The model is loaded once per process, whichever component opens it first.
    from llamaindex_harombe import HarombeChatStore, HarombeDBChatStore, HarombeMemoryBlock

    core = MemoryManager(str(tmp_path / "core.db"))
    components = [
        HarombeMemory.from_defaults(storage_path=tmp_path / "memory.db"),
        HarombeMemory(storage_path=str(tmp_path / "direct.db")),
        HarombeChatStore(tmp_path / "chat.db"),
        HarombeDBChatStore(tmp_path / "queue.db"),
        HarombeMemoryBlock(storage_path=tmp_path / "block.db"),
        HarombeRetriever(storage_path=tmp_path / "retriever.db", all_users=True),
    ]
    try:
        assert core.semantic_enabled
        managers = [c.manager for c in components]
        assert all(m.semantic_enabled for m in managers)
        assert {m.embedder.name for m in managers} == {core.embedder.name}
        assert all(m.embedder is core.embedder for m in managers)  # one model in memory
        # what a component writes is searchable by meaning: no word of the query is in it
        store = components[2]
        assert isinstance(store, HarombeChatStore)
        store.add_message("k", ChatMessage(role="user", content="My golden retriever is Biscuit."))
        store.add_message("k", ChatMessage(role="user", content="Tax forms are due in April."))
        store.manager.flush()
        hits = store.manager.search("puppy", top_k=1)
        assert "Biscuit" in hits[0].message.content
        for component in components[:-1]:  # serialised as "the default", not a model object
            assert isinstance(component, BaseModel)
            assert component.model_dump()["embedding"] == "default"
    finally:
        for component in components:
            component.close()
        core.close()
