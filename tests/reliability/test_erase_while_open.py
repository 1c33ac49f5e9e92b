"""Deleted means gone from the disk while the store stays open: a process that never closes
(a server, a web app's manager) erases a deletion's bytes on ``erase_deleted()``, by itself once
deletions pause (``memory.erase_after_seconds``), and before ``harombe serve`` answers a delete.

Each test deletes a session or a user holding a unique secret, then reads every file under the
store's folder (the database, -wal, -shm, the Chroma folder) as bytes WHILE the manager or the
server is still running; every other acknowledged message must still be found by keyword and by
meaning. The background eraser is driven by an injected clock (never a sleep).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from harombe_core.config import MemoryConfig
from harombe_core.erasing import DeletionEraser, Erasure
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.testing import FakeEmbedder
from tests.reliability.test_deletion import KINDS, files_holding, open_manager, token

pytestmark = pytest.mark.slow

KEPT = 12  # acknowledged messages that must survive every erasure


def _fill(mm: MemoryManager, secret: str, sid: str, user: str) -> list[str]:
    """A session of ``user`` holding ``secret``, and KEPT other messages (their unique words)."""
    mm.create_session(session_id=sid, user_id=user)
    mm.save_messages(
        sid,
        [
            Message(role="user", content=f"please remember my password {secret} for later"),
            Message(role="assistant", content=f"noted, your password {secret} is stored"),
        ],
    )
    kept = [token() for _ in range(KEPT)]
    for i, word in enumerate(kept):
        mm.save_message(f"keep-{i % 3}", Message(role="user", content=f"the code is {word}"))
    mm.flush()
    mm.store.index_keywords()
    return kept


def _everything_else_found(mm: MemoryManager, kept: list[str]) -> None:
    mm.flush()
    for word in kept:
        # (every message, not just the best 5: this asks "still found", not how it ranks)
        assert f"the code is {word}" in [h.message.content for h in mm.search(word, top_k=100)]
        if mm.semantic_enabled:
            hits = mm.search_similar(f"the code is {word}", top_k=KEPT + 2)
            assert f"the code is {word}" in [m.content for m in hits]


def _more_writes(mm: MemoryManager) -> None:
    """What a server keeps doing after the delete: the deleted bytes must not depend on it."""
    for i in range(50):
        mm.save_message("busy", Message(role="user", content=f"later message {i}"))
    mm.flush()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["delete_session", "forget_user"])
def test_erase_deleted_clears_the_files_while_open(tmp_path: Path, kind: str, how: str) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    secret, sid, user = token(), "s-" + token(), "u-" + token()
    mm = open_manager(folder / "m.db", kind)
    try:
        kept = _fill(mm, secret, sid, user)
        if how == "delete_session":
            assert mm.delete_session(sid)
        else:
            assert mm.forget_user(user) == 1
        _more_writes(mm)
        done = mm.erase_deleted()
        assert done == Erasure(wal_bytes_left=0, vectors_erased=True)
        assert done.complete
        assert files_holding(folder, secret) == []  # the manager is still open
        assert files_holding(folder, sid) == []
        if how == "forget_user":
            assert files_holding(folder, user) == []
        _everything_else_found(mm, kept)
        assert "m.db" in " ".join(files_holding(folder, kept[0]))
        assert mm.erase_deleted().complete  # nothing owed: nothing to do
    finally:
        mm.close()


def test_aerase_deleted_is_the_async_twin(tmp_path: Path) -> None:
    import asyncio

    folder = tmp_path / "store"
    folder.mkdir()
    secret, sid = token(), "s-" + token()
    with MemoryManager(str(folder / "m.db"), embedding=None) as mm:
        kept = _fill(mm, secret, sid, "ann")

        async def main() -> Erasure:
            await mm.adelete_session(sid)
            return await mm.aerase_deleted()

        assert asyncio.run(main()).complete
        assert files_holding(folder, secret) == []
        _everything_else_found(mm, kept)


def test_a_reader_holding_an_old_snapshot_delays_the_wal_never_a_writer(tmp_path: Path) -> None:
    """A TRUNCATE checkpoint must wait for readers of older snapshots; it is not waited for (a
    writer meanwhile would be blocked too): the bytes left are reported and a later call,
    once the reader is done, finishes."""
    folder = tmp_path / "store"
    folder.mkdir()
    db = folder / "m.db"
    secret, sid = token(), "s-" + token()
    with MemoryManager(str(db), embedding=None) as mm:
        kept = _fill(mm, secret, sid, "ann")
        reader = sqlite3.connect(db)  # another process's reader, as SQLite sees it
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT COUNT(*) FROM messages").fetchall()  # holds its snapshot
            mm.delete_session(sid)
            first = mm.erase_deleted()
            assert not first.complete
            assert first.wal_bytes_left > 0
            mm.save_message("keep-0", Message(role="user", content="a writer is not blocked"))
            assert mm.store.erasure_owed()
        finally:
            reader.rollback()
            reader.close()
        assert mm.erase_deleted().complete
        assert not mm.store.erasure_owed()
        assert files_holding(folder, secret) == []
        _everything_else_found(mm, kept)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def clocked_manager(
    db: Path, **options: Any
) -> Iterator[tuple[MemoryManager, DeletionEraser, Clock]]:
    """A manager whose background eraser waits an hour by ``Clock``, which the test moves."""
    config = MemoryConfig.model_validate({"memory": {"erase_after_seconds": 3600}})
    with MemoryManager(str(db), config=config, **options) as mm:
        eraser = mm._eraser
        assert eraser is not None
        clock = Clock()
        eraser._clock = clock
        yield mm, eraser, clock


def test_the_background_eraser_waits_for_deletions_to_pause() -> None:
    """Debounced by the clock it is given: not due while deletions keep coming, once after."""
    clock, runs = Clock(), []

    def run() -> Erasure:
        runs.append(clock.now)
        return Erasure()

    # idle is an hour of the real clock too, so the worker thread never gets to it first
    eraser = DeletionEraser(run, 3600.0, clock=clock)
    try:
        assert eraser.run_due() is None  # nothing deleted
        eraser.deleted()
        clock.now += 1800
        assert eraser.run_due() is None
        eraser.deleted()  # another deletion: the pause starts again
        clock.now += 1800
        assert eraser.run_due() is None
        clock.now += 1800
        assert eraser.run_due() == Erasure()
        assert runs == [clock.now]
        assert eraser.run_due() is None  # done: not again until the next deletion
    finally:
        eraser.close()


def test_an_erasure_a_reader_blocked_is_retried() -> None:
    clock, results = Clock(), [Erasure(wal_bytes_left=4096), Erasure()]
    eraser = DeletionEraser(lambda: results.pop(0), 3600.0, clock=clock)
    try:
        eraser.deleted()
        clock.now += 3600
        assert eraser.run_due() == Erasure(wal_bytes_left=4096)
        clock.now += 3600
        assert eraser.run_due() == Erasure()
        assert eraser.run_due() is None
    finally:
        eraser.close()


def test_a_long_running_manager_erases_by_itself(tmp_path: Path) -> None:
    """No call to erase_deleted: the manager's background eraser, its clock moved past the
    pause, clears the files while the manager stays open."""
    folder = tmp_path / "store"
    folder.mkdir()
    secret, sid = token(), "s-" + token()
    config = MemoryConfig.model_validate({"memory": {"erase_after_seconds": 3600}})
    with MemoryManager(
        str(folder / "m.db"), embedding=FakeEmbedder(), vector_store="chroma", config=config
    ) as mm:
        eraser = mm._eraser
        assert eraser is not None
        assert eraser.idle == 3600
        clock = Clock()
        eraser._clock = clock
        kept = _fill(mm, secret, sid, "ann")
        mm.delete_session(sid)
        _more_writes(mm)
        assert eraser.run_due() is None  # deletions have not paused long enough yet
        assert files_holding(folder, secret)  # (the WAL still holds it: a real gap)
        clock.now += 3600
        assert eraser.run_due() == Erasure()
        assert files_holding(folder, secret) == []
        assert files_holding(folder, sid) == []
        _everything_else_found(mm, kept)


def test_the_pause_is_a_setting(tmp_path: Path) -> None:
    assert MemoryConfig().memory.erase_after_seconds == 2.0
    with MemoryManager(str(tmp_path / "on.db"), embedding=None) as mm:
        assert mm._eraser is not None
        assert mm._eraser.idle == 2.0
    off = MemoryConfig.model_validate({"memory": {"erase_after_seconds": None}})
    with MemoryManager(str(tmp_path / "off.db"), embedding=None, config=off) as mm:
        assert mm._eraser is None  # erased on erase_deleted() and at close only
    with MemoryManager(":memory:", embedding=None) as mm:
        assert mm._eraser is None  # nothing on disk
    with pytest.raises(ValidationError, match="erase_after_seconds"):
        MemoryConfig.model_validate({"memory": {"erase_after_seconds": -1}})


def test_harombe_serve_erases_before_it_answers(tmp_path: Path) -> None:
    """A real server on 127.0.0.1 (its own process, never closed during the test): after a
    delete and a forget answer, no file holds the secrets, and the rest is still found."""
    pytest.importorskip("fastapi")
    import httpx

    from harombe_core.server.process import ServerProcess, create_key_cli

    folder = tmp_path / "store"
    folder.mkdir()
    db = str(folder / "served.db")
    admin = create_key_cli(db, admin=True)
    server = ServerProcess(db).start()
    one, two, kept = token(), token(), [token() for _ in range(5)]
    bob = "u-" + token()
    try:
        headers = {"Authorization": f"Bearer {admin}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:

            def post(sid: str, user: str, text: str) -> None:
                message = {"role": "user", "content": text}
                got = http.post(
                    f"/api/sessions/{sid}/messages", json={"messages": [message], "user_id": user}
                )
                assert got.status_code in (200, 201), got.text

            post("secret-1", "ann", f"my pin is {one}")
            post("secret-2", bob, f"my pin is {two}")
            for word in kept:
                post("kept", "cyd", f"the code is {word}")
            assert any(one in f for f in [h["message"]["content"] for h in _search(http, one)])
            got = http.delete("/api/sessions/secret-1")
            assert got.json() == {"deleted": True, "erased_from_disk": True}, got.text
            assert files_holding(folder, one) == []  # the server is still running
            got = http.delete(f"/api/users/{bob}")
            assert got.json()["erased_from_disk"] is True, got.text
            assert files_holding(folder, two) == []
            assert files_holding(folder, bob) == []
            for word in kept:
                assert f"the code is {word}" in [
                    h["message"]["content"] for h in _search(http, word)
                ]
        assert server.process is not None
        assert server.process.poll() is None
    finally:
        server.stop()


def _search(http: object, word: str) -> list[dict[str, object]]:
    got = http.get("/api/search", params={"q": word})  # type: ignore[attr-defined]
    assert got.status_code == 200, got.text
    return list(got.json())


def test_concurrent_deletions_and_erasures_lose_nothing(tmp_path: Path) -> None:
    """Erasures racing deletions and saves on other threads: what was acknowledged stays."""
    folder = tmp_path / "store"
    folder.mkdir()
    with MemoryManager(str(folder / "m.db"), embedding=None) as mm:
        secrets = [token() for _ in range(6)]
        for i, secret in enumerate(secrets):
            mm.save_message(f"gone-{i}", Message(role="user", content=f"secret {secret}"))
        kept: list[str] = []

        def save() -> None:
            for _ in range(30):
                word = token()
                mm.save_message("kept", Message(role="user", content=f"the code is {word}"))
                kept.append(word)

        def erase() -> None:
            for _ in range(6):
                mm.erase_deleted()

        threads = [threading.Thread(target=save), threading.Thread(target=erase)]
        for t in threads:
            t.start()
        for i in range(len(secrets)):
            mm.delete_session(f"gone-{i}")
        for t in threads:
            t.join()
        assert mm.erase_deleted().complete
        for secret in secrets:
            assert files_holding(folder, secret) == []
        mm.flush()
        for word in kept:
            assert [h.message.content for h in mm.search(word, top_k=3)][:1] == [
                f"the code is {word}"
            ]


def test_a_forgotten_fact_is_erased_in_the_background(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    secret, control = token(), token()
    with clocked_manager(folder / "m.db", embedding=None) as (mm, eraser, clock):
        fact = mm.add_fact("ann", f"The alarm code is {secret}")
        mm.add_fact("ann", f"Parks in bay {control}")
        mm.flush()
        assert mm.forget_fact("ann", fact.id)
        clock.now += 3600
        assert eraser.run_due() == Erasure()  # the forget asked for it
        assert files_holding(folder, secret) == []
        assert files_holding(folder, control)  # (the scan reads what is there)
        assert control in [h.fact.text.split()[-1] for h in mm.search_facts("ann", control)]


def test_a_deleted_langgraph_thread_is_erased_in_the_background(tmp_path: Path) -> None:
    """The checkpointer deletes a thread in its own SQL; the manager's background eraser
    erases it from the files all the same, while the manager stays open."""
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage

    from langchain_harombe import HarombeSaver
    from tests.langchain.test_deletion import _graph

    folder = tmp_path / "store"
    folder.mkdir()
    secret, control, thread = token(), token(), "t-" + token()
    config = MemoryConfig.model_validate({"memory": {"erase_after_seconds": 3600}})
    with MemoryManager(str(folder / "m.db"), embedding=FakeEmbedder(), config=config) as mm:
        eraser = mm._eraser
        assert eraser is not None
        clock = Clock()
        eraser._clock = clock
        saver = HarombeSaver(mm)
        thread_config = {"configurable": {"thread_id": thread}}
        _graph(saver).invoke(
            {"messages": [HumanMessage(f"my password is {secret}")]}, thread_config
        )
        mm.save_message("keep", Message(role="user", content=f"the harbour code is {control}"))
        mm.flush()
        mm.store.index_keywords()
        saver.delete_thread(thread)
        clock.now += 3600
        assert eraser.run_due() == Erasure()
        assert files_holding(folder, secret) == []
        assert files_holding(folder, thread) == []
        assert files_holding(folder, control)
        assert [h.message.content for h in mm.search(control, top_k=100)].count(
            f"the harbour code is {control}"
        ) == 1


def test_harombe_forget_says_when_another_process_holds_the_wal(tmp_path: Path) -> None:
    """The command erases before it returns; when a reader of another process keeps the WAL
    it says so, and the debt stays recorded until an erasure can truncate it."""
    import subprocess
    import sys

    folder = tmp_path / "store"
    folder.mkdir()
    db = folder / "m.db"
    secret, user = token(), "u-" + token()
    with MemoryManager(str(db), embedding=None) as mm:
        mm.save_message("s", Message(role="user", content=f"pin {secret}"), user_id=user)
        mm.save_message("other", Message(role="user", content="kept"), user_id="other")
        mm.flush()
    reader = sqlite3.connect(db)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM messages").fetchall()
        done = subprocess.run(
            [sys.executable, "-m", "harombe_core.cli", "forget", "--user", user, "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        reader.rollback()
        reader.close()
    assert done.returncode == 0, done.stderr
    assert "Another process has the database open" in done.stdout, done.stdout
    with MemoryManager(str(db), embedding=None) as mm:
        assert mm.erase_deleted().complete
        assert files_holding(folder, secret) == []
        assert [h.message.content for h in mm.search("kept", top_k=5)] == ["kept"]


_KILLED_AFTER_DELETING = """
import os, sys
from harombe_core.config import MemoryConfig
from harombe_core.manager import MemoryManager
from harombe_core.testing import FakeEmbedder
config = MemoryConfig.model_validate({"memory": {"erase_after_seconds": 3600}})
mm = MemoryManager(sys.argv[1], embedding=FakeEmbedder(), vector_store=sys.argv[2], config=config)
mm.delete_session(sys.argv[3])
os._exit(0)  # killed before its pause ended: it never erases
"""


@pytest.mark.parametrize("kind", ["database", "chroma"])
def test_a_killed_processs_deletion_is_erased_by_a_manager_left_open(
    tmp_path: Path, kind: str
) -> None:
    """Another process deletes and is killed before its eraser's pause ends. The manager
    that stays open (a server; it holds the Chroma folder) finds the debt standing unchanged
    on two looks and erases it, so the deleted text does not wait for its close."""
    import subprocess
    import sys

    folder = tmp_path / "store"
    folder.mkdir()
    db = folder / "m.db"
    secret, sid = token(), "s-" + token()
    config = MemoryConfig.model_validate({"memory": {"erase_after_seconds": 3600}})
    with MemoryManager(str(db), embedding=FakeEmbedder(), vector_store=kind, config=config) as mm:
        eraser = mm._eraser
        assert eraser is not None
        kept = _fill(mm, secret, sid, "ann")
        killed = subprocess.run(
            [sys.executable, "-c", _KILLED_AFTER_DELETING, str(db), kind, sid],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert killed.returncode == 0, killed.stderr
        assert mm.get_session(sid) is None
        assert files_holding(folder, secret)  # nobody erased: it waits for this close
        assert eraser.check_recorded() is None  # first look: it may still be its maker's
        assert files_holding(folder, secret)
        assert eraser.check_recorded() == Erasure()  # unchanged since: this manager pays it
        assert files_holding(folder, secret) == []
        assert files_holding(folder, sid) == []
        assert eraser.check_recorded() is None  # paid: not again
        _everything_else_found(mm, kept)


def test_searches_racing_a_chroma_erasure_still_answer(tmp_path: Path) -> None:
    """The Chroma folder is swapped under searches running on other threads: each still
    answers (from the stored vectors while the index is away), none raises."""
    folder = tmp_path / "store"
    folder.mkdir()
    off = MemoryConfig.model_validate({"memory": {"erase_after_seconds": None}})
    with MemoryManager(
        str(folder / "m.db"), embedding=FakeEmbedder(), vector_store="chroma", config=off
    ) as mm:
        words = [token() for _ in range(60)]
        for i, word in enumerate(words):
            mm.save_message(f"s{i % 10}", Message(role="user", content=f"code {word}"))
        mm.flush()
        errors: list[BaseException] = []
        stop = threading.Event()

        def search() -> None:
            n = 0
            while not stop.is_set():
                try:
                    mm.search_similar(f"code {words[n % 60]}", top_k=3)
                except BaseException as exc:  # (collected, asserted below)
                    errors.append(exc)
                n += 1

        threads = [threading.Thread(target=search) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            for i in range(5):
                mm.delete_session(f"s{i}")
                mm.erase_deleted()
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert errors == []
        assert mm.erase_deleted().complete
        mm.flush()
        for word in words[5::10] + words[9::10]:  # (sessions s5 and s9 stay)
            hits = mm.search_similar(f"code {word}", top_k=60)
            assert f"code {word}" in [m.content for m in hits]


def test_a_replaced_summary_is_erased_like_a_deletion(tmp_path: Path) -> None:
    """Replacing a session summary deletes its keyword entry; the old summary's words stay in
    FTS5's older segments until a merge, so the replacement owes the erasure a deletion does."""
    mm = MemoryManager(str(tmp_path / "m.db"), embedding=None)
    try:
        old = token()
        mm.create_session(session_id="s", user_id="ann")
        for i in range(5):  # other summaries: the index has segments besides the replaced one
            mm.create_session(session_id=f"other-{i}")
            mm.store.run(ops.update_session(f"other-{i}", summary=f"talked about gardening {i}"))
        mm.store.run(ops.update_session("s", summary=f"ann's locker code is {old}"))
        mm.store.run(ops.update_session("s", summary="ann asked about trains"))  # a re-summary
        assert mm.search_summaries(old) == []
        assert mm.erase_deleted().complete
        assert files_holding(tmp_path, old) == []
        assert [s.id for s, _ in mm.search_summaries("trains")] == ["s"]
        assert mm.erase_deleted().complete  # nothing owed now
    finally:
        mm.close()


