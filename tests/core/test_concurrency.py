"""Several processes writing one database file, and a writer killed in the middle of a batch."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import time
import traceback
from pathlib import Path
from typing import Any

from harombe_core import MemoryManager, Message

WRITERS = 4
PER_WRITER = 500
BATCH = 25


def _writer(path: str, index: int, start: Any, report: Any) -> None:
    """Open the (possibly not yet existing) file, wait for the others, then save one by one."""
    try:
        with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
            start.wait(timeout=60)
            for i in range(PER_WRITER):
                mm.save_message(f"writer-{index}", Message(role="user", content=f"{index}:{i}"))
                if i % 5 == 0:  # and interleave with a session every writer shares
                    mm.save_message("shared", Message(role="assistant", content=f"{index}:{i}"))
        report.put((index, None))
    except BaseException:
        report.put((index, traceback.format_exc()))


def test_four_processes_write_one_file_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    report = context.Queue()
    processes = [
        context.Process(target=_writer, args=(path, i, start, report)) for i in range(WRITERS)
    ]
    for process in processes:
        process.start()
    start.set()
    results = dict(report.get(timeout=240) for _ in processes)
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert results == dict.fromkeys(range(WRITERS))  # no error surfaced to any writer

    with MemoryManager(path, embedding=None) as mm:
        total = WRITERS * PER_WRITER
        shared_total = WRITERS * len(range(0, PER_WRITER, 5))
        assert mm.stats()["messages"] == total + shared_total
        for index in range(WRITERS):
            messages = mm.get_messages(f"writer-{index}")
            assert [m.content for m in messages] == [f"{index}:{i}" for i in range(PER_WRITER)]
            assert [m.created_at for m in messages] == sorted(m.created_at for m in messages)
            assert mm.get_session(f"writer-{index}").message_count == PER_WRITER
        shared = mm.get_messages("shared")
        assert len(shared) == shared_total
        for index in range(WRITERS):  # each writer's turns keep their order in the shared session
            mine = [m.content for m in shared if m.content.startswith(f"{index}:")]
            assert mine == [f"{index}:{i}" for i in range(0, PER_WRITER, 5)]
        assert mm.get_session("shared").message_count == shared_total
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _acknowledging_writer(path: str, acks: str) -> None:
    """Save batches forever; after each commit, append the acknowledged ids to ``acks``."""
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm, open(
        acks, "a", encoding="utf-8"
    ) as out:
        for n in range(100_000):
            batch = [
                Message(role="user", content=f"batch {n} message {i} " + "x" * 200)
                for i in range(BATCH)
            ]
            ids = mm.save_messages("victim", batch)
            out.write(" ".join(map(str, ids)) + "\n")
            out.flush()  # in the kernel's hands before the next batch starts


def test_a_writer_killed_mid_batch_loses_nothing_acknowledged(tmp_path: Path) -> None:
    path = str(tmp_path / "killed.db")
    acks = tmp_path / "acks.txt"
    acks.touch()
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=_acknowledging_writer, args=(path, str(acks)))
    process.start()
    deadline = time.monotonic() + 120
    while len(acks.read_text(encoding="utf-8").splitlines()) < 40:
        assert process.is_alive(), "the writer died on its own"
        assert time.monotonic() < deadline, "the writer made no progress"
        time.sleep(0.01)
    os.kill(process.pid or 0, signal.SIGKILL)
    process.join(timeout=30)
    assert process.exitcode == -signal.SIGKILL

    lines = acks.read_text(encoding="utf-8").splitlines()
    complete = [line for line in lines if len(line.split()) == BATCH]  # the last may be torn
    acknowledged = {int(i) for line in complete for i in line.split()}
    assert len(acknowledged) >= 40 * BATCH

    with MemoryManager(path, embedding=None) as mm:  # opens: no corruption, no stale lock
        stored = mm.get_messages("victim")
        stored_ids = {m.id for m in stored}
        assert acknowledged <= stored_ids
        assert len(stored) % BATCH == 0  # every batch is all or nothing
        assert mm.get_session("victim").message_count == len(stored)
        mm.save_message("victim", Message(role="user", content="life goes on"))
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
