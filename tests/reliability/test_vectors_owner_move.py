"""``update_session(sid, user_id=new)``: the new owner's vector search finds the moved session's
messages at once (no reindex), the old owner's finds none, on every search path: exact from
SQLite, the Chroma index (the owner moving it, or another process moving it), pgvector on
PostgreSQL; and the session's summary moves with it."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from harombe_core import MemoryManager, Message
from harombe_core.vectors.indexer import embedding_text
from tests.reliability import vector_workers as w

MOVED = 30


def _conversations(mm: MemoryManager) -> tuple[str, dict[int, str]]:
    """Alice's session (to be moved) and one of bob's; returns alice's ids and their texts."""
    mm.create_session(session_id="alice-trip", user_id="alice")
    mm.create_session(session_id="bob-own", user_id="bob")
    ids = mm.save_messages(
        "alice-trip", [Message(role="user", content=w.text("alice-trip", i)) for i in range(MOVED)]
    )
    mm.save_messages("bob-own", [Message(role="user", content=w.text("bob-own", i)) for i in
                                 range(10)])
    texts, previous = {}, ""
    for message in mm.get_messages("alice-trip"):
        texts[int(message.id or 0)] = embedding_text(message, previous)
        previous = message.content
    assert set(texts) == set(ids)
    return "alice-trip", texts


def _found(mm: MemoryManager, texts: dict[int, str], user: str | None) -> set[int]:
    found: set[int] = set()
    for mid, text in texts.items():
        hits = mm.search_similar(text, top_k=5, user_id=user, keyword_weight=0.0)
        found |= {int(m.id or 0) for m in hits} & {mid}
    return found


def _index_owners(mm: MemoryManager, sid: str) -> set[object]:
    """The owner each of the session's vectors is filed under in Chroma."""
    collection = mm._semantic.index._collection
    metas = collection.get(where={"session_id": sid}, include=["metadatas"])["metadatas"]
    return {meta.get("user_id") for meta in metas}


def _move_in_child(path: str, sid: str, user: str | None) -> None:
    with w.manager(path) as mm:
        assert mm._semantic.index is None  # the test process owns the index
        mm.update_session(sid, user_id=user)


@pytest.mark.parametrize("path_taken", ["exact", "index"])
def test_moved_session_is_found_by_its_new_owner_at_once(tmp_path: Path, path_taken: str) -> None:
    with w.manager(str(tmp_path / "memory.db")) as mm:
        sid, texts = _conversations(mm)
        mm.flush()
        if path_taken == "index":
            mm._semantic.exact_search_limit = 0  # every scoped search goes through Chroma
        assert _found(mm, texts, "alice") == set(texts)
        mm.update_session(sid, user_id="bob")
        assert _found(mm, texts, "bob") == set(texts)  # no flush, no reindex
        assert _found(mm, texts, "alice") == set()
        mm.flush()
        assert _index_owners(mm, sid) == {"bob"}  # re-filed under the new owner
        assert _found(mm, texts, "bob") == set(texts)
        mm.update_session(sid, user_id=None)  # nobody's: only unscoped searches find it
        assert _found(mm, texts, "bob") == set()
        assert _found(mm, texts, None) == set(texts)
        mm.flush()
        assert _index_owners(mm, sid) == {None}


def test_session_moved_by_another_process_is_found_by_the_new_owner(tmp_path: Path) -> None:
    path = str(tmp_path / "memory.db")
    with w.manager(path) as mm:
        sid, texts = _conversations(mm)
        mm.flush()
        mm._semantic.exact_search_limit = 0
        assert mm._semantic.index is not None  # this process owns the index
        context = multiprocessing.get_context("spawn")
        child = context.Process(target=_move_in_child, args=(path, sid, "bob"))
        child.start()
        child.join(timeout=120)
        assert child.exitcode == 0
        assert _found(mm, texts, "bob") == set(texts)
        assert _found(mm, texts, "alice") == set()
        mm.flush()
        assert _index_owners(mm, sid) == {"bob"}


def test_summary_moves_with_the_session(tmp_path: Path) -> None:
    with w.manager(str(tmp_path / "memory.db")) as mm:
        sid, _ = _conversations(mm)
        mm.summarize_session(sid)
        assert [s.id for s, _ in mm.search_summaries("alice-trip", user_id="alice")] == [sid]
        mm.update_session(sid, user_id="bob")
        assert [s.id for s, _ in mm.search_summaries("alice-trip", user_id="bob")] == [sid]
        assert mm.search_summaries("alice-trip", user_id="alice") == []


def test_moved_session_on_postgres_is_found_by_its_new_owner(pg_url: str) -> None:
    with MemoryManager(pg_url, embedding=w.FakeEmbedder(), token_counter="approximate") as mm:
        sid, texts = _conversations(mm)
        mm.flush()
        mm.update_session(sid, user_id="bob")
        assert _found(mm, texts, "bob") == set(texts)
        assert _found(mm, texts, "alice") == set()
        vector = np.asarray(mm._semantic.embed_query(texts[min(texts)]), dtype=np.float32)
        nearest = mm._semantic.index.query(vector, 5, {"user_id": "bob"})
        assert min(texts) in {m.message_id for m in nearest}


def test_a_row_filed_while_a_search_runs_is_found_all_the_same(tmp_path: Path) -> None:
    """The worker files a re-owned row into the index and takes it off the tail while a search
    is between its two reads (the index and the tail): the search still finds it."""
    with w.manager(str(tmp_path / "memory.db")) as mm:
        sid, texts = _conversations(mm)
        mm.flush()
        semantic = mm._semantic
        semantic.exact_search_limit = 0
        semantic.stop()  # the re-filing below happens exactly where the test puts it
        mm.update_session(sid, user_id="bob")  # every row of the session is back on the tail
        index = semantic.index
        assert index is not None
        asked = index.query

        def query_then_file(*args: object, **kwargs: object) -> object:
            answer = asked(*args, **kwargs)  # the index still files the rows under alice
            assert semantic.sync_tail() == MOVED  # now under bob, and off the tail
            index.query = asked  # type: ignore[method-assign]
            return answer

        index.query = query_then_file  # type: ignore[method-assign]
        first = min(texts)
        hits = mm.search_similar(texts[first], top_k=5, user_id="bob", keyword_weight=0.0)
        assert first in {int(m.id or 0) for m in hits}
        assert index.query is asked  # the race was really run
