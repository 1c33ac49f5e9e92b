"""`harombe migrate` carries the LangGraph store's items (values, dates, expiry, vectors) too.

Real SQLite files and a real PostgreSQL database; the items are written through HarombeStore
and read back through HarombeStore on the destination.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from langgraph.store.base import GetOp, ListNamespacesOp, SearchOp

from harombe_core.manager import MemoryManager
from harombe_core.migrate import MigrationError, migrate
from harombe_core.migrate.items import copy_store_items
from harombe_core.testing import FakeEmbedder
from langchain_harombe import HarombeStore

NAMESPACES = [("users", f"u{n}") for n in range(7)] + [("team",), ("é", "ü")]


def _store(manager: MemoryManager) -> HarombeStore:
    return HarombeStore(manager, index={"embed": FakeEmbedder(), "fields": ["text"]})


def _fill(url: str) -> None:
    with MemoryManager(url, embedding=None) as manager:
        manager.create_session("conversations move too", session_id="chat")
        manager.save_message("chat", {"role": "user", "content": "hello"})
        store = _store(manager)
        for n, namespace in enumerate(NAMESPACES):
            for k in range(4):
                store.put(namespace, f"k{k}", {"text": f"note {n} {k} tea" * (k + 1), "n": k})
        store.put(("team",), "plain", {"text": "not indexed"}, index=False)
        store.put(("team",), "soon", {"text": "expires"}, ttl=60)


def _reads(url: str) -> list:
    """What an application sees (reads that leave expiry alone, so they change nothing)."""
    ops = [
        SearchOp(("users",), query="note 3 tea", limit=8, refresh_ttl=False),
        SearchOp((), filter={"n": 2}, limit=50, refresh_ttl=False),
        GetOp(("team",), "plain", refresh_ttl=False),
        GetOp(("team",), "soon", refresh_ttl=False),
        ListNamespacesOp(),
    ]
    with MemoryManager(url, embedding=None) as manager:
        results = _store(manager).batch(ops)
        assert manager.get_messages("chat")[0].content == "hello"
    return results


@pytest.fixture
def source(tmp_path: Path) -> str:
    path = str(tmp_path / "source.db")
    _fill(path)
    return path


def test_items_reach_postgres_and_come_back_intact(
    source: str, pg_url: str, tmp_path: Path
) -> None:
    expected = _reads(source)
    report = migrate(source, pg_url, batch_size=5, progress=False)
    assert report.verified
    assert (report.store_items, report.copied_store_items) == (len(NAMESPACES) * 4 + 2,) * 2
    assert _reads(pg_url) == expected

    back = str(tmp_path / "back.db")
    migrate(pg_url, back, batch_size=3, progress=False)
    assert _reads(back) == expected
    with sqlite3.connect(source) as a, sqlite3.connect(back) as b:
        for table in ("store_items", "store_vectors"):
            query = f"SELECT * FROM {table} ORDER BY 1, 2, 3"
            assert a.execute(query).fetchall() == b.execute(query).fetchall()


def test_sqlite_to_sqlite_then_rerun_copies_nothing(source: str, tmp_path: Path) -> None:
    target = str(tmp_path / "target.db")
    first = migrate(source, target, batch_size=4, progress=False)
    again = migrate(source, target, batch_size=4, progress=False)
    assert first.copied_store_items == first.store_items == len(NAMESPACES) * 4 + 2
    assert (again.store_items, again.copied_store_items) == (first.store_items, 0)
    assert again.verified
    assert _reads(target) == _reads(source)


def test_interrupted_copy_resumes_without_duplicates(source: str, tmp_path: Path) -> None:
    target = str(tmp_path / "target.db")
    pages = []

    def stop_after_two(n: int) -> None:
        pages.append(n)
        if len(pages) == 2:
            raise KeyboardInterrupt

    with MemoryManager(source, embedding=None) as a, MemoryManager(target, embedding=None) as b:
        with pytest.raises(KeyboardInterrupt):
            copy_store_items(a.store, b.store, batch_size=5, on_page=stop_after_two)
        assert b.store.query("SELECT COUNT(*) FROM store_items")[0][0] == 10
    report = migrate(source, target, batch_size=5, progress=False)
    assert report.verified
    assert report.copied_store_items == report.store_items - 10
    assert _reads(target) == _reads(source)


def test_a_different_item_at_the_destination_is_never_overwritten(
    source: str, tmp_path: Path
) -> None:
    target = str(tmp_path / "target.db")
    with MemoryManager(target, embedding=None) as manager:
        _store(manager).put(("team",), "plain", {"text": "the destination's own"})
        _store(manager).put(("other",), "mine", {"text": "kept"})
    with pytest.raises(MigrationError, match="team/plain"):
        migrate(source, target, batch_size=50, progress=False)
    with MemoryManager(target, embedding=None) as manager:
        store = _store(manager)
        plain = store.get(("team",), "plain")
        assert plain is not None
        assert plain.value == {"text": "the destination's own"}
        mine = store.get(("other",), "mine")
        assert mine is not None
        assert mine.value == {"text": "kept"}


def test_verification_notices_an_item_lost_after_the_copy(source: str, tmp_path: Path) -> None:
    from harombe_core.migrate.items import verify_store_items

    target = str(tmp_path / "target.db")
    migrate(source, target, progress=False)
    with MemoryManager(source, embedding=None) as a, MemoryManager(target, embedding=None) as b:
        assert verify_store_items(a.store, b.store) == []
        b.store.transaction(
            lambda c: c.execute("DELETE FROM store_vectors WHERE namespace = 'team'")
        )
        b.store.transaction(
            lambda c: c.execute("DELETE FROM store_items WHERE key = 'k3' AND namespace = 'é.ü'")
        )
        problems = verify_store_items(a.store, b.store)
    assert "store item é.ü/k3: missing" in problems
    assert any(p.startswith("store item team/") and p.endswith("differs") for p in problems)
