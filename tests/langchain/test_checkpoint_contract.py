"""HarombeSaver beside LangGraph's SqliteSaver and InMemorySaver (MemorySaver), the same steps
on both in one test: durability modes, time travel (a run from an old checkpoint),
`update_state` on an old checkpoint, `list` with filters / before / limit / namespaces,
`get_tuple` by id, pending writes of a failed step, several interrupts resumed one by one, a
subgraph with its own checkpoints, and `delete_thread`. Beside what a user sees, the thread's
harombe session must always equal the messages of its newest checkpoint (what readers without
LangGraph see)."""

from __future__ import annotations

import contextlib
import operator
import threading
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from harombe_core.manager import MemoryManager
from langchain_harombe import HarombeSaver


def _echo(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(f"echo {state['messages'][-1].text}")]}


def _echo_graph(saver: BaseCheckpointSaver) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("echo", _echo)
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    return builder.compile(checkpointer=saver)


def _texts(values: dict[str, Any]) -> list[str]:
    return [m.text for m in values.get("messages", [])]


def _history(graph: Any, config: dict[str, Any]) -> list[Any]:
    return [
        (
            _texts(s.values),
            s.metadata.get("source"),
            s.metadata.get("step"),
            s.next,
            s.parent_config is not None,
            [(t.name, [i.value for i in t.interrupts]) for t in s.tasks],
        )
        for s in graph.get_state_history(config)
    ]


def _thread(thread: str, **configurable: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, **configurable}}


