"""Message validation and exact round trips through the store (property-based)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harombe_core import InvalidMessageError, MemoryManager, Message
from harombe_core.models import MAX_CONTENT_CHARS, ROLES
from harombe_core.store.sqlite import from_micros, to_micros

# Text as users type it: any Unicode scalar value except NUL (refused on purpose, tested apart).
# Hypothesis never produces lone surrogates from st.text(); those are tested in test_bad_input.
_text = st.text(
    alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=200
)
_json_scalar = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
)
_json = st.recursive(
    _json_scalar,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(_text, children, max_size=4),
    max_leaves=20,
)
_timezones = st.builds(
    lambda minutes: timezone(timedelta(minutes=minutes)),
    st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59),
)
_created = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.none() | st.just(UTC) | _timezones,
)
_tool_call = st.fixed_dictionaries(
    {
        "id": _text,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": _text, "arguments": _text}),
    },
    optional={"extra": _json},
)
_message = st.builds(
    Message,
    role=st.sampled_from(sorted(ROLES)),
    content=_text,
    name=st.none() | _text,
    tool_calls=st.none() | st.lists(_tool_call, max_size=3),
    tool_call_id=st.none() | _text,
    metadata=st.dictionaries(_text, _json, max_size=5),
    created_at=_created,
)


@pytest.fixture(scope="module")
def shared_manager() -> Iterator[MemoryManager]:
    """One store for every generated example (a fresh one each time would dominate the run)."""
    with MemoryManager(":memory:", embedding=None) as mm:
        yield mm


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.lists(_message, min_size=1, max_size=5), session=_text.filter(bool))
def test_round_trip_is_exact(
    shared_manager: MemoryManager, messages: list[Message], session: str
) -> None:
    if shared_manager.session_exists(session):
        shared_manager.clear_session(session)  # hypothesis reuses session ids across examples
    ids = shared_manager.save_messages(session, messages)
    got = shared_manager.get_messages(session)
    expected = [
        m.with_ids(id=i, session_id=session, token_count=shared_manager.count_tokens([m]))
        for m, i in zip(messages, ids, strict=True)
    ]
    assert got == expected
    for before, after in zip(messages, got, strict=True):
        assert after.created_at == before.created_at
        assert after.created_at.tzinfo is not None
        assert after.metadata == before.metadata
        assert type(after.metadata) is dict
    # the windowed read returns the same objects as the full read (less a leading tool result,
    # which a window never starts on)
    window = shared_manager.get_recent_messages(session, max_tokens=10**9, include_system=False)
    first = next((i for i, m in enumerate(got) if m.role != "tool"), len(got))
    assert window == got[first:]


@given(_created)
def test_microsecond_timestamps_are_exact(value: datetime) -> None:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    assert from_micros(to_micros(value)) == aware


@given(_message)
def test_to_dict_from_dict_round_trip(message: Message) -> None:
    assert Message.from_dict(message.to_dict()) == message


def test_naive_datetime_is_taken_as_utc() -> None:
    message = Message(role="user", content="x", created_at=datetime(2020, 1, 1, 12))
    assert message.created_at == datetime(2020, 1, 1, 12, tzinfo=UTC)
    assert message.created_at.tzinfo is not None


def test_defaults() -> None:
    message = Message(role="assistant", content="hi")
    assert message.metadata == {}
    assert message.id is None
    assert message.session_id is None
    assert message.created_at.tzinfo is not None
    assert Message(role="user", content="x", metadata=None).metadata == {}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "fix"),
    [
        ({"role": "human", "content": "x"}, "map 'human' to 'user'"),
        ({"role": None, "content": "x"}, "use one of"),
        ({"role": "user", "content": 5}, "Serialise structured content"),
        ({"role": "user", "content": None}, "must be a str"),
        ({"role": "user", "content": b"bytes"}, "must be a str"),
        ({"role": "user", "content": "a\x00b"}, "Strip it"),
        ({"role": "user", "content": "\ud800"}, "lone surrogates"),
        ({"role": "user", "content": "x" * (MAX_CONTENT_CHARS + 1)}, "Split it"),
        ({"role": "user", "content": "x", "name": 3}, "must be a str"),
        ({"role": "user", "content": "x", "metadata": []}, "must be a dict"),
        ({"role": "user", "content": "x", "metadata": {1: "a"}}, "keys must be strings"),
        ({"role": "user", "content": "x", "metadata": {"a": {1: 2}}}, "not a str"),
        ({"role": "user", "content": "x", "metadata": {"a": (1, 2)}}, "tuple"),
        ({"role": "user", "content": "x", "metadata": {"a": float("nan")}}, "JSON number"),
        ({"role": "user", "content": "x", "metadata": {"a": object()}}, "not a JSON type"),
        ({"role": "user", "content": "x", "metadata": {"a": "\udc80"}}, "not valid Unicode"),
        ({"role": "user", "content": "x", "tool_calls": "call"}, "list of dicts"),
        ({"role": "user", "content": "x", "tool_calls": [1]}, "must be a dict"),
        ({"role": "user", "content": "x", "created_at": 1_700_000_000}, "must be a datetime"),
        ({"role": "user", "content": "x", "created_at": "yesterday"}, "not an ISO 8601 time"),
        (
            {"role": "user", "content": "x", "created_at": "0001-01-01T00:00:00+05:00"},
            "outside the times harombe can store",
        ),
    ],
)
def test_invalid_messages_say_how_to_fix(kwargs: dict[str, Any], fix: str) -> None:
    with pytest.raises(InvalidMessageError, match=fix):
        Message(**kwargs)


def test_an_iso_8601_created_at_is_parsed_into_utc() -> None:
    message = Message(role="user", content="x", created_at="2020-01-01T02:00:00+02:00")  # type: ignore[arg-type]
    assert message.created_at == datetime(2020, 1, 1, tzinfo=UTC)
    assert message.created_at.tzinfo is UTC


def test_content_at_the_limit_is_accepted() -> None:
    assert len(Message(role="user", content="x" * MAX_CONTENT_CHARS).content) == MAX_CONTENT_CHARS


def test_from_dict_rejects_bad_shapes() -> None:
    with pytest.raises(InvalidMessageError, match="mapping"):
        Message.from_dict(["user", "x"])  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError, match="ISO 8601"):
        Message.from_dict({"role": "user", "content": "x", "created_at": "yesterday"})
    with pytest.raises(InvalidMessageError, match="integer"):
        Message.from_dict({"role": "user", "content": "x", "id": "7"})
    stamped = Message.from_dict({"role": "user", "content": "x", "created_at": 0})
    assert stamped.created_at == datetime(1970, 1, 1, tzinfo=UTC)
