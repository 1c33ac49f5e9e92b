"""create_agent + HarombeMemoryMiddleware: persistence across processes, tool-call integrity."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.documents import Document
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)
from langchain_core.tools import tool

from harombe_core.errors import InvalidInputError
from harombe_core.manager import MemoryManager
from langchain_harombe import HarombeMemoryMiddleware, RecordingChatModel, to_langchain

ROOT = Path(__file__).resolve().parents[2]
AGENT_TURN = Path(__file__).with_name("agent_turn.py")


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _call(a: int, b: int, call_id: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "add", "args": {"a": a, "b": b}, "id": call_id}]}


def _run(
    db: str, thread: str, question: str, script: list[Any], max_tokens: int | None = None
) -> dict[str, Any]:
    command = [
        sys.executable,
        "-W",
        "ignore::DeprecationWarning",
        str(AGENT_TURN),
        db,
        thread,
        question,
        json.dumps(script),
    ]
    if max_tokens is not None:
        command += ["--max-tokens", str(max_tokens)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    result["calls"] = [messages_from_dict(c) for c in result["calls"]]
    return result


def _pairs_intact(messages: list[BaseMessage]) -> bool:
    calls = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    results = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    return calls == results and not (messages and isinstance(messages[0], ToolMessage))


def test_agent_memory_survives_a_restart_and_keeps_tool_pairs(db_path: str) -> None:
    first = _run(db_path, "t1", "add 1 and 2", [_call(1, 2, "c1"), "It is 3."])
    assert first["answer"] == "It is 3."
    one, two = first["calls"]
    assert one == [SystemMessage("You add numbers."), HumanMessage("add 1 and 2", id=one[1].id)]
    assert isinstance(two[2], AIMessage)
    assert two[2].tool_calls[0]["id"] == "c1"
    assert isinstance(two[3], ToolMessage)
    assert (two[3].tool_call_id, two[3].text) == ("c1", "3")

    # A new process: the model is sent the stored history, windowed, then the new question.
    second = _run(db_path, "t1", "and 3 and 4?", [_call(3, 4, "c2"), "It is 7."])
    sent = second["calls"][0]
    assert sent[0] == SystemMessage("You add numbers.")
    assert [m.text for m in sent[1:]] == ["add 1 and 2", "", "3", "It is 3.", "and 3 and 4?"]
    assert _pairs_intact(sent[1:])

    with MemoryManager(db_path, embedding=None) as manager:
        stored = manager.get_messages("t1")
    restored = [to_langchain(m) for m in stored]
    assert [type(m).__name__ for m in restored] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ] * 2
    assert restored[1].tool_calls == [
        {"name": "add", "args": {"a": 1, "b": 2}, "id": "c1", "type": "tool_call"}
    ]
    assert restored[6].tool_call_id == "c2"
    assert restored[2] == two[3], "the tool result round-trips exactly"


def test_window_edge_never_splits_a_tool_call_from_its_result(db_path: str) -> None:
    _run(db_path, "t1", "add 1 and 2", [_call(1, 2, "c1"), "It is 3."])
    with MemoryManager(db_path, embedding=None) as manager:
        stored = manager.get_messages("t1")
    total = sum(m.token_count or 0 for m in stored)
    second = _run(db_path, "t1", "and 3 and 4?", [_call(3, 4, "c2"), "It is 7."], max_tokens=40)
    for sent in second["calls"]:
        assert _pairs_intact(sent[1:])
    first_call = second["calls"][0][1:]
    # The window is the newest stored messages that fit 40 tokens, trimmed to a valid start.
    prefix = [to_langchain(m) for m in stored]
    assert first_call[-1].text == "and 3 and 4?"
    history = first_call[:-1]
    assert history == prefix[len(prefix) - len(history) :]
    assert sum(m.token_count or 0 for m in stored[len(stored) - len(history) :]) <= 40 < total
    # Exactly the core's window over the same messages: rebuild the state the first call saw.
    with MemoryManager(db_path, embedding=None) as manager:
        replay = manager.get_messages("t1")[: len(stored) + 1]
        manager.save_messages("replay", [m.with_ids(id=None, session_id=None) for m in replay])
        expected = [to_langchain(m) for m in manager.get_recent_messages("replay", 40)]
    assert first_call == expected


def test_every_budget_keeps_tool_pairs_whole(manager: MemoryManager) -> None:
    turn = [
        HumanMessage("add 1 and 2"),
        AIMessage(
            "",
            tool_calls=[
                {"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"},
                {"name": "add", "args": {"a": 5, "b": 5}, "id": "c3"},
            ],
        ),
        ToolMessage("3", tool_call_id="c1"),
        ToolMessage("10", tool_call_id="c3"),
        AIMessage("3 and 10"),
    ]
    from langchain_harombe import from_langchain

    stored_total = 0
    for budget in range(0, 120, 7):
        sid = f"b{budget}"
        manager.save_messages(sid, [from_langchain(m) for m in turn])
        stored_total = sum(m.token_count or 0 for m in manager.get_messages(sid))
        model = RecordingChatModel(responses=[_ai_call(2, 2, "c9"), "4"])
        agent = create_agent(
            model, tools=[add], middleware=[HarombeMemoryMiddleware(manager, max_tokens=budget)]
        )
        agent.invoke({"messages": [HumanMessage("2+2?")]}, {"configurable": {"thread_id": sid}})
        for sent in model.calls:
            assert _pairs_intact(sent), (budget, sent)
            assert any(isinstance(m, HumanMessage) and m.text == "2+2?" for m in sent)
    assert stored_total < 119, "the sweep covers budgets above the whole history"


def _ai_call(a: int, b: int, call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "add", "args": {"a": a, "b": b}, "id": call_id}])


async def test_async_agent_matches_sync(manager: MemoryManager) -> None:
    results: dict[str, list[BaseMessage]] = {}
    for mode in ("sync", "async"):
        model = RecordingChatModel(responses=[_ai_call(1, 2, "c1"), "3"])
        agent = create_agent(model, tools=[add], middleware=[HarombeMemoryMiddleware(manager)])
        config = {"configurable": {"thread_id": mode, "user_id": "ann"}}
        if mode == "sync":
            agent.invoke({"messages": [HumanMessage("1+2?")]}, config)
        else:
            await agent.ainvoke({"messages": [HumanMessage("1+2?")]}, config)
        results[mode] = [to_langchain(m) for m in manager.get_messages(mode)]
        assert manager.get_session(mode).user_id == "ann"
    strip = [(type(m), m.text, getattr(m, "tool_calls", None)) for m in results["sync"]]
    assert strip == [(type(m), m.text, getattr(m, "tool_calls", None)) for m in results["async"]]
    assert len(results["async"]) == 4


def test_user_from_runtime_context_and_fixed_session(manager: MemoryManager) -> None:
    model = RecordingChatModel()
    agent = create_agent(
        model,
        middleware=[HarombeMemoryMiddleware(manager, session_id="fixed")],
        context_schema=dict,
    )
    agent.invoke({"messages": [HumanMessage("hi")]}, context={"user_id": "bob"})
    agent.invoke({"messages": [HumanMessage("again")]}, context={"user_id": "bob"})
    assert manager.get_session("fixed").user_id == "bob"
    assert [m.text for m in model.calls[-1]] == ["hi", "echo: hi", "again"]


def test_missing_session_is_a_clear_error(manager: MemoryManager) -> None:
    agent = create_agent(RecordingChatModel(), middleware=[HarombeMemoryMiddleware(manager)])
    with pytest.raises(InvalidInputError, match="thread_id"):
        agent.invoke({"messages": [HumanMessage("hi")]})


def test_recall_of_other_sessions_goes_into_the_system_message(tmp_path: Path) -> None:
    from harombe_core.testing import FakeEmbedder

    with MemoryManager(
        str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma"
    ) as manager:
        manager.save_messages(
            "old",
            [
                {"role": "user", "content": "My cat is called Miso"},
                {"role": "assistant", "content": "Miso is a lovely name for a cat"},
            ],
            user_id="ann",
        )
        manager.save_messages(
            "bob-old", [{"role": "user", "content": "My cat is called Rex"}], user_id="bob"
        )
        manager.flush()
        model = RecordingChatModel()
        agent = create_agent(
            model,
            system_prompt="Be kind.",
            middleware=[HarombeMemoryMiddleware(manager, recall_tokens=200)],
        )
        agent.invoke(
            {"messages": [HumanMessage("what is my cat called?")]},
            {"configurable": {"thread_id": "new", "user_id": "ann"}},
        )
    system = model.calls[0][0]
    assert isinstance(system, SystemMessage)
    assert system.text.startswith("Be kind.")
    assert "My cat is called Miso" in system.text
    assert "Rex" not in system.text, "another user's sessions are never recalled"
    assert model.calls[0][1:] == [HumanMessage("what is my cat called?", id=model.calls[0][1].id)]


def test_with_a_checkpointer_nothing_is_saved_twice(manager: MemoryManager) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    model = RecordingChatModel(responses=[_ai_call(1, 2, "c1"), "3", "bye"])
    agent = create_agent(
        model,
        tools=[add],
        middleware=[HarombeMemoryMiddleware(manager)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "cp"}}
    agent.invoke({"messages": [HumanMessage("1+2?")]}, config)
    agent.invoke({"messages": [HumanMessage("thanks")]}, config)
    stored = [to_langchain(m) for m in manager.get_messages("cp")]
    assert [type(m).__name__ for m in stored] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
        "HumanMessage",
        "AIMessage",
    ]
    assert [m.text for m in model.calls[-1]] == ["1+2?", "", "3", "3", "thanks"]


def test_profile_and_open_tasks_reach_the_model(manager: MemoryManager) -> None:
    manager.save_message(
        "past",
        {"role": "user", "content": "I live in Lisbon. Remind me to renew my passport."},
        user_id="ann",
    )
    manager.end_session("past")
    manager.add_fact("bob", "Lives in Oslo")
    model = RecordingChatModel()
    agent = create_agent(
        model,
        system_prompt="Be kind.",
        middleware=[HarombeMemoryMiddleware(manager, profile_tokens=100)],
    )
    agent.invoke(
        {"messages": [HumanMessage("where do I live?")]},
        {"configurable": {"thread_id": "new", "user_id": "ann"}},
    )
    system = model.calls[0][0]
    assert isinstance(system, SystemMessage)
    assert system.text.startswith("Be kind.")
    assert "What you know about the user:\n- Lives in Lisbon" in system.text
    assert "Their open tasks:\n- Renew their passport" in system.text
    assert "Oslo" not in system.text, "another user's facts are never shown"


def test_without_a_user_the_turn_being_answered_is_never_recalled(tmp_path: Path) -> None:
    """With HarombeSaver recording the thread and no user, recall searches this thread's older
    turns: the question being answered (stored by the checkpointer before the model call) and
    the window the model is sent anyway are never sent again as past context."""
    from harombe_core.testing import FakeEmbedder
    from langchain_harombe import HarombeSaver

    with MemoryManager(
        str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma"
    ) as manager:
        model = RecordingChatModel()
        agent = create_agent(
            model,
            system_prompt="Be kind.",
            checkpointer=HarombeSaver(manager),
            middleware=[HarombeMemoryMiddleware(manager, max_tokens=4000, recall_tokens=500)],
        )
        config = {"configurable": {"thread_id": "t"}}
        for question in ("my cat is called Miso", "I like sailing", "what is my cat called?"):
            agent.invoke({"messages": [HumanMessage(question)]}, config)
            manager.flush()
    for call in model.calls:
        assert call[0] == SystemMessage("Be kind."), call[0].text


def test_recall_default_is_the_chat_default() -> None:
    from langchain_harombe.chat import DEFAULT_RECALL_TOKENS

    assert DEFAULT_RECALL_TOKENS == 500
    with MemoryManager(":memory:", embedding=None) as manager:
        assert HarombeMemoryMiddleware(manager).recall_tokens == DEFAULT_RECALL_TOKENS


def test_without_a_user_older_turns_outside_the_window_are_still_recalled(tmp_path: Path) -> None:
    """Leaving the turn being answered out of recall leaves recall itself in place: an older
    turn of the thread that fell out of the window comes back, the new question does not."""
    from harombe_core.testing import FakeEmbedder
    from langchain_harombe import HarombeSaver

    with MemoryManager(
        str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma"
    ) as manager:
        model = RecordingChatModel()
        agent = create_agent(
            model,
            system_prompt="Be kind.",
            checkpointer=HarombeSaver(manager),
            middleware=[HarombeMemoryMiddleware(manager, max_tokens=60, recall_tokens=200)],
        )
        config = {"configurable": {"thread_id": "t"}}
        questions = [
            "my cat is called Miso",
            *(f"filler number {i} about the weather and the trains today" for i in range(6)),
            "what is my cat called?",
        ]
        for question in questions:
            agent.invoke({"messages": [HumanMessage(question)]}, config)
            manager.flush()
    last = model.calls[-1]
    assert "my cat is called Miso" not in [m.text for m in last[1:]], "it fell out of the window"
    system = last[0].text
    assert "my cat is called Miso" in system
    assert "what is my cat called?" not in system


def test_a_turn_the_store_does_not_hold_yet_still_fits_the_budget(tmp_path: Path) -> None:
    """A checkpointer that records the thread may store the last step after the model call
    starts; the window then makes room for what is not stored yet instead of going over."""
    from langchain_core.messages import HumanMessage

    from harombe_core import MemoryManager
    from langchain_harombe import HarombeMemoryMiddleware
    from langchain_harombe.convert import from_langchain, to_langchain

    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        for i in range(20):
            note = HumanMessage(f"note {i}: item number {i}", id=f"h{i}")
            mm.save_message("t", from_langchain(note))
        middleware = HarombeMemoryMiddleware(mm, max_tokens=100)
        stored = mm.get_messages("t")
        view = mm.get_recent_messages("t", max_tokens=100)
        state = [to_langchain(m) for m in stored]
        pending = HumanMessage("and one more question that is not stored yet", id="pending")
        window = middleware._within_budget([*state, pending], view)
        kept = [m for m in view if to_langchain(m).id in {w.id for w in window}]
        total = sum(m.token_count or 0 for m in kept) + mm.count_tokens([from_langchain(pending)])
        assert total <= 100
        assert len(kept) < len(view)  # room was made by dropping the oldest
        assert [w.id for w in window] == [to_langchain(m).id for m in view[len(view) - len(kept) :]]


@pytest.mark.parametrize("checkpointer", [None, "in-memory", "harombe"])
def test_tool_results_harombe_cannot_store_whole_do_not_stop_the_agent(
    tmp_path: Path, checkpointer: str | None
) -> None:
    """A ``content_and_artifact`` tool's Documents and a tool's text with NUL bytes are what
    LangGraph's own state holds; the middleware stores their readable form (as HarombeSaver's
    copy of a thread does) instead of failing the run after the tools have run."""
    from langgraph.checkpoint.memory import InMemorySaver

    from harombe_core.testing import FakeEmbedder
    from langchain_harombe import HarombeSaver

    @tool(response_format="content_and_artifact")
    def lookup(q: str) -> tuple[str, list[Document]]:
        """Look up documents."""
        return f"1 doc about {q}", [Document(page_content=f"{q} notes", metadata={"kb": 1})]

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return "PK\x03\x04\x00\x00zip"

    calls = [
        {"name": "lookup", "args": {"q": "tea"}, "id": "l1"},
        {"name": "read_file", "args": {"path": "a.zip"}, "id": "r1"},
    ]
    model = RecordingChatModel(responses=[AIMessage("", tool_calls=calls), "done", "bye"])
    with MemoryManager(str(tmp_path / "m.db"), embedding=FakeEmbedder()) as manager:
        saver = {None: None, "in-memory": InMemorySaver(), "harombe": HarombeSaver(manager)}
        agent = create_agent(
            model,
            tools=[lookup, read_file],
            middleware=[HarombeMemoryMiddleware(manager)],
            checkpointer=saver[checkpointer],
        )
        config = {"configurable": {"thread_id": "t", "user_id": "ann"}}
        result = agent.invoke({"messages": [HumanMessage("tea?")]}, config)
        assert result["messages"][2].artifact == [
            Document(page_content="tea notes", metadata={"kb": 1})
        ]
        # the stored form, or the state's if its checkpoint has not landed yet
        sent = [m.text.replace("\x00", "") for m in model.calls[-1]]
        assert sent == ["tea?", "", "1 doc about tea", "PK\x03\x04zip"]
        agent.invoke({"messages": [HumanMessage("more?")]}, config)
        stored = manager.get_messages("t", user_id="ann")
        assert [(m.role, m.content) for m in stored] == [
            ("user", "tea?"),
            ("assistant", ""),
            ("tool", "1 doc about tea"),
            ("tool", "PK\x03\x04zip"),
            ("assistant", "done"),
            ("user", "more?"),
            ("assistant", "bye"),
        ]


@pytest.mark.parametrize("trim_first", [False, True], ids=["harombe-first", "trim-first"])
def test_a_state_trimmed_with_remove_message_keeps_every_turn_stored(
    manager: MemoryManager, trim_first: bool
) -> None:
    """LangGraph's way to shorten a thread (``RemoveMessage`` of everything, the newest put
    back) under another checkpointer: the middleware still stores every turn once, so the
    session keeps the whole conversation and the model's window still reaches past the trim."""
    from langgraph.checkpoint.memory import InMemorySaver

    from tests.langchain.agent_stack_turn import Trim

    memory = HarombeMemoryMiddleware(manager)
    model = RecordingChatModel()  # echoes
    agent = create_agent(
        model,
        tools=[add],
        middleware=[Trim(), memory] if trim_first else [memory, Trim()],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "long"}}
    for n in range(10):
        state = agent.invoke({"messages": [HumanMessage(f"q{n}")]}, config)
    assert len(state["messages"]) < 20  # trimmed
    turns = [text for n in range(10) for text in (f"q{n}", f"echo: q{n}")]
    assert [m.content for m in manager.get_messages("long")] == turns
    assert [m.text for m in model.calls[-1]] == turns[:-1]


def test_a_thread_saved_by_count_continues_without_storing_twice(manager: MemoryManager) -> None:
    """A checkpoint written before the middleware kept ids holds only a count of stored
    messages; the next turn stores only what came after it."""
    from langgraph.checkpoint.memory import InMemorySaver

    agent = create_agent(
        RecordingChatModel(),
        middleware=[HarombeMemoryMiddleware(manager)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "old"}}
    agent.invoke({"messages": [HumanMessage("q0")]}, config)
    agent.update_state(config, {"harombe_saved_ids": None, "harombe_saved": 2})
    agent.invoke({"messages": [HumanMessage("q1")]}, config)
    agent.invoke({"messages": [HumanMessage("q2")]}, config)
    turns = [text for n in range(3) for text in (f"q{n}", f"echo: q{n}")]
    assert [m.content for m in manager.get_messages("old")] == turns
