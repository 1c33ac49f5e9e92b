"""Isolation: a scoped search never returns another user's or session's message.

The store enforces scopes, so this holds even when the vector index ignores its filter; both
the exact (SQLite) path and the index (ChromaDB) path are exercised.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from harombe_core.errors import SessionOwnershipError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.testing import FakeEmbedder
from harombe_core.vectors.base import VectorMatch
from harombe_core.vectors.chroma import ChromaVectorIndex

WORDS = [
    "apple", "river", "piano", "garden", "rocket", "silver",
    "coffee", "mountain", "letter", "window", "tiger", "cloud",
]
USERS = 50


class LeakyIndex(ChromaVectorIndex):
    """A real Chroma index that ignores every filter: the worst a vector index could do."""

    def query(
        self, vector: Any, k: int, where: Mapping[str, Any] | None = None
    ) -> list[VectorMatch]:
        return super().query(vector, max(k, 1000), None)


def _populate(mm: MemoryManager, rng: random.Random) -> dict[str, str]:
    owner: dict[str, str] = {}
    for u in range(USERS):
        for s in range(2):
            sid = f"u{u}-s{s}"
            owner[sid] = f"user{u}"
            mm.create_session(user_id=f"user{u}", session_id=sid)
            mm.save_messages(
                sid,
                [
                    Message(role="user", content=" ".join(rng.sample(WORDS, 4)))
                    for _ in range(4)
                ],
            )
    mm.flush()
    return owner


@pytest.fixture(scope="module", params=["exact", "leaky-index"])
def populated(request: pytest.FixtureRequest) -> Iterator[tuple[MemoryManager, dict[str, str]]]:
    if request.param == "exact":
        mm = MemoryManager(":memory:", embedding=FakeEmbedder())
    else:
        mm = MemoryManager(
            ":memory:", embedding=FakeEmbedder(), vector_store=LeakyIndex(mode="memory")
        )
        mm._semantic.exact_search_limit = 0  # every query goes through the leaky index
    owner = _populate(mm, random.Random(7))
    yield mm, owner
    mm.close()


def test_thousand_random_scoped_queries_never_leak(
    populated: tuple[MemoryManager, dict[str, str]],
) -> None:
    mm, owner = populated
    rng = random.Random(11)
    sessions = sorted(owner)
    returned = 0
    for _ in range(1_000):
        query = " ".join(rng.sample(WORDS, 2))
        kind = rng.choice(["user", "session", "both"])
        sid = rng.choice(sessions)
        user = owner[sid] if kind != "session" else None
        session = sid if kind != "user" else None
        if kind == "both" and rng.random() < 0.3:
            user = f"user{rng.randrange(USERS)}"  # possibly a mismatched pair: refused
        top_k = rng.choice([1, 5, 20])
        if session is not None and user is not None and owner[session] != user:
            with pytest.raises(SessionOwnershipError):
                mm.search(query, top_k=top_k, session_id=session, user_id=user)
            continue
        hits = mm.search(query, top_k=top_k, session_id=session, user_id=user)
        for hit in hits:
            if session is not None:
                assert hit.message.session_id == session
            if user is not None:
                assert owner[hit.message.session_id or ""] == user
        returned += len(hits)
    assert returned > 1_000  # the queries did find things, inside their scopes


def test_unscoped_search_sees_everyone(populated: tuple[MemoryManager, dict[str, str]]) -> None:
    mm, owner = populated
    hits = mm.search("apple river piano", top_k=50)
    assert len({owner[h.message.session_id or ""] for h in hits}) > 5


def test_leaky_index_really_leaks() -> None:
    index = LeakyIndex(mode="memory")
    vectors = np.eye(4, dtype=np.float32)
    index.upsert([1, 2], vectors[:2], [{"session_id": "a"}, {"session_id": "b"}])
    found: Sequence[VectorMatch] = index.query(vectors[0], 5, {"session_id": "b"})
    assert {m.message_id for m in found} == {1, 2}
    index.close()


@pytest.mark.parametrize("small_plan", ["spans", "ids"])
@pytest.mark.parametrize("scope_kind", ["user", "session"])
def test_a_small_scope_keyword_search_matches_the_general_plan(
    populated: tuple[MemoryManager, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    scope_kind: str,
    small_plan: str,
) -> None:
    """A user's or session's keyword search reads only its sessions' id spans (or, over many
    sessions, lists the scope's ids first; fast at 100,000 messages); it returns exactly what
    the plan for large scopes returns, in the same order."""
    from harombe_core.store import fts as sqlite_store
    from harombe_core.store.base import SearchScope

    mm, owner = populated
    sessions = sorted(owner)
    checked = 0
    for sid in sessions[:10]:
        scope = (
            SearchScope(user_id=owner[sid]) if scope_kind == "user" else SearchScope(session_id=sid)
        )
        for word in WORDS[:4]:
            if small_plan == "ids":
                monkeypatch.setattr(sqlite_store, "_MAX_SPANS", 0)
            small = mm.store.keyword_search(word, limit=10, scope=scope)
            monkeypatch.undo()
            monkeypatch.setattr(sqlite_store, "_SMALL_SCOPE", -1)
            general = mm.store.keyword_search(word, limit=10, scope=scope)
            monkeypatch.undo()
            assert [(h.message.id, h.score) for h in small] == [
                (h.message.id, h.score) for h in general
            ]
            checked += len(small)
    assert checked > 0
