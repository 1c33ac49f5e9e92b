"""A turn checkpointed by a process killed before its session was written is read by every
opener of the database, not only by the next ``HarombeSaver``.

A process runs an agent checkpointed by ``HarombeSaver`` with the background worker held
(``hold_background``), so when it is killed the checkpoints are committed and the thread's
session is still owed (marked in ``checkpoint_mirror_due``). Each reader then opens a copy of
that file with no saver: a bare ``MemoryManager`` (in a process that never imported
``langchain_harombe``, and in this one), a LangChain history, a LlamaIndex chat store, the
``harombe serve`` app and the ``harombe search`` / ``harombe export`` commands. Each finds
every checkpointed message, in order and by its words, on its first read, and the mark is gone
after ``flush()``. Without LangChain the marks stay (and the reader works); two openers
deriving the same thread, or a reader and the live saver that owes it, write it once.
PostgreSQL is covered the same way.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages

from harombe_core import MemoryManager

pytestmark = pytest.mark.slow

#: What the killed process wrote: two turns of a thread owned by ``ann``.
_WORDS = ["zqfirstturnk", "zqsecondturnk"]
_EXPECTED = [
    ("user", "turn zqfirstturnk"),
    ("assistant", "reply 0"),
    ("user", "turn zqsecondturnk"),
    ("assistant", "reply 1"),
]

_WRITER = """
import itertools, sys, time
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from harombe_core import MemoryManager
from harombe_core.testing import hold_background
from langchain_harombe import HarombeSaver

mm = MemoryManager(sys.argv[1], embedding=None)  # never closed
replies = (AIMessage(f"reply {n}") for n in itertools.count())
agent = create_agent(GenericFakeChatModel(messages=replies), [], checkpointer=HarombeSaver(mm))
config = {"configurable": {"thread_id": "thread", "user_id": "ann"}}
with hold_background():
    for word in sys.argv[2:]:
        agent.invoke({"messages": [HumanMessage(f"turn {word}")]}, config)
    print("held", flush=True)
    time.sleep(3600)
"""


def _kill_while_owed(location: str) -> None:
    """Run the writer on ``location`` until every turn is checkpointed, then kill it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, location, *_WORDS],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held", "the writer stopped early"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter with ``args`` (it inherits the test's environment)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )


#: A reader in a process of its own: a bare manager, the number of the thread's messages.
_COUNT = """
import sys
from harombe_core import MemoryManager
mm = MemoryManager(sys.argv[1], embedding=None)
print(len(mm.get_messages("thread")))
mm.close()
"""


def _due(db: str) -> list[tuple[str]]:
    with sqlite3.connect(db) as raw:
        rows = raw.execute("SELECT thread_id FROM checkpoint_mirror_due").fetchall()
    raw.close()
    return rows


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database file whose writer was killed owing the thread's session."""
    db = str(tmp_path_factory.mktemp("killed") / "m.db")
    _kill_while_owed(db)
    assert _due(db) == [("thread",)]
    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0
    raw.close()
    return db


def _copy(killed: str, db: str) -> str:
    """A copy of the killed writer's file ``killed`` (its WAL included) at ``db``."""
    with sqlite3.connect(killed) as source, sqlite3.connect(db) as target:
        source.backup(target)
    source.close()
    target.close()
    return db


@pytest.fixture
def owed(killed: str, tmp_path: Path) -> str:
    """A copy of the killed writer's file, for one reader."""
    return _copy(killed, str(tmp_path / "copy.db"))


def _texts(messages: Iterator[object] | list[object]) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in messages]  # type: ignore[attr-defined]


def test_a_bare_manager_reads_the_owed_turn(owed: str) -> None:
    with MemoryManager(owed, embedding=None) as mm:
        assert _texts(mm.get_messages("thread")) == _EXPECTED
        for word in _WORDS:
            assert f"turn {word}" in [h.message.content for h in mm.search(word)]
        assert [s.id for s in mm.list_sessions(user_id="ann")] == ["thread"]
        mm.flush()
    assert _due(owed) == []


