"""A checkpointed thread's session holds exactly the messages of its newest checkpoint, after
every kind of change, and costs only the new messages per step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from harombe_core.manager import MemoryManager
from harombe_core.models import MAX_CONTENT_CHARS, Message
from harombe_core.store import ops
from langchain_harombe import (
    HarombeMemoryMiddleware,
    HarombeSaver,
    HarombeStore,
    RecordingChatModel,
    to_langchain,
)
from langchain_harombe.checkpoint_mirror import MIRROR_KEY
from langchain_harombe.convert import PARTIAL_KEY


@pytest.fixture
def manager(backend_manager: MemoryManager) -> MemoryManager:
    return backend_manager


def _echo_graph(saver: HarombeSaver) -> Any:
    """A chat graph: every user message gets one reply."""

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"re: {state['messages'][-1].text}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def _session(mm: MemoryManager, thread: str) -> list[tuple[str, str, str | None]]:
    return [(m.type, m.text, m.id) for m in map(to_langchain, mm.get_messages(thread))]


def _newest(saver: HarombeSaver, thread: str) -> list[tuple[str, str, str | None]]:
    session = saver.manager.store.run(ops.get_session(thread))
    owner = {"user_id": session.user_id} if session and session.user_id else {}
    found = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": "", **owner}})
    if found is None:
        return []
    messages: list[BaseMessage] = found.checkpoint["channel_values"].get("messages", [])
    return [(m.type, m.text, m.id) for m in messages]


def _assert_mirrors(saver: HarombeSaver, mm: MemoryManager, thread: str) -> None:
    assert _session(mm, thread) == _newest(saver, thread)


def test_the_session_follows_every_change_of_the_thread(manager: MemoryManager) -> None:
    saver = HarombeSaver(manager)
    graph = _echo_graph(saver)
    config = {"configurable": {"thread_id": "t1", "user_id": "ann"}}
    for text in ("one", "two", "three"):
        graph.invoke({"messages": [HumanMessage(text)]}, config)
        _assert_mirrors(saver, manager, "t1")
    assert [t for _, t, _ in _session(manager, "t1")] == [
        "one", "re: one", "two", "re: two", "three", "re: three"]

    state = graph.get_state(config)
    second = state.values["messages"][1]
    graph.update_state(config, {"messages": [RemoveMessage(id=second.id)]})  # removal
    _assert_mirrors(saver, manager, "t1")
    assert "re: one" not in [t for _, t, _ in _session(manager, "t1")]

    first = state.values["messages"][0]
    graph.update_state(config, {"messages": [HumanMessage("ONE", id=first.id)]})  # edit by id
    _assert_mirrors(saver, manager, "t1")
    assert _session(manager, "t1")[0][1] == "ONE"

    early = next(s for s in graph.get_state_history(config)
                 if len(s.values.get("messages", [])) == 2)
    graph.update_state(early.config, {"messages": [HumanMessage("a fork")]})  # fork
    _assert_mirrors(saver, manager, "t1")
    assert [t for _, t, _ in _session(manager, "t1")] == ["one", "re: one", "a fork"]

    # Forget the newest run: the session follows the newest checkpoint left.
    graph.invoke({"messages": [HumanMessage("four")]},
                 {"configurable": {**config["configurable"], "run_id": "run-4"}})
    newest = saver.get_tuple(config)
    assert newest is not None
    assert newest.metadata["run_id"] == "run-4"
    saver.delete_for_runs(["run-4"])
    _assert_mirrors(saver, manager, "t1")
    assert "four" not in [t for _, t, _ in _session(manager, "t1")]

    saver.copy_thread("t1", "t2")
    _assert_mirrors(saver, manager, "t2")
    assert _session(manager, "t2") == _session(manager, "t1")
    assert manager.get_session("t2").user_id == "ann"

    saver.prune(["t1"], strategy="keep_latest")
    _assert_mirrors(saver, manager, "t1")
    main = {"configurable": {**config["configurable"], "checkpoint_ns": ""}}
    assert len(list(saver.list(main))) == 1

    saver.delete_thread("t1")
    assert not manager.session_exists("t1")
    saver.prune(["t2"], strategy="delete")
    assert not manager.session_exists("t2")


def test_a_step_writes_only_its_new_messages(manager: MemoryManager) -> None:
    saver = HarombeSaver(manager)
    graph = _echo_graph(saver)
    config = {"configurable": {"thread_id": "long"}}
    graph.invoke({"messages": [HumanMessage("start")]}, config)
    first_ids = [m.id for m in manager.get_messages("long")]
    for n in range(30):
        graph.invoke({"messages": [HumanMessage(f"message {n}")]}, config)
    rows = manager.get_messages("long")
    assert [m.id for m in rows[:2]] == first_ids, "old rows are never rewritten"
    ids = [m.id for m in rows]
    assert ids == sorted(ids)
    assert len(ids) == 62
    _assert_mirrors(saver, manager, "long")


def test_a_new_saver_reads_a_long_thread_back(manager: MemoryManager) -> None:
    writer = HarombeSaver(manager)
    graph = _echo_graph(writer)
    config = {"configurable": {"thread_id": "long"}}
    many = [HumanMessage(f"note {n}", id=f"n{n}") for n in range(300)]
    graph.update_state(config, {"messages": many})
    graph.invoke({"messages": [HumanMessage("done")]}, config)
    warm = writer.get_tuple(config)
    cold = HarombeSaver(manager).get_tuple(config)  # nothing in its memory: all from the database
    assert warm is not None
    assert cold is not None
    assert cold.checkpoint["channel_values"]["messages"] == warm.checkpoint["channel_values"][
        "messages"]
    assert len(cold.checkpoint["channel_values"]["messages"]) == 302
    _assert_mirrors(writer, manager, "long")


def test_two_savers_on_one_database_never_leave_the_session_stale(
    manager: MemoryManager, tmp_path: Path
) -> None:
    """Each saver remembers what it mirrored; the other's writes must invalidate that."""
    location = manager.store.location
    other_manager = manager if location == ":memory:" else MemoryManager(
        getattr(manager.store, "url", location), embedding=None)
    try:
        one, two = HarombeSaver(manager), HarombeSaver(other_manager)
        graphs = [_echo_graph(one), _echo_graph(two)]
        config = {"configurable": {"thread_id": "shared"}}
        for n in range(6):
            graphs[n % 2].invoke({"messages": [HumanMessage(f"turn {n}")]}, config)
            _assert_mirrors(one, manager, "shared")
        state = graphs[0].get_state(config)
        graphs[1].update_state(config, {"messages": [RemoveMessage(id=state.values[
            "messages"][2].id)]})
        graphs[0].invoke({"messages": [HumanMessage("after")]}, config)
        _assert_mirrors(one, manager, "shared")
        assert len(_session(manager, "shared")) == 13
    finally:
        if other_manager is not manager:
            other_manager.close()


