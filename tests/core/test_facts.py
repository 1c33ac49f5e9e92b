"""User memory: facts with their history, consolidated from every extractor, per user.

Each consolidation case runs on SQLite and PostgreSQL (the store operations are written once):
repeat, update, contradiction, completion, a malformed or hostile LLM answer, two users with
the same facts, deletion, and a process killed in the middle of an extraction. The LLMs are
scripted (LangChain's FakeListChatModel, LlamaIndex's MockLLM).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from harombe_core import ContextBudget, Message
from harombe_core.errors import (
    FactExtractionError,
    FactNotFoundError,
    ImportFormatError,
    InvalidInputError,
    SessionNotFoundError,
)
from harombe_core.manager import MemoryManager
from harombe_core.testing import FakeEmbedder


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return url
    return str(tmp_path / "facts.db")


@pytest.fixture
def mm(location: str) -> Iterator[MemoryManager]:
    with MemoryManager(location, embedding=None, token_counter="approximate") as manager:
        yield manager


def _say(mm: MemoryManager, sid: str, user: str, *texts: str, day: int = 1) -> list[int]:
    return mm.save_messages(
        sid,
        [
            Message(role="user", content=t, created_at=datetime(2024, 1, day, 12, i, tzinfo=UTC))
            for i, t in enumerate(texts)
        ],
        user_id=user,
    )


def _texts(facts: list[Any]) -> list[str]:
    return [f.text for f in facts]


# consolidation ----------------------------------------------------------------------------
def test_repeat_merges_and_its_sources_grow(mm: MemoryManager) -> None:
    a = _say(mm, "s1", "ann", "I live in Lisbon.")
    b = _say(mm, "s2", "ann", "I live in Lisbon")
    mm.end_session("s1")
    mm.end_session("s2")
    (fact,) = mm.get_facts("ann")
    assert fact.text == "Lives in Lisbon"
    assert fact.subject == "home city"
    assert fact.message_ids == [a[0], b[0]]
    assert fact.session_ids == ["s1", "s2"]


def test_two_statements_in_one_sentence_are_two_facts(mm: MemoryManager) -> None:
    """ "I live in Lisbon and I am vegetarian" was one fact, "Lives in Lisbon and I am
    vegetarian", filed under the home city: a profile a model would read as broken, and a
    later "I moved to Porto" would have closed the diet with it."""
    (said,) = _say(
        mm, "s1", "ann", "I live in Lisbon and I am vegetarian, but I'm allergic to nuts."
    )
    mm.end_session("s1")
    facts = {f.subject: f.text for f in mm.get_facts("ann")}
    assert facts == {
        "home city": "Lives in Lisbon",
        "diet": "Is vegetarian",
        "allergy": "Is allergic to nuts",
    }
    assert {f.message_ids[0] for f in mm.get_facts("ann")} == {said}
    _say(mm, "s2", "ann", "My wife and I live in Porto now.", day=2)  # "and I" after a noun
    mm.end_session("s2")
    assert "Lives in Porto now" in _texts(mm.get_facts("ann"))


def test_update_closes_the_old_value_and_keeps_it_as_history(mm: MemoryManager) -> None:
    _say(mm, "s1", "ann", "I live in Lisbon.", day=1)
    _say(mm, "s2", "ann", "I moved to Berlin.", day=20)
    mm.end_session("s1")
    mm.end_session("s2")
    (now,) = mm.get_facts("ann")
    assert now.text == "Moved to Berlin"
    assert now.current
    (then,) = mm.get_facts("ann", as_of="2024-01-10")
    assert then.text == "Lives in Lisbon"
    assert then.valid_to == now.valid_from == datetime(2024, 1, 20, 12, 0, tzinfo=UTC)
    assert now.supersedes == then.id
    history = mm.get_facts("ann", include_history=True)
    assert _texts(history) == ["Lives in Lisbon", "Moved to Berlin"]


def test_an_older_value_extracted_late_is_history_not_current(mm: MemoryManager) -> None:
    _say(mm, "new", "ann", "I live in Berlin.", day=20)
    _say(mm, "old", "ann", "I live in Lisbon.", day=1)
    mm.end_session("new")
    mm.end_session("old")
    assert _texts(mm.get_facts("ann")) == ["Lives in Berlin"]
    assert _texts(mm.get_facts("ann", as_of="2024-01-05")) == ["Lives in Lisbon"]


def test_values_extracted_out_of_order_never_overlap_in_history(mm: MemoryManager) -> None:
    """Sessions ended in any order: each as-of read still gives one home city, the one said
    last before that day (a late value shortens the history value it falls inside)."""
    _say(mm, "new", "ann", "I live in Berlin.", day=20)
    _say(mm, "old", "ann", "I live in Lisbon.", day=1)
    _say(mm, "mid", "ann", "I live in Porto.", day=10)
    _say(mm, "early", "ann", "I live in Faro.", day=5)
    for sid in ("new", "old", "mid", "early"):
        mm.end_session(sid)
    assert _texts(mm.get_facts("ann")) == ["Lives in Berlin"]
    for day, city in ((3, "Lisbon"), (7, "Faro"), (15, "Porto"), (25, "Berlin")):
        assert _texts(mm.get_facts("ann", as_of=f"2024-01-{day:02d}")) == [f"Lives in {city}"]


def test_a_valid_from_still_to_come_is_refused_not_moved_to_now(mm: MemoryManager) -> None:
    with pytest.raises(InvalidInputError, match=r"valid_from .* is in the future"):
        mm.add_fact("ann", "Lives in Berlin", subject="home city", valid_from="2999-01-01")
    assert mm.get_facts("ann", include_history=True) == []
    then = mm.add_fact("ann", "Lives in Lisbon", subject="home city", valid_from="2024-01-01")
    assert then.valid_from == datetime(2024, 1, 1, tzinfo=UTC)


def test_contradiction_supersedes(mm: MemoryManager) -> None:
    _say(mm, "s1", "ann", "I love sushi!", "I eat meat every day.", day=1)
    _say(mm, "s2", "ann", "I hate sushi.", "I don't eat meat every day.", day=2)
    mm.end_session("s1")
    mm.end_session("s2")
    assert sorted(_texts(mm.get_facts("ann"))) == ["Doesn't eat meat every day", "Hates sushi"]
    assert len(mm.get_facts("ann", include_history=True)) == 4


def test_a_corrected_task_is_history_but_was_never_done(mm: MemoryManager) -> None:
    """Correcting a task's text supersedes it; only completing it makes it done."""
    old = mm.add_fact("ann", "Buy milk", kind="task")
    new = mm.correct_fact("ann", old.id, "Buy oat milk")
    assert _texts(mm.get_open_tasks("ann")) == ["Buy oat milk"]
    (before,) = [f for f in mm.get_facts("ann", include_history=True) if f.id == old.id]
    assert before.valid_to is not None
    assert before.status == "open"
    assert new.supersedes == old.id
    assert mm.complete_task("ann", new.id).status == "done"
    assert mm.get_open_tasks("ann") == []


