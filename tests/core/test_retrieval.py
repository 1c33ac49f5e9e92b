"""Ranking with the real bundled MiniLM model, filters, decay, MMR, budgets and RAG formatting."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harombe_core.errors import InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.retrieval import CONTEXT_HEADER, format_context, rag_messages

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture(scope="module")
def mm() -> Iterator[MemoryManager]:
    """One manager with the default embedder (bundled all-MiniLM-L6-v2) and in-memory Chroma."""
    manager = MemoryManager(":memory:")
    travel = manager.create_session(user_id="ann", session_id="travel")
    manager.save_messages(
        travel,
        [
            Message(role="user", content="Where are you going for your honeymoon?", name="Bo",
                    created_at=NOW - 40 * DAY),
            Message(role="assistant", content="We booked Kyoto for two weeks in April.",
                    name="Ann", created_at=NOW - 40 * DAY),
            Message(role="user", content="My booking reference is QX7-PLM9, keep it safe.",
                    created_at=NOW - 39 * DAY),
        ],
    )
    pets = manager.create_session(user_id="ann", session_id="pets")
    manager.save_messages(
        pets,
        [
            Message(role="user", content="I adopted a golden retriever puppy last weekend.",
                    created_at=NOW - 10 * DAY),
            Message(role="assistant", content="Lovely! Puppies need lots of sleep and short walks.",
                    created_at=NOW - 10 * DAY),
            Message(role="user", content="I love hiking in the mountains on Sundays.",
                    created_at=NOW - 365 * DAY),
            Message(role="user", content="I really love hiking in the mountains on Sunday.",
                    created_at=NOW - 1 * DAY),
        ],
    )
    food = manager.create_session(user_id="cy", session_id="food")
    manager.save_messages(
        food,
        [
            Message(role="user", content="Sushi with fresh salmon is my favourite dinner.",
                    created_at=NOW - 5 * DAY),
            Message(role="user", content="The best pizza is Neapolitan pizza with basil.",
                    created_at=NOW - 5 * DAY),
            Message(role="user", content="Neapolitan pizza with basil is the best pizza.",
                    created_at=NOW - 5 * DAY),
            Message(role="user", content="Pizza from Naples with fresh basil is the best.",
                    created_at=NOW - 5 * DAY),
        ],
    )
    manager.flush()
    yield manager
    manager.close()


def test_paraphrase_finds_its_source_by_meaning(mm: MemoryManager) -> None:
    hits = mm.search("Did I get a new dog recently?", top_k=3, user_id="ann")
    assert hits[0].message.content.startswith("I adopted a golden retriever")
    assert hits[0].vector_score is not None
    assert hits[0].vector_score > 0.3


def test_keyword_only_match_is_found_by_the_keyword_side(mm: MemoryManager) -> None:
    hits = mm.search("QX7-PLM9", top_k=3)
    assert hits[0].message.content.startswith("My booking reference is QX7-PLM9")
    assert hits[0].keyword_score is not None


def test_a_question_finds_the_answer_through_its_context(mm: MemoryManager) -> None:
    found = mm.search_similar("honeymoon destination", top_k=2, session_id="travel")
    assert "We booked Kyoto for two weeks in April." in [m.content for m in found]


def test_messages_come_back_as_saved(mm: MemoryManager) -> None:
    message = mm.search_similar("Kyoto in April", top_k=1, user_id="ann")[0]
    assert (message.name, message.role, message.session_id) == ("Ann", "assistant", "travel")
    assert message.created_at == NOW - 40 * DAY
    assert message.id is not None
    assert message.token_count


def test_scope_role_and_time_filters(mm: MemoryManager) -> None:
    found = mm.search_similar("pizza dog hiking", top_k=10, user_id="cy")
    assert {m.session_id for m in found} == {"food"}
    assert {m.session_id for m in mm.search_similar("anything", top_k=10, session_id="pets")} <= {
        "pets"
    }
    assistant = mm.search_similar("walks Kyoto", top_k=10, roles=["assistant"])
    assert assistant
    assert all(m.role == "assistant" for m in assistant)
    recent = mm.search_similar(
        "hiking mountains", top_k=10, since=NOW - 30 * DAY, until=NOW
    )
    assert recent
    assert all(NOW - 30 * DAY <= m.created_at <= NOW for m in recent)
    assert "I love hiking in the mountains on Sundays." not in [m.content for m in recent]


def test_min_similarity(mm: MemoryManager) -> None:
    assert mm.search("golden retriever puppy", top_k=5, min_similarity=0.99) == []
    hits = mm.search("golden retriever puppy", top_k=5, min_similarity=0.4)
    assert hits
    assert all(h.vector_score is not None and h.vector_score >= 0.4 for h in hits)


def test_min_similarity_leaves_keyword_only_search_whole(tmp_path: Path) -> None:
    """Without semantic memory there is no cosine to judge: a ``min_similarity`` (one set in
    the config's ``rag:`` section, say) must not empty every keyword search."""
    with MemoryManager(str(tmp_path / "k.db"), embedding=None) as keyword_only:
        keyword_only.save_message("s", Message(role="user", content="I moved to Lisbon in May."))
        hits = keyword_only.search("Lisbon", min_similarity=0.9)
        assert [h.message.content for h in hits] == ["I moved to Lisbon in May."]
        assert hits[0].vector_score is None
        with pytest.raises(InvalidInputError):
            keyword_only.search("Lisbon", min_similarity=2)


def test_temporal_decay_prefers_recent_of_equal_relevance(mm: MemoryManager) -> None:
    def order(decay: float) -> list[str]:
        hits = mm.search("hiking in the mountains", top_k=2, session_id="pets",
                         temporal_decay=decay, now=NOW)
        return [h.message.content for h in hits]

    assert order(0.05)[0] == "I really love hiking in the mountains on Sunday."
    assert set(order(0.0)) == {
        "I really love hiking in the mountains on Sunday.",
        "I love hiking in the mountains on Sundays.",
    }


def test_mmr_diversifies_near_duplicates(mm: MemoryManager) -> None:
    plain = mm.search_similar("best Neapolitan pizza with basil", top_k=3, user_id="cy")
    assert all("izza" in m.content for m in plain)
    diverse = mm.search_similar(
        "best Neapolitan pizza with basil", top_k=3, user_id="cy", mmr_lambda=0.3
    )
    assert any("Sushi" in m.content for m in diverse)


def test_relevant_context_fits_the_budget(mm: MemoryManager) -> None:
    full = mm.get_relevant_context("travel and pets", max_tokens=10_000, user_id="ann")
    assert len(full) >= 3
    small = mm.get_relevant_context("travel and pets", max_tokens=40, user_id="ann")
    assert sum(m.token_count or 0 for m in small) <= 40
    assert 0 < len(small) < len(full)
    assert mm.get_relevant_context("travel", max_tokens=0) == []
    with pytest.raises(InvalidInputError):
        mm.get_relevant_context("travel", max_tokens=-1)


def test_relevant_context_gives_words_said_again_once() -> None:
    """A script run three times stores its turn three times; the model is given it once, and
    the budget goes to something else."""
    with MemoryManager(":memory:") as manager:
        for _ in range(3):
            sid = manager.create_session(user_id="ann")
            manager.save_message(sid, Message(role="user", content="We fly to Lisbon on May 3rd"))
        manager.save_message(sid, Message(role="assistant", content="Pack for Lisbon evenings."))
        manager.flush()
        found = manager.get_relevant_context("Lisbon flight", user_id="ann")
        contents = [m.content for m in found]
        assert contents.count("We fly to Lisbon on May 3rd") == 1
        assert "Pack for Lisbon evenings." in contents


def test_exclude_session(mm: MemoryManager) -> None:
    found = mm.get_relevant_context("hiking Kyoto puppy", user_id="ann", exclude_session_id="pets")
    assert found
    assert all(m.session_id == "travel" for m in found)


def test_search_by_topic_ranks_sessions(mm: MemoryManager) -> None:
    sessions = mm.search_by_topic("Italian food", top_k=2)
    assert sessions[0].id == "food"


def test_rag_prompt_formatting(mm: MemoryManager) -> None:
    context = mm.get_relevant_context("honeymoon", max_tokens=200, session_id="travel")
    text = format_context(context)
    assert text.startswith(CONTEXT_HEADER)
    assert "Ann (assistant): We booked Kyoto" in text
    assert (NOW - 40 * DAY).strftime("%Y-%m-%d") in text
    prompt = rag_messages("Where did we go?", context, system_prompt="You are helpful.")
    assert [m.role for m in prompt] == ["system", "system", "user"]
    assert prompt[1].content == text
    assert prompt[-1].content == "Where did we go?"
    assert mm.format_context([]) == ""


def test_bad_arguments(mm: MemoryManager) -> None:
    with pytest.raises(InvalidInputError):
        mm.search(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        mm.search("x", top_k=-1)
    with pytest.raises(InvalidInputError):
        mm.search("x", mmr_lambda=2.0)
    assert mm.search("   ") == []


async def test_async_twins(mm: MemoryManager) -> None:
    hits = await mm.asearch("golden retriever", top_k=1)
    assert hits[0].message.content.startswith("I adopted")
    assert (await mm.asearch_similar("QX7-PLM9", top_k=1))[0].content.startswith("My booking")
    assert await mm.aget_relevant_context("pizza", max_tokens=100, user_id="cy")
    assert (await mm.asearch_by_topic("pizza", top_k=1))[0].id == "food"


def test_without_semantic_memory_search_is_keyword_only() -> None:
    with MemoryManager(":memory:", embedding=None) as plain:
        sid = plain.create_session()
        plain.save_message(sid, Message(role="user", content="the invoice number is 88231"))
        other = plain.create_session()
        plain.save_message(other, Message(role="user", content="I adopted a puppy"))
        assert plain.retriever.mode == "keyword"
        hits = plain.search("invoice 88231")
        assert [h.message.content for h in hits] == ["the invoice number is 88231"]
        assert hits[0].vector_score is None
        assert hits[0].keyword_score
        assert plain.search_similar("new dog") == []  # no meaning without embeddings
