"""One rule for an unknown session id, held by every public MemoryManager method that takes one.

As in a LangChain or LlamaIndex chat history, an unknown session is an empty one: reading it
returns nothing (``[]``, ``None``, ``False``), writing to it creates it (owned by the user the
write names), and deleting or clearing it does nothing. Nothing raises, and a read never creates
a session. The methods are found by their signatures, so a new method that takes a session id
fails :func:`test_every_method_that_takes_a_session_is_covered` until it is added to ``CALLS``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from harombe_core import MemoryManager, Message, SessionNotFoundError
from harombe_core.facts.models import SessionState
from harombe_core.strategies import ContextBudget, Window
from harombe_core.testing import FakeEmbedder, InMemoryVectorIndex

UNKNOWN = "never-seen"
ANN = "ann"


@dataclass(frozen=True)
class Call:
    """One call of a method on the unknown session, and what the rule says it gives."""

    kind: Literal["read", "write", "delete", "missing"]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    expected: Any = None


def _hello() -> Message:
    return Message(role="user", content="hello")


CALLS: dict[str, list[Call]] = {
    # reads: empty, and nothing is created
    "get_session": [Call("read", (UNKNOWN,), {"user_id": ANN}, None)],
    "load_session": [Call("read", (UNKNOWN,), {"user_id": ANN}, [])],
    "session_exists": [Call("read", (UNKNOWN,), {}, False)],
    "check_owner": [Call("read", (UNKNOWN, ANN), {}, None)],
    "get_messages": [Call("read", (UNKNOWN,), {"user_id": ANN, "limit": 5}, [])],
    "count_messages": [Call("read", (UNKNOWN,), {"user_id": ANN, "after_id": 1}, 0)],
    "get_recent_messages": [Call("read", (UNKNOWN, 100), {"user_id": ANN}, [])],
    "get_window": [Call("read", (UNKNOWN, 100), {"user_id": ANN}, Window(messages=[], tokens=0))],
    "get_newest_user_message": [Call("read", (UNKNOWN,), {"user_id": ANN}, None)],
    "get_newest_messages": [Call("read", (UNKNOWN, 3), {"user_id": ANN}, [])],
    "get_context": [
        Call("read", (UNKNOWN, strategy), {"user_id": ANN}, [])
        for strategy in ("simple", "summarization", "hybrid", "threaded")
    ]
    + [Call("read", (UNKNOWN,), {"budget": ContextBudget(), "query": "hi", "user_id": ANN}, [])],
    "summarize_session": [Call("read", (UNKNOWN,), {"user_id": ANN}, None)],
    "end_session": [Call("read", (UNKNOWN,), {"user_id": ANN}, None)],
    "search": [Call("read", ("hello",), {"session_id": UNKNOWN, "user_id": ANN}, [])],
    "search_similar": [Call("read", ("hello",), {"session_id": UNKNOWN, "user_id": ANN}, [])],
    "get_relevant_context": [
        Call("read", ("hello",), {"session_id": UNKNOWN, "user_id": ANN}, []),
    ],
    # user memory: an unknown session has no facts, no tasks and the default state
    "extract_facts": [Call("read", (UNKNOWN,), {}, 0)],
    "get_open_tasks": [Call("read", (ANN,), {"session_id": UNKNOWN}, [])],
    "get_session_state": [
        Call("read", (UNKNOWN,), {}, SessionState(session_id=UNKNOWN, outcome=None))
    ],
    # an outcome names no owner, so it cannot create the session: the typo is reported
    "set_session_state": [Call("missing", (UNKNOWN,), {"outcome": "resolved"})],
    # deletes: nothing to do
    "delete_session": [Call("delete", (UNKNOWN,), {"user_id": ANN}, False)],
    "clear_session": [Call("delete", (UNKNOWN,), {"user_id": ANN}, 0)],
    # writes: the session is created, owned by the user the write names
    "save_message": [Call("write", (UNKNOWN, _hello()), {"user_id": ANN})],
    "save_messages": [Call("write", (UNKNOWN, [_hello()]), {"user_id": ANN})],
    "replace_messages": [Call("write", (UNKNOWN, [], [_hello()]), {"user_id": ANN})],
    "set_messages": [Call("write", (UNKNOWN, [_hello()]), {"user_id": ANN})],
    "update_session": [Call("write", (UNKNOWN,), {"metadata": {"k": 1}, "user_id": ANN})],
    "create_session": [Call("write", (), {"session_id": UNKNOWN, "user_id": ANN})],
}


def _public_methods() -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(MemoryManager, callable)
        if not name.startswith("_") and not isinstance(member, type)
    }


def _takes_a_session(method: Any) -> bool:
    return "session_id" in inspect.signature(method).parameters


def _sync_name(name: str, methods: dict[str, Any]) -> str:
    """The sync twin's name of an async method (``aload_session`` -> ``load_session``)."""
    if inspect.iscoroutinefunction(methods[name]) and name[1:] in methods:
        return name[1:]
    return name


