"""Deleted means gone: once a delete returns no search finds the text, and after close no byte
of it is left in any file of the store (database, WAL, keyword index, vector index).

Each test writes unique tokens, deletes, closes, then reads every file under the store's
folder (the database, its -wal and -shm, the Chroma folder) as bytes. A control token that was
not deleted must still be found, so a scan that reads nothing cannot pass.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.testing import FakeEmbedder
from harombe_core.vectors.memory import InMemoryVectorIndex

#: keyword only; the default in-database vector index; vectors in SQLite beside an index with
#: no files; SQLite + an embedded Chroma.
KINDS = ["keyword", "database", "stored", "chroma"]


def token() -> str:
    """A word no file holds by chance, kept whole by the keyword tokenizer and stemmer."""
    return "zq" + uuid.uuid4().hex[:12] + "7"


def files_holding(folder: Path, word: str) -> list[str]:
    """Every file under ``folder`` whose bytes contain ``word``."""
    needle = word.encode()
    found = []
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            if needle in path.read_bytes():
                found.append(str(path.relative_to(folder)))
    return sorted(found)


def open_manager(db: Path, kind: str) -> MemoryManager:
    if kind == "keyword":
        return MemoryManager(str(db), embedding=None)
    if kind == "database":
        return MemoryManager(str(db), embedding=FakeEmbedder())  # the default index
    if kind == "stored":
        return MemoryManager(str(db), embedding=FakeEmbedder(), vector_store=InMemoryVectorIndex())
    return MemoryManager(str(db), embedding=FakeEmbedder(), vector_store="chroma")


def found_anywhere(mm: MemoryManager, word: str) -> list[str]:
    """Texts of every search result for ``word``: hybrid, keyword-weighted, by meaning and in
    session summaries."""
    texts = [h.message.content for h in mm.search(word, top_k=50)]
    if mm.semantic_enabled:
        texts += [m.content for m in mm.search_similar(word, top_k=50)]
    texts += [s.summary or "" for s, _ in mm.search_summaries(word, top_k=50)]
    return [t for t in texts if word in t]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "store"


def _fill(mm: MemoryManager, secret: str, control: str, sid: str, user: str) -> None:
    mm.create_session(session_id=sid, user_id=user)
    mm.save_messages(
        sid,
        [
            Message(role="user", content=f"please remember my password {secret} for later"),
            Message(role="assistant", content=f"noted, your password {secret} is stored"),
        ],
    )
    mm.update_session(sid, metadata={"topic": "passwords"})
    mm.store.run(ops.update_session(sid, summary=f"the user shared the password {secret}"))
    mm.save_message("keep", Message(role="user", content=f"the harbour code is {control}"))
    mm.flush()
    mm.store.index_keywords()
    assert found_anywhere(mm, secret)


DELETES: dict[str, Callable[[MemoryManager, str, str], Any]] = {
    "delete_session": lambda mm, sid, user: mm.delete_session(sid),
    "clear_session": lambda mm, sid, user: mm.clear_session(sid),
    "forget_user": lambda mm, sid, user: mm.forget_user(user),
    "adelete_session": lambda mm, sid, user: asyncio.run(mm.adelete_session(sid)),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", sorted(DELETES))
def test_a_deleted_session_leaves_no_byte(folder: Path, kind: str, how: str) -> None:
    secret, control = token(), token()
    sid, user = "s-" + token(), "u-" + token()
    folder.mkdir()
    mm = open_manager(folder / "m.db", kind)
    try:
        _fill(mm, secret, control, sid, user)
        DELETES[how](mm, sid, user)
        assert found_anywhere(mm, secret) == []
        assert found_anywhere(mm, control)
    finally:
        mm.close()
    assert files_holding(folder, secret) == []
    if how != "clear_session":  # a cleared session stays, without messages or summary
        assert files_holding(folder, sid) == []  # the session id is gone from every index
    if how == "forget_user":
        assert files_holding(folder, user) == []
    assert "m.db" in files_holding(folder, control)


@pytest.mark.parametrize("kind", KINDS)
def test_pruned_sessions_leave_no_byte(folder: Path, kind: str) -> None:
    secret, control = token(), token()
    folder.mkdir()
    mm = open_manager(folder / "m.db", kind)
    try:
        old = datetime(2001, 1, 1, tzinfo=UTC)
        mm.save_message("old", Message(role="user", content=f"old secret {secret}", created_at=old))
        mm.save_message("keep", Message(role="user", content=f"the code is {control}"))
        mm.flush()
        mm.store.index_keywords()
        assert mm.prune_old_sessions(days=365) == 1
        assert found_anywhere(mm, secret) == []
    finally:
        mm.close()
    assert files_holding(folder, secret) == []
    assert "m.db" in files_holding(folder, control)


@pytest.mark.parametrize("kind", KINDS)
def test_one_deleted_message_is_not_found_through_its_neighbour(folder: Path, kind: str) -> None:
    """The next message's keyword entry and vector held the deleted turn: both are redone."""
    secret, control = token(), token()
    folder.mkdir()
    mm = open_manager(folder / "m.db", kind)
    try:
        ids = mm.save_messages(
            "chat",
            [
                Message(role="user", content="what should I keep safe"),
                Message(role="user", content=f"my password is {secret}"),
                Message(role="assistant", content=f"understood, I will keep it safe {control}"),
            ],
        )
        mm.flush()
        mm.store.index_keywords()
        hits = mm.search(secret, top_k=10)
        assert {h.message.id for h in hits} >= {ids[1], ids[2]}  # found through the answer too
        mm.replace_messages("chat", [ids[1]])
        assert found_anywhere(mm, secret) == []
        assert mm.store.keyword_search(secret, limit=10) == []
        mm.flush()
        assert found_anywhere(mm, secret) == []
        # the neighbour is still found by its own words
        assert mm.search(control, top_k=3)[0].message.id == ids[2]
    finally:
        mm.close()
    assert files_holding(folder, secret) == []
    assert "m.db" in files_holding(folder, control)


