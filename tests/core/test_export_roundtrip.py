"""Property: store -> export (json or jsonl) -> import into a fresh store -> the same sessions.

Arbitrary unicode (line separators included), tool calls in any shape, JSON metadata, times in
any offset, threads (parent ids) and per-message summaries all survive the trip.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from harombe_core import export as ex
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops

text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30
)
identifier = text.filter(lambda s: 0 < len(s) <= 512)
leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_value = st.recursive(
    leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
metadata = st.dictionaries(text, json_value, max_size=3)
openai_call = st.fixed_dictionaries(
    {
        "id": identifier,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": identifier, "arguments": text}),
    }
)
langchain_call = st.fixed_dictionaries(
    {"name": identifier, "args": st.dictionaries(text, json_value, max_size=2), "id": identifier}
)
tool_calls = st.none() | st.lists(
    openai_call | langchain_call | st.dictionaries(text, json_value, max_size=2), max_size=2
)
times = st.datetimes(
    min_value=datetime(1971, 1, 1),
    max_value=datetime(2100, 1, 1),
    timezones=st.sampled_from(
        [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
    ),
)
message = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant", "system", "tool"]),
    content=text,
    name=st.none() | text,
    tool_calls=tool_calls,
    tool_call_id=st.none() | text,
    metadata=metadata,
    created_at=times,
)


@st.composite
def sessions(draw: st.DrawFn) -> dict[str, Any]:
    messages = draw(st.lists(message, max_size=6))
    parents = [draw(st.none() | st.integers(0, i - 1)) if i else None for i in range(len(messages))]
    summaries = {
        i: draw(st.fixed_dictionaries({"title": text, "summary": text}))
        for i in range(len(messages))
        if draw(st.booleans())
    }
    return {
        "session_id": draw(identifier),
        "user_id": draw(st.none() | identifier),
        "system_prompt": draw(st.none() | text),
        "metadata": draw(metadata),
        "created_at": draw(times),
        "messages": messages,
        "parents": parents,
        "summaries": summaries,
    }


def store_session(mm: MemoryManager, spec: dict[str, Any]) -> None:
    sid = spec["session_id"]
    prompt = spec["system_prompt"]
    mm.store.run(
        ops.create_session(
            sid,
            system_prompt=prompt,
            system_prompt_tokens=0
            if prompt is None
            else mm.count_tokens([Message("system", prompt)]),
            metadata=spec["metadata"],
            user_id=spec["user_id"],
            created_at=spec["created_at"],
        )
    )
    ids = mm.save_messages(sid, spec["messages"])
    for i, parent in enumerate(spec["parents"]):
        if parent is not None:
            mm.store.run(ops.set_parent(ids[i], ids[parent]))
    for i, summary in spec["summaries"].items():
        mm.store.run(ops.set_message_summary(ids[i], summary))


def comparable(record: ex.SessionRecord) -> dict[str, Any]:
    position = {m.id: i for i, m in enumerate(record.messages)}
    return {
        "session": (record.session_id, record.user_id, record.system_prompt, record.metadata),
        "messages": [
            (
                m.role,
                m.content,
                m.name,
                m.tool_calls,
                m.tool_call_id,
                m.metadata,
                m.created_at,
                m.token_count,
                position.get(m.parent_id),
            )
            for m in record.messages
        ],
        "summaries": {position[k]: v for k, v in record.message_summaries.items()},
    }


def round_trip(spec: dict[str, Any], fmt: str) -> None:
    with (
        MemoryManager(":memory:", embedding=None) as source,
        MemoryManager(":memory:", embedding=None) as target,
    ):
        store_session(source, spec)
        text_out = ex.export_store(source, fmt, session_id=spec["session_id"])
        result = ex.import_records(target, ex.loads(text_out))
        assert result.session_ids == [spec["session_id"]]
        before = ex.read_session(source, spec["session_id"])
        after = ex.read_session(target, spec["session_id"])
        assert comparable(after) == comparable(before)
        assert after.created_at == spec["created_at"]
        assert [m.created_at for m in after.messages] == [m.created_at for m in spec["messages"]]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_json_round_trip(spec: dict[str, Any]) -> None:
    round_trip(spec, "json")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_jsonl_round_trip(spec: dict[str, Any]) -> None:
    round_trip(spec, "jsonl")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(sessions(), max_size=3, unique_by=lambda s: s["session_id"]))
def test_whole_store_round_trip(specs: list[dict[str, Any]]) -> None:
    with (
        MemoryManager(":memory:", embedding=None) as source,
        MemoryManager(":memory:", embedding=None) as target,
    ):
        for spec in specs:
            store_session(source, spec)
        for fmt in ("json", "jsonl"):
            target_ids = {s.id for s in target.list_sessions(limit=None)}
            for sid in target_ids:
                target.delete_session(sid)
            ex.import_records(target, ex.loads(ex.export_store(source, fmt)))
            for spec in specs:
                sid = spec["session_id"]
                assert comparable(ex.read_session(target, sid)) == comparable(
                    ex.read_session(source, sid)
                )
