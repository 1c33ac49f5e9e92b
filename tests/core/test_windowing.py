"""The token window: edges of the budget, the system prompt, tool-call pairs, and its cost.

Every message costs exactly ten tokens here (a ``list[Message] -> int`` counter), so each
budget below selects a known set of messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harombe_core import (
    InvalidBudgetError,
    InvalidInputError,
    MemoryManager,
    Message,
    SessionOwnershipError,
    context_reads,
)
from harombe_core.strategies import window_newest
from harombe_core.tokens import TextTokenCounter

COST = 10


def ten_each(messages: list[Message]) -> int:
    return COST * len(messages)


@pytest.fixture(params=["memory", "file"])
def mm(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[MemoryManager]:
    path = ":memory:" if request.param == "memory" else str(tmp_path / "w.db")
    with MemoryManager(path, embedding=None, token_counter=ten_each) as manager:
        yield manager


def _user(i: int) -> Message:
    return Message(role="user", content=f"u{i}")


def _assistant(i: int) -> Message:
    return Message(role="assistant", content=f"a{i}")


def _call(call_id: str, *more: str) -> Message:
    calls = [
        {"id": c, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        for c in (call_id, *more)
    ]
    return Message(role="assistant", content="", tool_calls=calls)


def _result(call_id: str) -> Message:
    return Message(role="tool", content=f"result {call_id}", tool_call_id=call_id)


def _contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


def _conversation(mm: MemoryManager, n: int, sid: str = "s") -> None:
    mm.save_messages(sid, [_user(i) if i % 2 == 0 else _assistant(i) for i in range(n)])


def test_newest_that_fit_oldest_first(mm: MemoryManager) -> None:
    _conversation(mm, 10)
    window = mm.get_window("s", 35)
    assert _contents(window.messages) == ["a7", "u8", "a9"]
    assert window.tokens == 30


def test_exactly_full(mm: MemoryManager) -> None:
    _conversation(mm, 10)
    assert _contents(mm.get_recent_messages("s", 40)) == ["u6", "a7", "u8", "a9"]
    assert mm.get_window("s", 40).tokens == 40
    assert _contents(mm.get_recent_messages("s", 39)) == ["a7", "u8", "a9"]


def test_budget_larger_than_history(mm: MemoryManager) -> None:
    _conversation(mm, 4)
    window = mm.get_window("s", 10_000)
    assert _contents(window.messages) == ["u0", "a1", "u2", "a3"]
    assert window.tokens == 40


def test_budget_smaller_than_one_message_and_zero(mm: MemoryManager) -> None:
    _conversation(mm, 4)
    assert mm.get_recent_messages("s", COST - 1) == []
    assert mm.get_window("s", COST - 1).tokens == 0
    assert mm.get_recent_messages("s", 0) == []
    # never a partial message: the newest one alone is too big, so nothing older is taken either
    mm.save_message("s", Message(role="user", content="big"))
    assert _contents(mm.get_recent_messages("s", COST)) == ["big"]


def test_system_prompt_always_included_and_counted(mm: MemoryManager) -> None:
    sid = mm.create_session(system_prompt="You are terse.")
    _conversation(mm, 6, sid)
    window = mm.get_window(sid, 35)
    assert window.messages[0].role == "system"
    assert window.messages[0].content == "You are terse."
    assert _contents(window.messages[1:]) == ["u4", "a5"]  # 10 for the prompt + 2 x 10
    assert window.tokens == 30
    # even a budget the prompt alone exceeds keeps the prompt (and only the prompt)
    tight = mm.get_window(sid, 5)
    assert _contents(tight.messages) == ["You are terse."]
    assert tight.tokens == COST
    assert _contents(mm.get_recent_messages(sid, 0)) == ["You are terse."]
    assert _contents(mm.get_recent_messages(sid, 35, include_system=False)) == ["a3", "u4", "a5"]


def test_never_starts_on_an_orphan_tool_result(mm: MemoryManager) -> None:
    mm.save_messages("s", [_user(0), _call("c1"), _result("c1"), _assistant(3)])
    # 20 tokens: [result, a3] would fit, but the result's call was cut: drop it
    assert _contents(mm.get_recent_messages("s", 20)) == ["a3"]
    assert mm.get_window("s", 20).tokens == COST
    # 30 tokens: the call and its result both fit
    window = mm.get_recent_messages("s", 30)
    assert [m.role for m in window] == ["assistant", "tool", "assistant"]
    assert window[0].tool_calls is not None


def test_parallel_tool_results_cut_at_the_edge(mm: MemoryManager) -> None:
    mm.save_messages(
        "s",
        [_user(0), _call("c1", "c2", "c3"), _result("c1"), _result("c2"), _result("c3"), _user(5)],
    )
    for budget in (20, 30, 40):  # the window would start on the 3rd, 2nd or 1st result
        assert _contents(mm.get_recent_messages("s", budget)) == ["u5"]
    full = mm.get_recent_messages("s", 50)
    assert [m.role for m in full] == ["assistant", "tool", "tool", "tool", "user"]
    assert {m.tool_call_id for m in full[1:4]} == {"c1", "c2", "c3"}


def test_start_on_user(mm: MemoryManager) -> None:
    _conversation(mm, 10)
    assert _contents(mm.get_recent_messages("s", 30, start_on_user=True)) == ["u8", "a9"]
    assert _contents(mm.get_recent_messages("s", 40, start_on_user=True)) == [
        "u6",
        "a7",
        "u8",
        "a9",
    ]
    sid = mm.create_session(system_prompt="sys")
    _conversation(mm, 4, sid)
    window = mm.get_recent_messages(sid, 40, start_on_user=True)
    assert _contents(window) == ["sys", "u2", "a3"]


@pytest.mark.parametrize("bad", [-1, -100, 1.5, 10.0, True, False, "100", None])
def test_bad_budgets(mm: MemoryManager, bad: object) -> None:
    _conversation(mm, 2)
    if bad is None:  # None means "the manager's default", not an error
        assert len(mm.get_recent_messages("s", None)) == 2
        return
    with pytest.raises(InvalidBudgetError, match="max_tokens"):
        mm.get_recent_messages("s", bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 2.5, True, "4096"])
def test_bad_default_budget(bad: object) -> None:
    with pytest.raises(InvalidBudgetError, match="max_history_tokens"):
        MemoryManager(":memory:", embedding=None, max_history_tokens=bad)  # type: ignore[arg-type]


class _CountingStore:
    """Counts the rows the newest-first reader turns into messages, and its statements."""

    def __init__(self, mm: MemoryManager, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = 0
        self.pages = 0
        original, run = context_reads.row_to_message, mm.store.run

        def counted(row: Any) -> Message:
            self.rows += 1
            return original(row)

        def running(op: Any) -> Any:
            self.pages += op.body.__qualname__.startswith("newest_rows.")
            return run(op)

        monkeypatch.setattr(context_reads, "row_to_message", counted)
        monkeypatch.setattr(mm.store, "run", running)


@pytest.mark.parametrize("length", [100, 10_000])
def test_rows_read_do_not_grow_with_the_session(
    mm: MemoryManager, length: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 50-token window reads five rows and one more (the first that does not fit), in one
    statement; a window of the whole session reads it in pages that double."""
    mm.create_session(session_id="s", system_prompt="sys")
    _conversation(mm, length)
    counter = _CountingStore(mm, monkeypatch)
    window = mm.get_window("s", 60)
    assert len(window.messages) == 6  # the prompt and five messages
    assert (counter.rows, counter.pages) == (6, 1)
    counter.rows = counter.pages = 0
    mm.get_recent_messages("s", 1_000_000 if length == 100 else 60)
    assert counter.rows == (100 if length == 100 else 6)
    assert counter.pages == (3 if length == 100 else 1)  # 32 + 64 + 128 rows asked for
    counter.rows = counter.pages = 0
    assert mm.get_context("s", "simple", 60) == window.messages  # the same reader
    assert (counter.rows, counter.pages) == (6, 1)