@pytest.fixture(params=["keyword", "semantic"])
def mm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryManager]:
    """A file store, with keyword search only and with (fake) semantic memory."""
    path = str(tmp_path / "memory.db")
    if request.param == "keyword":
        manager = MemoryManager(path, embedding=None)
    else:
        manager = MemoryManager(path, embedding=FakeEmbedder(), vector_store=InMemoryVectorIndex())
    with manager:
        # Another user's history, so "nothing found" is not just "nothing stored".
        manager.save_message("other", Message(role="user", content="hello there"), user_id="bob")
        manager.flush()
        yield manager


def test_every_method_that_takes_a_session_is_covered() -> None:
    methods = _public_methods()
    taking = {_sync_name(n, methods) for n, m in methods.items() if _takes_a_session(m)}
    missing = taking - CALLS.keys()
    assert not missing, f"say what {sorted(missing)} do with an unknown session in CALLS"
    assert CALLS.keys() <= taking, "CALLS names a method that no longer takes a session_id"
    # Every async twin is covered through its sync method (see the async test below).
    for name, member in methods.items():
        if inspect.iscoroutinefunction(member) and _sync_name(name, methods) in CALLS:
            assert name[1:] in CALLS


def _check(mm: MemoryManager, name: str, call: Call, result: Any) -> None:
    if call.kind == "write":
        session = mm.get_session(UNKNOWN)
        assert session is not None, f"{name} did not create the unknown session"
        assert session.user_id == ANN, f"{name} created the session without its owner"
        return
    assert result == call.expected, f"{name} on an unknown session gave {result!r}"
    assert not mm.session_exists(UNKNOWN), f"{name} created the session it only read"
    assert mm.stats()["sessions"] == 1


CASES = [(name, call) for name, calls in CALLS.items() for call in calls]


@pytest.mark.parametrize(
    ("name", "call"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)]
)
def test_sync_method_keeps_the_rule(mm: MemoryManager, name: str, call: Call) -> None:
    if call.kind == "missing":
        with pytest.raises(SessionNotFoundError):
            getattr(mm, name)(*call.args, **call.kwargs)
        assert not mm.session_exists(UNKNOWN)
        return
    result = getattr(mm, name)(*call.args, **call.kwargs)
    _check(mm, name, call, result)


ASYNC_CASES = [(n, c) for n, c in CASES if f"a{n}" in _public_methods()]


@pytest.mark.parametrize(
    ("name", "call"), ASYNC_CASES, ids=[f"a{n}-{i}" for i, (n, _) in enumerate(ASYNC_CASES)]
)
async def test_async_twin_keeps_the_rule(mm: MemoryManager, name: str, call: Call) -> None:
    if call.kind == "missing":
        with pytest.raises(SessionNotFoundError):
            await getattr(mm, f"a{name}")(*call.args, **call.kwargs)
        return
    result = await getattr(mm, f"a{name}")(*call.args, **call.kwargs)
    await asyncio.to_thread(_check, mm, name, call, result)


def test_a_write_after_reads_makes_the_session_the_reads_described(mm: MemoryManager) -> None:
    """Reading first changes nothing: the first write still creates the session, for its
    writer, and reads then see exactly what was written."""
    for name, calls in CALLS.items():
        for call in calls:
            if call.kind == "read":
                getattr(mm, name)(*call.args, **call.kwargs)
    assert not mm.session_exists(UNKNOWN)
    mm.save_message(UNKNOWN, _hello(), user_id=ANN)
    assert [m.content for m in mm.load_session(UNKNOWN, user_id=ANN)] == ["hello"]
    session = mm.get_session(UNKNOWN)
    assert session is not None
    assert (session.user_id, session.message_count) == (ANN, 1)
