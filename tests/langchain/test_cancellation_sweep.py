"""The LangChain adapters' async methods cancelled at every await point (see
tests/core/test_cancellation_sweep.py for the method): the chat history, the LangGraph store
and an agent turn over the checkpointer. After each cancel the call took effect fully or not
at all, the object still works, and every acknowledged write is stored and found."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage

from harombe_core.manager import MemoryManager
from harombe_core.testing import FakeEmbedder
from langchain_harombe import HarombeChatMessageHistory, HarombeSaver, HarombeStore, to_langchain
from tests.core.test_cancellation_sweep import HopCanceller, _sweep, _word, sweep_session
from tests.core.test_cancellation_sweep import canceller as canceller  # (the fixture)


def test_history_and_store_cancelled_at_every_await(
    tmp_path: Path, canceller: HopCanceller
) -> None:
    with MemoryManager(str(tmp_path / "m.db"), embedding=FakeEmbedder()) as mm:
        history = HarombeChatMessageHistory(session_id="h", manager=mm, user_id="u")
        store = HarombeStore(mm, index={"embed": FakeEmbedder(), "fields": ["text"]})
        acknowledged: list[str] = []
        items: list[str] = []

        def add() -> tuple[Callable[[], Awaitable[Any]], list[str]]:
            words = [_word(), _word()]
            turn = [HumanMessage(f"note {words[0]}"), AIMessage(f"note {words[1]}")]
            return (lambda: history.aadd_messages(turn)), words

        def put() -> tuple[Callable[[], Awaitable[Any]], list[str]]:
            word = _word()
            return (lambda: store.aput(("u", "notes"), word, {"text": f"item {word}"})), []

        async def still_works() -> None:
            word = _word()
            await history.aadd_messages([HumanMessage(f"note {word}")])
            acknowledged.append(word)
            await history.aget_messages()
            key = _word()
            await store.aput(("u", "notes"), key, {"text": f"item {key}"})
            items.append(key)
            await store.asearch(("u", "notes"), query="item")

        sweep_session(canceller, mm, "h", [add, put], still_works, acknowledged)
        for key in items:
            assert store.get(("u", "notes"), key) is not None
            hits = store.search(("u", "notes"), query=f"item {key}", limit=3)
            assert key in [h.key for h in hits]


def test_agent_turns_cancelled_at_every_await_keep_the_session_equal_to_the_checkpoint(
    tmp_path: Path, canceller: HopCanceller
) -> None:
    """A cancelled ``ainvoke`` may leave LangGraph's own checkpoint writes in flight; once
    the saver has flushed, the thread's session equals its newest checkpoint and the next
    turn continues from it."""
    with MemoryManager(str(tmp_path / "m.db"), embedding=FakeEmbedder()) as mm:
        saver = HarombeSaver(mm)
        replies = (AIMessage(f"answer number {n}") for n in itertools.count())
        agent = create_agent(GenericFakeChatModel(messages=replies), [], checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "t"}}

        def turn() -> tuple[Callable[[], Awaitable[Any]], list[str]]:
            question = {"messages": [HumanMessage(f"question {_word()}")]}
            return (lambda: agent.ainvoke(question, config)), []

        async def still_works() -> None:
            await agent.aget_state(config)

        async def sweep_all() -> None:
            await _sweep(canceller, turn, lambda: [], [], still_works)
            result = await agent.ainvoke({"messages": [HumanMessage("last question")]}, config)
            saver.flush()
            state = await agent.aget_state(config)
            session = [to_langchain(m) for m in await mm.aget_messages("t")]
            newest = state.values["messages"]
            assert [(m.type, m.text) for m in session] == [(m.type, m.text) for m in newest]
            assert result["messages"][-2].text == "last question"

        asyncio.run(sweep_all())
