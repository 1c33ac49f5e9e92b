"""The ``harombe`` command, driven through typer's CliRunner against real SQLite files."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harombe_core import cli
from harombe_core.cli import app
from harombe_core.manager import MemoryManager
from harombe_core.models import Message

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Render tables 200 columns wide so a row's text stays on one line for the asserts."""
    monkeypatch.setattr(cli, "console", Console(width=200))


T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[str]:
    """A database with two users' sessions, one of them long enough to window."""
    path = str(tmp_path / "memory.db")
    with MemoryManager(path, embedding=None) as mm:
        mm.create_session(system_prompt="Be brief.", user_id="ann", session_id="alpha")
        mm.save_messages(
            "alpha",
            [
                Message(
                    role="user" if i % 2 == 0 else "assistant",
                    content=f"turn number {i} " + "word " * 20,
                    created_at=T0 + timedelta(minutes=i),
                )
                for i in range(10)
            ],
        )
        mm.save_message("beta", Message(role="user", content="hello from bob"), user_id="bob")
        mm.save_messages(
            "tools",
            [
                Message(
                    role="assistant",
                    content="",
                    tool_calls=[
                        {
                            "id": "c9",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"q": "x"}'},
                        }
                    ],
                ),
                Message(role="tool", content="found [it]", tool_call_id="c9"),
            ],
            user_id="ann",
        )
    return path


def test_help_lists_every_command() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in ("sessions", "history", "export", "import", "prune", "stats", "demo"):
        assert name in result.output


def test_sessions_table_newest_first_and_filters(db: str) -> None:
    result = runner.invoke(app, ["sessions", "--db", db])
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.index("tools") < out.index("beta") < out.index("alpha")
    assert "hello from bob" in out
    assert " 10 " in out  # alpha's message count
    only_ann = runner.invoke(app, ["sessions", "--db", db, "--user", "ann"]).output
    assert "alpha" in only_ann
    assert "beta" not in only_ann
    limited = runner.invoke(app, ["sessions", "--db", db, "--limit", "1"]).output
    assert "tools" in limited
    assert "alpha" not in limited
    assert "The 1 most recent shown; --limit N lists more." in limited
    assert "--limit N lists more" not in out  # all three shown
    nobody = runner.invoke(app, ["sessions", "--db", db, "--user", "zed"])
    assert nobody.exit_code == 0
    assert "No sessions for user zed" in nobody.output


def test_db_defaults_to_the_environment_variable(db: str) -> None:
    result = runner.invoke(app, ["stats"], env={"HAROMBE_DB": db})
    assert result.exit_code == 0, result.output
    assert "sessions" in result.output
    assert " 3 " in result.output


