"""What LangGraph's own saver tests (run by tests/upstream/run.py) found HarombeSaver doing
otherwise, each case run on LangGraph's saver as the control and on HarombeSaver: checkpoint
metadata keeps ``writes``, a dotted ``list`` filter key is a path into nested metadata (as
SqliteSaver reads it), and a saver is an ``async with`` context manager (as InMemorySaver is)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from harombe_core.errors import HarombeError, InvalidInputError
from langchain_harombe import HarombeSaver

CONFIG: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}


@contextlib.contextmanager
def _saver(kind: str, tmp_path: Path) -> Iterator[BaseCheckpointSaver]:
    if kind == "sqlite":
        with SqliteSaver.from_conn_string(str(tmp_path / "control.db")) as saver:
            yield saver
    elif kind == "memory":
        yield InMemorySaver()
    else:
        with HarombeSaver(storage_path=str(tmp_path / "memory.db")) as saver:
            yield saver


@pytest.mark.parametrize("kind", ["sqlite", "memory", "harombe"])
def test_metadata_keeps_writes_and_finds_it_by_filter(kind: str, tmp_path: Path) -> None:
    metadata: Any = {"source": "loop", "step": 1, "writes": {"foo": "bar"}}
    with _saver(kind, tmp_path) as saver:
        saver.put(CONFIG, empty_checkpoint(), metadata, {})
        got = saver.get_tuple(CONFIG)
        assert got is not None
        assert got.metadata == metadata
        found = list(saver.list(None, filter={"writes": {"foo": "bar"}}))
        assert [t.metadata["step"] for t in found] == [1]


def test_writes_that_are_not_json_are_left_out_not_refused(tmp_path: Path) -> None:
    """Older LangGraph graphs put message objects in ``writes``: the step is kept, without that
    value (as PostgresSaver always leaves it out); any other non-JSON metadata is still refused."""
    with HarombeSaver(storage_path=str(tmp_path / "memory.db")) as saver:
        metadata: Any = {"source": "loop", "step": 1, "writes": {"n": [HumanMessage("hi")]}}
        saver.put(CONFIG, empty_checkpoint(), metadata, {})
        got = saver.get_tuple(CONFIG)
        assert got is not None
        assert got.metadata == {"source": "loop", "step": 1}
        with pytest.raises(InvalidInputError, match="must be JSON"):
            saver.put(CONFIG, empty_checkpoint(), {"step": 2, "m": HumanMessage("x")}, {})  # type: ignore[typeddict-unknown-key]


@pytest.mark.parametrize("kind", ["sqlite", "harombe"])
def test_a_dotted_filter_key_is_a_path_into_nested_metadata(kind: str, tmp_path: Path) -> None:
    metadata: Any = {"access-level": "public", "user": {"access-level": "nested", "1a": "ok"}}
    with _saver(kind, tmp_path) as saver:
        saver.put(CONFIG, empty_checkpoint(), metadata, {})
        for wanted in [
            {"access-level": "public"},
            {"user.access-level": "nested"},
            {"user.1a": "ok"},
            {"user": {"access-level": "nested", "1a": "ok"}},
        ]:
            assert len(list(saver.list(None, filter=wanted))) == 1, wanted
        for unwanted in [{"user.access-level": "public"}, {"user.1a.x": "ok"}]:
            assert list(saver.list(None, filter=unwanted)) == [], unwanted


@pytest.mark.parametrize("kind", ["memory", "harombe"])
def test_a_key_with_a_dot_matches_as_written(kind: str, tmp_path: Path) -> None:
    """A metadata key that has a dot in it is matched as written first (InMemorySaver's way)."""
    with _saver(kind, tmp_path) as saver:
        saver.put(CONFIG, empty_checkpoint(), {"a.b": 1}, {})  # type: ignore[typeddict-unknown-key]
        assert len(list(saver.list(None, filter={"a.b": 1}))) == 1


@pytest.mark.parametrize("kind", ["memory", "harombe"])
async def test_a_saver_is_an_async_context_manager(kind: str, tmp_path: Path) -> None:
    made = (
        InMemorySaver() if kind == "memory" else HarombeSaver(storage_path=str(tmp_path / "m.db"))
    )
    async with made as saver:
        assert saver is made
        await saver.aput(CONFIG, empty_checkpoint(), {"step": 0}, {})  # type: ignore[typeddict-item]
        assert await saver.aget_tuple(CONFIG) is not None
    if isinstance(made, HarombeSaver):  # leaving closed the database it opened
        with pytest.raises(HarombeError, match="closed"):
            made.get_tuple(CONFIG)
