"""Semantic memory shared by every manager on one database in a process, and the general form:
several managers in this process and other processes writing one database while some are
killed; after ``flush()`` vector search finds every acknowledged message, whichever process
holds the index (this one, or one that was killed)."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harombe_core import MemoryManager, Message
from harombe_core.errors import EmbeddingModelMismatchError, InvalidInputError
from harombe_core.testing import FakeEmbedder, InMemoryVectorIndex
from tests.reliability import vector_workers as w


def test_managers_on_one_database_share_one_semantic_memory(tmp_path: Path) -> None:
    path = str(tmp_path / "memory.db")
    before = w.embedders()
    first, second, third = w.manager(path), w.manager(path), w.manager(path)
    try:
        assert first._semantic is second._semantic is third._semantic
        assert w.embedders() == before + 1  # one embedder, however many openers
        index = first._semantic.index
        assert index is not None
        ids = first.save_messages(
            "s", [Message(role="user", content=w.text("s", i)) for i in range(10)]
        )
        first.close()
        second.close()
        assert third._semantic.index is index  # still open for the last opener
        ids += third.save_messages(
            "s", [Message(role="user", content=w.text("s", i)) for i in range(10, 20)]
        )
        third.flush()
        assert sorted(index.ids()) == sorted(ids)
        assert w.missing_from_search(third, ids) == []
    finally:
        for mm in (first, second, third):
            mm.close()
    assert w.embedders() == before
    with w.manager(path) as again:  # the folder was given back: a new opener holds it
        assert again._semantic.index is not None
        assert again._semantic.index.count() == 20


def test_a_second_opener_must_ask_for_the_same_model_and_index(tmp_path: Path) -> None:
    path = str(tmp_path / "memory.db")
    with w.manager(path) as mm:
        with pytest.raises(EmbeddingModelMismatchError, match="shares one model"):
            MemoryManager(path, embedding=FakeEmbedder(dimension=64), vector_store="chroma")
        with pytest.raises(InvalidInputError, match="another vector index"):
            MemoryManager(path, embedding=FakeEmbedder(), vector_store=InMemoryVectorIndex())
        with w.manager(path) as same:  # an equal model (another object) is the same model
            assert same._semantic is mm._semantic


def _save_in_threads(managers: list[Any], rounds: int) -> list[int]:
    """Each manager saves from its own thread, all at once; returns the acknowledged ids."""
    acked: list[int] = []
    lock = threading.Lock()

    def save(n: int, mm: Any) -> None:
        for i in range(rounds):
            sid = f"main{n}"
            mid = mm.save_message(sid, Message(role="user", content=w.text(sid, i)))
            with lock:
                acked.append(mid)

    threads = [threading.Thread(target=save, args=(n, mm)) for n, mm in enumerate(managers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return acked


def _start_writer(context: Any, path: str, name: str, acks: Path, count: int) -> Any:
    acks.touch()
    process = context.Process(target=w.writer, args=(path, name, str(acks), count, 0.002))
    process.start()
    return process


def _kill_after(process: Any, acks: Path, at_least: int, rng: random.Random) -> None:
    deadline = time.monotonic() + 120
    while len(w.read_acks(acks)) < at_least:
        assert process.is_alive(), "the writer died on its own"
        assert time.monotonic() < deadline, "the writer made no progress"
        time.sleep(0.005)
    time.sleep(rng.uniform(0.0, 0.2))
    os.kill(process.pid, signal.SIGKILL)
    process.join(timeout=30)
    assert process.exitcode == -signal.SIGKILL


def _hold_index_until_killed(path: str, ready: str) -> None:
    with w.manager(path) as mm:
        assert mm._semantic.index is not None
        Path(ready).write_text("go", encoding="utf-8")
        for i in range(100_000):  # writes too, so it is killed mid-work
            mm.save_message("holder", Message(role="user", content=w.text("holder", i)))
            time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.parametrize("holder", ["this-process", "killed-process"])
def test_managers_and_processes_with_kills_then_flush_finds_every_acknowledged_message(
    tmp_path: Path, holder: str
) -> None:
    path = str(tmp_path / "memory.db")
    rng = random.Random(os.getpid())
    context = multiprocessing.get_context("spawn")
    holding = None
    if holder == "killed-process":  # another process holds the index, and is killed
        ready = tmp_path / "ready"
        holding = context.Process(target=_hold_index_until_killed, args=(path, str(ready)))
        holding.start()
        w.wait_for(ready, "go", holding)
    managers = [w.manager(path) for _ in range(3)]
    try:
        assert (managers[0]._semantic.index is None) == (holder == "killed-process")
        acks = {name: tmp_path / f"{name}.acks" for name in ("steady", "victim")}
        steady = _start_writer(context, path, "steady", acks["steady"], 150)
        victim = _start_writer(context, path, "victim", acks["victim"], 100_000)
        acked = set(_save_in_threads(managers, 50))
        _kill_after(victim, acks["victim"], 60, rng)
        if holding is not None:
            os.kill(holding.pid or 0, signal.SIGKILL)
            holding.join(timeout=30)
        steady.join(timeout=120)
        assert steady.exitcode == 0
        acked |= w.read_acks(acks["steady"]) | w.read_acks(acks["victim"])

        managers[1].flush()
        assert w.missing_from_search(managers[2], acked) == []
        assert managers[0].stats()["pending_embeddings"] == 0

        deadline = time.monotonic() + 30  # the index is taken over once its holder is gone
        while managers[0]._semantic.index is None and time.monotonic() < deadline:
            time.sleep(0.05)
        index = managers[0]._semantic.index
        assert index is not None
        managers[0].flush()
        assert set(index.ids()) >= acked
        assert w.missing_from_search(managers[1], acked) == []
    finally:
        for mm in managers:
            mm.close()
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_adapters_on_one_database_share_it_and_find_each_others_messages(
    tmp_path: Path,
) -> None:
    from langchain_core.messages import HumanMessage

    from langchain_harombe import HarombeChatMessageHistory, HarombeRetriever

    path = str(tmp_path / "memory.db")
    before = w.embedders()
    options = {"embedding": FakeEmbedder(), "token_counter": "approximate"}
    history = HarombeChatMessageHistory(
        "chat", storage_path=path, user_id="ann", manager_options={"embedding": None}
    )  # no vectors
    similar = HarombeRetriever(
        storage_path=path, user_id="ann", search_type="similarity", k=5, manager_options=options
    )
    hybrid = HarombeRetriever(storage_path=path, user_id="ann", k=5, manager_options=dict(options))
    try:
        history.add_messages([HumanMessage(content=w.text("chat", i)) for i in range(10)])
        assert similar._memory()._semantic is hybrid._memory()._semantic
        assert w.embedders() == before + 1
        similar._memory().flush()
        ids = [int(m.id or 0) for m in similar._memory().get_messages("chat")]
        assert w.missing_from_search(hybrid._memory(), ids) == []
        found = similar.invoke(w.text("chat", 3))
        assert w.text("chat", 3) in [d.page_content for d in found]
    finally:
        history.close()
        similar.close()
        hybrid.close()
    assert w.embedders() == before
