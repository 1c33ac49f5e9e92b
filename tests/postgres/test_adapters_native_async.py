"""The adapters' async methods read the store on its async path: one hop per store operation.

The LangChain retriever, the agent middleware and the LlamaIndex retriever each write their
work once as a flow over the manager's sync/async pairs. Their async twins must therefore add no
thread hop of their own: every hop is one store operation (``PostgresStore.run``, in a worker
thread as on SQLite; the retriever's search is a flow of them too), none wraps a whole call,
no store call blocks the event loop, they return what the sync path returns, and a cancelled
save is stored whole or not at all before the caller sees its ``CancelledError``.
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
#: One store operation in a worker thread: the store's async path (``arun``), or a write's
#: one operation with its wake-up of the background workers (``_commit_and_wake``).
STORE_HOPS = {"PostgresStore.run", "MemoryManager._commit_and_wake"}


@pytest.fixture
def mm(pg_url: str) -> Iterator[MemoryManager]:
    manager = MemoryManager(pg_url, embedding=None)
    try:
        yield manager
    finally:
        manager.close()


def _no_blocking_store_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every PostgreSQL transaction run on the event loop's thread fail: each must run
    in a worker thread."""
    loop_thread = threading.current_thread()
    real = postgres.PostgresStore._run

    def off_the_loop(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is loop_thread:
            raise AssertionError("a blocking store call ran on the event loop")
        return real(*args, **kwargs)

    monkeypatch.setattr(postgres.PostgresStore, "_run", off_the_loop)


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
        assert set(thread_hops) <= STORE_HOPS, thread_hops


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
    assert set(thread_hops) <= STORE_HOPS, thread_hops


async def test_middleware_async_hooks_read_and_write_off_the_loop(
    mm: MemoryManager, thread_hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = _conversation(mm)
    middleware = HarombeMemoryMiddleware(
        mm, session_id=sid, user_id="ann", strategy="all", profile_tokens=50
    )
    state: Any = {"messages": [HumanMessage("what did I order?")]}
    _no_blocking_store_calls(monkeypatch)
    saved = {"harombe_saved": 1, "harombe_saved_ids": []}  # these messages have no ids
    assert await middleware.abefore_model(state, NO_RUNTIME) == saved
    monkeypatch.undo()
    assert thread_hops
    assert thread_hops
    assert set(thread_hops) <= STORE_HOPS, thread_hops
    assert mm.get_messages(sid)[-1].content == "what did I order?"


async def test_an_agent_turn_builds_the_model_request_one_hop_per_operation(
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
    assert thread_hops
    assert thread_hops
    assert set(thread_hops) <= STORE_HOPS, thread_hops
    assert sent["async"] == sent["sync"]
    assert [m.content for m in mm.get_messages("t-async")] == [
        m.content for m in mm.get_messages("t-sync")
    ]


def _stalling(body: Any, reached: threading.Event, go: threading.Event, fail: bool) -> Any:
    """``body``, stalled once it has inserted a message (the insert's answer is in) until
    ``go`` is set; then it goes on, or fails (so the transaction rolls back) when ``fail`` is
    set."""
    result = None
    while True:
        try:
            step = next(body) if result is None else body.send(result)
        except StopIteration as stop:
            return stop.value
        result = yield step
        if "INSERT INTO messages" in step.sql and not reached.is_set():
            assert result.rowcount > 0
            reached.set()
            go.wait()
            if fail:
                raise RuntimeError("the transaction fails after its first insert")


async def _cancel_mid_transaction(
    middleware: HarombeMemoryMiddleware,
    state: Any,
    monkeypatch: pytest.MonkeyPatch,
    *,
    fail: bool,
    stored: Any,
) -> None:
    """Cancel the save while its transaction is open (after its first insert): the caller's
    ``CancelledError`` waits until the transaction has ended, committed or (``fail``) rolled
    back, and ``stored()`` already shows the outcome when it arrives."""
    reached, go = threading.Event(), threading.Event()
    real = postgres._pipelined
    monkeypatch.setattr(
        postgres, "_pipelined", lambda conn, body: real(conn, _stalling(body, reached, go, fail))
    )
    task = asyncio.ensure_future(middleware.abefore_model(state, NO_RUNTIME))
    while not reached.is_set():  # the worker thread is inside the transaction
        await asyncio.sleep(0)
    task.cancel()
    for _ in range(20):  # cancelled, the caller still waits for the open transaction
        await asyncio.sleep(0)
    assert not task.done()
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    outcome = stored()
    monkeypatch.undo()
    assert outcome == ([] if fail else ["one", "two", "three"])


async def test_a_cancelled_async_save_is_stored_whole_or_not_at_all(
    mm: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled in the middle of its transaction, a batch's save ends first: rolled back whole
    (saving the batch again then stores it once) or committed whole, never half."""
    state: Any = {
        "messages": [HumanMessage("one"), AIMessage("two"), HumanMessage("three")],
    }
    for fail in (True, False):
        sid = mm.create_session(user_id="ann")
        middleware = HarombeMemoryMiddleware(mm, session_id=sid, user_id="ann", strategy="all")

        def stored(sid: str = sid) -> list[str]:
            return [m.content for m in mm.get_messages(sid)]

        await _cancel_mid_transaction(middleware, state, monkeypatch, fail=fail, stored=stored)
        if fail:
            saved = {"harombe_saved": 3, "harombe_saved_ids": []}  # messages without ids
            assert await middleware.abefore_model(state, NO_RUNTIME) == saved
        assert stored() == ["one", "two", "three"]


async def test_async_export_hops_per_read_and_matches_the_sync_export(
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
        # formatting is CPU work; every read is one store operation
        assert set(thread_hops) <= STORE_HOPS | {"dumps"}, thread_hops
        one = await ex.aexport_store(mm, fmt, session_id=sid)
        assert undated(one) == undated(ex.export_store(mm, fmt, session_id=sid))
