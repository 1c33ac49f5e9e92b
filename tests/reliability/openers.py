"""Real processes for the reliability tests, and the sets of openers users combine.

A write counts as acknowledged only once the library call returned: the process then appends
one line to its own acknowledgement file and fsyncs it before the next write, so a SIGKILL can
cost at most the write in flight, whose line is then missing or torn (never counted).

Processes come from a ``forkserver`` that imported the library and both frameworks once, so
starting one costs milliseconds instead of seconds; the server forks before any database is
open, so no SQLite state crosses into them.
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
import os
import sqlite3
from collections import Counter
from collections.abc import Callable
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from harombe_core import MemoryManager, Message

#: The sets of openers one process holds on one file, as the README shows them.
KINDS = ("managers", "llamaindex", "langchain")

_PRELOAD = ["harombe_core", "langchain_harombe", "llamaindex_harombe", __name__]


def context() -> BaseContext:
    """The multiprocessing context for the test processes (see the module's docstring)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


class Acks:
    """An append-only file of acknowledged writes, one fsynced line per write."""

    def __init__(self, path: str | Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def record(self, content: str) -> None:
        os.write(self._fd, (content + "\n").encode("utf-8"))
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def acknowledged(path: str | Path) -> list[str]:
    """The complete lines of an acknowledgement file (a torn last line is not counted)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return text.split("\n")[:-1]


def stored_contents(db: str | Path) -> Counter[str]:
    """How many times each message content is in the database (read with plain sqlite3)."""
    raw = sqlite3.connect(db)
    try:
        return Counter(r[0] for r in raw.execute("SELECT content FROM messages"))
    finally:
        raw.close()


def integrity(db: str | Path) -> str:
    raw = sqlite3.connect(db)
    try:
        return str(raw.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        raw.close()


class Openers:
    """Several openers of one file in this process, written and read through in turn.

    ``managers``: two MemoryManagers, each written through its sync and async methods.
    ``llamaindex``: the README's pairing, a
    HarombeDBChatStore and a HarombeMemoryBlock each opened from the path. ``langchain``: a
    chat history and a retriever each opened from the path.
    """

    def __init__(self, kind: str, path: str, tag: str) -> None:
        self.kind = kind
        self.tag = tag
        self._closers: list[Callable[[], None]] = []
        self._writers: list[Callable[[str], None]] = []
        self._readers: list[Callable[[], object]] = []
        getattr(self, f"_open_{kind}")(path)

    def _open_managers(self, path: str) -> None:
        for n in range(2):
            mm = MemoryManager(path, embedding=None, token_counter="approximate")
            session = f"{self.tag}-manager{n}"
            self._closers.append(mm.close)
            self._writers.append(
                lambda text, mm=mm, s=session: mm.save_message(
                    s, Message(role="user", content=text)
                )
            )
            # The async twin runs on a worker thread of its own: a connection opened later.
            self._writers.append(
                lambda text, mm=mm, s=session: asyncio.run(
                    mm.asave_message(s, Message(role="user", content=text))
                )
            )
            self._readers.append(lambda mm=mm, s=session: mm.get_recent_messages(s, 200))

    def _open_llamaindex(self, path: str) -> None:
        from llama_index.core.llms import ChatMessage

        from llamaindex_harombe import HarombeDBChatStore, HarombeMemoryBlock

        # One event loop for the process, as an async application has: its worker threads
        # (and so their connections) live as long as the loop.
        loop = asyncio.new_event_loop()
        chat_store = HarombeDBChatStore(path, embedding=None)
        block = HarombeMemoryBlock(storage_path=path, scope="all", embedding=None)

        def close_loop() -> None:
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

        self._closers += [chat_store.close, block.close, close_loop]
        chat_key, block_key = f"{self.tag}-chat", f"{self.tag}-block"

        def to_chat_store(text: str) -> None:
            message = ChatMessage(role="user", content=text)
            loop.run_until_complete(chat_store.add_message(chat_key, message))

        def to_block(text: str) -> None:
            message = ChatMessage(role="user", content=text)
            loop.run_until_complete(block.aput([message], session_id=block_key))

        self._writers += [to_chat_store, to_block]
        self._readers += [
            lambda: loop.run_until_complete(chat_store.get_messages(chat_key)),
            lambda: loop.run_until_complete(
                block.aget([ChatMessage(role="user", content="message")], session_id=block_key)
            ),
        ]

    def _open_langchain(self, path: str) -> None:
        from langchain_core.messages import HumanMessage

        from langchain_harombe import HarombeChatMessageHistory, HarombeRetriever

        history = HarombeChatMessageHistory(
            f"{self.tag}-history", storage_path=path, manager_options={"embedding": None}
        )
        retriever = HarombeRetriever(
            storage_path=path, all_users=True, manager_options={"embedding": None}
        )
        self._closers += [history.close, retriever.close]
        self._writers.append(lambda text: history.add_messages([HumanMessage(content=text)]))
        self._readers += [lambda: history.messages, lambda: retriever.invoke("message")]

    def write(self, n: int, text: str) -> None:
        """Write ``text`` through opener ``n`` (modulo how many there are)."""
        self._writers[n % len(self._writers)](text)

    def write_acknowledged(self, numbers: range, prefix: str, log: Acks) -> None:
        """Write ``unique_text(prefix, i)`` for each number, acknowledging each once it
        returned."""
        for i in numbers:
            text = unique_text(prefix, i)
            self.write(i, text)
            log.record(text)

    def read_all(self) -> None:
        """Read through every opener (a retriever opens its manager on first use)."""
        for read in self._readers:
            read()

    def close(self) -> None:
        for close in self._closers:
            close()


def unique_text(prefix: str, i: int) -> str:
    """``f"{prefix} {i}"`` and a word no other text has (derived from both), so a search for
    the text finds it first however many near-twins ("writer2-19 message 5") there are."""
    word = "w" + hashlib.blake2b(f"{prefix} {i}".encode(), digest_size=5).hexdigest()
    return f"{prefix} {i} {word}"


def first_process(
    path: str, kind: str, acks: str, report: Any, go: Any, finish: Any
) -> None:
    """Hold the file through ``kind``'s openers while another process opens, writes, closes.

    Writes 5 messages, reports "ready", waits for ``go`` (the other process has closed),
    reports whether the -wal and -shm are still there, writes 5 more, reports "written" and
    then closes normally when ``finish`` is set (unless it was killed first).
    """
    log = Acks(acks)
    openers = Openers(kind, path, "first")
    openers.read_all()
    openers.write_acknowledged(range(5), f"first {kind} message", log)
    openers.read_all()
    report.put("ready")
    go.wait(60)
    report.put({"wal": os.path.exists(f"{path}-wal"), "shm": os.path.exists(f"{path}-shm")})
    openers.write_acknowledged(range(5, 10), f"first {kind} message", log)
    openers.read_all()
    report.put("written")
    finish.wait(60)
    openers.close()
    log.close()


def other_process(path: str, acks: str, count: int, tag: str) -> None:
    """Open the file, write ``count`` messages, close: what a second program (or a CLI) does."""
    log = Acks(acks)
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        for i in range(count):
            text = f"{tag} message {i}"
            mm.save_message(tag, Message(role="user", content=text))
            log.record(text)
    log.close()


def writer_process(path: str, acks: str, tag: str, count: int) -> None:
    """Write ``count`` messages through two managers of one file, then close and exit."""
    log = Acks(acks)
    openers = Openers("managers", path, tag)
    openers.write_acknowledged(range(count), f"{tag} message", log)
    openers.close()
    log.close()
