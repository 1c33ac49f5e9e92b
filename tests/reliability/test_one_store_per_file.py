"""One file, one store per process: every opener of a database file shares its connections.

Managers, LangChain histories, retrievers and stores, LlamaIndex chat stores, memory blocks and
memories, and the CLI all reach the same :class:`SQLiteFile` for one real path; it closes with
the last of them. Keys must agree, ``:memory:`` stays private, threads may open at once, and a
fork neither carries connections into the child nor loses the parent's.
"""

from __future__ import annotations

import asyncio
import builtins
import gc
import io
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harombe_core import MemoryManager, Message
from harombe_core.cli import app
from harombe_core.errors import EncryptionKeyError, StoreError
from harombe_core.store import ops, sqlite_file
from harombe_core.store.sqlite import SQLiteStore
from harombe_core.store.sqlite_file import SQLiteFile, open_files
from tests.reliability.openers import integrity, stored_contents


def _manager(path: str | Path, **options: Any) -> MemoryManager:
    return MemoryManager(path, embedding=None, token_counter="approximate", **options)


def _say(text: str) -> Message:
    return Message(role="user", content=text)


def _open_under(folder: Path) -> list[SQLiteFile]:
    """The database files open in this process that lie in ``folder`` (other tests' aside)."""
    return [f for f in open_files() if Path(f.location).is_relative_to(folder)]


@pytest.fixture(autouse=True)
def _no_file_left_open(tmp_path: Path) -> Any:
    """Every test closes what it opened: none of its database files stays open behind it."""
    yield
    gc.collect()
    MemoryManager(":memory:", embedding=None).close()  # releases stores collected unclosed
    assert _open_under(tmp_path) == []


def test_every_path_spelling_reaches_one_file(tmp_path: Path, monkeypatch: Any) -> None:
    db = tmp_path / "memory.db"
    (tmp_path / "link.db").symlink_to(db)
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path / "folder")
    monkeypatch.setenv("HOME", str(tmp_path))
    spellings = [db, str(db), tmp_path / "link.db", "../memory.db", "~/memory.db"]
    managers = [_manager(p) for p in spellings]
    try:
        assert len({id(m.store.file) for m in managers}) == 1  # type: ignore[attr-defined]
        assert _open_under(tmp_path) == [managers[0].store.file]  # type: ignore[attr-defined]
        for n, mm in enumerate(managers):
            mm.save_message("s", _say(f"through spelling {n}"))
        assert [m.content for m in managers[-1].get_messages("s")] == [
            f"through spelling {n}" for n in range(len(spellings))
        ]
    finally:
        for mm in managers:
            mm.close()


def test_framework_adapters_opened_from_a_path_share_the_file(tmp_path: Path) -> None:
    from langchain_harombe import HarombeChatMessageHistory, HarombeRetriever, HarombeStore
    from llamaindex_harombe import (
        HarombeDBChatStore,
        HarombeMemory,
        HarombeMemoryBlock,
    )
    from llamaindex_harombe import (
        HarombeRetriever as LlamaRetriever,
    )

    db = str(tmp_path / "memory.db")
    history = HarombeChatMessageHistory(
        "s", storage_path=db, manager_options={"embedding": None}
    )
    retriever = HarombeRetriever(
            storage_path=db, all_users=True, manager_options={"embedding": None}
        )
    retriever.invoke("anything")  # opens its manager
    item_store = HarombeStore(storage_path=db)
    chat_store = HarombeDBChatStore(db, embedding=None)
    block = HarombeMemoryBlock(storage_path=db, embedding=None)
    memory = HarombeMemory.from_defaults(
        storage_path=db, session_id="m", user_id="ann", embedding=None
    )
    llama_retriever = LlamaRetriever(storage_path=db, all_users=True, embedding=None)
    managers = [
        history.manager,
        retriever._memory(),
        item_store.manager,
        chat_store.manager,
        block.manager,
        memory.manager,
        llama_retriever._manager,
    ]
    closers = [history, retriever, item_store, chat_store, block, memory, llama_retriever]
    try:
        files = {id(m.store.file) for m in managers}  # type: ignore[attr-defined]
        assert len(files) == 1
        assert len(_open_under(tmp_path)) == 1
        for closer in closers[:-1]:  # closing all but one keeps the file open for it
            closer.close()
        assert len(_open_under(tmp_path)) == 1
        assert llama_retriever._manager.store.file.closed is False  # type: ignore[attr-defined]
    finally:
        for closer in closers:
            closer.close()
    assert _open_under(tmp_path) == []


