"""LangGraph's checkpointer deletes as harombe promises: a message removed with
``RemoveMessage`` is found by no search (not even through the next message's keyword entry,
which held it), and a deleted thread leaves no byte in the database, its WAL or the Chroma
folder once closed.

A removed message stays in the thread's older checkpoints (LangGraph keeps them for time
travel): deleting the thread (or pruning its checkpoints) is what removes those bytes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.graph import START, MessagesState, StateGraph

from harombe_core import MemoryManager
from harombe_core.testing import FakeEmbedder
from langchain_harombe import HarombeSaver
from tests.reliability.test_deletion import files_holding, found_anywhere, token


def _graph(saver: HarombeSaver) -> Any:
    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("noted")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def test_remove_message_then_delete_thread_leave_nothing(tmp_path: Path) -> None:
    secret, control, thread = token(), token(), "t-" + token()
    db = tmp_path / "m.db"
    with MemoryManager(str(db), embedding=FakeEmbedder(), vector_store="chroma") as mm:
        saver = HarombeSaver(mm)
        graph = _graph(saver)
        config = {"configurable": {"thread_id": thread}}
        graph.invoke({"messages": [HumanMessage("what should I keep safe")]}, config)
        graph.invoke({"messages": [HumanMessage(f"my password is {secret}")]}, config)
        mm.save_message("keep", {"role": "user", "content": f"the harbour code is {control}"})
        mm.flush()
        assert len(mm.store.keyword_search(secret, limit=5)) == 2  # itself and the reply
        doomed = next(m for m in graph.get_state(config).values["messages"] if secret in m.text)
        graph.update_state(config, {"messages": [RemoveMessage(id=doomed.id)]})
        assert found_anywhere(mm, secret) == []
        assert mm.store.keyword_search(secret, limit=5) == []
        saver.delete_thread(thread)
        assert found_anywhere(mm, secret) == []
        assert found_anywhere(mm, control)
    assert files_holding(tmp_path, secret) == []
    assert files_holding(tmp_path, thread) == []
    assert "m.db" in files_holding(tmp_path, control)


def test_delete_thread_alone_leaves_nothing(tmp_path: Path) -> None:
    """The checkpointer deletes a thread in its own SQL: the erasure is owed all the same."""
    secret, control, thread = token(), token(), "t-" + token()
    with MemoryManager(
        str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma"
    ) as mm:
        saver = HarombeSaver(mm)
        config = {"configurable": {"thread_id": thread}}
        _graph(saver).invoke({"messages": [HumanMessage(f"my password is {secret}")]}, config)
        mm.save_message("keep", {"role": "user", "content": f"the harbour code is {control}"})
        mm.flush()
        saver.delete_thread(thread)
        assert found_anywhere(mm, secret) == []
    assert files_holding(tmp_path, secret) == []
    assert files_holding(tmp_path, thread) == []
    assert "m.db" in files_holding(tmp_path, control)


def test_pruning_old_checkpoints_removes_a_removed_message_s_bytes(tmp_path: Path) -> None:
    secret, thread = token(), "t-" + token()
    with MemoryManager(str(tmp_path / "m.db"), embedding=FakeEmbedder()) as mm:
        saver = HarombeSaver(mm)
        graph = _graph(saver)
        config = {"configurable": {"thread_id": thread}}
        graph.invoke({"messages": [HumanMessage("hello there")]}, config)
        graph.invoke({"messages": [HumanMessage(f"my password is {secret}")]}, config)
        doomed = next(m for m in graph.get_state(config).values["messages"] if secret in m.text)
        graph.update_state(config, {"messages": [RemoveMessage(id=doomed.id)]})
        saver.prune([thread], strategy="keep_latest")  # the older checkpoints held it
        assert [m.text for m in graph.get_state(config).values["messages"]] == [
            "hello there",
            "noted",
            "noted",
        ]
    assert files_holding(tmp_path, secret) == []


async def _cancel_midway(call: Any) -> None:
    """Start ``call``, let it reach its worker thread, then cancel it (the thread finishes)."""
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancelled_adelete_thread_still_drops_the_vectors(tmp_path: Path) -> None:
    """The delete commits on its worker thread; the vectors of the thread's session were
    dropped from the index in a second step, which a cancellation skipped: they stayed in
    Chroma until the next open (search never returned them: the store scopes)."""
    secret = token()
    with MemoryManager(
        str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma"
    ) as mm:
        saver = HarombeSaver(mm)
        config = {"configurable": {"thread_id": "t"}}
        await _graph(saver).ainvoke({"messages": [HumanMessage(f"password {secret}")]}, config)
        await mm.aflush()
        index = mm._semantic.index
        assert index.count() == 2
        await _cancel_midway(saver.adelete_thread("t"))
        assert await saver.aget_tuple(config) is None
        assert not mm.session_exists("t")
        assert index.count() == 0
    assert files_holding(tmp_path, secret) == []