def test_completion_closes_the_task(mm: MemoryManager) -> None:
    _say(mm, "s1", "ann", "Remind me to book the flights to Porto. I need to call my mother.")
    mm.end_session("s1")
    assert _texts(mm.get_open_tasks("ann")) == ["Book the flights to Porto", "Call their mother"]
    assert mm.get_session_state("s1").outcome == "ongoing"
    _say(mm, "s2", "ann", "I booked the flights to Porto!", day=2)
    mm.end_session("s2")
    assert _texts(mm.get_open_tasks("ann")) == ["Call their mother"]
    done = [f for f in mm.get_facts("ann", kinds=["task"], include_history=True) if not f.current]
    assert [(f.text, f.status) for f in done] == [("Book the flights to Porto", "done")]
    assert mm.get_session_state("s2").outcome == "resolved"


def test_facts_of_a_session_without_owner_are_not_extracted(mm: MemoryManager) -> None:
    mm.save_message("anon", Message(role="user", content="I live in Lisbon."))
    mm.end_session("anon")
    assert mm.extract_facts("anon") == 0


# LLM extractors -------------------------------------------------------------------------
def _llm_manager(location: str, answers: list[str]) -> MemoryManager:
    from langchain_core.language_models import FakeListChatModel

    return MemoryManager(
        location,
        embedding=None,
        token_counter="approximate",
        fact_extractor=FakeListChatModel(responses=answers),
    )