def test_history_shows_messages_and_the_token_window(db: str) -> None:
    with MemoryManager(db, embedding=None) as mm:
        window = mm.get_window("alpha", 120)
        total = len(mm.get_messages("alpha"))
    inside = len([m for m in window.messages if m.role != "system"])
    assert 0 < inside < total
    result = runner.invoke(app, ["history", "alpha", "--db", db, "--max-tokens", "120"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "System prompt: Be brief." in out
    assert "turn number 0" in out
    assert "turn number 9" in out
    assert out.count(" out ") == total - inside
    assert out.count(" in ") >= inside
    assert f"the newest {inside} of {total} messages ({window.tokens} tokens" in " ".join(
        out.split()
    )
    assert f"{total - inside} older messages fall outside" in " ".join(out.split())


def test_history_shows_tool_calls_and_keeps_brackets_literal(db: str) -> None:
    result = runner.invoke(app, ["history", "tools", "--db", db])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert 'lookup({"q": "x"}) [id c9]' in flat
    assert "found [it]" in flat


def test_export_to_stdout_file_and_folder(db: str, tmp_path: Path) -> None:
    out = runner.invoke(app, ["export", "alpha", "--format", "json", "--db", db])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["metadata"]["session_id"] == "alpha"
    assert len(doc["nodes"]) == 10

    target = tmp_path / "all.jsonl"
    written = runner.invoke(app, ["export", "--format", "jsonl", "--out", str(target), "--db", db])
    assert written.exit_code == 0, written.output
    lines = target.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    assert "all.jsonl" in written.output

    text = runner.invoke(app, ["export", "beta", "-f", "text", "--db", db])
    assert "user: hello from bob" in text.stdout

    folder = tmp_path / "per-session"
    folder.mkdir()
    split = runner.invoke(app, ["export", "--out-dir", str(folder), "--db", db])
    assert split.exit_code == 0, split.output
    assert sorted(p.name for p in folder.iterdir()) == ["alpha.json", "beta.json", "tools.json"]


def test_export_refuses_to_escape_the_folder(db: str, tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    result = runner.invoke(
        app, ["export", "alpha", "--out-dir", str(folder), "--out", "../x.json", "--db", db]
    )
    assert result.exit_code == 1
    assert "outside the export folder" in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "x.json").exists()


def test_an_import_of_many_sessions_names_a_few(tmp_path: Path) -> None:
    source = str(tmp_path / "many.db")
    with MemoryManager(source, embedding=None) as mm:
        for i in range(14):
            mm.save_message(f"s{i:02}", Message(role="user", content=f"note {i}"))
    export_file = tmp_path / "many.jsonl"
    runner.invoke(app, ["export", "-f", "jsonl", "-o", str(export_file), "--db", source])
    result = runner.invoke(
        app, ["import", str(export_file), "--db", str(tmp_path / "to.db"), "--no-embed"]
    )
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "Imported 14 sessions (14 messages)" in said
    assert "and 4 more" in said
    assert said.count(", s") == 9  # ten ids shown


def test_import_round_trip_and_conflicts(db: str, tmp_path: Path) -> None:
    export_file = tmp_path / "backup.jsonl"
    runner.invoke(app, ["export", "-f", "jsonl", "-o", str(export_file), "--db", db])
    fresh = str(tmp_path / "fresh.db")
    result = runner.invoke(app, ["import", str(export_file), "--db", fresh])
    assert result.exit_code == 0, result.output
    assert "Imported 3 sessions (13 messages)" in " ".join(result.output.split())
    with MemoryManager(fresh, embedding=None) as a, MemoryManager(db, embedding=None) as b:
        assert [m.content for m in a.get_messages("alpha")] == [
            m.content for m in b.get_messages("alpha")
        ]
        assert a.get_session("alpha").system_prompt == "Be brief."

    again = runner.invoke(app, ["import", str(export_file), "--db", fresh])
    assert again.exit_code == 1
    assert "already in the store" in again.stderr
    skipped = runner.invoke(
        app, ["import", str(export_file), "--db", fresh, "--on-conflict", "skip"]
    )
    assert skipped.exit_code == 0
    assert "Skipped (already stored)" in skipped.output
    renamed = runner.invoke(
        app, ["import", str(export_file), "--db", fresh, "--on-conflict", "new-id"]
    )
    assert renamed.exit_code == 0
    with MemoryManager(fresh, embedding=None) as a:
        assert a.stats()["sessions"] == 6
    bad_policy = runner.invoke(
        app, ["import", str(export_file), "--db", fresh, "--on-conflict", "x"]
    )
    assert bad_policy.exit_code == 1
    assert "--on-conflict must be error, new-id or skip" in bad_policy.stderr


def test_import_of_a_bad_file_is_one_line_and_changes_nothing(db: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": "9.0", "nodes": []}', encoding="utf-8")
    result = runner.invoke(app, ["import", str(bad), "--db", db])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: bad.json: file: format version '9.0' is not supported")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    with MemoryManager(db, embedding=None) as mm:
        assert mm.stats()["sessions"] == 3


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no file at"),
        ('{"version": "1.0", "sessions": [{"version": "1.0", "nodes": [{"role": "u', "not valid"),
        ('{"messages": [{"role": "user", "content": "ok"}]}\n{"messages": 1}\n', "line 2"),
    ],
    ids=["missing", "cut-short", "bad-line"],
)
def test_import_of_a_bad_file_into_a_new_path_creates_no_database(
    tmp_path: Path, content: str | None, message: str
) -> None:
    source = tmp_path / "export.json"
    if content is not None:
        source.write_text(content, encoding="utf-8")
    target = tmp_path / "new" / "memory.db"
    result = runner.invoke(app, ["import", str(source), "--db", str(target)])
    assert result.exit_code == 1
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not target.parent.exists()


def test_prune_dry_run_then_delete(db: str) -> None:
    with sqlite3.connect(db) as conn:  # age one session: last activity in 1970
        conn.execute("UPDATE sessions SET updated_at = 0 WHERE id = 'beta'")
    conn.close()
    dry = runner.invoke(app, ["prune", "--days", "30", "--dry-run", "--db", db])
    assert dry.exit_code == 0, dry.output
    assert "Would delete 1 session idle for more than 30 days." in dry.output
    assert "beta" in dry.output
    done = runner.invoke(app, ["prune", "--days", "30", "--db", db])
    assert "Deleted 1 session with no activity in the last 30 days" in " ".join(done.output.split())
    with MemoryManager(db, embedding=None) as mm:
        assert sorted(s.id for s in mm.list_sessions(limit=None)) == ["alpha", "tools"]
    assert runner.invoke(app, ["prune", "--db", db]).exit_code == 2  # --days is required


def test_stats_table(db: str) -> None:
    result = runner.invoke(app, ["stats", "--db", db])
    assert result.exit_code == 0, result.output
    rows = {
        " ".join(line.strip("│ ").split("│")[0].split()): line.split("│")[-2].strip()
        for line in result.output.splitlines()
        if line.count("│") == 3
    }
    assert rows["sessions"] == "3"
    assert rows["users"] == "2"
    assert rows["messages"] == "13"
    assert rows["location"].endswith("memory.db")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["history", "nope"], "no session 'nope'"),
        (["export", "nope"], "no session 'nope'"),
        (["export", "--format", "xml"], "unknown format 'xml'"),
        (["search", "hello", "--session", "nosuch", "--keyword"], "no session 'nosuch'"),
        (["search", "hello", "--user", "nobody", "--keyword"], "user 'nobody' has no sessions"),
        (["export", "--user", "nobody"], "user 'nobody' has no sessions"),
        (["history", "alpha", "--max-tokens", "-1"], None),
    ],
)
def test_error_paths_exit_1_with_one_line(db: str, args: list[str], message: str | None) -> None:
    result = runner.invoke(app, [*args, "--db", db])
    if message is None:  # rejected by the option parser itself
        assert result.exit_code == 2
        return
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ")
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_foreign_file_as_db_is_refused_and_untouched(tmp_path: Path) -> None:
    foreign = tmp_path / "notes.txt"
    foreign.write_text("my shopping list\n")
    for command in (["sessions"], ["stats"], ["history", "x"], ["import", str(foreign)]):
        result = runner.invoke(app, [*command, "--db", str(foreign)])
        assert result.exit_code == 1, command
        assert "not a harombe database" in result.stderr
        assert "Traceback" not in result.output
    assert foreign.read_text() == "my shopping list\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_missing_db_is_reported_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    result = runner.invoke(app, ["sessions", "--db", str(missing)])
    assert result.exit_code == 1
    assert f"no database at {missing}" in result.stderr
    assert not missing.exists()


