"""HarombeStore: the LangGraph BaseStore contract, semantic search, TTL, persistence, agents.

Every behaviour is checked on SQLite and on PostgreSQL (a fresh database on the session's
server), which must agree exactly.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.config import get_store
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp
from langgraph.store.base.embed import ensure_embeddings

import langchain_harombe.store as store_module
from harombe_core.embeddings import resolve_embedder
from harombe_core.errors import InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.testing import FakeEmbedder
from langchain_harombe import HarombeStore, RecordingChatModel

MINUTE = 60_000_000  # microseconds


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database location on each backend (a fresh PostgreSQL database per test)."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "m.db")


@pytest.fixture
def store(url: str) -> Iterator[HarombeStore]:
    with MemoryManager(url, embedding=None) as manager:
        yield HarombeStore(manager, index={"embed": FakeEmbedder(), "fields": ["text"]})


class Clock:
    """The store's clock, moved by hand (microseconds since the epoch)."""

    def __init__(self) -> None:
        self.now = 1_700_000_000 * 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(store_module, "_now", fake)
    return fake


def test_put_get_update_delete(store: HarombeStore) -> None:
    store.put(("users", "ann"), "prefs", {"text": "likes tea", "n": 1})
    item = store.get(("users", "ann"), "prefs")
    assert item is not None
    assert (item.namespace, item.key) == (("users", "ann"), "prefs")
    assert item.value == {"text": "likes tea", "n": 1}
    created = item.created_at
    store.put(("users", "ann"), "prefs", {"text": "likes coffee", "n": 2})
    updated = store.get(("users", "ann"), "prefs")
    assert updated is not None
    assert updated.value["n"] == 2
    assert updated.created_at == created
    assert updated.updated_at >= created
    store.delete(("users", "ann"), "prefs")
    assert store.get(("users", "ann"), "prefs") is None


def test_batch_reads_before_it_writes(store: HarombeStore) -> None:
    """As in LangGraph's stores: a batch's reads see the store before the batch, and the last
    put of a key wins (the contract, against LangGraph's own stores: test_store_contract.py)."""
    store.put(("a",), "k", {"text": "zero"})
    results = store.batch(
        [
            PutOp(("a",), "k", {"text": "one"}),
            GetOp(("a",), "k"),
            PutOp(("a",), "k", None),
            PutOp(("a",), "n", {"text": "new"}),
            GetOp(("a",), "n"),
            ListNamespacesOp(),
        ]
    )
    assert results[0] is None
    assert results[1] is not None
    assert results[1].value == {"text": "zero"}
    assert results[4] is None
    assert results[5] == [("a",)]
    assert store.get(("a",), "k") is None
    assert store.get(("a",), "n").value == {"text": "new"}  # type: ignore[union-attr]


def test_semantic_search_filter_and_pagination(store: HarombeStore) -> None:
    ns = ("memories", "ann")
    store.put(ns, "1", {"text": "Ann loves hiking in the mountains", "kind": "hobby", "year": 2020})
    store.put(ns, "2", {"text": "Ann is allergic to peanuts", "kind": "health", "year": 2022})
    store.put(ns, "3", {"text": "Ann enjoys mountain biking", "kind": "hobby", "year": 2024})
    store.put(("memories", "bob"), "1", {"text": "Bob loves hiking", "kind": "hobby"})
    hits = store.search(ns, query="hiking in the mountains", limit=2)
    assert next(h.key for h in hits) == "1"
    assert len(hits) == 2
    assert hits[0].score is not None
    assert hits[0].score >= (hits[1].score or 0)
    assert all(h.namespace == ns for h in store.search(ns, query="hiking"))
    hobbies = store.search(("memories",), filter={"kind": "hobby"})
    assert {(h.namespace[-1], h.key) for h in hobbies} == {("ann", "1"), ("ann", "3"), ("bob", "1")}
    recent = store.search(ns, filter={"year": {"$gte": 2022}})
    assert {h.key for h in recent} == {"2", "3"}
    page = store.search(("memories",), limit=2, offset=1)
    assert len(page) == 2
    assert store.search(("memories",), query="peanuts", filter={"kind": "health"})[0].key == "2"


@pytest.fixture(scope="module")
def minilm() -> object:
    """The bundled all-MiniLM-L6-v2 embedder, loaded once."""
    return resolve_embedder("default")


def test_semantic_ranking_with_the_bundled_model(url: str, minilm: object) -> None:
    with MemoryManager(url, embedding=None) as manager:
        store = HarombeStore(manager, index={"embed": minilm, "fields": ["text"]})
        facts = {
            "pet": "Ann adopted a golden retriever puppy last weekend.",
            "trip": "Ann booked a honeymoon in Kyoto for two weeks in April.",
            "food": "Ann is allergic to peanuts and avoids satay.",
            "work": "Ann works as a structural engineer on bridges.",
        }
        for key, text in facts.items():
            store.put(("ann",), key, {"text": text})
        assert store.search(("ann",), query="what dog does she have?")[0].key == "pet"
        assert store.search(("ann",), query="where is the wedding trip?")[0].key == "trip"
        assert store.search(("ann",), query="nut allergy")[0].key == "food"
        assert store.search(("ann",), query="her job")[0].key == "work"
        ranked = store.search(("ann",), query="travel plans in Japan")
        assert ranked[0].key == "trip"
        scores = [h.score for h in ranked]
        assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]


def test_put_without_index_is_not_ranked(store: HarombeStore) -> None:
    store.put(("n",), "plain", {"text": "hiking"}, index=False)
    store.put(("n",), "indexed", {"text": "hiking"})
    hits = store.search(("n",), query="hiking")
    assert [(h.key, h.score is None) for h in hits] == [("indexed", False), ("plain", True)]


