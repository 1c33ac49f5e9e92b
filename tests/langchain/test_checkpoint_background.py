"""A thread's session is written by a background job after its checkpoint, and nothing shows it.

A put stores the checkpoint and marks the thread's session as owed; the process's background
worker writes the session later. These tests hold the worker (``hold_background``: it serves
one job at a time, so a job that waits keeps every other one queued) to show, without
depending on timing, that:

* a read of this process sees the turn's messages anyway (read your writes), sync and async;
* ``flush()`` writes what is owed;
* a process killed before the job ran loses nothing: the next saver opened on the database
  writes the owed session from the checkpoint.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from harombe_core.errors import SessionOwnershipError
from harombe_core.manager import MemoryManager
from harombe_core.migrate import migrate
from harombe_core.testing import hold_background
from langchain_harombe import HarombeChatMessageHistory, HarombeSaver, to_langchain


def _agent(saver: HarombeSaver) -> Any:
    replies = (AIMessage(f"answer number {n}") for n in itertools.count())
    return create_agent(GenericFakeChatModel(messages=replies), [], checkpointer=saver)


def _texts(messages: list[BaseMessage]) -> list[tuple[str, str]]:
    return [(m.type, m.text) for m in messages]


def _owed(saver: HarombeSaver, thread: str) -> tuple[bool, int]:
    """(whether the thread's session is marked owed, its rows), read around the store."""
    runner = saver._runner

    def body() -> Any:
        due = (
            yield runner.step(
                "SELECT COUNT(*) FROM checkpoint_mirror_due WHERE thread_id = ?", (thread,)
            )
        ).rows
        rows = (
            yield runner.step("SELECT COUNT(*) FROM messages WHERE session_id = ?", (thread,))
        ).rows
        return bool(due[0][0]), int(rows[0][0])

    result: tuple[bool, int] = runner.read(body)
    return result


def test_reads_of_this_process_see_a_turn_whose_session_is_owed(
    backend_manager: MemoryManager,
) -> None:
    mm = backend_manager
    saver = HarombeSaver(mm)
    agent = _agent(saver)
    config = {"configurable": {"thread_id": "t"}}
    with hold_background():
        result = agent.invoke({"messages": [HumanMessage("first question")]}, config)
        assert _owed(saver, "t") == (True, 0)  # the session is not written by the turn
        assert _texts([to_langchain(m) for m in mm.get_messages("t")]) == _texts(result["messages"])
        assert _owed(saver, "t") == (False, 2)

        result = agent.invoke({"messages": [HumanMessage("second question")]}, config)
        assert _owed(saver, "t")[0]
        history = HarombeChatMessageHistory(session_id="t", manager=mm)
        assert _texts(history.messages) == _texts(result["messages"])

        agent.invoke({"messages": [HumanMessage("third question")]}, config)
        hits = mm.search("answer number 2", session_id="t", top_k=3)
        assert any(h.message.content == "answer number 2" for h in hits)
        assert not _owed(saver, "t")[0]


def test_async_reads_see_an_ainvoke_turn(backend_manager: MemoryManager) -> None:
    mm = backend_manager
    saver = HarombeSaver(mm)
    agent = _agent(saver)
    config = {"configurable": {"thread_id": "a"}}

    async def turn() -> tuple[list[BaseMessage], list[Any]]:
        result = await agent.ainvoke({"messages": [HumanMessage("a question")]}, config)
        return result["messages"], await mm.aget_messages("a")

    with hold_background():
        messages, session = asyncio.run(turn())
    assert _texts([to_langchain(m) for m in session]) == _texts(messages)


def test_flush_writes_every_owed_session(backend_manager: MemoryManager) -> None:
    mm = backend_manager
    saver = HarombeSaver(mm)
    agent = _agent(saver)
    with hold_background():
        for thread in ("x", "y"):
            agent.invoke(
                {"messages": [HumanMessage("hello")]}, {"configurable": {"thread_id": thread}}
            )
            assert _owed(saver, thread) == (True, 0)
        mm.flush()
        assert _owed(saver, "x") == (False, 2)
        assert _owed(saver, "y") == (False, 2)
        agent.invoke({"messages": [HumanMessage("again")]}, {"configurable": {"thread_id": "x"}})
        saver.flush()
        assert _owed(saver, "x") == (False, 4)


def test_a_put_rechecks_what_another_process_changed_since_this_ones_last(
    tmp_path: Path,
) -> None:
    """A step's put trusts what the process's last put of the thread left (owner, blob
    epoch, owed mark) only as far as its own statement finds it still so: another process
    clearing the mark, deleting the blobs or taking the thread over is seen."""
    db = str(tmp_path / "changed.db")
    with MemoryManager(db, embedding=None) as mm:
        saver = HarombeSaver(mm)
        agent = _agent(saver)
        config = {"configurable": {"thread_id": "c", "user_id": "ann"}}
        with hold_background():
            agent.invoke({"messages": [HumanMessage("one")]}, config)
            with sqlite3.connect(db) as raw:  # another process's job wrote the session...
                raw.execute("DELETE FROM checkpoint_mirror_due")
            raw.close()
            agent.invoke({"messages": [HumanMessage("two")]}, config)
            assert _owed(saver, "c")[0]  # ...so this turn marks it owed again
            with sqlite3.connect(db) as raw:  # its blobs deleted, under a new blob epoch
                raw.execute("DELETE FROM checkpoint_message_blobs")
                raw.execute("UPDATE checkpoint_threads SET blob_epoch = 'other'")
            raw.close()
            agent.invoke({"messages": [HumanMessage("three")]}, config)
        with MemoryManager(db, embedding=None) as fresh:  # every message was written again
            newest = HarombeSaver(fresh).get_tuple(config)
            assert newest is not None
            assert [m.text for m in newest.checkpoint["channel_values"]["messages"]] == [
                "one",
                "answer number 0",
                "two",
                "answer number 1",
                "three",
                "answer number 2",
            ]
        with sqlite3.connect(db) as raw:  # the thread now someone else's
            raw.execute("UPDATE sessions SET user_id = 'bob' WHERE id = 'c'")
        raw.close()
        with pytest.raises(SessionOwnershipError):  # (a put alone: a turn's read refuses it)
            saver.put(
                {"configurable": {**config["configurable"], "checkpoint_ns": ""}},
                empty_checkpoint(),
                {},
                {},
            )


def _child() -> dict[str, Any]:
    """Where a child process runs: the repository, with its packages first on the path."""
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    return {"env": {**os.environ, "PYTHONPATH": path}, "cwd": root}


_CHILD = """
import sys, time
from langchain_core.messages import HumanMessage
from harombe_core.manager import MemoryManager
from harombe_core.testing import hold_background
from langchain_harombe import HarombeSaver
from tests.langchain.test_checkpoint_background import _agent

mm = MemoryManager(sys.argv[1], embedding=None)
agent = _agent(HarombeSaver(mm))
config = {"configurable": {"thread_id": "k", "user_id": "ann"}}
agent.invoke({"messages": [HumanMessage("before the hold")]}, config)
mm.flush()
with hold_background():
    agent.invoke({"messages": [HumanMessage("in the hold")]}, config)
    print("returned", flush=True)
    time.sleep(3600)
"""


def test_a_process_killed_before_its_sessions_were_written_loses_nothing(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "killed.db")
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, db], stdout=subprocess.PIPE, text=True, **_child()
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "returned"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with sqlite3.connect(db) as raw:  # the second turn's checkpoint is there, its session not
        assert raw.execute("SELECT thread_id FROM checkpoint_mirror_due").fetchall() == [("k",)]
        assert raw.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 2
    raw.close()

    with MemoryManager(db, embedding=None) as mm:
        saver = HarombeSaver(mm)
        newest = saver.get_tuple({"configurable": {"thread_id": "k", "user_id": "ann"}})
        assert newest is not None
        expected = _texts(newest.checkpoint["channel_values"]["messages"])
        assert [t for _, t in expected] == [
            "before the hold",
            "answer number 0",
            "in the hold",
            "answer number 1",
        ]
        assert _texts([to_langchain(m) for m in mm.get_messages("k")]) == expected
        assert mm.get_session("k").user_id == "ann"
        assert _owed(saver, "k") == (False, 4)


