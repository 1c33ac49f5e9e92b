"""Facts as extra keys of their source messages (``fact_weight``), with facts from a scripted
LLM extractor (LangChain's ``FakeListChatModel``) and the real bundled MiniLM model: a fact
says what a turn meant in other words than the turn, so it finds the turn where the turn's
own words do not. Off by default (the default ranking reads no fact); deleting the message
or forgetting the fact leaves nothing of it findable; another user's facts never count."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from harombe_core import MemoryManager, Message
from harombe_core.config import MemoryConfig, load_config
from harombe_core.errors import ConfigError, InvalidInputError
from harombe_core.facts.llm import LLMExtractor
from harombe_core.ranking import EVIDENCE, RetrievalSettings
from harombe_core.store.base import SearchScope

WHEN = datetime(2024, 4, 2, 18, 0, tzinfo=UTC)
#: The turn that holds the answer says it in other words than the question; two turns share
#: the question's words and say nothing of it.
BREAKUP = "Since the breakup it's just me and the two kids at home now."
TURNS = [
    ("Ann", BREAKUP),
    ("Bo", "That sounds like a lot. How are the kids taking it?"),
    ("Ann", "They're fine. We painted the kitchen yellow last weekend."),
    ("Bo", "My relationship with my manager is tense; the status meeting went badly."),
    ("Ann", "I read a book about relationships on the train, it was okay."),
    ("Bo", "I adopted a cat from the shelter, her name is Pixel."),
]
#: What an LLM extractor writes of the first and last turns.
STATUS = "Relationship status: single; Ann raises her two kids alone"
CAT = "Bo adopted a cat named Pixel"
QUERY = "What is Ann's relationship status?"


def _extract(mm: MemoryManager, session: str, facts: list[tuple[str, int]]) -> None:
    """The session's facts, as a scripted chat model answers the LLM extractor."""
    operations = [{"action": "add", "text": t, "message_id": m} for t, m in facts]
    answer = json.dumps({"operations": operations})
    from langchain_core.language_models import FakeListChatModel

    mm.user_memory.extractor = LLMExtractor(FakeListChatModel(responses=[answer]))
    mm.extract_facts(session)


def _chat(mm: MemoryManager, session: str, user: str) -> list[int]:
    roles = {"Ann": "user", "Bo": "assistant"}
    messages = [Message(role=roles[n], name=n, content=t, created_at=WHEN) for n, t in TURNS]
    ids = mm.save_messages(session, messages, user_id=user)
    mm.flush()
    return ids


@pytest.fixture(params=["hybrid", "keyword"])
def mm(request: pytest.FixtureRequest) -> Iterator[MemoryManager]:
    """A memory with the real bundled model (hybrid) or none (keyword search only)."""
    embedding = "default" if request.param == "hybrid" else None
    with MemoryManager(":memory:", embedding=embedding) as manager:
        yield manager


def _top(mm: MemoryManager, **options: Any) -> list[str]:
    return [h.message.content for h in mm.search(QUERY, top_k=3, user_id="u", **options)]


def test_a_fact_finds_the_turn_it_came_from(mm: MemoryManager) -> None:
    ids = _chat(mm, "s1", "u")
    before = _top(mm)
    assert BREAKUP not in before  # the turn shares no word and little meaning with the query
    _extract(mm, "s1", [(STATUS, ids[0]), (CAT, ids[5])])
    assert _top(mm) == before  # off by default: the ranking is today's
    found = _top(mm, fact_weight=0.8)
    if mm.retriever.mode == "hybrid":
        assert found[0] == BREAKUP
    else:  # keyword only: the fact's words bring in a turn no word of which matched
        assert BREAKUP in found


def test_off_by_default_reads_no_fact_and_scores_as_before() -> None:
    with MemoryManager(":memory:") as mm:
        ids = _chat(mm, "s1", "u")
        before = mm.search(QUERY, top_k=6, user_id="u")
        _extract(mm, "s1", [(STATUS, ids[0])])
        after = mm.search(QUERY, top_k=6, user_id="u")
        assert [(h.message.id, h.score) for h in after] == [(h.message.id, h.score) for h in before]
        scope = SearchScope(user_id="u")
        assert mm.retriever.gather(QUERY, 6, scope, RetrievalSettings()).fact_score == {}
        on = mm.retriever.gather(QUERY, 6, scope, RetrievalSettings(fact_weight=0.8))
        assert set(on.fact_score) == {ids[0]}


def test_the_fact_column_is_the_mean_of_the_turns_facts() -> None:
    with MemoryManager(":memory:") as mm:
        ids = _chat(mm, "s1", "u")
        _extract(mm, "s1", [(STATUS, ids[0]), (CAT, ids[5]), ("Ann paints at home", ids[2])])
        scope = SearchScope(user_id="u")
        found = mm.retriever.gather(QUERY, 6, scope, RetrievalSettings(fact_weight=0.8))
        assert found.fact_score[ids[0]] == pytest.approx(1.0)  # the best fact of both sides
        assert 0.0 <= found.fact_score[ids[5]] < found.fact_score[ids[0]]
        from harombe_core.ranking import evidence

        messages, table = evidence(found, RetrievalSettings(fact_weight=0.8))
        column = {m.id: row[EVIDENCE.index("fact")] for m, row in zip(messages, table, strict=True)}
        assert column[ids[0]] == found.fact_score[ids[0]]
        assert column[ids[1]] == 0.0  # no fact came from it


