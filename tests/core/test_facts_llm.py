"""Every consolidation case with an LLM extractor, for both frameworks' scripted models.

LangChain's ``FakeListChatModel`` (driven by the sync methods) and LlamaIndex's ``MockLLM``
(driven by the async twins) each answer one scripted JSON per batch: a repeat, an update, a
contradiction, a completion, and a malformed or hostile answer (a typed error and nothing
half-written; another user's facts and messages out of reach). On SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from harombe_core import Message
from harombe_core.errors import FactExtractionError
from harombe_core.facts.models import Fact
from harombe_core.manager import MemoryManager


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "facts.db")


@pytest.fixture(params=["langchain", "llamaindex"])
def framework(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _model(framework: str, answer: str) -> Any:
    if framework == "langchain":
        from langchain_core.language_models import FakeListChatModel

        return FakeListChatModel(responses=[answer])
    from llama_index.core.base.llms.types import CompletionResponse
    from llama_index.core.llms import MockLLM

    class Scripted(MockLLM):
        def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            return CompletionResponse(text=answer)

        async def acomplete(
            self, prompt: str, formatted: bool = False, **kw: Any
        ) -> CompletionResponse:
            return self.complete(prompt)

    return Scripted()


def _ops(*operations: dict[str, Any]) -> str:
    return json.dumps({"operations": list(operations)})


async def _turn(
    location: str, framework: str, answer: str, session: str, text: str, day: int = 1
) -> list[int]:
    """The user says ``text`` in ``session``; the scripted model answers ``answer`` for it.
    The ids of the messages saved."""
    with MemoryManager(
        location,
        embedding=None,
        token_counter="approximate",
        fact_extractor=_model(framework, answer),
    ) as mm:
        at = datetime(2024, 1, day, 12, tzinfo=UTC)
        ids = mm.save_messages(
            session, [Message(role="user", content=text, created_at=at)], user_id="ann"
        )
        if framework == "langchain":
            assert mm.extract_facts(session) == 1
        else:
            assert await mm.aextract_facts(session) == 1
        return ids


def _facts(location: str, user: str = "ann", **options: Any) -> list[Fact]:
    with MemoryManager(location, embedding=None) as mm:
        return mm.get_facts(user, **options)


def _open_tasks(location: str) -> list[str]:
    with MemoryManager(location, embedding=None) as mm:
        return [t.text for t in mm.get_open_tasks("ann")]


LISBON = {"action": "add", "text": "Lives in Lisbon", "subject": "home city"}


async def test_repeat_merges_into_the_fact_and_its_sources_grow(
    location: str, framework: str
) -> None:
    first = await _turn(location, framework, _ops(LISBON), "s1", "I live in Lisbon.")
    again = await _turn(location, framework, _ops(LISBON), "s2", "Lisbon is home.", day=2)
    (fact,) = _facts(location, include_history=True)
    assert (fact.text, fact.message_ids, fact.session_ids) == (
        "Lives in Lisbon",
        first + again,
        ["s1", "s2"],
    )


async def test_update_closes_the_old_value_as_history(location: str, framework: str) -> None:
    await _turn(location, framework, _ops(LISBON), "s1", "I live in Lisbon.")
    (lisbon,) = _facts(location)
    update = {"action": "update", "target_id": lisbon.id, "text": "Lives in Berlin"}
    said = await _turn(location, framework, _ops(update), "s2", "I moved to Berlin.", day=9)
    (berlin,) = _facts(location)
    assert (berlin.text, berlin.subject, berlin.supersedes, berlin.message_ids) == (
        "Lives in Berlin",
        "home city",
        lisbon.id,
        said,
    )
    (then,) = _facts(location, as_of="2024-01-05")
    assert (then.id, then.valid_to) == (lisbon.id, berlin.valid_from)


async def test_contradiction_supersedes_by_subject_or_closes(location: str, framework: str) -> None:
    loves = {"action": "add", "kind": "preference", "text": "Loves sushi", "subject": "sushi"}
    meat = {"action": "add", "text": "Eats meat", "subject": "diet"}
    await _turn(location, framework, _ops(loves, meat), "s1", "I love sushi and eat meat.")
    eats = next(f for f in _facts(location) if f.text == "Eats meat")
    hates = {"action": "add", "kind": "preference", "text": "Hates sushi", "subject": "sushi"}
    stop = {"action": "close", "target_id": eats.id}
    await _turn(location, framework, _ops(hates, stop), "s2", "Sushi: never again. No meat.", 2)
    assert [f.text for f in _facts(location)] == ["Hates sushi"]
    history = _facts(location, include_history=True)
    assert sorted((f.text, f.current) for f in history) == [
        ("Eats meat", False),
        ("Hates sushi", True),
        ("Loves sushi", False),
    ]


async def test_completion_closes_the_task(location: str, framework: str) -> None:
    task = {"action": "add", "kind": "task", "text": "Book the flights"}
    call = {"action": "add", "kind": "task", "text": "Call mother"}
    await _turn(location, framework, _ops(task, call), "s1", "Remind me: flights, mother.")
    assert _open_tasks(location) == ["Book the flights", "Call mother"]
    flights = next(f for f in _facts(location) if f.text == "Book the flights")
    done = {"action": "close", "target_id": flights.id}
    await _turn(location, framework, _ops(done), "s2", "I booked the flights.", day=2)
    assert _open_tasks(location) == ["Call mother"]
    (closed,) = [f for f in _facts(location, include_history=True) if not f.current]
    assert (closed.id, closed.status) == (flights.id, "done")


@pytest.mark.parametrize(
    "answer",
    [
        "Sure! The user lives in Berlin now.",
        '{"operations": [{"action": "add", "text": "Lives in Berlin"}, {"action": "drop"}]}',
        '{"operations": [{"action": "update", "target_id": "1 OR 1=1", "text": "x"}]}',
        '{"operations": [{"action": "add", "kind": "rumour", "text": "x"}]}',
        '{"operations": "all of them"}',
        _ops(*[{"action": "add", "text": "spam"}] * 100),
    ],
    ids=["prose", "unknown-action", "injected-id", "unknown-kind", "not-a-list", "runaway"],
)
async def test_malformed_answer_is_typed_and_writes_nothing(
    location: str, framework: str, answer: str
) -> None:
    await _turn(location, framework, _ops(LISBON), "s1", "I live in Lisbon.")
    before = _facts(location, include_history=True)
    with pytest.raises(FactExtractionError):
        await _turn(location, framework, answer, "s2", "I moved to Berlin.", day=9)
    assert _facts(location, include_history=True) == before
    # the batch is still pending, whole: a sound answer extracts it later
    (lisbon,) = before
    good = _ops({"action": "update", "target_id": lisbon.id, "text": "Lives in Berlin"})
    with MemoryManager(location, embedding=None, fact_extractor=_model(framework, good)) as mm:
        assert mm.extract_facts("s2") == 1
        assert [f.text for f in mm.get_facts("ann")] == ["Lives in Berlin"]


async def test_hostile_answer_reaches_no_other_user(location: str, framework: str) -> None:
    with MemoryManager(location, embedding=None) as mm:
        secret = mm.add_fact("bob", "Bob's alarm code is 1234", subject="alarm")
        bobs = mm.save_message("bob-s", Message(role="user", content="hello"), user_id="bob")
    hostile = _ops(
        {"action": "close", "target_id": secret.id},
        {"action": "update", "target_id": secret.id, "text": "Alarm code is 0000"},
        {"action": "add", "text": "Likes tea", "message_id": bobs, "subject": "alarm"},
    )
    mine = await _turn(location, framework, hostile, "s1", "I like tea.")
    assert [(f.text, f.current) for f in _facts(location, "bob", include_history=True)] == [
        ("Bob's alarm code is 1234", True)
    ]
    ann = _facts(location)
    assert all(f.user_id == "ann" and f.message_ids == mine for f in ann)
    assert "Likes tea" in [f.text for f in ann]


async def test_two_users_with_the_same_answer_keep_their_own_facts(
    location: str, framework: str
) -> None:
    answer = _ops(LISBON, {"action": "add", "kind": "task", "text": "Water the plants"})
    with MemoryManager(location, embedding=None, fact_extractor=_model(framework, answer)) as mm:
        said = {
            user: mm.save_message(
                f"{user}-s", Message(role="user", content="I live in Lisbon."), user_id=user
            )
            for user in ("ann", "bob")
        }
    for user in ("ann", "bob"):  # a fresh scripted model per extraction: one answer each
        with MemoryManager(
            location, embedding=None, fact_extractor=_model(framework, answer)
        ) as mm:
            assert mm.extract_facts(f"{user}-s") == 1
    ann, bob = _facts(location, "ann"), _facts(location, "bob")
    assert [f.text for f in ann] == [f.text for f in bob] == ["Lives in Lisbon", "Water the plants"]
    assert {f.id for f in ann}.isdisjoint(f.id for f in bob)
    assert all(f.message_ids == [said["ann"]] for f in ann)
    assert all(f.message_ids == [said["bob"]] for f in bob)
    with MemoryManager(location, embedding=None) as mm:
        mm.complete_task("ann", ann[1].id)
        assert [t.text for t in mm.get_open_tasks("bob")] == ["Water the plants"]


def test_a_plain_function_is_an_extractor_too(tmp_path: Path) -> None:
    prompts: list[str] = []

    def llm(prompt: str) -> str:
        prompts.append(prompt)
        return _ops(LISBON)

    with MemoryManager(str(tmp_path / "m.db"), embedding=None, fact_extractor=llm) as mm:
        mm.save_message("s1", Message(role="user", content="I live in Lisbon."), user_id="ann")
        mm.end_session("s1")
        assert [f.text for f in mm.get_facts("ann")] == ["Lives in Lisbon"]
    assert len(prompts) == 1
    assert "I live in Lisbon." in prompts[0]
