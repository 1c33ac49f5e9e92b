"""A row of the LangGraph checkpointer's tables edited outside harombe gives a typed error naming
its table, key and column on every read that meets it (``get_tuple``, ``list``, ``invoke``),
never a ``ValueError``, ``struct.error`` or ``JSONDecodeError`` from inside the serializer; the
other threads, and the session's messages, stay readable.

Bytes no serializer wrote raise ``CorruptRowError``; a type nobody allowed (a pickle, a tag no
serializer knows) stays ``UnsafeCheckpointError``, now naming the row too. ``list()`` over many
threads raises when it reaches the bad row, as LangGraph's own savers do: a listing that
skipped a checkpoint would hand time travel a history with a hole in it.

Each case edits a real database file with the ``sqlite3`` module (or ``psycopg``), as the
shell would.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from harombe_core import CorruptRowError, MemoryManager
from harombe_core.errors import UnsafeCheckpointError
from langchain_harombe import HarombeSaver

_REFS = "thread_id = 'bad' AND type = 'harombe.message_refs'"
_NEWEST = (
    "thread_id = 'bad' AND checkpoint_id = "
    "(SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = 'bad')"
)

#: case -> (the edit, its value, the table and column the error names, the error class)
CASES: dict[str, tuple[str, Any, str, str, type[Exception]]] = {
    "checkpoint not msgpack": (
        f"UPDATE checkpoints SET checkpoint = {{}} WHERE {_NEWEST}",
        b"\xde\xad\xbe\xef",
        "checkpoints",
        "checkpoint",
        CorruptRowError,
    ),
    "metadata not JSON": (
        f"UPDATE checkpoints SET metadata = {{}} WHERE {_NEWEST}",
        "{{",
        "checkpoints",
        "metadata",
        CorruptRowError,
    ),
    "message list not hashes": (
        f"UPDATE checkpoint_blobs SET blob = {{}} WHERE {_REFS}",
        b"\xde\xad\xbe\xef",
        "checkpoint_blobs",
        "blob",
        CorruptRowError,
    ),
    "message not msgpack": (
        "UPDATE checkpoint_message_blobs SET blob = {} WHERE thread_id = 'bad'",
        b"\xc1",
        "checkpoint_message_blobs",
        "blob",
        CorruptRowError,
    ),
    "checkpoint a pickle": (
        f"UPDATE checkpoints SET type = {{}} WHERE {_NEWEST}",
        "pickle",
        "checkpoints",
        "checkpoint",
        UnsafeCheckpointError,
    ),
    "blob of unknown type": (
        f"UPDATE checkpoint_blobs SET type = {{}} WHERE {_REFS}",
        "weird",
        "checkpoint_blobs",
        "blob",
        UnsafeCheckpointError,
    ),
}


def _graph(saver: HarombeSaver) -> Any:
    llm = FakeListChatModel(responses=["hi there"] * 20)

    def call(state: MessagesState) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call)
    graph.add_edge(START, "model")
    return graph.compile(checkpointer=saver)


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def _threads(target: str) -> None:
    with MemoryManager(target, embedding=None, token_counter="approximate") as mm:
        app = _graph(HarombeSaver(mm))
        for thread_id in ("good", "bad"):
            app.invoke({"messages": [HumanMessage("hello")]}, _config(thread_id))
            app.invoke({"messages": [HumanMessage("again")]}, _config(thread_id))


def _check(target: str, case: str, edit: Callable[[str, Any], int]) -> None:
    sql, value, table, column, kind = CASES[case]
    _threads(target)
    assert edit(sql, value) >= 1
    with MemoryManager(target, embedding=None, token_counter="approximate") as mm:
        saver = HarombeSaver(mm)
        app = _graph(saver)
        reads: dict[str, Callable[[], Any]] = {
            "get_tuple": lambda: saver.get_tuple(_config("bad")),
            "list of the thread": lambda: list(saver.list(_config("bad"))),
            "list of every thread": lambda: list(saver.list(None)),
            "aget_tuple": lambda: asyncio.run(saver.aget_tuple(_config("bad"))),
            "get_state": lambda: app.get_state(_config("bad")),
            "invoke": lambda: app.invoke({"messages": [HumanMessage("x")]}, _config("bad")),
        }
        for name, read in reads.items():
            with pytest.raises(kind) as caught:
                read()
            error: Any = caught.value
            assert (error.table, error.column) == (table, column), name
            assert error.row_id["thread_id"] == "bad", name
            assert f"of table {table}: column {column}" in str(error), name
            assert f"DELETE FROM {table} WHERE thread_id = 'bad'" in str(error), name
        # Nothing else is lost: the other thread reads and runs, the session's messages load.
        assert saver.get_tuple(_config("good")) is not None
        assert len(list(saver.list(_config("good")))) >= 2
        app.invoke({"messages": [HumanMessage("more")]}, _config("good"))
        assert [m.content for m in mm.load_session("bad")][:2] == ["hello", "hi there"]


@pytest.mark.parametrize("case", list(CASES))
def test_a_crafted_checkpoint_row_is_named_by_a_typed_error(tmp_path: Path, case: str) -> None:
    path = tmp_path / "memory.db"

    def edit(sql: str, value: Any) -> int:
        with sqlite3.connect(path) as raw:
            return raw.execute(sql.format("?"), (value,)).rowcount

    _check(str(path), case, edit)
    # The SQL the message gives deletes exactly the row at fault.
    delete = _repair(str(path), r"\((PRAGMA foreign_keys = ON; DELETE FROM [^;]+;)\)")
    raw = sqlite3.connect(path)
    before = raw.total_changes
    raw.executescript(delete)
    assert raw.total_changes - before >= 1
    raw.close()


@pytest.mark.parametrize("case", list(CASES))
def test_a_crafted_checkpoint_row_on_postgres_is_named_too(pg_url: str, case: str) -> None:
    import psycopg

    def edit(sql: str, value: Any) -> int:
        with psycopg.connect(pg_url, autocommit=True) as raw:
            return raw.execute(sql.format("%s"), (value,)).rowcount

    _check(pg_url, case, edit)
    # The PostgreSQL statement the message gives deletes the row at fault there.
    delete = _repair(pg_url, r"on PostgreSQL \((DELETE FROM [^;]+;)\)")
    with psycopg.connect(pg_url, autocommit=True) as raw:
        assert raw.execute(delete).rowcount >= 1


def _repair(location: str, pattern: str) -> str:
    """The repair statement (``pattern``'s group) in the typed error that reading the crafted
    thread raises."""
    with (
        MemoryManager(location, embedding=None) as mm,
        pytest.raises((CorruptRowError, UnsafeCheckpointError)) as caught,
    ):
        HarombeSaver(mm).get_tuple(_config("bad"))
    found = re.search(pattern, str(caught.value))
    assert found is not None, str(caught.value)
    return found.group(1)


def test_an_owed_thread_with_a_crafted_checkpoint_does_not_break_other_reads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A killed saver's thread is re-derived at any open (harombe_core.store.rederive); if its
    newest checkpoint was edited into bytes no serializer wrote, the open and every other read
    go on, the thread stays marked owed, and a warning names the row."""
    path = tmp_path / "memory.db"
    _threads(str(path))
    with sqlite3.connect(path) as raw:
        sql = CASES["checkpoint not msgpack"][0]
        assert raw.execute(sql.format("?"), (b"\xde\xad\xbe\xef",)).rowcount == 1
        raw.execute("INSERT INTO checkpoint_mirror_due (thread_id) VALUES ('bad')")
    with caplog.at_level("WARNING"), MemoryManager(path, embedding=None) as mm:
        assert [m.content for m in mm.load_session("good")][:2] == ["hello", "hi there"]
        assert "hello" in [h.message.content for h in mm.search("hello", top_k=5)]
        mm.flush()
    assert "table checkpoints" in caplog.text
    assert "thread bad" in caplog.text
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT thread_id FROM checkpoint_mirror_due").fetchall() == [("bad",)]
