"""A run deleted from a LangGraph thread on PostgreSQL never comes back through the thread's
background session write, whatever the order in which the two transactions meet.

The background write (``HarombeSaver._mirror_step``) makes the thread's session hold its newest
checkpoint's messages, using those a put of this process left in memory when that checkpoint is
still the newest. It locks the session's row to decide; ``delete_for_runs`` holds the same lock
while it deletes the run's checkpoints. A ``SELECT ... FOR UPDATE`` that waited for that lock
evaluated its subqueries in the snapshot taken before the wait (READ COMMITTED), so it still saw
the deleted run's checkpoint as the newest and wrote its messages back. The test forces exactly
that order: the delete holds the lock, the background write starts and waits, the delete commits.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage

from harombe_core import MemoryManager
from langchain_harombe import HarombeSaver
from langchain_harombe.checkpoint_sql import CheckpointTables
from tests.langchain.test_deletion import _graph
from tests.reliability.test_deletion import token


def _waiting_for_a_lock(pg_url: str) -> int:
    """How many backends of this database wait for a row lock now."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    return int(row[0]) if row else 0


def _until(condition: Any, what: str) -> None:
    """Wait for ``condition()`` (a state another thread reaches), failing after a minute."""
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting: {what}")
        time.sleep(0.01)


def test_a_background_session_write_waiting_on_delete_for_runs_does_not_restore_the_run(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = token()
    with MemoryManager(pg_url, embedding=None) as mm:
        saver = HarombeSaver(mm)
        tables = saver._tables
        heads: list[Any] = []
        plan_head = CheckpointTables.plan_head

        def remembered(self: CheckpointTables, plan: Any) -> Any:
            head = plan_head(self, plan)
            heads.append(head)
            return head

        monkeypatch.setattr(CheckpointTables, "plan_head", remembered)
        graph = _graph(saver)
        graph.invoke({"messages": [HumanMessage("hello")]}, _config(run_id="r1"))
        graph.invoke({"messages": [HumanMessage(f"my pin is {secret}")]}, _config(run_id="r2"))
        mm.flush()
        assert any(secret in m.content for m in mm.get_messages("t"))
        stale_head = heads[-1]  # the newest checkpoint as r2's last put left it in memory

        holding, release = threading.Event(), threading.Event()
        drop_orphans = CheckpointTables._drop_orphans

        def held(self: CheckpointTables, thread_id: str, epoch: str) -> Any:
            holding.set()  # the delete holds the session's row, the run's checkpoints gone
            release.wait(60)
            return (yield from drop_orphans(self, thread_id, epoch))

        monkeypatch.setattr(CheckpointTables, "_drop_orphans", held)
        errors: list[BaseException] = []

        def delete() -> None:
            try:
                saver.delete_for_runs(["r2"])
            except BaseException as exc:
                errors.append(exc)

        def background_write() -> None:
            try:
                saver._runner.run(lambda: tables.mirror("t", stale_head, {}), exactly_once=True)
            except BaseException as exc:
                errors.append(exc)

        deleting = threading.Thread(target=delete)
        deleting.start()
        _until(holding.is_set, "the delete to take the thread's lock")
        writing = threading.Thread(target=background_write)
        writing.start()
        _until(lambda: _waiting_for_a_lock(pg_url) >= 1, "the session write to wait for it")
        release.set()
        deleting.join(60)
        writing.join(60)
        assert errors == []
        texts = [m.content for m in mm.get_messages("t")]
        assert texts == ["hello", "noted"]
        assert mm.store.keyword_search(secret, limit=5) == []
        state = graph.get_state(_config())
        assert [m.text for m in state.values["messages"]] == ["hello", "noted"]


def _config(**more: str) -> Any:
    return {"configurable": {"thread_id": "t", **more}}
