"""Context evidence in ranking, with the real bundled MiniLM model on small hand-written chats:
neighbouring turns, the session, the speaker a query names, the time a query names, and what
is embedded for a short reply."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from harombe_core.config import MemoryConfig, load_config
from harombe_core.errors import ConfigError, InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message, SearchHit
from harombe_core.query_time import in_ranges, query_time_ranges
from harombe_core.retrieval import EVIDENCE, RetrievalSettings, evidence, named_speakers
from harombe_core.store.base import SearchScope
from harombe_core.vectors.indexer import embedding_text

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def test_readme_example_ranks_the_turn_above_its_short_reply() -> None:
    """The README's three messages: the trip itself, not the "Noted!" after it, comes first."""
    with MemoryManager(":memory:") as mm:
        sid = mm.create_session(system_prompt="You are helpful", user_id="ann")
        trip = Message(role="user", content="We fly to Lisbon on May 3rd", name="Ann")
        mm.save_message(sid, trip)
        mm.save_messages(
            sid,
            [
                Message(role="assistant", content="Noted!"),
                Message(
                    role="user", content="old note", created_at=datetime(2024, 1, 5, tzinfo=UTC)
                ),
            ],
        )
        mm.flush()
        found = [m.content for m in mm.search_similar("when is the trip?", top_k=5, user_id="ann")]
    assert found.index("We fly to Lisbon on May 3rd") < found.index("Noted!")
    assert found[0] == "We fly to Lisbon on May 3rd"


def test_a_message_is_embedded_with_its_context_unless_it_is_an_acknowledgement() -> None:
    question = "Did you book the flights to Lisbon?"
    reply = Message(role="assistant", content="Yes, in Lisbon last May.", name="Bo")
    assert embedding_text(reply, question) == f"{question}\nBo: Yes, in Lisbon last May."
    assert embedding_text(reply, question, with_context=False) == "Bo: Yes, in Lisbon last May."
    for ack in ("Noted!", "ok thanks", "  sounds good :) "):
        assert embedding_text(Message(role="assistant", content=ack), question) == ack
    config = MemoryConfig.model_validate({"vector_store": {"embed_context": True}})
    with MemoryManager(":memory:", config=config) as mm:
        assert mm._semantic.embed_context is True
    with MemoryManager(":memory:") as mm:  # off by default: no gain under cross-validation
        assert mm._semantic.embed_context is False


@pytest.fixture(scope="module")
def chat() -> Iterator[MemoryManager]:
    """Two friends over three sessions, with the bundled model."""
    mm = MemoryManager(":memory:")
    spring = mm.create_session(user_id="u", session_id="spring")
    mm.save_messages(
        spring,
        [
            Message(
                role="user",
                name="Ann",
                content="I started learning the piano this spring.",
                created_at=datetime(2023, 3, 10, tzinfo=UTC),
            ),
            Message(
                role="assistant",
                name="Bo",
                content="I started learning the guitar this spring.",
                created_at=datetime(2023, 3, 10, tzinfo=UTC),
            ),
            Message(
                role="user",
                name="Ann",
                content="We had dinner at the harbour last night.",
                created_at=datetime(2023, 3, 10, tzinfo=UTC),
            ),
        ],
    )
    summer = mm.create_session(user_id="u", session_id="summer")
    mm.save_messages(
        summer,
        [
            Message(
                role="user",
                name="Ann",
                content="We had dinner at the harbour last night.",
                created_at=datetime(2023, 7, 15, tzinfo=UTC),
            ),
            Message(
                role="assistant",
                name="Bo",
                content="Did you try the grilled sardines?",
                created_at=datetime(2023, 7, 15, tzinfo=UTC),
            ),
            Message(
                role="user",
                name="Ann",
                content="Yes, and the octopus. Best seafood in town.",
                created_at=datetime(2023, 7, 15, tzinfo=UTC),
            ),
        ],
    )
    other = mm.create_session(user_id="u", session_id="other")
    mm.save_messages(
        other,
        [
            Message(
                role="user",
                name="Ann",
                content="The octopus at the aquarium was huge.",
                created_at=datetime(2023, 9, 1, tzinfo=UTC),
            ),
            Message(
                role="assistant",
                name="Bo",
                content="Aquariums are fun for a rainy day.",
                created_at=datetime(2023, 9, 1, tzinfo=UTC),
            ),
        ],
    )
    mm.flush()
    yield mm
    mm.close()


