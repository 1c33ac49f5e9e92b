"""Vectors in PostgreSQL (pgvector) beside the messages, on the real server of the test session.

What is proven here: a ``postgresql://`` MemoryManager with semantic memory keeps its vectors in
the same database (they survive a restart, with nothing to re-embed); the ``message_vectors``
table comes from a schema migration and carries a cosine HNSW index; a scoped vector search is a
single SQL statement joining vectors, messages and sessions, so scope isolation is enforced by
the database itself; upserts are idempotent; reindex rebuilds everything, also for a new model.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harombe_core.errors import InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.store.base import SearchScope
from harombe_core.store.postgres import PostgresStore
from harombe_core.testing import FakeEmbedder
from harombe_core.vectors.base import VectorIndex, scope_metadata_filter
from harombe_core.vectors.pgvector import PgVectorIndex, where_sql

DIM = 32
#: Managers use a wider hashing embedder, so unrelated texts stay near orthogonal.
MDIM = 256
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStore]:
    s = PostgresStore(pg_url)
    yield s
    s.close()


def _fill(store: PostgresStore, n: int, sessions: int = 6, users: int = 3) -> list[int]:
    """``n`` messages spread over sessions ``s0..`` owned by users ``u0..``; returns their ids.

    Message ``i`` (0-based) is in session ``s{i % sessions}``, alternates user/assistant and
    was created ``i`` minutes after T0.
    """
    ids: list[int] = []
    for i in range(n):
        sid = f"s{i % sessions}"
        user = f"u{(i % sessions) % users}"
        message = Message(
            role="user" if i % 2 == 0 else "assistant",
            content=f"message {i}",
            created_at=T0 + timedelta(minutes=i),
            token_count=3,
        )
        ids += store.run(ops.add_messages(sid, [message], user_id=user))
    return ids


def _in_scope(store: PostgresStore, ids: list[int], scope: SearchScope) -> set[int]:
    return {int(m.id or 0) for m in store.run(ops.get_messages_by_ids(ids, scope))}


# the protocol ---------------------------------------------------------------------------------
def test_implements_protocol_and_schema_has_cosine_hnsw(store: PostgresStore) -> None:
    index = PgVectorIndex(store)
    assert isinstance(index, VectorIndex)
    assert store.applied_migrations()[:2] == [1, 2]  # the vectors table came by migration
    ids = _fill(store, 4)
    index.upsert(ids, _unit(np.random.default_rng(0), 4), [{}] * 4)
    definitions = [
        r[0]
        for r in store._read(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'message_vectors'"
        )
    ]
    hnsw = [d for d in definitions if "USING hnsw" in d]
    assert len(hnsw) == 1
    assert "vector_cosine_ops" in hnsw[0]
    assert f"vector({DIM})" in hnsw[0]


def test_nearest_is_the_vector_itself(store: PostgresStore) -> None:
    index = PgVectorIndex(store)
    ids = _fill(store, 30)
    vectors = _unit(np.random.default_rng(1), 30)
    index.upsert(ids, vectors, [{}] * 30)
    matches = index.query(vectors[6], 3)
    assert matches[0].message_id == ids[6]
    assert matches[0].similarity == pytest.approx(1.0, abs=1e-5)
    assert matches[0].similarity >= matches[1].similarity >= matches[2].similarity
    got = index.get_vectors([ids[3], 10**9])
    assert list(got) == [ids[3]]
    np.testing.assert_array_equal(got[ids[3]], vectors[3])  # float32 round-trips exactly


def test_upsert_is_idempotent_and_sets_the_embedded_flag(store: PostgresStore) -> None:
    index = PgVectorIndex(store)
    ids = _fill(store, 10)
    vectors = _unit(np.random.default_rng(2), 10)
    assert len(store.run(ops.pending_embeddings(100))) == 10
    for _ in range(3):
        index.upsert(ids, vectors, [{}] * 10)
    assert index.count() == 10
    assert store.run(ops.pending_embeddings(100)) == []
    replacement = _unit(np.random.default_rng(3), 1)
    index.upsert([ids[4]], replacement, [{}])
    assert index.count() == 10
    assert index.query(replacement[0], 1)[0].message_id == ids[4]
    # A vector for a message that does not exist (deleted meanwhile) is skipped, not an error.
    index.upsert([10**9], replacement, [{}])
    assert index.count() == 10


def test_where_filters_by_scope(store: PostgresStore) -> None:
    index = PgVectorIndex(store)
    ids = _fill(store, 30)
    vectors = _unit(np.random.default_rng(4), 30)
    index.upsert(ids, vectors, [{}] * 30)
    found = index.query(vectors[0], 30, {"session_id": "s1"})
    assert sorted(m.message_id for m in found) == [ids[i] for i in range(30) if i % 6 == 1]
    found = index.query(vectors[0], 30, {"user_id": "u0", "role": {"$in": ["user"]}})
    expected = [ids[i] for i in range(30) if (i % 6) % 3 == 0 and i % 2 == 0]
    assert sorted(m.message_id for m in found) == expected
    micros = [int((T0 + timedelta(minutes=m)).timestamp() * 1_000_000) for m in (5, 9)]
    found = index.query(vectors[0], 30, {"created_at": {"$gte": micros[0], "$lte": micros[1]}})
    assert sorted(m.message_id for m in found) == ids[5:10]
    with pytest.raises(InvalidInputError, match="cannot filter vectors by 'topic'"):
        index.query(vectors[0], 3, {"topic": "x"})
    with pytest.raises(InvalidInputError, match="unknown filter operator"):
        index.query(vectors[0], 3, {"role": {"$regex": "u.*"}})


def test_delete_delete_where_and_clear_keep_the_flags_honest(store: PostgresStore) -> None:
    index = PgVectorIndex(store)
    ids = _fill(store, 12)
    vectors = _unit(np.random.default_rng(5), 12)
    index.upsert(ids, vectors, [{}] * 12)
    index.delete(ids[:2])
    assert index.count() == 10
    assert [m.id for m, _ in store.run(ops.pending_embeddings(100))] == ids[:2]
    index.delete_where({"session_id": "s2"})
    gone = [ids[i] for i in range(2, 12) if i % 6 == 2]
    assert index.count() == 10 - len(gone)
    assert {m.id for m, _ in store.run(ops.pending_embeddings(100))} == {*ids[:2], *gone}
    index.clear()
    assert index.count() == 0
    assert index.query(vectors[0], 5) == []
    assert len(store.run(ops.pending_embeddings(100))) == 12


def test_deleting_messages_removes_their_vectors(store: PostgresStore) -> None:
    index = PgVectorIndex(store)
    ids = _fill(store, 12)
    index.upsert(ids, _unit(np.random.default_rng(6), 12), [{}] * 12)
    assert store.run(ops.delete_session("s0"))
    store.run(ops.clear_session("s1"))
    assert index.count() == 8  # ON DELETE CASCADE, in the same transaction as the rows


# one SQL statement ----------------------------------------------------------------------------
def test_a_scoped_search_is_one_sql_statement_with_the_scope_in_its_where(
    store: PostgresStore,
) -> None:
    index = PgVectorIndex(store)
    scope = SearchScope(user_id="u1", session_id="s1", roles=("user",), since=T0, until=T0)
    body = index._query_body("[" + ",".join(["0.5"] * DIM) + "]", DIM, 5,
                             scope_metadata_filter(scope))
    statements = []
    step = next(body)
    try:
        while True:
            statements.append(step.sql)
            step = body.send(type("R", (), {"rows": [], "rowcount": 0})())  # type: ignore[arg-type]
    except StopIteration:
        pass
    queries = [s for s in statements if not s.startswith("SET LOCAL")]
    assert len(queries) == 1
    sql = queries[0]
    assert "JOIN messages m" in sql
    assert "JOIN sessions s" in sql
    where = sql.split(" WHERE ", 1)[1]
    for condition in ("s.user_id = %s", "m.session_id = %s", "m.role = ANY(%s)",
                      "m.created_at >= %s", "m.created_at <= %s"):
        assert condition in where
    fragment, params = where_sql(scope_metadata_filter(scope))
    assert "u1" in params
    assert "s1" in params
    assert "u1" not in fragment


def test_large_unscoped_search_uses_the_hnsw_index(store: PostgresStore) -> None:
    index = PgVectorIndex(store)
    rng = np.random.default_rng(7)
    # Bulk rows straight into the tables, so the planner has something worth an index for.
    store._read(
        "INSERT INTO sessions (id, user_id, created_at, updated_at) "
        "SELECT 'b' || g, 'bu' || mod(g, 10), 0, 0 FROM generate_series(1, 20) g"
    )
    ids = [
        int(r[0])
        for r in store._read(
            "INSERT INTO messages (session_id, role, content, created_at, token_count, fts) "
            "SELECT 'b' || (1 + mod(g, 20)), 'user', 'bulk ' || g, g, 2, ''::tsvector "
            "FROM generate_series(1, 3000) g RETURNING id"
        )
    ]
    vectors = _unit(rng, len(ids))
    for start in range(0, len(ids), 1000):
        index.upsert(ids[start:start + 1000], vectors[start:start + 1000], [{}] * 1000)
    store._read("ANALYZE message_vectors")
    literal = "[" + ",".join(repr(float(x)) for x in vectors[0]) + "]"
    plan = "\n".join(
        r[0]
        for r in store._read(
            f"EXPLAIN SELECT v.message_id FROM message_vectors v WHERE v.dimension = {DIM} "
            f"ORDER BY v.embedding::vector({DIM}) <=> %s::vector({DIM}) LIMIT 10",
            (literal,),
        )
    )
    assert f"message_vectors_hnsw_{DIM}" in plan
    assert index.query(vectors[0], 1)[0].message_id == ids[0]
    # Scoped through the HNSW index with iterative scan: every hit is in scope, k are found,
    # and they agree with exact search over the scope.
    scope = {"user_id": "bu3"}
    in_scope = [
        int(r[0])
        for r in store._read(
            "SELECT m.id FROM messages m JOIN sessions s ON s.id = m.session_id "
            "WHERE s.user_id = 'bu3' ORDER BY m.id"
        )
    ]
    position = {mid: n for n, mid in enumerate(ids)}
    recall = []
    for q in rng.choice(len(ids), size=10, replace=False):
        found = [m.message_id for m in index.query(vectors[q], 10, scope)]
        assert len(found) == 10
        assert set(found) <= set(in_scope)
        sims = vectors[[position[i] for i in in_scope]] @ vectors[q]
        exact = {in_scope[i] for i in np.argsort(-sims)[:10]}
        recall.append(len(exact & set(found)) / 10)
    assert np.mean(recall) >= 0.9


# through MemoryManager ------------------------------------------------------------------------
def test_manager_on_postgres_keeps_vectors_in_postgres_across_reopen(pg_url: str) -> None:
    with MemoryManager(pg_url, embedding=FakeEmbedder(MDIM)) as mm:
        assert isinstance(mm._semantic.index, PgVectorIndex)
        sid = mm.create_session(user_id="ann")
        mm.save_messages(sid, [
            Message(role="user", content="We booked a cabin near the lake for July"),
            Message(role="assistant", content="Great, the lake cabin is booked"),
            Message(role="user", content="My sister plays the cello in an orchestra"),
        ])
        mm.flush()
        assert mm.stats()["pending_embeddings"] == 0
    embedder = FakeEmbedder(MDIM)
    with MemoryManager(pg_url, embedding=embedder) as mm:
        assert mm._semantic.index.count() == 3
        mm.flush()
        assert embedder.texts_embedded == 0  # nothing was lost, so nothing is embedded again
        hits = mm.search("cello orchestra", top_k=1, user_id="ann", keyword_weight=0.0)
        assert hits[0].message.content.startswith("My sister plays the cello")
        assert hits[0].vector_score is not None
        assert hits[0].vector_score > 0.3
        assert mm.search("cello orchestra", top_k=3, user_id="bob") == []


def test_explicit_pgvector_and_typed_error_on_sqlite(pg_url: str, db_path: str) -> None:
    with MemoryManager(pg_url, embedding=FakeEmbedder(MDIM), vector_store="pgvector") as mm:
        assert mm._semantic.index.name.startswith("pgvector postgresql://")
    with pytest.raises(InvalidInputError, match="needs a PostgresStore"):
        MemoryManager(db_path, embedding=FakeEmbedder(MDIM), vector_store="pgvector")


def test_scoped_search_on_postgres_matches_the_scope(pg_url: str) -> None:
    with MemoryManager(pg_url, embedding=FakeEmbedder(MDIM)) as mm:
        for user in ("ann", "bob"):
            for topic in ("sailing", "baking"):
                sid = f"{user}-{topic}"
                mm.create_session(session_id=sid, user_id=user)
                mm.save_messages(sid, [
                    Message(role="user", content=f"{user} asks about {topic} tips"),
                    Message(role="assistant", content=f"Here are {topic} tips for {user}"),
                ])
        mm.flush()
        hits = mm.search("sailing tips", top_k=10, user_id="ann")
        assert hits
        assert {h.message.session_id for h in hits} <= {"ann-sailing", "ann-baking"}
        assert hits[0].message.session_id == "ann-sailing"
        hits = mm.search("tips", top_k=10, session_id="bob-baking", roles=["assistant"])
        assert [h.message.content for h in hits] == ["Here are baking tips for bob"]


async def test_async_search_on_postgres(pg_url: str) -> None:
    async with MemoryManager(pg_url, embedding=FakeEmbedder(MDIM)) as mm:
        sid = await mm.acreate_session(user_id="ann")
        await mm.asave_messages(sid, [Message(role="user", content="the blue kayak leaks")])
        await mm.aflush()
        hits = await mm.asearch("kayak", top_k=1, user_id="ann")
        assert hits[0].message.content == "the blue kayak leaks"
        index = mm._semantic.index
        vector = mm._semantic.embed_query("blue kayak")
        matches = await index.aquery(vector, 3, {"user_id": "ann"})
        assert [m.message_id for m in matches] == [hits[0].message.id]


def test_isolation_fifty_users_thousand_random_scoped_queries(pg_url: str) -> None:
    """50 users x 2 sessions; 1,000 random scoped searches, at the manager and the index."""
    words = ["trip", "budget", "dentist", "garden", "piano", "invoice", "recipe", "flight",
             "meeting", "birthday", "tax", "car", "movie", "doctor", "coffee", "hiking"]
    rng = random.Random(11)
    with MemoryManager(pg_url, embedding=FakeEmbedder(MDIM)) as mm:
        owner: dict[str, str] = {}
        for u in range(50):
            for n in range(2):
                sid = f"u{u}-s{n}"
                owner[sid] = f"u{u}"
                mm.create_session(session_id=sid, user_id=f"u{u}")
                mm.save_messages(sid, [
                    Message(role="user" if k % 2 == 0 else "assistant",
                            content=" ".join(rng.choices(words, k=5)))
                    for k in range(4)
                ])
        mm.flush()
        semantic = mm._semantic
        assert semantic.index.count() == 400
        leaks = returned = 0
        for _ in range(1000):
            query = " ".join(rng.choices(words, k=2))
            if rng.random() < 0.5:
                user, sid = f"u{rng.randrange(50)}", None
            else:
                sid, user = f"u{rng.randrange(50)}-s{rng.randrange(2)}", None
            hits = mm.search(query, top_k=8, user_id=user, session_id=sid)
            # Below the store's re-check: the database alone must keep the index in scope.
            matches = semantic.index.query(
                semantic.embed_query(query), 8,
                scope_metadata_filter(SearchScope(user_id=user, session_id=sid)),
            )
            sessions = [h.message.session_id for h in hits]
            sessions += [
                m.session_id
                for m in mm.store.run(ops.get_messages_by_ids([m.message_id for m in matches]))
            ]
            returned += len(sessions)
            for s in sessions:
                assert s is not None
                if (sid is not None and s != sid) or (user is not None and owner[s] != user):
                    leaks += 1
        assert returned > 4000  # the queries really returned things
        assert leaks == 0


def test_reindex_rebuilds_and_switches_model(pg_url: str) -> None:
    with MemoryManager(pg_url, embedding=FakeEmbedder(MDIM)) as mm:
        sid = mm.create_session(user_id="ann")
        mm.save_messages(sid, [Message(role="user", content=f"note {i} about rivers")
                               for i in range(20)])
        mm.flush()
        first = mm.reindex(progress=False)
        again = mm.reindex(progress=False)
        assert first["vectors"] == again["vectors"] == 20
        assert mm._semantic.index.count() == 20
        bigger = FakeEmbedder(48)
        result = mm.reindex(embedding=bigger, progress=False)
        assert result["vectors"] == 20
        dims = mm.store._read("SELECT DISTINCT dimension FROM message_vectors")
        assert dims == [(48,)]
        assert mm.search("rivers", top_k=3, user_id="ann", keyword_weight=0.0)
    # The new model is recorded: reopening with it needs no re-embedding.
    with MemoryManager(pg_url, embedding=FakeEmbedder(48)) as mm:
        assert mm.stats()["pending_embeddings"] == 0
        assert mm.search("rivers", top_k=1, user_id="ann", keyword_weight=0.0)


class _SlowEmbedder(FakeEmbedder):
    """Keeps the background worker busy, so a reindex starts while it is mid-batch."""

    def embed(self, texts: Any) -> Any:
        time.sleep(0.02)
        return super().embed(texts)


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_switching_model_while_the_old_worker_is_busy_leaves_one_model(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The old model's worker is stopped before the new one re-embeds: no stray vectors."""
    url = request.getfixturevalue("pg_url") if backend == "postgres" else str(tmp_path / "m.db")
    with MemoryManager(url, embedding=_SlowEmbedder(16)) as mm:
        mm.save_messages("s", [Message(role="user", content=f"note {i}") for i in range(300)])
        assert mm.stats()["pending_embeddings"] > 0  # the old worker is still at it
        result = mm.reindex(embedding=FakeEmbedder(24), progress=False)
        assert result["vectors"] == 300
        if backend == "postgres":
            sizes = mm.store._read("SELECT DISTINCT dimension FROM message_vectors")
            assert sizes == [(24,)]
        else:
            sizes = mm.store._read("SELECT DISTINCT length(vector) FROM message_vectors")
            assert sizes == [(24 * 4,)]
        assert mm.stats()["pending_embeddings"] == 0
