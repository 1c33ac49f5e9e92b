"""The general form: many openers of both frameworks on one file in this process, several
other processes writing it at the same time, some of them killed with SIGKILL at random
moments, others closing normally and starting again.

Every write acknowledged anywhere (a call that returned) must be in the file exactly once at
the end, and the file must pass ``PRAGMA integrity_check``.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from llama_index.core.llms import ChatMessage

from harombe_core import MemoryManager, Message
from harombe_core.store.sqlite_file import open_files
from langchain_harombe import HarombeChatMessageHistory, HarombeRetriever, HarombeStore
from llamaindex_harombe import HarombeDBChatStore, HarombeMemory, HarombeMemoryBlock
from tests.reliability.openers import (
    acknowledged,
    context,
    integrity,
    stored_contents,
    unique_text,
    writer_process,
)

WRITERS = 3
SECONDS = 6.0


class InProcess:
    """Managers and adapters of both frameworks, each opened from the path, in this process."""

    def __init__(self, db: str) -> None:
        self.db = db
        # An event loop for each thread that drives the async adapters.
        self.loop, self.read_loop = asyncio.new_event_loop(), asyncio.new_event_loop()
        self.managers = [MemoryManager(db, embedding=None), MemoryManager(db, embedding=None)]
        self.history = HarombeChatMessageHistory(
            "history", storage_path=db, manager_options={"embedding": None}
        )
        self.retriever = HarombeRetriever(
            storage_path=db, all_users=True, manager_options={"embedding": None}
        )
        self.items = HarombeStore(storage_path=db)
        self.chat_store = HarombeDBChatStore(db, embedding=None)
        self.block = HarombeMemoryBlock(storage_path=db, scope="all", embedding=None)
        self.memory = HarombeMemory.from_defaults(
            storage_path=db, session_id="memory", embedding=None
        )
        self.retriever.invoke("open")
        self.acked: list[str] = []
        self.items_acked: list[str] = []

    def files(self) -> set[int]:
        managers = [
            *self.managers,
            self.history.manager,
            self.retriever._memory(),
            self.items.manager,
            self.chat_store.manager,
            self.block.manager,
            self.memory.manager,
        ]
        return {id(m.store.file) for m in managers}  # type: ignore[attr-defined]

    def writers(self) -> list[Callable[[str], None]]:
        run = self.loop.run_until_complete

        def manager(n: int) -> Callable[[str], None]:
            return lambda text: self.managers[n].save_message(
                "managers", Message(role="user", content=text)
            )

        def manager_async(text: str) -> None:
            run(self.managers[1].asave_message("managers", Message(role="user", content=text)))

        def item(text: str) -> None:
            self.items.put(("notes",), text, {"text": text})
            self.items_acked.append(text)

        return [
            manager(0),
            manager_async,
            lambda text: self.history.add_messages([HumanMessage(content=text)]),
            lambda text: run(
                self.chat_store.add_message("chat", ChatMessage(role="user", content=text))
            ),
            lambda text: run(
                self.block.aput([ChatMessage(role="user", content=text)], session_id="block")
            ),
            lambda text: self.memory.put(ChatMessage(role="user", content=text)),
            item,
        ]

    def reopen_second_manager(self) -> None:
        """Close one opener and open it again while every other keeps working."""
        old = self.managers[1]
        self.managers[1] = MemoryManager(self.db, embedding=None)
        old.close()

    def read_everything(self) -> None:
        self.retriever.invoke("message")
        assert self.history.messages is not None
        self.read_loop.run_until_complete(
            self.block.aget([ChatMessage(role="user", content="message")], session_id="block")
        )
        self.memory.get()
        self.items.search(("notes",), limit=5)
        self.managers[0].search("message", top_k=3)

    def close(self) -> None:
        for closer in (
            self.history,
            self.retriever,
            self.items,
            self.chat_store,
            self.block,
            self.memory,
            *self.managers,
        ):
            closer.close()
        for loop in (self.loop, self.read_loop):
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()


def _items(db: str) -> list[str]:
    import sqlite3

    raw = sqlite3.connect(db)
    try:
        return [r[0] for r in raw.execute("SELECT key FROM store_items")]
    finally:
        raw.close()


def test_every_acknowledged_write_survives_openers_processes_and_kills(tmp_path: Path) -> None:
    seed = secrets.randbits(32)
    rng = random.Random(seed)
    db = str(tmp_path / "memory.db")
    here = InProcess(db)
    assert len(here.files()) == 1, "every opener in this process shares one file"
    errors: list[BaseException] = []
    stop = threading.Event()

    def write_loop() -> None:
        writers = here.writers()
        try:
            n = 0
            while not stop.is_set():
                text = unique_text("main message", n)
                writers[n % len(writers)](text)
                if n % len(writers) != len(writers) - 1:  # the last one writes an item
                    here.acked.append(text)
                n += 1
                if n % 40 == 0:
                    here.reopen_second_manager()
        except BaseException as exc:
            errors.append(exc)

    def read_loop() -> None:
        try:
            while not stop.is_set():
                here.read_everything()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write_loop), threading.Thread(target=read_loop)]
    for thread in threads:
        thread.start()

    ctx = context()
    running: dict[int, Any] = {}
    incarnations = 0
    kills = normal_exits = 0
    acks = tmp_path / "acks"
    acks.mkdir()

    def start(slot: int) -> None:
        nonlocal incarnations
        tag = f"writer{slot}-{incarnations}"
        incarnations += 1
        process = ctx.Process(
            target=writer_process,
            args=(db, str(acks / f"{tag}.acks"), tag, rng.randint(20, 80)),
        )
        process.start()
        running[slot] = process

    try:
        for slot in range(WRITERS):
            start(slot)
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline and not errors:
            time.sleep(rng.uniform(0.05, 0.25))
            for slot, process in list(running.items()):
                if not process.is_alive():
                    assert process.exitcode == 0, f"writer failed (seed {seed})"
                    normal_exits += 1
                    start(slot)
            if rng.random() < 0.5:
                slot = rng.randrange(WRITERS)
                running[slot].kill()  # SIGKILL; nothing if it has just exited on its own
                running[slot].join(timeout=30)
                if running[slot].exitcode == -signal.SIGKILL:
                    kills += 1
                else:
                    assert running[slot].exitcode == 0, f"writer failed (seed {seed})"
                    normal_exits += 1
                start(slot)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        for process in running.values():
            process.kill()
            process.join(timeout=30)
        here.close()
    assert errors == [], f"seed {seed}: {errors!r}"
    assert db not in [f.location for f in open_files()], "the last close closed the file"
    assert kills > 0, f"seed {seed}: no writer was killed"
    assert normal_exits > 0, f"seed {seed}: no writer closed normally"

    written = [line for f in sorted(acks.iterdir()) for line in acknowledged(f)]
    assert len(written) > 0
    stored = stored_contents(db)
    everything = here.acked + written
    missing_or_doubled = {t: stored[t] for t in everything if stored[t] != 1}
    assert missing_or_doubled == {}, f"seed {seed}"
    assert max(stored.values()) == 1, f"seed {seed}: a message was stored twice"
    items = _items(db)
    assert sorted(items) == sorted(here.items_acked), f"seed {seed}"
    assert integrity(db) == "ok", f"seed {seed}"

    # After flush(), search finds every acknowledged message: by keyword on the file as the
    # writers left it, and by meaning once a semantic manager has embedded the backlog.
    from harombe_core.testing import FakeEmbedder

    sample = rng.sample(everything, min(25, len(everything)))
    with MemoryManager(db, embedding=None) as plain, MemoryManager(
        db, embedding=FakeEmbedder()
    ) as semantic:
        semantic.flush()
        assert semantic.stats()["pending_embeddings"] == 0, f"seed {seed}: flush left some"
        for text in sample:
            for mm in (plain, semantic):
                hits = mm.search(text, top_k=3)  # each text has a word of its own
                found = [hit.message.content for hit in hits]
                assert text in found, f"seed {seed}: {text!r} not found, got {found}"
            assert hits[found.index(text)].vector_score is not None, "found by its vector too"