def test_the_session_is_repaired_after_harombe_changed_it(manager: MemoryManager) -> None:
    saver = HarombeSaver(manager)
    graph = _echo_graph(saver)
    config = {"configurable": {"thread_id": "t1"}}
    graph.invoke({"messages": [HumanMessage("one")]}, config)
    graph.invoke({"messages": [HumanMessage("two")]}, config)
    rows = manager.get_messages("t1")
    manager.replace_messages("t1", [rows[1].id])  # a mirrored message deleted by hand
    manager.save_message("t1", Message(role="user", content="a note"))  # and a foreign one
    graph.invoke({"messages": [HumanMessage("three")]}, config)
    session = _session(manager, "t1")
    mirrored = [row for row, m in zip(session, manager.get_messages("t1"), strict=True)
                if MIRROR_KEY in m.metadata]
    assert mirrored == _newest(saver, "t1"), "the deleted message is back, in order"
    assert ("human", "a note", None) in session, "messages of other writers are left alone"

    manager.delete_session("t1")  # deleting the session deletes the thread
    assert saver.get_tuple(config) is None
    # The saver's memory of the thread is stale: its next put starts the thread afresh.
    graph.invoke({"messages": [HumanMessage("four")]}, config)
    assert [m.text for m in graph.get_state(config).values["messages"]] == ["four", "re: four"]
    assert [m.content for m in manager.get_messages("t1")] == ["four", "re: four"]


