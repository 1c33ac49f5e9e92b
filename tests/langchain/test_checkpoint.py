"""HarombeSaver as LangGraph uses it: agents and graphs that persist and resume, across real
processes (one killed mid-run), on SQLite and PostgreSQL, with one owner per thread."""

from __future__ import annotations

import json
import operator
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt
from typer.testing import CliRunner

from harombe_core.errors import InvalidInputError, SessionOwnershipError, StoreError
from harombe_core.manager import MemoryManager
from langchain_harombe import HarombeSaver, RecordingChatModel, to_langchain

ROOT = Path(__file__).resolve().parents[2]
TURN = Path(__file__).with_name("checkpoint_turn.py")


def _call(a: int, b: int, call_id: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "add", "args": {"a": a, "b": b}, "id": call_id}]}


def _command(db: str, thread: str, question: str, script: list[Any], *extra: str) -> list[str]:
    return [sys.executable, "-W", "ignore::DeprecationWarning", str(TURN), db, thread, question,
            json.dumps(script), *extra]


def _run(db: str, thread: str, question: str, script: list[Any], *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        _command(db, thread, question, script, *extra), cwd=ROOT, capture_output=True,
        text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    result["calls"] = [messages_from_dict(c) for c in result["calls"]]
    result["messages"] = messages_from_dict(result["messages"])
    return result


def _shape(messages: list[BaseMessage]) -> list[tuple[str, str, str | None]]:
    return [(m.type, m.text, m.id) for m in messages]


@pytest.fixture
def manager(backend_manager: MemoryManager) -> MemoryManager:
    return backend_manager


def test_an_agent_thread_resumes_in_another_process(location: str) -> None:
    first = _run(location, "t1", "add 1 and 2", [_call(1, 2, "c1"), "It is 3."], "--user", "ann")
    assert first["answer"] == "It is 3."

    second = _run(location, "t1", "and 3 and 4?", [_call(3, 4, "c2"), "It is 7."],
                  "--user", "ann")
    sent = second["calls"][0]
    # The new process knew the thread only from its checkpoints.
    assert sent[0] == SystemMessage("You add numbers.")
    assert [m.text for m in sent[1:]] == ["add 1 and 2", "", "3", "It is 3.", "and 3 and 4?"]
    assert isinstance(sent[2], AIMessage)
    assert sent[2].tool_calls[0]["id"] == "c1"
    assert isinstance(sent[3], ToolMessage)
    assert sent[3].tool_call_id == "c1"
    assert second["answer"] == "It is 7."

    # The thread is a harombe session of the user, holding exactly the thread's messages.
    with MemoryManager(location, embedding=None) as mm:
        assert mm.get_session("t1").user_id == "ann"
        stored = [to_langchain(m) for m in mm.get_messages("t1")]
    assert _shape(stored) == _shape(second["messages"])
    assert [type(m).__name__ for m in stored] == [
        "HumanMessage", "AIMessage", "ToolMessage", "AIMessage",
        "HumanMessage", "AIMessage", "ToolMessage", "AIMessage",
    ]


def test_a_killed_run_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    db, marker = str(tmp_path / "memory.db"), tmp_path / "in-tool"
    script = [_call(1, 2, "c1"), "It is 3."]
    process = subprocess.Popen(
        _command(db, "t1", "add 1 and 2", script, "--hang-in-tool", str(marker)),
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the run never reached its tool"
            time.sleep(0.05)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL

    # What the killed run committed: the question and the model's tool call, in the
    # checkpoint and in the session alike.
    with MemoryManager(db, embedding=None) as mm:
        saver = HarombeSaver(mm)
        latest = saver.get_tuple({"configurable": {"thread_id": "t1"}})
        assert latest is not None
        kept = latest.checkpoint["channel_values"]["messages"]
        assert [m.type for m in kept] == ["human", "ai"]
        assert _shape([to_langchain(m) for m in mm.get_messages("t1")]) == _shape(kept)

    # A new process resumes the run where it stopped: the tool runs, the model answers.
    resumed = _run(db, "t1", "-", ["It is 3."])
    assert resumed["answer"] == "It is 3."
    assert [m.type for m in resumed["messages"]] == ["human", "ai", "tool", "ai"]
    assert len(resumed["calls"]) == 1, "the first model call was not repeated"
    with MemoryManager(db, embedding=None) as mm:
        stored = [to_langchain(m) for m in mm.get_messages("t1")]
    assert _shape(stored) == _shape(resumed["messages"])


class Counter(TypedDict):
    total: int
    seen: Annotated[list[str], operator.add]


def _counting_graph(checkpointer: BaseCheckpointSaver) -> Any:
    def step(state: Counter) -> dict[str, Any]:
        return {"total": state["total"] + 1, "seen": [f"step {state['total'] + 1}"]}

    builder = StateGraph(Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=checkpointer)


def _graph_story(checkpointer: BaseCheckpointSaver) -> dict[str, Any]:
    """Run a non-chat graph through invoke, update_state and history; what a user sees."""
    graph = _counting_graph(checkpointer)
    config = {"configurable": {"thread_id": "g1"}}
    graph.invoke({"total": 0, "seen": []}, config)
    graph.invoke({"total": 10, "seen": ["jump"]}, config)
    graph.update_state(config, {"seen": ["edited"]})
    history = list(graph.get_state_history(config))
    return {
        "values": graph.get_state(config).values,
        "history": [(h.values, h.metadata["source"], h.metadata["step"]) for h in history],
        "limited": len(list(graph.get_state_history(config, limit=2))),
        "filtered": len(list(graph.get_state_history(config, filter={"source": "input"}))),
    }


def test_a_state_graph_behaves_as_with_langgraphs_own_saver(manager: MemoryManager,
                                                            tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    ours = _graph_story(HarombeSaver(manager))
    with SqliteSaver.from_conn_string(str(tmp_path / "langgraph.db")) as control:
        theirs = _graph_story(control)
    assert ours == theirs
    assert ours["values"] == {"total": 11, "seen": ["step 1", "jump", "step 11", "edited"]}
    assert manager.get_messages("g1") == [], "a graph without messages adds none to its session"


def _interrupt_story(saver: BaseCheckpointSaver, fresh: BaseCheckpointSaver) -> dict[str, Any]:
    """A graph that stops for a human, resumed through another saver on the same database,
    and a parent graph whose node is a subgraph with its own messages."""

    def ask(state: MessagesState) -> dict[str, Any]:
        answer = interrupt({"question": "approve?"})
        return {"messages": [AIMessage(f"human said {answer}")]}

    inner = StateGraph(MessagesState)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    outer = StateGraph(MessagesState)
    outer.add_node("inner", inner.compile())
    outer.add_edge(START, "inner")
    config = {"configurable": {"thread_id": "hitl"}}
    first = outer.compile(checkpointer=saver).invoke(
        {"messages": [HumanMessage("deploy")]}, config
    )
    resumed_graph = outer.compile(checkpointer=fresh)
    pending = resumed_graph.get_state(config, subgraphs=True)
    done = resumed_graph.invoke(Command(resume="yes"), config)
    return {
        "interrupts": [i.value for i in first["__interrupt__"]],
        "pending": [t.name for t in pending.tasks],
        "subgraph_state": [
            m.text for t in pending.tasks if t.state for m in t.state.values["messages"]
        ],
        "answer": done["messages"][-1].text,
        "history": len(list(resumed_graph.get_state_history(config))),
    }


def test_interrupts_and_subgraphs_behave_as_with_langgraphs_own_saver(
    manager: MemoryManager, tmp_path: Path
) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    ours = _interrupt_story(HarombeSaver(manager), HarombeSaver(manager))
    path = str(tmp_path / "langgraph.db")
    with SqliteSaver.from_conn_string(path) as one, SqliteSaver.from_conn_string(path) as two:
        theirs = _interrupt_story(one, two)
    assert ours == theirs
    assert ours["answer"] == "human said yes"
    assert ours["interrupts"] == [{"question": "approve?"}]
    assert [m.content for m in manager.get_messages("hitl")] == ["deploy", "human said yes"]


async def test_async_agent_runs_natively_on_both_backends(manager: MemoryManager) -> None:
    model = RecordingChatModel(responses=["Hello Ann.", "You are Ann."])
    agent = create_agent(model, checkpointer=HarombeSaver(manager))
    config = {"configurable": {"thread_id": "a1", "user_id": "ann"}}
    await agent.ainvoke({"messages": [HumanMessage("I am Ann")]}, config)
    await agent.ainvoke({"messages": [HumanMessage("who am I?")]}, config)
    assert [m.text for m in model.calls[1]] == ["I am Ann", "Hello Ann.", "who am I?"]
    state = await agent.aget_state(config)
    assert [m.text for m in state.values["messages"]][-1] == "You are Ann."
    assert len([s async for s in agent.aget_state_history(config)]) >= 4
    stored = await manager.aget_messages("a1")
    assert [m.content for m in stored] == ["I am Ann", "Hello Ann.", "who am I?", "You are Ann."]
    close_pool = getattr(manager.store, "aclose", None)  # PostgreSQL's async pool: in this loop
    if close_pool is not None:
        await close_pool()


def test_a_thread_has_one_owner(manager: MemoryManager) -> None:
    model = RecordingChatModel(responses=["hi Ann", "hi Bob"])
    saver = HarombeSaver(manager)
    agent = create_agent(model, checkpointer=saver)
    ann = {"configurable": {"thread_id": "t1", "user_id": "ann"}}
    bob = {"configurable": {"thread_id": "t1", "user_id": "bob"}}
    agent.invoke({"messages": [HumanMessage("my PIN is 1234")]}, ann)
    before = len(list(saver.list(ann)))

    with pytest.raises(SessionOwnershipError, match="not owned by user 'bob'"):
        agent.invoke({"messages": [HumanMessage("what is my PIN?")]}, bob)
    with pytest.raises(SessionOwnershipError):
        agent.get_state(bob)
    with pytest.raises(SessionOwnershipError):
        list(agent.get_state_history(bob))
    with pytest.raises(SessionOwnershipError):
        agent.update_state(bob, {"messages": [HumanMessage("injected")]})
    with pytest.raises(SessionOwnershipError):
        saver.put_writes({"configurable": {**bob["configurable"], "checkpoint_ns": "",
                                           "checkpoint_id": "x"}}, [("c", 1)], "task")

    # A call acting for nobody does not reach a user's thread either.
    nobody = {"configurable": {"thread_id": "t1"}}
    with pytest.raises(SessionOwnershipError, match="names none"):
        agent.get_state(nobody)
    with pytest.raises(SessionOwnershipError):
        agent.invoke({"messages": [HumanMessage("hi")]}, nobody)

    # Nothing was read for bob or written by him.
    assert len(list(saver.list(ann))) == before
    assert [m.content for m in manager.get_messages("t1")] == ["my PIN is 1234", "hi Ann"]
    assert manager.get_session("t1").user_id == "ann"
    # The configs LangGraph hands back act for the owner: time travel works as usual.
    first = list(agent.get_state_history(ann))[-1]
    assert first.config["configurable"]["user_id"] == "ann"
    agent.update_state(first.config, {"messages": [HumanMessage("forked")]})
    assert [m.content for m in manager.get_messages("t1")] == ["forked"]
    # Listing without a thread: every thread of the named user, none of another's.
    agent.invoke({"messages": [HumanMessage("second thread")]},
                 {"configurable": {"thread_id": "t2", "user_id": "bob"}})
    assert {t.config["configurable"]["thread_id"] for t in saver.list(
        {"configurable": {"user_id": "bob"}})} == {"t2"}
    assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {"t1", "t2"}


async def test_a_thread_without_checkpoints_is_refused_as_one_with_them(
    manager: MemoryManager,
) -> None:
    # Reading another user's thread raises whether or not it has checkpoints yet (a session
    # holding only messages, a namespace never written); only an unknown thread reads as None,
    # as in LangGraph's own savers.
    saver = HarombeSaver(manager)
    manager.save_messages("ann-chat", [{"role": "user", "content": "hi"}], user_id="ann")
    for who in ("bob", None):
        config: Any = {"configurable": {"thread_id": "ann-chat", "user_id": who}}
        with pytest.raises(SessionOwnershipError):
            saver.get_tuple(config)
        with pytest.raises(SessionOwnershipError):
            await saver.aget_tuple(config)
        with pytest.raises(SessionOwnershipError):
            list(saver.list(config))
        with pytest.raises(SessionOwnershipError):
            [t async for t in saver.alist(config)]
        unknown: Any = {"configurable": {"thread_id": "nobody-wrote-this", "user_id": who}}
        assert saver.get_tuple(unknown) is None
        assert list(saver.list(unknown)) == []
    ann: Any = {"configurable": {"thread_id": "ann-chat", "user_id": "ann"}}
    assert saver.get_tuple(ann) is None
    assert list(saver.list(ann)) == []
    close_pool = getattr(manager.store, "aclose", None)  # PostgreSQL's async pool: in this loop
    if close_pool is not None:
        await close_pool()


def test_the_threads_are_visible_to_the_harombe_command(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from harombe_core import cli

    monkeypatch.setattr(cli, "console", Console(width=200))
    db = str(tmp_path / "memory.db")
    with MemoryManager(db, embedding=None) as mm:
        agent = create_agent(
            RecordingChatModel(responses=["Miso is a lovely name."]),
            checkpointer=HarombeSaver(mm),
        )
        agent.invoke({"messages": [HumanMessage("My cat is called Miso")]},
                     {"configurable": {"thread_id": "cats", "user_id": "ann"}})
    runner = CliRunner()
    sessions = runner.invoke(cli.app, ["sessions", "--db", db, "--user", "ann"])
    assert sessions.exit_code == 0
    assert "cats" in sessions.output
    history = runner.invoke(cli.app, ["history", "cats", "--db", db])
    assert "My cat is called Miso" in history.output
    assert "Miso is a lovely name." in history.output
    found = runner.invoke(cli.app, ["search", "miso", "--keyword", "--db", db])
    assert found.exit_code == 0
    assert "cats" in found.output


def test_a_saver_from_a_connection_string(tmp_path: Path) -> None:
    path = str(tmp_path / "memory.db")
    with HarombeSaver.from_conn_string(path) as saver:
        saver.setup()
        graph = _counting_graph(saver)
        graph.invoke({"total": 1, "seen": []}, {"configurable": {"thread_id": "g"}})
    with HarombeSaver.from_conn_string(path) as saver:
        found = saver.get_tuple({"configurable": {"thread_id": "g"}})
        assert found is not None
        assert found.checkpoint["channel_values"]["total"] == 2
    with pytest.raises(StoreError, match="closed"):
        saver.get_tuple({"configurable": {"thread_id": "g"}})


def test_bad_input_is_refused_with_a_typed_error(manager: MemoryManager) -> None:
    saver = HarombeSaver(manager)
    with pytest.raises(InvalidInputError, match="thread_id"):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(InvalidInputError, match="512"):
        saver.get_tuple({"configurable": {"thread_id": "x" * 600}})
    with pytest.raises(InvalidInputError, match="user_id"):
        saver.get_tuple({"configurable": {"thread_id": "t", "user_id": ["ann"]}})
    with pytest.raises(InvalidInputError, match="strategy"):
        saver.prune(["t"], strategy="keep_oldest")
    with pytest.raises(InvalidInputError, match="list"):
        saver.delete_for_runs("run-1")
    with pytest.raises(InvalidInputError, match="messages_key"):
        HarombeSaver(manager, messages_key="")
    with pytest.raises(InvalidInputError, match="manager"):
        HarombeSaver(manager, storage_path="x.db")


def test_threads_written_before_the_rowid_rebuild_survive_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 11 rebuilds the checkpoint tables WITHOUT ROWID: a thread written at schema
    10 reads back the same after it, keeps its session, and grows on."""
    import sqlite3

    from harombe_core.store import sqlite as sqlite_module

    path = tmp_path / "v10.db"
    tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "checkpoint_message_blobs")
    with monkeypatch.context() as old:
        old.setattr(sqlite_module, "MIGRATIONS", sqlite_module.MIGRATIONS[:10])
        old.setattr(sqlite_module, "SCHEMA_VERSION", 10)
        with MemoryManager(path, embedding=None) as mm:
            before = _graph_story(HarombeSaver(mm))
            model = RecordingChatModel(responses=["It is 3."])
            agent = create_agent(model, checkpointer=HarombeSaver(mm))
            agent.invoke({"messages": [HumanMessage("add 1 and 2")]},
                         {"configurable": {"thread_id": "a1"}})
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 10
    with MemoryManager(path, embedding=None) as mm:
        saver = HarombeSaver(mm)
        config = {"configurable": {"thread_id": "g1"}}
        graph = _counting_graph(saver)
        history = list(graph.get_state_history(config))
        assert graph.get_state(config).values == before["values"]
        assert [(h.values, h.metadata["source"], h.metadata["step"]) for h in history] == (
            before["history"]
        )
        agent = create_agent(RecordingChatModel(responses=["It is 7."]), checkpointer=saver)
        state = agent.invoke({"messages": [HumanMessage("and 3 and 4?")]},
                             {"configurable": {"thread_id": "a1"}})
        assert [m.text for m in state["messages"]] == [
            "add 1 and 2", "It is 3.", "and 3 and 4?", "It is 7.",
        ]
        saver.flush()
        assert [m.content for m in mm.get_messages("a1")] == [
            "add 1 and 2", "It is 3.", "and 3 and 4?", "It is 7.",
        ]
    with sqlite3.connect(path) as raw:
        sql = dict(raw.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
        assert all(sql[t].rstrip().endswith("WITHOUT ROWID") for t in tables)
        assert not any(name.endswith("_rebuilt") for name in sql)
