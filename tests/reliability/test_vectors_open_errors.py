"""Opening and using the vector index when it is held, damaged, unwritable or failing: a live
index is never set aside, a damaged one only once nobody holds it, every Chroma failure is a
typed error, and search falls back to the vectors stored in SQLite (saying so once)."""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from harombe_core import Message
from harombe_core.errors import VectorIndexError
from tests.reliability import vector_workers as w


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with a digest of its bytes (to prove it was not touched)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _hold_lock(lock_path: str, held: Any, release: Any) -> None:
    from filelock import FileLock

    with FileLock(lock_path):
        held.set()
        release.wait(timeout=120)


def _damage(folder: Path) -> None:
    folder.mkdir()
    (folder / "chroma.sqlite3").write_bytes(b"\x00garbage" * 512)


def test_a_held_index_is_never_touched_and_a_damaged_one_is_replaced_once_free(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "memory.db")
    folder = Path(f"{path}.chroma")
    _damage(folder)  # looks damaged, but another process holds it: it may be mid-write
    before = _snapshot(folder)
    context = multiprocessing.get_context("spawn")
    held, release = context.Event(), context.Event()
    holder = context.Process(target=_hold_lock, args=(f"{path}.chroma.lock", held, release))
    holder.start()
    assert held.wait(timeout=60)
    try:
        with w.manager(path) as mm:
            assert mm._semantic.index is None
            ids = mm.save_messages("s", [Message(role="user", content=w.text("s", i))
                                         for i in range(20)])
            mm.flush()
            assert w.missing_from_search(mm, ids) == []  # searched exactly from SQLite
            assert _snapshot(folder) == before
            assert not list(tmp_path.glob("*.corrupt-*"))

            release.set()  # the other process lets go: now the damage may be dealt with
            holder.join(timeout=60)
            caplog.set_level(logging.WARNING)
            deadline = time.monotonic() + 30
            while mm._semantic.index is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert mm._semantic.index is not None
            mm.flush()
            assert sorted(mm._semantic.index.ids()) == sorted(ids)
            assert w.missing_from_search(mm, ids) == []
    finally:
        release.set()
        holder.join(timeout=60)
    aside = list(tmp_path.glob("memory.db.chroma.corrupt-*"))
    assert len(aside) == 1
    assert _snapshot(aside[0]) == before  # set aside intact, for whoever wants to look
    assert any("damaged" in r.getMessage() for r in caplog.records)


def test_an_unrecognised_open_failure_is_typed_and_leaves_the_folder_as_found(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "memory.db")
    folder = Path(f"{path}.chroma")
    (folder / "chroma.sqlite3").mkdir(parents=True)  # not damage: nothing to set aside
    with pytest.raises(VectorIndexError, match="harombe reindex"):
        w.manager(path)
    assert [p.name for p in folder.iterdir()] == ["chroma.sqlite3"]
    assert (folder / "chroma.sqlite3").is_dir()
    assert not list(tmp_path.glob("*.corrupt-*"))


def _chattr(flag: str, *paths: Path) -> bool:
    result = subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True, check=False)
    return result.returncode == 0


def test_an_unwritable_index_folder_is_left_alone_and_searched_exactly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "memory.db")
    with w.manager(path) as mm:
        first = mm.save_messages("s", [Message(role="user", content=w.text("s", 0))])
        mm.flush()
    folder = Path(f"{path}.chroma")
    frozen = [folder, *folder.rglob("*")]
    if not _chattr("+i", *frozen):  # immutable binds even root; file modes do not
        pytest.skip("this file system has no immutable attribute")
    try:
        before = _snapshot(folder)
        caplog.set_level(logging.WARNING)
        with w.manager(path) as mm:
            assert mm._semantic.index is None
            later = mm.save_messages("s", [Message(role="user", content=w.text("s", 1))])
            mm.flush()
            assert w.missing_from_search(mm, first + later) == []
        assert _snapshot(folder) == before
        warnings = [r.getMessage() for r in caplog.records if "cannot be written" in
                    r.getMessage()]
        assert len(warnings) == 1
    finally:
        _chattr("-i", *frozen)


def test_an_index_failing_while_open_falls_back_to_exact_search_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with w.manager(str(tmp_path / "memory.db")) as mm:
        ids = mm.save_messages("s", [Message(role="user", content=w.text("s", i))
                                     for i in range(20)])
        mm.flush()
        mm._semantic.index._client.close()  # Chroma's backend is gone under the index
        caplog.set_level(logging.WARNING)
        assert w.missing_from_search(mm, ids) == []
        ids += mm.save_messages("s", [Message(role="user", content=w.text("s", i))
                                      for i in range(20, 30)])
        mm.flush()  # the index refuses them: they stay in SQLite and are searched there
        assert w.missing_from_search(mm, ids) == []
        said = [r.getMessage() for r in caplog.records if "exactly" in r.getMessage()]
        assert len(said) == 2  # once for searching, once for storing, however often it failed
