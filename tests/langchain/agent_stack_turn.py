"""One turn of an agent built the way LangChain users build one, on either stack.

``harombe``: ``HarombeMemoryMiddleware`` + ``HarombeSaver`` + ``HarombeStore`` on one database
file. ``control``: LangGraph's ``SqliteSaver`` + ``SqliteStore`` on files. Both agents have
the same tools (store writes and reads through ``ToolRuntime``, a tool that raises, a tool
that asks a human with ``interrupt()``), a middleware that trims the state with
``RemoveMessage`` + ``trim_messages``, and the same scripted model. Run as its own process by
the tests, so a resume happens in another process than the interrupt; prints the turn's
outcome as JSON.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain.tools import ToolRuntime, tool
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langchain_core.messages.utils import trim_messages
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.types import Command, interrupt

from langchain_harombe import RecordingChatModel


@tool
def remember(text: str, runtime: ToolRuntime) -> str:
    """Remember a note for the user."""
    assert runtime.store is not None
    runtime.store.put(("notes", runtime.config["configurable"]["user_id"]), text, {"text": text})
    return f"saved {text}"


@tool
def recall(query: str, runtime: ToolRuntime) -> str:
    """Search the user's notes."""
    assert runtime.store is not None
    found = runtime.store.search(("notes", runtime.config["configurable"]["user_id"]), query=query)
    return json.dumps(sorted(item.value["text"] for item in found))


@tool
def boom(x: int) -> str:
    """Always fails."""
    raise ValueError(f"boom {x}")


@tool
def approve(action: str) -> str:
    """Ask a human to approve an action."""
    return f"human said {interrupt({'action': action})}"


class Trim(AgentMiddleware):  # type: ignore[type-arg]
    """Keep the state short, as LangGraph's docs show: remove all, put the newest back."""

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        messages: list[BaseMessage] = state["messages"]
        if len(messages) <= 12:
            return None
        kept = trim_messages(
            messages, max_tokens=8, token_counter=len, strategy="last", start_on="human"
        )
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *kept]}


def _call(name: str, args: dict[str, Any], i: int) -> dict[str, Any]:
    return {"name": name, "args": args, "id": f"call_{i}", "type": "tool_call"}


SCRIPT: list[Any] = [
    AIMessage(
        "",
        tool_calls=[
            _call("remember", {"text": "cat is Miso"}, 1),
            _call("remember", {"text": "flight May 3"}, 2),
        ],
    ),
    "noted both",
    AIMessage("", tool_calls=[_call("recall", {"query": "cat"}, 3), _call("boom", {"x": 1}, 4)]),
    "recalled, one failed",
    AIMessage("", tool_calls=[_call("approve", {"action": "book"}, 5)]),
    "done after approval",
]
for n in range(4):
    SCRIPT += [
        AIMessage("", tool_calls=[_call("remember", {"text": f"extra {n}"}, 10 + n)]),
        f"ok {n}",
    ]


def build(kind: str, path: str, position: int) -> tuple[Any, RecordingChatModel]:
    model = RecordingChatModel(responses=SCRIPT, position=position)
    middleware: list[Any] = [Trim()]
    if kind == "harombe":
        from harombe_core.manager import MemoryManager
        from harombe_core.testing import FakeEmbedder
        from langchain_harombe import HarombeMemoryMiddleware, HarombeSaver, HarombeStore

        manager = MemoryManager(path, embedding=FakeEmbedder())
        saver: Any = HarombeSaver(manager)
        store: Any = HarombeStore(manager, index={"embed": manager.embedder, "fields": ["text"]})
        middleware.insert(0, HarombeMemoryMiddleware(manager))
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.store.sqlite import SqliteStore

        saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
        store = SqliteStore(
            sqlite3.connect(path + ".store", check_same_thread=False, isolation_level=None)
        )
        store.setup()
    agent = create_agent(
        model,
        tools=[remember, recall, boom, approve],
        system_prompt="You keep notes.",
        middleware=middleware,
        checkpointer=saver,
        store=store,
    )
    return agent, model


def summary(message: BaseMessage) -> dict[str, Any]:
    """What both stacks must agree on (ids are made afresh by each run)."""
    out: dict[str, Any] = {"type": message.type, "text": message.text}
    if isinstance(message, AIMessage) and message.tool_calls:
        out["calls"] = [(c["name"], c["args"], c["id"]) for c in message.tool_calls]
    if message.type == "tool":
        out["call_id"] = getattr(message, "tool_call_id", None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["harombe", "control"])
    parser.add_argument("db")
    parser.add_argument("step", help="a user message, 'retry' (re-run) or 'resume:<answer>'")
    parser.add_argument("position", type=int, help="where the model's script continues")
    args = parser.parse_args()
    agent, model = build(args.kind, args.db, args.position)
    config = {"configurable": {"thread_id": "t1", "user_id": "ann"}}
    error = None
    try:
        if args.step.startswith("resume:"):
            agent.invoke(Command(resume=args.step.removeprefix("resume:")), config)
        elif args.step == "retry":
            agent.invoke(None, config)
        else:
            agent.invoke({"messages": [HumanMessage(args.step)]}, config)
    except ValueError as exc:
        error = str(exc)
    state = agent.get_state(config)
    outcome: dict[str, Any] = {
        "messages": [summary(m) for m in state.values["messages"]],
        "next": list(state.next),
        "tasks": [
            (t.name, t.error is not None, [i.value for i in t.interrupts]) for t in state.tasks
        ],
        "error": error,
        "position": model.position,
    }
    if args.kind == "harombe":
        from harombe_core.manager import MemoryManager

        with MemoryManager(args.db, embedding=None) as manager:
            stored = manager.get_messages("t1", user_id="ann")
            outcome["session"] = [(m.role, m.content) for m in stored]
    print(json.dumps(outcome))


if __name__ == "__main__":
    main()
