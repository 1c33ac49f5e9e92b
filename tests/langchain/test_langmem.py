"""LangMem's memory tools and memory store manager on HarombeStore, beside InMemoryStore.

LangMem keeps long-term memories as LangGraph store items under a namespace templated by the
run's config (``("memories", "{langgraph_user_id}")``); its tools and its memory manager only
call the store's ``put``/``search``/``delete`` (threads and asyncio tasks at once). Each test
runs the same calls on LangGraph's ``InMemoryStore`` and on ``HarombeStore`` with the same
``index`` configuration and asserts the same results, for two users.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from harombe_core.manager import MemoryManager
from harombe_core.testing import FakeEmbedder
from langchain_harombe import HarombeStore

langmem = pytest.importorskip("langmem")

NAMESPACE = ("memories", "{langgraph_user_id}")
USERS = {
    "ann": ["Ann likes green tea", "Ann lives in Lisbon", "Ann has a cat called Miso"],
    "bob": ["Bob drinks coffee", "Bob lives in Oslo"],
}


class ToolCallingFake(GenericFakeChatModel):
    """GenericFakeChatModel that accepts ``bind_tools`` (the script decides the calls)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind()


def _stores(tmp_path: Path, fields: list[str]) -> list[tuple[str, BaseStore, MemoryManager]]:
    embedder = FakeEmbedder()

    def embed(texts: list[str]) -> list[list[float]]:
        return embedder.embed(list(texts)).tolist()

    index = {"embed": embed, "dims": embedder.dimension, "fields": fields}
    mm = MemoryManager(str(tmp_path / "m.db"), embedding=None)
    return [
        ("control", InMemoryStore(index=index), mm),
        ("harombe", HarombeStore(mm, index=index), mm),
    ]


def _found(answer: str) -> list[tuple[str, float | None]]:
    return [
        (i["value"]["content"], i["score"] and round(i["score"], 4)) for i in json.loads(answer)
    ]


def _tool_session(store: BaseStore) -> list[Any]:
    """Create, update, delete and search memories with LangMem's tools, for two users."""
    manage = langmem.create_manage_memory_tool(NAMESPACE, store=store)
    search = langmem.create_search_memory_tool(NAMESPACE, store=store)
    seen: list[Any] = []
    for user, texts in USERS.items():
        config = {"configurable": {"langgraph_user_id": user}}
        ids = [manage.invoke({"content": t, "action": "create"}, config).split()[-1] for t in texts]
        manage.invoke({"content": f"{texts[0]} (now)", "action": "update", "id": ids[0]}, config)
        manage.invoke({"action": "delete", "id": ids[1]}, config)
        for query in ["where does the user live?", "pets", "drinks"]:
            seen.append((user, query, _found(search.invoke({"query": query}, config))))
        everything = search.invoke({"query": "", "limit": 10}, config)
        seen.append((user, sorted(text for text, _ in _found(everything))))
        only = search.invoke({"query": "tea", "filter": {"content": texts[-1]}}, config)
        seen.append((user, _found(only)))
        page = search.invoke({"query": "tea", "limit": 1, "offset": 1}, config)
        seen.append((user, _found(page)))
    seen.append(store.list_namespaces())
    return seen


def test_langmem_tools_give_the_same_memories_as_on_inmemorystore(tmp_path: Path) -> None:
    (_, control, mm), (_, ours, _) = _stores(tmp_path, ["content"])
    with mm:
        expected = _tool_session(control)
        assert _tool_session(ours) == expected
        assert expected[-1] == [("memories", "ann"), ("memories", "bob")]


def _extract(store: BaseStore, user: str, facts: list[str], *, run_async: bool) -> list[Any]:
    """Two turns of LangMem's memory store manager with a scripted tool-calling model."""
    calls = [{"name": "Memory", "args": {"content": f}, "id": f"c{i}"} for i, f in enumerate(facts)]
    more = {"name": "Memory", "args": {"content": f"{facts[0]} a lot"}, "id": "c9"}
    model = ToolCallingFake(
        messages=iter([AIMessage("", tool_calls=calls), AIMessage("", tool_calls=[more])])
    )
    manager = langmem.create_memory_store_manager(model, store=store, enable_deletes=True)
    config = {"configurable": {"langgraph_user_id": user}}
    first: list[BaseMessage] = [HumanMessage(". ".join(facts)), AIMessage("noted")]
    second = [*first, HumanMessage("really a lot"), AIMessage("ok")]
    seen: list[Any] = []
    for messages in (first, second):
        if run_async:
            puts = asyncio.run(manager.ainvoke({"messages": messages}, config))
        else:
            puts = manager.invoke({"messages": messages}, config)
        seen.append(sorted(p["value"]["content"]["content"] for p in puts))
    found = manager.search(query=facts[0].split()[-1], config=config)  # "tea", "coffee"
    seen.append([(i.value.content, round(i.score or 0.0, 4)) for i in found])
    stored = store.search(("memories", user), limit=20)
    seen.append(sorted(i.value["content"]["content"] for i in stored))
    return seen


@pytest.mark.parametrize("run_async", [False, True], ids=["sync", "async"])
def test_langmem_memory_store_manager_matches_inmemorystore(
    tmp_path: Path, run_async: bool
) -> None:
    """The manager searches the user's namespace, asks the model, and writes the new
    memories from a thread pool (sync) or concurrent tasks (async)."""
    (_, control, mm), (_, ours, _) = _stores(tmp_path, ["content.content"])
    with mm:
        for user, facts in (("ann", USERS["ann"][::2]), ("bob", USERS["bob"][:1])):
            expected = _extract(control, user, facts, run_async=run_async)
            assert _extract(ours, user, facts, run_async=run_async) == expected
            assert expected[-1] == sorted([*facts, f"{facts[0]} a lot"])