def test_a_reopened_saver_writes_owed_sessions_in_the_background(tmp_path: Path) -> None:
    """Also in a copy made by ``harombe migrate``, which carries the marks."""
    db, copy = str(tmp_path / "owed.db"), str(tmp_path / "copy.db")
    with MemoryManager(db, embedding=None) as mm:
        saver = HarombeSaver(mm)
        with hold_background():
            _agent(saver).invoke(
                {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "o"}}
            )
            # What a killed process leaves: the mark, and no session rows.
            saver._mirrors.close()
        assert _owed(saver, "o") == (True, 0)
    migrate(db, copy, progress=False)
    for path in (db, copy):
        with MemoryManager(path, embedding=None) as mm:
            saver = HarombeSaver(mm)
            saver._mirrors.flush()  # the background thread, not a read, writes it
            assert _owed(saver, "o") == (False, 2)


_EXITS = """
import sys
from langchain_core.messages import HumanMessage
from harombe_core.manager import MemoryManager
from langchain_harombe import HarombeSaver
from tests.langchain.test_checkpoint_background import _agent

mm = MemoryManager(sys.argv[1], embedding=None)  # never closed
_agent(HarombeSaver(mm)).invoke(
    {"messages": [HumanMessage("last words")]}, {"configurable": {"thread_id": "e"}}
)
"""


def test_a_program_that_exits_without_closing_leaves_its_sessions_written(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "exits.db")
    subprocess.run([sys.executable, "-c", _EXITS, db], check=True, **_child())
    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT COUNT(*) FROM checkpoint_mirror_due").fetchone()[0] == 0
        contents = raw.execute("SELECT content FROM messages ORDER BY id").fetchall()
    raw.close()
    assert contents == [("last words",), ("answer number 0",)]


async def test_a_cancelled_aput_that_committed_still_has_its_session_written(
    backend_manager: MemoryManager,
) -> None:
    """A cancelled ``aput`` waits for its transaction (it may commit); the session job was
    handed over only after it, so a committed put's session stayed unwritten in this process:
    reads and ``flush()`` showed the thread without the checkpoint's messages."""
    mm = backend_manager
    saver = HarombeSaver(mm)
    config: Any = {"configurable": {"thread_id": "c", "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": [HumanMessage("kept though cancelled", id="h")]}
    versions = {"messages": saver.get_next_version(None, None)}
    checkpoint["channel_versions"] = versions
    task = asyncio.ensure_future(
        saver.aput(config, checkpoint, {"source": "input", "step": 0}, versions)
    )
    await asyncio.sleep(0)  # the put is on its worker thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await saver.aget_tuple(config)
    assert stored is not None  # it committed
    assert [m.content for m in await mm.aget_messages("c")] == ["kept though cancelled"]
    await mm.aflush()
    assert _owed(saver, "c") == (False, 1)
