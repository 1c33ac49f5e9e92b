"""An embedded Chroma folder on disk: one owning process at a time, protected like the database.

Why one owner. Chroma's embedded mode (``PersistentClient``) is not safe for several processes
on one folder: each process keeps the HNSW graph it loaded in memory and writes its own copy
back, so one process overwrites another's graph files and keeps searching a stale copy, and
processes creating a folder at the same moment race in Chroma's own schema set-up ("table
collections already exists"). So a process opens the folder only while it holds an exclusive
lock on ``<folder>.lock`` beside it (a ``filelock`` lock: the kernel drops it when the process
dies, however it dies). Every other process keeps its vectors in the SQLite database only and
searches them exactly; the owner copies what they stored into the index (see
:mod:`harombe_core.vectors.indexer`). Creating the folder happens under the same lock, so it
is serialised across processes as well.

Why the lock also decides damage. Only the owner opens the folder, so when opening fails the
owner knows no other harombe process is using it. Only then, and only for an error that means
the files themselves are damaged (not a database, malformed, an HNSW segment that cannot be
loaded), is the folder renamed aside as ``<folder>.corrupt-<time>`` and a new one started: the
index is derived data, rebuilt from the vectors kept in SQLite. Any other failure (permissions,
a full disk, a Chroma error we do not recognise) is raised as a typed error and the folder is
left exactly as found.

Why 0700 and not a umask. The folder is created (or tightened) to mode 0700 before Chroma
writes anything into it. A file inside a directory that others cannot traverse cannot be opened
by them whatever its own mode, so this protects every file Chroma creates later, from any of
its threads, without touching the process umask (which is process-wide: changing it around
Chroma's calls would race every other thread creating files). Each file is also tightened to
0600 after opening and after each write, so a copy of the folder made elsewhere keeps the
protection.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import logging
import os
import shutil
import sqlite3
import stat
import struct
import time
import uuid
from pathlib import Path
from typing import Any

from harombe_core.errors import (
    StorageFullError,
    StoreReadOnlyError,
    VectorIndexBusyError,
    VectorIndexError,
)

__all__ = [
    "ChromaFolder",
    "is_damage",
    "is_out_of_space",
    "protect_folder",
    "room_left",
    "scrub_unused_slots",
]

log = logging.getLogger(__name__)

FOLDER_MODE = 0o700
FILE_MODE = 0o600
#: Chroma's messages for files that are damaged (as opposed to busy, read-only or full).
_DAMAGE_MARKERS = (
    "file is not a database",
    "database disk image is malformed",
    "hnsw segment reader",
    "error loading hnsw index",
    "error deserializing",
    "unsupported opcode",
)
_READ_ONLY_MARKERS = ("readonly database", "read-only file system", "permission denied")
_FULL_MARKERS = ("database or disk is full", "no space left on device")


def _message(exc: BaseException) -> str:
    return str(exc).lower()


#: What Chroma says when a write could not reach the disk (full, or over a file-size limit).
_SPACE_MARKERS = (*_FULL_MARKERS, "disk i/o error", "file too large")


def is_out_of_space(exc: BaseException) -> bool:
    """True when Chroma's error says a write failed for want of space (or any I/O error on
    write, which is how SQLite reports a file-size limit)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return True
    text = _message(exc)
    return any(marker in text for marker in _SPACE_MARKERS)


def room_left(folder: Path) -> int:
    """Bytes the folder's files may still grow by: the free space of its filesystem, or less
    under a file-size limit (``RLIMIT_FSIZE`` caps each file: the largest one decides)."""
    try:
        fs = os.statvfs(folder if folder.exists() else folder.parent)
        room = fs.f_bavail * fs.f_frsize
    except OSError:
        return 2**62  # cannot tell: let the write say
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):  # not on this platform
        return room
    if limit != resource.RLIM_INFINITY:
        largest = 0
        with contextlib.suppress(OSError):
            largest = max((p.stat().st_size for p in folder.rglob("*") if p.is_file()), default=0)
        room = min(room, limit - largest)
    return room


def is_damage(exc: BaseException) -> bool:
    """True when Chroma's error says its files are damaged (not busy, read-only or full)."""
    text = _message(exc)
    return any(marker in text for marker in _DAMAGE_MARKERS)


