"""LangGraph's own checkpointer conformance suite, run on HarombeSaver over SQLite and PostgreSQL.

``langgraph-checkpoint-conformance`` detects the capabilities a saver implements and runs
LangGraph's tests for each. HarombeSaver must implement all eight and pass every test (level
FULL, 8/8). LangGraph's own AsyncSqliteSaver runs the same suite as the control: it passes the
five base capabilities and does not implement ``delete_for_runs``, ``copy_thread`` or
``prune``. The report is printed (``pytest -s`` shows it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    ALL_CAPABILITIES,
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)
from langgraph.checkpoint.conformance.report import CapabilityReport

from harombe_core.manager import MemoryManager
from langchain_harombe import HarombeSaver


async def _validate_harombe(name: str, location: str) -> CapabilityReport:
    manager = MemoryManager(location, embedding=None)

    @checkpointer_test(name=name)
    async def factory() -> AsyncIterator[HarombeSaver]:
        yield HarombeSaver(manager)

    try:
        report = await validate(factory)
    finally:
        close_pool = getattr(manager.store, "aclose", None)  # PostgreSQL: its async pool too
        if close_pool is not None:
            await close_pool()
        manager.close()
    report.print_report()
    return report


def _assert_full(report: CapabilityReport) -> None:
    failures = [f for r in report.results.values() for f in r.failures]
    assert not failures, failures
    assert {c.value for c in ALL_CAPABILITIES} == {
        name for name, r in report.results.items() if r.detected and r.passed
    }
    assert report.conformance_level() == "FULL"


async def test_harombe_saver_is_fully_conformant_on_sqlite(tmp_path: Path) -> None:
    _assert_full(await _validate_harombe("HarombeSaver (SQLite)", str(tmp_path / "m.db")))


async def test_harombe_saver_is_fully_conformant_on_postgres(pg_url: str) -> None:
    _assert_full(await _validate_harombe("HarombeSaver (PostgreSQL)", pg_url))


async def test_langgraph_sqlite_saver_as_the_control(tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    @checkpointer_test(name="AsyncSqliteSaver")
    async def factory() -> AsyncIterator[AsyncSqliteSaver]:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "lg.db")) as saver:
            yield saver

    report = await validate(factory)
    report.print_report()
    for capability in BASE_CAPABILITIES:
        assert report.results[capability.value].passed, report.results[capability.value]
    for capability in EXTENDED_CAPABILITIES:
        assert not report.results[capability.value].detected