def test_a_removed_langgraph_message_arms_the_background_eraser(tmp_path: Path) -> None:
    """A ``RemoveMessage`` deletes a message of the thread's session (in the checkpointer's
    own SQL, on the background thread): the eraser is armed as after ``delete_thread``, so
    the keyword index's copy is merged away while the manager stays open."""
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage, RemoveMessage

    from langchain_harombe import HarombeSaver
    from tests.langchain.test_deletion import _graph

    folder = tmp_path / "store"
    folder.mkdir()
    secret, thread = token(), "t-" + token()
    with clocked_manager(folder / "m.db", embedding=None) as (mm, eraser, clock):
        graph = _graph(HarombeSaver(mm))
        thread_config: Any = {"configurable": {"thread_id": thread}}
        graph.invoke({"messages": [HumanMessage(f"my password is {secret}")]}, thread_config)
        mm.flush()
        mm.store.index_keywords()
        clock.now += 3600
        assert eraser.run_due() is None  # nothing deleted yet: nothing to erase
        doomed = next(
            m for m in graph.get_state(thread_config).values["messages"] if secret in m.text
        )
        graph.update_state(thread_config, {"messages": [RemoveMessage(id=doomed.id)]})
        mm.flush()
        assert mm.store.keyword_search(secret, limit=5) == []
        assert mm.store.erasure_owed()
        clock.now += 3600
        assert eraser.run_due() == Erasure()
        assert not mm.store.erasure_owed()
