"""Summarisers (extractive and LLM) and the session-end pipeline: incremental, stored, searchable,
and never losing a message when the model fails."""

from __future__ import annotations

import json

import pytest

from harombe_core.errors import InvalidInputError, SummarizationError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.summarize import (
    ExtractiveSummarizer,
    LLMSummarizer,
    SessionSummary,
    acall_llm,
    call_llm,
)

TALK = [
    Message(role="user", content="Hi, I'm Ann and I live in Lisbon. I really like green tea."),
    Message(role="assistant", content="Nice to meet you, Ann! Lisbon is lovely."),
    Message(role="user", content="We decided to use Postgres for the billing service."),
    Message(role="assistant", content="Postgres is a solid choice for billing."),
    Message(role="user", content="I need to migrate the billing tables before Friday."),
    Message(role="assistant", content="Start with a schema dump of the billing tables."),
]

SESSION_JSON = {
    "summary": "Ann plans a billing migration.",
    "facts": ["Ann lives in Lisbon"],
    "decisions": ["Use Postgres"],
    "action_items": ["Migrate billing tables by Friday"],
    "preferences": ["Likes green tea"],
    "topics": ["billing", "postgres"],
    "outcome": "Plan agreed",
}


def test_extractive_session_summary_has_every_field() -> None:
    summary = ExtractiveSummarizer().summarize_session(TALK)
    assert summary.summary
    assert any("Lisbon" in f for f in summary.facts)
    assert any("green tea" in p for p in summary.preferences)
    assert any("Postgres" in d for d in summary.decisions)
    assert any("migrate" in a.lower() for a in summary.action_items)
    assert "billing" in summary.topics
    assert summary.outcome.startswith("Start with a schema dump")


def test_extractive_message_summary_is_short() -> None:
    long = Message(role="user", content="First sentence here. Second one. Third one is extra.")
    summary = ExtractiveSummarizer().summarize_message(long)
    assert summary.title == "First sentence here"
    assert summary.summary == "First sentence here. Second one."


def test_incremental_merge_keeps_old_items() -> None:
    ex = ExtractiveSummarizer()
    first = ex.summarize_session(TALK[:2])
    second = ex.summarize_session(TALK[2:], previous=first)
    assert any("Lisbon" in f for f in second.facts)
    assert any("Postgres" in d for d in second.decisions)


