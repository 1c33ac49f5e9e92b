"""The in-database vector index, the default for SQLite: exact answers on every path, in step
with writes and deletes from this process and others, and no ChromaDB anywhere."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store.base import SearchScope
from harombe_core.testing import FakeEmbedder


def _exact(mm: MemoryManager, query: np.ndarray, k: int, scope: SearchScope | None) -> list:
    """What a full read of the stored vectors gives (the reference)."""
    return mm._semantic.stored.exact_search(query, k, scope)


def _assert_same(got: list, want: list) -> None:
    """The same ranking, up to the order of equal similarities (ties)."""
    assert np.allclose([m.similarity for m in got], [m.similarity for m in want], atol=1e-6)
    last = want[-1].similarity if want else 0.0
    assert {m.message_id for m in got if m.similarity > last + 1e-6} == {
        m.message_id for m in want if m.similarity > last + 1e-6
    }


def _fill(mm: MemoryManager, sessions: int, per: int, start: datetime) -> None:
    for s in range(sessions):
        sid = mm.create_session(session_id=f"s{s}", user_id=f"u{s % 3}")
        mm.save_messages(
            sid,
            [
                Message(
                    role="user" if i % 2 else "assistant",
                    content=f"session {s} note {i} about topic{(s * per + i) % 23}",
                    created_at=start + timedelta(minutes=s * per + i),
                )
                for i in range(per)
            ],
        )


def test_default_on_sqlite_is_the_database_and_never_imports_chromadb(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        from harombe_core import MemoryManager, Message
        from harombe_core.testing import FakeEmbedder
        with MemoryManager({str(tmp_path / "m.db")!r}, embedding=FakeEmbedder()) as mm:
            mm.save_message("s", Message(role="user", content="hello there"))
            mm.flush()
            assert mm.search_similar("hello", top_k=1)[0].content == "hello there"
            assert mm.search_similar("hello", top_k=1, session_id="s")
            assert "vector_store='database'" in repr(mm)
        assert "chromadb" not in sys.modules
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    assert sorted(p.name for p in tmp_path.iterdir() if "chroma" in p.name) == []


def test_every_search_path_is_exact(tmp_path: Path) -> None:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    with MemoryManager(str(tmp_path / "m.db"), embedding=FakeEmbedder()) as mm:
        _fill(mm, sessions=12, per=40, start=start)
        mm.flush()
        semantic = mm._semantic
        assert semantic.in_database
        assert semantic.index is None
        rng = np.random.default_rng(3)
        scopes = [
            None,
            SearchScope(user_id="u1"),
            SearchScope(session_id="s4"),
            SearchScope(exclude_session_id="s0"),
            SearchScope(roles=("assistant",)),
            SearchScope(since=start + timedelta(minutes=100), until=start + timedelta(minutes=300)),
        ]
        for limit in (semantic.matrix_scope_limit, 0):  # 0: a user's scope by the matrix too
            semantic.matrix_scope_limit = limit
            for _ in range(5):
                query = rng.standard_normal(semantic.embedder.dimension).astype(np.float32)
                for scope in scopes:
                    _assert_same(semantic.nearest(query, 7, scope), _exact(mm, query, 7, scope))


def test_searches_across_users_follow_writes_and_deletes_of_another_process(
    tmp_path: Path,
) -> None:
    db = tmp_path / "m.db"
    with MemoryManager(str(db), embedding=FakeEmbedder()) as mm:
        _fill(mm, sessions=4, per=10, start=datetime(2024, 1, 1, tzinfo=UTC))
        mm.flush()
        assert mm.search_similar("topic3", top_k=3)  # the matrix is loaded here
        other = textwrap.dedent(
            f"""
            from harombe_core import MemoryManager, Message
            from harombe_core.testing import FakeEmbedder
            with MemoryManager({str(db)!r}, embedding=FakeEmbedder()) as mm:
                mm.delete_session("s1")
                sid = mm.create_session(session_id="late", user_id="u9")
                mm.save_messages(sid, [Message(role="user", content=f"zebra crossing {{i}}")
                                       for i in range(5)])
                mm.flush()
            """
        )
        subprocess.run([sys.executable, "-c", other], check=True, timeout=300)
        found = mm.search_similar("zebra crossing", top_k=5)
        assert sorted(m.content for m in found) == [f"zebra crossing {i}" for i in range(5)]
        everything = mm.search_similar("session note about", top_k=100)
        assert len(everything) == 35  # 3 sessions of 10 left, and the 5 new ones
        assert not any(m.session_id == "s1" for m in everything)
        query = mm._semantic.embed_query("session 2 note")
        _assert_same(mm._semantic.nearest(query, 10, None), _exact(mm, query, 10, None))


def test_reindex_with_another_model_rebuilds_the_stored_vectors(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    with MemoryManager(db, embedding=FakeEmbedder(64)) as mm:
        _fill(mm, sessions=2, per=5, start=datetime(2024, 1, 1, tzinfo=UTC))
        mm.flush()
        assert mm.search_similar("topic1", top_k=1)
    with MemoryManager(db, embedding=None) as mm:
        assert mm.reindex(embedding=FakeEmbedder(128), progress=False)["vectors"] == 10
    with MemoryManager(db, embedding=FakeEmbedder(128)) as mm:
        query = mm._semantic.embed_query("note 3 about")
        _assert_same(mm._semantic.nearest(query, 3, None), _exact(mm, query, 3, None))


def test_a_configured_chroma_block_still_means_chroma(tmp_path: Path) -> None:
    pytest.importorskip("chromadb")
    from harombe_core.config import load_config

    config = load_config({"vector_store": {"mode": "memory"}})
    assert config.vector_store.provider == "chroma"
    assert load_config({}).vector_store.provider == "database"
    with MemoryManager(str(tmp_path / "m.db"), embedding=FakeEmbedder(), config=config) as mm:
        assert mm._semantic.index is not None
        assert not mm._semantic.in_database


def test_a_store_kept_with_chroma_opens_on_the_database_with_nothing_to_redo(
    tmp_path: Path,
) -> None:
    pytest.importorskip("chromadb")
    db = str(tmp_path / "m.db")
    embedder = FakeEmbedder()
    with MemoryManager(db, embedding=embedder, vector_store="chroma") as mm:
        _fill(mm, sessions=3, per=5, start=datetime(2024, 1, 1, tzinfo=UTC))
        mm.flush()
        mm._semantic.stored.unindex([1, 2, 3])  # as another process's rows left on the tail
        calls = embedder.calls
    with MemoryManager(db, embedding=embedder) as mm:
        mm.flush()
        assert embedder.calls == calls  # the stored vectors are used as they are
        assert mm._semantic.stored.tail_count() == 0  # a stored vector is an indexed one
        assert len(mm.search_similar("session note about", top_k=50)) == 15


def test_which_configuration_blocks_mean_chroma() -> None:
    from harombe_core.config import load_config

    def provider(block: dict) -> str:
        return load_config({"vector_store": block}).vector_store.provider

    assert provider({}) == "database"
    assert provider({"mode": "persistent", "batch_size": 8}) == "database"  # the defaults
    assert provider({"mode": "http", "port": 8001}) == "chroma"
    assert provider({"path": "/data/index"}) == "chroma"
    assert provider({"collection": "my-app"}) == "chroma"
    assert provider({"provider": "database", "collection": "unused"}) == "database"
