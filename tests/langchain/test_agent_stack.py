"""An agent on harombe's whole stack against the same agent on LangGraph's SQLite classes.

``create_agent`` with ``HarombeMemoryMiddleware`` + ``HarombeSaver`` + ``HarombeStore`` on one
file is run turn by turn, each turn in its own process, beside the same agent on
``SqliteSaver`` + ``SqliteStore`` (``agent_stack_turn.py``): parallel tool calls writing the
store through ``ToolRuntime``, a tool that raises (and a retry), ``interrupt()`` resumed from
another process, and a state trimmed with ``RemoveMessage``. The state, its pending tasks and
the interrupts must be the same; harombe's session of the thread holds the state's messages.
Streaming is compared in one process, every ``stream_mode`` at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.types import Command

from tests.langchain.agent_stack_turn import build, summary

ROOT = Path(__file__).resolve().parents[2]
TURN = Path(__file__).with_name("agent_stack_turn.py")

STEPS = [
    "remember my cat and my flight",  # two remember calls at once
    "what about my cat?",  # recall + boom at once: boom raises
    "retry",  # the failed step again: recall's write is kept, boom raises again
    "let us move on",
    "book it",  # approve: interrupt
    "resume:yes",  # in another process
    *(f"more {n}" for n in range(4)),  # the state grows past the trim
]


def _turn(kind: str, db: Path, step: str, position: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(TURN), kind, str(db), step, str(position)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    outcome: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcome


def test_each_turn_leaves_the_same_state_as_on_langgraphs_sqlite_classes(tmp_path: Path) -> None:
    position = {"control": 0, "harombe": 0}
    interrupted = trimmed = False
    for step in STEPS:
        outcomes = {}
        for kind in ("control", "harombe"):
            outcomes[kind] = _turn(kind, tmp_path / f"{kind}.db", step, position[kind])
            position[kind] = outcomes[kind]["position"]
        session = outcomes["harombe"].pop("session")
        assert outcomes["harombe"] == outcomes["control"], step
        state = outcomes["control"]
        texts = [m["text"] for m in state["messages"]]
        if any(failed for _, failed, _ in state["tasks"]):
            # a failed step's writes that succeeded are pending, in no checkpoint yet
            assert texts[: len(session)] == [text for _, text in session], step
        else:
            assert texts == [text for _, text in session], step
        interrupted |= state["tasks"] == [["tools", False, [{"action": "book"}]]]
        trimmed |= state["messages"][0]["text"] != STEPS[0]
    assert interrupted
    assert trimmed
    assert state["messages"][-1]["text"] == "ok 3"


def _normal(mode: str, chunk: Any) -> Any:
    """A stream chunk as both stacks must agree on it (harombe's own middleware nodes left
    out: they are the only nodes one agent has and the other has not)."""
    if mode == "messages":
        message, meta = chunk
        return (mode, meta["langgraph_node"], summary(message))
    if mode == "values":
        return (mode, [summary(m) for m in chunk["messages"]])
    nodes = []
    for node, update in chunk.items():
        if node.startswith("HarombeMemoryMiddleware"):
            continue
        if node == "__interrupt__":
            nodes.append((node, [i.value for i in update]))
            continue
        messages = (update or {}).get("messages", [])
        nodes.append((node, [summary(m) for m in messages if isinstance(m, BaseMessage)]))
    return (mode, nodes) if nodes else None


@pytest.mark.parametrize("modes", [["messages", "updates", "values"], "messages"])
def test_streams_are_the_same_as_on_langgraphs_sqlite_classes(
    tmp_path: Path, modes: list[str] | str
) -> None:
    streams: dict[str, list[Any]] = {}
    for kind in ("control", "harombe"):
        # From the approve call on: parallel tool calls stream in the order they finish.
        agent, _ = build(kind, str(tmp_path / f"{kind}.db"), 4)
        config = {"configurable": {"thread_id": "t1", "user_id": "ann"}}
        seen: list[Any] = []
        for step in ("book it", "resume", "remember"):
            given = Command(resume="ok") if step == "resume" else {"messages": [HumanMessage(step)]}
            for chunk in agent.stream(given, config, stream_mode=modes):
                mode, part = chunk if isinstance(modes, list) else (modes, chunk)
                normal = _normal(mode, part)
                # a middleware node of harombe's repeats the values of the step before it
                if normal is not None and not (seen and mode == "values" and normal == seen[-1]):
                    seen.append(normal)
        streams[kind] = seen
    assert streams["harombe"] == streams["control"]
    assert any(item[0] == "messages" for item in streams["control"])