def test_llm_extractor_adds_updates_and_closes(location: str) -> None:
    first = json.dumps(
        {
            "operations": [
                {"action": "add", "kind": "fact", "text": "Works at Acme", "subject": "employer"},
                {"action": "add", "kind": "task", "text": "Renew the passport"},
            ]
        }
    )
    with _llm_manager(location, [first]) as mm:
        _say(mm, "s1", "ann", "I work at Acme and must renew my passport.")
        mm.end_session("s1")
        facts = {f.text: f for f in mm.get_facts("ann")}
        employer, task = facts["Works at Acme"], facts["Renew the passport"]
    second = json.dumps(
        {
            "operations": [
                {"action": "update", "target_id": employer.id, "text": "Works at Globex"},
                {"action": "close", "target_id": task.id},
            ]
        }
    )
    with _llm_manager(location, [second]) as mm:
        ids = _say(mm, "s2", "ann", "New job at Globex; passport renewed.", day=2)
        mm.end_session("s2")
        (now,) = mm.get_facts("ann")
        assert (now.text, now.subject, now.supersedes) == (
            "Works at Globex",
            "employer",
            employer.id,
        )
        assert now.message_ids == ids
        assert mm.get_open_tasks("ann") == []


@pytest.mark.parametrize(
    "answer",
    [
        "Sure! Here are the facts: the user lives in Lisbon.",
        '{"operations": [{"action": "add", "kind": "fact", "text": "x"}, {"action": "drop"}]}',
        '{"operations": [{"action": "update", "target_id": "1; DROP TABLE facts", "text": "x"}]}',
        '{"operations": "all of them"}',
        json.dumps({"operations": [{"action": "add", "text": "x"}] * 500}),
    ],
)
def test_malformed_answer_is_a_typed_error_and_nothing_is_written(
    location: str, answer: str
) -> None:
    with _llm_manager(location, [answer]) as mm:
        _say(mm, "s1", "ann", "I live in Lisbon.")
        with pytest.raises(FactExtractionError):
            mm.extract_facts("s1")
        assert mm.get_facts("ann", include_history=True) == []
    # the batch stays pending: a working model extracts it later
    good = '{"operations": [{"action": "add", "text": "Lives in Lisbon", "subject": "home city"}]}'
    with _llm_manager(location, [good]) as mm:
        assert mm.extract_facts("s1") == 1
        assert _texts(mm.get_facts("ann")) == ["Lives in Lisbon"]


def test_hostile_answer_cannot_reach_another_users_facts(location: str) -> None:
    with MemoryManager(location, embedding=None) as mm:
        bob_fact = mm.add_fact("bob", "Bob's secret", subject="secret")
        other = _say(mm, "bob-s", "bob", "hello")[0]
    hostile = json.dumps(
        {
            "operations": [
                {"action": "close", "target_id": bob_fact.id},
                {"action": "update", "target_id": bob_fact.id, "text": "Pwned"},
                {"action": "add", "text": "Likes tea", "message_id": other},
            ]
        }
    )
    with _llm_manager(location, [hostile]) as mm:
        mine = _say(mm, "s1", "ann", "I like tea.")
        mm.extract_facts("s1")
        assert [(f.text, f.current) for f in mm.get_facts("bob", include_history=True)] == [
            ("Bob's secret", True)
        ]
        ann = mm.get_facts("ann")
        assert sorted(_texts(ann)) == ["Likes tea", "Pwned"]
        assert all(f.message_ids == mine and f.session_ids == ["s1"] for f in ann)


async def test_llamaindex_llm_as_extractor(location: str) -> None:
    from llama_index.core.base.llms.types import CompletionResponse
    from llama_index.core.llms import MockLLM

    class Scripted(MockLLM):
        def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            return CompletionResponse(
                text='{"operations": [{"action": "add", "text": "Is vegan"}]}'
            )

        async def acomplete(
            self, prompt: str, formatted: bool = False, **kw: Any
        ) -> CompletionResponse:
            return self.complete(prompt)

    with MemoryManager(location, embedding=None, fact_extractor=Scripted()) as mm:
        _say(mm, "s1", "ann", "I'm vegan these days.")
        assert await mm.aextract_facts("s1") == 1
        assert _texts(mm.get_facts("ann")) == ["Is vegan"]


