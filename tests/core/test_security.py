"""Security: owner-only files, encryption at rest, confined export paths, bound parameters.

(SQL metacharacters in ids, metadata and content are exercised on SQLite and PostgreSQL by
``tests/postgres/contract.py::sql_metacharacters_are_data``.)
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from harombe_core.errors import EncryptionKeyError, ExportPathError, HarombeError
from harombe_core.export import export_to_directory, resolve_output_path
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store.sqlite import SQLiteStore


@pytest.fixture
def loose_umask() -> Iterator[None]:
    old = os.umask(0o002)  # a umask that would make files group/world readable
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("loose_umask")
def test_database_wal_and_shm_are_owner_only(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "memory.db"
    with MemoryManager(str(db), embedding=None) as mm:
        mm.save_message("s", Message(role="user", content="secret"))
        wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
        assert wal.exists()
        assert shm.exists()
        assert _mode(db) == 0o600
        assert _mode(wal) == 0o600
        assert _mode(shm) == 0o600


def test_encrypted_database_round_trip_and_wrong_key(tmp_path: Path) -> None:
    db = tmp_path / "enc.db"
    with MemoryManager(str(db), embedding=None, encryption_key="correct horse") as mm:
        mm.save_message("s", Message(role="user", content="the launch code is 0000"))
    wal = Path(f"{db}-wal")
    raw = db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    assert b"launch code" not in raw
    assert not raw.startswith(b"SQLite format 3")
    before = db.read_bytes()
    with pytest.raises(EncryptionKeyError, match="encryption key"):
        MemoryManager(str(db), embedding=None, encryption_key="wrong")
    assert db.read_bytes() == before  # left untouched
    with pytest.raises(HarombeError):  # no key at all: refused, not opened as garbage
        MemoryManager(str(db), embedding=None)
    with MemoryManager(str(db), embedding=None, encryption_key="correct horse") as mm:
        assert mm.get_messages("s")[0].content == "the launch code is 0000"
    assert _mode(db) == 0o600


def test_key_from_environment_and_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "env.db"
    monkeypatch.setenv("HAROMBE_DB_KEY", "from-env ' quote")
    with MemoryManager(str(db), embedding=None) as mm:
        mm.save_message("s", Message(role="user", content="hello"))
    monkeypatch.delenv("HAROMBE_DB_KEY")
    with pytest.raises(HarombeError):
        SQLiteStore(db)
    config = {"memory": {"storage_path": str(db), "encryption_key": "from-env ' quote"},
              "vector_store": {"enabled": False}}
    with MemoryManager.from_config(config) as mm:
        assert [m.content for m in mm.get_messages("s")] == ["hello"]
    plain = tmp_path / "plain.db"
    SQLiteStore(plain).close()
    with pytest.raises(EncryptionKeyError):  # a plain file is not opened with a key
        SQLiteStore(plain, encryption_key="k")


@pytest.mark.parametrize(
    "name", ["../escape.json", "../../etc/passwd", "/etc/passwd", "a/../../x.json", "."]
)
def test_export_paths_cannot_escape(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    with pytest.raises(ExportPathError):
        resolve_output_path(name, folder)


def test_export_through_symlink_cannot_escape(tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (folder / "link").symlink_to(outside)
    with pytest.raises(ExportPathError):
        resolve_output_path("link/x.json", folder)


def test_hostile_session_ids_export_inside_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    with MemoryManager(":memory:", embedding=None) as mm:
        for sid in ["../../evil", "/abs/path", "..", ".hidden", "a\\b", "x" * 300]:
            mm.save_message(sid, Message(role="user", content="x"))
        paths = export_to_directory(mm, folder)
    assert len(paths) == 6
    for path in paths:
        assert path.resolve().parent == folder.resolve()
        assert not path.name.startswith(".")
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in paths)