def test_without_index_a_query_is_ranked_by_the_managers_embedder(tmp_path: Path) -> None:
    """A store opened without ``index`` ranks a query with its manager's embedder; with
    ``embedding=None`` it returns items unscored, as LangGraph's stores without ``index``
    (shown on ``InMemoryStore``)."""
    from langgraph.store.memory import InMemoryStore

    values = {"pizza": {"text": "I love pizza"}, "rain": {"text": "the weather is rainy"}}
    with MemoryManager(tmp_path / "ranked.db", embedding=FakeEmbedder()) as manager:
        ranked = HarombeStore(manager)
        for key, value in values.items():
            ranked.put(("n",), key, value)
        hits = ranked.search(("n",), query="I love pizza")
        assert hits[0].key == "pizza"
        assert all(h.score is not None for h in hits)
    with MemoryManager(tmp_path / "plain.db", embedding=None) as manager:
        plain = HarombeStore(manager)
        theirs = InMemoryStore()
        for key, value in values.items():
            plain.put(("n",), key, value)
            theirs.put(("n",), key, value)
        for one in (plain, theirs):
            hits = one.search(("n",), query="I love pizza")
            assert sorted(h.key for h in hits) == ["pizza", "rain"]
            assert all(h.score is None for h in hits)


def test_a_put_is_searched_by_what_it_indexes_not_by_an_older_put(store: HarombeStore) -> None:
    """A put replaces the item's vectors: after a put with ``index=False``, or one indexing
    fewer fields, no vector of the older value is left. On purpose, unlike LangGraph's
    ``InMemoryStore`` and ``SqliteStore``, which keep the older value's vectors and go on
    ranking the item by text it no longer holds (shown here on ``InMemoryStore``)."""
    from langgraph.store.memory import InMemoryStore

    embedder = FakeEmbedder()
    fields = ["text", "title"]
    theirs = InMemoryStore(
        index={
            "embed": lambda texts: embedder.embed(list(texts)).tolist(),
            "dims": 256,
            "fields": fields,
        }
    )
    ours = HarombeStore(store.manager, index={"embed": embedder, "fields": fields})
    scores: dict[str, list[dict[str, float]]] = {}
    for name, each in (("theirs", theirs), ("ours", ours)):
        each.put(("n",), "a", {"text": "lisbon flight", "title": "travel"})
        each.put(("n",), "b", {"text": "cat food", "title": "pets"})
        each.put(("n",), "a", {"text": "dentist monday", "title": "health"}, index=False)
        each.put(("n",), "b", {"text": "dentist friday"})  # no title any more
        scores[name] = [
            {h.key: h.score or 0.0 for h in each.search(("n",), query=query)}
            for query in ("lisbon flight", "pets")
        ]
    flight, pets = scores["theirs"]
    assert flight["a"] > 0.9  # ranked by text "a" no longer holds
    assert pets["b"] > 0.9
    flight, pets = scores["ours"]
    assert max([*flight.values(), *pets.values()]) < 0.5


