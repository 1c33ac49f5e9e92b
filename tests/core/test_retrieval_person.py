"""Person questions: a question asking for a judgement about someone it names ("Would Bo enjoy
...?") prefers what that person said (``person_weight``), with the real bundled MiniLM model."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from harombe_core.config import MemoryConfig, load_config
from harombe_core.errors import ConfigError, InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.ranking import EVIDENCE, RetrievalSettings, asks_judgement, evidence
from harombe_core.store.base import SearchScope

WHEN = datetime(2024, 4, 2, 18, 0, tzinfo=UTC)
#: Every context weight off (one per evidence column), so a test sees person_weight alone.
OFF = {f"{column}_weight": 0.0 for column in EVIDENCE[1:]}
#: Ann talks about the mountains in the question's words; Bo tells what he likes in his own.
ANN = "You should join the camping trip in the mountains, Bo, the whole club is going to camp."
BO = "I spend every weekend hiking up steep trails and sleeping in my tent under the stars."
#: A turn about something else, so that the min-max scaled cosine of Bo's turn is not zero.
OTHER = "The printer on the second floor is out of toner again."


@pytest.mark.parametrize(
    ("query", "judgement"),
    [
        ("Would Bo enjoy a camping trip in the mountains?", True),
        ("Is Ann likely to move abroad?", True),
        ("What might Ann like for her birthday?", True),
        ("Does Bo have a dog?", True),
        ("  did Ann finish the painting?", True),
        ("What did Bo paint?", False),
        ("When did Ann move to Lisbon?", False),
        ("Which instrument does Bo play?", False),
        ("camping trip mountains", False),
    ],
)
def test_asks_judgement_reads_yes_no_and_speculative_questions(query: str, judgement: bool) -> None:
    assert asks_judgement(query) is judgement


@pytest.fixture(scope="module")
def chat() -> Iterator[MemoryManager]:
    with MemoryManager(":memory:") as mm:
        sid = mm.create_session(user_id="u", session_id="club")
        mm.save_messages(
            sid,
            [
                Message(role="user", name="Ann", content=ANN, created_at=WHEN),
                Message(role="assistant", name="Bo", content=BO, created_at=WHEN),
                Message(role="user", name="Ann", content=OTHER, created_at=WHEN),
            ],
        )
        mm.flush()
        yield mm


def _order(mm: MemoryManager, query: str, **options: float) -> list[str]:
    hits = mm.search(query, top_k=2, user_id="u", **{**OFF, **options})
    return [h.message.content for h in hits]


def test_person_weight_prefers_the_named_persons_own_turn(chat: MemoryManager) -> None:
    query = "Would Bo enjoy a camping trip in the mountains?"
    assert _order(chat, query) == [ANN, BO]  # the words and their meaning are Ann's turn
    assert _order(chat, query, person_weight=1.0) == [BO, ANN]


def test_person_weight_leaves_questions_of_fact_alone(chat: MemoryManager) -> None:
    # Named, but asking for a recorded fact: the column is 0 for every turn, the order stays.
    query = "What did Bo say about the camping trip in the mountains?"
    assert _order(chat, query, person_weight=0.4) == _order(chat, query) == [ANN, BO]
    settings = RetrievalSettings(**OFF)
    found = chat.retriever.gather(query, 2, SearchScope(user_id="u"), settings)
    assert found.speakers == {"bo"}
    assert not found.judgement
    _, table = evidence(found, settings)
    assert not table[:, EVIDENCE.index("person")].any()


def test_person_column_marks_the_named_speaker_of_a_judgement_question(
    chat: MemoryManager,
) -> None:
    settings = RetrievalSettings(**OFF)
    query = "Would Bo enjoy a camping trip in the mountains?"
    found = chat.retriever.gather(query, 2, SearchScope(user_id="u"), settings)
    messages, table = evidence(found, settings)
    column = {m.name: row[EVIDENCE.index("person")] for m, row in zip(messages, table, strict=True)}
    assert column == {"Ann": 0.0, "Bo": 1.0}
    # A judgement question naming no speaker has nothing to prefer.
    anyone = chat.retriever.gather(
        "Would anyone enjoy camping?", 2, SearchScope(user_id="u"), settings
    )
    assert anyone.judgement
    assert not anyone.speakers
    assert not evidence(anyone, settings)[1][:, EVIDENCE.index("person")].any()


def test_person_weight_is_configured_and_checked() -> None:
    assert RetrievalSettings().person_weight == MemoryConfig().rag.person_weight == 0.2
    assert load_config({"rag": {"person_weight": 0.5}}).rag.person_weight == 0.5
    with pytest.raises(ConfigError, match="person_weight"):
        load_config({"rag": {"person_weight": -1}})
    with (
        MemoryManager(":memory:", embedding=None, vector_store=None) as mm,
        pytest.raises(InvalidInputError, match="person_weight"),
    ):
        mm.search("Would Bo like it?", person_weight=-0.5)
