"""A memory used from a real Jupyter kernel, as a notebook user does: cells with top-level
``await``, a cell re-run that opens a second manager on the same file without closing the
first, an interrupt (the kernel's own SIGINT, as the stop button sends) in the middle of a
write loop, sync and async, and then a kernel killed mid-write (restart) whose file the next
kernel opens cleanly. After each, the next cells still work and every write a cell saw
acknowledged is there: in the database, by keyword and by vector (after ``flush``).

The interrupt is sent once the loop has acknowledged some writes (the cell drops a marker
file; the test waits for that file, not for a time), so it lands inside a save, between saves
or inside the wait of an ``await``, whichever the kernel is doing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, DeadKernelError

pytestmark = pytest.mark.slow

SETUP = """
import asyncio, json, os
from pathlib import Path
from harombe_core import MemoryManager, Message
from harombe_core.testing import FakeEmbedder

DB, WORK = {db!r}, Path({work!r})

def acknowledge(i, text):
    acked.append((i, text))
    with open(WORK / "acked.jsonl", "a") as f:
        f.write(json.dumps([i, text]) + "\\n")
        f.flush()
    if len(acked) == 5:
        (WORK / "marker").touch()   # the test interrupts the kernel once it sees this

acked = []
mm = MemoryManager(DB, embedding=FakeEmbedder())
"""

# re-run of the setup cell: a second manager on the same file, the first left open
REOPEN = "mm = MemoryManager(DB, embedding=FakeEmbedder())"

AWAIT = """
i = await mm.asave_message("nb", Message(role="user", content="top level await works"))
acknowledge(i, "top level await works")
await mm.aflush(timeout=60)
(await mm.asearch("await works", session_id="nb"))[0].message.content
"""

SYNC_LOOP = """
acked.clear()
for n in range(1_000_000):
    text = f"sync loop message {n} zz{n}qq"
    acknowledge(mm.save_message("nb", Message(role="user", content=text)), text)
"""

ASYNC_LOOP = """
acked.clear()
for n in range(1_000_000):
    text = f"async loop message {n} yy{n}qq"
    acknowledge(await mm.asave_message("nb", Message(role="user", content=text)), text)
"""

CHECK = """
every = [tuple(json.loads(line)) for line in open(WORK / "acked.jsonl")]
mm.save_message("nb", Message(role="user", content="after the interrupt"))
await mm.aflush(timeout=60)
stored = {m.id: m.content for m in await mm.aget_messages("nb")}
missing = [t for i, t in every if stored.get(i) != t]
word = lambda t: t.split()[-1]
keyword = [t for i, t in every if not any(
    h.message.id == i for h in mm.search(word(t), top_k=3, session_id="nb"))]
vector = [t for i, t in every if not any(
    m.id == i for m in mm.search_similar(t, top_k=3, session_id="nb"))]
print(json.dumps({"acked": len(every), "missing": missing, "keyword": keyword,
                  "vector": vector}))
"""

KILLED_LOOP = """
acked.clear()
for n in range(1_000_000):
    text = f"killed loop message {n} kk{n}qq"
    acknowledge(mm.save_message("nb", Message(role="user", content=text)), text)
"""


def _cell(source: str) -> Any:
    return nbformat.v4.new_code_cell(source)


Run = Callable[[str], str]


@contextlib.contextmanager
def _kernel(folder: Path) -> Iterator[tuple[NotebookClient, Run]]:
    """A real ipykernel (the ``python3`` kernel of this environment) and a ``run(source)``
    that executes one more cell in it and returns its text output."""
    notebook = nbformat.v4.new_notebook()
    client = NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
    )

    def run(source: str) -> str:
        cell = _cell(source)
        notebook.cells.append(cell)
        client.execute_cell(cell, len(notebook.cells) - 1)
        return "".join(
            out.get("text", "") + str(out.get("data", {}).get("text/plain", ""))
            for out in cell.outputs
        )

    with client.setup_kernel():
        yield client, run


def _when_marked(marker: Path, act: Callable[[], None]) -> threading.Thread:
    """Do ``act`` once the running cell has acknowledged a few writes (it drops ``marker``):
    a poll for the file, not a timing assumption."""

    marker.unlink(missing_ok=True)  # (left by the cell before)

    def watch() -> None:
        seen = threading.Event()
        while not seen.wait(0.01):
            if marker.exists():
                seen.set()
        act()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _interrupt(client: NotebookClient) -> Callable[[], None]:
    """The notebook's stop button: the kernel manager's interrupt (SIGINT to the kernel)."""
    assert client.km is not None
    km = client.km
    return lambda: asyncio.run(km.interrupt_kernel())


def _kill(client: NotebookClient) -> Callable[[], None]:
    """The kernel dies as a restart or an out-of-memory kill ends it: SIGKILL."""
    assert client.km is not None
    assert client.km.provisioner is not None
    process = client.km.provisioner.process  # type: ignore[attr-defined]
    return lambda: os.kill(process.pid, signal.SIGKILL)


def _checked(run: Run) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(run(CHECK).strip().splitlines()[-1])
    assert report["acked"] >= 5
    assert report["missing"] == []
    assert report["keyword"] == []
    assert report["vector"] == []
    return report


@pytest.mark.timeout(300)
def test_a_notebook_rerun_interrupted_and_killed_keeps_every_acknowledged_write(
    tmp_path: Path,
) -> None:
    db, marker = str(tmp_path / "nb.db"), tmp_path / "marker"
    setup = SETUP.format(db=db, work=str(tmp_path))
    with _kernel(tmp_path) as (client, run):
        run(setup)
        run(setup)  # the setup cell run twice
        run(REOPEN)  # and a second manager on the file, the first still open
        assert "top level await works" in run(AWAIT)

        # ipykernel stops a sync cell with KeyboardInterrupt, an awaiting one by cancelling it
        for loop, stopped_by in ((SYNC_LOOP, "KeyboardInterrupt"), (ASYNC_LOOP, "CancelledError")):
            interrupter = _when_marked(marker, _interrupt(client))
            with pytest.raises(CellExecutionError) as raised:
                run(loop)
            assert raised.value.ename == stopped_by
            interrupter.join(60)
            _checked(run)  # further cells work, nothing acknowledged is lost

        killer = _when_marked(marker, _kill(client))
        with pytest.raises(DeadKernelError):
            run(KILLED_LOOP)
        killer.join(60)

    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with _kernel(tmp_path) as (client, run):  # a new kernel opens the file cleanly
        run(setup)
        report = _checked(run)
    assert report["acked"] == len((tmp_path / "acked.jsonl").read_text().splitlines())