def test_a_window_reads_the_session_and_its_prompt_in_one_operation(
    mm: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session row and its system prompt's token count are one store operation (one
    statement), then the newest rows: two operations per window, where there were three
    (the session, the prompt's count, the rows)."""
    mm.create_session(session_id="s", system_prompt="sys", user_id="ann")
    _conversation(mm, 40)
    ran: list[str] = []
    run = mm.store.run

    def running(op: Any) -> Any:
        ran.append(op.body.__qualname__.split(".")[0])
        return run(op)

    monkeypatch.setattr(mm.store, "run", running)
    calls = {
        "get_window": lambda: mm.get_window("s", 60, user_id="ann").messages,
        "get_recent_messages": lambda: mm.get_recent_messages("s", 60),
        "get_context": lambda: mm.get_context("s", "simple", 60, user_id="ann"),
        "load_session": lambda: mm.load_session("s", user_id="ann"),
    }
    for name, call in calls.items():
        ran.clear()
        answer = call()
        assert answer[0].role == "system", name
        assert ran[0] == "session_and_prompt", (name, ran)
        assert len(ran) == 2, (name, ran)  # then the newest rows (or every row)


def test_window_newest_needs_nothing_but_an_iterable() -> None:
    newest_first = [Message(role="user", content=str(i), token_count=i) for i in range(10, 0, -1)]
    window = window_newest(iter(newest_first), 10 + 9 + 8)
    assert _contents(window.messages) == ["8", "9", "10"]
    assert window.tokens == 27
    reserved = window_newest(iter(newest_first), 27, reserved_tokens=7)
    assert _contents(reserved.messages) == ["9", "10"]
    assert reserved.tokens == 26
    assert window_newest(iter([]), 100).messages == []


# a framework's own counting (the adapters' window) ------------------------------------------
def test_get_context_charges_with_a_frameworks_counter() -> None:
    """``token_counter`` charges each message its way; each returned message carries it."""
    with MemoryManager(":memory:", embedding=None, token_counter="approximate") as manager:
        sid = manager.create_session("Be brief.")
        manager.save_messages(sid, [_user(i) if i % 2 == 0 else _assistant(i) for i in range(20)])
        text = TextTokenCounter(manager.token_counter)
        for strategy in ("simple", "summarization", "hybrid", "threaded"):
            billed = manager.get_context(sid, strategy, 40)
            charged = manager.get_context(sid, strategy, 40, token_counter=text)
            assert len(charged) >= len(billed), strategy  # the framing is not charged
            assert sum(m.token_count or 0 for m in charged) <= 40
            for message in charged:
                assert message.token_count == text.count_message(
                    message.with_ids(token_count=None)
                ), strategy
        with pytest.raises(InvalidInputError, match="TokenCounter"):
            manager.get_context(sid, token_counter=len)  # type: ignore[arg-type]


def test_keep_newest_turn_sends_the_turn_that_does_not_fit(mm: MemoryManager) -> None:
    sid = mm.create_session("system")  # 10 tokens
    mm.save_messages(sid, [_user(0), _assistant(1), _call("c1"), _result("c1")])
    with pytest.raises(InvalidBudgetError):
        mm.get_context(sid, max_tokens=5)
    tight = mm.get_context(sid, max_tokens=5, keep_newest_turn=True)
    assert _contents(tight) == ["system", "u0", "a1", "", "result c1"]
    assert _contents(mm.get_context(sid, max_tokens=25, start_on_user=True)) == ["system"]
    kept = mm.get_context(sid, max_tokens=25, start_on_user=True, keep_newest_turn=True)
    assert _contents(kept) == ["system", "u0", "a1", "", "result c1"]
    assert mm.get_context("nowhere", keep_newest_turn=True) == []


async def test_newest_user_message_skips_turns_without_text(mm: MemoryManager) -> None:
    sid = mm.create_session(user_id="ann")
    assert mm.get_newest_user_message(sid) is None
    mm.save_messages(
        sid, [_user(0), _assistant(1), Message(role="user", content="  \n"), _call("c1")]
    )
    mm.save_messages(sid, [_result("c1"), _assistant(2)])
    newest = mm.get_newest_user_message(sid, user_id="ann")
    assert newest is not None
    assert newest.content == "u0"
    assert await mm.aget_newest_user_message(sid) == newest
    assert mm.get_newest_user_message("nowhere") is None
    with pytest.raises(SessionOwnershipError):
        mm.get_newest_user_message(sid, user_id="bob")


async def test_newest_messages_are_the_end_of_the_session(
    mm: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = mm.create_session(user_id="ann")
    mm.save_messages(sid, [_user(i) for i in range(200)])
    every = mm.get_messages(sid)
    counter = _CountingStore(mm, monkeypatch)
    assert mm.get_newest_messages(sid, 3, user_id="ann") == every[-3:]
    assert (counter.rows, counter.pages) == (3, 1)  # one statement, the rows it returns
    assert await mm.aget_newest_messages(sid, 500) == every
    assert mm.get_newest_messages(sid, 0) == []
    assert mm.get_newest_messages("nowhere", 3) == []
    with pytest.raises(SessionOwnershipError):
        mm.get_newest_messages(sid, 3, user_id="bob")
    with pytest.raises(InvalidInputError, match="count"):
        mm.get_newest_messages(sid, -1)
