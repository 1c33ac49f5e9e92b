"""A user's keyword scores come from the user's own messages and facts, never another's.

FTS5's ``bm25()`` weighs a word by how many rows of the whole file hold it. If that reached a
user's results, user B could learn whether user A's messages hold a rare word (a name, a
diagnosis) by searching it and comparing scores. These tests build the same history of B in
two files, one beside a large history of A full of B's words and one alone, and require B's
results to be the same to the last bit: keyword-only and hybrid search, scoped to the user and
to a session, B's facts, and again after A's messages are changed and deleted.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from harombe_core import MemoryManager, Message
from harombe_core.store import fts_scope, ops
from harombe_core.store.base import SearchScope
from harombe_core.store.runner import Body
from harombe_core.testing import FakeEmbedder

B_WORDS = ["ferret", "allergy", "kowalski", "garden", "running", "penicillin", "tomato", "the"]
A_WORDS = ["ferret", "ferret", "kowalski", "penicillin", "allergy", "diagnosis", "東京の寿司"]
QUERIES = [
    "ferret",
    "kowalski penicillin",
    "what did the doctor say about my allergy",
    "garden tomato running",
    "diagnosis",  # only in A's messages: nothing for B, in either file
    "東京の寿司 ferret",
    "the",
]
B_FACTS = [
    "B is allergic to penicillin",
    "B keeps a ferret named Kowalski",
    "B grows tomato plants in the garden",
]


def _b_turns(rng: random.Random) -> list[tuple[str, str]]:
    """B's history: (session, text), the same in both files."""
    out = []
    for i in range(60):
        words = rng.choices(B_WORDS, k=rng.randint(2, 7))
        out.append((f"b{i % 3}", f"note {i}: " + " ".join(words)))
    out.append(("b0", "東京の寿司 was great"))
    return out


def _a_turns(rng: random.Random) -> list[tuple[str, str]]:
    """A's history: long, and full of B's query words."""
    return [
        (f"a{i % 5}", " ".join(rng.choices(A_WORDS + B_WORDS, k=rng.randint(3, 30))))
        for i in range(700)
    ]