_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from harombe_core.manager import MemoryManager
    from harombe_core.models import Message
    from harombe_core.testing import FakeEmbedder

    db, secret, control, mode = sys.argv[1:5]
    mm = MemoryManager(db, embedding=FakeEmbedder(), vector_store="chroma")
    mm.save_message("doomed", Message(role="user", content=f"the secret is {secret}"))
    mm.save_message("keep", Message(role="user", content=f"the code is {control}"))
    mm.flush()
    mm.store.index_keywords()
    mm.delete_session("doomed")
    print("deleted", flush=True)
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    mm.close()
    """
)


@pytest.mark.parametrize("mode", ["close", "kill"])
def test_a_process_killed_after_deleting_leaves_the_erasure_owed(folder: Path, mode: str) -> None:
    """A real process deletes and exits (or is killed before closing); the erasure is recorded
    in the deleting transaction, so the next open and close finishes it."""
    secret, control = token(), token()
    folder.mkdir()
    db = folder / "m.db"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(db), secret, control, mode],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "deleted" in done.stdout, done.stderr
    if mode == "kill":
        assert done.returncode == -signal.SIGKILL
    else:
        assert done.returncode == 0, done.stderr
        assert files_holding(folder, secret) == []  # its own close erased it
    with MemoryManager(str(db), embedding=FakeEmbedder(), vector_store="chroma") as mm:
        assert found_anywhere(mm, secret) == []
        assert found_anywhere(mm, control)
    assert files_holding(folder, secret) == []
    assert "m.db" in files_holding(folder, control)


def test_a_cancelled_adelete_session_still_drops_the_vectors(folder: Path) -> None:
    secret = token()
    folder.mkdir()
    with open_manager(folder / "m.db", "chroma") as mm:
        mm.save_message("doomed", Message(role="user", content=f"the secret is {secret}"))
        mm.flush()
        index = mm._semantic.index
        assert index.count() == 1

        async def cancel() -> None:
            task = asyncio.ensure_future(mm.adelete_session("doomed"))
            await asyncio.sleep(0)  # the delete is on its worker thread
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancel())  # returns once its worker threads are done: the delete's too
        assert not mm.session_exists("doomed")
        assert index.count() == 0
        assert found_anywhere(mm, secret) == []
    assert files_holding(folder, secret) == []


def test_a_cancelled_areplace_messages_still_drops_the_deleted_vectors(folder: Path) -> None:
    """``areplace_messages`` deletes in its transaction, then drops the deleted messages'
    vectors from the index: a cancellation between the two left them in Chroma."""
    secret = token()
    folder.mkdir()
    with open_manager(folder / "m.db", "chroma") as mm:
        doomed, kept = mm.save_messages(
            "s",
            [
                Message(role="user", content=f"the secret is {secret}"),
                Message(role="user", content="the weather is fine"),
            ],
        )
        mm.flush()
        index = mm._semantic.index

        async def cancel() -> None:
            replace = mm.areplace_messages("s", [doomed], [Message(role="user", content="new")])
            task = asyncio.ensure_future(replace)
            await asyncio.sleep(0)  # the replacement is on its worker thread
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancel())  # returns once its worker threads are done
        assert doomed not in index.ids()
        assert kept in index.ids()
        assert found_anywhere(mm, secret) == []
    assert files_holding(folder, secret) == []


class GatedEmbedder(FakeEmbedder):
    """Stops inside the batch that holds ``mark`` until ``go`` is set, so a test can delete
    while the background worker is between reading a batch and filing its vectors."""

    def __init__(self, mark: str) -> None:
        super().__init__()
        self.mark = mark
        self.inside, self.go = threading.Event(), threading.Event()

    def _embed_batch(self, texts: list[str]) -> Any:
        if any(self.mark in text for text in texts):
            self.inside.set()
            self.go.wait(60)
        return super()._embed_batch(texts)


@pytest.mark.parametrize("how", ["delete_session", "clear_session", "forget_user"])
def test_a_message_deleted_while_its_batch_is_embedded_leaves_no_vector(
    folder: Path, how: str
) -> None:
    """The worker reads a batch, the session is deleted (its vectors dropped from the index),
    then the worker files the batch: the deleted message's vector came back into Chroma and
    stayed there until the next open's check (search never returned it: the store scopes)."""
    secret = token()
    folder.mkdir()
    embedder = GatedEmbedder(secret)
    with MemoryManager(str(folder / "m.db"), embedding=embedder, vector_store="chroma") as mm:
        mm.save_message("keep", Message(role="user", content="the harbour code"), user_id="k")
        mm.flush()
        mm.save_message("doomed", Message(role="user", content=f"secret {secret}"), user_id="u")
        assert embedder.inside.wait(60)  # the worker holds the batch with the secret
        DELETES[how](mm, "doomed", "u")
        embedder.go.set()
        mm.flush()
        assert sorted(mm._semantic.index.ids()) == [m.id for m in mm.get_messages("keep")]
        assert found_anywhere(mm, secret) == []
    assert files_holding(folder, secret) == []