# users, editing, deletion -----------------------------------------------------------------
def test_two_users_with_the_same_facts_stay_apart(mm: MemoryManager) -> None:
    _say(mm, "a", "ann", "I live in Lisbon. Remind me to water the plants.")
    _say(mm, "b", "bob", "I live in Lisbon. Remind me to water the plants.")
    mm.end_session("a")
    mm.end_session("b")
    ann, bob = mm.get_facts("ann"), mm.get_facts("bob")
    assert _texts(ann) == _texts(bob)
    assert {f.id for f in ann}.isdisjoint(f.id for f in bob)
    assert all(f.session_ids == ["a"] for f in ann)
    assert mm.forget_fact("bob", ann[0].id) is False
    mm.complete_task("ann", mm.get_open_tasks("ann")[0].id)
    assert mm.get_open_tasks("ann") == []
    assert len(mm.get_open_tasks("bob")) == 1
    with pytest.raises(FactNotFoundError):
        mm.complete_task("bob", ann[0].id)
    hits = mm.search_facts("bob", "Lisbon")
    assert [h.fact.user_id for h in hits] == ["bob"]


def test_add_correct_forget(mm: MemoryManager, location: str) -> None:
    fact = mm.add_fact("ann", "Prefers window seats", kind="preference", subject="seat")
    again = mm.add_fact("ann", "prefers window seats.", kind="preference")
    assert again.id == fact.id
    assert fact.origin == "user"
    fixed = mm.correct_fact("ann", fact.id, "Prefers aisle seats")
    assert fixed.supersedes == fact.id
    assert fixed.subject == "seat"
    assert _texts(mm.get_facts("ann")) == ["Prefers aisle seats"]
    with pytest.raises(FactNotFoundError):
        mm.correct_fact("ann", fact.id, "again")
    assert [h.fact.id for h in mm.search_facts("ann", "aisle")] == [fixed.id]
    assert mm.forget_fact("ann", fixed.id) is True
    assert mm.search_facts("ann", "aisle") == []
    assert mm.search_facts("ann", "aisle", include_history=True) == []
    if not location.startswith("postgres"):
        with sqlite3.connect(location) as db:
            rows = db.execute("SELECT count(*) FROM facts_fts WHERE facts_fts MATCH 'aisle'")
            assert rows.fetchone()[0] == 0


def test_deleting_sessions_removes_what_was_extracted_from_them(mm: MemoryManager) -> None:
    _say(mm, "s1", "ann", "I live in Lisbon.")
    _say(mm, "s2", "ann", "I live in Lisbon. I'm allergic to peanuts.")
    mm.end_session("s1")
    mm.end_session("s2")
    mm.add_fact("ann", "Has a dog named Rex")
    mm.delete_session("s2")
    facts = mm.get_facts("ann")
    assert sorted(_texts(facts)) == ["Has a dog named Rex", "Lives in Lisbon"]
    assert [f.session_ids for f in facts if f.text == "Lives in Lisbon"] == [["s1"]]
    mm.delete_session("s1")
    assert _texts(mm.get_facts("ann")) == ["Has a dog named Rex"]
    assert mm.forget_user_facts("ann") == 1
    assert mm.get_facts("ann", include_history=True) == []


def test_bad_input_is_typed(mm: MemoryManager) -> None:
    with pytest.raises(InvalidInputError, match="kind"):
        mm.add_fact("ann", "x", kind="rumour")
    with pytest.raises(InvalidInputError, match="empty"):
        mm.add_fact("ann", "   ")
    with pytest.raises(InvalidInputError, match="user_id"):
        mm.get_facts(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="outcome"):
        mm.set_session_state("s", outcome="won")
    with pytest.raises(SessionNotFoundError):
        mm.set_session_state("nope", important=True)
    with pytest.raises(InvalidInputError, match="as_of"):
        mm.get_facts("ann", as_of="yesterday")


# reading it -------------------------------------------------------------------------------
def test_profile_fits_its_budget_most_relevant_first(mm: MemoryManager) -> None:
    for text in ["Lives in Lisbon", "Works as a nurse", "Has two cats", "Plays the cello"]:
        mm.add_fact("ann", text)
    mm.add_fact("ann", "Loves jazz", kind="preference")
    full = mm.get_profile("ann", max_tokens=500)
    assert len(full.facts) == 5
    assert "- (preference) Loves jazz" in str(full)
    small = mm.get_profile("ann", max_tokens=12, query="what instrument? cello")
    assert small.tokens <= 12
    assert small.facts[0].text == "Plays the cello"
    assert mm.get_profile("bob").facts == []