def _typed(exc: BaseException, folder: Path) -> Exception:
    """The harombe error for a failure to open ``folder`` that is not damage."""
    text = _message(exc)
    os_errno = exc.errno if isinstance(exc, OSError) else None
    if os_errno in (errno.EACCES, errno.EPERM, errno.EROFS) or any(
        marker in text for marker in _READ_ONLY_MARKERS
    ):
        return StoreReadOnlyError(
            f"the vector index folder {folder} cannot be written ({exc}). Messages are searched "
            "exactly from the database meanwhile; make the folder writable (or choose another "
            "with vector_store.path) to use the index."
        )
    if os_errno == errno.ENOSPC or any(marker in text for marker in _FULL_MARKERS):
        return StorageFullError(
            f"the disk holding the vector index {folder} is full ({exc}). Free some space; "
            "nothing stored was lost."
        )
    return VectorIndexError(
        f"cannot open the vector index {folder} ({type(exc).__name__}: {exc}). The messages "
        "and their vectors are safe in the database: close every process using it, move the "
        "folder aside and run `harombe reindex` to rebuild it."
    )


def protect_folder(folder: Path) -> None:
    """Mode 0700 on the folder and its subfolders, 0600 on its files (those we own)."""
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    for path in (folder, *folder.rglob("*")):
        try:
            info = path.lstat()
            if uid is not None and info.st_uid != uid:
                continue  # not ours to change (root can read it anyway)
            if stat.S_ISDIR(info.st_mode):
                wanted = FOLDER_MODE
            elif stat.S_ISREG(info.st_mode):
                wanted = FILE_MODE
            else:
                continue
            if stat.S_IMODE(info.st_mode) & ~wanted:
                path.chmod(stat.S_IMODE(info.st_mode) & wanted)
        except FileNotFoundError:
            continue  # Chroma removed a temporary file while we walked: nothing to protect


def _make_folder(folder: Path) -> None:
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=FOLDER_MODE, exist_ok=True)
    except OSError as exc:
        raise _typed(exc, folder) from exc


class ChromaFolder:
    """The lock and the files of one embedded Chroma folder.

    :meth:`open_client` takes ownership (or raises :class:`VectorIndexBusyError` at once when
    another process has it) and returns a ``PersistentClient`` with the collection opened and
    loaded; :meth:`release` gives ownership back after the client is closed.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder).expanduser().absolute()
        self.lock_path = self.folder.with_name(self.folder.name + ".lock")
        self._lock: Any = None

    @property
    def owned(self) -> bool:
        return self._lock is not None

    def _acquire(self) -> None:
        from filelock import FileLock, Timeout

        lock = FileLock(str(self.lock_path), mode=FILE_MODE, thread_local=False)
        try:
            lock.acquire(timeout=0)
        except Timeout as exc:
            raise VectorIndexBusyError(
                f"the vector index {self.folder} is open in another process; only one process "
                "at a time keeps it. Close that process (or run this there)."
            ) from exc
        except OSError as exc:
            raise _typed(exc, self.lock_path) from exc
        self._lock = lock

    def release(self) -> None:
        """Give the folder back (after the client is closed); safe to call twice."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def open_client(self, open_collection: Any) -> tuple[Any, Any]:
        """Own the folder and open it: ``(client, collection)``.

        ``open_collection(client)`` opens the collection; it is loaded (``count()``) here so
        that a damaged segment shows now, while no other process can be using the folder.
        """
        _make_folder(self.folder)
        self._acquire()
        try:
            try:
                client, collection = self._open(open_collection)
            except Exception as exc:
                if not is_damage(exc):
                    raise _typed(exc, self.folder) from exc
                self._set_aside(exc)
                try:
                    client, collection = self._open(open_collection)
                except Exception as again:
                    raise _typed(again, self.folder) from again
            protect_folder(self.folder)
        except BaseException:
            self.release()
            raise
        return client, collection

    def _open(self, open_collection: Any) -> tuple[Any, Any]:
        import chromadb
        from chromadb.config import Settings

        protect_folder(self.folder)
        try:
            client: Any = chromadb.PersistentClient(
                path=str(self.folder), settings=Settings(anonymized_telemetry=False)
            )
        except BaseException:
            self._forget_failed_system()
            raise
        try:
            collection = open_collection(client)
            collection.count()
        except BaseException:
            client.close()  # drops Chroma's cached copy of this folder in this process
            raise
        return client, collection

    def _forget_failed_system(self) -> None:
        """Chroma caches a backend per folder before starting it; one that failed to start
        stays cached and would be handed to the next client. Drop that one entry (clearing
        the whole cache would orphan the backends of other folders open in this process)."""
        from chromadb.api.shared_system_client import SharedSystemClient

        with SharedSystemClient._refcount_lock:
            SharedSystemClient._identifier_to_system.pop(str(self.folder), None)
            SharedSystemClient._identifier_to_refcount.pop(str(self.folder), None)

    def _set_aside(self, exc: BaseException) -> None:
        """Rename the damaged folder (we own it: nobody else has it open) and start anew."""
        aside = self.folder.with_name(f"{self.folder.name}.corrupt-{int(time.time() * 1000)}")
        try:
            self.folder.rename(aside)
            _make_folder(self.folder)
        except OSError as move_error:
            raise _typed(move_error, self.folder) from exc
        log.warning(
            "vector index %s is damaged (%s); moved it to %s and rebuilding it from the vectors "
            "in the database", self.folder, exc, aside,
        )

    def purge(self) -> None:
        """Leave no deleted vector in the folder (the client is closed; we still own it).

        Chroma's SQLite file keeps deleted rows in free pages and its log: it is vacuumed
        (rewritten without them) with ``secure_delete`` on. A dropped collection's HNSW
        segment stays on disk as a folder named by the segment's id: every such folder that
        no segment in the SQLite file names is removed. A damaged folder set aside earlier
        (``<folder>.corrupt-<time>``, kept for inspection) still holds every vector and owner
        it had, the deleted ones included, so it goes too. Failures are logged, not raised: the
        vectors were already removed from the index, and the next erasure tries again.
        """
        for aside in self.folder.parent.glob(f"{glob.escape(self.folder.name)}.corrupt-*"):
            try:
                shutil.rmtree(aside)
            except OSError as exc:
                log.warning("could not remove %s, which holds deleted vectors: %s", aside, exc)
        database = self.folder / "chroma.sqlite3"
        if not database.is_file():
            return
        try:
            conn = sqlite3.connect(str(database), isolation_level=None)
            try:
                conn.execute("PRAGMA secure_delete = ON")
                live = {str(r[0]) for r in conn.execute("SELECT id FROM segments")}
                conn.execute("VACUUM")
            finally:
                conn.close()
            for child in self.folder.iterdir():
                if child.is_dir() and _is_uuid(child.name) and child.name not in live:
                    shutil.rmtree(child)
        except (OSError, sqlite3.Error) as exc:
            log.warning("could not erase deleted vectors from %s: %s", self.folder, exc)

    def after_write(self) -> None:
        """Tighten files Chroma created while writing (see the module docstring)."""
        with contextlib.suppress(FileNotFoundError):
            protect_folder(self.folder)


