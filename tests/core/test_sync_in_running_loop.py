"""The sync API called from inside a running event loop (a notebook cell without ``await``,
a FastAPI sync helper called from an async route, a framework calling a sync method from its
async path) works: it blocks the loop for the call, and never waits on the loop itself, so
it cannot deadlock, even with async calls of the same manager in flight."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.testing import FakeEmbedder


@pytest.mark.timeout(120)
def test_sync_calls_inside_a_running_loop_with_async_calls_in_flight(tmp_path: Path) -> None:
    with MemoryManager(str(tmp_path / "m.db"), embedding=FakeEmbedder()) as mm:

        async def writer(k: int) -> list[int]:
            return [
                await mm.asave_message("s", Message(role="user", content=f"async {k} {j}"))
                for j in range(10)
            ]

        async def main() -> tuple[list[list[int]], list[int]]:
            tasks = [asyncio.ensure_future(writer(k)) for k in range(8)]
            await asyncio.sleep(0)  # the tasks start, then the loop is blocked by sync calls
            sync_ids = []
            for j in range(10):
                sync_ids.append(mm.save_message("s", Message(role="user", content=f"sync {j}")))
                mm.search("async", top_k=3, session_id="s")
                mm.get_context("s")
            mm.flush(timeout=60)
            return await asyncio.wait_for(asyncio.gather(*tasks), 60), sync_ids

        async_ids, sync_ids = asyncio.run(main())
        stored = {m.id for m in mm.get_messages("s")}
        assert stored == set(sync_ids) | {i for ids in async_ids for i in ids}
        assert len(stored) == 90


@pytest.mark.timeout(120)
def test_with_nest_asyncio_as_llamaindex_notebooks_apply_it(tmp_path: Path) -> None:
    """LlamaIndex's notebooks start with ``nest_asyncio.apply()``, which lets ``asyncio.run``
    nest inside the running loop; sync calls, nested ``asyncio.run`` of the async twins and
    awaited calls all work on one manager there. (In a subprocess: the patch is process-wide.)"""
    pytest.importorskip("nest_asyncio")
    script = f"""
import asyncio, nest_asyncio
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.testing import FakeEmbedder

nest_asyncio.apply()

async def cell():
    mm = MemoryManager({str(tmp_path / "n.db")!r}, embedding=FakeEmbedder())
    mm.save_message("s", Message(role="user", content="sync inside the loop"))
    asyncio.run(mm.asave_message("s", Message(role="user", content="nested asyncio.run")))
    await mm.asave_message("s", Message(role="user", content="awaited"))
    mm.flush(timeout=60)
    found = asyncio.run(mm.asearch("nested", session_id="s"))
    print(len(mm.get_messages("s")), found[0].message.content)
    mm.close()

asyncio.run(cell())
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=100, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "3 nested asyncio.run"