def test_history_last_shows_only_the_newest_with_their_positions(db: str) -> None:
    result = runner.invoke(app, ["history", "alpha", "--db", db, "--last", "2"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "(showing the newest 2)" in out
    assert "turn number 8" in out
    assert "turn number 9" in out
    assert "turn number 7" not in out
    assert "│  9 │" in out or "│ 9 │" in out


def test_history_in_a_narrow_terminal_folds_text_instead_of_cropping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "console", Console(width=80))
    path = str(tmp_path / "n.db")
    code = "out.append(parse(rows[i]))_and_a_very_long_identifier_without_any_spaces_at_all"
    with MemoryManager(path, embedding=None) as mm:
        mm.save_message("s", Message(role="user", content=code))
    result = runner.invoke(app, ["history", "s", "--db", path])
    assert result.exit_code == 0, result.output
    cells = [line.split("│")[-2].strip() for line in result.output.splitlines() if "│" in line]
    assert code in "".join(cells)
    assert "…" not in result.output


def test_version() -> None:
    from harombe_core import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"harombe {__version__}"


def test_export_out_dir_creates_a_missing_folder(db: str, tmp_path: Path) -> None:
    folder = tmp_path / "exports" / "today"
    result = runner.invoke(app, ["export", "--out-dir", str(folder), "--db", db])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in folder.iterdir()) == ["alpha.json", "beta.json", "tools.json"]
    named = runner.invoke(
        app, ["export", "beta", "--out-dir", str(tmp_path / "new"), "--out", "b.json", "--db", db]
    )
    assert named.exit_code == 0, named.output
    assert (tmp_path / "new" / "b.json").is_file()
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    refused = runner.invoke(app, ["export", "--out-dir", str(a_file), "--db", db])
    assert refused.exit_code == 1
    assert "is a file" in refused.stderr


def test_an_import_never_creates_the_folder_a_mistyped_db_names(db: str, tmp_path: Path) -> None:
    exported = tmp_path / "alpha.json"
    written = runner.invoke(app, ["export", "alpha", "--out", str(exported), "--db", db])
    assert written.exit_code == 0
    missing = tmp_path / "no-such-folder" / "x.db"
    result = runner.invoke(app, ["import", str(exported), "--db", str(missing)])
    assert result.exit_code == 1
    assert "does not exist" in result.stderr
    assert not missing.parent.exists()


def test_import_writes_no_progress_bar_when_stderr_is_not_a_terminal(
    db: str, tmp_path: Path
) -> None:
    """Piped or captured output stays clean: a bar is for someone watching a terminal."""
    import subprocess
    import sys

    exported = tmp_path / "alpha.json"
    assert (
        runner.invoke(app, ["export", "alpha", "--out", str(exported), "--db", db]).exit_code == 0
    )
    target = str(tmp_path / "semantic.db")
    done = subprocess.run(
        [sys.executable, "-m", "harombe_core.cli", "import", str(exported), "--db", target],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Embedded them" in done.stdout
    assert "%|" not in done.stderr, done.stderr