def test_a_process_that_never_imported_the_adapter_reads_the_owed_turn(owed: str) -> None:
    reader = """
import json, sys
from harombe_core import MemoryManager
assert not any(name.startswith(("langchain", "langgraph")) for name in sys.modules)
mm = MemoryManager(sys.argv[1], embedding=None)
mm.flush()
print(json.dumps({
    "messages": [[m.role, m.content] for m in mm.get_messages("thread")],
    "hits": [[h.message.content for h in mm.search(word)] for word in sys.argv[2:]],
}))
mm.close()
"""
    out = _python(reader, owed, *_WORDS)
    seen = json.loads(out.stdout)
    assert [tuple(m) for m in seen["messages"]] == _EXPECTED
    assert all(f"turn {w}" in hits for w, hits in zip(_WORDS, seen["hits"], strict=True))
    assert _due(owed) == []


def test_a_langchain_history_reads_the_owed_turn(owed: str) -> None:
    from langchain_harombe import HarombeChatMessageHistory

    history = HarombeChatMessageHistory(session_id="thread", storage_path=owed, user_id="ann")
    try:
        assert [m.text for m in history.messages] == [text for _, text in _EXPECTED]
    finally:
        history.close()


def test_a_llamaindex_chat_store_reads_the_owed_turn(owed: str) -> None:
    from llamaindex_harombe import HarombeChatStore

    store = HarombeChatStore(storage_path=owed, user_id="ann")
    try:
        assert [m.content for m in store.get_messages("thread")] == [t for _, t in _EXPECTED]
    finally:
        store.close()


