"""HarombeStore: the LangGraph BaseStore contract, semantic search, TTL, persistence, agents."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.config import get_store
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp

from harombe_core.errors import InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.testing import FakeEmbedder
from langchain_harombe import HarombeStore, RecordingChatModel


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HarombeStore]:
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as manager:
        yield HarombeStore(manager, index={"embed": FakeEmbedder(), "fields": ["text"]})


def test_put_get_update_delete(store: HarombeStore) -> None:
    store.put(("users", "ann"), "prefs", {"text": "likes tea", "n": 1})
    item = store.get(("users", "ann"), "prefs")
    assert item is not None
    assert (item.namespace, item.key) == (("users", "ann"), "prefs")
    assert item.value == {"text": "likes tea", "n": 1}
    created = item.created_at
    store.put(("users", "ann"), "prefs", {"text": "likes coffee", "n": 2})
    updated = store.get(("users", "ann"), "prefs")
    assert updated is not None
    assert updated.value["n"] == 2
    assert updated.created_at == created
    assert updated.updated_at >= created
    store.delete(("users", "ann"), "prefs")
    assert store.get(("users", "ann"), "prefs") is None


def test_batch_runs_ops_in_order(store: HarombeStore) -> None:
    results = store.batch(
        [
            PutOp(("a",), "k", {"text": "one"}),
            GetOp(("a",), "k"),
            PutOp(("a",), "k", None),
            GetOp(("a",), "k"),
            ListNamespacesOp(),
        ]
    )
    assert results[0] is None
    assert results[1] is not None
    assert results[1].value == {"text": "one"}
    assert results[3] is None
    assert results[4] == []


def test_semantic_search_filter_and_pagination(store: HarombeStore) -> None:
    ns = ("memories", "ann")
    store.put(ns, "1", {"text": "Ann loves hiking in the mountains", "kind": "hobby", "year": 2020})
    store.put(ns, "2", {"text": "Ann is allergic to peanuts", "kind": "health", "year": 2022})
    store.put(ns, "3", {"text": "Ann enjoys mountain biking", "kind": "hobby", "year": 2024})
    store.put(("memories", "bob"), "1", {"text": "Bob loves hiking", "kind": "hobby"})
    hits = store.search(ns, query="hiking in the mountains", limit=2)
    assert next(h.key for h in hits) == "1"
    assert len(hits) == 2
    assert hits[0].score is not None
    assert hits[0].score >= (hits[1].score or 0)
    assert all(h.namespace == ns for h in store.search(ns, query="hiking"))
    hobbies = store.search(("memories",), filter={"kind": "hobby"})
    assert {(h.namespace[-1], h.key) for h in hobbies} == {("ann", "1"), ("ann", "3"), ("bob", "1")}
    recent = store.search(ns, filter={"year": {"$gte": 2022}})
    assert {h.key for h in recent} == {"2", "3"}
    page = store.search(("memories",), limit=2, offset=1)
    assert len(page) == 2
    assert store.search(("memories",), query="peanuts", filter={"kind": "health"})[0].key == "2"


def test_put_without_index_is_not_ranked(store: HarombeStore) -> None:
    store.put(("n",), "plain", {"text": "hiking"}, index=False)
    store.put(("n",), "indexed", {"text": "hiking"})
    hits = store.search(("n",), query="hiking")
    assert [(h.key, h.score is None) for h in hits] == [("indexed", False), ("plain", True)]


def test_list_namespaces(store: HarombeStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("z",)]:
        store.put(ns, "k", {"text": "v"})
    assert store.list_namespaces() == [("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("z",)]
    assert store.list_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d")]
    assert store.list_namespaces(suffix=("d",)) == [("a", "b", "d")]
    assert store.list_namespaces(prefix=("a", "*", "c")) == [("a", "b", "c")]
    assert store.list_namespaces(max_depth=1) == [("a",), ("z",)]
    assert store.list_namespaces(limit=1, offset=1) == [("a", "b", "d")]


def test_ttl_expires_and_sweeps(store: HarombeStore) -> None:
    store.put(("t",), "short", {"text": "x"}, ttl=0.0005)  # 30 ms
    store.put(("t",), "long", {"text": "y"}, ttl=60)
    assert store.get(("t",), "short") is not None
    time.sleep(0.1)
    assert store.get(("t",), "short") is None
    assert [h.key for h in store.search(("t",))] == ["long"]
    assert store.sweep_ttl() == 1


def test_items_persist_in_the_same_database(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    with MemoryManager(path, embedding=None) as manager:
        manager.save_message("s", {"role": "user", "content": "hello"})
        HarombeStore(manager).put(("u",), "k", {"v": 1})
    with MemoryManager(path, embedding=None) as manager:
        item = HarombeStore(manager).get(("u",), "k")
        assert item is not None
        assert item.value == {"v": 1}
        assert manager.get_messages("s")[0].content == "hello"


def test_langchain_embeddings_and_manager_embedder(tmp_path: Path) -> None:
    with MemoryManager(str(tmp_path / "a.db"), embedding=None) as manager:
        store = HarombeStore(
            manager, index={"embed": DeterministicFakeEmbedding(size=32), "fields": ["text"]}
        )
        store.put(("d",), "1", {"text": "alpha"})
        assert store.search(("d",), query="alpha")[0].score == pytest.approx(1.0, abs=1e-5)
    with MemoryManager(
        str(tmp_path / "b.db"), embedding=FakeEmbedder(), vector_store="chroma"
    ) as manager:
        store = HarombeStore(manager)
        store.put(("d",), "1", {"text": "green tea"})
        store.put(("d",), "2", {"text": "car engines"})
        assert store.search(("d",), query="green tea")[0].key == "1"


def test_bad_values_are_refused(store: HarombeStore) -> None:
    with pytest.raises(InvalidInputError, match="JSON"):
        store.put(("a",), "k", {"x": object()})
    store.put(("a",), "k", {"x": "a"})
    with pytest.raises(InvalidInputError, match="operator"):
        store.search(("a",), filter={"x": {"$regex": "a"}})


async def test_async_twins(store: HarombeStore) -> None:
    await store.aput(("a",), "k", {"text": "async tea"})
    item = await store.aget(("a",), "k")
    assert item is not None
    assert item.value == {"text": "async tea"}
    assert [h.key for h in await store.asearch(("a",), query="tea")] == ["k"]
    assert await store.alist_namespaces() == [("a",)]
    results = await store.abatch([SearchOp(("a",), query="tea"), GetOp(("a",), "missing")])
    assert results[1] is None
    await store.adelete(("a",), "k")
    assert await store.aget(("a",), "k") is None


@tool
def remember(fact: str) -> str:
    """Remember a fact about the user."""
    store = get_store()
    store.put(("facts",), str(len(store.search(("facts",))) + 1), {"text": fact})
    return "saved"


def test_agent_uses_the_store(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    with MemoryManager(path, embedding=None) as manager:
        model = RecordingChatModel(
            responses=[
                AIMessage("", tool_calls=[{"name": "remember", "args": {"fact": "likes tea"},
                                           "id": "c1"}]),
                "Noted.",
            ]
        )
        agent = create_agent(model, tools=[remember], store=HarombeStore(manager))
        agent.invoke({"messages": [HumanMessage("I like tea")]})
    with MemoryManager(path, embedding=None) as manager:
        items = HarombeStore(manager).search(("facts",))
        assert [i.value for i in items] == [{"text": "likes tea"}]
