"""`harombe migrate` and ``migrate()`` refuse a source that is not there or not a harombe store,
a destination that is not one, and a destination that is the source, before creating anything
at either end; an empty store is a fine source. Each case runs through the Python API and the
CLI."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harombe_core.cli import app
from harombe_core.errors import (
    HarombeError,
    InvalidInputError,
    NotAHarombeDatabaseError,
    StoreNotFoundError,
)
from harombe_core.manager import MemoryManager
from harombe_core.migrate import migrate
from harombe_core.models import Message

runner = CliRunner()


def _files(folder: Path) -> dict[str, str]:
    """Every file in ``folder`` with a digest of its bytes."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(folder.iterdir())
    }


def _store(path: Path, messages: int = 3) -> Path:
    with MemoryManager(str(path), embedding=None) as mm:
        for i in range(messages):
            mm.save_message("s", Message(role="user", content=f"m{i}"), user_id="u")
    return path


def _refused_both_ways(
    source: Path, destination: Path, error: type[HarombeError], message: str
) -> None:
    """The API raises ``error``; the CLI prints one line with ``message`` and exits 1; neither
    creates or changes a file."""
    folder = source.parent
    before = _files(folder)
    with pytest.raises(error, match=message):
        migrate(str(source), str(destination), progress=False)
    assert _files(folder) == before
    result = runner.invoke(
        app, ["migrate", "--from", str(source), "--to", str(destination), "--no-progress"]
    )
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: ")
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    assert _files(folder) == before


def test_a_missing_source_is_an_error_and_nothing_is_created(tmp_path: Path) -> None:
    _refused_both_ways(
        tmp_path / "nope.db", tmp_path / "new.db", StoreNotFoundError, "no database at"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_empty_file_as_source_is_not_a_store(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    _refused_both_ways(empty, tmp_path / "new.db", StoreNotFoundError, "is an empty file")


def _text_file(path: Path) -> Path:
    path.write_text("my shopping list\n")
    return path


def _foreign_sqlite(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE recipes (name TEXT)")
    conn.execute("INSERT INTO recipes VALUES ('soup')")
    conn.commit()
    conn.close()
    return path


def _truncated_store(path: Path) -> Path:
    _store(path, messages=400)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_text_file, "is not a SQLite database"),
        (_foreign_sqlite, "of another application"),
        (_truncated_store, "is truncated"),
    ],
    ids=["text", "other-application", "truncated-harombe"],
)
def test_a_foreign_or_corrupt_source_is_refused_untouched(
    tmp_path: Path, make: Callable[[Path], Path], message: str
) -> None:
    source = make(tmp_path / "source.db")
    _refused_both_ways(source, tmp_path / "new.db", NotAHarombeDatabaseError, message)
    assert not (tmp_path / "new.db").exists()


@pytest.mark.parametrize("make", [_text_file, _foreign_sqlite], ids=["text", "other-application"])
def test_a_foreign_destination_is_refused_untouched(
    tmp_path: Path, make: Callable[[Path], Path]
) -> None:
    source = _store(tmp_path / "source.db")
    destination = make(tmp_path / "theirs.db")
    _refused_both_ways(source, destination, NotAHarombeDatabaseError, "theirs.db")


def _symlink(source: Path) -> Path:
    link = source.parent / "link.db"
    link.symlink_to(source)
    return link


def _hard_link(source: Path) -> Path:
    link = source.parent / "hard.db"
    os.link(source, link)
    return link


@pytest.mark.parametrize(
    "other",
    [lambda p: p, lambda p: p.parent / "." / p.name, _symlink, _hard_link],
    ids=["same-path", "dot-path", "symlink", "hard-link"],
)
def test_source_and_destination_the_same_file_is_refused(
    tmp_path: Path, other: Callable[[Path], Path]
) -> None:
    source = _store(tmp_path / "source.db")
    _refused_both_ways(source, other(source), InvalidInputError, "are the same store")


def test_an_empty_but_valid_store_migrates(tmp_path: Path) -> None:
    source = tmp_path / "empty-store.db"
    MemoryManager(str(source), embedding=None).close()
    report = migrate(str(source), str(tmp_path / "a.db"), progress=False)
    assert report.verified
    assert (report.sessions, report.messages) == (0, 0)
    result = runner.invoke(
        app, ["migrate", "--from", str(source), "--to", str(tmp_path / "b.db"), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    assert "verified" in result.stdout
    for copy in ("a.db", "b.db"):
        with MemoryManager(str(tmp_path / copy), embedding=None) as mm:
            assert mm.stats()["sessions"] == 0


def test_a_store_migrates_to_a_new_path(tmp_path: Path) -> None:
    source = _store(tmp_path / "source.db")
    result = runner.invoke(
        app, ["migrate", "--from", str(source), "--to", str(tmp_path / "copy.db"), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    with MemoryManager(str(tmp_path / "copy.db"), embedding=None) as mm:
        assert [m.content for m in mm.get_messages("s")] == ["m0", "m1", "m2"]
