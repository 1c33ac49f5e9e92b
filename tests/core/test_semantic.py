"""Automatic embedding, backfill, reindex, crash repair and model mismatch (real SQLite+Chroma)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harombe_core.errors import EmbeddingError, EmbeddingModelMismatchError, InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.testing import FailingEmbedder, FakeEmbedder


def _vectors_in_sqlite(mm: MemoryManager) -> int:
    return int(mm.store._read("SELECT COUNT(*) FROM message_vectors")[0][0])  # type: ignore[attr-defined]


def _fill(mm: MemoryManager, sessions: int = 3, per: int = 4) -> list[str]:
    ids = []
    for s in range(sessions):
        sid = mm.create_session(user_id=f"user{s % 2}")
        mm.save_messages(
            sid, [Message(role="user", content=f"note {s}-{i} about topic{s}") for i in range(per)]
        )
        ids.append(sid)
    return ids


def test_save_then_flush_makes_messages_searchable(db_path: str) -> None:
    with MemoryManager(db_path, embedding=FakeEmbedder(), vector_store="chroma") as mm:
        sid = mm.create_session()
        mm.save_message(sid, Message(role="user", content="the cat sat on the mat"))
        mm.flush()
        assert mm.stats()["pending_embeddings"] == 0
        assert mm.search_similar("cat mat", top_k=1)[0].content == "the cat sat on the mat"
        assert Path(db_path + ".chroma").is_dir()
        assert mm._semantic.index.count() == 1


def test_worker_embeds_in_the_background_without_flush(db_path: str) -> None:
    with MemoryManager(db_path, embedding=FakeEmbedder()) as mm:
        _fill(mm)
        deadline = time.monotonic() + 30
        while mm.stats()["pending_embeddings"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert mm.stats()["pending_embeddings"] == 0


def test_batches_are_used(db_path: str) -> None:
    embedder = FakeEmbedder()
    with MemoryManager(db_path, embedding=embedder) as mm:
        sid = mm.create_session()
        mm.save_messages(sid, [Message(role="user", content=f"m{i}") for i in range(70)])
        mm.flush()
        assert embedder.texts_embedded == 70
        assert embedder.calls <= 3  # batches of 32, never one call per message


def test_model_recorded_and_mismatch_names_reindex(db_path: str) -> None:
    MemoryManager(db_path, embedding=FakeEmbedder(64)).close()
    with pytest.raises(EmbeddingModelMismatchError, match="harombe reindex"):
        MemoryManager(db_path, embedding=FakeEmbedder(128))
    with MemoryManager(db_path, embedding=None) as plain:
        assert plain.store.run(ops.get_meta("embedding_dimension")) == "64"
        assert plain.store.run(ops.get_meta("embedding_model")) == FakeEmbedder(64).name


def test_reindex_switches_model_and_is_idempotent(db_path: str) -> None:
    with MemoryManager(db_path, embedding=FakeEmbedder(64)) as mm:
        _fill(mm)
        mm.flush()
    with MemoryManager(db_path, embedding=None) as mm:
        result = mm.reindex(embedding=FakeEmbedder(128), progress=False)
        assert result == {"keyword_rows": 12, "vectors": 12}
        again = mm.reindex(progress=False)
        assert again == {"keyword_rows": 12, "vectors": 12}
        assert _vectors_in_sqlite(mm) == 12
        assert mm.search_similar("topic2", top_k=1)[0].content.endswith("topic2")
    MemoryManager(db_path, embedding=FakeEmbedder(128)).close()  # no mismatch any more


def test_reindex_reuses_stored_vectors_without_running_the_model(db_path: str) -> None:
    embedder = FakeEmbedder()
    with MemoryManager(db_path, embedding=embedder, vector_store="chroma") as mm:
        _fill(mm)
        mm.flush()
        calls = embedder.calls
        for _ in range(2):
            assert mm.reindex(progress=False)["vectors"] == 12
        assert embedder.calls == calls
        assert mm._semantic.index.count() == 12


def test_backfill_embeds_what_was_saved_without_semantic_memory(db_path: str) -> None:
    with MemoryManager(db_path, embedding=None) as mm:
        _fill(mm)
    with MemoryManager(db_path, embedding=FakeEmbedder(), vector_store="chroma") as mm:
        mm._semantic._stop.set()  # keep the worker out of the way: backfill does the work
        done = mm.backfill_embeddings(batch_size=5, progress=False)
        assert done + (12 - done) == 12
        assert mm.stats()["pending_embeddings"] == 0
        assert mm.backfill_embeddings(batch_size=5, progress=False) == 0
        assert _vectors_in_sqlite(mm) == 12
        assert mm._semantic.index.count() == 12


def test_backfill_needs_semantic_memory(manager: MemoryManager) -> None:
    with pytest.raises(InvalidInputError, match="semantic memory"):
        manager.backfill_embeddings()


def test_crash_between_commit_and_embedding_is_repaired_on_open(db_path: str) -> None:
    # The child commits a message while its embedder hangs, then dies without cleanup.
    child = textwrap.dedent(
        f"""
        import os, threading
        from harombe_core.manager import MemoryManager
        from harombe_core.models import Message
        from harombe_core.testing import FakeEmbedder

        class Hanging(FakeEmbedder):
            def _embed_batch(self, texts):
                threading.Event().wait()

        mm = MemoryManager({db_path!r}, embedding=Hanging(), vector_store="chroma")
        sid = mm.create_session(session_id="s1")
        mm.save_message(sid, Message(role="user", content="remember the blue door"))
        assert mm.stats()["pending_embeddings"] == 1
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", child], check=True, timeout=120)
    with MemoryManager(db_path, embedding=FakeEmbedder(), vector_store="chroma") as mm:
        deadline = time.monotonic() + 30
        while mm.stats()["pending_embeddings"] and time.monotonic() < deadline:
            time.sleep(0.02)  # no flush: the worker repairs at start
        assert mm.stats()["pending_embeddings"] == 0
        assert mm._semantic.index.count() == 1
        assert mm.search_similar("blue door", top_k=1)[0].content == "remember the blue door"