def test_llm_summarizer_parses_and_retries_with_feedback() -> None:
    prompts: list[str] = []
    answers = iter(["not json at all", "Sure! " + json.dumps(SESSION_JSON)])

    def llm(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    summary = LLMSummarizer(llm).summarize_session(TALK)
    assert summary == SessionSummary(**SESSION_JSON)  # type: ignore[arg-type]
    assert len(prompts) == 2
    assert "invalid" in prompts[1]


def test_llm_summarizer_gives_up_with_a_typed_error() -> None:
    with pytest.raises(SummarizationError, match="no valid summary"):
        LLMSummarizer(lambda p: '{"title": 3}').summarize_message(TALK[0])
    with pytest.raises(SummarizationError, match="model failed"):
        LLMSummarizer(lambda p: 1 / 0).summarize_session(TALK)


def test_llm_summarizer_includes_previous_summary_for_incremental_updates() -> None:
    prompts: list[str] = []

    def llm(prompt: str) -> str:
        prompts.append(prompt)
        return json.dumps(SESSION_JSON)

    previous = SessionSummary(summary="Earlier: Ann introduced herself.")
    LLMSummarizer(llm).summarize_session(TALK[4:], previous=previous)
    assert "Earlier: Ann introduced herself." in prompts[0]
    assert "Hi, I'm Ann" not in prompts[0]  # old messages are not sent again


async def test_async_llm_hooks() -> None:
    class Model:
        async def acall(self, prompt: str) -> str:
            return json.dumps({"title": "T", "summary": "S"})

    summary = await LLMSummarizer(Model()).asummarize_message(TALK[0])
    assert (summary.title, summary.summary) == ("T", "S")
    assert await acall_llm(lambda p: "sync", "x") == "sync"

    async def coro(prompt: str) -> str:
        return "async"

    assert await acall_llm(coro, "x") == "async"
    with pytest.raises(InvalidInputError, match="awaitable"):
        call_llm(coro, "x")


def test_call_llm_reads_framework_answers() -> None:
    class AIMessage:
        content = "from a chat model"

    assert call_llm(lambda p: AIMessage(), "x") == "from a chat model"


def _manager() -> MemoryManager:
    return MemoryManager(":memory:", embedding=None)


def test_end_session_stores_summary_facts_topics_outcome() -> None:
    mm = _manager()
    sid = mm.create_session(user_id="u1")
    mm.save_messages(sid, TALK)
    summary = mm.end_session(sid)
    session = mm.get_session(sid)
    assert session.summary == summary.summary
    assert session.summary_data is not None
    assert {"facts", "topics", "outcome", "decisions", "action_items", "preferences"} <= set(
        session.summary_data
    )
    last_id = mm.get_messages(sid)[-1].id
    assert session.summary_until_id == last_id
    hits = mm.search_summaries("billing migration", user_id="u1")
    assert hits
    assert hits[0][0].id == sid
    mm.close()


def test_summaries_are_incremental() -> None:
    seen: list[int] = []

    class Counting(ExtractiveSummarizer):
        def summarize_session(self, messages, previous=None):  # type: ignore[no-untyped-def]
            seen.extend(m.id for m in messages)
            return super().summarize_session(messages, previous)

    mm = _manager()
    mm.summarizer = Counting()
    sid = mm.create_session()
    mm.save_messages(sid, TALK[:4])
    mm.summarize_session(sid)
    mm.save_messages(sid, TALK[4:])
    mm.summarize_session(sid)
    mm.summarize_session(sid)  # nothing new: nothing summarised
    assert len(seen) == len(set(seen)) == len(TALK)
    assert "Lisbon" in " ".join(mm.get_session(sid).summary_data["facts"])  # type: ignore[index]
    mm.close()


def test_a_failing_llm_summariser_falls_back_and_keeps_messages() -> None:
    mm = _manager()
    mm.summarizer = lambda prompt: (_ for _ in ()).throw(RuntimeError("down"))
    sid = mm.create_session()
    mm.save_messages(sid, TALK)
    summary = mm.end_session(sid)
    assert summary.summary  # the extractive fallback
    assert len(mm.get_messages(sid)) == len(TALK)
    mm.close()


async def test_async_session_end() -> None:
    mm = _manager()
    sid = await mm.acreate_session()
    await mm.asave_messages(sid, TALK)
    summary = await mm.aend_session(sid)
    assert summary.topics
    assert (await mm.asummarize_session(sid)) == summary  # nothing new since
    mm.close()


def test_summary_embedding_with_semantic_memory() -> None:
    from harombe_core.testing import FakeEmbedder, InMemoryVectorIndex

    mm = MemoryManager(":memory:", embedding=FakeEmbedder(), vector_store=InMemoryVectorIndex())
    sid = mm.create_session()
    mm.save_messages(sid, TALK)
    mm.end_session(sid)
    data = mm.get_session(sid).summary_data or {}
    assert len(data["embedding"]["vector"]) == mm.embedder.dimension
    assert mm.search_summaries("billing postgres migration")[0][0].id == sid
    mm.close()


def test_the_offline_summary_of_the_demo_trip_is_worth_reading() -> None:
    """The demo's Lisbon trip: the reminder the user asked for is an action item, the outcome is
    the assistant's last real answer (not "Will do."), and topics are subjects, not filler."""
    from harombe_core.demo import SAMPLE

    trip = next(s for s in SAMPLE if s.id == "demo-lisbon-trip")
    summary = ExtractiveSummarizer().summarize_session([Message(**t) for t in trip.turns])
    assert any(
        "remind me to book the Sintra tickets a week ahead" in item for item in summary.action_items
    ), summary.action_items
    assert any("by 7 May" in item for item in summary.action_items)
    assert summary.outcome == "Pena Palace tickets are timed, so book them by 7 May."
    assert {"lisbon", "sintra"} <= set(summary.topics)
    assert any("no boat tours" in p for p in summary.preferences)
    assert any("walk everywhere" in p for p in summary.preferences)


def test_filler_is_never_a_topic_and_an_acknowledgement_is_no_outcome() -> None:
    talk = [
        Message(role="user", content="We fly to Lisbon on May 3rd"),
        Message(role="assistant", content="Noted!"),
        Message(role="user", content="old note"),
        Message(role="assistant", content="Will do."),
    ]
    summary = ExtractiveSummarizer().summarize_session(talk)
    assert not {"noted", "old", "note", "will"} & set(summary.topics), summary.topics
    assert "lisbon" in summary.topics
    assert summary.outcome == ""


def test_topics_count_a_plural_with_its_singular() -> None:
    talk = [
        Message(role="user", content="The parser drops the last row of the rows it reads."),
        Message(role="assistant", content="Each row is parsed; rows after the header too."),
    ]
    topics = ExtractiveSummarizer().summarize_session(talk).topics
    assert topics[0] == "row"
    assert "rows" not in topics


def test_end_session_on_the_demo_trip_stores_the_reminder() -> None:
    from harombe_core.demo import write_sample

    with MemoryManager(":memory:", embedding=None) as mm:
        write_sample(mm)
        summary = mm.end_session("demo-lisbon-trip")
        assert summary is not None
        assert any("remind me to book the Sintra tickets" in a for a in summary.action_items)
        assert summary.outcome != "Will do."
        assert not {"noted", "old", "note"} & set(summary.topics)


@pytest.mark.parametrize(
    ("talk", "topic", "query"),
    [
        (
            [
                ("user", "Я планирую поездку в Москву летом. Хочу посетить Третьяковскую галерею."),
                (
                    "assistant",
                    "Галерея открыта летом каждый день. Поездка в Москву будет отличной.",
                ),
            ],
            "москву",
            "галерею",
        ),
        (
            [
                ("user", "我下周要去北京出差。我想在北京吃烤鸭。你能推荐一家烤鸭店吗？"),
                ("assistant", "北京的全聚德烤鸭很有名。出差期间可以去全聚德吃烤鸭。"),
            ],
            "烤鸭",
            "全聚德",
        ),
    ],
)
def test_a_session_in_another_language_gets_an_offline_summary(
    talk: list[tuple[str, str]], topic: str, query: str
) -> None:
    """The offline summariser's words are letters of any alphabet, and pairs of characters for
    Chinese and Japanese (one A-Z word pattern left such a session with no summary at all), and
    a Chinese or Japanese sentence ends at its full-width stop."""
    mm = _manager()
    sid = mm.create_session(user_id="u1")
    mm.save_messages(sid, [Message(role=role, content=text) for role, text in talk])
    summary = mm.end_session(sid)
    assert summary.summary
    assert topic in summary.topics
    assert summary.outcome
    assert [s.id for s, _ in mm.search_summaries(query, user_id="u1")] == [sid]
    mm.close()