def test_get_context_puts_profile_and_open_tasks_in_front(mm: MemoryManager) -> None:
    _say(mm, "old", "ann", "I live in Lisbon. Remind me to renew the passport.")
    mm.end_session("old")
    mm.create_session(session_id="new", user_id="ann", system_prompt="Be brief.")
    _say(mm, "new", "ann", "hi again", day=3)
    context = mm.get_context("new", max_tokens=2000, budget=ContextBudget())
    kinds = [m.metadata.get("harombe") for m in context]
    assert kinds[:3] == [None, "profile", "tasks"]
    assert "Lives in Lisbon" in context[1].content
    assert "Renew the passport" in context[2].content
    assert context[-1].content == "hi again"
    anon = mm.get_context("new", max_tokens=2000, budget=ContextBudget(), user_profile="VIP")
    assert anon[1].content == "User profile:\nVIP"


def test_past_sessions_are_picked_by_importance_too(mm: MemoryManager) -> None:
    for i in range(7):
        _say(mm, f"s{i}", "ann", f"We talked about topic number {i} today.", day=i + 1)
        mm.end_session(f"s{i}")
    assert mm.set_session_state("s0", important=True).important is True
    mm.create_session(session_id="now", user_id="ann")
    context = mm.get_context("now", max_tokens=4000, budget=ContextBudget())
    (summaries,) = [m for m in context if m.metadata.get("harombe") == "summaries"]
    assert "topic number 0" in summaries.content  # the oldest, but flagged important
    assert "topic number 6" in summaries.content


def test_search_by_meaning_with_semantic_memory(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "m.db", embedding=FakeEmbedder()) as mm:
        mm.add_fact("ann", "Her favourite drink is green tea", subject="favorite drink")
        mm.add_fact("ann", "Drives a red bicycle to work")
        hits = mm.search_facts("ann", "favourite drink green tea", top_k=1)
        assert hits[0].fact.text == "Her favourite drink is green tea"


def test_a_search_says_how_each_fact_matched_and_can_keep_only_matches(tmp_path: Path) -> None:
    """A user has few facts, so a search returns up to top_k of them however weak: each hit
    carries its cosine and keyword evidence, and ``min_similarity`` leaves out what matched
    neither (mem0's ``search(..., threshold=)`` habit)."""
    with MemoryManager(tmp_path / "m.db", embedding=FakeEmbedder()) as mm:
        tea = mm.add_fact("ann", "Her favourite drink is green tea")
        mm.add_fact("ann", "Drives a red bicycle to work")
        mm.flush()
        hits = mm.search_facts("ann", "green tea", top_k=5)
        assert len(hits) == 2  # the bicycle too: every fact is a candidate
        best, weak = hits
        assert best.fact.id == tea.id
        assert best.keyword_score is not None
        assert weak.keyword_score is None
        assert best.vector_score is not None
        assert weak.vector_score is not None
        assert best.vector_score > weak.vector_score
        floor = (best.vector_score + weak.vector_score) / 2
        kept = mm.search_facts("ann", "green tea", min_similarity=floor)
        assert [h.fact.id for h in kept] == [tea.id]
        # a keyword match is kept whatever its cosine
        assert [h.fact.id for h in mm.search_facts("ann", "tea", min_similarity=1.0)] == [tea.id]
        with pytest.raises(InvalidInputError):
            mm.search_facts("ann", "tea", min_similarity=2)


def test_one_fact_and_its_history_by_id(location: str) -> None:
    """mem0's ``get(memory_id)`` and ``history(memory_id)``: one fact by id, and the values
    it has had, oldest first, whichever of them is named; another user's id is not found."""
    with MemoryManager(location, embedding=None) as mm:
        first = mm.add_fact("ann", "Has a cat called Miso", subject="pet")
        second = mm.correct_fact("ann", first.id, "Has a cat called Mochi")
        third = mm.correct_fact("ann", second.id, "Has a cat called Momo")
        other = mm.add_fact("ann", "Lives in Lisbon")
        assert mm.get_fact("ann", first.id).valid_to is not None  # history is found too
        assert mm.get_fact("ann", third.id).text == "Has a cat called Momo"
        line = [first.id, second.id, third.id]
        for named in line:
            assert [f.id for f in mm.get_fact_history("ann", named)] == line
        assert [f.id for f in mm.get_fact_history("ann", other.id)] == [other.id]
        with pytest.raises(FactNotFoundError):
            mm.get_fact("bob", first.id)
        with pytest.raises(FactNotFoundError):
            mm.get_fact_history("bob", first.id)


