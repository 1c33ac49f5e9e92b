"""The adapters' async methods read the store on its async path: on PostgreSQL, natively.

The LangChain retriever, the agent middleware and the LlamaIndex retriever each write their
work once as a flow over the manager's sync/async pairs. Their async twins must therefore add no
thread hop of their own (only the core's, such as the retriever's keyword search, remain), must
make no blocking store call on the event loop, must return what the sync path returns, and a
cancelled save must leave nothing half-written.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from llama_index.core.schema import QueryBundle

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import postgres
from langchain_harombe import HarombeMemoryMiddleware
from langchain_harombe import HarombeRetriever as LangChainRetriever
from llamaindex_harombe import HarombeRetriever as LlamaIndexRetriever

#: The hooks are called directly, outside a graph run (the session and user are fixed).
NO_RUNTIME: Any = None
#: Work the core itself still runs in a thread on the async path (not the adapters').
CORE_HOPS = {"Retriever.search", "MemoryManager.get_context"}


@pytest.fixture
def mm(pg_url: str) -> Iterator[MemoryManager]:
    manager = MemoryManager(pg_url, embedding=None)
    try:
        yield manager
    finally:
        manager.close()


def _no_blocking_store_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every synchronous PostgreSQL transaction fail: what remains must be async."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a blocking store call ran on the async path")

    monkeypatch.setattr(postgres.PostgresStore, "_run", refused)


def _conversation(mm: MemoryManager) -> str:
    sid = mm.create_session(user_id="ann")
    mm.save_messages(
        sid,
        [
            Message(role="user", content="I would like green tea"),
            Message(role="assistant", content="Green tea it is"),
            Message(role="user", content="and a biscuit with the tea"),
        ],
        user_id="ann",
    )
    other = mm.create_session(user_id="ann")
    mm.save_messages(other, [Message(role="user", content="tea in the garden")], user_id="ann")
    return sid


async def test_langchain_retriever_ainvoke_adds_no_thread_hop(
    mm: MemoryManager, thread_hops: list[str]
) -> None:
    sid = _conversation(mm)
    for retriever in (
        LangChainRetriever(manager=mm, user_id="ann", session_id=sid, k=2),
        LangChainRetriever(manager=mm, user_id="ann", k=3, exclude_session_id=sid),
    ):
        expected = retriever.invoke("tea")
        thread_hops.clear()
        found = await retriever.ainvoke("tea")
        assert found == expected
        assert found
        assert set(thread_hops) <= CORE_HOPS, thread_hops


async def test_llamaindex_retriever_aretrieve_adds_no_thread_hop(
    mm: MemoryManager, thread_hops: list[str]
) -> None:
    sid = _conversation(mm)
    retriever = LlamaIndexRetriever(manager=mm, user_id="ann", session_id=sid, top_k=2)
    expected = retriever.retrieve(QueryBundle("tea"))
    thread_hops.clear()
    found = await retriever.aretrieve(QueryBundle("tea"))
    assert [(n.node.get_content(), n.score) for n in found] == [
        (n.node.get_content(), n.score) for n in expected
    ]
    assert found
    assert set(thread_hops) <= CORE_HOPS, thread_hops


async def test_middleware_async_hooks_read_and_write_natively(
    mm: MemoryManager, thread_hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = _conversation(mm)
    middleware = HarombeMemoryMiddleware(
        mm, session_id=sid, user_id="ann", strategy="all", profile_tokens=50
    )
    state: Any = {"messages": [HumanMessage("what did I order?")]}
    _no_blocking_store_calls(monkeypatch)
    assert await middleware.abefore_model(state, NO_RUNTIME) == {"harombe_saved": 1}
    monkeypatch.undo()
    assert thread_hops == []
    assert mm.get_messages(sid)[-1].content == "what did I order?"


async def test_an_agent_turn_builds_the_model_request_natively(
    mm: MemoryManager, thread_hops: list[str]
) -> None:
    """The whole async agent turn: saves, the stored view, the user's profile; the same
    request reaches the model as on the sync path."""
    sent: dict[str, list[Any]] = {}

    def agent(name: str) -> Any:
        model = GenericFakeChatModel(messages=iter([AIMessage("A biscuit.")]))
        real = model._agenerate if name == "async" else model._generate

        def record(messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            sent[name] = [(m.type, m.text) for m in messages]
            return real(messages, *args, **kwargs)

        object.__setattr__(model, "_agenerate" if name == "async" else "_generate", record)
        middleware = HarombeMemoryMiddleware(mm, user_id="ann", strategy="all", profile_tokens=50)
        return create_agent(model, [], middleware=[middleware])

    question = {"messages": [HumanMessage("what did I order?")]}
    agent("sync").invoke(question, config={"configurable": {"thread_id": "t-sync"}})
    await agent("async").ainvoke(question, config={"configurable": {"thread_id": "t-async"}})
    assert thread_hops == []
    assert sent["async"] == sent["sync"]
    assert [m.content for m in mm.get_messages("t-async")] == [
        m.content for m in mm.get_messages("t-sync")
    ]


async def test_a_cancelled_async_save_writes_nothing(
    mm: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled in the middle of its transaction (after the first insert), the save of a
    batch rolls back whole; saving the batch again then stores it once."""
    sid = mm.create_session(user_id="ann")
    middleware = HarombeMemoryMiddleware(mm, session_id=sid, user_id="ann", strategy="all")
    state: Any = {
        "messages": [HumanMessage("one"), AIMessage("two"), HumanMessage("three")],
    }
    reached = threading.Event()
    real_adrive = postgres.adrive

    class Stalling:
        """A cursor that stalls (until cancelled) once it has inserted a message."""

        def __init__(self, cursor: Any) -> None:
            self.cursor = cursor

        async def execute(self, sql: str, params: Any = ()) -> Any:
            done = await self.cursor.execute(sql, params)
            if "INSERT INTO messages" in sql:
                reached.set()
                await asyncio.Event().wait()
            return done

    async def stalling(cursor: Any, body: Any) -> Any:
        return await real_adrive(Stalling(cursor), body)

    monkeypatch.setattr(postgres, "adrive", stalling)
    task = asyncio.ensure_future(middleware.abefore_model(state, NO_RUNTIME))
    await asyncio.get_running_loop().run_in_executor(None, reached.wait)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.undo()
    assert mm.get_messages(sid) == []
    assert await middleware.abefore_model(state, NO_RUNTIME) == {"harombe_saved": 3}
    assert [m.content for m in mm.get_messages(sid)] == ["one", "two", "three"]


async def test_async_export_reads_natively_and_matches_the_sync_export(
    mm: MemoryManager, thread_hops: list[str]
) -> None:
    from harombe_core import export as ex

    def undated(text: str) -> str:  # the time of the export itself differs between runs
        return re.sub(r'"(exported_at|last_modified)": ?"[^"]*"', "", text)

    sid = _conversation(mm)
    mm.set_session_state(sid, outcome="resolved", important=True)
    for fmt in ("json", "jsonl"):
        expected = ex.export_store(mm, fmt)
        thread_hops.clear()
        assert undated(await ex.aexport_store(mm, fmt)) == undated(expected)
        assert set(thread_hops) <= {"dumps"}, (
            thread_hops
        )  # formatting is CPU work; every read is native
        one = await ex.aexport_store(mm, fmt, session_id=sid)
        assert undated(one) == undated(ex.export_store(mm, fmt, session_id=sid))
