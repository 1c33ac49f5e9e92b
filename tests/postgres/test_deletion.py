"""Deletion on every backend (SQLite in memory and on disk, PostgreSQL with pgvector and its
tsvector keyword index): a deleted message's words are found by no search, not through the
next message either, whose keyword entry and vector held the turn it answers; a summary that
covered it is dropped; ``forget_user`` removes all of a user and nothing of anyone else."""

from __future__ import annotations

import psycopg

from harombe_core import MemoryConfig, MemoryManager, Message
from harombe_core.store import ops
from harombe_core.store.pg_server import EmbeddedPostgres
from harombe_core.testing import FakeEmbedder
from tests.reliability.test_deletion import files_holding, token


def test_a_deleted_message_is_found_through_no_neighbour(backend_url: str) -> None:
    secret, control = token(), token()
    vector_store = "pgvector" if backend_url.startswith("postgresql") else "chroma"
    # Each message embedded with the turn it answers, so the answer's vector holds the secret.
    config = MemoryConfig(vector_store={"embed_context": True})
    with MemoryManager(
        backend_url, embedding=FakeEmbedder(), vector_store=vector_store, config=config
    ) as mm:
        ids = mm.save_messages(
            "chat",
            [
                Message(role="user", content="what should I keep safe"),
                Message(role="user", content=f"my password is {secret}"),
                Message(role="assistant", content=f"understood, I keep it safe {control}"),
            ],
        )
        mm.flush()
        mm.store.run(
            ops.update_session("chat", summary=f"password {secret}", summary_until_id=ids[2])
        )
        assert {h.message.id for h in mm.store.keyword_search(secret, limit=5)} == set(ids[1:])
        vector_before = mm._semantic.vectors_for([ids[2]])[ids[2]]
        mm.replace_messages("chat", [ids[1]])
        assert mm.store.keyword_search(secret, limit=5) == []
        assert all(secret not in h.message.content for h in mm.search(secret, top_k=10))
        assert mm.get_session("chat").summary is None  # it covered the deleted message
        mm.flush()  # the answer is embedded again, from its new previous turn
        vector_after = mm._semantic.vectors_for([ids[2]])[ids[2]]
        assert (vector_before != vector_after).any()
        assert mm.store.keyword_search(control, limit=5)[0].message.id == ids[2]


def test_forget_user_removes_only_that_user(backend_url: str) -> None:
    with MemoryManager(backend_url, embedding=None) as mm:
        for n in range(3):
            mm.save_message(f"ann{n}", Message(role="user", content=f"ann {n}"), user_id="ann")
        mm.save_message("bob", Message(role="user", content="bob's"), user_id="bob")
        mm.save_message("none", Message(role="user", content="nobody's"))
        assert mm.forget_user("ann") == 3
        assert mm.list_sessions(user_id="ann") == []
        assert {s.id for s in mm.list_sessions(limit=None)} == {"bob", "none"}
        assert mm.forget_user("ann") == 0


def test_vacuum_full_as_the_deletion_page_says_leaves_no_byte_of_a_forgotten_user(
    pg_server: EmbeddedPostgres, pg_url: str
) -> None:
    # Plain VACUUM only marks dead rows' space reusable: their bytes stay in the tables' and
    # the keyword indexes' files until overwritten. docs/deletion.md says VACUUM FULL.
    secret, control = token(), token()
    with MemoryManager(pg_url, embedding=FakeEmbedder(), vector_store="pgvector") as mm:
        mm.create_session(session_id="s", user_id="ann", metadata={"note": secret})
        mm.save_messages("s", [Message(role="user", content=f"my pin is {secret}")] * 3)
        mm.add_fact("ann", f"ann's pin is {secret}")
        mm.save_message("keep", Message(role="user", content=f"the code is {control}"))
        mm.flush()
        mm.forget_user("ann")
    with psycopg.connect(pg_url, autocommit=True) as raw:
        row = raw.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
        oid = row.fetchone()[0]  # type: ignore[index]
        raw.execute("VACUUM FULL")
        raw.execute("CHECKPOINT")
    folder = pg_server.base / "data" / "base" / str(oid)
    assert files_holding(folder, control)  # the scan reads the database's files
    assert files_holding(folder, secret) == []
