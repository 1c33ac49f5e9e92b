"""The priors that hold for every query: a long turn, and one that states rather than asks, is
more likely to hold what a later search looks for than a short reaction or a question."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from harombe_core.config import MemoryConfig, load_config
from harombe_core.errors import ConfigError, InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.ranking import (
    EVIDENCE,
    Candidates,
    RetrievalSettings,
    asks,
    evidence,
    length_prior,
    rank,
)
from harombe_core.store.base import SearchScope

WHEN = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
#: Every context weight off, so a test sees one prior at a time.
OFF = RetrievalSettings(
    neighbor_weight=0.0,
    session_weight=0.0,
    speaker_weight=0.0,
    time_weight=0.0,
    length_weight=0.0,
    statement_weight=0.0,
    person_weight=0.0,
)


def _found(*turns: tuple[str, int | None, float]) -> Candidates:
    """Keyword-only candidates: (content, token count, BM25) each."""
    found = Candidates()
    for mid, (content, tokens, bm25) in enumerate(turns, start=1):
        found.messages[mid] = Message(
            role="user",
            content=content,
            id=mid,
            session_id="s",
            created_at=WHEN,
            token_count=tokens,
        )
        found.keyword_score[mid] = bm25
        found.keyword_rank[mid] = mid - 1
    found.pooled = frozenset(found.messages)
    return found


def _contents(found: Candidates, settings: RetrievalSettings) -> list[str]:
    return [h.message.content for h in rank(found, settings)]


def test_length_prior_is_the_token_count_over_the_cap() -> None:
    def message(content: str, tokens: int | None) -> Message:
        return Message(role="user", content=content, token_count=tokens)

    assert length_prior(message("x", 20), 80) == 0.25
    assert length_prior(message("x", 80), 80) == 1.0
    assert length_prior(message("x", 400), 80) == 1.0  # capped: a long paste is not better
    assert length_prior(message("x" * 40, None), 80) == 10 / 80  # no count: 4 chars a token


def test_length_weight_prefers_the_turn_that_tells_over_the_reaction() -> None:
    found = _found(
        ("Wow, awesome hike!", 12, 3.0),
        ("We hiked the ridge trail with the kids and camped by the lake overnight.", 40, 2.6),
    )
    assert _contents(found, OFF)[0] == "Wow, awesome hike!"
    with_length = replace(OFF, length_weight=0.4)
    assert _contents(found, with_length)[0].startswith("We hiked the ridge trail")
    messages, table = evidence(found, with_length)
    column = {
        m.content: row[EVIDENCE.index("length")] for m, row in zip(messages, table, strict=True)
    }
    assert column["Wow, awesome hike!"] == 12 / 80


@pytest.mark.parametrize(
    ("text", "question"),
    [
        ("What did you paint last weekend?", True),
        ("Nice! What did you paint?", True),
        ("Did you go? [shares a photo: a dog on a beach]", True),
        ("Full-width too\uff1f", True),
        ("I painted a sunset last weekend.", False),
        ("Really? I finished it last night!", False),
        ("ok", False),
        ("", False),
    ],
)
def test_asks_reads_the_last_sentence(text: str, question: bool) -> None:
    assert asks(text) is question


def test_statement_weight_prefers_the_answer_to_the_question_that_shares_its_words() -> None:
    found = _found(
        ("What did you paint last weekend?", 12, 3.0),
        ("I painted a sunset last weekend.", 12, 2.7),
    )
    assert _contents(found, OFF)[0] == "What did you paint last weekend?"
    statement = replace(OFF, statement_weight=0.2)
    assert _contents(found, statement) == [
        "I painted a sunset last weekend.",
        "What did you paint last weekend?",
    ]


def test_search_applies_the_priors_and_validates_them() -> None:
    with MemoryManager(":memory:", embedding=None, vector_store=None) as mm:
        sid = mm.create_session(user_id="u")
        mm.save_messages(
            sid,
            [
                Message(role="user", content="Which trail did you hike?"),
                Message(
                    role="assistant",
                    content="The ridge trail above the lake, all the way to the old fire "
                    "lookout, with both kids and the dog.",
                ),
            ],
        )
        first = {
            (length, statement): mm.search(
                "trail hike",
                top_k=2,
                user_id="u",
                length_weight=length,
                statement_weight=statement,
            )[0].message.content
            for length, statement in ((0.0, 0.0), (0.0, 1.0), (4.0, 0.0))
        }
        assert first[(0.0, 0.0)] == "Which trail did you hike?"
        assert first[(0.0, 1.0)].startswith("The ridge trail")
        assert first[(4.0, 0.0)].startswith("The ridge trail")
        found = mm.retriever.gather("trail", 5, SearchScope(user_id="u"), RetrievalSettings())
        messages, table = evidence(found, RetrievalSettings())
        statement = {
            m.content[:5]: row[EVIDENCE.index("statement")]
            for m, row in zip(messages, table, strict=True)
        }
        assert statement == {"Which": 0.0, "The r": 1.0}
        for name in ("length_weight", "statement_weight"):
            for bad in (-0.1, float("nan"), "1", True):
                with pytest.raises(InvalidInputError, match=name):
                    mm.search("trail", user_id="u", **{name: bad})


def test_priors_are_configured_under_rag() -> None:
    config = MemoryConfig.model_validate(
        {"rag": {"length_weight": 0.1, "length_tokens": 50, "statement_weight": 0.3}}
    )
    settings = RetrievalSettings.from_config(config.rag)
    assert (settings.length_weight, settings.length_tokens, settings.statement_weight) == (
        0.1,
        50,
        0.3,
    )
    assert RetrievalSettings.from_config(MemoryConfig().rag) == RetrievalSettings()
    with pytest.raises(ConfigError, match="length_tokens"):
        load_config({"rag": {"length_tokens": 0}})
    with pytest.raises(ConfigError, match="statement_weight"):
        load_config({"rag": {"statement_weight": -1}})
