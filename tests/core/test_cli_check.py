"""``harombe check PATH`` on a sound file, a file with a byte range overwritten, derived rows
without their sources, and a path with no database; the same for an encrypted file (its key
from HAROMBE_DB_KEY), and a wrong key. PostgreSQL: tests/postgres/test_check.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harombe_core import MemoryManager, Message
from harombe_core.cli import app
from harombe_core.cli_check import check, check_file
from harombe_core.errors import EncryptionKeyError

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


def test_rows_edited_outside_harombe_are_named(tmp_path: Path) -> None:
    """A blob for text or bad JSON passes SQLite's checks, but fails every read that meets
    it (CorruptRowError): check names each such row and the SQL that removes it."""
    db = _filled(tmp_path / "m.db")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE messages SET content = x'00ff' WHERE id = 7")
    conn.execute("UPDATE sessions SET metadata = '{oops' WHERE user_id = 'u3'")
    conn.execute("INSERT INTO store_items VALUES ('notes', 'k', 'not json', 0, 0, NULL, NULL)")
    conn.commit()
    conn.close()
    code, results = check_file(db)
    assert code == 1
    [(_, passed, detail)] = [r for r in results if r[0] == "rows harombe can read"]
    assert not passed
    assert detail.startswith("3 row(s) cannot be read")
    assert "DELETE FROM messages WHERE id = 7;" in detail
    assert "of table sessions: column metadata is not valid JSON" in detail
    assert "DELETE FROM store_items WHERE namespace = 'notes' AND key = 'k';" in detail
    assert check_file(_filled(tmp_path / "sound.db"))[1][-1] == (
        "rows harombe can read",
        True,
        "ok",
    )


def test_no_file_is_exit_code_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["check", str(tmp_path / "none.db")])
    assert result.exit_code == 2
    assert "no file" in result.output


def _encrypted(path: Path, key: str) -> str:
    pytest.importorskip("sqlcipher3")
    with MemoryManager(str(path), embedding=None, encryption_key=key) as mm:
        for s in range(5):
            sid = mm.create_session(user_id=f"u{s}")
            mm.save_messages(
                sid, [Message(role="user", content=f"note {i} about {s} " * 20) for i in range(30)]
            )
    return str(path)


def test_a_sound_encrypted_file_passes_with_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _encrypted(tmp_path / "m.db", "k-right")
    monkeypatch.setenv("HAROMBE_DB_KEY", "k-right")
    result = runner.invoke(app, ["check", db])
    assert result.exit_code == 0, result.output
    assert "cipher_integrity_check: ok" in result.output
    assert "messages_fts integrity-check: ok" in result.output


def test_a_page_changed_in_an_encrypted_file_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _encrypted(tmp_path / "m.db", "k-right")
    size = Path(db).stat().st_size
    with open(db, "r+b") as f:  # one page past the middle, inside the page (not its header)
        f.seek(size // 2 // 4096 * 4096 + 100)
        f.write(b"\xff" * 100)
    monkeypatch.setenv("HAROMBE_DB_KEY", "k-right")
    code, results = check(db)
    assert code == 1
    cipher = next(r for r in results if r[0] == "cipher_integrity_check")
    assert not cipher[1]
    assert "HMAC verification failed for page" in cipher[2]
    result = runner.invoke(app, ["check", db])
    assert result.exit_code == 1
    assert "FAILED" in result.output


def test_a_wrong_key_is_a_typed_error_and_exit_code_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _encrypted(tmp_path / "m.db", "k-right")
    before = Path(db).read_bytes()
    monkeypatch.setenv("HAROMBE_DB_KEY", "k-wrong")
    with pytest.raises(EncryptionKeyError):
        check(db)
    result = runner.invoke(app, ["check", db])
    assert result.exit_code == 2
    assert "HAROMBE_DB_KEY" in result.output
    monkeypatch.delenv("HAROMBE_DB_KEY")
    result = runner.invoke(app, ["check", db])  # no key at all: not readable, and says why
    assert result.exit_code == 2
    assert "HAROMBE_DB_KEY" in result.output
    assert Path(db).read_bytes() == before


def test_a_key_for_an_unencrypted_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sqlcipher3")
    db = _filled(tmp_path / "m.db")
    monkeypatch.setenv("HAROMBE_DB_KEY", "k")
    with pytest.raises(EncryptionKeyError):
        check(db)
