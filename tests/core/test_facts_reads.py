"""Reading user memory costs the user's facts, never their history or other users'.

The proof is SQLite's own work, as in ``test_scope_reads.py``: while a read runs, a progress
handler counts the virtual-machine steps of every statement and a trace callback records
them. The profile, the open tasks and the facts as of a date take exactly as many steps after
the user's history grew by thousands of messages and other users gained facts of their own,
and every statement they run reads the facts tables only. A read with a query (a search, a
profile ranked by a query) does the same after the user's history grew; its keyword index
visits the user's facts only, though BM25's word statistics are the whole index's (FTS5
computes them in C, out of the VM's count: see docs/user-memory.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from tests.core.test_scope_reads import sqlite_work

USER_FACTS = [
    ("Lives in Lisbon", "fact", "home city"),
    ("Works as a nurse", "fact", "job"),
    ("Prefers aisle seats", "preference", "seat"),
    ("Is vegan", "preference", "diet"),
    ("Chose the blue plan", "decision", None),
    ("Book the flights to Porto", "task", None),
    ("Call the landlord", "task", None),
]

READS: dict[str, Callable[[MemoryManager], Any]] = {
    "get_profile": lambda mm: mm.get_profile("ann", max_tokens=200),
    "get_open_tasks": lambda mm: mm.get_open_tasks("ann"),
    "get_facts(as_of)": lambda mm: mm.get_facts("ann", as_of="2030-01-01"),
    "get_facts(history)": lambda mm: mm.get_facts("ann", include_history=True),
}
QUERIES: dict[str, Callable[[MemoryManager], Any]] = {
    "get_profile(query)": lambda mm: mm.get_profile("ann", max_tokens=200, query="Lisbon seats"),
    "search_facts": lambda mm: mm.search_facts("ann", "vegan nurse"),
}


@pytest.fixture
def mm(tmp_path: Path) -> Iterator[MemoryManager]:
    with MemoryManager(
        str(tmp_path / "m.db"), embedding=None, token_counter="approximate"
    ) as manager:
        # users sorting before and after ann: her rows are bounded by others' in every index
        for user in ("aaron", "ann", "zoe"):
            for text, kind, subject in USER_FACTS:
                manager.add_fact(user, text, kind=kind, subject=subject)
        manager.save_messages("ann-0", [Message(role="user", content="hello")] * 10, user_id="ann")
        yield manager


def _work(mm: MemoryManager, read: Callable[[MemoryManager], Any]) -> tuple[Any, int, list[str]]:
    with sqlite_work(mm) as seen:
        result = read(mm)
    return result, seen["steps"], list(seen["statements"])


def _tables(statement: str) -> set[str]:
    return set(re.findall(r"\b(?:FROM|JOIN)\s+(\w+)", statement, flags=re.I))


def _more_history(mm: MemoryManager) -> None:
    """Two thousand more messages of ann's, saying nothing to remember."""
    for n in range(20):
        talk = [Message(role="user", content=f"about the weather, part {k}") for k in range(100)]
        mm.save_messages(f"ann-{n + 1}", talk, user_id="ann")


def _other_users(mm: MemoryManager) -> None:
    for n in range(60):
        for text, kind, subject in USER_FACTS:
            mm.add_fact(f"user{n}", text, kind=kind, subject=subject)


def _same_work(mm: MemoryManager, read: Callable[[MemoryManager], Any], *grow: Any) -> None:
    read(mm)  # once first: the keyword index reloads its structure after the file changed
    before, steps, statements = _work(mm, read)
    for step in grow:
        step(mm)
    mm.flush()  # the messages' keyword indexing is done: nothing else runs while it is read
    mm.store.index_keywords()
    read(mm)
    after, steps_after, statements_after = _work(mm, read)
    assert before == after
    assert before  # the read found something: the scan is not trivially empty
    assert (steps_after, len(statements_after)) == (steps, len(statements))
    read_tables = set().union(*(_tables(s) for s in statements))
    # facts_fts_docsize: the facts' index's row sizes (a user's own BM25 statistics)
    assert read_tables <= {"facts", "fact_sources", "facts_fts", "facts_fts_docsize"}, read_tables


@pytest.mark.parametrize("name", sorted(READS))
def test_reads_cost_the_users_facts_not_history_or_other_users(
    mm: MemoryManager, name: str
) -> None:
    _same_work(mm, READS[name], _more_history, _other_users)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_reads_with_a_query_cost_the_users_facts_not_history(mm: MemoryManager, name: str) -> None:
    _same_work(mm, QUERIES[name], _more_history)


def test_the_profile_is_the_users_facts_within_the_budget(mm: MemoryManager) -> None:
    profile = mm.get_profile("ann", max_tokens=200)
    assert {f.text for f in profile.facts} == {t for t, kind, _ in USER_FACTS if kind != "task"}
    assert profile.tokens <= 200
    small = mm.get_profile("ann", max_tokens=12)
    assert 0 < len(small.facts) < len(profile.facts)
    assert small.tokens <= 12


@pytest.mark.parametrize("semantic", [False, True])
def test_a_fact_found_by_search_names_the_messages_it_came_from(
    tmp_path: Path, semantic: bool
) -> None:
    from harombe_core.testing import FakeEmbedder

    embedder = FakeEmbedder() if semantic else None
    with MemoryManager(str(tmp_path / "m.db"), embedding=embedder) as mm:
        first = mm.save_message(
            "s1", Message(role="user", content="I work as a nurse."), user_id="ann"
        )
        mm.save_message("s1", Message(role="assistant", content="Noted."))
        again = mm.save_message(
            "s2", Message(role="user", content="I work as a nurse"), user_id="ann"
        )
        mm.end_session("s1")
        mm.end_session("s2")
        (hit,) = mm.search_facts("ann", "nurse", top_k=1)
        assert hit.fact.text == "Works as a nurse"
        assert hit.fact.message_ids == [first, again]
        assert hit.fact.session_ids == ["s1", "s2"]
        said = {m.id: m.content for sid in hit.fact.session_ids for m in mm.get_messages(sid)}
        assert [said[i] for i in hit.fact.message_ids] == [
            "I work as a nurse.",
            "I work as a nurse",
        ]
