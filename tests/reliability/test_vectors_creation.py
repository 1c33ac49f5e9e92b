"""Six processes create one new store with semantic memory at the same moment, then write and
search while the others do: no process fails, no row is lost, the live index is never set
aside, and every acknowledged message is found by vector search afterwards."""

from __future__ import annotations

import multiprocessing
import sqlite3
import traceback
from pathlib import Path
from typing import Any

import pytest

from harombe_core import MemoryManager, Message

PROCESSES = 6
PER_PROCESS = 50
BATCH = 5


def _token(writer: int, i: int) -> str:
    return f"w{writer}n{i}"


def _open_write_search(path: str, writer: int, start: Any, report: Any) -> None:
    """Open at the same instant as the others, save in batches, search after each batch."""
    errors: list[str] = []
    acked: list[int] = []
    try:
        start.wait(timeout=120)
        with MemoryManager(
            path, embedding="default", vector_store="chroma", token_counter="approximate"
        ) as mm:
            for b in range(0, PER_PROCESS, BATCH):
                batch = [
                    Message(role="user", content=f"{_token(writer, i)} a note on subject {i}")
                    for i in range(b, b + BATCH)
                ]
                acked += mm.save_messages(f"writer-{writer}", batch)
                try:
                    mm.search_similar(f"note on subject {b}", top_k=3, keyword_weight=0)
                except Exception as exc:
                    errors.append(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")
            mm.flush()
    except BaseException:
        errors.append(traceback.format_exc())
    report.put((writer, acked, errors))


@pytest.mark.slow
def test_six_processes_create_one_store_with_semantic_memory_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "new.db")
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    report = context.Queue()
    processes = [
        context.Process(target=_open_write_search, args=(path, w, start, report))
        for w in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    start.set()
    reports = [report.get(timeout=300) for _ in processes]
    results = {w: (acked, errors) for w, acked, errors in reports}
    for process in processes:
        process.join(timeout=60)
    failures = {w: errors for w, (_, errors) in results.items() if errors}
    assert failures == {}
    acknowledged = {i for acked, _ in results.values() for i in acked}
    assert len(acknowledged) == PROCESSES * PER_PROCESS

    assert sorted(p.name for p in tmp_path.iterdir() if "corrupt" in p.name) == []
    with MemoryManager(path, embedding="default", vector_store="chroma") as mm:
        assert mm.stats()["messages"] == PROCESSES * PER_PROCESS
        mm.flush()
        assert mm.stats()["pending_embeddings"] == 0
        index = mm._semantic.index
        assert index is not None
        assert set(index.ids()) >= acknowledged
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