def test_the_command_forgets_a_user(folder: Path) -> None:
    secret, control = token(), token()
    user = "u-" + token()
    folder.mkdir()
    db = folder / "m.db"
    # the bundled model: the command opens the vector index with the model it was built with
    with MemoryManager(str(db), embedding="default", vector_store="chroma") as mm:
        for n in range(3):
            mm.save_message(f"s{n}", Message(role="user", content=f"{secret} {n}"), user_id=user)
        mm.save_message("other", Message(role="user", content=control), user_id="other")
        mm.flush()
    done = subprocess.run(
        [sys.executable, "-m", "harombe_core.cli", "forget", "--user", user, "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "3 sessions" in done.stdout, done.stdout
    assert files_holding(folder, secret) == []  # before any other process opened the store
    assert files_holding(folder, user) == []
    assert "m.db" in files_holding(folder, control)
    with MemoryManager(str(db), embedding="default", vector_store="chroma") as mm:
        assert mm.list_sessions(user_id=user) == []
        assert [m.content for m in mm.search_similar(control, top_k=5)] == [control]


def test_connections_zero_deleted_rows_whatever_the_build_default(folder: Path) -> None:
    folder.mkdir()
    with MemoryManager(str(folder / "m.db"), embedding=None) as mm:
        assert mm.store.query("PRAGMA secure_delete")[0][0] == 1


def test_the_schema_trigger_names_the_erasure_keys() -> None:
    from harombe_core.store.erasure import ERASED_KEYWORDS, ERASED_VECTORS
    from harombe_core.store.schema import MIGRATIONS

    trigger = next(s for m in MIGRATIONS for s in m if "sessions_erased" in s)
    assert f"'{ERASED_KEYWORDS}'" in trigger
    assert f"'{ERASED_VECTORS}'" in trigger


def test_every_keyword_table_of_the_file_is_compacted(folder: Path) -> None:
    """User memory keeps its own FTS5 index (``facts_fts``, schema migration 7); the close
    after a deletion merges it too, so a forgotten fact's words leave its pages. Its rows are
    written by hand here, so that only the compaction can remove their words."""
    secret = token()
    folder.mkdir()
    with MemoryManager(str(folder / "m.db"), embedding=None) as mm:
        rows = [(n + 1, f"{secret} {n}") for n in range(30)] + [(99, "kept fact")]
        mm.store.transaction(
            lambda c: c.executemany("INSERT INTO facts_fts (rowid, text) VALUES (?, ?)", rows),
            adds_messages=False,
        )
        mm.store.transaction(
            lambda c: c.execute("DELETE FROM facts_fts WHERE rowid < 99"), adds_messages=False
        )
        mm.save_message("s", Message(role="user", content="hello"))
        mm.delete_session("s")  # a deletion: the close owes a compaction
    assert files_holding(folder, secret) == []


def test_a_damaged_index_set_aside_is_erased_with_the_deleted_vectors(folder: Path) -> None:
    # A damaged Chroma folder is moved aside and rebuilt; the copy kept every vector and owner
    # it held, so a later deletion left the deleted user's id and vectors in it for good.
    folder.mkdir()
    secret, control = token(), token()
    with open_manager(folder / "m.db", "chroma") as mm:
        mm.create_session(session_id=f"s{secret}", user_id=secret)
        mm.save_message(f"s{secret}", Message(role="user", content="hello"))
        mm.save_message("keep", Message(role="user", content=control), user_id=control)
        mm.flush()
    index = folder / "m.db.chroma" / "chroma.sqlite3"
    data = bytearray(index.read_bytes())
    for page in range(3, len(data) // 4096):  # the header intact, the tables damaged
        data[page * 4096 + 100 : page * 4096 + 200] = b"\xa5" * 100
    index.write_bytes(bytes(data))
    with open_manager(folder / "m.db", "chroma") as mm:
        mm.flush()
        assert list(folder.glob("m.db.chroma.corrupt-*"))  # set aside, as intended
        assert any("corrupt-" in f for f in files_holding(folder, secret))
        mm.forget_user(secret)
    assert files_holding(folder, secret) == []
    assert files_holding(folder, control)
