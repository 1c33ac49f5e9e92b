"""Two users on one MemoryManager: alice's secret never reaches bob through the core API.

Every call that names a user next to a session is refused with SessionOwnershipError unless the
user owns it, writes included (checked inside the write's transaction, so nothing is written);
searches scoped to bob never return alice's messages; and the context a session assembles from
"the user's other sessions" comes only from its owner's sessions, none when it has no owner.
Each refusal is paired with the same call made by alice, which does find the secret: the
queries are ones that would leak if the scope let them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harombe_core.chat_memory import ChatMemory
from harombe_core.errors import InvalidInputError, SessionOwnershipError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.strategies import ContextBudget
from harombe_core.testing import FakeEmbedder

SECRET = "pin4921zq"  # letters too: digits alone can turn up in a timestamp or an id
ALICE = "alice"
BOB = "bob"


def _text(value: Any) -> str:
    """Everything a result could show a user, as one string (messages, sessions, summaries)."""
    return repr(value)


def seed(mm: MemoryManager) -> None:
    """alice: a chat holding her PIN and an older, summarised one; bob: his own chat; and a
    session without an owner (as an adapter used without a user would create)."""
    mm.create_session("You help Alice.", user_id=ALICE, session_id="alice-chat")
    mm.save_messages(
        "alice-chat",
        [
            Message(role="user", content=f"My bank PIN is {SECRET}, please remember it"),
            Message(role="assistant", content=f"Noted: your bank PIN {SECRET} is safe with me."),
            *(
                Message(role="user" if i % 2 == 0 else "assistant", content=f"chat about bank {i}")
                for i in range(8)
            ),
            Message(role="user", content=f"Remind me of the bank PIN later: {SECRET}"),
            Message(role="assistant", content="I will."),
        ],
        user_id=ALICE,
    )
    mm.save_messages(
        "alice-old",
        [
            Message(role="user", content=f"The bank PIN for my card is {SECRET}"),
            Message(role="assistant", content=f"I will remember the bank PIN {SECRET}."),
        ],
        user_id=ALICE,
    )
    mm.end_session("alice-old", user_id=ALICE)
    mm.save_messages(
        "bob-chat", [Message(role="user", content="What is my bank PIN?")], user_id=BOB
    )
    mm.save_messages("nobody-chat", [Message(role="user", content="What is my bank PIN?")])
    mm.flush()


@pytest.fixture(params=["memory", "file"])
def mm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryManager]:
    """Seeded memory with hybrid search (real ChromaDB on disk for the file database)."""
    if request.param == "memory":
        manager = MemoryManager(":memory:", embedding=None)
    else:
        manager = MemoryManager(
            str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma"
        )
    try:
        seed(manager)
        yield manager
    finally:
        manager.close()


def snapshot(mm: MemoryManager) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for s in mm.list_sessions(limit=None):
        out.append((s.id, s.user_id, s.message_count, s.summary, str(s.metadata)))
        out.extend((m.id, m.role, m.content) for m in mm.get_messages(s.id))
    return out


# writes ---------------------------------------------------------------------------------------
BOB_NOTE = Message(role="user", content="bob was here: bank PIN 0000")

WRITES: dict[str, Callable[[MemoryManager, str], Any]] = {
    "save_message": lambda mm, sid: mm.save_message(sid, BOB_NOTE, user_id=BOB),
    "save_messages": lambda mm, sid: mm.save_messages(sid, [BOB_NOTE, BOB_NOTE], user_id=BOB),
    "replace_messages": lambda mm, sid: mm.replace_messages(
        sid, [m.id for m in mm.get_messages(sid) if m.id is not None], [BOB_NOTE], user_id=BOB
    ),
    "delete_via_replace": lambda mm, sid: mm.replace_messages(
        sid, [m.id for m in mm.get_messages(sid) if m.id is not None], user_id=BOB
    ),
    "asave_message": lambda mm, sid: asyncio.run(mm.asave_message(sid, BOB_NOTE, user_id=BOB)),
    "asave_messages": lambda mm, sid: asyncio.run(
        mm.asave_messages(sid, [BOB_NOTE], user_id=BOB)
    ),
    "areplace_messages": lambda mm, sid: asyncio.run(
        mm.areplace_messages(sid, [], [BOB_NOTE], user_id=BOB)
    ),
    "clear_session": lambda mm, sid: mm.clear_session(sid, user_id=BOB),
    "delete_session": lambda mm, sid: mm.delete_session(sid, user_id=BOB),
    "aclear_session": lambda mm, sid: asyncio.run(mm.aclear_session(sid, user_id=BOB)),
    "adelete_session": lambda mm, sid: asyncio.run(mm.adelete_session(sid, user_id=BOB)),
    "summarize_session": lambda mm, sid: mm.summarize_session(sid, user_id=BOB),
    "end_session": lambda mm, sid: mm.end_session(sid, user_id=BOB),
    "aend_session": lambda mm, sid: asyncio.run(mm.aend_session(sid, user_id=BOB)),
}


@pytest.mark.parametrize("session", ["alice-chat", "nobody-chat"])
@pytest.mark.parametrize("call", sorted(WRITES))
def test_a_write_naming_a_user_who_does_not_own_the_session_is_refused(
    mm: MemoryManager, call: str, session: str
) -> None:
    before = snapshot(mm)
    with pytest.raises(SessionOwnershipError, match=f"not owned by user '{BOB}'") as caught:
        WRITES[call](mm, session)
    assert (caught.value.session_id, caught.value.user_id) == (session, BOB)
    assert snapshot(mm) == before, "a refused call writes nothing"
    mm.flush()
    hits = mm.search("bank PIN", top_k=50, user_id=ALICE)
    assert hits
    assert all("bob was here" not in h.message.content for h in hits)


def test_a_new_session_belongs_to_its_first_writer(mm: MemoryManager) -> None:
    mm.save_message("fresh", BOB_NOTE, user_id=BOB)
    assert mm.get_session("fresh").user_id == BOB
    with pytest.raises(SessionOwnershipError):
        mm.save_message("fresh", Message(role="user", content="alice's reply"), user_id=ALICE)
    assert [m.content for m in mm.get_messages("fresh", user_id=BOB)] == [BOB_NOTE.content]
    # The application itself (no user named) is not restricted, and keeps the owner.
    mm.save_message("fresh", Message(role="assistant", content="ok"))
    assert mm.get_session("fresh").user_id == BOB


# reads ----------------------------------------------------------------------------------------
READS: dict[str, Callable[[MemoryManager, str], Any]] = {
    "get_session": lambda mm, sid: mm.get_session(sid, user_id=BOB),
    "load_session": lambda mm, sid: mm.load_session(sid, user_id=BOB),
    "get_messages": lambda mm, sid: mm.get_messages(sid, user_id=BOB),
    "get_recent_messages": lambda mm, sid: mm.get_recent_messages(sid, user_id=BOB),
    "get_window": lambda mm, sid: mm.get_window(sid, 50, user_id=BOB),
    "context_simple": lambda mm, sid: mm.get_context(sid, "simple", user_id=BOB),
    "context_summarization": lambda mm, sid: mm.get_context(
        sid, "summarization", keep_last=2, user_id=BOB
    ),
    "context_hybrid": lambda mm, sid: mm.get_context(sid, "hybrid", keep_last=2, user_id=BOB),
    "context_threaded": lambda mm, sid: mm.get_context(sid, "threaded", user_id=BOB),
    "context_budget": lambda mm, sid: mm.get_context(
        sid, budget=ContextBudget(), query="bank PIN", user_id=BOB
    ),
    "search": lambda mm, sid: mm.search("bank PIN", session_id=sid, user_id=BOB),
    "search_similar": lambda mm, sid: mm.search_similar("bank PIN", session_id=sid, user_id=BOB),
    "get_relevant_context": lambda mm, sid: mm.get_relevant_context(
        "bank PIN", session_id=sid, user_id=BOB
    ),
    "check_owner": lambda mm, sid: mm.check_owner(sid, BOB),
    "aget_session": lambda mm, sid: asyncio.run(mm.aget_session(sid, user_id=BOB)),
    "aload_session": lambda mm, sid: asyncio.run(mm.aload_session(sid, user_id=BOB)),
    "aget_messages": lambda mm, sid: asyncio.run(mm.aget_messages(sid, user_id=BOB)),
    "aget_recent_messages": lambda mm, sid: asyncio.run(mm.aget_recent_messages(sid, user_id=BOB)),
    "aget_window": lambda mm, sid: asyncio.run(mm.aget_window(sid, user_id=BOB)),
    "aget_context": lambda mm, sid: asyncio.run(mm.aget_context(sid, "hybrid", user_id=BOB)),
    "asearch": lambda mm, sid: asyncio.run(mm.asearch("bank PIN", session_id=sid, user_id=BOB)),
    "aget_relevant_context": lambda mm, sid: asyncio.run(
        mm.aget_relevant_context("bank PIN", session_id=sid, user_id=BOB)
    ),
    "acheck_owner": lambda mm, sid: asyncio.run(mm.acheck_owner(sid, BOB)),
}


@pytest.mark.parametrize("call", sorted(READS))
def test_a_read_naming_a_user_who_does_not_own_the_session_is_refused(
    mm: MemoryManager, call: str
) -> None:
    with pytest.raises(SessionOwnershipError):
        READS[call](mm, "alice-chat")
    with pytest.raises(SessionOwnershipError):
        READS[call](mm, "nobody-chat")
    # The same call on bob's own session works, and shows nothing of alice's.
    mine = READS[call](mm, "bob-chat")
    assert SECRET not in _text(mine)


@pytest.mark.parametrize("strategy", ["simple", "summarization", "hybrid", "threaded"])
def test_each_context_strategy_shows_alice_her_secret_and_bob_nothing(
    mm: MemoryManager, strategy: str
) -> None:
    alice = mm.get_context("alice-chat", strategy, max_tokens=4000, keep_last=2, user_id=ALICE)
    assert SECRET in _text(alice)
    with pytest.raises(SessionOwnershipError):
        mm.get_context("alice-chat", strategy, max_tokens=4000, keep_last=2, user_id=BOB)
    bob = mm.get_context("bob-chat", strategy, max_tokens=4000, keep_last=2, user_id=BOB)
    assert SECRET not in _text(bob)


def test_a_missing_session_is_empty_for_anyone(mm: MemoryManager) -> None:
    assert mm.check_owner("nowhere", BOB) is None
    assert mm.get_messages("nowhere", user_id=BOB) == []
    assert mm.get_context("nowhere", user_id=BOB) == []


# searches -------------------------------------------------------------------------------------
def test_searches_scoped_to_bob_never_return_alices_messages(mm: MemoryManager) -> None:
    query = "what is my bank PIN"
    for user, sees_secret in ((ALICE, True), (BOB, False)):
        found = [
            mm.search(query, top_k=50, user_id=user),
            mm.search_similar(query, top_k=50, user_id=user),
            mm.get_relevant_context(query, max_tokens=4000, user_id=user),
            asyncio.run(mm.asearch(query, top_k=50, user_id=user)),
            mm.search(query, top_k=50, user_id=user, exclude_session_id="bob-chat"),
        ]
        assert (SECRET in _text(found)) is sees_secret, user
        topics = mm.search_by_topic("bank PIN", top_k=10, user_id=user)
        assert {s.user_id for s in topics} == {user}
        summaries = mm.search_summaries("bank PIN card", top_k=10, user_id=user)
        assert (SECRET in _text(summaries)) is sees_secret
        assert all(s.user_id == user for s, _ in summaries)


def test_the_full_context_recalls_only_the_owners_other_sessions(mm: MemoryManager) -> None:
    budget = ContextBudget()
    asks = {"max_tokens": 4000, "budget": budget, "query": "my bank PIN"}
    mm.save_message("alice-new", Message(role="user", content="hello again"), user_id=ALICE)
    alice = mm.get_context("alice-new", **asks)  # type: ignore[arg-type]
    assert SECRET in _text(alice), "alice's own other sessions are recalled"
    bob = mm.get_context("bob-chat", **asks)  # type: ignore[arg-type]
    assert SECRET not in _text(bob)
    # A session without an owner: no other session is known to be the same user's.
    nobody = mm.get_context("nobody-chat", user_profile="likes tea", **asks)  # type: ignore[arg-type]
    assert SECRET not in _text(nobody)
    assert [m.metadata.get("harombe") for m in nobody if m.metadata] == ["profile"]


# ChatMemory -----------------------------------------------------------------------------------
def test_chat_memory_acts_for_its_user(mm: MemoryManager) -> None:
    with pytest.raises(SessionOwnershipError):
        ChatMemory(memory=mm, session_id="alice-chat", user_id=BOB)
    with pytest.raises(SessionOwnershipError):
        ChatMemory(memory=mm, session_id="nobody-chat", user_id=BOB)
    mine = ChatMemory.threaded(embedder=FakeEmbedder(), memory=mm, user_id=BOB)
    mine.append("what is my bank PIN?", "I do not know your bank PIN.")
    assert mm.get_session(mine.session_id).user_id == BOB
    assert SECRET not in _text(mine.retrieve("bank PIN", n_results=10))
    assert SECRET not in _text(mine.messages)
    mine.reset()
    with pytest.raises(SessionOwnershipError):  # the session stays bob's
        ChatMemory(memory=mm, session_id=mine.session_id, user_id=ALICE)
    again = ChatMemory(memory=mm, session_id="alice-chat", user_id=ALICE)
    assert SECRET in _text(again.messages)


# one owner under concurrency ------------------------------------------------------------------
def _claim(db: str, user: str, start: Any, rounds: int) -> tuple[int, int]:
    """Write ``rounds`` messages to the session "shared" as ``user``; (stored, refused)."""
    stored = refused = 0
    with MemoryManager(db, embedding=None) as mm:
        start.wait()
        for i in range(rounds):
            try:
                mm.save_message("shared", {"role": "user", "content": f"{user} {i}"}, user_id=user)
                stored += 1
            except SessionOwnershipError:
                refused += 1
    return stored, refused


def test_processes_racing_for_a_new_session_give_it_exactly_one_owner(tmp_path: Path) -> None:
    db = str(tmp_path / "race.db")
    MemoryManager(db, embedding=None).close()
    context = multiprocessing.get_context("spawn")
    users = [f"user{i}" for i in range(4)]
    with context.Manager() as sync:
        start = sync.Barrier(len(users))
        with context.Pool(len(users)) as pool:
            results = pool.starmap(_claim, [(db, u, start, 25) for u in users])
    with MemoryManager(db, embedding=None) as mm:
        owner = mm.get_session("shared").user_id
        messages = mm.get_messages("shared")
    outcome = dict(zip(users, results, strict=True))
    assert outcome[owner or ""] == (25, 0)
    assert all(outcome[u] == (0, 25) for u in users if u != owner)
    assert {m.content.split()[0] for m in messages} == {owner}
    assert len(messages) == 25


def test_the_refusal_survives_pickling_across_processes() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(SessionOwnershipError("s", BOB)))
    assert isinstance(error, SessionOwnershipError)
    assert (error.session_id, error.user_id) == ("s", BOB)
    assert "update_session" in str(error)


def test_check_owner_validates_the_user() -> None:
    with MemoryManager(":memory:", embedding=None) as mm, pytest.raises(InvalidInputError):
        mm.check_owner("s", 42)  # type: ignore[arg-type]
