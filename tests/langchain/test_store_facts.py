"""A user's facts as HarombeStore items under ("harombe", "facts", user_id), and LangMem's
memory tools (manage and search) working against them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harombe_core.errors import InvalidInputError
from harombe_core.manager import MemoryManager
from langchain_harombe import HarombeStore

ANN = ("harombe", "facts", "ann")


def test_facts_are_items_under_their_namespace(tmp_path: Path) -> None:
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        mm.save_message("s1", {"role": "user", "content": "I live in Lisbon."}, user_id="ann")
        mm.end_session("s1")
        store = HarombeStore(mm)
        item = store.get(ANN, "home city")
        assert item is not None
        assert item.value["content"] == "Lives in Lisbon"
        assert item.value["sources"] == [["s1", mm.get_messages("s1")[0].id]]
        store.put(ANN, "home city", {"content": "Lives in Berlin"})
        assert store.get(ANN, "home city").value["content"] == "Lives in Berlin"  # type: ignore[union-attr]
        history = mm.get_facts("ann", include_history=True)
        assert [f.text for f in history] == ["Lives in Lisbon", "Lives in Berlin"]
        store.put(("app", "notes"), "n1", {"text": "an ordinary item"})
        found = store.search(ANN, query="Berlin")
        assert [i.value["content"] for i in found] == ["Lives in Berlin"]
        assert store.get(("harombe", "facts", "bob"), "home city") is None
        store.delete(ANN, "home city")
        assert store.get(ANN, "home city") is None
        assert store.search(ANN, query="Berlin") == []
        assert store.get(("app", "notes"), "n1") is not None
        with pytest.raises(InvalidInputError, match="content"):
            store.put(ANN, "x", {"content": 3})


def test_a_fact_put_with_a_ttl_is_refused_not_kept_forever(tmp_path: Path) -> None:
    """A fact never expires, so a put asking for a ttl is refused (a silent forever would
    keep what the caller meant to be gone); without one, or with None, it is stored."""
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        store = HarombeStore(mm, ttl={"default_ttl": 5})
        with pytest.raises(InvalidInputError, match="does not expire"):
            store.put(ANN, "diet", {"content": "Is vegan"}, ttl=60)
        with pytest.raises(InvalidInputError, match="does not expire"):
            HarombeStore(mm).put(ANN, "diet", {"content": "Is vegan"}, ttl=5)
        assert mm.get_facts("ann") == []
        store.put(ANN, "diet", {"content": "Is vegan"})  # the store's default_ttl: items only
        store.put(ANN, "tea", {"content": "Likes tea"}, ttl=None)
        assert sorted(f.text for f in mm.get_facts("ann")) == ["Is vegan", "Likes tea"]


async def test_langmem_tools_manage_and_search_the_users_facts(tmp_path: Path) -> None:
    langmem = pytest.importorskip("langmem")
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        store = HarombeStore(mm)
        manage = langmem.create_manage_memory_tool(ANN, store=store)
        search = langmem.create_search_memory_tool(ANN, store=store)
        created = await manage.ainvoke({"action": "create", "content": "Prefers green tea"})
        key = created.split()[-1]
        assert [f.text for f in mm.get_facts("ann")] == ["Prefers green tea"]
        await manage.ainvoke({"action": "update", "id": key, "content": "Prefers black tea"})
        assert [f.text for f in mm.get_facts("ann")] == ["Prefers black tea"]
        found = await search.ainvoke({"query": "tea"})
        assert "Prefers black tea" in str(found)
        await manage.ainvoke({"action": "delete", "id": key})
        assert mm.get_facts("ann") == []
        assert [f.text for f in mm.get_facts("ann", include_history=True)] == ["Prefers green tea"]


def test_langmems_memory_manager_belongs_in_an_item_namespace(tmp_path: Path) -> None:
    """LangMem's memory store manager writes structured documents (``{"kind": "Memory",
    "content": {"content": ...}}``) from a thread pool whose errors it never reads: in the
    facts namespace nothing would be written, silently. The store's refusal names the item
    namespace to use instead; there the same manager keeps the memory."""
    from langchain_core.messages import AIMessage, HumanMessage

    from tests.langchain.test_langmem import ToolCallingFake

    langmem = pytest.importorskip("langmem")
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        store = HarombeStore(mm)
        shaped = {"kind": "Memory", "content": {"content": "Likes tea"}}
        with pytest.raises(InvalidInputError, match="item namespace"):
            store.put(ANN, "k", shaped)
        call = {"name": "Memory", "args": {"content": "Likes tea"}, "id": "c1"}
        model = ToolCallingFake(messages=iter([AIMessage("", tool_calls=[call])]))
        manager = langmem.create_memory_store_manager(model, store=store)  # ("memories", user)
        config = {"configurable": {"langgraph_user_id": "ann"}}
        manager.invoke({"messages": [HumanMessage("I like tea")]}, config)
        (item,) = store.search(("memories", "ann"))
        assert item.value == shaped
        assert mm.get_facts("ann") == []


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "m.db")


def test_list_namespaces_shows_users_with_facts_as_langgraph_would(location: str) -> None:
    """The same items in LangGraph's InMemoryStore (where facts are plain items) and in
    HarombeStore (where they are harombe's user memory) list the same namespaces, with every
    prefix, suffix, depth and page."""
    from langgraph.store.base import ListNamespacesOp, MatchCondition
    from langgraph.store.memory import InMemoryStore

    theirs = InMemoryStore()
    with MemoryManager(location, embedding=None) as mm:
        ours = HarombeStore(mm)
        for namespace in [("app", "notes"), ("app", "notes", "ann"), ("users", "bob", "prefs")]:
            ours.put(namespace, "k", {"text": "an item"})
            theirs.put(namespace, "k", {"text": "an item"})
        for user in ("ann", "bob"):
            mm.add_fact(user, "Lives in Lisbon", subject="home city")
            theirs.put(("harombe", "facts", user), "home city", {"content": "Lives in Lisbon"})
        done = mm.add_fact("carol", "Book the flights", kind="task")
        mm.complete_task("carol", done.id)  # only history left: no current facts to list
        forgotten = mm.add_fact("dave", "Likes tea")
        mm.forget_fact("dave", forgotten.id)
        cases: list[dict[str, Any]] = [
            {},
            {"prefix": ("harombe",)},
            {"prefix": ("harombe", "facts")},
            {"prefix": ("harombe", "*", "bob")},
            {"suffix": ("ann",)},
            {"prefix": ("app",), "suffix": ("ann",)},
            {"max_depth": 1},
            {"max_depth": 2},
            {"prefix": ("harombe",), "max_depth": 2},
            {"limit": 2},
            {"limit": 2, "offset": 2},
            {"offset": 4},
            {"prefix": ("nothing",)},
        ]
        for case in cases:
            assert ours.list_namespaces(**case) == theirs.list_namespaces(**case), case
        assert ("harombe", "facts", "ann") in ours.list_namespaces()
        # and inside a batch, beside other operations
        op = ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("harombe",)),))
        assert ours.batch([op]) == theirs.batch([op])


def _item_put_failing_on(monkeypatch: pytest.MonkeyPatch, failing_key: str) -> None:
    from harombe_core.store import items

    real = items.put

    def put(sql: Any, namespace: Any, key: str, *args: Any, **kw: Any) -> Any:
        if key == failing_key:
            raise RuntimeError("the disk failed in the middle of the batch")
        return (yield from real(sql, namespace, key, *args, **kw))

    monkeypatch.setattr(items, "put", put)


async def _run(store: HarombeStore, run: str, ops: list[Any]) -> list[Any]:
    return store.batch(ops) if run == "batch" else await store.abatch(ops)


@pytest.mark.parametrize("run", ["batch", "abatch"])
async def test_a_batch_of_items_and_facts_is_one_transaction(
    location: str, monkeypatch: pytest.MonkeyPatch, run: str
) -> None:
    """A batch writes its items and its facts together or not at all: an operation failing
    in the middle (after a fact was written in it) leaves neither."""
    from langgraph.store.base import PutOp

    with MemoryManager(location, embedding=None) as mm:
        store = HarombeStore(mm)
        mm.add_fact("ann", "Lives in Lisbon", subject="home city")
        ops = [
            PutOp(("app", "notes"), "a", {"text": "first"}),
            PutOp(ANN, "home city", {"content": "Lives in Berlin"}),
            PutOp(ANN, "diet", {"content": "Is vegan", "kind": "preference"}),
            PutOp(("app", "notes"), "b", {"text": "fails"}),
        ]
        _item_put_failing_on(monkeypatch, "b")
        with pytest.raises(RuntimeError, match="middle of the batch"):
            await _run(store, run, ops)
        monkeypatch.undo()
        assert store.get(("app", "notes"), "a") is None
        history = mm.get_facts("ann", include_history=True)
        assert [(f.text, f.current) for f in history] == [("Lives in Lisbon", True)]
        # the same batch, nothing failing: all of it
        results = await _run(store, run, ops)
        assert results == [None] * 4
        assert store.get(("app", "notes"), "b") is not None
        assert sorted(f.text for f in mm.get_facts("ann")) == ["Is vegan", "Lives in Berlin"]


def test_a_fact_failing_inside_the_batch_takes_its_items_with_it(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph.store.base import PutOp

    from harombe_core.facts import ops as fact_ops

    with MemoryManager(location, embedding=None) as mm:
        store = HarombeStore(mm)
        mm.add_fact("ann", "Lives in Lisbon", subject="home city")

        def close(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("the fact write failed")
            yield  # a body

        monkeypatch.setattr(fact_ops, "_close", close)
        with pytest.raises(RuntimeError, match="fact write failed"):
            store.batch(
                [
                    PutOp(("app", "notes"), "a", {"text": "first"}),
                    PutOp(ANN, "home city", {"content": "Lives in Berlin"}),
                    PutOp(("app", "notes"), "b", {"text": "after"}),
                ]
            )
        assert store.search(("app",)) == []
        assert [f.text for f in mm.get_facts("ann", include_history=True)] == ["Lives in Lisbon"]
        # a bad fact is refused before anything runs, with a typed error
        with pytest.raises(InvalidInputError, match="kind"):
            store.batch(
                [
                    PutOp(("app", "notes"), "a", {"text": "first"}),
                    PutOp(ANN, "diet", {"content": "Is vegan", "kind": "rumour"}),
                ]
            )
        assert store.search(("app",)) == []


def _seen(item: Any) -> Any:
    return None if item is None else (item.key, item.value["content"])


def test_every_key_of_the_facts_namespace_keeps_langgraphs_get_after_put(location: str) -> None:
    """The same puts, overwrites and deletes on LangGraph's InMemoryStore and on HarombeStore's
    facts namespaces read back the same: a key that looks like a number is a key like any
    other (not a new fact under a new id), a text another key holds does not merge into that
    key's fact, and one user's keys never reach another user's facts."""
    from langgraph.store.memory import InMemoryStore

    bob = ("harombe", "facts", "bob")
    keys = ["17", "1", "0", "2", "home city", "diet", "memory-5e1f", "tea", "also tea"]
    theirs = InMemoryStore()
    with MemoryManager(location, embedding=None) as mm:
        ours = HarombeStore(mm)
        mm.add_fact("bob", "Bob's own fact", subject="bob thing")  # ids the keys may name
        for store in (theirs, ours):
            for key in keys:
                text = "Likes tea" if "tea" in key else f"The value of {key}"
                store.put(ANN, key, {"content": text})
            store.put(bob, "1", {"content": "Bob's first"})
        for key in keys:
            assert _seen(ours.get(ANN, key)) == _seen(theirs.get(ANN, key)), key
        for store in (theirs, ours):
            store.put(ANN, "17", {"content": "The new value of 17"})
            store.put(ANN, "tea", {"content": "Likes green tea"})
            store.delete(ANN, "1")
            store.delete(ANN, "no such key")
        for key in [*keys, "no such key", "3", "4"]:
            assert _seen(ours.get(ANN, key)) == _seen(theirs.get(ANN, key)), key
            assert _seen(ours.get(bob, key)) == _seen(theirs.get(bob, key)), key

        def listed(store: Any, namespace: tuple[str, ...]) -> list[Any]:
            return sorted(_seen(i) for i in store.search(namespace, limit=50))

        assert listed(ours, ANN) == listed(theirs, ANN)
        assert listed(ours, bob) == [*listed(theirs, bob), ("bob thing", "Bob's own fact")]
        assert ours.list_namespaces(prefix=("harombe",)) == theirs.list_namespaces(
            prefix=("harombe",)
        )


def test_a_fact_without_a_subject_is_read_overwritten_and_deleted_by_its_id(
    tmp_path: Path,
) -> None:
    """A fact the extractor stored without a subject is the item keyed by its id: a put to
    that key replaces it (and the new value is found under the same key), a delete forgets
    it; a key naming another user's fact id reaches nothing."""
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        store = HarombeStore(mm)
        fact = mm.add_fact("ann", "Likes hiking")
        other = mm.add_fact("bob", "Likes chess")
        key = str(fact.id)
        assert _seen(store.get(ANN, key)) == (key, "Likes hiking")
        assert store.get(ANN, str(other.id)) is None
        assert store.get(ANN, f"0{key}") is None  # the id is written one way only
        store.put(ANN, key, {"content": "Likes climbing"})
        assert _seen(store.get(ANN, key)) == (key, "Likes climbing")
        assert [f.text for f in mm.get_facts("ann")] == ["Likes climbing"]
        store.put(ANN, str(other.id), {"content": "Ann's own"})
        assert [f.text for f in mm.get_facts("bob")] == ["Likes chess"]
        store.delete(ANN, key)
        store.delete(ANN, str(other.id))
        assert store.get(ANN, key) is None
        assert [f.text for f in mm.get_facts("ann")] == []
        assert [f.text for f in mm.get_facts("bob")] == ["Likes chess"]


def test_keys_differing_in_case_or_spacing_name_one_fact_on_purpose(tmp_path: Path) -> None:
    """The deliberate difference (docs/user-memory.md): a key is a subject, so "Home City"
    and "home  city" are one fact (the one an extractor files under "home city"), where
    InMemoryStore keeps two items; a get still answers with the key as asked."""
    from langgraph.store.memory import InMemoryStore

    theirs = InMemoryStore()
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        ours = HarombeStore(mm)
        for store in (theirs, ours):
            store.put(ANN, "Home City", {"content": "Lives in Lisbon"})
            store.put(ANN, "home  city", {"content": "Lives in Berlin"})
        assert _seen(theirs.get(ANN, "Home City")) == ("Home City", "Lives in Lisbon")
        assert _seen(ours.get(ANN, "Home City")) == ("Home City", "Lives in Berlin")
        assert _seen(ours.get(ANN, "home  city")) == _seen(theirs.get(ANN, "home  city"))
        assert len(theirs.search(ANN)) == 2
        assert [_seen(i) for i in ours.search(ANN)] == [("home city", "Lives in Berlin")]
        assert [f.text for f in mm.get_facts("ann", include_history=True)] == [
            "Lives in Lisbon",
            "Lives in Berlin",
        ]
