"""`harombe migrate` carries LangGraph checkpoints: a thread moved to PostgreSQL and back
resumes there, its session still holding exactly its messages, and a re-run copies nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage

from harombe_core.manager import MemoryManager
from harombe_core.migrate import MigrationError, migrate
from harombe_core.migrate.tables import CHECKPOINT_TABLES
from langchain_harombe import HarombeSaver, RecordingChatModel

CONFIG = {"configurable": {"thread_id": "t1", "user_id": "ann"}}


def _agent(manager: MemoryManager, replies: list[Any]) -> Any:
    return create_agent(RecordingChatModel(responses=replies), checkpointer=HarombeSaver(manager))


def _thread(location: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]], int]:
    """(state messages, session messages, checkpoints) of thread t1."""
    with MemoryManager(location, embedding=None) as manager:
        agent = _agent(manager, [])
        state = [(m.type, m.text) for m in agent.get_state(CONFIG).values["messages"]]
        session = [(m.role, m.content) for m in manager.get_messages("t1")]
        count = len(list(agent.get_state_history(CONFIG)))
    return state, session, count


@pytest.fixture
def source(tmp_path: Path) -> str:
    path = str(tmp_path / "source.db")
    with MemoryManager(path, embedding=None) as manager:
        agent = _agent(manager, ["Hello Ann.", "Noted."])
        agent.invoke({"messages": [HumanMessage("I am Ann")]}, CONFIG)
        agent.invoke({"messages": [HumanMessage("I like tea")]}, CONFIG)
    return path


def test_a_thread_moves_to_postgres_and_back_and_resumes(
    source: str, pg_url: str, tmp_path: Path
) -> None:
    expected = _thread(source)
    assert expected[1] == [("user", "I am Ann"), ("assistant", "Hello Ann."),
                           ("user", "I like tea"), ("assistant", "Noted.")]
    report = migrate(source, pg_url, batch_size=3, progress=False)
    assert report.verified
    assert report.checkpoint_rows == report.copied_checkpoint_rows > 0
    assert _thread(pg_url) == expected

    with MemoryManager(pg_url, embedding=None) as manager:  # the thread goes on there
        agent = _agent(manager, [AIMessage("You like tea.")])
        agent.invoke({"messages": [HumanMessage("what do I like?")]}, CONFIG)
        assert [m.content for m in manager.get_messages("t1")][-2:] == [
            "what do I like?", "You like tea."]
        assert len(manager.get_messages("t1")) == 6, "nothing was recorded twice"

    back = str(tmp_path / "back.db")
    migrate(pg_url, back, batch_size=500, progress=False)
    assert _thread(back) == _thread(pg_url)
    with sqlite3.connect(back) as b, sqlite3.connect(source) as a:
        query = "SELECT * FROM checkpoint_message_blobs ORDER BY 1, 2"
        assert set(a.execute(query).fetchall()) <= set(b.execute(query).fetchall())


def test_a_rerun_copies_nothing_and_a_conflict_is_refused(source: str, tmp_path: Path) -> None:
    target = str(tmp_path / "target.db")
    first = migrate(source, target, batch_size=2, progress=False)
    again = migrate(source, target, batch_size=2, progress=False)
    assert (again.checkpoint_rows, again.copied_checkpoint_rows) == (first.checkpoint_rows, 0)
    with sqlite3.connect(target) as db:
        tables = [t.name for t in CHECKPOINT_TABLES]
        assert all(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables)
        db.execute("UPDATE checkpoint_threads SET blob_epoch = 'other'")
    with pytest.raises(MigrationError, match="checkpoint_threads"):
        migrate(source, target, progress=False)
