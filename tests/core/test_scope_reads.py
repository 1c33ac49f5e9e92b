"""Reads whose cost follows their scope, not the store: summary search and message counts.

The proof is SQLite's own work. While a test holds the store's connection (every call on the
thread runs on it), a progress handler counts the virtual-machine steps of every statement and
a trace callback records the statements. A read that scanned the store would take more steps
once other users' sessions (or a long other session) are added; these take exactly as many.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from harombe_core.errors import InvalidInputError, SessionOwnershipError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.testing import FakeEmbedder, InMemoryVectorIndex


@contextmanager
def sqlite_work(mm: MemoryManager) -> Iterator[dict[str, Any]]:
    """Count the VM steps and statements SQLite runs for this thread while the block is open."""
    seen: dict[str, Any] = {"steps": 0, "statements": []}

    def step() -> int:
        seen["steps"] += 1
        return 0

    with mm.store.file.connection() as conn:  # type: ignore[attr-defined]
        conn.set_progress_handler(step, 1)
        conn.set_trace_callback(seen["statements"].append)
        try:
            yield seen
        finally:
            conn.set_progress_handler(None, 1)
            conn.set_trace_callback(None)


def work_of(mm: MemoryManager, read: Callable[[], Any]) -> tuple[Any, int, int]:
    """``read()``'s result, its VM steps and its SELECT statements."""
    with sqlite_work(mm) as seen:
        result = read()
    selects = [s for s in seen["statements"] if s.lstrip().upper().startswith("SELECT")]
    return result, seen["steps"], len(selects)


def talk(topic: str) -> list[Message]:
    return [
        Message(role="user", content=f"We planned the {topic} migration to postgres on Friday."),
        Message(role="assistant", content=f"The {topic} migration needs a freeze first."),
    ]


def summarised(mm: MemoryManager, user: str, topic: str, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        sid = mm.create_session(user_id=user, session_id=f"{user}-{n}")
        mm.save_messages(sid, talk(topic))
        mm.end_session(sid)


@pytest.fixture(params=["keyword", "semantic"])
def mm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryManager]:
    if request.param == "keyword":
        manager = MemoryManager(str(tmp_path / "m.db"), embedding=None)
    else:
        manager = MemoryManager(
            str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store=InMemoryVectorIndex()
        )
    try:
        yield manager
    finally:
        manager.close()


def test_search_summaries_costs_the_users_sessions_not_the_stores(mm: MemoryManager) -> None:
    summarised(mm, "alice", "billing", 3)
    summarised(mm, "bob", "billing", 2)  # the same words: only the scope keeps them out
    for n in range(3):
        mm.create_session(user_id="alice", session_id=f"alice-open-{n}")  # no summary yet

    def search() -> list[Any]:
        return mm.search_summaries("billing migration", top_k=2, user_id="alice")

    before, steps, statements = work_of(mm, search)
    summarised(mm, "bob", "billing", 40, start=2)
    for n in range(40):
        mm.create_session(user_id=f"user{n}", session_id=f"user{n}")
    after, steps_after, statements_after = work_of(mm, search)
    assert [s.id for s, _ in before] == [s.id for s, _ in after]
    assert len(before) == 2
    assert {s.user_id for s, _ in before} == {"alice"}
    assert (steps_after, statements_after) == (steps, statements)
    # One read of the scope's summaries, then one per session returned.
    assert statements == 1 + len(before)


def test_search_summaries_scores_as_before(mm: MemoryManager) -> None:
    summarised(mm, "alice", "billing", 1)
    summarised(mm, "alice", "travel", 1, start=1)
    hits = mm.search_summaries("billing", user_id="alice")
    assert hits[0][0].id == "alice-0"
    assert mm.search_summaries("billing", user_id="carol") == []
    everyone = mm.search_summaries("migration", top_k=50)
    assert {s.id for s, _ in everyone} == {"alice-0", "alice-1"}
    assert next(pair[0].id for pair in asyncio.run(mm.asearch_summaries("billing"))) == "alice-0"


# counts -------------------------------------------------------------------------------------
def test_count_messages_counts_in_sql_within_the_session(tmp_path: Path) -> None:
    mm = MemoryManager(str(tmp_path / "m.db"), embedding=None)
    try:
        sid = mm.create_session(user_id="alice", session_id="short")
        marked = {"status": "archived"}
        ids = mm.save_messages(
            sid,
            [
                Message(role="user", content=f"m{n}", metadata=marked if n % 3 == 0 else {})
                for n in range(12)
            ],
        )
        other = mm.create_session(user_id="bob", session_id="long")
        mm.save_messages(other, [Message(role="user", content="x")] * 50)

        def count() -> int:
            return mm.count_messages(sid, after_id=ids[3], unless_metadata=marked, user_id="alice")

        first, steps, statements = work_of(mm, count)
        mm.save_messages(other, [Message(role="user", content="x")] * 2000)
        again, steps_after, statements_after = work_of(mm, count)
        expected = [m for m in mm.get_messages(sid) if m.id > ids[3] and m.metadata != marked]
        assert first == again == len(expected) == 6
        assert (steps_after, statements_after) == (steps, statements)
        assert statements == 2  # the session (its owner), then one COUNT
        assert mm.count_messages(sid) == 12
        assert mm.count_messages("nowhere") == 0
        assert asyncio.run(mm.acount_messages(sid, unless_metadata=marked)) == 8
        with pytest.raises(SessionOwnershipError):
            mm.count_messages(sid, user_id="bob")
        with pytest.raises(InvalidInputError):
            mm.count_messages(sid, unless_metadata={"status": 1})  # type: ignore[dict-item]
        with pytest.raises(InvalidInputError):
            mm.count_messages(sid, after_id=-1)
    finally:
        mm.close()


def test_search_summaries_of_every_user_reads_only_the_matches(tmp_path: Path) -> None:
    """Without a user, a search by words goes through the summaries' keyword index: sessions
    whose summary shares no word with the query are never read, however many there are."""
    mm = MemoryManager(str(tmp_path / "m.db"), embedding=None)
    try:
        summarised(mm, "alice", "billing", 2)
        summarised(mm, "bob", "billing", 1)

        def search() -> list[Any]:
            return mm.search_summaries("billing", top_k=10)

        before, _, statements = work_of(mm, search)
        for n in range(200):  # other users, other words: no summary holds "billing"
            sid = mm.create_session(user_id=f"user{n}", session_id=f"user{n}")
            mm.save_messages(sid, [Message(role="user", content=f"Lunch plans for week {n}.")])
            mm.end_session(sid)
        after, steps_after, statements_after = work_of(mm, search)
        billing = {"alice-0", "alice-1", "bob-0"}
        assert {s.id for s, _ in before} == {s.id for s, _ in after} == billing
        assert statements_after == statements == 1 + len(before)
        # FTS5's pages grow a little with the index, but nowhere near reading every summary.
        _, every, _ = work_of(mm, lambda: mm.store.run(ops.summarised_sessions(None)))
        assert steps_after * 4 < every
        rows = mm.store.run(ops.summaries_matching(["billing"]))
        assert sorted(r[0] for r in rows) == ["alice-0", "alice-1", "bob-0"]
        assert mm.store.run(ops.summaries_matching([])) == []
        # the index follows the summaries: a new summary is found, a deleted session is not
        mm.delete_session("bob-0")
        assert {s.id for s, _ in mm.search_summaries("billing", top_k=10)} == {
            "alice-0",
            "alice-1",
        }
        assert {s.id for s, _ in mm.search_summaries("lunch", top_k=500)} == {
            f"user{n}" for n in range(200)
        }
    finally:
        mm.close()