class _Story:
    """The steps, run on one saver; ``seen`` is what a user of that saver sees."""

    def __init__(self, saver: BaseCheckpointSaver, mirror: Any) -> None:
        self.saver = saver
        self.mirror = mirror  # thread -> the messages readers see (the newest checkpoint's)
        self.seen: dict[str, Any] = {}
        self.mirrors_agree: list[str] = []

    def see(self, name: str, value: Any, thread: str | None = None, graph: Any = None) -> None:
        self.seen[name] = value
        if thread is not None:
            state = _texts(graph.get_state(_thread(thread)).values)
            if self.mirror(thread) != state:
                self.mirrors_agree.append(f"{name}: {self.mirror(thread)} != {state}")

    def durability(self) -> None:
        graph = _echo_graph(self.saver)
        for mode in ["exit", "async", "sync"]:
            config = _thread(f"d-{mode}")
            graph.invoke({"messages": [HumanMessage("one")]}, config, durability=mode)
            graph.invoke({"messages": [HumanMessage("two")]}, config, durability=mode)
            self.see(f"history {mode}", _history(graph, config), f"d-{mode}", graph)

    def time_travel(self) -> None:
        graph = _echo_graph(self.saver)
        config = _thread("tt")
        for text in "abc":
            graph.invoke({"messages": [HumanMessage(text)]}, config)
        history = list(graph.get_state_history(config))

        def at(*texts: str) -> dict[str, Any]:
            return next(h.config for h in history if _texts(h.values) == list(texts))

        forked = graph.invoke({"messages": [HumanMessage("fork")]}, at("a", "echo a"))
        self.see("fork", (_texts(forked), _history(graph, config)), "tt", graph)
        replayed = graph.invoke(None, at("a", "echo a", "b"))
        self.see("replay", _texts(replayed), "tt", graph)
        edited = graph.update_state(
            at("a", "echo a"), {"messages": [AIMessage("edited")]}, as_node="echo"
        )
        self.see("update_state", edited["configurable"]["checkpoint_ns"], "tt", graph)

        def listed(config: dict[str, Any] | None, **kw: Any) -> list[Any]:
            return [
                (
                    t.metadata.get("source"),
                    t.metadata.get("step"),
                    t.config["configurable"]["thread_id"],
                    t.config["configurable"]["checkpoint_ns"],
                )
                for t in self.saver.list(config, **kw)
            ]

        middle = history[2].config
        # across threads the order is the saver's: newest checkpoint first in SqliteSaver
        # (and harombe), threads in the order they were made in InMemorySaver
        self.see("list across threads", [listed(None, limit=3)])
        self.see("all checkpoints", sorted(listed(None)))
        self.see(
            "list",
            [
                sorted(listed(None, filter={"source": "input"})),
                listed(config, filter={"step": 1}),
                listed(config, before=middle),
                listed(config, before=middle, limit=2),
                listed(_thread("tt", checkpoint_ns=""), limit=2),
                listed(_thread("tt", checkpoint_ns="elsewhere")),
                listed(_thread("no such thread")),
            ],
        )
        old = self.saver.get_tuple(at("a", "echo a"))
        assert old is not None
        missing = _thread("tt", checkpoint_ns="", checkpoint_id="no such checkpoint")
        self.see(
            "get_tuple",
            (
                _texts(old.checkpoint["channel_values"]),
                old.metadata["step"],
                self.saver.get_tuple(missing),
            ),
        )

    def interrupts(self) -> None:
        def ask(state: MessagesState) -> dict[str, Any]:
            first, second = interrupt("first?"), interrupt("second?")
            return {"messages": [AIMessage(f"{first}+{second}")]}

        builder = StateGraph(MessagesState)
        builder.add_node("ask", ask)
        builder.add_edge(START, "ask")
        graph = builder.compile(checkpointer=self.saver)
        config = _thread("hitl")
        asked = graph.invoke({"messages": [HumanMessage("go")]}, config)
        again = graph.invoke(Command(resume="x"), config)
        done = graph.invoke(Command(resume="y"), config)
        self.see(
            "interrupts",
            (
                [i.value for i in asked["__interrupt__"]],
                [i.value for i in again["__interrupt__"]],
                _texts(done),
                _history(graph, config),
            ),
            "hitl",
            graph,
        )

    def pending_writes(self) -> None:
        class Parallel(TypedDict):
            xs: Annotated[list[str], operator.add]

        calls: list[str] = []
        worked = threading.Event()

        def fails_once(state: Parallel) -> dict[str, Any]:
            first = "flaky" not in calls
            calls.append("flaky")
            if first:
                # the steps run in parallel: fail once the other one is done, so that its
                # write is saved as a pending write (else the step and the failure race)
                worked.wait(timeout=60)
                raise RuntimeError("the first try fails")
            return {"xs": ["flaky"]}

        def works(state: Parallel) -> dict[str, Any]:
            calls.append("works")
            worked.set()
            return {"xs": ["works"]}

        builder = StateGraph(Parallel)
        builder.add_node("works", works)
        builder.add_node("flaky", fails_once)
        builder.add_edge(START, "works")
        builder.add_edge(START, "flaky")
        graph = builder.compile(checkpointer=self.saver)
        config = _thread("pw")
        with contextlib.suppress(RuntimeError):
            graph.invoke({"xs": []}, config)
        state = graph.get_state(config)
        saved = self.saver.get_tuple(config)
        assert saved is not None
        assert saved.pending_writes is not None
        resumed = graph.invoke(None, config)
        self.see(
            "pending writes",
            (
                state.next,
                sorted((t.name, t.error is not None, bool(t.result)) for t in state.tasks),
                sorted((w[1], str(w[2])) for w in saved.pending_writes),
                sorted(resumed["xs"]),
                sorted(calls),  # the step that worked is not run again
            ),
        )

    def subgraph_and_delete(self) -> None:
        def inner_node(state: MessagesState) -> dict[str, Any]:
            return {"messages": [AIMessage("inner")]}

        inner = StateGraph(MessagesState)
        inner.add_node("inner", inner_node)
        inner.add_edge(START, "inner")
        outer = StateGraph(MessagesState)
        outer.add_node("sub", inner.compile(checkpointer=True))
        outer.add_edge(START, "sub")
        graph = outer.compile(checkpointer=self.saver)
        config = _thread("sub")
        graph.invoke({"messages": [HumanMessage("hi")]}, config)
        graph.invoke({"messages": [HumanMessage("again")]}, config)
        listed = list(self.saver.list(config))
        namespaces = sorted(
            {t.config["configurable"]["checkpoint_ns"].split(":")[0] for t in listed}
        )
        self.see("subgraph", (namespaces, len(listed)), "sub", graph)
        self.saver.delete_thread("d-exit")
        self.see(
            "deleted",
            (
                self.saver.get_tuple(_thread("d-exit")),
                list(self.saver.list(_thread("d-exit"))),
                self.mirror("d-exit"),
            ),
        )

    def run(self) -> _Story:
        self.durability()
        self.time_travel()
        self.interrupts()
        self.pending_writes()
        self.subgraph_and_delete()
        return self


def _their_story(control: BaseCheckpointSaver) -> _Story:
    graphs = _echo_graph(control)

    def their_state(thread: str) -> list[str]:
        return _texts(graphs.get_state(_thread(thread)).values)

    return _Story(control, their_state).run()


@pytest.mark.parametrize("control", ["SqliteSaver", "InMemorySaver"])
def test_a_saver_does_what_langgraphs_savers_do(
    backend_manager: MemoryManager, tmp_path: Path, control: str
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    def our_mirror(thread: str) -> list[str]:
        return [str(m.content) for m in backend_manager.get_messages(thread)]

    ours = _Story(HarombeSaver(backend_manager), our_mirror).run()
    if control == "SqliteSaver":
        with SqliteSaver.from_conn_string(str(tmp_path / "langgraph.db")) as saver:
            theirs = _their_story(saver)
    else:
        theirs = _their_story(InMemorySaver())
    for step, seen in theirs.seen.items():
        if step == "list across threads" and control == "InMemorySaver":
            continue  # an order each saver chooses (see _Story.time_travel)
        assert ours.seen[step] == seen, step
    assert ours.mirrors_agree == []
    assert ours.seen["pending writes"][-1] == ["flaky", "flaky", "works"]