def _harombe(*args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "harombe_core.cli", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout


def test_the_command_line_searches_and_exports_the_owed_turn(owed: str, tmp_path: Path) -> None:
    assert _WORDS[1] in _harombe("search", _WORDS[1], "--db", owed, "--keyword")
    exported = tmp_path / "thread.json"
    _harombe("export", "thread", "--db", owed, "--out", str(exported))
    text = exported.read_text()
    assert _WORDS[0] in text
    assert "reply 1" in text


def test_two_openers_deriving_one_thread_write_it_once(
    killed: str, owed: str, tmp_path: Path
) -> None:
    # Two managers of one process both find the mark when they open, so both start a job for
    # the thread; the first read runs both (the second finds the session already equal).
    pair = _copy(killed, str(tmp_path / "pair.db"))
    first = MemoryManager(pair, embedding=None)
    with first, MemoryManager(pair, embedding=None) as second:
        assert _texts(second.get_messages("thread")) == _EXPECTED
        assert _texts(first.get_messages("thread")) == _EXPECTED
    assert _due(pair) == []
    # Two processes opening at once: whichever writes the session second changes nothing.
    racers = [
        subprocess.Popen([sys.executable, "-c", _COUNT, owed], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    assert [racer.communicate()[0].strip() for racer in racers] == ["4", "4"]
    with MemoryManager(owed, embedding=None) as mm:
        assert _texts(mm.get_messages("thread")) == _EXPECTED


def test_without_langchain_the_turn_stays_owed_and_reading_works(owed: str) -> None:
    reader = """
import logging, sys
sys.modules["langchain_core"] = None  # as if LangChain were not installed
logging.basicConfig(level=logging.WARNING)
from harombe_core import MemoryManager
for _ in range(2):
    with MemoryManager(sys.argv[1], embedding=None) as mm:
        mm.flush()
        print(len(mm.get_messages("thread")), len(mm.list_sessions()))
"""
    out = _python(reader, owed)
    assert out.stdout.split("\n")[:2] == ["0 1", "0 1"]
    assert out.stderr.count("checkpoint_mirror_due marks rows still owed") == 1, out.stderr
    assert _due(owed) == [("thread",)]  # for the next process that can derive it
    with MemoryManager(owed, embedding=None) as mm:  # this one can
        assert _texts(mm.get_messages("thread")) == _EXPECTED


def test_postgres_a_bare_manager_reads_the_owed_turn(pg_url: str) -> None:
    _kill_while_owed(pg_url)
    with MemoryManager(pg_url, embedding=None) as mm:
        assert _texts(mm.get_messages("thread")) == _EXPECTED
        assert f"turn {_WORDS[0]}" in [h.message.content for h in mm.search(_WORDS[0])]
        mm.flush()
    import psycopg

    with psycopg.connect(pg_url) as raw:
        assert raw.execute("SELECT thread_id FROM checkpoint_mirror_due").fetchall() == []


def test_opening_with_nothing_owed_loads_no_adapter(tmp_path: Path) -> None:
    reader = """
import sys
from harombe_core import MemoryManager
with MemoryManager(sys.argv[1], embedding=None) as mm:
    mm.get_messages(mm.create_session())
print(sorted({n.split(".")[0] for n in sys.modules if n.startswith("lang")}))
"""
    out = _python(reader, str(tmp_path / "fresh.db"))
    assert out.stdout.strip() == "[]"


def test_a_reader_and_the_live_saver_that_owes_the_turn_both_write_it(tmp_path: Path) -> None:
    # The owing process is alive here (its worker held): another process's open derives the
    # session first, then the saver's own job runs and finds nothing left to change.
    import itertools

    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage

    from harombe_core.testing import hold_background
    from langchain_harombe import HarombeSaver

    db = str(tmp_path / "live.db")
    replies = (AIMessage(f"reply {n}") for n in itertools.count())
    with MemoryManager(db, embedding=None) as mm:
        saver = HarombeSaver(mm)
        agent = create_agent(GenericFakeChatModel(messages=replies), [], checkpointer=saver)
        config = {"configurable": {"thread_id": "thread", "user_id": "ann"}}
        with hold_background():
            for word in _WORDS:
                agent.invoke({"messages": [HumanMessage(f"turn {word}")]}, config)
            assert _due(db) == [("thread",)]
            assert _python(_COUNT, db).stdout.strip() == "4"
            assert _due(db) == []
        mm.flush()
        assert _texts(mm.get_messages("thread")) == _EXPECTED
        agent.invoke({"messages": [HumanMessage("turn three")]}, config)
        assert _texts(mm.get_messages("thread")) == [
            *_EXPECTED,
            ("user", "turn three"),
            ("assistant", "reply 2"),
        ]
        saver.close()


def test_harombe_serve_reads_the_owed_turn(owed: str) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from harombe_core.server.api import create_app

    app = create_app(owed, auth=False)  # its manager's open writes the owed session
    try:
        with TestClient(app, base_url="http://127.0.0.1") as http:
            messages = http.get("/api/sessions/thread/messages").json()
            assert [(m["role"], m["content"]) for m in messages] == _EXPECTED
            hits = http.get("/api/search", params={"q": _WORDS[1]}).json()
            assert any(_WORDS[1] in str(hit) for hit in hits)
    finally:
        app.state.harombe.manager.close()


class _Chat(TypedDict):
    """A graph's state whose conversation is the channel ``chat``."""

    chat: Annotated[list[AnyMessage], add_messages]


def test_a_thread_kept_in_another_channel_is_left_to_its_saver(tmp_path: Path) -> None:
    # A saver with messages_key="chat": a bare opener cannot tell which channel holds the
    # conversation, so it leaves the thread marked rather than empty the session.
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import StateGraph

    from harombe_core.testing import hold_background
    from langchain_harombe import HarombeSaver

    def reply(state: _Chat) -> dict[str, list[AnyMessage]]:
        return {"chat": [AIMessage(f"reply to {state['chat'][-1].text}")]}

    db = str(tmp_path / "chat.db")
    builder = StateGraph(_Chat)
    builder.add_node("reply", reply)
    builder.set_entry_point("reply")
    with MemoryManager(db, embedding=None) as mm:
        saver = HarombeSaver(mm, messages_key="chat")
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "thread"}}
        graph.invoke({"chat": [HumanMessage("one")]}, config)
        assert len(mm.get_messages("thread")) == 2
        with hold_background():
            graph.invoke({"chat": [HumanMessage("two")]}, config)
            assert _python(_COUNT, db).stdout.strip() == "2"  # left as it was
            assert _due(db) == [("thread",)]
        assert [m.content for m in mm.get_messages("thread")] == [
            "one",
            "reply to one",
            "two",
            "reply to two",
        ]
        saver.close()
