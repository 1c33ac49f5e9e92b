"""The hybrid and threaded windows read in O(window) rows give exactly what the whole-session
functions give, on SQLite (memory and file) and PostgreSQL, for any session hypothesis draws:
important flags of every kind (true, false, scores, booleans), any parent links (cycles and
links to other sessions included) and any budget."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harombe_core.context import SYNC_FOLD
from harombe_core.context_reads import (
    hybrid_from_store,
    newest_messages,
    read_newest,
    thread_window_from_store,
)
from harombe_core.flows import drive
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.store.runner import SQLITE
from harombe_core.strategies import hybrid_window, thread_path_newest_first, window_newest

_sessions = itertools.count()

METADATA = st.sampled_from(
    [
        {},
        {"important": True},
        {"important": False},
        {"important": "yes"},
        {"importance": 0.9},
        {"importance": 0.7},
        {"importance": 0.2},
        {"importance": 1},
        {"importance": True},
        {"importance": "0.9"},
        {"important": True, "importance": 0.1},
    ]
)
MESSAGE = st.tuples(
    st.sampled_from(["user", "assistant", "tool"]),
    st.integers(0, 40),  # token count
    METADATA,
    st.one_of(st.none(), st.integers(0, 60)),  # parent: an earlier message (by index mod count)
)
SESSION = st.lists(MESSAGE, max_size=40)
settings_ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _fill(mm: MemoryManager, rows: list[tuple[Any, ...]], foreign: int | None) -> str:
    sid = mm.create_session(None, session_id=f"ctx{next(_sessions)}")
    ids: list[int] = []
    for role, tokens, metadata, parent in rows:
        message = Message(role=role, content=f"{role} {len(ids)}", metadata=metadata)
        linked = None if parent is None or not ids else ids[parent % len(ids)]
        if parent is not None and parent % 7 == 6 and foreign is not None:
            linked = foreign  # a link into another session ends the thread
        ids += mm.store.run(
            ops.add_messages(sid, [message.with_ids(token_count=tokens, parent_id=linked)])
        )
    if len(ids) > 2 and rows[0][3] == 0:
        mm.store.run(ops.set_parent(ids[0], ids[-1]))  # a cycle through the whole session
    return sid


@pytest.fixture
def foreign(manager: MemoryManager) -> int:
    other = manager.create_session(None, session_id=f"other{next(_sessions)}")
    return manager.save_message(other, Message(role="user", content="elsewhere"))


@settings_
@given(rows=SESSION, budget=st.integers(0, 400), keep_last=st.integers(0, 8), on_user=st.booleans())
def test_hybrid_reads_equal_the_whole_session(
    manager: MemoryManager,
    foreign: int,
    rows: list[Any],
    budget: int,
    keep_last: int,
    on_user: bool,
) -> None:
    sid = _fill(manager, rows, foreign)
    store = manager.store
    summary = Message(role="system", content="digest").with_ids(token_count=5)
    expected = hybrid_window(
        drive(read_newest(store, sid, lambda m: False)),
        budget,
        system=[],
        summary=summary,
        keep_last=keep_last,
        start_on_user=on_user,
    )
    got = drive(
        hybrid_from_store(
            store,
            sid,
            drive(newest_messages(store, sid, keep_last + 1)),
            budget,
            system=[],
            summary=summary,
            keep_last=keep_last,
            start_on_user=on_user,
        )
    )
    assert [m.id for m in got.messages] == [m.id for m in expected.messages]
    assert got.tokens == expected.tokens


@settings_
@given(rows=SESSION, budget=st.integers(0, 400), on_user=st.booleans())
def test_thread_reads_equal_the_whole_session(
    manager: MemoryManager, foreign: int, rows: list[Any], budget: int, on_user: bool
) -> None:
    sid = _fill(manager, rows, foreign)
    store = manager.store
    every = store.run(ops.get_messages(sid))
    got = drive(thread_window_from_store(store, sid, budget, system=[], start_on_user=on_user))
    if not any(m.parent_id is not None for m in every):
        assert got is None
        return
    expected = window_newest(thread_path_newest_first(every), budget, start_on_user=on_user)
    assert got is not None
    assert [m.id for m in got.messages] == [m.id for m in expected.messages]
    assert got.tokens == expected.tokens


def test_context_strategies_read_only_the_window(manager: MemoryManager) -> None:
    """get_context's hybrid and threaded strategies never load the whole session."""
    sid = manager.create_session("be brief")
    for i in range(300):
        meta = {"important": True} if i % 100 == 50 else {}
        manager.save_message(
            sid,
            Message(role="user" if i % 2 == 0 else "assistant", content=f"turn {i}", metadata=meta),
        )
    store = manager.store
    calls: list[int] = []
    background: list[int] = []
    run = store.run
    caller = threading.get_ident()

    def running(op: Any) -> Any:
        # A list of messages read (get_messages): the LIMIT of its statement. The background
        # folder may start before get_context returns: its reads are its own.
        if op.body.__qualname__.startswith("get_messages."):
            limit = next(op.body(SQLITE)).params[-1]
            (calls if threading.get_ident() == caller else background).append(limit)
        return run(op)

    store.run = running  # type: ignore[method-assign]
    manager.summary_chunk = 50
    hybrid = manager.get_context(sid, "hybrid", 200, keep_last=4)
    # the summary reads one bounded list to see the backlog is long, and leaves it to the
    # background folder; nothing else reads a list of messages
    assert calls == [SYNC_FOLD + 1], calls
    important = [m for m in hybrid if m.metadata.get("important")]
    assert [m.content for m in important] == ["turn 50", "turn 150", "turn 250"]
    manager.flush()  # waits for the background folding, in steps of summary_chunk
    assert background, calls
    assert set(background) == {50}, background
    ids = [m.id for m in manager.get_messages(sid)]
    assert manager.get_session(sid).summary_until_id == ids[-5]  # all but the newest 4
    calls.clear()
    manager.get_context(sid, "threaded", 200)
    assert calls == []


@pytest.mark.parametrize("strategy", ["simple", "summarization", "hybrid", "threaded"])
def test_get_context_reads_the_session_once(manager: MemoryManager, strategy: str) -> None:
    sid = manager.create_session("be brief", session_id=f"once{next(_sessions)}")
    previous = None
    for i in range(40):
        message = Message(role="user" if i % 2 == 0 else "assistant", content=f"turn {i}")
        previous = manager.store.run(
            ops.add_messages(sid, [message.with_ids(token_count=5, parent_id=previous)])
        )[0]
    store = manager.store
    reads: list[str] = []
    run = store.run

    def running(op: Any) -> Any:  # every read of the session is one of these operations
        if op.body.__qualname__.startswith(("get_session.", "session_and_prompt.")):
            reads.append("op")
        return run(op)

    store.run = running  # type: ignore[method-assign]
    context = manager.get_context(sid, strategy, 100, keep_last=4)
    assert len(reads) == 1, reads
    assert context[0].content == "be brief"
    assert context[-1].content == "turn 39"


def test_unknown_strategy_names_every_strategy(manager: MemoryManager) -> None:
    from harombe_core.context import STRATEGIES
    from harombe_core.errors import InvalidInputError

    with pytest.raises(InvalidInputError) as caught:
        manager.get_context("s", "newest")
    assert all(repr(name) in str(caught.value) for name in STRATEGIES)
