"""Counts by SQL ``COUNT`` and the summary search give the same answers on every backend
(SQLite in memory and in a file, PostgreSQL): the metadata test is written per dialect."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops

_sessions = itertools.count()

SHAPES: list[dict[str, Any]] = [
    {},
    {"status": "archived"},
    {"status": "active"},
    {"status": 1},
    {"status": ["archived"]},
    {"status": None},
    {"other": "archived"},
    {"status": "archived", "x": 1},
]


def test_count_messages_agrees_with_the_messages(manager: MemoryManager) -> None:
    sid = manager.create_session(session_id=f"count{next(_sessions)}", user_id="ann")
    ids = manager.save_messages(
        sid, [Message(role="user", content=f"m{i}", metadata=s) for i, s in enumerate(SHAPES)]
    )
    unless = {"status": "archived"}
    for after in (None, ids[0], ids[3], ids[-1]):
        expected = [
            m
            for m in manager.get_messages(sid)
            if (after is None or m.id > after) and m.metadata.get("status") != "archived"
        ]
        assert manager.count_messages(sid, after_id=after, unless_metadata=unless) == len(expected)
    assert manager.count_messages(sid, user_id="ann") == len(SHAPES)
    assert manager.count_messages(sid, unless_metadata={'we"ird': "x"}) == len(SHAPES)


def test_search_summaries_stays_in_the_users_sessions(manager: MemoryManager) -> None:
    n = next(_sessions)
    for user in ("ann", "bob"):
        sid = manager.create_session(session_id=f"sum{n}{user}", user_id=user)
        manager.save_messages(
            sid, [Message(role="user", content="We moved the billing database to postgres.")]
        )
        manager.end_session(sid)
    hits = manager.search_summaries("billing database", top_k=10, user_id="ann")
    assert [s.id for s, _ in hits] == [f"sum{n}ann"]
    everyone = {s.id for s, _ in manager.search_summaries("billing database", top_k=50)}
    assert {f"sum{n}ann", f"sum{n}bob"} <= everyone


def _by_words(manager: MemoryManager, query: str) -> set[str]:
    """The sessions the word scoring of search_summaries keeps, from every summary read."""
    words = set(re.findall(r"\w+", query.lower()))
    kept = set()
    for sid, summary, raw in manager.store.run(ops.summarised_sessions(None)):
        topics = (json.loads(raw) if raw else {}).get("topics", [])
        if words & set(re.findall(r"\w+", (summary + " " + " ".join(topics)).lower())):
            kept.add(sid)
    return kept


def test_search_summaries_of_every_user_finds_what_the_words_find(manager: MemoryManager) -> None:
    """Without a user the summaries' keyword index picks the sessions; it must miss none that
    shares a word with the query, whatever the punctuation, case, digits or accents."""
    n = next(_sessions)
    texts = [
        "We moved the Billing database to postgres 3.5 on Friday.",
        "Café opening: the e-mail list_name and don't-forget items.",
        "Nothing in common here at all.",
    ]
    made = []
    for i, text in enumerate(texts):
        sid = manager.create_session(session_id=f"words{n}-{i}", user_id=f"u{i}")
        manager.save_messages(sid, [Message(role="user", content=text)])
        manager.end_session(sid)
        made.append(sid)
    for query in [
        "billing",
        "BILLING database",
        "3",
        "5",
        "café",
        "list_name",
        "don",
        "t",
        "e mail",
        "friday? postgres!",
        "unrelated words",
    ]:
        expected = _by_words(manager, query) & set(made)
        found = {s.id for s, _ in manager.search_summaries(query, top_k=50)} & set(made)
        assert found == expected, query
