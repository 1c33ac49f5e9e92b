"""The vector index folder gets the database's protection: the folder and every folder in it
0700, every file 0600, including files Chroma creates after opening (segments written on the
first vectors, a new collection after reindex), and the lock files beside it, whatever the
process umask."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

from harombe_core import Message
from tests.reliability import vector_workers as w


def _modes(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root.parent)): stat.S_IMODE(p.stat().st_mode)
        for p in (root, *root.rglob("*"))
    }


def _use_with_loose_umask(path: str, reindex: bool) -> None:
    os.umask(0o022)  # the usual default: new files 0644, folders 0755
    with w.manager(path) as mm:
        mm.save_messages("s", [Message(role="user", content=w.text("s", i)) for i in range(20)])
        mm.flush()
        if reindex:
            mm.reindex(progress=False)
            mm.save_message("s", Message(role="user", content=w.text("s", 99)))
            mm.flush()


def _run(path: str, reindex: bool = False) -> None:
    context = multiprocessing.get_context("spawn")
    child = context.Process(target=_use_with_loose_umask, args=(path, reindex))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0


def _assert_protected(db: Path) -> None:
    folder = Path(f"{db}.chroma")
    modes = _modes(folder)
    assert f"{folder.name}/chroma.sqlite3" in modes
    segments = [p for p in folder.iterdir() if p.is_dir()]
    assert segments, "Chroma wrote no segment folder: nothing created later was checked"
    for name, mode in modes.items():
        wanted = 0o700 if (db.parent / name).is_dir() else 0o600
        assert mode == wanted, f"{name} is {oct(mode)}"
    for lock in (f"{db}.chroma.lock", f"{db}.embed.lock"):
        assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600, lock
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


def test_index_folder_and_files_are_private_with_a_loose_umask(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _run(str(db))
    _assert_protected(db)


def test_files_created_later_by_a_rebuild_are_private_too(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _run(str(db), reindex=True)
    _assert_protected(db)


def test_an_existing_open_folder_is_tightened(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    folder = Path(f"{db}.chroma")
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    _run(str(db))
    _assert_protected(db)
