"""Search is one flow: the async path hops to a worker thread once per read, none around a call.

``MemoryManager.asearch`` (and ``asearch_by_topic``, ``aget_relevant_context``, a budgeted
``aget_context`` with a query) drive the retriever's flow with ``adrive``: each store read is
one store operation in a worker thread (``SQLiteStore.run``), the query's embedding is the
embedder's async twin, and each vector read (the nearest neighbours, the candidates' stored
vectors) is one request of its own. No hop wraps a whole search, no store transaction runs on
the event loop, and every answer is the sync path's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harombe_core import ContextBudget, MemoryManager, Message
from harombe_core.testing import FakeEmbedder

#: What an async search may hand to a worker thread: a store operation, the query's
#: embedding, a vector read. Nothing else (no whole search, no ranking).
READS = {"run", "embed_query", "embed", "nearest", "vectors_or_pending", "vectors_for"}

TURNS = [
    ("user", "Ann", "I started painting watercolours of the harbour last week"),
    ("assistant", None, "Watercolours of the harbour sound lovely. Which colours?"),
    ("user", "Ann", "Mostly blues, and a red boat that is moored by the pier"),
    ("assistant", None, "A red boat against blue water is a classic contrast."),
    ("user", "Ann", "My sister Mia plays the cello in an orchestra"),
    ("assistant", None, "Does Mia play in concerts often?"),
]


@pytest.fixture(params=["hybrid", "keyword"])
def mm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryManager]:
    embedding = FakeEmbedder() if request.param == "hybrid" else None
    with MemoryManager(str(tmp_path / "s.db"), embedding=embedding) as manager:
        for sid in ("art", "family"):
            manager.create_session("Be brief.", user_id="ann", session_id=sid)
        for i, (role, name, text) in enumerate(TURNS):
            sid = "art" if i < 4 else "family"
            manager.save_message(sid, Message(role=role, content=text, name=name))
        manager.flush()
        yield manager


def _calls(mm: MemoryManager) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, sync call, async call) of every search entry point, with options that make
    each kind of read happen (neighbours, MMR, a speaker named in the query)."""
    budget = ContextBudget()
    return [
        ("search", lambda: mm.search("red boat", top_k=3), lambda: mm.asearch("red boat", 3)),
        (
            "search, speaker and MMR",
            lambda: mm.search("What does Ann paint?", 3, user_id="ann", mmr_lambda=0.5),
            lambda: mm.asearch("What does Ann paint?", 3, user_id="ann", mmr_lambda=0.5),
        ),
        (
            "search in a session",
            lambda: mm.search("cello", 2, session_id="family", user_id="ann"),
            lambda: mm.asearch("cello", 2, session_id="family", user_id="ann"),
        ),
        (
            "search_by_topic",
            lambda: mm.search_by_topic("harbour painting", 2, user_id="ann"),
            lambda: mm.asearch_by_topic("harbour painting", 2, user_id="ann"),
        ),
        (
            "get_relevant_context",
            lambda: mm.get_relevant_context("boat", 200, user_id="ann", exclude_session_id="x"),
            lambda: mm.aget_relevant_context("boat", 200, user_id="ann", exclude_session_id="x"),
        ),
        (
            "get_context with a query",
            lambda: mm.get_context("family", budget=budget, query="red boat", user_id="ann"),
            lambda: mm.aget_context("family", budget=budget, query="red boat", user_id="ann"),
        ),
    ]


def _comparable(value: Any) -> Any:
    """A context's blocks are stamped with the time they are made: leave ``created_at`` out."""
    if isinstance(value, list) and value and isinstance(value[0], Message):
        return [(m.role, m.content, m.id, m.token_count) for m in value]
    return value


async def test_async_search_hops_once_per_read_and_answers_as_sync(
    mm: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.get_ident()
    real_run, real_hop = mm.store.run, asyncio.to_thread
    hops: list[str] = []
    on_loop: list[str] = []

    def run(op: Any) -> Any:
        if threading.get_ident() == loop_thread:
            on_loop.append(op.body.__qualname__)
        return real_run(op)

    async def hop(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await real_hop(fn, *args, **kwargs)

    monkeypatch.setattr(mm.store, "run", run)
    for name, sync_call, async_call in _calls(mm):
        want = sync_call()
        assert want, name  # every call found something: every kind of read ran
        hops.clear()
        on_loop.clear()
        with monkeypatch.context() as patched:
            patched.setattr(asyncio, "to_thread", hop)
            got = await async_call()
        assert on_loop == [], (name, on_loop)  # no store transaction ran on the event loop
        assert _comparable(got) == _comparable(want), name
        assert set(hops) <= READS, (name, hops)
        assert hops.count("run") >= 2, (name, hops)  # the keyword side, and more reads
        if mm.semantic_enabled:
            assert "embed_query" in hops or "embed" in hops, (name, hops)
            assert "nearest" in hops, (name, hops)