#: The head of an HNSW segment's ``header.bin`` as Chroma's hnswlib writes it (format version
#: 1): version (int32), then offset_level0, max_elements, cur_element_count and
#: size_data_per_element (size_t each).
_HNSW_HEAD = struct.Struct("<iQQQQ")
_HNSW_VERSION = 1
_ZEROS = bytes(1 << 16)


def scrub_unused_slots(folder: Path) -> int:
    """Zero the unused slots of every HNSW segment's ``data_level0.bin`` in ``folder``; the
    bytes zeroed. Call it only while nothing else writes the folder's segments.

    Why: hnswlib allocates a segment's element array for its whole capacity without zeroing
    it, and a new segment's file is saved with all of it, so the slots past the elements it
    holds are whatever this process's memory held before. Right after an erasure that memory
    held the deleted vectors' log records (their session and user ids were seen there). The
    elements themselves are zeroed as they are added, so only the slots from
    ``cur_element_count`` on are cleared (a segment saved since holds just its elements:
    nothing to clear). A header of another format, or a file whose length does not fit it,
    is left alone."""
    zeroed = 0
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for segment in folder.iterdir():
            data = segment / "data_level0.bin"
            try:
                head = (segment / "header.bin").read_bytes()[: _HNSW_HEAD.size]
                version, _offset, capacity, used, size = _HNSW_HEAD.unpack(head)
                length = data.stat().st_size
            except (OSError, struct.error):
                continue
            if version != _HNSW_VERSION or size <= 0 or used > capacity:
                continue
            if length % size or not used * size <= length <= capacity * size:
                continue
            try:
                zeroed += _zero_from(data, used * size)
            except OSError as exc:
                log.warning("could not clear unused HNSW slots of %s: %s", data, exc)
    return zeroed


def _zero_from(path: Path, start: int) -> int:
    """Zero ``path`` from byte ``start`` on, writing only the blocks that are not zero yet."""
    zeroed = 0
    with open(path, "r+b") as f:
        f.seek(start)
        while block := f.read(len(_ZEROS)):
            if block.count(0) != len(block):
                f.seek(-len(block), os.SEEK_CUR)
                f.write(_ZEROS[: len(block)])
                zeroed += len(block)
        f.flush()
        os.fsync(f.fileno())
    return zeroed


def _is_uuid(name: str) -> bool:
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False
