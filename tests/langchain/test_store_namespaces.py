"""``HarombeStore.list_namespaces`` answers as LangGraph's own stores do, on both backends.

The names are matched, cut to ``max_depth``, made distinct and paged in SQL; these tests hold
the answers to LangGraph's ``InMemoryStore`` (page for page: tuple order) and ``SqliteStore``
(as whole lists: it sorts the dotted text, so a label with a character below "." orders
differently) filled with the same items, over many namespaces, wildcards in prefixes and
suffixes, every depth and pages of every size.
"""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from harombe_core.manager import MemoryManager
from harombe_core.store import items
from harombe_core.store.items import ns_order
from harombe_core.store.schema import NS_ORDER
from harombe_core.store.sql_body import sql_runner
from langchain_harombe import HarombeStore

LABELS = ("a", "b", "c", "a b", "b\x01", "é")


def namespaces() -> list[tuple[str, ...]]:
    """Namespaces of depth 1 to 4 over a few labels: shared prefixes and suffixes, repeated
    labels, a label sorting around the separator."""
    found: list[tuple[str, ...]] = []
    for depth in (1, 2, 3):
        found += list(itertools.product(LABELS[:4], repeat=depth))
    found += [("a", "b", "c", "d"), ("b\x01", "x"), ("é", "a", "a", "a"), ("users", "u1", "x")]
    return found


QUERIES: list[dict[str, Any]] = [
    {},
    {"prefix": ("a",)},
    {"prefix": ("a", "*")},
    {"prefix": ("*", "b")},
    {"prefix": ("*", "*", "c")},
    {"prefix": ("a", "*", "c", "d")},
    {"suffix": ("c",)},
    {"suffix": ("*", "c")},
    {"suffix": ("b", "*")},
    {"suffix": ("a", "*", "a")},
    {"prefix": ("a", "*"), "suffix": ("*", "a")},
    {"prefix": ("é",), "suffix": ("a",)},
    {"prefix": ("zzz",)},
]


@pytest.fixture
def harombe(backend_manager: MemoryManager) -> HarombeStore:
    """A store on each backend (the adapter tests' ``backend_manager``)."""
    return HarombeStore(backend_manager)


def test_list_namespaces_answers_as_langgraph_stores(harombe: HarombeStore) -> None:
    memory = InMemoryStore()
    with SqliteStore.from_conn_string(":memory:") as sqlite:
        sqlite.setup()
        for ns in namespaces():
            for store in (harombe, memory, sqlite):
                store.put(ns, "k", {"v": 1})
        checked = 0
        for query in QUERIES:
            for max_depth in (None, 1, 2, 3):
                for limit, offset in ((100, 0), (3, 0), (3, 2), (5, 7), (1, 40), (10, 1000)):
                    kw = {**query, "max_depth": max_depth, "limit": limit, "offset": offset}
                    want = memory.list_namespaces(**kw)
                    assert harombe.list_namespaces(**kw) == want, kw
                    checked += bool(want)
                # SqliteStore sorts the dotted text, so " " (below ".") reorders its pages:
                # compared on the whole list
                kw = {**query, "max_depth": max_depth, "limit": 1000}
                assert sorted(sqlite.list_namespaces(**kw)) == memory.list_namespaces(**kw)
        assert checked > 120  # most questions have an answer


def test_a_prefix_longer_than_max_depth_is_cut_after_matching(harombe: HarombeStore) -> None:
    harombe.put(("a", "b", "c"), "k", {"v": 1})
    harombe.put(("a", "x", "c"), "k", {"v": 1})
    assert harombe.list_namespaces(prefix=("a", "*", "c"), max_depth=2) == [
        ("a", "b"),
        ("a", "x"),
    ]
    assert harombe.list_namespaces(suffix=("b", "c"), max_depth=1) == [("a",)]


