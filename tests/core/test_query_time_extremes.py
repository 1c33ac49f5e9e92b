"""Time words and extreme dates give ranges or typed errors, never OverflowError or ValueError.

Stored times run from year 1 to 9999 (9999-12-31 is a common "no end" marker), and ``now`` may
be anything a caller passes. A range next to either end stops there; a period wholly before
year 1 names nothing. Checked as a property over every phrase the parser knows and ``now``
anywhere in representable time, and through ``MemoryManager.search`` and ``harombe search``.
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import suppress
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harombe_core import HarombeError, MemoryManager, Message
from harombe_core.query_time import in_ranges, query_time_ranges

PHRASES = [
    "today", "yesterday", "this week", "last week", "past week", "this month", "last month",
    "previous month", "this year", "last year", "past year", "in December", "in January",
    "on 31 December", "on 1 January", "30 December", "December 31st", "999 days ago",
    "999 weeks ago", "999 months ago", "999 years ago", "a year ago", "six months ago",
    "2023-01-01", "December 2023", "in 2023", "on 29 February", "contract on 30 December",
]  # fmt: skip
EXTREMES = [
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(1, 1, 7, tzinfo=UTC),
    datetime(1, 3, 1),
    datetime(9999, 12, 31, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(9999, 12, 25),
    datetime(1, 1, 1, 2, tzinfo=timezone(timedelta(hours=5))),
    datetime(9999, 12, 31, 22, tzinfo=timezone(timedelta(hours=-5))),
]
FIRST = datetime.min.replace(tzinfo=UTC)
LAST = datetime.max.replace(tzinfo=UTC)

moments = st.one_of(
    st.sampled_from(EXTREMES),
    st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=14)),
                                            timezone(timedelta(hours=-12))])),
    st.datetimes(),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    now=moments,
    phrases=st.lists(st.sampled_from(PHRASES), min_size=1, max_size=3),
    when=moments,
    slack=st.sampled_from([0.0, 3.0, 10_000.0, 1e12, float("inf")]),
)
def test_any_phrase_at_any_now_gives_ranges_inside_time(
    now: datetime, phrases: list[str], when: datetime, slack: float
) -> None:
    ranges = query_time_ranges("what about " + " and ".join(phrases), now=now)
    for span in ranges:
        assert FIRST <= span.start < span.end <= LAST
    assert isinstance(in_ranges(when, ranges, slack), bool)


@pytest.mark.parametrize("now", EXTREMES)
@pytest.mark.parametrize("phrase", PHRASES)
def test_each_listed_phrase_at_the_ends_of_time(now: datetime, phrase: str) -> None:
    for span in query_time_ranges(phrase, now=now):
        assert FIRST <= span.start < span.end <= LAST
        assert isinstance(in_ranges(now, [span], 3.0), bool)


def test_today_at_the_last_day_is_that_day_up_to_the_end() -> None:
    (today,) = query_time_ranges("today", now=datetime(9999, 12, 31, 12, tzinfo=UTC))
    assert (today.start, today.end) == (datetime(9999, 12, 31, tzinfo=UTC), LAST)
    assert query_time_ranges("last year", now=datetime(1, 6, 1, tzinfo=UTC)) == []
    (december,) = query_time_ranges("in December", now=datetime(9999, 1, 1, tzinfo=UTC))
    assert december.start == datetime(9999, 12, 1, tzinfo=UTC)
    assert december.end == LAST


@pytest.fixture
def far(tmp_path: Path) -> Path:
    """A database with a message dated 9999-12-31 and one dated year 1."""
    path = tmp_path / "far.db"
    with MemoryManager(path, embedding=None) as mm:
        for day in (datetime(9999, 12, 31, tzinfo=UTC), datetime(1, 1, 1, tzinfo=UTC)):
            mm.save_message(
                f"s{day.year}",
                Message(role="user", content=f"the contract runs to {day.year}", created_at=day),
                user_id="ann",
            )
    return path


def test_search_naming_a_date_next_to_the_last_day(far: Path) -> None:
    with MemoryManager(far, embedding=None) as mm:
        for query in ("contract on 30 December", "contract on 31 December", "contract today"):
            hits = mm.search(query, user_id="ann")
            assert {h.message.created_at.year for h in hits} == {1, 9999}, query
        for now in EXTREMES:
            for phrase in PHRASES:
                with suppress(HarombeError):  # a typed refusal is an answer too
                    mm.search(f"contract {phrase}", user_id="ann", now=now)


def test_harombe_search_prints_results_not_a_traceback(far: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "harombe_core.cli", "search", "contract on 30 December",
         "--db", str(far), "--user", "ann", "--keyword"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "9999" in result.stdout
