"""``harombe check PATH`` on a sound file, a file with a byte range overwritten, derived rows
without their sources, and a path with no database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from harombe_core import MemoryManager, Message
from harombe_core.cli import app
from harombe_core.cli_check import check_file

runner = CliRunner()


def _filled(path: Path) -> str:
    with MemoryManager(str(path), embedding=None) as mm:
        for s in range(20):
            sid = mm.create_session(user_id=f"u{s}")
            mm.save_messages(
                sid,
                [
                    Message(role="user", content=f"note {i} about topic {s} " * 20)
                    for i in range(30)
                ],
            )
    return str(path)


def test_a_sound_file_passes(tmp_path: Path) -> None:
    db = _filled(tmp_path / "m.db")
    result = runner.invoke(app, ["check", db])
    assert result.exit_code == 0, result.output
    assert "quick_check: ok" in result.output
    assert "messages_fts integrity-check: ok" in result.output
    assert "sound" in result.output


def test_bytes_overwritten_in_the_middle_fail(tmp_path: Path) -> None:
    db = _filled(tmp_path / "m.db")
    size = Path(db).stat().st_size
    with open(db, "r+b") as f:  # the file is closed: no SQLite holds it
        f.seek(size // 2)
        f.write(b"\xff" * 8192)
    result = runner.invoke(app, ["check", db])
    assert result.exit_code in (1, 2), result.output
    assert "FAILED" in result.output


def test_derived_rows_without_their_source_are_counted(tmp_path: Path) -> None:
    db = _filled(tmp_path / "m.db")
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO message_vectors (message_id, vector) VALUES (999999, x'00')")
    conn.commit()
    conn.close()
    code, results = check_file(db)
    assert code == 1
    assert (
        "message vectors without their message",
        False,
        "1 row(s): run `harombe reindex`",
    ) in results


def test_no_file_is_exit_code_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["check", str(tmp_path / "none.db")])
    assert result.exit_code == 2
    assert "no file" in result.output
