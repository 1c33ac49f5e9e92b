"""A rebuild of the vector index (reindex, re-embedding, backfill) killed with SIGKILL at random
moments, then reopened: ``flush()`` returns only when the index holds every message again, and
vector search finds each one.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.reliability import vector_workers as w

ROUNDS = 2


def _kill_during(target: Callable[[str, str], None], path: str, tmp: Path, delay: float) -> str:
    """Run ``target`` in a child and SIGKILL it ``delay`` seconds after it starts its work."""
    started = tmp / f"started-{time.monotonic_ns()}"
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=target, args=(path, str(started)))
    process.start()
    w.wait_for(started, "go", process)
    time.sleep(delay)
    os.kill(process.pid or 0, signal.SIGKILL)
    process.join(timeout=30)
    return started.read_text(encoding="utf-8")


def _assert_all_searchable(path: str, ids: list[int], rng: random.Random) -> None:
    with w.manager(path) as mm:
        mm.flush()
        index = mm._semantic.index
        assert index is not None  # this process owns the index: the killed one let go
        assert sorted(index.ids()) == sorted(ids)
        assert index.count() == len(ids)
        assert mm.stats()["pending_embeddings"] == 0
        assert w.missing_from_search(mm, rng.sample(ids, 100)) == []
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.slow
@pytest.mark.parametrize("rebuild", [w.reindex, w.reembed], ids=["reindex", "reembed"])
def test_reindex_killed_at_random_moments_then_flush_finds_everything(
    tmp_path: Path, rebuild: Callable[[str, str], None]
) -> None:
    path = str(tmp_path / "memory.db")
    ids = w.fill(path)
    rng = random.Random(os.getpid())
    for _ in range(ROUNDS):
        delay = rng.uniform(0.0, 1.0)
        outcome = _kill_during(rebuild, path, tmp_path, delay)
        try:
            _assert_all_searchable(path, ids, rng)
        except AssertionError as exc:
            raise AssertionError(f"after a kill {delay:.3f} s into it ({outcome}): {exc}") from exc


@pytest.mark.slow
def test_backfill_killed_at_random_moments_then_flush_finds_everything(tmp_path: Path) -> None:
    rng = random.Random(os.getpid())
    for round_ in range(ROUNDS):
        path = str(tmp_path / f"memory{round_}.db")
        ids = w.fill(path, semantic=False)  # stored without vectors: all pending
        delay = rng.uniform(0.0, 1.5)
        outcome = _kill_during(w.backfill, path, tmp_path, delay)
        try:
            _assert_all_searchable(path, ids, rng)
        except AssertionError as exc:
            raise AssertionError(f"after a kill {delay:.3f} s into it ({outcome}): {exc}") from exc
