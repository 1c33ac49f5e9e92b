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


def test_every_backend_reads_the_same_operations_alike(manager: MemoryManager) -> None:
    """The operations written per dialect (the keyword search, the statistics) and the ones
    that join two reads (a search's neighbours, a window's session and prompt) answer alike on
    every backend."""
    from harombe_core.store.base import SearchScope

    store = manager.store
    store.run(ops.create_session("a", user_id="ann", system_prompt="Be brief."))
    store.run(ops.create_session("b", user_id="bob"))
    texts = ["the kettle boiled", "tea in the garden", "a kettle of fish", "green tea"]
    a1, a2, a3, a4 = ids = store.run(ops.add_messages("a", [_message(t) for t in texts]))
    (b1,) = store.run(ops.add_messages("b", [_message("a kettle for bob")]))
    pairs, read = store.run(ops.neighbours([a2, b1], {a2, a3}, SearchScope(user_id="ann")))
    assert pairs == {a2: (a1, a3), b1: (None, None)}
    assert [m.id for m in read] == [a1]  # a3 is known; nothing of bob's is in ann's scope
    hits = store.run(ops.keyword_search("kettle", limit=5, scope=SearchScope(user_id="ann")))
    # the kettle in a message, then in the turn a message answers; nothing of bob's
    assert [h.message.id for h in hits][:2] in ([a1, a3], [a3, a1])
    assert {h.message.id for h in hits} == set(ids) == {a1, a2, a3, a4}
    assert all(h.score > 0 for h in hits)
    assert store.run(ops.keyword_search("!!!", limit=5)) == []
    session, prompt = store.run(ops.session_and_prompt("a"))
    assert session.user_id == "ann"
    assert [(m.role, m.content, m.token_count) for m in prompt] == [
        ("system", "Be brief.", store.run(ops.system_prompt_tokens("a")))
    ]
    assert store.run(ops.session_and_prompt("b"))[1] == []
    assert store.run(ops.session_and_prompt("none")) is None
    stats = store.run(ops.stats())
    assert (stats["sessions"], stats["users"], stats["messages"]) == (2, 2, 5)
    assert stats["tokens"] == 5
    assert manager.stats() == {"location": store.location, **stats}
    assert store.run(ops.rebuild_keyword_index()) == 5