def _build(path: Path, with_a: bool) -> MemoryManager:
    mm = MemoryManager(str(path), embedding=FakeEmbedder(), vector_store="database")
    b_turns = _b_turns(random.Random(1))
    a_turns = _a_turns(random.Random(2)) if with_a else []
    # A's messages come before, between and after B's, so B's ids interleave with them.
    chunk = max(len(a_turns) // (len(b_turns) + 1), 1)
    for i, (session, text) in enumerate(b_turns):
        for a_session, a_text in a_turns[i * chunk : (i + 1) * chunk]:
            mm.save_message(a_session, Message(role="user", content=a_text), user_id="a")
        mm.save_message(session, Message(role="user", content=text), user_id="b")
    for a_session, a_text in a_turns[len(b_turns) * chunk :]:
        mm.save_message(a_session, Message(role="user", content=a_text), user_id="a")
    for text in B_FACTS:
        mm.add_fact("b", text)
    if with_a:
        for i in range(200):
            mm.add_fact("a", f"A fact {i}: " + " ".join(random.Random(i).choices(A_WORDS, k=5)))
    mm.flush()
    return mm


def _b_results(mm: MemoryManager) -> list[object]:
    """Everything B can see of the ranking: hits as (session, text, score), in order."""
    out: list[object] = []
    scopes = [SearchScope(user_id="b"), SearchScope(session_id="b1")]
    scopes.append(SearchScope(user_id="b", exclude_session_id="b0"))
    for query in QUERIES:
        for scope in scopes:
            hits = mm.store.keyword_search(query, limit=25, scope=scope)
            out.append([(h.message.session_id, h.message.content, h.score) for h in hits])
        for options in ({}, {"vector_weight": 0.0}, {"session_id": "b2"}):
            hits = mm.search(query, top_k=10, user_id="b", **options)
            out.append([(h.message.session_id, h.message.content, h.score) for h in hits])
        facts = mm.store.run(fts_facts(query))
        out.append(facts)
    return out


def fts_facts(query: str) -> ops.Op[list[tuple[int, float]]]:
    from harombe_core.facts.ops import keyword_facts

    return keyword_facts("b", query, limit=10)


@pytest.fixture
def files(tmp_path: Path) -> Iterator[tuple[MemoryManager, MemoryManager]]:
    alone = _build(tmp_path / "alone.db", with_a=False)
    shared = _build(tmp_path / "shared.db", with_a=True)
    yield alone, shared
    alone.close()
    shared.close()


def test_another_users_history_changes_nothing_in_b_results(
    files: tuple[MemoryManager, MemoryManager],
) -> None:
    alone, shared = files
    expected = _b_results(alone)
    assert any(expected[: len(QUERIES)])  # B finds things: the comparison is not empty
    assert _b_results(shared) == expected

    # Changing and deleting A's messages changes nothing either.
    doomed = [m.id or 0 for m in shared.load_session("a2")[::2]]
    shared.replace_messages("a2", doomed, [Message(role="user", content="ferret allergy " * 9)])
    shared.clear_session("a1")
    shared.delete_session("a3")
    shared.save_message("a9", Message(role="user", content="kowalski " * 40), user_id="a")
    shared.flush()
    assert _b_results(shared) == expected


def test_facts_ids_agree_between_the_files(files: tuple[MemoryManager, MemoryManager]) -> None:
    """B's facts are the same rows in both files (B's are written first): same ids, scores."""
    alone, shared = files
    for query in QUERIES:
        assert shared.store.run(fts_facts(query)) == alone.store.run(fts_facts(query))


def test_a_user_alone_in_the_file_scores_as_fts5_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one user, fully indexed, the scope is the file: FTS5 ranks it on its own (no pass
    over the scope's rows), and the results are the scope scoring's to the last bit: the same
    hits, order (ties to the newer message, at every cut), and scores."""
    mm = _build(tmp_path / "alone.db", with_a=False)
    with mm:
        asked = [
            (query, scope, limit)
            for query in [*QUERIES, "note", "the note ferret"]
            for scope in (SearchScope(user_id="b"), SearchScope(session_id="b1"))
            for limit in (1, 3, 25, 100)
        ]

        def results() -> list[list[tuple[int, float]]]:
            return [
                [(h.message.id or 0, h.score) for h in mm.store.keyword_search(q, limit=n, scope=s)]
                for q, s, n in asked
            ]

        whole = results()
        by_user = [i for i, (_, scope, _) in enumerate(asked) if scope.session_id is None]
        assert [whole[i] for i in by_user] == [
            [(h.message.id or 0, h.score) for h in mm.store.keyword_search(q, limit=n)]
            for q, _, n in (asked[i] for i in by_user)
        ]
        monkeypatch.setattr(fts_scope, "_whole_file", _never_whole)
        forced = results()
        assert any(whole)
        assert forced == whole


def _never_whole(scope: SearchScope) -> Body[bool]:
    """``fts_scope._whole_file`` answering no: the scope is scored with its own statistics."""
    return False
    yield  # a body of SQL steps that runs none


def test_the_file_statistics_leak_without_scope_statistics(
    files: tuple[MemoryManager, MemoryManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leak these tests guard against is real: FTS5's own scores differ between files."""
    monkeypatch.setattr(fts_scope, "SCOPE_STATISTICS", False)
    alone, shared = files
    scope = SearchScope(user_id="b")
    assert [h.score for h in alone.store.keyword_search("kowalski", limit=25, scope=scope)] != [
        h.score for h in shared.store.keyword_search("kowalski", limit=25, scope=scope)
    ]


def test_rows_with_only_common_words_are_skipped_only_when_they_cannot_rank(
    files: tuple[MemoryManager, MemoryManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows holding only the scope's commonest words are not read when the scores prove they
    cannot make the cut: the results are those of scoring every row."""
    _, shared = files
    queries = [*QUERIES, "the ferret", "the note", "note the kowalski", "the running note tomato"]
    scopes = [SearchScope(user_id="a"), SearchScope(user_id="b"), SearchScope(session_id="a1")]
    asked = [(q, s, n) for q in queries for s in scopes for n in (1, 5, 25)]
    pruned = [shared.store.keyword_search(q, limit=n, scope=s) for q, s, n in asked]
    monkeypatch.setattr(fts_scope, "_minor_words", lambda *args: ([], 0.0))
    assert pruned == [shared.store.keyword_search(q, limit=n, scope=s) for q, s, n in asked]


def test_a_user_with_many_sessions_is_searched_in_every_one(tmp_path: Path) -> None:
    """Past ``_MAX_RANGES`` sessions the scope is read in one pass over every rowid: a word
    in the user's oldest session (not among the sessions updated last) is found, with
    another user's sessions between the user's and with a time filter (which keeps the
    scoped path even for a user alone)."""
    sessions = fts_scope._MAX_RANGES + 50
    with MemoryManager(tmp_path / "many.db", embedding=None) as mm:
        mm.save_message("b0", Message(role="user", content="zeppelin"), user_id="b")
        for i in range(sessions):
            mm.save_message(f"b{i}", Message(role="user", content=f"b note {i}"), user_id="b")
            mm.save_message(f"a{i}", Message(role="user", content=f"a zeppelin {i}"), user_id="a")
        mm.flush()
        for scope in (
            SearchScope(user_id="b"),
            SearchScope(user_id="b", since=datetime(2000, 1, 1, tzinfo=UTC)),
        ):
            hits = mm.store.keyword_search("zeppelin", limit=5, scope=scope)
            found = [(h.message.session_id, h.message.content) for h in hits]
            # the turn after it answers it (its keyword context): found too, ranked below
            assert found == [("b0", "zeppelin"), ("b0", "b note 0")]


def test_a_long_row_is_counted_from_its_terms_with_the_scores_highlight_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FTS5's highlight() copies the text built so far at every instance it marks, so its
    cost is the row's length times its instances: one message of a million characters
    repeating the word took seconds a search, of every search and recall of its user. A row
    longer than ``_HIGHLIGHT_CHARS`` is read as it is and its terms counted in one pass; the
    scores are the ones highlight() gives, for words of one term, of several (a phrase) and
    of unspaced scripts."""
    long = ("apple e-mail 東京 banana " * 1_500) + "zebra"
    assert len(long) > fts_scope._HIGHLIGHT_CHARS
    mm = MemoryManager(tmp_path / "m.db", embedding=None, token_counter="approximate")
    texts = [long, "apple pie and an e-mail", "東京 trip with apples", "banana apple apple"]
    for i, text in enumerate(texts):
        mm.save_message(f"ann{i % 2}", Message(role="user", content=text), user_id="ann")
    mm.save_message("bob", Message(role="user", content="apple e-mail 東京"), user_id="bob")
    mm.store.index_keywords()
    scope = SearchScope(user_id="ann")
    queries = ["apple", "apple zebra", "e-mail banana", "東京", "apples e-mail 東京 zebra"]

    def searched() -> list[list[tuple[int, float]]]:
        hits = [mm.store.keyword_search(q, limit=10, scope=scope) for q in queries]
        return [[(int(h.message.id or 0), h.score) for h in found] for found in hits]

    long_reads: list[int] = []
    tokens = fts_scope.tokens

    def counting(text: str, **options: Any) -> tuple[str, ...]:
        if len(text or "") > fts_scope._HIGHLIGHT_CHARS:
            long_reads.append(len(text))
        return tokens(text, **options)

    monkeypatch.setattr(fts_scope, "tokens", counting)
    by_terms = searched()
    assert long_reads  # the long row was counted from its terms
    monkeypatch.setattr(fts_scope, "_HIGHLIGHT_CHARS", 10**9)  # every row by highlight()
    assert searched() == by_terms
    assert by_terms[0][0][0] == 1  # the long row holds "apple" most often
    mm.close()


def test_a_long_fact_is_counted_from_its_terms_with_the_scores_highlight_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a user's facts (a fact may be as long as a message)."""
    from harombe_core.facts import ops as fact_ops

    mm = MemoryManager(tmp_path / "m.db", embedding=None, token_counter="approximate")
    mm.add_fact("ann", ("apple e-mail 東京 banana " * 1_500) + "zebra")
    mm.add_fact("ann", "apple pie and an e-mail")
    mm.add_fact("bob", "apple e-mail")
    queries = ["apple", "e-mail zebra", "東京 banana"]

    def searched() -> list[list[tuple[int, float]]]:
        return [mm.store.run(fact_ops.keyword_facts("ann", q, limit=10)) for q in queries]

    by_terms = searched()
    monkeypatch.setattr(fts_scope, "_HIGHLIGHT_CHARS", 10**9)  # every fact by highlight()
    assert searched() == by_terms
    assert all(by_terms)
    mm.close()