def test_a_message_harombe_cannot_store_as_is_is_kept_whole_in_the_checkpoint(
    manager: MemoryManager,
) -> None:
    saver = HarombeSaver(manager)
    graph = _echo_graph(saver)
    config = {"configurable": {"thread_id": "odd"}}
    huge = "x\x00y " + "z" * (MAX_CONTENT_CHARS + 10)
    graph.invoke({"messages": [HumanMessage(huge, additional_kwargs={"raw": b"\x01"})]}, config)
    state = graph.get_state(config)
    assert state.values["messages"][0].text == huge
    assert state.values["messages"][0].additional_kwargs == {"raw": b"\x01"}
    row = manager.get_messages("odd")[0]
    assert row.content.startswith("xy zzz")
    assert len(row.content) == MAX_CONTENT_CHARS
    why = row.metadata[PARTIAL_KEY]  # the first problem found: its size or its NUL byte
    assert "over the limit" in why or "NUL" in why
    assert to_langchain(row).id == state.values["messages"][0].id


def test_recall_across_a_users_threads_with_no_extra_wiring(tmp_path: Path) -> None:
    from harombe_core.testing import FakeEmbedder

    @tool
    def save_fact(fact: str, runtime: ToolRuntime) -> str:
        """Save a fact about the user."""
        assert runtime.store is not None
        user = runtime.config["configurable"]["user_id"]
        runtime.store.put(("facts", user), "fact", {"text": fact})
        return "saved"

    @tool
    def read_fact(runtime: ToolRuntime) -> str:
        """Read the saved fact about the user."""
        assert runtime.store is not None
        user = runtime.config["configurable"]["user_id"]
        item = runtime.store.get(("facts", user), "fact")
        return item.value["text"] if item else "nothing saved"

    with MemoryManager(
        str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma"
    ) as mm:
        model = RecordingChatModel(responses=[
            AIMessage("", tool_calls=[{"name": "save_fact", "args": {"fact": "cat Miso"},
                                       "id": "s1"}]),
            "Noted: your cat is Miso.",
            AIMessage("", tool_calls=[{"name": "read_fact", "args": {}, "id": "r1"}]),
            "Your cat is Miso.",
            AIMessage("", tool_calls=[{"name": "read_fact", "args": {}, "id": "r2"}]),
            "I do not know.",
        ])
        agent = create_agent(
            model,
            tools=[save_fact, read_fact],
            system_prompt="Be kind.",
            checkpointer=HarombeSaver(mm),
            middleware=[HarombeMemoryMiddleware(mm, recall_tokens=300)],
            store=HarombeStore(mm),
        )

        def ask(thread: str, user: str, text: str) -> list[BaseMessage]:
            agent.invoke({"messages": [HumanMessage(text)]},
                         {"configurable": {"thread_id": thread, "user_id": user}})
            mm.flush()
            return list(agent.get_state({"configurable": {"thread_id": thread, "user_id": user}})
                        .values["messages"])

        ask("ann-1", "ann", "My cat is called Miso")
        ann_two = ask("ann-2", "ann", "What is my cat called?")
        ask("bob-1", "bob", "What is my cat called?")

    first_call_of_ann_two, first_call_of_bob = model.calls[2], model.calls[4]
    assert isinstance(first_call_of_ann_two[0], SystemMessage)
    assert "My cat is called Miso" in first_call_of_ann_two[0].text, "recalled from thread 1"
    assert "Miso" not in first_call_of_bob[0].text, "another user's threads are never recalled"
    assert [m.text for m in first_call_of_ann_two[1:]] == ["What is my cat called?"]
    tool_results = [m.text for m in ann_two if isinstance(m, ToolMessage)]
    assert tool_results == ["cat Miso"], "the store item saved in thread 1 is read in thread 2"
    assert "nothing saved" in model.calls[5][-1].text