#: Every context weight off, so a test sees the one it turns on.
OFF = {
    "neighbor_weight": 0.0,
    "session_weight": 0.0,
    "speaker_weight": 0.0,
    "time_weight": 0.0,
    "length_weight": 0.0,
    "statement_weight": 0.0,
    "person_weight": 0.0,
}


def _search(mm: MemoryManager, query: str, top_k: int, **options: float) -> list[SearchHit]:
    return mm.search(query, top_k=top_k, user_id="u", now=NOW, **{**OFF, **options})


def _first(mm: MemoryManager, query: str, **options: float) -> Message:
    return _search(mm, query, 3, **options)[0].message


def test_speaker_weight_prefers_what_the_named_person_said(chat: MemoryManager) -> None:
    query = "Which instrument did Bo start learning this spring?"
    first = _first(chat, query, speaker_weight=0.5)
    assert first.content.startswith("I started learning the guitar")
    hits = _search(chat, query, 2, speaker_weight=0.5)
    assert hits[0].score - hits[1].score > 0.3  # the bonus, not a near-tie


def test_names_are_matched_as_speakers_not_words(chat: MemoryManager) -> None:
    messages = chat.get_messages("spring")
    assert named_speakers("What did ann and BO say?", messages) == {"ann", "bo"}
    assert named_speakers("what did you say?", messages) == frozenset()
    retriever = chat.retriever
    scope = SearchScope(user_id="u")
    as_words = retriever.gather("Bo guitar", 5, scope, RetrievalSettings(names_as_keywords=True))
    as_speakers = retriever.gather(
        "Bo guitar", 5, scope, RetrievalSettings(names_as_keywords=False)
    )
    assert as_words.speakers == as_speakers.speakers == {"bo"}

    def keyword(text: str) -> dict[int | None, float]:
        return {h.message.id: h.score for h in chat.store.keyword_search(text, scope=scope)}

    # The keyword side looks for "guitar" alone once "Bo" is known to be a speaker.
    assert as_speakers.keyword_score == keyword("guitar")
    assert as_words.keyword_score == keyword("Bo guitar")


def test_time_weight_prefers_messages_from_the_named_month(chat: MemoryManager) -> None:
    query = "Where did we have dinner in July 2023?"
    assert _first(chat, query, time_weight=0.5).session_id == "summer"
    assert _first(chat, "Where did we have dinner in March 2023?", time_weight=0.5).session_id == (
        "spring"
    )


def test_session_weight_prefers_the_conversation_that_keeps_matching(
    chat: MemoryManager,
) -> None:
    # "octopus" is said once in "summer" (among seafood talk) and once at the aquarium.
    query = "octopus seafood dinner harbour"
    hits = _search(chat, query, 8, session_weight=1.0)
    octopus = [h for h in hits if "octopus" in h.message.content]
    assert octopus[0].message.session_id == "summer"


def test_neighbor_weight_lends_a_turn_the_score_of_the_turns_around_it(
    chat: MemoryManager,
) -> None:
    settings = RetrievalSettings(neighbor_weight=0.5)
    found = chat.retriever.gather("grilled sardines", 5, SearchScope(user_id="u"), settings)
    messages, table = evidence(found, settings)
    fused, neighbor = EVIDENCE.index("fused"), EVIDENCE.index("neighbor")
    row = {(m.session_id, m.content): table[i] for i, m in enumerate(messages)}
    question = row[("summer", "Did you try the grilled sardines?")][fused]
    # The turns just before and after the question carry its fused score as evidence.
    assert row[("summer", "Yes, and the octopus. Best seafood in town.")][neighbor] == question
    assert row[("summer", "We had dinner at the harbour last night.")][neighbor] == question
    assert row[("spring", "We had dinner at the harbour last night.")][neighbor] < question / 2

    def order(query: str, weight: float) -> list[tuple[str | None, str]]:
        hits = _search(chat, query, 8, neighbor_weight=weight)
        return [(h.message.session_id, h.message.content) for h in hits]

    # The same words said in two sessions: the one next to the sardines wins with neighbours.
    dinner = "We had dinner at the harbour last night."
    with_neighbors = order("grilled sardines", 0.5)
    assert with_neighbors.index(("summer", dinner)) < with_neighbors.index(("spring", dinner))
    assert with_neighbors.index(("summer", dinner)) == 2
    # A question found through its answer: the sardines question climbs to second.
    sardines = ("summer", "Did you try the grilled sardines?")
    assert order("what seafood did Ann eat?", 0.5).index(sardines) == 1
    assert order("what seafood did Ann eat?", 0.0).index(sardines) > 1


