"""Every stored field is bounded: over its limit, a typed error before any work, nothing stored.

The limits are lowered for these tests with ``set_limits`` (the same code path as the
defaults, without building 10 MB values), which also proves they can be changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from llama_index.core.base.llms.types import ChatMessage

from harombe_core import (
    InputTooLargeError,
    InvalidInputError,
    InvalidMessageError,
    Limits,
    MemoryManager,
    Message,
    MessageTooLargeError,
    current_limits,
    set_limits,
)
from harombe_core.store import ops
from harombe_core.testing import FakeEmbedder
from langchain_harombe.history import HarombeChatMessageHistory
from langchain_harombe.store import HarombeStore
from llamaindex_harombe.chat_store import HarombeChatStore

SMALL = 1_000


@pytest.fixture
def small_limits() -> Iterator[Limits]:
    """Every size limit at 1,000 characters, put back afterwards."""
    sizes = {f.name: SMALL for f in dataclasses.fields(Limits) if f.name != "json_depth"}
    previous = set_limits(**sizes)
    try:
        yield current_limits()
    finally:
        set_limits(**dataclasses.asdict(previous))


class CountingCounter:
    """A token counter that records what it was asked to count (to prove nothing was)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, text: str) -> int:
        self.calls += 1
        return len(text.split())


@pytest.fixture
def counted(tmp_path: Any) -> Iterator[tuple[MemoryManager, CountingCounter]]:
    counter = CountingCounter()
    mm = MemoryManager(tmp_path / "m.db", embedding=None, token_counter=counter)
    mm.save_message("s", Message(role="user", content="kept"))
    mm.create_session(session_id="t", metadata={"k": "v"}, system_prompt="be brief")
    counter.calls = 0
    try:
        yield mm, counter
    finally:
        mm.close()


def _rows(mm: MemoryManager) -> Any:
    return (
        mm.store.query("SELECT * FROM sessions ORDER BY id"),
        mm.store.query("SELECT * FROM messages ORDER BY id"),
    )


BIG = "x" * (SMALL + 1)
MESSAGE_FIELDS: list[tuple[str, dict[str, Any], str]] = [
    ("content", {"role": "user", "content": BIG}, "content_chars"),
    ("name", {"role": "user", "content": "x", "name": BIG}, "name_chars"),
    ("tool_call_id", {"role": "tool", "content": "x", "tool_call_id": BIG}, "name_chars"),
    (
        "tool_calls",
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": BIG}}],
        },
        "tool_calls_chars",
    ),
    ("metadata", {"role": "user", "content": "x", "metadata": {"blob": BIG}}, "metadata_chars"),
    (
        "metadata of many small values",
        {"role": "user", "content": "x", "metadata": {"n": list(range(SMALL))}},
        "metadata_chars",
    ),
]


@pytest.mark.parametrize(
    ("fields", "limit"),
    [(f, lim) for _, f, lim in MESSAGE_FIELDS],
    ids=[n for n, *_ in MESSAGE_FIELDS],
)
def test_an_oversized_message_field_is_refused_before_it_is_counted(
    small_limits: Limits,
    counted: tuple[MemoryManager, CountingCounter],
    fields: dict[str, Any],
    limit: str,
) -> None:
    mm, counter = counted
    before = _rows(mm)
    with pytest.raises(MessageTooLargeError, match=rf"set_limits\({limit}=") as caught:
        mm.save_message("s", fields)
    assert isinstance(caught.value, InvalidMessageError)  # and an InputTooLargeError
    assert isinstance(caught.value, InputTooLargeError)
    assert counter.calls == 0  # refused before any tokenising
    assert _rows(mm) == before


SESSION_CALLS: list[tuple[str, Callable[[MemoryManager], Any], str]] = [
    ("create: metadata", lambda m: m.create_session(metadata={"b": BIG}), "session_metadata"),
    ("create: system prompt", lambda m: m.create_session(system_prompt=BIG), "system_prompt"),
    ("update: metadata", lambda m: m.update_session("t", metadata={"b": BIG}), "session_metadata"),
    ("update: system prompt", lambda m: m.update_session("t", system_prompt=BIG), "system_prompt"),
    ("summary text", lambda m: m.store.run(ops.update_session("t", summary=BIG)), "summary"),
    (
        "summary data",
        lambda m: m.store.run(ops.update_session("t", summary_data={"facts": [BIG]})),
        "summary",
    ),
    (
        "message summary",
        lambda m: m.store.run(ops.set_message_summary(1, {"title": "t", "summary": BIG})),
        "summary",
    ),
    (
        "a store that is written directly (import, migration)",
        lambda m: m.store.run(ops.create_session("new", metadata={"b": BIG})),
        "session_metadata",
    ),
]