def test_middleware_and_checkpointer_store_nothing_twice(tmp_path: Path) -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        model = RecordingChatModel(responses=[
            AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}]),
            "3", "bye"])
        agent = create_agent(model, tools=[add], checkpointer=HarombeSaver(mm),
                             middleware=[HarombeMemoryMiddleware(mm, max_tokens=2000)])
        config = {"configurable": {"thread_id": "cp"}}
        agent.invoke({"messages": [HumanMessage("1+2?")]}, config)
        agent.invoke({"messages": [HumanMessage("thanks")]}, config, durability="exit")
        stored = [to_langchain(m) for m in mm.get_messages("cp")]
    assert [type(m).__name__ for m in stored] == [
        "HumanMessage", "AIMessage", "ToolMessage", "AIMessage", "HumanMessage", "AIMessage"]
    # Each model call saw the whole thread, even when its last step was not checkpointed yet.
    assert [m.text for m in model.calls[1]] == ["1+2?", "", "3"]
    assert [m.text for m in model.calls[2]] == ["1+2?", "", "3", "3", "thanks"]



def test_a_functional_api_thread_is_a_session_with_its_previous_channel(
    manager: MemoryManager,
) -> None:
    """LangGraph's functional API keeps what ``entrypoint.final(save=...)`` saves in the
    ``__previous__`` channel; with ``messages_key="__previous__"`` that message list is the
    thread's session, through an interrupt and its resume, as the graph API's ``messages``."""
    from langgraph.func import entrypoint, task
    from langgraph.graph.message import add_messages
    from langgraph.types import Command, interrupt

    model = RecordingChatModel()

    @task
    def answer(messages: list[BaseMessage]) -> BaseMessage:
        return model.invoke(messages)

    @entrypoint(checkpointer=HarombeSaver(manager, messages_key="__previous__"))
    def chat(new: list[BaseMessage], *, previous: list[BaseMessage] | None) -> Any:
        messages = add_messages(previous or [], new)
        if len(messages) == 3:
            messages = add_messages(messages, [HumanMessage(f"human said {interrupt('ok?')}")])
        reply = answer(messages).result()
        return entrypoint.final(value=reply, save=add_messages(messages, [reply]))

    config = {"configurable": {"thread_id": "fn"}}
    chat.invoke([HumanMessage("hi")], config)
    chat.invoke([HumanMessage("again")], config)
    chat.invoke(Command(resume="yes"), config)
    assert [(m.role, m.content) for m in manager.get_messages("fn")] == [
        ("user", "hi"),
        ("assistant", "echo: hi"),
        ("user", "again"),
        ("user", "human said yes"),
        ("assistant", "echo: human said yes"),
    ]
def test_a_user_named_only_in_the_runtime_context_owns_the_thread(tmp_path: Path) -> None:
    """LangChain 1.x passes the user as runtime context (``context_schema``); the saver reads
    it as the middleware does, so the first turn is not refused and the user's other threads
    recall it. Before, the saver made the thread unowned, and the middleware, acting for the
    context's user, got SessionOwnershipError on that very first turn."""
    from dataclasses import dataclass

    from harombe_core.errors import SessionOwnershipError
    from harombe_core.testing import FakeEmbedder

    @dataclass
    class Context:
        user_id: str

    with MemoryManager(
        str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma"
    ) as mm:
        model = RecordingChatModel(echo="transcript")
        agent = create_agent(
            model,
            checkpointer=HarombeSaver(mm),
            middleware=[HarombeMemoryMiddleware(mm)],
            context_schema=Context,
        )
        agent.invoke({"messages": [HumanMessage("My cat is called Miso")]},
                     {"configurable": {"thread_id": "t1"}}, context=Context(user_id="ann"))
        agent.invoke({"messages": [HumanMessage("What is my cat called?")]},
                     {"configurable": {"thread_id": "t2"}}, context={"user_id": "ann"})
        assert mm.get_session("t1").user_id == mm.get_session("t2").user_id == "ann"
        assert "My cat is called Miso" in model.calls[-1][0].text, "recalled from thread t1"
        # Read from outside a run, the thread is ann's, as one named in configurable.
        state = agent.get_state({"configurable": {"thread_id": "t1", "user_id": "ann"}})
        assert len(state.values["messages"]) == 2
        with pytest.raises(SessionOwnershipError):
            agent.invoke({"messages": [HumanMessage("hi")]},
                         {"configurable": {"thread_id": "t1"}}, context=Context(user_id="bob"))
        # get_state has no runtime context: the error says where the user goes.
        with pytest.raises(SessionOwnershipError, match=r"'configurable': \{'thread_id'"):
            agent.get_state({"configurable": {"thread_id": "t1"}})
