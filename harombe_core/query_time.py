"""Dates named in a search query, as time ranges to compare with messages' ``created_at``.

People ask a memory about time: "what did Nate cook on 9 November, 2022?", "where was Tim in
March?", "what did we decide last week?". Neither BM25 nor a sentence embedding relates "9
November" to a message *saved* on that day (its text rarely repeats the date), but every message
carries its time. :func:`query_time_ranges` finds the dates a query names and
:func:`in_ranges` says whether a message's time falls inside one of them, so retrieval can
prefer those messages (``time_weight``).

A message often talks about an event some days after it happened ("I went to Lisbon last
Friday"), so a range is extended by ``slack_days`` *after* its end. Recognised, in English:

* a day: ``9 November 2022``, ``November 9th, 2022``, ``9 Nov``, ``2022-11-09``;
* a month: ``November 2022``, ``in November`` (any year when none is given);
* a year: ``in 2023``;
* relative to ``now``: ``today``, ``yesterday``, ``this/last week``, ``this/last month``,
  ``this/last year``, ``N days/weeks/months ago``.

Written as a few regular expressions rather than with a general date parser: a query is parsed
on every search, in well under a millisecond, and a parser that also reads "may" or "march" as
dates in ordinary sentences would do more harm than good here (a bare "may" is only a month
when capitalised and not at the start of the query).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["TimeRange", "in_ranges", "query_time_ranges", "slack_end"]


@dataclass(frozen=True, slots=True)
class TimeRange:
    """``[start, end)`` in UTC; ``any_year``: the query gave no year, so any year matches."""

    start: datetime
    end: datetime
    any_year: bool = False


_MONTHS: dict[str, int] = {}
for _number in range(1, 13):
    _MONTHS[calendar.month_name[_number].lower()] = _number
    _MONTHS[calendar.month_abbr[_number].lower()] = _number
_MONTHS["sept"] = 9
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"

# Most specific first; a later pattern never reads text an earlier one matched.
_ISO = re.compile(r"\b((?:19|20)\d\d)-(\d{1,2})-(\d{1,2})\b")
_DAY_MONTH = re.compile(rf"\b{_DAY}\s+(?:of\s+)?({_MONTH})\b\.?(?:,?\s*{_YEAR}\b)?", re.I)
_MONTH_DAY = re.compile(rf"\b({_MONTH})\.?\s+{_DAY}\b(?:,?\s*{_YEAR}\b)?", re.I)
_MONTH_YEAR = re.compile(rf"\b({_MONTH})\.?,?\s+(?:of\s+)?{_YEAR}\b", re.I)
_MONTH_ONLY = re.compile(rf"\b({_MONTH})\b", re.I)
_YEAR_ONLY = re.compile(rf"\b{_YEAR}\b")
_RELATIVE = re.compile(
    r"\b(today|yesterday|(?:this|last|past|previous)\s+(?:week|month|year)"
    r"|(\d{1,3}|a|one|two|three|four|five|six)\s+(day|week|month|year)s?\s+ago)\b",
    re.I,
)
_COUNTS = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


#: The ends of representable time: a range that would reach past them stops there.
_FIRST = datetime.min.replace(tzinfo=UTC)
_LAST = datetime.max.replace(tzinfo=UTC)
_ALL_DAYS = (_LAST - _FIRST).days + 1


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # year 1 east of UTC, or year 9999 west of it
        return _FIRST if value.year == 1 else _LAST


def _shift(moment: datetime, delta: timedelta) -> datetime:
    """``moment + delta``, stopping at the first or last representable moment.

    Stored times may be anything from year 1 to 9999 (9999-12-31 is a common "no end" marker),
    and so may ``now``: a range next to either end is cut there instead of overflowing.
    """
    try:
        return moment + delta
    except OverflowError:
        return _LAST if delta > timedelta(0) else _FIRST


def _month_start(index: int) -> datetime:
    """The first moment of month ``index`` (``year * 12 + month - 1``), cut to the ends."""
    year, month = divmod(index, 12)
    if year < 1:
        return _FIRST
    if year > 9999:
        return _LAST
    return datetime(year, month + 1, 1, tzinfo=UTC)


def _day(year: int, month: int, day: int, any_year: bool) -> TimeRange | None:
    try:
        start = datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return TimeRange(start, _shift(start, timedelta(days=1)), any_year)


def _month(year: int, month: int, any_year: bool) -> TimeRange:
    index = year * 12 + month - 1
    return TimeRange(_month_start(index), _month_start(index + 1), any_year)


def _period(today: datetime, unit: str, back: int) -> TimeRange:
    """The calendar ``unit`` (day, week, month, year) ``back`` units before today's (empty
    when it lies wholly before year 1)."""
    if unit in ("day", "week"):
        length = timedelta(days=1) if unit == "day" else timedelta(weeks=1)
        back_to_start = back * length + (
            timedelta(days=today.weekday()) if unit == "week" else timedelta(0)
        )
        # The end from today, not from the start: the start may have been cut at year 1.
        return TimeRange(_shift(today, -back_to_start), _shift(today, length - back_to_start))
    month = today.year * 12 + today.month - 1
    if unit == "month":
        return TimeRange(_month_start(month - back), _month_start(month - back + 1))
    year = (today.year - back) * 12
    return TimeRange(_month_start(year), _month_start(year + 12))


def _relative(text: str, now: datetime) -> TimeRange:
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    word = text.lower().split()
    if word[0] in ("today", "yesterday"):
        return _period(today, "day", int(word[0] == "yesterday"))
    if word[-1] == "ago":
        return _period(today, word[1].rstrip("s"), _COUNTS.get(word[0]) or int(word[0]))
    return _period(today, word[-1], 0 if word[0] == "this" else 1)


def query_time_ranges(query: str, now: datetime | None = None) -> list[TimeRange]:
    """The time ranges ``query`` names (empty when it names none).

    ``now`` anchors relative words ("last week") and the year of a date given without one is
    left open (:attr:`TimeRange.any_year`).
    """
    reference = _utc(now or datetime.now(UTC))
    taken: list[tuple[int, int]] = []
    found: list[TimeRange] = []

    def claim(match: re.Match[str]) -> bool:
        span = match.span()
        if any(span[0] < end and start < span[1] for start, end in taken):
            return False
        taken.append(span)
        return True

    this_year = reference.year
    for match in _ISO.finditer(query):
        if claim(match):
            year, month, day = (int(g) for g in match.groups())
            found.extend(r for r in [_day(year, month, day, False)] if r is not None)
    for pattern, day_first in ((_DAY_MONTH, True), (_MONTH_DAY, False)):
        for match in pattern.finditer(query):
            day_text, month_text = match.group(1, 2) if day_first else match.group(2, 1)
            if not claim(match):
                continue
            year_text = match.group(3)
            year = int(year_text) if year_text else this_year
            day_range = _day(year, _MONTHS[month_text.lower()], int(day_text), not year_text)
            if day_range is not None:
                found.append(day_range)
    for match in _MONTH_YEAR.finditer(query):
        if claim(match):
            found.append(_month(int(match.group(2)), _MONTHS[match.group(1).lower()], False))
    for match in _MONTH_ONLY.finditer(query):
        word = match.group(1)
        if word.lower() in ("may", "march") and (not word[0].isupper() or match.start() == 0):
            continue  # "may" and "march" are verbs far more often than months
        if claim(match):
            found.append(_month(this_year, _MONTHS[word.lower()], True))
    for match in _YEAR_ONLY.finditer(query):
        if claim(match):
            year = int(match.group(1))
            found.append(TimeRange(_month_start(year * 12), _month_start(year * 12 + 12)))
    for match in _RELATIVE.finditer(query):
        if claim(match):
            found.append(_relative(match.group(1), reference))
    return [r for r in found if r.start < r.end]  # a period wholly before year 1 names nothing


def slack_end(span: TimeRange, slack_days: float) -> datetime:
    """The end of ``span`` extended ``slack_days``, as :func:`in_ranges` extends it (cut at
    the last representable moment)."""
    return _shift(span.end, timedelta(days=slack_days if slack_days <= _ALL_DAYS else _ALL_DAYS))


def in_ranges(when: datetime, ranges: list[TimeRange], slack_days: float = 0.0) -> bool:
    """Whether ``when`` falls in one of ``ranges``, each extended ``slack_days`` past its end."""
    moment = _utc(when)
    # More than all of representable time is all of it (an infinite slack included).
    slack = timedelta(days=slack_days if slack_days <= _ALL_DAYS else _ALL_DAYS)
    for span in ranges:
        start, end = span.start, span.end
        if span.any_year:
            # Same month and day in the message's own year (and the year before, for a range
            # that a slack pushes across New Year).
            for year in (moment.year, moment.year - 1):
                shift = year - start.year
                try:
                    moved = start.replace(year=year), end.replace(year=end.year + shift)
                except ValueError:  # 29 February in a year without one
                    continue
                if moved[0] <= moment < _shift(moved[1], slack):
                    return True
            continue
        if start <= moment < _shift(end, slack):
            return True
    return False
