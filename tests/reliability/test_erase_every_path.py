"""Every path that removes text arms the background eraser, whichever code removed it.

The manager's own deletions were always followed by an erasure while the store stays open;
these are the others: the LangGraph checkpointer's ``delete_for_runs`` and ``copy_thread``
(which rewrite a thread's session in their own SQL), a replaced session summary, a deleted,
expired or overwritten LangGraph store item, and a deletion in raw SQL through the store.
Each test removes a unique secret while the manager stays open, moves the eraser's clock past
its pause (never a sleep), and greps every file under the store's folder (the database, -wal,
-shm) for the secret's bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harombe_core.erasing import Erasure
from harombe_core.models import Message
from harombe_core.store import ops
from tests.reliability.test_deletion import files_holding, token
from tests.reliability.test_erase_while_open import clocked_manager

pytestmark = pytest.mark.slow


def _control(mm: Any) -> str:
    """An acknowledged message that every erasure must keep findable; its unique word."""
    word = token()
    mm.save_message("keep", Message(role="user", content=f"the harbour code is {word}"))
    mm.flush()
    mm.store.index_keywords()
    return word


def _still_found(mm: Any, folder: Path, word: str) -> None:
    assert files_holding(folder, word)
    hits = [h.message.content for h in mm.search(word, top_k=100)]
    assert hits.count(f"the harbour code is {word}") == 1


def _langgraph(mm: Any) -> tuple[Any, Any, Any]:
    """A HarombeSaver on ``mm``, a one-node graph on it, and LangChain's HumanMessage."""
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage

    from langchain_harombe import HarombeSaver
    from tests.langchain.test_deletion import _graph

    saver = HarombeSaver(mm)
    return saver, _graph(saver), HumanMessage


def test_delete_for_runs_is_erased_in_the_background(tmp_path: Path) -> None:
    """The run's checkpoints, the blobs only they referenced and the session's copy of its
    messages all go, and the deletion arms the eraser (no manager method was called)."""
    folder = tmp_path / "store"
    folder.mkdir()
    secret = token()
    with clocked_manager(folder / "m.db", embedding=None) as (mm, eraser, clock):
        saver, graph, HumanMessage = _langgraph(mm)
        thread: dict[str, Any] = {"thread_id": "t-" + token()}
        graph.invoke(
            {"messages": [HumanMessage("what should I keep safe")]},
            {"configurable": {**thread, "run_id": "run-kept"}},
        )
        graph.invoke(
            {"messages": [HumanMessage(f"my password is {secret}")]},
            {"configurable": {**thread, "run_id": "run-secret"}},
        )
        control = _control(mm)
        clock.now += 3600
        assert eraser.run_due() is None  # nothing deleted yet
        saver.delete_for_runs(["run-secret"])
        mm.flush()
        assert mm.store.keyword_search(secret, limit=5) == []
        newest = graph.get_state({"configurable": thread}).values["messages"]
        assert [m.text for m in newest] == ["what should I keep safe", "noted"]
        clock.now += 3600
        assert eraser.run_due() == Erasure()
        assert files_holding(folder, secret) == []
        _still_found(mm, folder, control)


def test_copy_thread_replacing_a_session_arms_the_eraser(tmp_path: Path) -> None:
    """Copying a thread onto one whose session held other messages deletes those from the
    session (the thread's own history keeps its checkpoints, as LangGraph's savers do): the
    keyword index's copy is owed an erasure, and the eraser pays it while the store is open."""
    folder = tmp_path / "store"
    folder.mkdir()
    secret = token()
    with clocked_manager(folder / "m.db", embedding=None) as (mm, eraser, clock):
        saver, graph, HumanMessage = _langgraph(mm)
        target = {"configurable": {"thread_id": "t2"}}
        graph.invoke({"messages": [HumanMessage(f"my password is {secret}")]}, target)
        graph.invoke({"messages": [HumanMessage("hello")]}, {"configurable": {"thread_id": "t1"}})
        mm.flush()
        mm.store.index_keywords()
        clock.now += 3600
        assert eraser.run_due() is None
        saver.copy_thread("t1", "t2")  # t1's checkpoint is the newest of t2 now
        mm.flush()
        assert [m.content for m in mm.get_messages("t2")] == ["hello", "noted"]
        assert mm.store.keyword_search(secret, limit=5) == []
        assert mm.store.erasure_owed()
        clock.now += 3600
        assert eraser.run_due() == Erasure()
        assert not mm.store.erasure_owed()


