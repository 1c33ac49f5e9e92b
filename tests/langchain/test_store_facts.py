"""A user's facts as HarombeStore items under ("harombe", "facts", user_id), and LangMem's
memory tools (manage and search) working against them."""

from __future__ import annotations

from pathlib import Path

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