# the sort key ---------------------------------------------------------------------------------
#: Labels that order differently as text than as tuples: one the prefix of another, characters
#: below and above ".", U+0001 (the key's separator) and U+0002 inside a label, beyond ASCII
#: (two, three and four UTF-8 bytes), the last code point.
TRICKY = ("a", "ab", "a b", "a-b", "a/b", "a\x01", "a\x01\x01", "a\x02", "\x01", "\x01b",
          "\x7f", "é", "ü", "中", "😀", "\U0010ffff", "users")  # fmt: skip


def tricky_namespaces() -> list[tuple[str, ...]]:
    """Every tricky label alone and followed by each of a few, and a few deeper names."""
    found = [(label,) for label in TRICKY]
    found += [(label, other) for label in TRICKY for other in ("a", "ab", "\x01", "😀")]
    found += [("a", "b", "c"), ("a", "\x01", "a"), ("a\x01", "b", "c"), ("users", "u1", "x")]
    return found


def test_the_sort_key_orders_namespaces_as_python_orders_tuples() -> None:
    names = tricky_namespaces()
    assert sorted(names, key=ns_order) == sorted(names)
    assert sorted([("ab",), ("a", "b"), ("a",)], key=ns_order) == [("a",), ("a", "b"), ("ab",)]
    assert len({ns_order(ns) for ns in names}) == len(names)  # no two names share a key


@given(
    st.lists(
        st.lists(st.text(alphabet="ab\x01\x02 -é😀\U0010ffff", min_size=1), min_size=1),
        min_size=2,
    )
)
def test_any_namespaces_sort_by_their_key_as_tuples(labels: list[list[str]]) -> None:
    names = [tuple(ns) for ns in labels]
    assert sorted(names, key=ns_order) == sorted(names)


def test_sqlite_computes_the_key_with_its_own_functions() -> None:
    raw = sqlite3.connect(":memory:")  # no function of harombe's
    for ns in tricky_namespaces():
        key = raw.execute(
            f"SELECT {NS_ORDER['sqlite']} FROM (SELECT ? AS namespace)", (".".join(ns),)
        )
        assert key.fetchone()[0] == ns_order(ns), ns
    raw.close()


def test_tricky_labels_page_as_in_memory_store(harombe: HarombeStore) -> None:
    memory = InMemoryStore()
    for ns in tricky_namespaces():
        for store in (harombe, memory):
            store.put(ns, "k", {"v": 1})
    queries: list[dict[str, Any]] = [
        {},
        {"prefix": ("a",)},  # ("a",), ("a", ...): not ("ab",) nor ("a\x01",)
        {"prefix": ("a\x01",)},
        {"prefix": ("\x01",)},
        {"prefix": ("😀",)},
        {"prefix": ("*", "ab")},
        {"prefix": ("a", "*")},
        {"suffix": ("\x01",)},
        {"suffix": ("😀",), "prefix": ("é",)},
    ]
    for query in queries:
        for max_depth in (None, 1):
            whole = memory.list_namespaces(**query, max_depth=max_depth, limit=1000)
            assert harombe.list_namespaces(**query, max_depth=max_depth, limit=1000) == whole
            for offset in range(0, len(whole) + 2, 7):
                kw = {**query, "max_depth": max_depth, "limit": 7, "offset": offset}
                assert harombe.list_namespaces(**kw) == whole[offset : offset + 7], kw
    assert harombe.list_namespaces(prefix=("a",), limit=5) == [
        ("a",),
        ("a", "\x01"),
        ("a", "\x01", "a"),
        ("a", "a"),
        ("a", "ab"),
    ]


def test_a_page_is_read_from_the_index_not_sorted(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "m.db", embedding=None) as mm:
        HarombeStore(mm).put(("users", "u1", "profile"), "k", {"v": 1})
        runner = sql_runner(mm.store)
        bodies = [
            items.list_namespaces(runner, now=0, offset=5000),
            items.list_namespaces(runner, now=0, omit_expired=True),
            items.list_namespaces(runner, now=0, match=[("prefix", ("users", "u1"))]),
        ]
        steps = [next(body) for body in bodies]
    raw = sqlite3.connect(tmp_path / "m.db")
    for step in steps:
        plan = " ".join(r[3] for r in raw.execute("EXPLAIN QUERY PLAN " + step.sql, step.params))
        assert "COVERING INDEX store_items_ns_order" in plan, plan
        assert "TEMP B-TREE" not in plan, plan  # nothing sorted
    raw.close()