def test_a_replaced_summary_arms_the_eraser(tmp_path: Path) -> None:
    """A re-summary (whichever code writes it) deletes the old summary's keyword entry: the
    background eraser merges its words away without anyone calling erase_deleted()."""
    folder = tmp_path / "store"
    folder.mkdir()
    old = token()
    with clocked_manager(folder / "m.db", embedding=None) as (mm, eraser, clock):
        for i in range(3):
            mm.create_session(session_id=f"other-{i}")
            mm.store.run(ops.update_session(f"other-{i}", summary=f"talked about gardening {i}"))
        mm.create_session(session_id="s")
        mm.store.run(ops.update_session("s", summary=f"ann's locker code is {old}"))
        clock.now += 3600
        assert eraser.run_due() is None  # a first summary replaces nothing
        mm.store.run(ops.update_session("s", summary="ann asked about trains"))
        assert mm.search_summaries(old) == []
        clock.now += 3600
        assert eraser.run_due() == Erasure()
        assert files_holding(folder, old) == []
        assert [s.id for s, _ in mm.search_summaries("trains")] == ["s"]


@pytest.mark.parametrize("how", ["delete", "overwrite", "expire"])
def test_a_langgraph_store_item_removed_is_erased(tmp_path: Path, how: str) -> None:
    """An item deleted, overwritten or swept after its TTL leaves no byte behind while the
    store stays open (the WAL's old page images held it)."""
    pytest.importorskip("langgraph")
    from langchain_harombe import HarombeStore

    folder = tmp_path / "store"
    folder.mkdir()
    secret, kept = token(), token()
    with clocked_manager(folder / "m.db", embedding=None) as (mm, eraser, clock):
        store = HarombeStore(mm)
        store.put(("users", "ann"), "kept", {"text": f"likes {kept}"})
        ttl = 0.0001 if how == "expire" else None
        store.put(("users", "ann"), "pin", {"text": f"my pin is {secret}"}, ttl=ttl)
        assert files_holding(folder, secret)
        clock.now += 3600
        assert eraser.run_due() is None
        if how == "delete":
            store.delete(("users", "ann"), "pin")
        elif how == "overwrite":  # (twice: the second finds the debt's key recorded)
            store.put(("users", "ann"), "pin", {"text": "no pin any more"})
            store.put(("users", "ann"), "pin", {"text": "still no pin"})
        else:
            import time

            time.sleep(0.01)  # (past a 6 ms TTL: this waits for the clock, asserts no speed)
            assert store.sweep_ttl() == 1
        clock.now += 3600
        assert eraser.run_due() == Erasure()
        assert files_holding(folder, secret) == []
        item = store.get(("users", "ann"), "kept")
        assert item is not None
        assert item.value == {"text": f"likes {kept}"}
        assert files_holding(folder, kept)


def test_a_deletion_in_raw_sql_arms_the_eraser(tmp_path: Path) -> None:
    """A session deleted by any code through the store's own transaction (an extension's SQL)
    arms the eraser: the deletion's commit does, not the manager's methods."""
    folder = tmp_path / "store"
    folder.mkdir()
    secret = token()
    with clocked_manager(folder / "m.db", embedding=None) as (mm, eraser, clock):
        mm.save_message("s", Message(role="user", content=f"my password is {secret}"))
        control = _control(mm)
        clock.now += 3600
        assert eraser.run_due() is None
        mm.store.transaction(
            lambda c: c.execute("DELETE FROM sessions WHERE id = 's'"), adds_messages=False
        )
        clock.now += 3600
        assert eraser.run_due() == Erasure()
        assert files_holding(folder, secret) == []
        _still_found(mm, folder, control)