def test_weights_are_validated(chat: MemoryManager) -> None:
    for name in ("neighbor_weight", "session_weight", "speaker_weight", "time_weight"):
        for bad in (-0.1, float("nan"), float("inf"), "1", True):
            with pytest.raises(InvalidInputError, match=name):
                chat.search("dinner", user_id="u", **{name: bad})
    with pytest.raises(ConfigError, match="session_weight"):
        load_config({"rag": {"session_weight": -1}})


def test_the_shipped_defaults_use_every_kind_of_evidence(chat: MemoryManager) -> None:
    """The defaults (chosen by cross-validation) turn every context weight on."""
    settings = RetrievalSettings()
    assert RetrievalSettings.from_config(MemoryConfig().rag) == settings
    assert (
        min(
            settings.neighbor_weight,
            settings.session_weight,
            settings.speaker_weight,
            settings.time_weight,
        )
        > 0
    )
    assert settings.names_as_keywords is False
    assert chat.search("Which instrument did Bo start learning?", top_k=1, user_id="u")[
        0
    ].message.content.startswith("I started learning the guitar")


def test_rag_config_sets_the_defaults() -> None:
    config = MemoryConfig.model_validate(
        {
            "rag": {
                "neighbor_weight": 0.25,
                "speaker_weight": 0.5,
                "time_slack_days": 2,
                "names_as_keywords": False,
            }
        }
    )
    settings = RetrievalSettings.from_config(config.rag)
    assert (settings.neighbor_weight, settings.speaker_weight, settings.time_slack_days) == (
        0.25,
        0.5,
        2,
    )
    assert settings.names_as_keywords is False


def test_query_time_ranges() -> None:
    day = timedelta(days=1)

    def spans(query: str) -> list[tuple[str, str, bool]]:
        return [
            (r.start.date().isoformat(), r.end.date().isoformat(), r.any_year)
            for r in query_time_ranges(query, NOW)
        ]

    assert spans("What did Nate cook on 9 November, 2022?") == [("2022-11-09", "2022-11-10", False)]
    assert spans("on November 9th 2022") == [("2022-11-09", "2022-11-10", False)]
    assert spans("the 2023-05-04 meeting") == [("2023-05-04", "2023-05-05", False)]
    assert spans("in January 2022") == [("2022-01-01", "2022-02-01", False)]
    assert spans("what happened in 2024") == [("2024-01-01", "2025-01-01", False)]
    assert spans("where was he in December?") == [("2025-12-01", "2026-01-01", True)]
    assert spans("what did we decide last week?") == [("2025-05-19", "2025-05-26", False)]
    assert spans("yesterday") == [("2025-05-31", "2025-06-01", False)]
    assert spans("3 days ago") == [("2025-05-29", "2025-05-30", False)]
    assert spans("two months ago") == [("2025-04-01", "2025-05-01", False)]
    # Verbs are not months; a question with no time names none.
    assert spans("I may go, march on") == []
    assert spans("May I ask what you think?") == []
    assert spans("how are you?") == []
    # A range matches the message written then, or up to the slack after it; any year works
    # when the query gave none.
    (november,) = query_time_ranges("on 9 November, 2022", NOW)
    assert in_ranges(datetime(2022, 11, 9, 18, 0, tzinfo=UTC), [november])
    assert not in_ranges(datetime(2022, 11, 12, tzinfo=UTC), [november])
    assert in_ranges(datetime(2022, 11, 12, tzinfo=UTC), [november], slack_days=7)
    assert not in_ranges(datetime(2022, 11, 8, tzinfo=UTC), [november], slack_days=7)
    (december,) = query_time_ranges("in December", NOW)
    assert in_ranges(datetime(2019, 12, 24), [december])  # naive times are read as UTC
    assert in_ranges(datetime(2020, 1, 3, tzinfo=UTC), [december], slack_days=7)
    assert not in_ranges(datetime(2019, 11, 30, tzinfo=UTC), [december])
    assert NOW - day not in [r.start for r in query_time_ranges("no dates here", NOW)]
