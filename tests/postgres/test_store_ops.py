"""The two SQL backends check what they store the same way (in-memory SQLite, a SQLite file and
PostgreSQL): a value one of them refuses, the others refuse too, with the same typed error, and
nothing is changed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harombe_core import MemoryManager, Message
from harombe_core.errors import InvalidInputError
from harombe_core.store import ops


def _message(text: str) -> Message:
    return Message(role="user", content=text, token_count=1)


@pytest.mark.parametrize("bad", ["", 5, b"alice", "a\x00b"])
def test_update_session_checks_user_id_as_create_session_does(
    manager: MemoryManager, bad: Any
) -> None:
    store = manager.store
    with pytest.raises(InvalidInputError, match="user_id"):
        store.run(ops.create_session("fresh", user_id=bad))
    store.run(ops.create_session("s", user_id="alice"))
    with pytest.raises(InvalidInputError, match="user_id"):
        store.run(ops.update_session("s", user_id=bad))
    session = store.run(ops.get_session("s"))
    assert session is not None
    assert session.user_id == "alice"
    assert store.run(ops.get_session("fresh")) is None


def test_update_session_can_still_clear_the_owner(manager: MemoryManager) -> None:
    store = manager.store
    store.run(ops.create_session("s", user_id="alice"))
    store.run(ops.update_session("s", user_id="bob"))
    assert store.run(ops.get_session("s")).user_id == "bob"  # type: ignore[union-attr]
    store.run(ops.update_session("s", user_id=None))
    assert store.run(ops.get_session("s")).user_id is None  # type: ignore[union-attr]


def test_message_ids_that_are_not_integers_are_refused_typed(manager: MemoryManager) -> None:
    store = manager.store
    (mid,) = store.run(ops.add_messages("s", [_message("hello")]))
    for call in (
        lambda: store.run(ops.get_messages_by_ids(["x"])),
        lambda: store.run(ops.mark_embedded(["x"])),
        lambda: store.run(ops.add_messages("s", [_message("again")], replace_ids=["x"])),
        lambda: store.run(ops.set_parent("x", None)),  # type: ignore[arg-type]
        lambda: store.run(ops.set_parent(mid, "x")),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidInputError, match="message ids must be integers"):
            call()
    assert [m.content for m in store.run(ops.get_messages("s"))] == ["hello"]
    assert store.run(ops.get_messages("s"))[0].parent_id is None


def test_a_taken_session_id_is_refused_and_the_stored_session_kept(
    manager: MemoryManager,
) -> None:
    store = manager.store
    store.run(ops.create_session("s", user_id="alice", system_prompt="first", metadata={"a": 1}))
    with pytest.raises(InvalidInputError, match="already exists"):
        store.run(ops.create_session("s", user_id="bob", system_prompt="second"))
    session = store.run(ops.get_session("s"))
    assert session is not None
    assert (session.user_id, session.system_prompt) == ("alice", "first")
    assert session.metadata == {"a": 1}


def test_every_backend_names_its_dialect(manager: MemoryManager, backend_url: str) -> None:
    expected = "postgres" if backend_url.startswith("postgresql://") else "sqlite"
    assert manager.store.dialect.name == expected


async def test_arun_is_one_hop_per_operation_on_every_backend(
    manager: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = manager.store
    store.run(ops.create_session("s", user_id="u", system_prompt="be brief"))
    hops: list[object] = []
    real = asyncio.to_thread

    async def counting(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        hops.append(fn)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    session = await store.arun(ops.get_session("s"))
    assert session is not None
    assert session.system_prompt == "be brief"
    assert session == store.run(ops.get_session("s"))  # the sync path's answer
    ids = await store.arun(ops.add_messages("s", [_message("hi")], user_id="u"))
    assert [m.id for m in store.run(ops.get_messages("s"))] == ids
    assert hops == [store.run, store.run]  # one per operation, the sync runner itself