def test_every_manager_on_the_file_is_armed_until_it_closes(tmp_path: Path) -> None:
    """A deletion through one manager arms the eraser of every manager open on the file; a
    closed manager is no longer called."""
    from harombe_core.manager import MemoryManager

    folder = tmp_path / "store"
    folder.mkdir()
    with MemoryManager(str(folder / "m.db"), embedding=None) as other:
        with clocked_manager(folder / "m.db", embedding=None) as (_mm, eraser, _clock):
            other.save_message("s1", Message(role="user", content="hello"))
            assert eraser._last is None
            assert other.delete_session("s1")
            assert eraser._last is not None
        eraser._last = None
        other.save_message("s2", Message(role="user", content="bye"))
        assert other.delete_session("s2")
        assert eraser._last is None


def _poison_new_segments(folder: Path, word: str) -> None:
    """Write ``word`` into the unused capacity of every HNSW segment's element array, as
    hnswlib leaves it when it saves a new segment from memory it never zeroed (a deleted
    record's bytes were seen there by chance; this makes the chance a certainty)."""
    for data in folder.glob("*/data_level0.bin"):
        size = data.stat().st_size
        assert size > 100 + len(word)  # a new segment is saved at its full capacity
        with open(data, "r+b") as f:
            f.seek(size - 100 - len(word))
            f.write(word.encode())


def test_an_erasure_leaves_no_stale_memory_in_chroma_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Chroma index an erasure re-creates is saved from this process's memory, which held
    the deleted records: its unused slots are zeroed before the segment is used."""
    pytest.importorskip("chromadb")
    from chromadb.api.models.Collection import Collection

    from harombe_core.manager import MemoryManager
    from harombe_core.testing import FakeEmbedder

    folder = tmp_path / "store"
    folder.mkdir()
    secret, sid = token(), "s-" + token()
    with MemoryManager(str(folder / "m.db"), embedding=FakeEmbedder(), vector_store="chroma") as mm:
        mm.save_message(sid, Message(role="user", content=f"my password is {secret}"))
        control = _control(mm)
        assert mm.delete_session(sid)
        upsert, poisoned = Collection.upsert, []

        def stale_upsert(self: Collection, *args: Any, **kwargs: Any) -> Any:
            done = upsert(self, *args, **kwargs)
            if not poisoned:  # the new segment's first save, from unzeroed memory
                _poison_new_segments(folder / "m.db.chroma", sid)
                poisoned.append(True)
            return done

        monkeypatch.setattr(Collection, "upsert", stale_upsert)
        assert mm.erase_deleted().complete
        mm.flush()  # the index is filled again from the stored vectors
        assert poisoned
        assert files_holding(folder, sid) == []
        assert files_holding(folder, secret) == []
        hits = mm.search_similar(f"the harbour code is {control}", top_k=3)
        assert f"the harbour code is {control}" in [m.content for m in hits]


def test_clearing_unused_slots_keeps_every_saved_element(tmp_path: Path) -> None:
    """A segment Chroma has saved holds its elements only; clearing never touches them (the
    index reopens and finds every vector), and a file with stale bytes past its elements (a
    new segment) is cleared from the first unused slot on."""
    pytest.importorskip("chromadb")
    import numpy as np

    from harombe_core.vectors.chroma import ChromaVectorIndex
    from harombe_core.vectors.chroma_folder import scrub_unused_slots

    path = tmp_path / "index"
    index = ChromaVectorIndex(path=str(path))
    vectors = np.random.default_rng(7).standard_normal((1100, 16)).astype(np.float32)
    ids = list(range(1, 1101))
    index.upsert(ids, vectors, [{"session_id": f"s{i % 7}"} for i in ids])  # past a save
    index.close()
    saved = {p: p.read_bytes() for p in path.glob("*/data_level0.bin")}
    assert saved
    assert all(saved.values())
    assert scrub_unused_slots(path) == 0
    assert {p: p.read_bytes() for p in saved} == saved
    stale = token()
    for data in saved:  # stale bytes in one unused slot past the saved elements
        with open(data, "ab") as f:
            f.write(stale.encode().ljust(len(saved[data]) // 1100, b"\x01"))
    assert files_holding(path, stale)
    assert scrub_unused_slots(path) > 0
    assert files_holding(path, stale) == []
    index = ChromaVectorIndex(path=str(path))
    try:
        assert index.count() == 1100
        for i in (0, 550, 1099):
            assert index.query(vectors[i], 1)[0].message_id == ids[i]
    finally:
        index.close()
