"""Importing a long history of past conversations, as LoCoMo and LongMemEval users do.

Their sessions come with dates in the past, in several spellings, often out of order; turns
can be duplicated, empty, very long, in other scripts, with emoji or code. What is checked:
the given times are kept and order the sessions, nothing is lost, keyword search finds what
was said, and a question carrying its own date (``now=``) reads "last week" against those
times. A history of 25,000 turns of one user keeps the recall mechanics (a planted turn found
by its words, time filters, ``now=``). Keyword-only stores: no model is run.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from harombe_core import InvalidInputError, InvalidMessageError, MemoryManager, Message
from harombe_core.store import ops

#: Session dates as the public benchmarks spell them, and how a user turns each into a time.
LONGMEMEVAL = ("2023/05/20 (Sat) 02:21", "%Y/%m/%d (%a) %H:%M")
LOCOMO = ("1:56 pm on 8 May, 2023", "%I:%M %p on %d %B, %Y")


@pytest.fixture
def mm() -> Iterator[MemoryManager]:
    with MemoryManager(":memory:", embedding=None) as manager:
        yield manager


def test_sessions_imported_out_of_order_list_by_their_own_times(mm: MemoryManager) -> None:
    # A LongMemEval-style history arrives newest first; each session is dated as given.
    given = {
        "s3": datetime.strptime(LONGMEMEVAL[0], LONGMEMEVAL[1]),
        "s1": datetime.strptime(LOCOMO[0], LOCOMO[1]),
        "s2": datetime(2023, 5, 10, 9, 0, tzinfo=timezone(timedelta(hours=2))),
    }
    for sid, when in given.items():
        mm.create_session(user_id="u", session_id=sid, created_at=when)
        mm.save_messages(sid, [Message(role="user", content=f"turn of {sid}", created_at=when)])
    sessions = mm.list_sessions(user_id="u")
    assert [s.id for s in sessions] == ["s3", "s2", "s1"]  # newest activity first
    assert sessions[2].created_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert sessions[1].updated_at == datetime(2023, 5, 10, 7, 0, tzinfo=UTC)
    # Old history is old: pruning by age removes it, as it would a live session that old.
    assert mm.prune_old_sessions(days=30) == 3


def test_session_times_are_checked(mm: MemoryManager) -> None:
    with pytest.raises(InvalidInputError, match="ISO 8601"):
        mm.create_session(created_at=LONGMEMEVAL[0])
    with pytest.raises(InvalidInputError, match="datetime"):
        mm.create_session(created_at=1684549260)


def test_message_times_in_the_formats_users_have(mm: MemoryManager) -> None:
    # ISO with and without a zone (naive is UTC); epoch seconds through a file's records.
    assert Message(role="user", content="x", created_at="2023-05-20T02:21:00+02:00").created_at == (
        datetime(2023, 5, 20, 0, 21, tzinfo=UTC)
    )
    assert Message(role="user", content="x", created_at="2023-05-20 02:21").created_at == (
        datetime(2023, 5, 20, 2, 21, tzinfo=UTC)
    )
    record = {"role": "user", "content": "x", "created_at": 1684549260}
    assert Message.from_dict(record).created_at == datetime(2023, 5, 20, 2, 21, tzinfo=UTC)
    # The benchmarks' own spellings are refused with how to fix it, never guessed.
    for text in (LONGMEMEVAL[0], LOCOMO[0]):
        with pytest.raises(InvalidMessageError, match="ISO 8601"):
            Message(role="user", content="x", created_at=text)
    with pytest.raises(InvalidMessageError, match="fromtimestamp"):
        Message(role="user", content="x", created_at=1684549260)


TURNS = [
    "I adopted a puppy named Biscuit",
    "I adopted a puppy named Biscuit",  # a duplicate turn is kept: it was said twice
    "",
    "party tonight 🎉🎉",
    "```python\ndef parse_config(path):\n    return json.load(open(path))\n```",
    "filler words " * 1600 + "zebracorn",  # 20,000+ characters, the word at the very end
    "東京で寿司を食べました。とても美味しかった",
    "Ich habe gestern Käsespätzle gegessen",
]


def test_nothing_is_lost_and_keywords_are_found(mm: MemoryManager) -> None:
    start = datetime(2023, 5, 1, tzinfo=UTC)
    messages = [
        Message(role="user", content=text, created_at=start + timedelta(minutes=i))
        for i, text in enumerate(TURNS)
    ]
    mm.save_messages("s", messages, user_id="u")
    mm.flush()
    loaded = mm.load_session("s")
    assert [m.content for m in loaded] == TURNS
    assert [m.created_at for m in loaded] == [m.created_at for m in messages]

    def found(query: str) -> list[str]:
        return [h.message.content for h in mm.search(query, user_id="u", top_k=2)]

    assert found("Biscuit") == TURNS[:2]
    assert found("parse_config")[0] == TURNS[4]
    assert found("zebracorn")[0] == TURNS[5]
    assert found("Käsespätzle")[0] == TURNS[7]
    assert found("kasespatzle")[0] == TURNS[7]  # accents folded
    assert found("party")[0] == TURNS[3]


def test_a_question_with_its_own_date_reads_last_week_against_the_given_times(
    mm: MemoryManager,
) -> None:
    mm.save_messages(
        "march",
        [Message(role="user", content="I bought a kayak for the lake", created_at="2023-03-01")],
        user_id="u",
    )
    mm.save_messages(
        "june",
        [Message(role="user", content="I bought a kayak for the river", created_at="2023-06-01")],
        user_id="u",
    )
    question = "which kayak did I buy last week?"
    in_june = mm.search(question, user_id="u", now=datetime(2023, 6, 5))
    in_march = mm.search(question, user_id="u", now=datetime(2023, 3, 5))
    assert in_june[0].message.content.endswith("river")
    assert in_march[0].message.content.endswith("lake")


NEEDLE = "The spare key to the blue shed is taped under the third flowerpot"


@pytest.fixture(scope="module")
def long_history() -> Iterator[MemoryManager]:
    """One user, 1,250 sessions of 20 turns (25,000), six hours apart from 2023-01-01, with
    one planted turn in session 700."""
    start = datetime(2023, 1, 1, tzinfo=UTC)
    with MemoryManager(":memory:", embedding=None) as manager:
        for s in range(1250):
            when = start + timedelta(hours=6 * s)
            turns = [
                Message(
                    role="user" if i % 2 == 0 else "assistant",
                    content=f"session {s} turn {i}: we talked about the weather, dinner plans "
                    f"and the garden again (note {s * 20 + i})",
                    created_at=when + timedelta(minutes=i),
                )
                for i in range(20)
            ]
            if s == 700:
                turns[7] = Message(role="user", content=NEEDLE, created_at=turns[7].created_at)
            manager.create_session(user_id="u", session_id=f"s{s:04d}", created_at=when)
            manager.save_messages(f"s{s:04d}", turns)
        manager.flush()
        yield manager


NEEDLE_AT = datetime(2023, 1, 1, tzinfo=UTC) + timedelta(hours=6 * 700, minutes=7)


def test_a_planted_turn_is_found_among_25k_by_its_words(long_history: MemoryManager) -> None:
    assert len(long_history.list_sessions(limit=None, user_id="u")) == 1250
    hits = long_history.search("where is the spare key to the shed?", user_id="u", top_k=5)
    assert hits[0].message.content == NEEDLE
    assert hits[0].message.created_at == NEEDLE_AT


def test_time_filters_over_25k_turns(long_history: MemoryManager) -> None:
    query = "spare key flowerpot"
    after = long_history.search(query, user_id="u", since=NEEDLE_AT + timedelta(seconds=1))
    before = long_history.search(query, user_id="u", until=NEEDLE_AT - timedelta(seconds=1))
    around = long_history.search(
        query, user_id="u", since=NEEDLE_AT - timedelta(days=1), until=NEEDLE_AT + timedelta(days=1)
    )
    assert NEEDLE not in [h.message.content for h in after + before]
    assert around[0].message.content == NEEDLE
    assert all(
        NEEDLE_AT - timedelta(days=1) <= h.message.created_at <= NEEDLE_AT + timedelta(days=1)
        for h in around
    )


def test_a_word_in_every_turn_still_finds_turns(long_history: MemoryManager) -> None:
    # "garden" is in every turn; the other words are in none. Leaving the common word out for
    # speed must not leave a query that matches nothing.
    hits = long_history.search("the garden, zanzibar?", user_id="u", top_k=3)
    assert len(hits) == 3
    assert all("garden" in h.message.content for h in hits)


def test_now_over_25k_turns(long_history: MemoryManager) -> None:
    # Every turn talks about the garden, so the store-wide best matches are from any day: the
    # month the question names, read against its own date, decides which turns come first.
    question = "what did we say about the garden last month?"
    hits = long_history.search(question, user_id="u", top_k=5, now=datetime(2023, 4, 15))
    assert len(hits) == 5
    # March, or the days after it in which people tell of it (time_slack_days, 7).
    first, last = datetime(2023, 3, 1, tzinfo=UTC), datetime(2023, 4, 8, tzinfo=UTC)
    assert all(first <= h.message.created_at < last for h in hits)
    # The same words with no time named rank the whole history.
    plain = long_history.search("what did we say about the garden?", user_id="u", top_k=5)
    assert not all(first <= h.message.created_at < last for h in plain)


JAPANESE = "東京で寿司を食べました。とても美味しかった"
CHINESE = "我昨天在北京买了一辆自行车"


@pytest.mark.parametrize("indexed", [False, True], ids=["unindexed tail", "indexed"])
def test_words_inside_chinese_and_japanese_text_are_found(mm: MemoryManager, indexed: bool) -> None:
    # Written without spaces: the keyword index must find a word inside a sentence.
    mm.save_messages(
        "s",
        [
            Message(role="user", content=JAPANESE),
            Message(role="assistant", content="That sounds lovely, what else did you do?"),
            Message(role="user", content=CHINESE),
            Message(role="assistant", content="Nice, a bicycle is a good way to get around."),
        ],
        user_id="u",
    )
    if indexed:
        mm.flush()

    def first(query: str) -> str:
        return mm.search(query, user_id="u", top_k=1, neighbor_weight=0.0)[0].message.content

    assert first("寿司") == JAPANESE
    assert first("東京") == JAPANESE
    assert first("寿司はどこで食べた？") == JAPANESE  # a question, its words unspaced too
    assert first("自行车") == CHINESE
    assert first("北京") == CHINESE
    assert first("bicycle") != JAPANESE


def test_chinese_text_is_found_after_a_reindex_and_an_edit(mm: MemoryManager) -> None:
    ids = mm.save_messages(
        "s",
        [
            Message(role="user", content="a turn that will be deleted"),
            Message(role="assistant", content=CHINESE),
        ],
        user_id="u",
    )
    mm.flush()
    mm.store.run(ops.rebuild_keyword_index())  # what `harombe reindex` runs first
    assert mm.search("自行车", user_id="u", top_k=1)[0].message.content == CHINESE
    # Deleting the turn it answered re-indexes it with its new context.
    mm.replace_messages("s", [ids[0]])
    mm.flush()
    hits = mm.search("自行车", user_id="u", top_k=2)
    assert [h.message.content for h in hits] == [CHINESE]
