"""The ``harombe`` command reports every typed error and every bad option value as one line on
stderr with a non-zero exit code, never a traceback (driven through ``main``, the entry point)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harombe_core.cli import main
from harombe_core.manager import MemoryManager
from harombe_core.models import Message


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "memory.db")
    with MemoryManager(path, embedding=None) as mm:
        mm.save_message("alpha", Message(role="user", content="hello boats"), user_id="ann")
    return path


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    code = exit_.value.code
    return (code if isinstance(code, int) else 0), capsys.readouterr().err


def assert_one_line(err: str, *fragments: str) -> None:
    assert "Traceback" not in err
    assert err.startswith("error: ")
    assert err.strip().count("\n") == 0, err
    for fragment in fragments:
        assert fragment in err


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["sessions", "--limit", "abc"], "--limit"),
        (["sessions", "--limit", "-3"], "--limit"),
        (["sessions", "--limit", "0"], "--limit"),  # not "No sessions" on a full store
        (["search", "boats", "-k", "0"], "--top-k"),
        (["history"], "Missing argument"),
        (["no-such-command"], "No such command"),
        (["prune"], "--days"),
    ],
)
def test_a_bad_option_value_is_one_line_and_exit_2(
    db: str, args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run([*args, "--db", db] if args[0] != "no-such-command" else args, capsys)
    assert code == 2
    assert_one_line(err, fragment)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["history", "nope"], "no session 'nope'"),
        (["prune", "--days", "99999999"], "days must be between"),
        (["search", "a\udcffb"], "not valid Unicode"),  # undecodable bytes in argv
        (["sessions", "--user", "u" * 600], "user_id must be"),
        (["history", "alpha", "--max-tokens", str(2**64)], "max_tokens must be at most"),
        (["export", "--format", "csv"], "unknown format"),
    ],
)
def test_a_typed_error_is_one_line_and_exit_1(
    db: str, args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run([*args, "--db", db], capsys)
    assert code == 1
    assert_one_line(err, fragment)


def _export(db: str, tmp_path: Path) -> dict[str, object]:
    out = tmp_path / "export.json"
    with pytest.raises(SystemExit):
        main(["export", "alpha", "--db", db, "--out", str(out)])
    return json.loads(out.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@pytest.mark.parametrize("created_at", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00"])
def test_importing_a_time_outside_the_calendar_is_one_line(
    db: str, tmp_path: Path, created_at: str, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _export(db, tmp_path)
    doc["nodes"][0]["created_at"] = created_at  # type: ignore[index]
    path = tmp_path / "odd-time.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    capsys.readouterr()
    code, err = run(["import", str(path), "--db", db, "--on-conflict", "new-id"], capsys)
    assert code == 1
    assert_one_line(err, "outside the times harombe can store", "9999-12-31T23:59:59.999999Z")
    with MemoryManager(db, embedding=None) as mm:
        assert [s.id for s in mm.list_sessions()] == ["alpha"]


def test_importing_json_nested_100000_deep_is_one_line_in_a_real_process(
    db: str, tmp_path: Path
) -> None:
    path = tmp_path / "deep.json"
    depth = 100_000
    path.write_text(
        '{"version": "1.0", "nodes": [{"role": "user", "content": "x", "metadata": '
        + '{"a": ' * depth
        + "1"
        + "}" * depth
        + "}]}",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "harombe_core.cli", "import", str(path), "--db", db],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
        check=False,
    )
    assert done.returncode == 1
    assert_one_line(done.stderr, "nested too deeply")
