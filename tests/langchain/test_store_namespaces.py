"""``HarombeStore.list_namespaces`` answers as LangGraph's own stores do, on both backends.

The names are matched, cut to ``max_depth``, made distinct and paged in SQL; these tests hold
the answers to LangGraph's ``InMemoryStore`` (page for page: tuple order) and ``SqliteStore``
(as whole lists: it sorts the dotted text, so a label with a character below "." orders
differently) filled with the same items, over many namespaces, wildcards in prefixes and
suffixes, every depth and pages of every size.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from harombe_core.manager import MemoryManager
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
