"""``HarombeMemory.get`` reads O(window) rows, whatever the session's length.

The window is the core's (``MemoryManager.get_context`` with LlamaIndex's token counting): the
memory never reads the whole session to choose it. The proof counts the message rows the store
turns into messages while ``get`` runs: every read of a message row, by any statement of either
store, goes through ``row_to_message``. A 30-message session and a 3,000-message one (same
newest turns) must read exactly the same number of rows, for every strategy.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import rows
from llamaindex_harombe import HarombeMemory
from llamaindex_harombe import memory as memory_module


@contextmanager
def rows_read() -> Iterator[list[int]]:
    """Count the message rows read while the block runs (``seen[0]``)."""
    original = rows.row_to_message
    seen = [0]

    def counted(row: Any) -> Message:
        seen[0] += 1
        return original(row)

    patched = [
        module
        for module in list(sys.modules.values())
        if module is not None and getattr(module, "row_to_message", None) is original
    ]
    for module in patched:
        module.row_to_message = counted  # type: ignore[attr-defined]
    try:
        yield seen
    finally:
        for module in patched:
            module.row_to_message = original  # type: ignore[attr-defined]


def history(length: int) -> list[Message]:
    """``length`` messages: older filler, then the same 30 newest messages whatever the
    length, every 7th of those flagged important (the hybrid strategy looks for them)."""
    out: list[Message] = []
    for n in range(length):
        role = "user" if n % 2 == 0 else "assistant"
        tail = n - (length - 30)
        meta = {"important": True} if tail >= 0 and tail % 7 == 3 else {}
        text = "older filler" if tail < 0 else f"turn {tail} of the migration"
        out.append(Message(role=role, content=text, metadata=meta))
    return out


def build(
    path: Path | str, length: int, strategy: str, **options: Any
) -> tuple[MemoryManager, HarombeMemory]:
    """A memory of ``length`` messages (:func:`history`) on ``path`` (a file or a URL)."""
    mm = MemoryManager(str(path), embedding=None)
    fields: dict[str, Any] = {"token_limit": 120, "rag": False, **options}
    memory = HarombeMemory.from_defaults(
        manager=mm,
        session_id="long",
        strategy=strategy,
        thread_selector="linear",
        keep_last=4,
        system_prompt="You are terse.",
        **fields,
    )
    messages = history(length)
    if strategy == "threaded":
        for chunk in range(0, length, 500):
            memory.put_messages([to_chat(m) for m in messages[chunk : chunk + 500]])
    else:
        mm.save_messages("long", messages)
    return mm, memory


def to_chat(message: Message) -> ChatMessage:
    return ChatMessage(role=message.role, content=message.content)


def reads_of(memory: HarombeMemory) -> tuple[list[ChatMessage], int, list[str]]:
    """The window, the rows it read and the store operations it ran (by name)."""
    memory.get()
    memory.manager.flush()  # a long backlog is summarised in the background: wait for it
    memory.get()
    store, ran = memory.manager.store, []
    run, caller = store.run, threading.get_ident()

    def running(op: Any) -> Any:
        if threading.get_ident() == caller:  # not a background thread's work
            ran.append(op.body.__qualname__.split(".")[0])
        return run(op)

    store.run = running  # type: ignore[method-assign]
    try:
        with rows_read() as seen:
            window = memory.get()
    finally:
        del store.run
    return window, seen[0], ran


@pytest.mark.parametrize("strategy", ["simple", "summarization", "hybrid", "threaded"])
def test_window_reads_do_not_grow_with_the_session(tmp_path: Path, strategy: str) -> None:
    counts = {}
    windows = {}
    statements = {}
    for length in (30, 3000):
        mm, memory = build(tmp_path / f"{length}.db", length, strategy)
        try:
            window, read, statements[length] = reads_of(memory)
            counts[length] = read
            windows[length] = [m.content for m in window if m.role.value != "system"]
        finally:
            mm.close()
    assert windows[30], strategy
    assert windows[3000] == windows[30]  # the same newest turns, the same window
    assert counts[3000] == counts[30], counts
    assert statements[3000] == statements[30], statements  # the same reads, one by one
    # A 120-token window of ~10-token messages: a few dozen rows at most, never the session.
    # (The adapter's own copy of the strategies read 3,007 rows for hybrid and 3,000 for
    # threaded here; it is gone.)
    assert counts[3000] < 60, counts


@pytest.mark.parametrize("strategy", ["simple", "summarization", "hybrid", "threaded"])
async def test_aget_reads_on_postgres_async_path(
    pg_url: str, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``aget`` is ``get``'s flow driven on the manager's async methods: on PostgreSQL its
    owner check, its recall query (the newest user message) and the core's window are each one
    store operation in a worker thread (the store's ``arun``, as on SQLite), none wrapping the
    whole call; so is each read of the core retriever's recall (its search is a flow too)."""
    # recall from every session, with no input: for the newest user turn
    mm, memory = build(pg_url, 60, strategy, token_limit=200, rag=True, rag_scope="all")
    try:
        mm.save_messages("earlier", [Message(role="user", content="turn 29 of the migration")])
        mm.summarize_session("long")  # nothing left to fold on the request path
        want = [(m.role, m.content) for m in memory.get()]
        assert "turn 29 of the migration" in want[1][1]  # recalled from the earlier session
        hops: list[str] = []

        async def counting(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            hops.append(getattr(fn, "__name__", repr(fn)))
            return fn(*args, **kwargs)

        with monkeypatch.context() as patched:
            patched.setattr(asyncio, "to_thread", counting)
            got = [(m.role, m.content) for m in await memory.aget()]
        assert got == want
        assert hops.count("run") >= 4, hops  # owner check, recall query and search, window
        assert set(hops) == {"run"}, hops
    finally:
        mm.close()


def test_the_memory_runs_nothing_in_threads_itself() -> None:
    """No ``asyncio.to_thread`` in the memory: its async methods are flows or awaits."""
    source = Path(memory_module.__file__).read_text(encoding="utf-8")
    assert "to_thread" not in source