def test_list_namespaces(store: HarombeStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("z",)]:
        store.put(ns, "k", {"text": "v"})
    assert store.list_namespaces() == [("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("z",)]
    assert store.list_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d")]
    assert store.list_namespaces(suffix=("d",)) == [("a", "b", "d")]
    assert store.list_namespaces(prefix=("a", "*", "c")) == [("a", "b", "c")]
    assert store.list_namespaces(max_depth=1) == [("a",), ("z",)]
    assert store.list_namespaces(limit=1, offset=1) == [("a", "b", "d")]


def test_ttl_expires_and_sweeps(store: HarombeStore, clock: Clock) -> None:
    store.ttl_config = {"omit_expired": True}  # reads hide expired items before the sweep
    store.put(("t",), "short", {"text": "x"}, ttl=1)
    store.put(("t",), "long", {"text": "y"}, ttl=60)
    store.put(("t",), "forever", {"text": "z"})
    clock.now += MINUTE - 1
    assert store.get(("t",), "short", refresh_ttl=False) is not None
    clock.now += 1
    assert store.get(("t",), "short") is None
    assert [h.key for h in store.search(("t",))] == ["forever", "long"]
    assert store.list_namespaces() == [("t",)]
    assert store.sweep_ttl() == 1
    assert store.sweep_ttl() == 0
    clock.now += 60 * MINUTE
    assert store.list_namespaces() == [("t",)]
    store.delete(("t",), "forever")
    assert store.list_namespaces() == []
    assert store.sweep_ttl() == 1


def test_reads_refresh_ttl_when_asked(url: str, clock: Clock) -> None:
    with MemoryManager(url, embedding=None) as manager:
        store = HarombeStore(
            manager, ttl={"default_ttl": 10, "refresh_on_read": True, "omit_expired": True}
        )
        store.put(("r",), "a", {"v": 1})
        store.put(("r",), "b", {"v": 2})
        clock.now += 9 * MINUTE
        assert store.get(("r",), "a") is not None  # refreshed: 10 more minutes
        assert store.get(("r",), "b", refresh_ttl=False) is not None
        clock.now += 2 * MINUTE
        assert store.get(("r",), "b") is None
        assert [h.key for h in store.search(("r",))] == ["a"]  # refreshed again
        clock.now += 9 * MINUTE
        assert store.get(("r",), "a", refresh_ttl=False) is not None
        assert store.sweep_ttl() == 1


def test_ties_order_by_key_in_code_point_order(store: HarombeStore, clock: Clock) -> None:
    for key in ["b", "B", "é", "a", "Z", "10", "9"]:
        store.put(("o",), key, {"text": key})
    assert [h.key for h in store.search(("o",), limit=10)] == sorted(
        ["b", "B", "é", "a", "Z", "10", "9"]
    )
    for ns in [("o", "b"), ("o", "B"), ("o", "é"), ("o", "a")]:
        store.put(ns, "k", {"text": "v"})
    assert store.list_namespaces(prefix=("o",)) == [
        ("o",), ("o", "B"), ("o", "a"), ("o", "b"), ("o", "é")
    ]


def test_prefix_is_whole_labels(store: HarombeStore) -> None:
    store.put(("ab",), "1", {"text": "x"})
    store.put(("a", "b"), "2", {"text": "x"})
    store.put(("a",), "3", {"text": "x"})
    assert sorted(h.key for h in store.search(("a",))) == ["2", "3"]
    assert [h.key for h in store.search(("a", "b"))] == ["2"]
    assert sorted(h.key for h in store.search(())) == ["1", "2", "3"]


def test_items_persist_in_the_same_database(url: str) -> None:
    with MemoryManager(url, embedding=None) as manager:
        manager.save_message("s", {"role": "user", "content": "hello"})
        HarombeStore(manager).put(("u",), "k", {"v": 1})
    with MemoryManager(url, embedding=None) as manager:
        item = HarombeStore(manager).get(("u",), "k")
        assert item is not None
        assert item.value == {"v": 1}
        assert manager.get_messages("s")[0].content == "hello"


def test_storage_path_opens_its_own_manager(url: str) -> None:
    store = HarombeStore(storage_path=url)
    store.put(("u",), "k", {"v": [1, 2.5, None, "é"]})
    store.close()
    store = HarombeStore(storage_path=url)
    item = store.get(("u",), "k")
    store.close()
    assert item is not None
    assert item.value == {"v": [1, 2.5, None, "é"]}


def test_langchain_embeddings(url: str) -> None:
    with MemoryManager(url, embedding=None) as manager:
        store = HarombeStore(
            manager, index={"embed": DeterministicFakeEmbedding(size=32), "fields": ["text"]}
        )
        store.put(("d",), "1", {"text": "alpha"})
        store.put(("d",), "2", {"text": "beta"})
        hits = store.search(("d",), query="alpha")
        assert hits[0].key == "1"
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)


def test_manager_embedder_is_the_default(tmp_path: Path) -> None:
    with MemoryManager(
        str(tmp_path / "b.db"), embedding=FakeEmbedder(), vector_store="chroma"
    ) as manager:
        store = HarombeStore(manager)
        store.put(("d",), "1", {"text": "green tea"})
        store.put(("d",), "2", {"text": "car engines"})
        assert store.search(("d",), query="green tea")[0].key == "1"


def test_every_text_of_a_field_is_indexed(store: HarombeStore) -> None:
    store.put(("m",), "list", {"text": ["car engines", "green tea"]}, index=["text[*]"])
    store.put(("m",), "other", {"text": "volcanoes"})
    assert store.search(("m",), query="green tea")[0].key == "list"
    assert store.search(("m",), query="car engines")[0].key == "list"
    before = store.search(("m",), query="green tea")[0].score
    assert before is not None
    assert before > 0.5
    store.put(("m",), "list", {"text": "volcanoes erupting"})  # the old texts' vectors go
    after = {h.key: h.score for h in store.search(("m",), query="green tea")}
    assert max(after.values()) < before  # type: ignore[type-var]
    assert store.search(("m",), query="volcanoes erupting")[0].key == "list"


def test_bad_values_are_refused(store: HarombeStore) -> None:
    with pytest.raises(InvalidInputError, match="JSON"):
        store.put(("a",), "k", {"x": object()})
    store.put(("a",), "k", {"x": "a"})
    with pytest.raises(InvalidInputError, match="operator"):
        store.search(("a",), filter={"x": {"$regex": "a"}})
    with pytest.raises(InvalidInputError, match="NUL"):
        store.put(("a",), "k\x00", {"x": "b"})
    with pytest.raises(InvalidInputError, match="NUL"):
        store.get(("a",), "k\x00")
    assert store.get(("a",), "k").value == {"x": "a"}  # type: ignore[union-attr]
    store.put(("a",), "nul", {"x": "a\x00b"})  # inside a value it is just a character
    assert store.get(("a",), "nul").value == {"x": "a\x00b"}  # type: ignore[union-attr]


def test_a_failing_batch_changes_nothing(store: HarombeStore) -> None:
    store.put(("a",), "keep", {"text": "v"})
    with pytest.raises(InvalidInputError):
        store.batch(
            [
                PutOp(("a",), "new", {"text": "w"}),
                PutOp(("a",), "keep", None),
                SearchOp(("a",), filter={"x": {"$regex": "a"}}),
            ]
        )
    assert [h.key for h in store.search(("a",))] == ["keep"]


def test_concurrent_puts(store: HarombeStore) -> None:
    threads, per_thread = 8, 10
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(per_thread):
                store.put(("c", f"t{t}"), str(i), {"text": f"thread {t} item {i}"})
                store.put(("c",), "shared", {"text": f"thread {t}", "t": t})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    items = store.search(("c",), limit=1000)
    assert len(items) == threads * per_thread + 1
    assert len(store.list_namespaces(prefix=("c",))) == threads + 1
    shared = store.get(("c",), "shared")
    assert shared is not None
    assert shared.value == {"text": f"thread {shared.value['t']}", "t": shared.value["t"]}
    ranked = store.search(("c",), query="thread 3 item 4", limit=1000)
    assert len({(h.namespace, h.key) for h in ranked}) == len(ranked) == len(items)
    assert all(h.score is not None for h in ranked)


async def test_concurrent_async_batches(store: HarombeStore) -> None:
    async def writer(n: int) -> None:
        await store.abatch(
            [PutOp(("aio",), f"{n}-{i}", {"text": f"note {n} {i}"}) for i in range(5)]
        )

    await asyncio.gather(*(writer(n) for n in range(6)))
    assert len(await store.asearch(("aio",), limit=100)) == 30
    assert await store.alist_namespaces() == [("aio",)]
    results = await store.abatch(
        [GetOp(("aio",), "3-2"), PutOp(("aio",), "3-2", None), GetOp(("aio",), "3-2")]
    )
    assert results[0] is not None
    assert results[0].value == {"text": "note 3 2"}
    assert results[2] == results[0]  # a batch reads before it writes
    assert await store.aget(("aio",), "3-2") is None


async def test_async_twins(store: HarombeStore, clock: Clock) -> None:
    await store.aput(("a",), "k", {"text": "async tea"})
    item = await store.aget(("a",), "k")
    assert item is not None
    assert item.value == {"text": "async tea"}
    assert [h.key for h in await store.asearch(("a",), query="tea")] == ["k"]
    assert await store.alist_namespaces() == [("a",)]
    results = await store.abatch([SearchOp(("a",), query="tea"), GetOp(("a",), "missing")])
    assert results[1] is None
    await store.adelete(("a",), "k")
    assert await store.aget(("a",), "k") is None
    await store.aput(("a",), "brief", {"text": "gone soon"}, ttl=1)
    clock.now += MINUTE
    assert await store.aget(("a",), "brief") is not None  # expired, readable until swept
    assert await store.asweep_ttl() == 1
    assert await store.aget(("a",), "brief") is None


@tool
def remember(fact: str) -> str:
    """Remember a fact about the user."""
    store = get_store()
    store.put(("facts",), str(len(store.search(("facts",))) + 1), {"text": fact})
    return "saved"


def test_agent_uses_the_store(url: str) -> None:
    with MemoryManager(url, embedding=None) as manager:
        model = RecordingChatModel(
            responses=[
                AIMessage("", tool_calls=[{"name": "remember", "args": {"fact": "likes tea"},
                                           "id": "c1"}]),
                "Noted.",
            ]
        )
        agent = create_agent(model, tools=[remember], store=HarombeStore(manager))
        agent.invoke({"messages": [HumanMessage("I like tea")]})
    with MemoryManager(url, embedding=None) as manager:
        items = HarombeStore(manager).search(("facts",))
        assert [i.value for i in items] == [{"text": "likes tea"}]


def test_postgres_keeps_items_beside_the_messages(pg_url: str) -> None:
    import psycopg

    with MemoryManager(pg_url, embedding=None) as manager:
        manager.save_message("s", {"role": "user", "content": "hello"})
    with psycopg.connect(pg_url, autocommit=True) as conn:  # a database from before the store
        for table in ("checkpoint_mirror_due", "checkpoint_threads", "checkpoint_message_blobs",
                      "checkpoint_writes", "checkpoint_blobs", "checkpoints", "store_vectors",
                      "store_items", "fact_sources", "session_state", "facts", "api_keys"):
            conn.execute(f"DROP TABLE {table}")  # migrations 5, 3, 7 (user memory), 8 (keys), 9
        conn.execute("DROP FUNCTION harombe_fact_orphan()")  # migration 7
        conn.execute("ALTER TABLE harombe_writes DROP COLUMN forget_after")  # migration 4
        conn.execute("DELETE FROM harombe_schema WHERE version >= 3")
    with MemoryManager(pg_url, embedding=None) as manager:
        pg = manager.store
        assert pg.applied_migrations()[:3] == [1, 2, 3]  # type: ignore[attr-defined]
        store = HarombeStore(manager, index={"embed": FakeEmbedder(), "fields": ["text"]})
        store.put(("u",), "k", {"text": ["one", "two"]}, index=["text[*]"])
        count = "SELECT COUNT(*) FROM store_vectors"
        assert pg._read(count) == [(2,)]  # type: ignore[attr-defined]
        store.delete(("u",), "k")
        assert pg._read(count) == [(0,)]  # type: ignore[attr-defined]
        assert manager.get_messages("s")[0].content == "hello"


def test_backends_agree(tmp_path: Path, pg_url: str, clock: Clock) -> None:
    ops: list = [
        PutOp(("a", "b"), "1", {"text": "green tea with mint", "n": 3, "tags": {"x": 1}}),
        PutOp(("a", "b"), "2", {"text": "black coffee", "n": 1}, ttl=5),
        PutOp(("a", "c"), "Z", {"text": "mint ice cream", "n": 2}, index=False),
        PutOp(("a",), "é", {"text": "tea ceremony", "n": None}),
        PutOp(("z",), "k", {"text": "tea"}),
        SearchOp(("a",), query="mint tea", limit=10),
        SearchOp(("a",), filter={"n": {"$gte": 2}}, limit=10),
        SearchOp(("a",), filter={"tags": {"x": 1}}),
        SearchOp((), limit=2, offset=1),
        GetOp(("a", "b"), "2"),
        ListNamespacesOp(max_depth=1),
        ListNamespacesOp(match_conditions=(), limit=3, offset=1),
    ]
    outputs = []
    for url in (str(tmp_path / "m.db"), pg_url):
        with MemoryManager(url, embedding=None) as manager:
            store = HarombeStore(manager, index={"embed": FakeEmbedder(), "fields": ["text"]})
            store.batch(ops[:5])
            first = store.batch(ops[5:])
            clock.now += 5 * MINUTE
            store.ttl_config = {"omit_expired": True}
            later = store.batch(ops[5:])
            swept = store.sweep_ttl()
            clock.now -= 5 * MINUTE
            outputs.append((first, later, swept))
    assert outputs[0] == outputs[1]
    first, later, _ = outputs[0]
    assert [h.key for h in first[0]][:2] == ["1", "é"]
    assert first[4] is not None
    assert later[4] is None  # expired
    assert outputs[0][2] == 1


def test_postgres_batch_lost_at_commit_is_applied_once(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import contextlib

    import psycopg

    with MemoryManager(pg_url, embedding=None) as manager:
        store = HarombeStore(manager, index={"embed": FakeEmbedder(), "fields": ["text"]})
        store.put(("a",), "seen", {"text": "tea", "n": 1})
        before = store.search(("a",), query="green tea")
        pool = manager.store._pool  # type: ignore[attr-defined]
        real = pool.connection
        lost: list[bool] = []

        @contextlib.contextmanager
        def connection(*args: object, **kwargs: object) -> Iterator[object]:
            with real(*args, **kwargs) as conn:
                yield conn
            if not lost:  # the first COMMIT lands, then its acknowledgement is lost
                lost.append(True)
                raise psycopg.OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(pool, "connection", connection)
        bodies: list[bool] = []
        body = store._body

        def counted(*args: Any) -> Any:
            bodies.append(True)
            return body(*args)

        monkeypatch.setattr(store, "_body", counted)
        results = store.batch(
            [
                PutOp(("a",), "new", {"text": "green tea", "n": 2}),
                SearchOp(("a",), query="green tea"),
                GetOp(("a",), "seen"),
                ListNamespacesOp(),
            ]
        )
        assert lost == [True]
        assert bodies == [True]  # the retry found the committed result instead of re-running
        assert results == [None, before, store.get(("a",), "seen"), [("a",)]]
        assert [h.key for h in results[1]] == ["seen"]  # type: ignore[union-attr]
        assert [h.key for h in store.search(("a",), query="green tea")] == ["new", "seen"]


# beyond LangGraph's SQLite store: PostgresStore's omit_expired, and harombe's own checks ----
def _expires_at(store: HarombeStore, key: str) -> int:
    row = store._backend.run(  # type: ignore[attr-defined]
        lambda: (yield store._backend.step(  # type: ignore[attr-defined]
            "SELECT expires_at FROM store_items WHERE key = ?", (key,)
        )).rows
    )
    return int(row[0][0])


def test_omit_expired_hides_expired_rows_and_never_renews_them(
    store: HarombeStore, clock: Clock
) -> None:
    """PostgresStore's ``omit_expired`` (SqliteStore ignores it): expired rows are invisible
    before the sweep, are filtered before the page is cut, and a read never renews them."""
    store.ttl_config = {"omit_expired": True, "refresh_on_read": True}
    for key, age in [("c", 4), ("b", 3), ("expired", 2), ("a", 1)]:
        store.put(("p",), key, {"k": key}, ttl=10 if key != "expired" else 1)
        clock.now += age * 1_000_000
    clock.now += MINUTE
    assert [h.key for h in store.search(("p",), limit=2)] == ["a", "b"]
    assert [h.key for h in store.search(("p",), limit=2, offset=2)] == ["c"]
    expired_before = _expires_at(store, "expired")
    live_before = _expires_at(store, "a")
    assert store.get(("p",), "expired", refresh_ttl=True) is None
    assert "expired" not in [h.key for h in store.search(("p",), refresh_ttl=True)]
    assert _expires_at(store, "expired") == expired_before
    clock.now += 1_000_000
    assert store.get(("p",), "a", refresh_ttl=True) is not None
    assert _expires_at(store, "a") > live_before
    store.put(("gone",), "k", {"v": 1}, ttl=1)
    clock.now += MINUTE
    assert ("gone",) not in store.list_namespaces()
    store.ttl_config["omit_expired"] = False  # read live, as LangGraph's stores do
    assert ("gone",) in store.list_namespaces()


def test_sweeper_retries_a_failed_sweep_and_stops_on_close(
    url: str, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    from harombe_core.errors import StoreBusyError

    with MemoryManager(url, embedding=None) as manager:
        store = HarombeStore(manager, ttl={"default_ttl": 1, "sweep_interval_minutes": 0.005})
        real = store.sweep_ttl
        failures: list[bool] = []

        def flaky() -> int:
            if not failures:
                failures.append(True)
                raise StoreBusyError("database is locked")
            return real()

        store.sweep_ttl = flaky  # type: ignore[method-assign]
        store.put(("s",), "k", {"v": 1})
        clock.now += MINUTE
        future = store.start_ttl_sweeper()
        assert store.start_ttl_sweeper() is future  # one sweeper per store
        deadline = time.monotonic() + 30  # a bound on waiting, not a measurement
        while store.get(("s",), "k", refresh_ttl=False) is not None:
            assert time.monotonic() < deadline, "the sweeper never swept"
            time.sleep(0.05)
        assert failures == [True]
        assert "will retry" in caplog.text
        store.close()
        assert future.result(timeout=10) is None
        cancelled = store.start_ttl_sweeper()
        assert cancelled is not future
        assert cancelled.cancel()
        assert store.stop_ttl_sweeper(timeout=10)
        with pytest.raises(InvalidInputError, match="sweep_interval_minutes"):
            store.start_ttl_sweeper(-1)


def test_values_with_datetimes_are_embedded_and_filtered_as_stored(store: HarombeStore) -> None:
    """What is embedded and what filters compare with is the stored JSON, so a datetime can
    be embedded as part of the whole value (LangGraph's stores fail on it) and a datetime or
    tuple filter operand matches what was stored from one."""
    whole = HarombeStore(store.manager, index={"embed": FakeEmbedder(), "fields": ["$"]})
    at = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    whole.put(("w",), "trip", {"text": "booked a trip to Kyoto", "at": at, "pair": (1, 2)})
    whole.put(("w",), "food", {"text": "allergic to peanuts", "at": datetime(2023, 1, 1)})
    assert whole.search(("w",), query="trip to Kyoto")[0].key == "trip"
    assert [h.key for h in whole.search(("w",), filter={"at": at})] == ["trip"]
    assert [h.key for h in whole.search(("w",), filter={"pair": (1, 2)})] == ["trip"]
    assert [h.key for h in whole.search(("w",), filter={"at": {"$gt": "2024"}})] == ["trip"]


def test_filter_mistakes_are_refused_before_anything_runs(store: HarombeStore) -> None:
    mistakes: list[Any] = [{"$or": [{"a": 1}]}, {"a": {"$regex": "x"}}, {"a": {"$gt": 1, "b": 2}},
                           {"a": object()}, [("a", 1)]]
    for bad in mistakes:
        with pytest.raises(InvalidInputError):
            store.batch([PutOp(("f",), "k", {"a": 1}), SearchOp(("f",), filter=bad)])
    assert store.get(("f",), "k") is None  # refused on an empty store, and nothing written


def test_index_configuration(url: str) -> None:
    with MemoryManager(url, embedding=None) as manager:
        with pytest.raises(InvalidInputError, match="embed"):
            HarombeStore(manager, index={"fields": ["text"]})  # no embedder anywhere
        for fields in ({"fields": "text"}, {"text_fields": ["text"]}):
            store = HarombeStore(manager, index={"embed": FakeEmbedder(), **fields})
            assert store.index_config is not None
            assert store.index_config["__tokenized_fields"] == [("text", ["text"])]
        store = HarombeStore(manager, index={"embed": FakeEmbedder(), "fields": ["text"]})
        store.put(("m",), "old", {"text": "green tea"})
        other = HarombeStore(manager, index={"embed": FakeEmbedder(64), "fields": ["text"]})
        other.put(("m",), "new", {"text": "green tea"})
        hits = other.search(("m",), query="green tea")  # the old vectors cannot be compared
        assert [(h.key, h.score is None) for h in hits] == [("new", False), ("old", True)]


def test_a_filter_key_is_data_never_sql(store: HarombeStore) -> None:
    """A filter key is bound as a parameter on both backends: any key is matched as written (as
    InMemoryStore and PostgresStore do), and a key crafted as SQL matches nothing (SqliteStore
    refuses such keys with ValueError instead; docs/langchain.md)."""
    store.put(("docs",), "public", {"access": "public"})
    store.put(("docs",), "private", {"access": "private", "it's a key": "x", "a b": {"c)": 1}})
    injected = "access') = 'public' OR '1'='1' OR json_extract(value, '$."
    assert store.search(("docs",), filter={injected: "dummy"}) == []
    assert [i.key for i in store.search(("docs",), filter={"it's a key": "x"})] == ["private"]
    assert [i.key for i in store.search(("docs",), filter={"a b.c)": 1})] == ["private"]


def test_a_plain_search_reads_its_page_not_the_whole_namespace(
    tmp_path: Path, sqlite_statements: list[str]
) -> None:
    """Without a filter or query the database pages: the statement hands back `limit` rows
    (counted by running the traced SQL), however many items the namespace holds."""
    import sqlite3

    traced = sqlite_statements
    path = str(tmp_path / "m.db")
    with MemoryManager(path, embedding=None) as manager:
        store = HarombeStore(manager)
        for i in range(200):
            store.put(("memories", "u1"), f"k{i:03d}", {"text": f"memory {i}"})
        traced.clear()
        page = store.search(("memories",), limit=3, offset=5)
        assert [item.key for item in page] == ["k194", "k193", "k192"]  # newest update first
        selects = [s for s in traced if "FROM store_items" in s and s.startswith("SELECT")]
        with sqlite3.connect(path) as raw:
            assert [len(raw.execute(s).fetchall()) for s in selects] == [3]


def test_list_namespaces_reads_its_page_not_every_namespace(
    tmp_path: Path, sqlite_statements: list[str]
) -> None:
    """Without a wildcard or max_depth the database matches, sorts and pages: the statement
    hands back the page's names (counted by running the traced SQL), not all 200."""
    import sqlite3

    traced = sqlite_statements
    path = str(tmp_path / "m.db")
    with MemoryManager(path, embedding=None) as manager:
        store = HarombeStore(manager)
        for i in range(200):
            store.put(("users", f"u{i:03d}", "memories"), "k", {"text": f"memory {i}"})
        store.put(("other",), "k", {"text": "elsewhere"})
        cases = [
            ({"limit": 3, "offset": 2}, 3),
            ({"prefix": ("users",), "limit": 4}, 4),
            ({"prefix": ("users", "u150"), "suffix": ("memories",)}, 1),
            ({"prefix": ("other",)}, 1),
        ]
        for kwargs, rows in cases:
            traced.clear()
            found = store.list_namespaces(**kwargs)
            selects = [s for s in traced if "FROM store_items" in s and s.startswith("SELECT")]
            with sqlite3.connect(path) as raw:
                assert [len(raw.execute(s).fetchall()) for s in selects] == [rows], kwargs
            assert found  # and the answers themselves, against InMemoryStore below
        assert store.list_namespaces(limit=3, offset=2) == [
            ("users", "u001", "memories"),
            ("users", "u002", "memories"),
            ("users", "u003", "memories"),
        ]


def test_list_namespaces_sorts_as_tuples_like_in_memory_store(store: HarombeStore) -> None:
    """Paging in SQL keeps LangGraph's tuple order, where a shorter label comes first, even
    for labels holding characters that sort before "." (and U+0001) as text."""
    from langgraph.store.memory import InMemoryStore

    control = InMemoryStore()
    names = [("a", "b"), ("a-x",), ("a",), ("a", "b", "c"), ("a\x01b",), ("a", "\x01"), ("ab",)]
    names += [("z", "y", "x"), ("q", "y", "x"), ("q", "y")]
    for ns in names:
        store.put(ns, "k", {"text": "v"})
        control.put(ns, "k", {"text": "v"})
    for kwargs in [
        {},
        {"limit": 2, "offset": 1},
        {"limit": 3, "offset": 4},
        {"prefix": ("a",)},
        {"prefix": ("a",), "limit": 1, "offset": 1},
        {"suffix": ("y", "x")},
        {"suffix": ("*", "x")},
        {"prefix": ("*", "y")},
        {"max_depth": 1, "limit": 3},
        {"max_depth": 2, "prefix": ("q",)},
    ]:
        assert store.list_namespaces(**kwargs) == control.list_namespaces(**kwargs), kwargs


def test_filters_agree_with_in_memory_store(store: HarombeStore, clock: Clock) -> None:
    """Filters SQL says exactly (a plain field against a str or number) and those left to
    Python (paths, nested dicts, lists, bools, None) find, page by page, what the Python
    filter found before (``items.matches_filter``) on values of every type: types never mix
    (a str is not a number), a bool counts as a number as in Python, and a missing or null
    field matches nothing but equality with None. On values of one type per field,
    InMemoryStore finds the same (it raises or converts on mixed types)."""
    from langgraph.store.memory import InMemoryStore

    from harombe_core.store.items import matches_filter

    mixed: list[dict[str, Any]] = [
        {"n": 1, "s": "b"},
        {"n": 2.5, "s": "a-z"},
        {"n": True, "s": "B"},
        {"n": "2", "s": 3},
        {"n": None, "s": "é"},
        {"s": "b", "t": {"u": 1}},
        {"n": [1], "s": ["b"]},
        {"n": -7, "s": "a.b", "t": {"u": 2, "v": "x"}},
        {"n": 0, "s": "", "a.b": 1},
        {"n": 10**15, "s": "bb"},
        {"n": 5, "s": "nul\x00here", "t": "\x00"},  # PostgreSQL's jsonb would refuse these
    ]
    plain = [{"n": n, "s": s} for n, s in [(1, "b"), (2.5, "a-z"), (0, "B"), (-7, "é"), (3, "bb")]]
    filters: list[dict[str, Any]] = [
        {"s": "b"},
        {"n": 1},
        {"n": 2.5},
        {"n": 0},
        {"n": "2"},
        {"n": None},
        {"n": {"$gt": 0}},
        {"n": {"$gte": 1, "$lt": 3}},
        {"n": {"$lte": 0}},
        {"n": {"$ne": 1}},
        {"s": {"$ne": "b"}},
        {"s": {"$gt": "a"}},
        {"s": {"$lt": "b"}},
        {"s": {"$gte": "b", "$lte": "bb"}},
        {"s": {"$eq": "é"}},
        {"n": {"$gt": 0}, "s": {"$ne": "B"}},
        {"t.u": 1},
        {"t": {"u": 2}},
        {"a.b": 1},
        {"n": {"$gt": 0}, "t.v": "x"},
        {"s": ["b"]},
        {"n": True},
        {"missing": {"$ne": "x"}},
        {"s": "nul\x00here"},
        {"t": {"$ne": "x"}},
    ]
    control = InMemoryStore()
    for prefix, values in [("mixed", mixed), ("plain", plain)]:
        for i, value in enumerate(values):
            clock.now += 1
            store.put((prefix,), f"k{i}", value)
            control.put((prefix,), f"k{i}", value)
        newest_first = [f"k{i}" for i in reversed(range(len(values)))]
        for flt in filters:
            want = [k for k in newest_first if matches_filter(values[int(k[1:])], flt)]
            for limit, offset in [(20, 0), (2, 1), (1, 3)]:
                got = store.search((prefix,), filter=flt, limit=limit, offset=offset)
                assert [i.key for i in got] == want[offset : offset + limit], (prefix, flt)
            ordered_text = any(  # InMemoryStore orders with float(): numbers only
                isinstance(w, dict) and set(w) - {"$eq", "$ne"} and k == "s" for k, w in flt.items()
            )
            if prefix == "plain" and set(flt) <= {"n", "s"} and not ordered_text:
                found = control.search((prefix,), filter=flt, limit=20)
                assert sorted(i.key for i in found) == sorted(want), flt


def test_a_filtered_search_reads_its_page_not_the_whole_namespace(
    tmp_path: Path, sqlite_statements: list[str]
) -> None:
    """A filter SQL says exactly is in the WHERE clause and the database pages: the traced
    statement hands back `limit` rows of 200; a dotted path still reads the prefix."""
    import sqlite3

    traced = sqlite_statements
    path = str(tmp_path / "m.db")
    with MemoryManager(path, embedding=None) as manager:
        store = HarombeStore(manager)
        for i in range(200):
            store.put(("m", "u1"), f"k{i:03d}", {"kind": "even" if i % 2 == 0 else "odd", "i": i})
        for flt, rows, found in [
            ({"kind": "even"}, 3, 3),
            ({"kind": "odd", "i": {"$gte": 100}}, 3, 3),
            ({"i": {"$lt": 2}}, 1, 1),
            ({"kind.x": "even"}, 200, 0),  # a dotted path: Python resolves it, on every row
        ]:
            traced.clear()
            page = store.search(("m",), filter=flt, limit=3, offset=1)
            selects = [s for s in traced if "FROM store_items" in s and s.startswith("SELECT")]
            with sqlite3.connect(path) as raw:
                assert [len(raw.execute(s).fetchall()) for s in selects] == [rows], flt
            assert len(page) == found, flt
        assert [i.key for i in store.search(("m",), filter={"kind": "even"}, limit=2)] == [
            "k198",
            "k196",
        ]


def test_every_backend_pages_a_filtered_search_in_sql(store: HarombeStore) -> None:
    """On SQLite and PostgreSQL alike, the statement a filtered search (or a namespace
    listing) runs hands back its page: each SELECT is replayed and its rows counted."""
    from harombe_core.store.sql_body import Step

    backend: Any = store._backend  # type: ignore[attr-defined]
    for i in range(60):
        store.put(("m", f"u{i:02d}"), "k", {"kind": "even" if i % 2 == 0 else "odd", "i": i})
    steps: list[Step] = []
    step = backend.step

    def recording(sql: str, params: Any = ()) -> Step:
        made: Step = step(sql, params)
        if sql.startswith("SELECT namespace") and "FROM store_items" in sql:
            steps.append(made)  # (PostgreSQL's probe for a stored NUL, SELECT 1, reads none)
        return made

    def rows_of(made: Step) -> Any:
        return len((yield made).rows)

    backend.step = recording
    try:
        for run, rows in [
            (lambda: store.search(("m",), filter={"kind": "even"}, limit=4), 4),
            (lambda: store.search(("m",), filter={"kind": {"$ne": "even"}}, limit=4), 4),
            (lambda: store.search(("m",), filter={"i": {"$gte": 10, "$lt": 12}}), 2),
            (lambda: store.list_namespaces(prefix=("m",), limit=5, offset=1), 5),
        ]:
            steps.clear()
            run()
            assert [backend.read(lambda s=s: rows_of(s)) for s in steps] == [rows]
    finally:
        del backend.step


def _made_by_unknown_models(store: HarombeStore) -> None:
    """What vectors written before the model was recorded look like: no model."""

    def body() -> Any:
        yield store._backend.step("UPDATE store_vectors SET model = NULL")

    store._backend.run(body)


def test_vectors_of_another_model_are_never_ranked_and_reindex_embeds_them_again(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Item vectors record the model that made them. Reopened with another model of the same
    dimension, a search by meaning leaves the older model's items out of the ranking (they
    follow unscored; one warning says so) instead of scoring queries against vectors of
    another space; ``reindex`` embeds them again with the current model, and they rank.
    Vectors written before models were recorded (model unknown) are still ranked, as they were
    before the model was recorded (an upgrade loses no search by meaning); ``reindex`` embeds
    them again too, for a model changed with the upgrade.

    LangGraph's ``InMemoryStore`` keeps the vectors its items were put with and records no
    model either: given another model it goes on scoring new queries against the old vectors
    (shown at the end). Its items live only as long as the object, so it meets this only when
    its ``embeddings`` are swapped; a database-backed store meets it on every reopening."""
    from langgraph.store.memory import InMemoryStore

    old, new = FakeEmbedder(), FakeEmbedder(ngram=4)  # same dimension, other vectors
    assert old.dimension == new.dimension
    assert old.name != new.name
    with MemoryManager(url, embedding=None) as manager:
        before = HarombeStore(manager, index={"embed": old, "fields": ["text"]})
        before.put(("m",), "trip", {"text": "lisbon flight"})
        before.put(("m",), "pet", {"text": ["cat food", "dog walk"]}, index=["text[*]"])
        after = HarombeStore(manager, index={"embed": new, "fields": ["text"]})
        after.put(("m",), "fresh", {"text": "green tea"})
        with caplog.at_level("WARNING", logger="langchain_harombe.store"):
            hits = after.search(("m",), query="lisbon flight")
            after.search(("m",), query="cat food")
        assert [(h.key, h.score is None) for h in hits] == [
            ("fresh", False),
            ("pet", True),
            ("trip", True),
        ]
        warned = [r for r in caplog.records if "reindex" in r.getMessage()]
        assert len(warned) == 1
        assert "2 item(s)" in warned[0].getMessage()
        assert after.reindex(batch_size=1) == 2
        assert after.reindex() == 0
        hits = after.search(("m",), query="lisbon flight")
        assert hits[0].key == "trip"
        assert all(h.score is not None for h in hits)
        assert after.search(("m",), query="dog walk")[0].key == "pet"  # every text again

        _made_by_unknown_models(after)
        caplog.clear()
        with caplog.at_level("WARNING", logger="langchain_harombe.store"):
            unknown = after.search(("m",), query="green tea")
        assert unknown[0].key == "fresh"
        assert all(h.score is not None for h in unknown)
        assert not [r for r in caplog.records if "reindex" in r.getMessage()]
        assert asyncio.run(after.areindex()) == 3
        hits = asyncio.run(after.asearch(("m",), query="green tea"))
        assert hits[0].key == "fresh"
        assert all(h.score is not None for h in hits)
        with pytest.raises(InvalidInputError, match="index"):
            HarombeStore(manager).reindex()

    theirs = InMemoryStore(
        index={"embed": lambda t: old.embed(list(t)).tolist(), "dims": 256, "fields": ["text"]}
    )
    theirs.put(("m",), "trip", {"text": "lisbon flight"})
    theirs.embeddings = ensure_embeddings(lambda t: new.embed(list(t)).tolist())
    assert theirs.search(("m",), query="green tea")[0].score is not None  # old vectors scored


def test_an_embed_function_is_recorded_by_its_name() -> None:
    """``embed`` functions are told apart by their names (LangGraph wraps every one in the same
    ``EmbeddingsLambda`` class), so switching function is seen as switching model."""

    def one(texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    async def two(texts: list[str]) -> list[list[float]]:
        return [[0.0, 1.0] for _ in texts]

    with MemoryManager(":memory:", embedding=None) as manager:
        names = {
            HarombeStore(manager, index={"embed": f, "dims": 2})._embedder.name for f in (one, two)
        }
    assert len(names) == 2