def test_deleting_the_message_or_forgetting_the_fact_leaves_nothing_findable() -> None:
    with MemoryManager(":memory:", embedding=None) as mm:
        ids = _chat(mm, "s1", "u")
        kept = _chat(mm, "s2", "u")
        _extract(mm, "s1", [(STATUS, ids[0])])
        _extract(mm, "s2", [(STATUS, kept[0])])  # a repeat: one fact, two sources
        (fact,) = mm.get_facts("u")
        assert fact.message_ids == [ids[0], kept[0]]
        hits = mm.search(QUERY, top_k=6, user_id="u", fact_weight=0.8)
        assert {h.message.id for h in hits} >= {ids[0], kept[0]}
        mm.delete_session("s1")  # the fact stays (s2 said it too), its link to s1 goes
        hits = mm.search(QUERY, top_k=6, user_id="u", fact_weight=0.8)
        assert kept[0] in {h.message.id for h in hits}
        assert not {h.message.id for h in hits} & set(ids)
        mm.forget_fact("u", fact.id)
        hits = mm.search(QUERY, top_k=6, user_id="u", fact_weight=0.8)
        assert BREAKUP not in [h.message.content for h in hits]  # nothing finds it now
        assert (
            mm.retriever.gather(
                QUERY, 6, SearchScope(user_id="u"), RetrievalSettings(fact_weight=0.8)
            ).fact_score
            == {}
        )


def test_another_users_facts_never_count_and_a_session_uses_its_owners() -> None:
    with MemoryManager(":memory:", embedding=None) as mm:
        mine = _chat(mm, "s1", "u")
        theirs = _chat(mm, "s2", "v")
        _extract(mm, "s2", [(STATUS, theirs[0])])  # only v has the fact
        for options in ({"user_id": "u"}, {"session_id": "s1"}):
            hits = mm.search(QUERY, top_k=6, fact_weight=0.8, **options)
            assert {h.message.id for h in hits} <= set(mine)
            assert BREAKUP not in [h.message.content for h in hits]
        hits = mm.search(QUERY, top_k=3, session_id="s2", fact_weight=0.8)
        assert BREAKUP in [h.message.content for h in hits]  # the owner's fact, by session
        assert {h.message.id for h in hits} <= set(theirs)


async def test_async_search_uses_the_facts_too() -> None:
    with MemoryManager(":memory:", embedding=None) as mm:
        ids = _chat(mm, "s1", "u")
        _extract(mm, "s1", [(STATUS, ids[0])])
        sync = mm.search(QUERY, top_k=3, user_id="u", fact_weight=0.8)
        hits = await mm.asearch(QUERY, top_k=3, user_id="u", fact_weight=0.8)
        assert [(h.message.id, h.score) for h in hits] == [(h.message.id, h.score) for h in sync]
        assert BREAKUP in [h.message.content for h in hits]


def test_fact_weight_is_a_checked_setting() -> None:
    assert MemoryConfig().rag.fact_weight == 0.0
    assert load_config({"rag": {"fact_weight": 0.8}}).rag.fact_weight == 0.8
    with pytest.raises(ConfigError, match="fact_weight"):
        load_config({"rag": {"fact_weight": -1}})
    with (
        MemoryManager(":memory:", embedding=None) as mm,
        pytest.raises(InvalidInputError, match="fact_weight"),
    ):
        mm.search(QUERY, user_id="u", fact_weight=-0.5)


def test_a_fact_the_user_adds_with_source_messages_is_a_key_of_them() -> None:
    with MemoryManager(":memory:", embedding=None) as mm:
        ids = _chat(mm, "s1", "u")
        theirs = _chat(mm, "s2", "v")
        assert BREAKUP not in _top(mm, fact_weight=0.8)
        fact = mm.add_fact("u", STATUS, sources=[ids[0], ids[4], ids[0]])
        assert (fact.origin, fact.message_ids, fact.session_ids) == (
            "user",
            [ids[0], ids[4]],
            ["s1"],
        )
        assert BREAKUP in _top(mm, fact_weight=0.8)
        with pytest.raises(InvalidInputError, match=rf"\[{theirs[0]}\] are not messages of user"):
            mm.add_fact("u", CAT, sources=[theirs[0]])  # v's message: out of u's reach
        with pytest.raises(InvalidInputError, match="sources"):
            mm.add_fact("u", CAT, sources=ids[0])  # type: ignore[arg-type]
        assert [f.text for f in mm.get_facts("u")] == [STATUS]  # nothing half-written
        mm.delete_session("s1")
        (kept,) = mm.get_facts("u")  # the user's fact stays until forgotten; its links go
        assert (kept.id, kept.message_ids) == (fact.id, [])
        assert _top(mm, fact_weight=0.8) == []


async def test_aadd_fact_takes_sources_too() -> None:
    with MemoryManager(":memory:", embedding=None) as mm:
        ids = _chat(mm, "s1", "u")
        fact = await mm.aadd_fact("u", STATUS, sources=[ids[0]])
        assert fact.message_ids == [ids[0]]
