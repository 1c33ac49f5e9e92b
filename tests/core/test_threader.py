"""The one Threader behind ChatMemory, the LangChain history and the LlamaIndex memory.

An exchange and its parent links are one transaction (a writer SIGKILLed between them leaves
neither message); a history made per request reuses the session's view instead of re-reading
it; and the three adapters thread the same batches the same way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from llama_index.core.base.llms.types import ChatMessage

from harombe_core.chat_memory import ChatMemory
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops
from langchain_harombe import HarombeChatMessageHistory
from llamaindex_harombe import HarombeMemory

KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from harombe_core.chat_memory import ChatMemory
    from harombe_core.manager import MemoryManager

    mm = MemoryManager(sys.argv[1], embedding=None)
    chat = ChatMemory(memory=mm, session_id="s")
    chat.append("first question", "first answer")
    run = mm.store.run

    def die_at_the_link(op):  # the exchange's link, after both rows went in
        if op.body.__qualname__.startswith("set_parent"):
            os.kill(os.getpid(), signal.SIGKILL)
        return run(op)

    mm.store.run = die_at_the_link
    chat.append("second question", "second answer")
    """
)


def test_a_killed_exchange_leaves_neither_message(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    run = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(path)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr.decode()
    with MemoryManager(str(path), embedding=None) as mm:
        stored = mm.get_messages("s")
    assert [m.content for m in stored] == ["first question", "first answer"]
    assert stored[1].parent_id == stored[0].id


def _shape(messages: list[Message]) -> list[int | None]:
    """Each message's parent as an index into the session (None: a root)."""
    index = {m.id: i for i, m in enumerate(messages)}
    return [index.get(m.parent_id) for m in messages]


def test_three_adapters_thread_the_same_batches_alike() -> None:
    pairs = [(f"question {i}", f"answer {i}") for i in range(4)]
    mm = MemoryManager(":memory:", embedding=None)
    try:
        chat = ChatMemory(memory=mm, session_id="core")
        for human, ai in pairs:
            chat.append(human, ai)
        history = HarombeChatMessageHistory(
            "lc", manager=mm, strategy="threaded", node_selector="linear"
        )
        for human, ai in pairs:
            history.add_messages([HumanMessage(human), AIMessage(ai)])
        memory = HarombeMemory.from_defaults(
            manager=mm, session_id="li", strategy="threaded", thread_selector="linear"
        )
        for human, ai in pairs:
            memory.put_messages(
                [ChatMessage(role="user", content=human), ChatMessage(role="assistant", content=ai)]
            )
        shapes = {sid: _shape(mm.get_messages(sid)) for sid in ("core", "lc", "li")}
    finally:
        mm.close()
    assert shapes["core"] == [None, 0, 1, 2, 3, 4, 5, 6]
    assert shapes["lc"] == shapes["core"]
    assert shapes["li"] == shapes["core"]


def test_a_history_per_request_reuses_the_view(monkeypatch: pytest.MonkeyPatch) -> None:
    mm = MemoryManager(":memory:", embedding=None)
    try:
        first = HarombeChatMessageHistory("s", manager=mm, strategy="threaded")
        first.add_messages([HumanMessage("hello"), AIMessage("hi")])
        reads: list[Any] = []
        original = ops.get_messages

        def counting(session_id: str, after_id: int | None = None, **kwargs: Any) -> Any:
            reads.append(after_id)
            return original(session_id, after_id, **kwargs)

        monkeypatch.setattr(ops, "get_messages", counting)
        for i in range(5):
            per_request = HarombeChatMessageHistory("s", manager=mm, strategy="threaded")
            per_request.add_messages([HumanMessage(f"more {i}"), AIMessage(f"sure {i}")])
        assert reads
        assert None not in reads  # never the whole session again: only what is new
        mm.clear_session("s")  # a count that no longer adds up reads the session again
        HarombeChatMessageHistory("s", manager=mm, strategy="threaded").add_messages(
            [HumanMessage("again"), AIMessage("yes")]
        )
        assert None in reads
        assert _shape(mm.store.run(original("s"))) == [None, 0]
    finally:
        mm.close()


def test_a_selector_that_breaks_the_rules_stores_nothing() -> None:
    from harombe_core.threads import ThreadRuleError

    class Wrong:
        def select_parent(self, graph: Any, message: Message) -> int | None:
            return min(graph.nodes)  # a user message: not a place a human may attach

    mm = MemoryManager(":memory:", embedding=None)
    try:
        chat = ChatMemory(node_selector=Wrong(), memory=mm, session_id="s")
        chat.append("one", "two")
        with pytest.raises(ThreadRuleError, match="must attach to an assistant"):
            chat.append("three", "four")
        assert [m.content for m in mm.get_messages("s")] == ["one", "two"]
        assert chat.mode == "graph"
        assert ChatMemory(memory=mm).mode == "linear"
    finally:
        mm.close()
