"""Hostile input (hypothesis): JSON/JSONL import, the YAML config and MemoryManager's public
methods. The only acceptable failure is a typed HarombeError, and a rejected call changes
nothing stored."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harombe_core.config import MemoryConfig, load_config
from harombe_core.errors import HarombeError
from harombe_core.export import import_records, loads
from harombe_core.manager import MemoryManager
from harombe_core.models import Message

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
           | st.text(max_size=40) | st.binary(max_size=10))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=25,
)
anything = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)

ROLES = st.sampled_from(["user", "assistant", "system", "tool", "human", "", "USER"])
message_like = st.fixed_dictionaries(
    {"role": ROLES | anything, "content": st.text(max_size=60) | anything},
    optional={"name": anything, "metadata": anything, "tool_calls": anything,
              "tool_call_id": anything, "created_at": anything, "id": anything,
              "parent_id": anything},
)


@pytest.fixture(scope="module")
def mm() -> Iterator[MemoryManager]:
    manager = MemoryManager(":memory:", embedding=None, token_counter="approximate")
    manager.save_messages("base", [Message(role="user", content="keep me")], user_id="u")
    yield manager
    manager.close()


def snapshot(mm: MemoryManager) -> list[Any]:
    out: list[Any] = []
    for s in mm.list_sessions(limit=None):
        out.append((s.id, s.user_id, s.system_prompt, json.dumps(s.metadata, sort_keys=True),
                    s.message_count, s.summary))
        out.extend((m.id, m.role, m.content, json.dumps(m.metadata, sort_keys=True))
                   for m in mm.get_messages(s.id))
    return out


def _export_doc(messages: list[Any], session: Any) -> str:
    return json.dumps({"session": session, "messages": messages}, default=str)


@FUZZ
@given(text=st.text(max_size=300))
def test_import_of_arbitrary_text(mm: MemoryManager, text: str) -> None:
    before = snapshot(mm)
    try:
        records = loads(text)
        import_records(mm, records, on_conflict="new_id")
    except HarombeError:
        assert snapshot(mm) == before


@FUZZ
@given(doc=json_values, fmt=st.sampled_from([None, "json", "jsonl"]))
def test_import_of_arbitrary_json_structures(mm: MemoryManager, doc: Any, fmt: str | None) -> None:
    text = json.dumps(doc)
    if fmt == "jsonl":
        text = text + "\n" + json.dumps({"messages": doc}) + "\n"
    before = snapshot(mm)
    try:
        import_records(mm, loads(text, fmt), on_conflict="new_id")
    except HarombeError:
        assert snapshot(mm) == before


@FUZZ
@given(messages=st.lists(message_like, max_size=4))
def test_import_of_openai_like_lines(mm: MemoryManager, messages: list[Any]) -> None:
    text = json.dumps({"messages": messages}, default=str) + "\n"
    before = snapshot(mm)
    try:
        import_records(mm, loads(text, "jsonl"), on_conflict="new_id")
    except HarombeError:
        assert snapshot(mm) == before


@FUZZ
@given(data=st.dictionaries(st.sampled_from(["memory", "vector_store", "rag", "other"]),
                            st.dictionaries(st.text(max_size=20), anything, max_size=4)
                            | anything, max_size=4))
def test_config_mappings(data: dict[str, Any]) -> None:
    try:
        config = load_config(data)
    except HarombeError:
        return
    assert isinstance(config, MemoryConfig)


@FUZZ
@given(text=st.text(max_size=200) | json_values.map(lambda v: yaml.safe_dump(v)))
def test_config_yaml_text(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    with contextlib.suppress(HarombeError):
        load_config(path)


METHODS = [
    ("create_session", 3), ("load_session", 1), ("get_session", 1), ("update_session", 1),
    ("list_sessions", 2), ("delete_session", 1), ("clear_session", 1), ("prune_old_sessions", 1),
    ("save_message", 2),
    ("save_messages", 2), ("replace_messages", 3), ("set_messages", 2), ("get_messages", 1),
    ("get_recent_messages", 2), ("get_window", 2), ("count_tokens", 1), ("search", 2),
    ("search_similar", 2), ("get_relevant_context", 2), ("session_exists", 1),
]


@FUZZ
@given(method=st.sampled_from(METHODS), args=st.lists(anything | message_like
                                                      | st.lists(message_like, max_size=2),
                                                      min_size=0, max_size=3))
def test_public_methods_with_hostile_arguments(
    mm: MemoryManager, method: tuple[str, int], args: list[Any]
) -> None:
    name, arity = method
    fn = getattr(mm, name)
    before = snapshot(mm)
    destructive = name in {"delete_session", "clear_session", "prune_old_sessions",
                           "replace_messages", "set_messages", "update_session"}
    error: Exception | None = None
    try:
        fn(*args[:arity])
    except (HarombeError, TypeError) as exc:
        error = exc
    if isinstance(error, TypeError):  # wrong number of positional arguments: Python's contract
        assert "argument" in str(error)
    if error is not None:
        assert snapshot(mm) == before
    if destructive:  # put the baseline back for the next example
        for s in mm.list_sessions(limit=None):
            if s.id != "base":
                mm.delete_session(s.id)
        if not mm.get_messages("base"):
            mm.save_messages("base", [Message(role="user", content="keep me")], user_id="u")
