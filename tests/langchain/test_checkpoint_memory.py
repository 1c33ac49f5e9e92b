"""A saver keeps the channel values it wrote or read in memory and skips reading them again;
what it returns must still be what the database holds, whoever changed it since."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

from harombe_core.manager import MemoryManager
from langchain_harombe import HarombeSaver


def _checkpoint(todos: list[str], checkpoint_id: str) -> Checkpoint:
    """A checkpoint whose ``todos`` channel (stored apart from the checkpoint) is at version 1:
    the version an application reusing a thread id starts from again."""
    checkpoint = empty_checkpoint()
    checkpoint["id"] = checkpoint_id
    checkpoint["channel_values"] = {"todos": todos}
    checkpoint["channel_versions"] = {"todos": 1}
    return checkpoint


def _put(saver: BaseCheckpointSaver[Any], todos: list[str], checkpoint_id: str) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    saver.put(config, _checkpoint(todos, checkpoint_id), {"source": "input", "step": -1},
              {"todos": 1})


def _todos(saver: BaseCheckpointSaver[Any], checkpoint_id: str | None = None) -> Any:
    configurable = {"thread_id": "t", "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    found = saver.get_tuple({"configurable": configurable})
    assert found is not None
    return found.checkpoint["channel_values"]["todos"]


@pytest.fixture(params=["HarombeSaver", "SqliteSaver"])
def two_savers(
    request: pytest.FixtureRequest, backend_manager: MemoryManager, tmp_path: Path
) -> Iterator[tuple[BaseCheckpointSaver[Any], BaseCheckpointSaver[Any]]]:
    """Two savers on one database (as two processes would have), harombe's and LangGraph's."""
    if request.param == "HarombeSaver":
        yield HarombeSaver(backend_manager), HarombeSaver(backend_manager)
        return
    path = str(tmp_path / "langgraph.db")
    savers = []
    for _ in range(2):
        saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
        saver.setup()
        savers.append(saver)
    try:
        yield savers[0], savers[1]
    finally:
        for saver in savers:
            saver.conn.close()


def test_a_saver_reads_a_thread_another_saver_deleted_and_wrote_again(
    two_savers: tuple[BaseCheckpointSaver[Any], BaseCheckpointSaver[Any]],
) -> None:
    one, two = two_savers
    _put(one, ["buy milk"], "1")
    assert _todos(one) == ["buy milk"]
    two.delete_thread("t")
    _put(two, ["call mum"], "1")  # same thread, checkpoint id and channel version
    assert _todos(one) == ["call mum"]
    assert _todos(two) == ["call mum"]


def test_a_warm_saver_reads_what_a_new_one_reads(backend_manager: MemoryManager) -> None:
    """A put whose channel version is already stored keeps the stored value (blobs are written
    once); the saver that made the put must not answer from what it tried to write."""
    saver = HarombeSaver(backend_manager)
    _put(saver, ["buy milk"], "1")
    _put(saver, ["call mum"], "2")
    fresh = HarombeSaver(backend_manager)
    assert _todos(saver, "2") == _todos(fresh, "2") == ["buy milk"]
    assert _todos(saver, "1") == _todos(fresh, "1")


def test_pruned_values_are_never_read_from_memory(backend_manager: MemoryManager) -> None:
    """Pruning deletes values no checkpoint needs; a value stored again under the same version
    afterwards is the one read, by the saver that read the old one too."""
    saver, other = HarombeSaver(backend_manager), HarombeSaver(backend_manager)
    _put(saver, ["buy milk"], "1")
    assert _todos(saver) == ["buy milk"]
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    newer = _checkpoint(["x"], "2")
    newer["channel_values"] = {}
    newer["channel_versions"] = {}
    other.put(config, newer, {"source": "loop", "step": 0}, {})
    other.prune(["t"])  # checkpoint 1 and its todos are gone
    _put(other, ["call mum"], "3")
    assert _todos(saver) == ["call mum"]
