"""Cancelling an async call at every await point it has, and many tasks on one object.

Every await of the library's async methods is a hop to a worker thread (``asyncio.to_thread``
under ``flows.off_loop``) or a native await between them. ``cancel_at_hop`` cancels the calling
task at the Nth hop, before the hop's work starts or after it ends, for every N the call has
(counted on an uncancelled run), so each await point is hit deterministically. After each
cancel: the call took effect fully or not at all, the object still works (no lock held, no
transaction open), and after ``flush`` every write acknowledged before is in the database
and found by keyword and by vector search.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.testing import FakeEmbedder

Make = Callable[[], Callable[[], Awaitable[Any]]]


class HopCanceller:
    """Counts thread hops and cancels ``target`` at hop ``at`` (``before`` or after it runs)."""

    def __init__(self, real: Callable[..., Awaitable[Any]]) -> None:
        self.real = real
        self.count = 0
        self.at: int | None = None
        self.before = True
        self.target: asyncio.Task[Any] | None = None

    async def hop(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        index, self.count = self.count, self.count + 1
        if index == self.at and self.before and self.target is not None:
            self.target.cancel()
        result = await self.real(fn, *args, **kwargs)
        if index == self.at and not self.before and self.target is not None:
            self.target.cancel()
        return result

    async def hops(self, call: Callable[[], Awaitable[Any]]) -> int:
        self.count, self.at = 0, None
        await call()
        return self.count

    async def cancelled_at(self, call: Callable[[], Awaitable[Any]], at: int, before: bool) -> bool:
        """Run ``call`` as a task cancelled at hop ``at``; True if it ended cancelled."""
        self.count, self.at, self.before = 0, at, before
        task = asyncio.ensure_future(call())
        self.target = task
        try:
            await asyncio.wait_for(asyncio.shield(task), 60)
        except asyncio.CancelledError:
            return True
        finally:
            self.target = None
        return False


@pytest.fixture
def canceller(monkeypatch: pytest.MonkeyPatch) -> HopCanceller:
    hops = HopCanceller(asyncio.to_thread)
    monkeypatch.setattr(asyncio, "to_thread", hops.hop)
    return hops


@pytest.fixture(params=["database", "chroma"])
def semantic(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryManager]:
    """A file database with semantic memory, its vectors in the database or in Chroma."""
    if request.param == "chroma":
        pytest.importorskip("chromadb")
    mm = MemoryManager(str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store=request.param)
    try:
        yield mm
    finally:
        mm.close()


_words = itertools.count()


def _word() -> str:
    return f"zq{next(_words)}x"


async def _sweep(
    canceller: HopCanceller,
    make: Callable[[], tuple[Callable[[], Awaitable[Any]], list[str]]],
    stored: Callable[[], list[str]],
    acknowledged: list[str],
    still_works: Callable[[], Awaitable[Any]],
) -> int:
    """Cancel ``make()``'s call at each of its hops, before and after; checks all-or-nothing
    on the words it writes, and that ``still_works`` then succeeds. Returns the hops."""
    call, _ = make()
    hops = await canceller.hops(call)
    assert hops >= 1
    for at in range(hops + 1):
        for before in (True, False):
            call, words = make()
            cancelled = await canceller.cancelled_at(call, at, before)
            text = " ".join(stored())
            present = [w for w in words if w in text]
            assert present in ([], words), (at, before, present)  # all or nothing
            if not cancelled:
                assert present == words
                acknowledged += words
            await asyncio.wait_for(still_works(), 60)
    return hops


def sweep_session(
    canceller: HopCanceller,
    mm: MemoryManager,
    session_id: str,
    makes: list[Callable[[], tuple[Callable[[], Awaitable[Any]], list[str]]]],
    still_works: Callable[[], Awaitable[Any]],
    acknowledged: list[str],
) -> None:
    """:func:`_sweep` each of ``makes`` (calls writing to ``session_id``), then check every
    acknowledged word is stored once and found."""

    async def sweep_all() -> None:
        stored = lambda: [m.content for m in mm.get_messages(session_id)]  # noqa: E731
        for make in makes:
            await _sweep(canceller, make, stored, acknowledged, still_works)

    asyncio.run(sweep_all())
    _check_found(mm, acknowledged, session_id)


def _check_found(mm: MemoryManager, acknowledged: list[str], session_id: str) -> None:
    mm.flush(timeout=60)
    text = [m.content for m in mm.get_messages(session_id)]
    for word in acknowledged:
        assert sum(word in t for t in text) == 1, word
        hits = mm.search(word, top_k=3, session_id=session_id)
        assert any(word in h.message.content for h in hits), word
        similar = mm.search_similar(f"note {word}", top_k=3, session_id=session_id)
        assert any(word in m.content for m in similar), word


def test_manager_async_calls_cancelled_at_every_await(
    semantic: MemoryManager, canceller: HopCanceller
) -> None:
    mm, acknowledged = semantic, []

    def save() -> tuple[Callable[[], Awaitable[Any]], list[str]]:
        word = _word()
        return (lambda: mm.asave_message("s", Message(role="user", content=f"note {word}"))), [word]

    def saves() -> tuple[Callable[[], Awaitable[Any]], list[str]]:
        words = [_word() for _ in range(3)]
        batch = [Message(role="user", content=f"note {w}") for w in words]
        return (lambda: mm.asave_messages("s", batch, user_id="u")), words

    def replace() -> tuple[Callable[[], Awaitable[Any]], list[str]]:
        words = [_word() for _ in range(2)]
        batch = [Message(role="user", content=f"note {w}") for w in words]
        return (lambda: mm.areplace_messages("s", [], batch)), words

    def reads() -> tuple[Callable[[], Awaitable[Any]], list[str]]:
        async def call() -> None:
            await mm.asearch("note", top_k=5, user_id="u")
            await mm.aget_context("s")
            await mm.aget_relevant_context("note", user_id="u")
            await mm.aadd_fact("u", f"likes {_word()}")
            await mm.aflush(timeout=60)

        return call, []

    async def still_works() -> None:
        word = _word()
        await mm.asave_message("s", Message(role="user", content=f"note {word}"))
        acknowledged.append(word)

    async def sweep_all() -> None:
        mm.save_message("s", Message(role="user", content="start"), user_id="u")
        for make in (save, saves, replace, reads):
            await _sweep(
                canceller,
                make,
                lambda: [m.content for m in mm.get_messages("s")],
                acknowledged,
                still_works,
            )

    asyncio.run(sweep_all())
    assert len(acknowledged) > 20
    _check_found(mm, acknowledged, "s")


def test_many_tasks_writing_to_one_manager_lose_nothing(tmp_path: Path) -> None:
    """50 tasks x 20 saves on one manager over 5 sessions, gathered; some tasks fail on bad
    input or raise half-way. Every acknowledged save is stored once and found."""
    with MemoryManager(str(tmp_path / "m.db"), embedding=FakeEmbedder()) as mm:
        acknowledged: list[tuple[str, int, str]] = []

        async def task(k: int) -> None:
            for j in range(20):
                if k % 7 == 3 and j == 10:
                    raise RuntimeError("this task fails half-way")
                if k % 11 == 5 and j == 5:
                    await mm.asave_message(f"s{k % 5}", {"role": "nobody", "content": "x"})
                text = f"note t{k}w{j}x"
                sid = f"s{k % 5}"
                acknowledged.append(
                    (sid, await mm.asave_message(sid, {"role": "user", "content": text}), text)
                )

        async def run_all() -> list[Any]:
            tasks = [task(k) for k in range(50)]
            return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 120)

        outcomes = asyncio.run(run_all())
        failures = collections.Counter(type(o).__name__ for o in outcomes if o is not None)
        assert failures == {"RuntimeError": 6, "InvalidMessageError": 5}  # (task 38: bad input)
        assert len(acknowledged) == 39 * 20 + 6 * 10 + 5 * 5
        mm.flush(timeout=60)
        for sid, message_id, text in acknowledged[::17]:
            hits = mm.search(text.split()[-1], top_k=3, session_id=sid)
            assert [h.message.id for h in hits][:1] == [message_id]
        stored = {m.id: m.content for s in range(5) for m in mm.get_messages(f"s{s}")}
        assert stored == {message_id: text for _, message_id, text in acknowledged}


def test_cancelled_save_after_its_commit_still_wakes_fact_extraction(
    tmp_path: Path, canceller: HopCanceller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save cancelled after its commit (before it returns) has still woken the background
    fact extractor for its session: the wake-up is part of the commit's thread step, so those
    messages do not wait for the session's next write to be extracted."""
    mm = MemoryManager(str(tmp_path / "m.db"))
    woken: list[str] = []
    monkeypatch.setattr(mm._facts, "notify", woken.append)
    batch = [Message(role="user", content="I live in Lisbon")]
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: mm.asave_message("s", batch[0]),
        lambda: mm.asave_messages("s", batch),
        lambda: mm.areplace_messages("s", [], batch),
    ]

    async def sweep() -> None:
        for call in calls:
            hops = await canceller.hops(call)
            for at in range(hops):
                woken.clear()
                before = len(mm.get_messages("s"))
                assert await canceller.cancelled_at(call, at, before=False)
                assert len(mm.get_messages("s")) == before + 1  # committed, not acknowledged
                assert woken == ["s"], (at, woken)

    try:
        asyncio.run(sweep())
    finally:
        mm.close()
