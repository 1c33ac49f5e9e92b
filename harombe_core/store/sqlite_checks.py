"""What a database file is, found out through SQLite itself, before anything writes to it.

Why it looks the way it does:

* The file is never opened with Python's ``open()``. POSIX advisory locks belong to a process
  and a file, not to a descriptor: closing *any* descriptor of the file drops every lock this
  process holds on it, so another process believes it is the last user and deletes or
  checkpoints the ``-wal``/``-shm`` under our live connections (committed writes lost). SQLite's
  own VFS keeps such closes pending until its locks are released, so every look at the file here
  is a read-only SQLite connection. Only ``os.stat``/``os.access`` (no descriptor) are used
  beside it.
* A file with no ``-wal`` beside it is read as ``immutable``: no lock, and none of the
  ``-wal``/``-shm`` files a WAL database would otherwise get, so a refused file (foreign,
  corrupt, truncated, of a newer schema, encrypted with another key) is left exactly as it was:
  same bytes, same mtime, nothing created beside it. A file with a ``-wal`` is live (or its
  writer crashed) and its header is stale until a checkpoint, so it is read through SQLite's
  locks and the WAL, which then already has its ``-shm``.
* A database whose folder this process cannot write is opened for reading only. SQLite needs
  the ``-shm`` to read a WAL database: when no ``-wal`` exists nothing is being written and the
  file is read as immutable; when one exists it is read through the ``-shm`` beside it.
* Another process may be creating or checkpointing this very file: its header can promise
  pages not yet written, and a lock-free read can see the schema before the page that names us.
  Such states pass within milliseconds while a foreign or damaged file stays as it is, so a
  refusal only stands once it held for a second. A file that had pages and is empty a moment
  later is being rewritten (``cp`` truncates first), and is waited for the same way.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harombe_core.errors import (
    EncryptionKeyError,
    Fix,
    NotAHarombeDatabaseError,
    SchemaTooNewError,
    StoreBusyError,
    StoreError,
    StoreReadOnlyError,
)

__all__ = ["APPLICATION_ID", "OpenPlan", "plan_open", "wrong_key"]

#: Written to the SQLite header so a harombe database can be told from any other SQLite file.
APPLICATION_ID = 0x48524D42  # "HRMB"

#: How long a refusal must hold before it stands (another process may be mid-checkpoint).
_SETTLE_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class OpenPlan:
    """How to connect to a file that passed the checks.

    ``uri`` is what every connection opens; ``read_only`` says writes will be refused (and the
    reason, for the error message, is in ``why_read_only``).
    """

    uri: str
    read_only: bool
    why_read_only: str = ""


def plan_open(file: Path, key: str | None, schema_version: int) -> OpenPlan:
    """Check ``file`` (create it, mode 0600, if missing) and say how to connect to it.

    Raises NotAHarombeDatabaseError (foreign, corrupt, truncated), SchemaTooNewError,
    EncryptionKeyError or StoreReadOnlyError, each before anything was written.
    """
    if file.is_dir():
        raise NotAHarombeDatabaseError(f"{file} is a directory; pass a file path.")
    existing = file.exists() and file.stat().st_size > 0
    if not existing:
        _create(file)
    plan = _plan(file)
    if existing:
        _settle(file, plan, key, schema_version)
    return plan


def _create(file: Path) -> None:
    """Make a new, empty database file readable by its owner only (0600).

    SQLite gives its ``-wal``/``-shm`` the database's mode, so they are 0600 too. The file does
    not exist yet, so no connection of this process can hold a lock on it.
    """
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        if not file.exists():
            fd = os.open(file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            os.close(fd)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreReadOnlyError(
            f"cannot create {file} ({exc.strerror}).",
            fix=Fix(
                api="Choose a writable location with storage_path=... or HAROMBE_DB.",
                cli="Choose a writable location with --db PATH or HAROMBE_DB.",
            ),
        ) from exc


def _writable(path: Path) -> bool:
    if os.access in os.supports_effective_ids:
        return os.access(path, os.W_OK, effective_ids=True)
    return os.access(path, os.W_OK)


def _plan(file: Path) -> OpenPlan:
    """Read-write, or (folder or file not writable) read-only and how."""
    uri = file.as_uri()
    folder_writable = _writable(file.parent)
    if folder_writable and _writable(file):
        return OpenPlan(uri, read_only=False)
    if folder_writable:
        # SQLite opens the file read-only and keeps its -wal/-shm in the writable folder.
        return OpenPlan(uri, read_only=True, why_read_only="the file is not writable")
    why = "its folder is not writable"
    wal, shm = Path(f"{file}-wal"), Path(f"{file}-shm")
    if not wal.exists():
        return OpenPlan(f"{uri}?mode=ro&immutable=1", read_only=True, why_read_only=why)
    if not shm.exists():
        raise StoreReadOnlyError(
            f"{file} has a write-ahead log ({wal.name}) that SQLite can only read through a "
            f"{shm.name} file, which cannot be created: {why}. Open it once where it can be "
            "written (that folds the log into the database), or copy the database and its "
            "-wal to a writable folder."
        )
    return OpenPlan(f"{uri}?mode=ro", read_only=True, why_read_only=why)


def _settle(file: Path, plan: OpenPlan, key: str | None, schema_version: int) -> None:
    """Return once a look at ``file`` found a harombe database and the file did not change
    while it looked; raise a refusal that held for :data:`_SETTLE_SECONDS`.

    ``file`` had pages when the open began. Empty now, or changing under the look, it is
    being written: by a checkpoint (in place), or by something that truncates first (``cp``
    restoring a backup over it, ``Path.write_bytes``). Its pages are waited for, not taken for
    a new database the open would write a schema into. Only an emptiness that lasts is a new
    database.
    """
    deadline = time.monotonic() + _SETTLE_SECONDS
    while True:
        before = _signature(file)
        problem = _inspect_once(file, plan, key, schema_version)
        late = time.monotonic() >= deadline
        if problem is None:
            steady = before is not None and before[0] > 0 and _signature(file) == before
            if steady or late:
                return
        elif isinstance(problem, SchemaTooNewError) or late:
            raise problem
        time.sleep(0.02)


def _signature(file: Path) -> tuple[int, int, int] | None:
    """Size, modification time and inode: what changes when anything writes the file."""
    try:
        stat = file.stat()
    except FileNotFoundError:
        return None
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


@dataclass(frozen=True, slots=True)
class _Facts:
    """What a read-only look at a database found."""

    application_id: int
    user_version: int
    tables: frozenset[str]
    check: str


def _probe_uri(file: Path, plan: OpenPlan) -> str:
    if plan.read_only and "?" in plan.uri:
        return plan.uri
    if Path(f"{file}-wal").exists():
        return f"{file.as_uri()}?mode=ro"
    return f"{file.as_uri()}?mode=ro&immutable=1"


def _connect(uri: str, key: str | None) -> Any:
    if key is None:
        return sqlite3.connect(uri, uri=True, isolation_level=None)
    from harombe_core.store.encryption import connect

    return connect(uri, key, timeout=5.0)


def _facts(uri: str, key: str | None) -> _Facts:
    conn = _connect(uri, key)
    try:
        app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        tables = frozenset(
            str(r[0])
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        )
        check = "ok"
        if app_id == APPLICATION_ID:
            check = str(conn.execute("PRAGMA quick_check(100)").fetchone()[0])
        return _Facts(app_id, version, tables, check)
    finally:
        conn.close()


def _read_header(uri: str, key: str | None, *, relaxed: bool) -> tuple[int, int]:
    """The application id in the header, and (``relaxed``) the page count SQLite sees.

    ``PRAGMA application_id`` reads the header and nothing of the schema, so it fails only
    where the header itself is refused.
    """
    conn = _connect(uri, key)
    try:
        if relaxed:
            conn.execute("PRAGMA writable_schema = ON")
        app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0]) if relaxed else 0
        return app_id, pages
    finally:
        conn.close()


def _truncation(file: Path, uri: str, key: str | None) -> NotAHarombeDatabaseError | None:
    """A file shorter than its header promises, told apart from other damage.

    SQLite refuses to read the header of such a file ("database disk image is malformed");
    ``writable_schema`` relaxes exactly that check (besides schema parsing, which reading the
    header does not do), so a header refused without it and read with it belongs to a file
    whose pages stop short.
    """
    try:
        _read_header(uri, key, relaxed=False)
    except sqlite3.Error as exc:
        if "database disk image is malformed" not in str(exc).lower():
            return None
    else:
        return None  # the header reads: the damage is elsewhere
    try:
        _, pages = _read_header(uri, key, relaxed=True)
    except sqlite3.Error:
        return None
    return NotAHarombeDatabaseError(
        f"{file} is truncated: its header promises more pages than the {pages} its "
        f"{file.stat().st_size} bytes hold; it was left untouched. Restore it from a backup."
    )


def _damage(file: Path, uri: str, key: str | None, exc: sqlite3.Error) -> NotAHarombeDatabaseError:
    """The refusal of a file SQLite found damaged, naming it ours when its header says so."""
    try:
        ours = _read_header(uri, key, relaxed=False)[0] == APPLICATION_ID
    except sqlite3.Error:
        ours = False
    if ours:
        return NotAHarombeDatabaseError(
            f"{file} is a damaged harombe database ({exc}); it was left untouched. Restore it "
            "from a backup."
        )
    return NotAHarombeDatabaseError(
        f"{file} cannot be read as a SQLite database ({exc}); it was left untouched. If it is "
        "a harombe database it is corrupt: restore it from a backup."
    )


def wrong_key(file: Path, exc: sqlite3.Error) -> EncryptionKeyError:
    """The refusal of a file SQLCipher cannot read with the key given (``exc``: its error)."""
    from harombe_core.store.encryption import KEY_ENV

    return EncryptionKeyError(
        f"{file} cannot be opened with this encryption key ({exc}); it was left untouched.",
        fix=Fix(
            api=f"Pass the key it was created with (encryption_key=... or {KEY_ENV}); "
            "a file created without encryption must be opened without a key.",
            cli=f"Set {KEY_ENV} to the key it was created with; a file created "
            f"without encryption must be opened with {KEY_ENV} unset.",
        ),
    )


def _is_damage(exc: sqlite3.Error) -> bool:
    message = str(exc).lower()
    return "not a database" in message or "malformed" in message or "corrupt" in message


def _is_transient(exc: sqlite3.Error) -> bool:
    message = str(exc).lower()
    return "locked" in message or "busy" in message


def _inspect_once(
    file: Path, plan: OpenPlan, key: str | None, schema_version: int
) -> StoreError | None:
    """Why ``file`` cannot be opened as a harombe database right now, or None if it can."""
    uri = _probe_uri(file, plan)
    try:
        facts = _facts(uri, key)
    except sqlite3.Error as exc:
        if _is_transient(exc):
            return StoreBusyError(
                f"{file} stayed locked by another process while it was being checked ({exc}); "
                "retry when that process has finished."
            )
        if not _is_damage(exc):
            return StoreError(
                f"{file} cannot be read ({exc}); it was left untouched. Check that this "
                "process may read it and its folder."
            )
        if key is not None and "not a database" in str(exc).lower():
            return wrong_key(file, exc)
        if "not a database" in str(exc).lower():
            return NotAHarombeDatabaseError(
                f"{file} is not a SQLite database (SQLite: {exc}), so it is not a harombe "
                "database; it was left untouched.",
                fix=Fix(
                    api="Pass a new path with storage_path=... If it is an encrypted harombe "
                    "database, pass its key (encryption_key=... or HAROMBE_DB_KEY); if it is "
                    "an unencrypted one, it is corrupt: restore it from a backup.",
                    cli="Pass a new path with --db PATH. If it is an encrypted harombe "
                    "database, set HAROMBE_DB_KEY to its key; if it is an unencrypted one, it "
                    "is corrupt: restore it from a backup.",
                ),
            )
        return _truncation(file, uri, key) or _damage(file, uri, key, exc)
    if facts.application_id != APPLICATION_ID and facts.tables:
        return NotAHarombeDatabaseError(
            f"{file} is a SQLite database of another application (tables: "
            f"{', '.join(sorted(facts.tables)[:5])}); it was left untouched. Point harombe at "
            "its own file."
        )
    if facts.user_version > schema_version:
        return SchemaTooNewError(
            f"{file} has schema version {facts.user_version}, newer than this harombe "
            f"understands ({schema_version}); it was left untouched. Upgrade harombe-memory."
        )
    if facts.check != "ok":
        return NotAHarombeDatabaseError(
            f"{file} is a damaged harombe database ({facts.check}); it was left untouched. "
            "Restore it from a backup."
        )
    return None
