"""The name-free query: a query naming a speaker ("What art does Bo make?") is also compared,
on the vector side, without the name (``name_free_weight``), with the real bundled MiniLM
model: the name pulls every turn that says it toward the query, whatever the turn is about."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from harombe_core.config import MemoryConfig, load_config
from harombe_core.errors import ConfigError, InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.ranking import EVIDENCE, RetrievalSettings, without_names
from harombe_core.store.base import SearchScope

WHEN = datetime(2024, 4, 2, 18, 0, tzinfo=UTC)
#: Every context weight and the keyword side off, so a test sees the vector side alone.
OFF = {f"{column}_weight": 0.0 for column in EVIDENCE[1:]} | {"keyword_weight": 0.0}
#: Ann says Bo's name again and again about a party; Bo tells what he paints, without it.
ANN = "Bo, Bo, are you coming to Bo's party on Friday? Everyone asks for Bo."
BO = "Last weekend I finished a watercolour of the lake at sunrise."
#: A turn about something else, so that the min-max scaled cosines are not all 0 or 1.
OTHER = "The printer on the second floor is out of toner again."
QUERY = "What art does Bo make?"


@pytest.mark.parametrize(
    ("query", "speakers", "expected"),
    [
        ("What art does Bo make?", {"bo"}, "What art does make?"),
        ("What is Ann's favourite book?", {"ann"}, "What is favourite book?"),
        ("What is Ann\u2019s favourite book?", {"ann"}, "What is favourite book?"),
        ("Did ann and BO meet Annabel?", {"ann", "bo"}, "Did and meet Annabel?"),
        ("What is Ann's favourite book?", set(), "What is Ann's favourite book?"),
    ],
)
def test_without_names_drops_the_named_speakers_words(
    query: str, speakers: set[str], expected: str
) -> None:
    assert without_names(query, frozenset(speakers)) == expected


@pytest.fixture(scope="module")
def chat() -> Iterator[MemoryManager]:
    roles = {"Ann": "user", "Bo": "assistant"}
    turns = [("Ann", ANN), ("Bo", BO), ("Ann", OTHER)]
    with MemoryManager(":memory:") as mm:
        messages = [Message(role=roles[n], name=n, content=t, created_at=WHEN) for n, t in turns]
        mm.save_messages("club", messages, user_id="u")
        mm.flush()
        yield mm


def test_name_free_query_finds_what_the_named_person_said_not_who_says_the_name(
    chat: MemoryManager,
) -> None:
    named = chat.search(QUERY, top_k=2, user_id="u", name_free_weight=0.0, **OFF)
    assert [h.message.content for h in named] == [ANN, BO]  # the name's pull wins
    free = chat.search(QUERY, top_k=2, user_id="u", **OFF)  # the default: name_free_weight 1
    assert [h.message.content for h in free] == [BO, ANN]
    # vector_score stays the cosine to the query as asked; only the ranking changed.
    assert {h.message.content: h.vector_score for h in free} == {
        h.message.content: h.vector_score for h in named
    }


def test_name_free_cosines_only_for_a_query_that_names_a_speaker(chat: MemoryManager) -> None:
    settings = RetrievalSettings(**OFF)
    scope = SearchScope(user_id="u")
    found = chat.retriever.gather(QUERY, 3, scope, settings)
    assert found.speakers == {"bo"}
    assert found.name_free_cosine.keys() == found.cosine.keys()
    assert found.name_free_cosine != found.cosine
    nobody = chat.retriever.gather("What art does anyone make?", 3, scope, settings)
    assert not nobody.speakers
    assert nobody.name_free_cosine == {}
    off = chat.retriever.gather(QUERY, 3, scope, RetrievalSettings(**OFF, name_free_weight=0.0))
    assert off.name_free_cosine == {}


def test_name_free_weight_is_configured_and_checked() -> None:
    assert RetrievalSettings().name_free_weight == MemoryConfig().rag.name_free_weight == 1.0
    assert load_config({"rag": {"name_free_weight": 0.5}}).rag.name_free_weight == 0.5
    with pytest.raises(ConfigError, match="name_free_weight"):
        load_config({"rag": {"name_free_weight": -1}})
    with (
        MemoryManager(":memory:", embedding=None, vector_store=None) as mm,
        pytest.raises(InvalidInputError, match="name_free_weight"),
    ):
        mm.search("What does Bo paint?", name_free_weight=-0.5)


def test_a_name_named_before_is_embedded_beside_the_query(chat: MemoryManager) -> None:
    settings = RetrievalSettings(**OFF)
    scope = SearchScope(user_id="u")
    retriever = chat.retriever
    retriever.named.clear()
    first = retriever.gather(QUERY, 3, scope, settings)  # the name-free text embedded apart
    assert retriever.named == {"bo"}
    again = retriever.gather("What art does Bo like?", 3, scope, settings)  # in one call
    alone = chat.retriever.semantic.embed_query("What art does like?")
    assert again.name_free_cosine.keys() == first.name_free_cosine.keys()
    vectors = chat.retriever.semantic.vectors_for(list(again.name_free_cosine))
    assert again.name_free_cosine == pytest.approx(
        {mid: float(vector @ alone) for mid, vector in vectors.items()}, abs=1e-5
    )