def test_lost_vector_index_is_rebuilt_from_sqlite(db_path: str) -> None:
    from harombe_core.vectors.chroma import ChromaVectorIndex

    with MemoryManager(db_path, embedding=FakeEmbedder(), vector_store="chroma") as mm:
        _fill(mm)
        mm.flush()
    lost = ChromaVectorIndex(mode="persistent", path=db_path + ".chroma")
    lost.clear()  # the index is lost
    lost.close()
    embedder = FakeEmbedder()
    with MemoryManager(db_path, embedding=embedder, vector_store="chroma") as mm:
        deadline = time.monotonic() + 30
        while mm._semantic.index.count() < 12 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert mm._semantic.index.count() == 12
        assert embedder.calls == 0


def test_delete_and_clear_session_remove_vectors(db_path: str) -> None:
    with MemoryManager(db_path, embedding=FakeEmbedder(), vector_store="chroma") as mm:
        first, second, _ = _fill(mm)
        mm.flush()
        assert mm.delete_session(first)
        assert mm.clear_session(second) == 4
        assert mm._semantic.index.count() == 4
        assert _vectors_in_sqlite(mm) == 4


def test_embedding_failure_keeps_messages_and_surfaces_on_flush(db_path: str) -> None:
    with MemoryManager(db_path, embedding=FailingEmbedder()) as mm:
        sid = mm.create_session()
        mm.save_message(sid, Message(role="user", content="kept even if embedding fails"))
        with pytest.raises(EmbeddingError, match="unavailable"):
            mm.flush()
        assert mm.get_messages(sid)[0].content == "kept even if embedding fails"
        assert mm.stats()["pending_embeddings"] == 1
        assert [m.content for m in mm.search_similar("embedding fails")] == [
            "kept even if embedding fails"
        ]


async def test_async_twins(db_path: str) -> None:
    with MemoryManager(db_path, embedding=None) as mm:
        _fill(mm)
    with MemoryManager(db_path, embedding=FakeEmbedder()) as mm:
        await mm.aflush()
        assert await mm.abackfill_embeddings(progress=False) == 0
        assert (await mm.areindex(progress=False))["vectors"] == 12
        hits = await mm.asearch("topic1", top_k=2)
        assert hits
        assert hits[0].message.content.endswith("topic1")
        assert (await mm.asearch_similar("topic0", top_k=1))[0].content.endswith("topic0")