async def test_async_twins(location: str) -> None:
    with MemoryManager(location, embedding=None) as mm:
        fact = await mm.aadd_fact("ann", "Remind them to stretch", kind="task")
        assert [t.id for t in await mm.aget_open_tasks("ann")] == [fact.id]
        await mm.acomplete_task("ann", fact.id)
        assert await mm.aget_facts("ann") == []
        assert (await mm.asearch_facts("ann", "stretch", include_history=True))[0].fact.id
        assert (await mm.aget_profile("ann")).facts == []
        assert (await mm.aget_fact("ann", fact.id)).status == "done"
        assert [f.id for f in await mm.aget_fact_history("ann", fact.id)] == [fact.id]
        assert await mm.aforget_fact("ann", fact.id)
        assert await mm.aforget_user_facts("ann") == 0


# off the request path ----------------------------------------------------------------------
def test_background_extraction_when_user_memory_is_on(location: str) -> None:
    with MemoryManager(location, embedding=None, user_memory=True) as mm:
        _say(mm, "s1", "ann", "I work as a pilot.")
        mm.flush()
        assert _texts(mm.get_facts("ann")) == ["Works as a pilot"]
        _say(mm, "s1", "ann", "I work as a teacher now.")
        mm.flush()
        assert _texts(mm.get_facts("ann")) == ["Works as a teacher now"]


def test_save_message_never_waits_on_the_background_extractor(tmp_path: Path) -> None:
    from harombe_core.facts.extract import OfflineExtractor

    started, release = threading.Event(), threading.Event()

    class Held(OfflineExtractor):
        def extract(self, messages: Any) -> Any:
            started.set()
            release.wait(60)  # held until the test has saved again
            return super().extract(messages)

    path = str(tmp_path / "m.db")
    with MemoryManager(path, embedding=None, user_memory=True, fact_extractor=Held()) as mm:
        _say(mm, "s1", "ann", "I work as a pilot.")
        assert started.wait(60), "the background extractor never ran"
        _say(mm, "s1", "ann", "I love jazz.", day=2)  # returns while extraction is held
        assert mm.get_facts("ann") == []
        release.set()
        mm.flush()
        assert _texts(mm.get_facts("ann")) == ["Works as a pilot", "Loves jazz"]


_KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from harombe_core.facts import ops
    from harombe_core.manager import MemoryManager

    real = ops._add_source
    def dying(d, fact_id, source):
        yield from real(d, fact_id, source)
        if fact_id >= 2:  # the second fact of the batch is written, not committed
            os.kill(os.getpid(), signal.SIGKILL)
    ops._add_source = dying
    with MemoryManager(sys.argv[1], embedding=None) as mm:
        mm.extract_facts("s1")
    """
)


def test_killed_during_extraction_leaves_nothing_half_written(location: str) -> None:
    path = location
    with MemoryManager(path, embedding=None) as mm:
        _say(mm, "s1", "ann", "I live in Lisbon. I work as a nurse. I love jazz.")
    child = subprocess.run(
        [sys.executable, "-c", _KILLED, path], env=os.environ.copy(), check=False
    )
    assert child.returncode == -signal.SIGKILL
    with MemoryManager(path, embedding=None) as mm:
        assert mm.get_facts("ann", include_history=True) == []
        assert mm.extract_facts("s1") == 1  # the batch is still pending, whole
        assert len(mm.get_facts("ann")) == 3


# carried along ------------------------------------------------------------------------------
def _lisbon_then_berlin(mm: MemoryManager, first: str) -> None:
    """Ann's history: Lisbon, then Berlin (superseding it), and a fact she added; message ids
    shifted by an unrelated session so that copies must re-point the sources."""
    mm.save_message("pad", Message(role="user", content="shifts the message ids"))
    _say(mm, "s1", "ann", first, day=1)
    _say(mm, "s2", "ann", "I moved to Berlin.", day=9)
    mm.end_session("s1")
    mm.end_session("s2")
    mm.add_fact("ann", "Has a dog named Rex")


def test_migrate_carries_facts_with_their_sources_and_state(location: str, tmp_path: Path) -> None:
    from harombe_core.migrate import migrate

    source = str(tmp_path / "source.db")
    with MemoryManager(source, embedding=None) as mm:
        _lisbon_then_berlin(mm, "I live in Lisbon. Remind me to book the flights.")
        mm.set_session_state("s2", important=True)
        want = [(f.text, f.valid_to, f.origin) for f in mm.get_facts("ann", include_history=True)]
    report = migrate(source, location, progress=False)
    assert report.verified
    assert (report.facts, report.copied_facts) == (4, 4)
    with MemoryManager(location, embedding=None) as mm:
        got = mm.get_facts("ann", include_history=True)
        assert [(f.text, f.valid_to, f.origin) for f in got] == want
        berlin = next(f for f in got if f.text == "Moved to Berlin")
        (message,) = [m for m in mm.get_messages("s2") if m.id in berlin.message_ids]
        assert message.content == "I moved to Berlin."
        assert berlin.supersedes == next(f.id for f in got if f.text == "Lives in Lisbon")
        assert mm.get_session_state("s2").important is True
        assert mm.extract_facts("s1") == 0  # already extracted there
    assert migrate(source, location, progress=False).copied_facts == 0


def test_cli_facts_and_profile(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from harombe_core.cli import app

    db = str(tmp_path / "cli.db")
    with MemoryManager(db, embedding=None) as mm:
        _say(mm, "s1", "ann", "I live in Lisbon. Remind me to call Bob.")
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(app, [*args, "--user", "ann", "--db", db])
        assert result.exit_code == 0, result.output
        return result.output

    assert "Lives in Lisbon" in run("facts", "--extract")
    assert "Call Bob" in run("facts", "--tasks")
    assert "Fact 3: Is vegan" in run("facts", "--add", "Is vegan", "--subject", "diet")
    assert "Is vegan" in run("facts", "--search", "vegan")
    profile = run("profile", "--tokens", "50")
    assert "Lives in Lisbon" in profile
    assert "- Call Bob" in profile
    assert "Forgot fact 3" in run("facts", "--forget", "3")
    failed = runner.invoke(app, ["facts", "--forget", "3", "--user", "ann", "--db", db])
    assert failed.exit_code == 1
    assert "no fact 3" in failed.output


def test_forgotten_facts_leave_no_bytes_and_forget_user_takes_them_all(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with MemoryManager(str(path), embedding=None) as mm:
        secret = mm.add_fact("ann", "Keeps the spare key under the zebracorn statue")
        mm.add_fact("ann", "Prefers aisle seats", kind="preference")
        _say(mm, "s1", "ann", "I live in Quuxville.")
        mm.end_session("s1")
        assert mm.forget_fact("ann", secret.id)
        assert mm.forget_user("ann") == 1
        assert mm.get_facts("ann", include_history=True) == []
    for file in tmp_path.iterdir():
        data = file.read_bytes()
        for needle in (b"zebracorn", b"aisle seats", b"Quuxville"):
            assert needle not in data, (file.name, needle)


def test_export_and_import_carry_facts(tmp_path: Path) -> None:
    from harombe_core.export import export_store, import_file

    with MemoryManager(str(tmp_path / "a.db"), embedding=None) as mm:
        _lisbon_then_berlin(mm, "I live in Lisbon.")
        want = [(f.text, f.valid_to, f.origin) for f in mm.get_facts("ann", include_history=True)]
        text = export_store(mm, "json", user_id="ann")
    file = tmp_path / "ann.json"
    file.write_text(text)
    assert '"facts"' in text
    with MemoryManager(str(tmp_path / "b.db"), embedding=None) as mm:
        result = import_file(mm, file, on_conflict="new_id")
        assert result.facts == 3
        got = mm.get_facts("ann", include_history=True)
        assert [(f.text, f.valid_to, f.origin) for f in got] == want
        berlin = next(f for f in got if f.text == "Moved to Berlin")
        (sid,) = berlin.session_ids
        assert [m.content for m in mm.get_messages(sid) if m.id in berlin.message_ids] == [
            "I moved to Berlin."
        ]
        assert berlin.supersedes == next(f.id for f in got if f.text == "Lives in Lisbon")
    bad = text.replace('"kind": "fact"', '"kind": "rumour"', 1)
    file.write_text(bad)
    with MemoryManager(str(tmp_path / "c.db"), embedding=None) as mm:
        with pytest.raises(ImportFormatError, match="facts"):
            import_file(mm, file)
        assert mm.list_sessions() == []