def test_namespaces_written_by_plain_sqlite3_are_listed(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    names = tricky_namespaces()
    with MemoryManager(path, embedding=None) as mm:
        store = HarombeStore(mm)
        for ns in names[::2]:
            store.put(ns, "k", {"v": 1})
    raw = sqlite3.connect(path, isolation_level=None)  # another program, no harombe function
    raw.executemany(
        "INSERT INTO store_items (namespace, key, value, created_at, updated_at) "
        "VALUES (?, 'k', '{}', 0, 0)",
        [(".".join(ns),) for ns in names[1::2]],
    )
    raw.execute("UPDATE store_items SET namespace = 'zz.moved' WHERE namespace = 'a.ab'")
    raw.execute("DELETE FROM store_items WHERE namespace = ?", ("😀",))
    raw.close()
    want = sorted({*names, ("zz", "moved")} - {("a", "ab"), ("😀",)})
    with MemoryManager(path, embedding=None) as mm:
        store = HarombeStore(mm)
        assert store.list_namespaces(limit=1000) == want
        assert store.list_namespaces(limit=10, offset=20) == want[20:30]
        assert store.list_namespaces(prefix=("a",), limit=1000) == [
            ns for ns in want if ns[0] == "a"
        ]


# a database written before the index ------------------------------------------------------------
def _without_the_index(migrations: list[list[str]]) -> list[list[str]]:
    """The migrations before the one that added the namespaces' index."""
    at = next(i for i, m in enumerate(migrations) if "store_items_ns_order" in " ".join(m))
    return migrations[:at]


def test_an_old_database_gets_the_index_and_lists_the_same(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harombe_core.store import postgres as pg_module
    from harombe_core.store import sqlite as sqlite_module

    names = tricky_namespaces()
    memory = InMemoryStore()
    with monkeypatch.context() as old:
        for module, attr, version in (
            (sqlite_module, "MIGRATIONS", "SCHEMA_VERSION"),
            (pg_module, "PG_MIGRATIONS", "PG_SCHEMA_VERSION"),
        ):
            before = _without_the_index(getattr(module, attr))
            old.setattr(module, attr, before)
            old.setattr(module, version, len(before))
        with MemoryManager(location, embedding=None) as mm:
            assert _has_index(mm) is False
            store = HarombeStore(mm)
            for ns in names:
                for each in (store, memory):
                    each.put(ns, "k", {"v": 1})
    with MemoryManager(location, embedding=None) as mm:
        assert _has_index(mm) is True
        store = HarombeStore(mm)
        for kw in ({}, {"prefix": ("a",)}, {"prefix": ("*", "ab")}, {"offset": 11}):
            assert store.list_namespaces(**kw, limit=1000) == memory.list_namespaces(
                **kw, limit=1000
            ), kw
        store.put(("a", "new"), "k", {"v": 1})  # written after, listed in its place
        memory.put(("a", "new"), "k", {"v": 1})
        assert store.list_namespaces(prefix=("a",), limit=1000) == memory.list_namespaces(
            prefix=("a",), limit=1000
        )


def _has_index(mm: MemoryManager) -> bool:
    """Whether the database holds the namespaces' index (either backend's catalog)."""
    runner = sql_runner(mm.store)
    catalog = (
        "SELECT 1 FROM pg_indexes WHERE indexname = ?"
        if mm.store.dialect.name == "postgres"
        else "SELECT 1 FROM sqlite_master WHERE name = ?"
    )

    def body() -> Any:
        return (yield runner.step(catalog, ["store_items_ns_order"])).rows

    return bool(runner.read(body))
