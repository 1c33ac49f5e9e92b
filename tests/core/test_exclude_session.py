"""``exclude_session_id`` is part of the search scope: what the current session says can never
crowd the other sessions out of "relevant past", however long it is and however alike its
messages are. The full-budget context asks exactly that question."""

from __future__ import annotations

from pathlib import Path

import pytest

from harombe_core import ContextBudget, MemoryManager, Message
from harombe_core.testing import FakeEmbedder

LONG = 600  # more matches in the current session than any candidate pool


def _fill(mm: MemoryManager) -> None:
    mm.create_session(session_id="older", user_id="ana")
    mm.save_message("older", Message(role="user", content="We settled on Lisbon in spring."))
    mm.create_session(session_id="current", user_id="ana")
    mm.save_messages(
        "current",
        [Message(role="user", content=f"lisbon again, note {i}") for i in range(LONG)],
    )
    mm.create_session(session_id="someone-else", user_id="bo")
    mm.save_message("someone-else", Message(role="user", content="Lisbon is where bo lives."))


@pytest.mark.parametrize("embedding", [None, "exact", "chroma"])
def test_other_sessions_are_found_past_a_long_current_one(
    tmp_path: Path, embedding: str | None
) -> None:
    embedder = FakeEmbedder() if embedding else None
    with MemoryManager(tmp_path / "m.db", embedding=embedder, token_counter="approximate") as mm:
        _fill(mm)
        mm.flush()
        if embedding == "chroma":  # every scoped search asks the Chroma index
            mm._semantic.exact_search_limit = 0
        hits = mm.search("lisbon", top_k=5, user_id="ana", exclude_session_id="current")
        assert [h.message.session_id for h in hits] == ["older"]
        if embedding:
            # By meaning alone, with a query nearer to every current message than to the
            # older one: only a scope that leaves the session out leaves room for it.
            hits = mm.search(
                "lisbon again, note",
                top_k=5,
                user_id="ana",
                exclude_session_id="current",
                keyword_weight=0.0,
            )
            assert [h.message.session_id for h in hits] == ["older"]
        past = mm.get_relevant_context("lisbon", user_id="ana", exclude_session_id="current")
        assert [m.session_id for m in past] == ["older"]
        context = mm.get_context("current", "simple", 4000, query="lisbon", budget=ContextBudget())
        relevant = [m for m in context if (m.metadata or {}).get("harombe") == "relevant"]
        assert len(relevant) == 1
        assert "settled on Lisbon" in relevant[0].content
        assert "bo lives" not in relevant[0].content


def test_excluding_the_only_session_in_scope_finds_nothing(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "m.db", embedding=None) as mm:
        _fill(mm)
        assert mm.search("lisbon", session_id="current", exclude_session_id="current") == []
        assert mm.search("lisbon", user_id="bo", exclude_session_id="someone-else") == []


def test_other_sessions_are_found_past_a_long_current_one_on_postgres(pg_url: str) -> None:
    with MemoryManager(pg_url, embedding=FakeEmbedder(), token_counter="approximate") as mm:
        _fill(mm)
        mm.flush()
        for query, weights in (
            ("lisbon", {"vector_weight": 0.0}),
            ("lisbon again, note", {"keyword_weight": 0.0}),  # nearer every current message
        ):
            hits = mm.search(query, top_k=5, user_id="ana", exclude_session_id="current", **weights)
            assert [h.message.session_id for h in hits] == ["older"]
