"""Store contract: behaviours every backend must show identically through MemoryManager.

Each behaviour is a plain function taking a fresh ``MemoryManager`` (semantic memory off).
``BEHAVIOURS`` lists them; ``test_store_contract.py`` runs each over in-memory SQLite, file SQLite
and PostgreSQL. Another test module can import ``BEHAVIOURS`` to run them over its own backend.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from harombe_core.context_reads import read_newest
from harombe_core.errors import HarombeError, InvalidInputError
from harombe_core.flows import drive
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.store.base import SearchScope

Behaviour = Callable[[MemoryManager], None]
BEHAVIOURS: list[Behaviour] = []


def behaviour(fn: Behaviour) -> Behaviour:
    BEHAVIOURS.append(fn)
    return fn


def _snapshot(mm: MemoryManager) -> list[tuple[object, ...]]:
    """Everything stored, in a comparable form (to prove a rejected call changed nothing)."""
    out: list[tuple[object, ...]] = []
    for session in mm.list_sessions(limit=None):
        out.append(("s", session.id, session.user_id, session.system_prompt, str(session.metadata),
                    session.message_count, session.summary))
        out.extend(
            ("m", m.id, m.role, m.content, str(m.metadata)) for m in mm.get_messages(session.id)
        )
    return out


@behaviour
def round_trip_every_field(mm: MemoryManager) -> None:
    sid = mm.create_session("You are terse.", {"topic": "x", "n": [1, 2.5, None]}, user_id="u1")
    when = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    original = [
        Message(role="user", content="héllo 👋 'quote' \"dq\"", name="Ann", created_at=when,
                metadata={"k": "v", "nested": {"a": [1, 2]}}),
        Message(role="assistant", content="", tool_calls=calls),
        Message(role="tool", content="42", tool_call_id="c1", name="f"),
    ]
    ids = mm.save_messages(sid, original)
    assert ids == sorted(ids)
    assert len(set(ids)) == 3
    back = mm.get_messages(sid)
    for saved, got, mid in zip(original, back, ids, strict=True):
        assert got.id == mid
        assert got.session_id == sid
        assert got.token_count is not None
        for field in ("role", "content", "name", "tool_calls", "tool_call_id", "metadata",
                      "created_at"):
            assert getattr(got, field) == getattr(saved, field), field
    session = mm.get_session(sid)
    assert session.system_prompt == "You are terse."
    assert session.metadata == {"topic": "x", "n": [1, 2.5, None]}
    assert session.user_id == "u1"
    assert session.message_count == 3


@behaviour
def order_paging_and_counts(mm: MemoryManager) -> None:
    sid = mm.create_session()
    ids = [mm.save_message(sid, Message(role="user", content=f"m{i}")) for i in range(150)]
    assert [m.id for m in mm.get_messages(sid)] == ids
    assert [m.content for m in mm.get_messages(sid, after_id=ids[9], limit=5)] == [
        f"m{i}" for i in range(10, 15)
    ]
    assert mm.store.run(ops.count_messages(sid)) == 150
    assert [m.id for m in drive(read_newest(mm.store, sid, lambda m: False))] == ids[::-1]
    assert [m.id for m in mm.store.run(ops.get_messages_by_ids([ids[5], ids[2], 10**9]))] == [
        ids[5],
        ids[2],
    ]


@behaviour
def token_window(mm: MemoryManager) -> None:
    sid = mm.create_session("sys")
    for i in range(40):
        mm.save_message(sid, Message(role="user" if i % 2 == 0 else "assistant",
                                     content=f"message number {i} " * 3))
    window = mm.get_window(sid, 120)
    assert window.tokens <= 120
    assert window.messages[0].role == "system"
    assert window.messages[-1].content.startswith("message number 39")
    contents = [m.content for m in window.messages[1:]]
    assert contents == sorted(contents, key=lambda c: int(c.split()[2]))
    assert mm.get_recent_messages(sid, 0) == [] or all(
        m.role == "system" for m in mm.get_recent_messages(sid, 0)
    )
    assert mm.get_recent_messages("no-such-session", 100) == []


@behaviour
def sessions_list_update_delete(mm: MemoryManager) -> None:
    a = mm.create_session(user_id="alice", session_id="a")
    b = mm.create_session(user_id="bob", session_id="b")
    c = mm.create_session(user_id="alice", session_id="c")
    mm.save_message(a, Message(role="user", content="newest activity"))
    assert next(s.id for s in mm.list_sessions()) == a
    assert {s.id for s in mm.list_sessions(user_id="alice")} == {a, c}
    assert len(mm.list_sessions(limit=1)) == 1
    mm.update_session(b, system_prompt="new prompt", metadata={"m": 1}, user_id="carol")
    got = mm.get_session(b)
    assert (got.system_prompt, got.metadata, got.user_id) == ("new prompt", {"m": 1}, "carol")
    with pytest.raises(InvalidInputError):
        mm.create_session(session_id="a")
    mm.update_session("missing", metadata={"m": 2}, user_id="dan")  # a write creates it
    created = mm.get_session("missing")
    assert created is not None
    assert (created.metadata, created.user_id, created.message_count) == ({"m": 2}, "dan", 0)
    assert mm.delete_session(c) is True
    assert mm.delete_session(c) is False
    assert mm.get_session(c) is None
    assert mm.load_session(c) == []
    assert mm.clear_session(a) == 1
    assert mm.get_messages(a) == []
    assert mm.session_exists(a)


@behaviour
def replace_is_one_transaction(mm: MemoryManager) -> None:
    sid = mm.create_session()
    other = mm.create_session()
    ids = mm.save_messages(sid, [Message(role="user", content=f"x{i}") for i in range(4)])
    foreign = mm.save_message(other, Message(role="user", content="not yours"))
    new = mm.replace_messages(sid, [ids[0], ids[1], foreign], [Message(role="user", content="y")])
    assert [m.content for m in mm.get_messages(sid)] == ["x2", "x3", "y"]
    assert mm.get_messages(other)[0].id == foreign  # ids of another session are ignored
    assert mm.get_session(sid).message_count == 3
    assert len(new) == 1


@behaviour
def prune_old(mm: MemoryManager) -> None:
    old = datetime.now(UTC) - timedelta(days=40)
    mm.store.run(ops.create_session("old", created_at=old))
    mm.create_session(session_id="fresh")
    assert mm.prune_old_sessions(30) == 1
    assert [s.id for s in mm.list_sessions()] == ["fresh"]


@behaviour
def activity_is_the_newest_message_time(mm: MemoryManager) -> None:
    then = datetime(2024, 1, 15, 10, 30, tzinfo=UTC)
    mm.save_message("live", Message(role="user", content="today"))
    mm.save_messages(
        "old", [Message(role="user", content=f"m{i}", created_at=then) for i in range(2)]
    )
    old = mm.get_session("old")
    assert (old.created_at, old.updated_at) == (then, then)  # history keeps its dates
    assert [s.id for s in mm.list_sessions()] == ["live", "old"]
    before = mm.get_session("live").updated_at
    mm.save_message("live", Message(role="user", content="backfilled", created_at=then))
    assert mm.get_session("live").updated_at == before  # activity only moves forward


@behaviour
def threads_and_summaries(mm: MemoryManager) -> None:
    sid = mm.create_session()
    root, child = mm.save_messages(
        sid, [Message(role="user", content="root"), Message(role="assistant", content="child")]
    )
    mm.store.run(ops.set_parent(child, root))
    assert mm.get_messages(sid)[1].parent_id == root
    mm.store.run(ops.set_message_summary(child, {"title": "T", "summary": "S"}))
    assert mm.store.run(ops.get_message_summaries([root, child])) == {
        child: {"title": "T", "summary": "S"}
    }
    mm.store.run(
        ops.update_session(sid, summary="so far", summary_data={"k": 1}, summary_until_id=child)
    )
    session = mm.get_session(sid)
    assert (session.summary, session.summary_data, session.summary_until_id) == (
        "so far", {"k": 1}, child)
    with pytest.raises(InvalidInputError):
        mm.store.run(ops.set_parent(10**9, None))
    mm.delete_session(sid)
    assert mm.store.run(ops.get_message_summaries([child])) == {}


@behaviour
def keyword_search_scoped(mm: MemoryManager) -> None:
    mm.save_messages("s1", [Message(role="user", content="Where did we park the blue bicycle?"),
                            Message(role="assistant", content="Behind the library.")], user_id="u1")
    mm.save_messages("s2", [Message(role="user", content="The bicycle shop opens at nine.")],
                     user_id="u2")
    hits = mm.store.keyword_search("bicycle")
    assert {h.message.session_id for h in hits} == {"s1", "s2"}
    assert all(h.score > 0 for h in hits)
    scoped = mm.store.keyword_search("bicycle", scope=SearchScope(user_id="u1"))
    assert scoped
    assert {h.message.session_id for h in scoped} == {"s1"}
    # the answer is found through the question it answers
    answer = mm.store.keyword_search("park bicycle", scope=SearchScope(roles=("assistant",)))
    assert [h.message.content for h in answer] == ["Behind the library."]
    assert mm.store.keyword_search("!!! ???") == []
    assert mm.store.keyword_search('" OR 1=1; DROP TABLE messages; --') is not None
    assert mm.store.run(ops.count_messages()) == 3


@behaviour
def adjacent_ids_stay_in_their_session(mm: MemoryManager) -> None:
    # Two sessions written in turns, so ids interleave: neighbours are per session, not id +/- 1.
    a1 = mm.save_message("a", Message(role="user", content="a one"), user_id="u1")
    b1 = mm.save_message("b", Message(role="user", content="b one"), user_id="u2")
    a2 = mm.save_message("a", Message(role="assistant", content="a two"))
    b2 = mm.save_message("b", Message(role="assistant", content="b two"))
    a3 = mm.save_message("a", Message(role="user", content="a three"))
    assert mm.store.run(ops.adjacent_ids([a2, b1, a1, a3, b2, a2, 10_000])) == {
        a1: (None, a2),
        a2: (a1, a3),
        a3: (a2, None),
        b1: (None, b2),
        b2: (b1, None),
    }
    assert mm.store.run(ops.adjacent_ids([])) == {}


@behaviour
def context_evidence_in_keyword_search(mm: MemoryManager) -> None:
    """The ranking options behave the same over every backend (here with BM25 alone)."""
    july, march = datetime(2023, 7, 15, tzinfo=UTC), datetime(2023, 3, 1, tzinfo=UTC)
    mm.save_messages("trip", [
        Message(role="user", name="Ann", content="ok thanks", created_at=july),
        Message(role="assistant", name="Bo", content="The QX7 code is in the blue box.",
                created_at=july),
    ], user_id="u")
    mm.save_messages("other", [
        Message(role="user", name="Ann", content="thanks ok", created_at=march),
        Message(role="assistant", name="Bo", content="The old kitchen drawer is stuck again.",
                created_at=march),
        Message(role="user", name="Ann", content="Check the drawer.", created_at=march),
    ], user_id="u")

    off = {"neighbor_weight": 0.0, "session_weight": 0.0, "speaker_weight": 0.0,
           "time_weight": 0.0, "length_weight": 0.0, "statement_weight": 0.0,
           "person_weight": 0.0}

    def order(query: str, **options: float) -> list[str]:
        hits = mm.search(query, top_k=4, user_id="u", **{**off, **options})
        return [h.message.content for h in hits]

    def first(query: str, **options: float) -> str:
        return order(query, **options)[0]

    # Equal BM25 for the two replies; the one beside the QX7 turn wins with its neighbour.
    assert order("QX7 thanks", neighbor_weight=0.5)[1] == "ok thanks"
    assert order("QX7 thanks", session_weight=0.5)[1] == "ok thanks"
    assert order("QX7 thanks")[1] == "thanks ok"  # a tie goes to the newer message
    # A month named in the query: the message written then (or within the slack after).
    assert first("thanks in July 2023", time_weight=0.5) == "ok thanks"
    assert first("thanks in March 2023", time_weight=0.5) == "thanks ok"
    # A speaker named in the query: what they said comes first.
    assert first("what did Bo say about the drawer?") == "Check the drawer."
    assert first("what did Bo say about the drawer?", speaker_weight=0.5) == (
        "The old kitchen drawer is stuck again."
    )


@behaviour
def embedding_bookkeeping(mm: MemoryManager) -> None:
    sid = mm.create_session()
    ids = mm.save_messages(
        sid, [Message(role="user", content="q"), Message(role="assistant", content="a")]
    )
    pending = mm.store.run(ops.pending_embeddings(10))
    assert [m.id for m, _ in pending] == ids
    assert pending[1][1] == "q"  # each message comes with the turn it answers
    assert mm.store.run(ops.pending_count()) == 2
    mm.store.run(ops.mark_embedded(ids[:1]))
    assert [m.id for m, _ in mm.store.run(ops.pending_embeddings(10))] == ids[1:]
    assert mm.store.run(ops.pending_count()) == 1
    assert mm.store.run(ops.reset_embedded()) == 1
    assert len(mm.store.run(ops.pending_embeddings(10))) == 2
    assert mm.store.rebuild_keyword_index() == 2
    assert {h.message.id for h in mm.store.keyword_search("q")} <= set(ids)
    mm.store.run(ops.set_meta("k", "v1"))
    mm.store.run(ops.set_meta("k", "v2"))
    assert mm.store.run(ops.get_meta("k")) == "v2"
    assert mm.store.run(ops.get_meta("nope")) is None
    stats = mm.stats()
    assert stats["messages"] == 2
    assert stats["sessions"] == 1
    assert stats["pending_embeddings"] == 2


@behaviour
def search_scores_read_from_0_to_1(mm: MemoryManager) -> None:
    """On a small store BM25 (SQLite) and ts_rank (PostgreSQL) are tiny and unlike each other;
    a hit's keyword_score is relative to the best keyword match, its score a weighted mean."""
    mm.save_messages("trip", [
        Message(role="user", content="We fly to Lisbon on May 3rd"),
        Message(role="assistant", content="Noted!"),
        Message(role="user", content="Is the Lisbon trip budget tight? Lisbon is pricey."),
    ], user_id="ann")
    mm.save_messages("work", [Message(role="user", content="Budget review on Friday")],
                     user_id="bo")
    hits = mm.search("Lisbon trip budget", top_k=10)
    raw = {h.message.id: h.score for h in mm.store.keyword_search("Lisbon trip budget", limit=40)}
    scored = [h for h in hits if h.keyword_score is not None]
    assert scored
    assert max(h.keyword_score or 0.0 for h in scored) == 1.0
    best = max(raw.values())
    for hit in scored:
        assert 0.0 < (hit.keyword_score or 0.0) <= 1.0
        assert hit.keyword_score == pytest.approx(raw[hit.message.id] / best)
    assert all(0.0 <= h.score <= 1.0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


@behaviour
def rejected_calls_change_nothing(mm: MemoryManager) -> None:
    sid = mm.create_session(session_id="keep", user_id="u")
    mm.save_messages(sid, [Message(role="user", content="one")])
    before = _snapshot(mm)
    bad_calls: list[Callable[[], object]] = [
        lambda: mm.save_messages(sid, [Message(role="user", content="fine"),
                                       {"role": "robot", "content": "x"}]),
        lambda: mm.save_message(sid, {"role": "user", "content": "a\x00b"}),
        lambda: mm.save_message("", Message(role="user", content="x")),
        lambda: mm.save_message(
            sid, {"role": "user", "content": "x", "metadata": {"f": float("nan")}}
        ),
        lambda: mm.create_session(metadata={"x": object()}),
        lambda: mm.create_session(session_id="x" * 600),
        lambda: mm.list_sessions(limit=-1),
        lambda: mm.prune_old_sessions(-1),
        lambda: mm.get_recent_messages(sid, -5),
        lambda: mm.save_messages(sid, "not a list"),
    ]
    for call in bad_calls:
        with pytest.raises(HarombeError):
            call()
    assert _snapshot(mm) == before


@behaviour
def sql_metacharacters_are_data(mm: MemoryManager) -> None:
    nasty = [
        "'; DROP TABLE messages; --",
        "\" OR 1=1 --",
        "%s %(x)s {0} $1 ? :name",
        "Robert'); DELETE FROM sessions;--",
        "\\'\\\" \\\\ `backtick` ; /* comment */",
    ]
    for i, text in enumerate(nasty):
        sid = mm.create_session(text, {text: text}, user_id=text, session_id=f"{text}{i}")
        mid = mm.save_message(sid, Message(role="user", content=text, name=text[:50],
                                           metadata={text: [text]}, tool_call_id=text))
        got = mm.get_messages(sid)[0]
        assert (got.id, got.content, got.name, got.metadata, got.tool_call_id) == (
            mid, text, text[:50], {text: [text]}, text)
        session = mm.get_session(sid)
        assert (session.system_prompt, session.metadata) == (text, {text: text})
        assert session.user_id == text
        assert [s.id for s in mm.list_sessions(user_id=text)] == [sid]
        mm.store.keyword_search(text, scope=SearchScope(user_id=text, session_id=sid))
    assert mm.store.run(ops.count_messages()) == len(nasty)
    assert len(mm.list_sessions(limit=None)) == len(nasty)


@behaviour
def scope_isolation_fifty_users(mm: MemoryManager) -> None:
    rng = random.Random(7)
    words = ["apple", "river", "engine", "garden", "piano", "rocket", "winter", "coffee"]
    owner: dict[str, str] = {}
    for u in range(50):
        user = f"user{u}"
        for s in range(2):
            sid = f"{user}-s{s}"
            owner[sid] = user
            mm.save_messages(
                sid,
                [Message(role=rng.choice(["user", "assistant"]),
                         content=" ".join(rng.choices(words, k=5)) + f" {user}")
                 for _ in range(4)],
                user_id=user,
            )
    all_ids = [m.id for sid in owner for m in mm.get_messages(sid)]
    for _ in range(1000):
        user = f"user{rng.randrange(50)}"
        by_session = rng.random() < 0.5
        scope = (SearchScope(session_id=f"{user}-s{rng.randrange(2)}") if by_session
                 else SearchScope(user_id=user))
        query = " ".join(rng.choices(words, k=2))
        for hit in mm.store.keyword_search(query, limit=20, scope=scope):
            assert owner[hit.message.session_id] == user
            if by_session:
                assert hit.message.session_id == scope.session_id
        for message in mm.store.run(ops.get_messages_by_ids(rng.sample(all_ids, 10), scope)):
            assert owner[message.session_id or ""] == user


@behaviour
def a_session_has_one_owner(mm: MemoryManager) -> None:
    from harombe_core.errors import SessionOwnershipError

    mm.save_message("owned", Message(role="user", content="alice's PIN 4921"), user_id="alice")
    mm.save_message("unowned", Message(role="user", content="nobody's"))
    ids = [m.id for m in mm.get_messages("owned") if m.id is not None]
    before = _snapshot(mm)
    bob = Message(role="user", content="bob's")
    for sid in ("owned", "unowned"):
        with pytest.raises(SessionOwnershipError):
            mm.save_messages(sid, [bob, bob], user_id="bob")
        with pytest.raises(SessionOwnershipError):
            mm.replace_messages(sid, ids, [bob], user_id="bob")
        with pytest.raises(SessionOwnershipError):
            mm.get_messages(sid, user_id="bob")
    assert _snapshot(mm) == before, "a refused write leaves everything as it was"
    mm.save_message("owned", Message(role="assistant", content="ok"), user_id="alice")
    mm.save_message("owned", Message(role="assistant", content="app"))  # the application's own
    assert mm.get_session("owned").user_id == "alice"
    assert len(mm.get_messages("owned", user_id="alice")) == 3


def _block(mm: MemoryManager, sid: str, *, fail: bool) -> Callable[[], list[int]]:
    """A block of writes (session, messages, a thread link, a summary) that reads its own
    writes back and then fails or returns the new ids."""

    def block() -> list[int]:
        mm.create_session("prompt", {"k": 1}, user_id="u", session_id=sid)
        ids = mm.save_messages(sid, [Message(role="user", content=f"m{i}") for i in range(5)])
        mm.store.run(ops.set_parent(ids[1], ids[0]))
        mm.store.run(ops.update_session(sid, summary="so far"))
        assert mm.get_messages(sid)[1].parent_id == ids[0]  # the block sees its own writes
        if fail:
            raise RuntimeError("stop")
        return ids

    return block


@behaviour
def atomic_block_commits_together_or_not_at_all(mm: MemoryManager) -> None:
    mm.save_message("before", Message(role="user", content="kept"))
    before = _snapshot(mm)
    with pytest.raises(RuntimeError, match="stop"):
        mm.atomic(_block(mm, "block", fail=True))
    assert _snapshot(mm) == before
    assert not mm.session_exists("block")
    ids = mm.atomic(_block(mm, "block", fail=False))
    assert [m.id for m in mm.get_messages("block")] == ids
    assert mm.get_messages("block")[1].parent_id == ids[0]
    assert mm.get_session("block").summary == "so far"
    with pytest.raises(RuntimeError, match="stop"):  # a nested block joins the outer one
        mm.atomic(lambda: (mm.atomic(_block(mm, "inner", fail=False)), _fail()))
    assert not mm.session_exists("inner")


def _fail() -> None:
    raise RuntimeError("stop")


@behaviour
def a_failed_call_dooms_its_atomic_block_even_if_caught(mm: MemoryManager) -> None:
    def block() -> int:
        mm.save_message("doomed", Message(role="user", content="x"))
        with contextlib.suppress(InvalidInputError):
            mm.store.run(ops.set_parent(10**12, None))  # no such message
        return 1

    with pytest.raises(InvalidInputError, match="no message"):
        mm.atomic(block)
    assert not mm.session_exists("doomed")
    assert mm.atomic(lambda: mm.save_message("fine", Message(role="user", content="y"))) > 0
    assert len(mm.get_messages("fine")) == 1


@behaviour
def another_thread_writes_outside_an_atomic_block(mm: MemoryManager) -> None:
    saved: list[int] = []
    errors: list[BaseException] = []

    def other() -> None:
        try:
            saved.append(mm.save_message("other", Message(role="user", content="mine")))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    def block() -> None:
        mm.save_message("block", Message(role="user", content="rolled back"))
        worker.start()
        worker.join(0.2)  # it waits for the block's lock (SQLite) or writes beside it
        raise RuntimeError("stop")

    worker = threading.Thread(target=other)
    with pytest.raises(RuntimeError):
        mm.atomic(block)
    worker.join(60)
    assert errors == []
    assert [m.id for m in mm.get_messages("other")] == saved
    assert not mm.session_exists("block")