def test_the_cli_shares_the_file_of_an_open_manager(tmp_path: Path, monkeypatch: Any) -> None:
    db = str(tmp_path / "memory.db")
    created: list[object] = []
    original = sqlite_file.SQLiteFile.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        created.append(self)
        original(self, *args, **kwargs)

    with _manager(db) as mm:
        mm.save_message("trip", _say("we fly to Lisbon"))
        monkeypatch.setattr(sqlite_file.SQLiteFile, "__init__", counting)
        result = CliRunner().invoke(app, ["history", "trip", "--db", db])
        assert result.exit_code == 0, result.output
        assert "Lisbon" in result.output
        assert created == []  # the CLI's manager used the open file
        mm.save_message("trip", _say("still writable after the CLI closed"))
        assert len(mm.get_messages("trip")) == 2


def test_a_second_opener_with_another_key_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("sqlcipher3")
    db = tmp_path / "secret.db"
    plain = tmp_path / "plain.db"
    with _manager(db, encryption_key="right") as mm, _manager(plain) as open_plain:
        with pytest.raises(EncryptionKeyError, match="another encryption key"):
            _manager(db, encryption_key="wrong")
        with pytest.raises(EncryptionKeyError, match="another encryption key"):
            _manager(db)  # no key at all
        with pytest.raises(EncryptionKeyError, match="without encryption"):
            _manager(plain, encryption_key="right")
        with _manager(db, encryption_key="right") as same:
            assert same.store.file is mm.store.file  # type: ignore[attr-defined]
        mm.save_message("s", _say("still fine"))
        open_plain.save_message("s", _say("also fine"))


def test_in_memory_stores_stay_private() -> None:
    with _manager(":memory:") as one, _manager(":memory:") as two:
        assert one.store.file is not two.store.file  # type: ignore[attr-defined]
        one.save_message("s", _say("only in one"))
        assert two.get_messages("s") == []
        files = open_files()
        assert one.store.file not in files  # type: ignore[attr-defined]
        assert two.store.file not in files  # type: ignore[attr-defined]


def test_closing_one_opener_leaves_the_others_working(tmp_path: Path) -> None:
    db = str(tmp_path / "memory.db")
    first, second = _manager(db), _manager(db)
    stop = threading.Event()
    errors: list[BaseException] = []
    written: list[int] = []

    def keep_writing() -> None:
        try:
            while not stop.is_set():
                written.append(second.save_message("busy", _say(f"busy {len(written)}")))
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=keep_writing)
    worker.start()
    try:
        while len(written) < 20:
            threading.Event().wait(0.01)
        first.close()
        first.close()  # twice is harmless
        with pytest.raises(StoreError, match="closed"):
            first.save_message("s", _say("too late"))
        count = len(written)
        while len(written) < count + 20:
            threading.Event().wait(0.01)
    finally:
        stop.set()
        worker.join()
    assert errors == []
    assert second.store.file.closed is False  # type: ignore[attr-defined]
    assert [m.id for m in second.get_messages("busy")] == written
    second.close()
    assert second.store.file.closed  # type: ignore[attr-defined]
    assert not Path(f"{db}-wal").exists()  # the last close checkpointed and removed it


