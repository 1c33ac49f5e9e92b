"""benchmarks/bench_checkpoint.py feeds both savers the same growing agent thread and reports
what it names: a row per saver and length, and the ratios (no timing is asserted here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from langgraph.checkpoint.memory import InMemorySaver

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_checkpoint", ROOT / "benchmarks" / "bench_checkpoint.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while built
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_the_thread_grows_one_message_a_step_with_other_channels(bench: ModuleType) -> None:
    thread = bench.build_thread(12, InMemorySaver())
    sizes = [len(c["channel_values"]["messages"]) for c, _, _, _ in thread.steps]
    assert sizes == list(range(1, 13))
    kinds = [c["channel_values"]["messages"][-1].type for c, _, _, _ in thread.steps[:4]]
    assert kinds == ["human", "ai", "tool", "ai"]
    first, _, new_versions, write = thread.steps[0]
    assert {"messages", "step", "todos", "summary"} <= set(new_versions)
    assert write == ("messages", [first["channel_values"]["messages"][-1]])
    _, _, later, _ = thread.steps[3]
    assert "todos" not in later, "channels that did not change keep their version"


def test_a_run_reports_both_savers_at_each_length(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench.main(["--steps", "3", "6", "--repeat", "1", "--window", "2",
                       "--dir", str(tmp_path), "--agent-shapes"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(("Sqlite", "Harombe"))]
    assert [(r[0], r[1]) for r in rows] == [
        ("SqliteSaver", "3"), ("SqliteSaver", "6"), ("HarombeSaver", "3"), ("HarombeSaver", "6")]
    ratios = out.split("# ratio")[1].splitlines()[2:]
    assert [line.split()[0] for line in ratios if line.strip()] == ["3", "6"]
    assert "agent turn" not in out  # no shapes asked for


def test_a_run_times_whole_agent_turns_sync_and_async(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench.main(["--steps", "2", "--repeat", "1", "--window", "1",
                       "--dir", str(tmp_path), "--agent-shapes", "2x2"]) == 0
    tables = capsys.readouterr().out.split("# a whole agent turn")[1].split("\n## ")[1:]
    # The median turn, then every turn plus harombe's final flush (its background sessions).
    assert [t.splitlines()[0] for t in tables] == [
        "median turn", "all turns + final flush() (harombe), total ms"]
    for table in tables:
        rows = [line.split() for line in table.splitlines()[2:] if line.strip()]
        assert [(r[0], r[1], r[3]) for r in rows] == [("invoke", "2", "2"), ("ainvoke", "2", "2")]
        assert all(float(r[-1]) > 0 for r in rows)  # a ratio for each, whatever its value