@pytest.mark.parametrize(
    ("call", "limit"), [(c, lim) for _, c, lim in SESSION_CALLS], ids=[n for n, *_ in SESSION_CALLS]
)
def test_an_oversized_session_field_is_refused_and_nothing_changes(
    small_limits: Limits,
    counted: tuple[MemoryManager, CountingCounter],
    call: Callable[[MemoryManager], Any],
    limit: str,
) -> None:
    mm, counter = counted
    before = _rows(mm)
    with pytest.raises(InputTooLargeError, match=rf"set_limits\({limit}_chars="):
        call(mm)
    assert counter.calls == 0
    assert _rows(mm) == before


def test_at_the_limit_is_stored_and_read_back_whole(
    small_limits: Limits, manager: MemoryManager
) -> None:
    # JSON size counts quotes and separators: leave room for them.
    metadata = {"b": "y" * (SMALL - 20)}
    text = "x" * SMALL
    mid = manager.save_message("s", {"role": "user", "content": text, "metadata": metadata})
    sid = manager.create_session(system_prompt=text, metadata={"b": "z" * (SMALL - 20)})
    [stored] = manager.get_messages("s")
    assert (stored.id, stored.content, stored.metadata) == (mid, text, metadata)
    assert manager.get_session(sid).system_prompt == text  # type: ignore[union-attr]


def test_raising_a_limit_lets_a_bigger_value_in(manager: MemoryManager) -> None:
    blob = {"blob": "x" * (current_limits().metadata_chars + 10)}
    with pytest.raises(MessageTooLargeError):
        Message(role="user", content="x", metadata=blob)
    previous = set_limits(metadata_chars=current_limits().metadata_chars * 2)
    try:
        manager.save_message("s", Message(role="user", content="x", metadata=blob))
    finally:
        set_limits(**dataclasses.asdict(previous))
    assert manager.get_messages("s")[0].metadata == blob


@pytest.mark.parametrize(
    "changes",
    [{"nope": 1}, {"content_chars": 0}, {"content_chars": "big"}, {"json_depth": True}],
)
def test_set_limits_refuses_what_is_not_a_limit(changes: dict[str, Any]) -> None:
    before = current_limits()
    with pytest.raises(InvalidInputError):
        set_limits(**changes)
    assert current_limits() == before


@pytest.mark.parametrize("depth", [201, 100_000])
def test_json_nested_deeper_than_the_limit_is_refused_without_recursion(
    manager: MemoryManager, depth: int
) -> None:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    for call in (
        lambda: manager.save_message(
            "s", {"role": "user", "content": "x", "metadata": {"v": value}}
        ),
        lambda: manager.create_session(metadata={"v": value}),
        lambda: manager.save_message(
            "s", {"role": "assistant", "content": "", "tool_calls": [{"args": value}]}
        ),
    ):
        with pytest.raises(InvalidInputError, match="nested more than 200 levels"):
            call()
    assert manager.list_sessions() == []


def test_adapters_are_bounded_by_the_same_limits(small_limits: Limits, tmp_path: Any) -> None:
    embedder = FakeEmbedder()
    with MemoryManager(tmp_path / "a.db", embedding=None) as mm:
        history = HarombeChatMessageHistory("lc", manager=mm)
        call = {"name": "f", "args": {"text": BIG}, "id": "c1"}
        with pytest.raises(MessageTooLargeError, match="tool_calls"):
            history.add_messages([AIMessage(content="", tool_calls=[call])])
        chat_store = HarombeChatStore(manager=mm)
        with pytest.raises(MessageTooLargeError, match="metadata"):
            chat_store.add_message(
                "li", ChatMessage(role="user", content="x", additional_kwargs={"blob": BIG})
            )
        store = HarombeStore(mm, index={"embed": embedder, "fields": ["text"]})
        with pytest.raises(InputTooLargeError, match="store_value_chars"):
            store.put(("users", "u1"), "k", {"text": BIG})
        assert embedder.calls == 0  # refused before anything was embedded
        assert mm.store.query("SELECT COUNT(*) FROM messages")[0][0] == 0
        assert mm.store.query("SELECT COUNT(*) FROM store_items")[0][0] == 0