def test_an_atomic_block_takes_in_every_opener_of_the_file_on_its_thread(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with _manager(db) as one, _manager(db) as two:

        def both_then_fail() -> None:
            one.save_message("s", _say("through one"))
            two.save_message("s", _say("through two"))
            raise RuntimeError("changed my mind")

        with pytest.raises(RuntimeError, match="changed my mind"):
            one.atomic(both_then_fail)
        assert two.get_messages("s") == []
        one.atomic(
            lambda: [
                one.save_message("s", _say("through one")),
                two.save_message("s", _say("through two")),
            ]
        )
        assert [m.content for m in two.get_messages("s")] == ["through one", "through two"]


def test_threads_opening_at_once_share_one_file(tmp_path: Path) -> None:
    db = str(tmp_path / "memory.db")
    barrier = threading.Barrier(8)
    managers: list[MemoryManager] = []
    lock = threading.Lock()

    def open_and_write(n: int) -> None:
        barrier.wait()
        mm = _manager(db)
        mm.save_message(f"t{n}", _say(f"thread {n}"))
        with lock:
            managers.append(mm)

    threads = [threading.Thread(target=open_and_write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(managers) == 8
    assert len({id(m.store.file) for m in managers}) == 1  # type: ignore[attr-defined]
    for mm in managers:
        mm.close()
    assert stored_contents(db) == {f"thread {n}": 1 for n in range(8)}


def test_a_store_dropped_without_close_gives_its_file_back(tmp_path: Path) -> None:
    mm = _manager(tmp_path / "forgotten.db")
    file = mm.store.file  # type: ignore[attr-defined]
    del mm
    gc.collect()
    _manager(":memory:").close()  # the next open releases what was dropped
    assert file.closed


def test_the_library_never_opens_the_database_file_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing any descriptor of the file would drop SQLite's locks: only SQLite opens it."""
    db = tmp_path / "memory.db"
    with _manager(db) as mm:
        mm.save_message("s", _say("existing"))
    opened: list[str] = []

    def spy(original: Any) -> Any:
        def wrapper(file: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(file, (str, os.PathLike)):
                opened.append(os.fspath(file))
            return original(file, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(builtins, "open", spy(builtins.open))
    monkeypatch.setattr(io, "open", spy(io.open))
    monkeypatch.setattr(os, "open", spy(os.open))
    from langchain_harombe import HarombeChatMessageHistory

    first, second = _manager(db), _manager(str(db))
    history = HarombeChatMessageHistory("s", storage_path=db, manager_options={"embedding": None})
    history.add_user_message("through the history")
    first.save_message("s", _say("through the first"))
    assert "existing" in [h.message.content for h in second.search("existing")]
    asyncio.run(second.asave_message("s", _say("through a worker thread")))
    for closer in (history, first, second):
        closer.close()
    # (Only this test's file: a memory another test left open may still open its own files,
    # and the embedder's lock file beside the database is a file of its own.)
    database = {f"memory.db{end}" for end in ("", "-wal", "-shm", "-journal")}
    mine = [p for p in opened if os.path.dirname(os.path.abspath(p)) == str(tmp_path)]
    assert [p for p in mine if os.path.basename(p) in database] == []


def _child_writes(db: str, inherited: MemoryManager | None, tag: str) -> None:
    mm = inherited if inherited is not None else _manager(db)
    for i in range(5):
        mm.save_message(tag, _say(f"{tag} {i}"))
    threading.Event().wait(0.3)  # the parent closes its managers meanwhile
    for i in range(5, 10):
        mm.save_message(tag, _say(f"{tag} {i}"))


def test_a_forked_child_and_its_parent_lose_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "memory.db")
    parent = _manager(db)
    parent.save_message("parent", _say("parent 0"))
    ctx = multiprocessing.get_context("fork")
    children = [
        ctx.Process(target=_child_writes, args=(db, parent, "inherited")),
        ctx.Process(target=_child_writes, args=(db, None, "fresh")),
    ]
    for child in children:
        child.start()
    parent.save_message("parent", _say("parent 1"))  # reopens after the fork
    threading.Event().wait(0.15)
    parent.close()
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    expected = {"parent 0", "parent 1"} | {
        f"{tag} {i}" for tag in ("inherited", "fresh") for i in range(10)
    }
    assert stored_contents(db) == dict.fromkeys(expected, 1)
    assert integrity(db) == "ok"


def _child_uses(inherited: MemoryManager, result: Any) -> None:
    try:
        inherited.save_message("s", _say("from the child"))
        result.put("written")
    except StoreError as exc:
        result.put(str(exc))


def test_a_file_busy_at_fork_time_is_refused_in_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_file, "FORK_WAIT_SECONDS", 0.2)
    db = str(tmp_path / "memory.db")
    mm = _manager(db)
    store = mm.store
    assert isinstance(store, SQLiteStore)
    inside, release = threading.Event(), threading.Event()

    def hold(conn: Any) -> None:
        inside.set()
        release.wait(30)
        conn.execute("INSERT INTO harombe_meta (key, value) VALUES ('held', 'yes')")

    holder = threading.Thread(target=store.transaction, args=(hold,))
    holder.start()
    inside.wait(30)
    ctx = multiprocessing.get_context("fork")
    result = ctx.Queue()
    child = ctx.Process(target=_child_uses, args=(mm, result))
    child.start()
    message = result.get(timeout=60)
    child.join(timeout=60)
    release.set()
    holder.join()
    assert "was in use by another thread when this process was forked" in message
    mm.save_message("s", _say("the parent carries on"))
    assert store.run(ops.get_meta("held")) == "yes"
    mm.close()
    assert stored_contents(db) == {"the parent carries on": 1}
