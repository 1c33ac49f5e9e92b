"""One database file, one set of SQLite connections per process.

Why it looks the way it does:

* Every opener of a file in this process (managers, LangChain histories and retrievers,
  LlamaIndex chat stores and memory blocks, the CLI) shares one :class:`SQLiteFile`, found by the
  file's real path (``~`` expanded, symlinks followed) in a reference-counted registry
  (:func:`open_file`). The file is checked once, by its first opener, and its connections close
  when the last opener closes. ``":memory:"`` databases are private to their opener.
* A thread holds a connection for the length of one operation (nested calls on the thread
  reuse it), then gives it back to the file's pool of idle connections. Frameworks run each
  step on a new worker thread (LangGraph's executor does): connecting per thread would pay the
  connection's set-up on every step and keep one connection per thread that ever ran, so the
  count of connections follows the most operations ever running at once instead. The async
  twins run on worker threads and so never block the event loop.
* Every write is one ``BEGIN IMMEDIATE`` transaction: it takes the write lock up front (no
  deadlock on upgrade), waits ``busy_timeout`` for it, and is retried with exponential backoff
  while another process holds it, so concurrent writers see no error.
* SQLite connections and locks do not survive ``fork()``: a child that used (or even reopened
  while the parent's were still open) this process's connections would take no real lock, and
  another process would delete the ``-wal`` under it. So before a fork every file's connections
  are closed once no operation is running on them, and both processes reopen them on next use.
  A file whose operations did not finish within :data:`FORK_WAIT_SECONDS` is refused in the
  child with a typed error rather than used unsafely.
* A database whose file or folder cannot be written is open for reading only: reads and searches
  work, writes raise :class:`StoreReadOnlyError` before touching it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import inspect
import logging
import os
import random
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from harombe_core.errors import (
    EncryptionKeyError,
    Fix,
    HarombeError,
    InvalidInputError,
    NotAHarombeDatabaseError,
    StorageFullError,
    StoreBusyError,
    StoreError,
    StoreReadOnlyError,
)
from harombe_core.store.base import AtomicBlock
from harombe_core.store.erasure import DONE, ERASED_KEYWORDS, ERASED_VECTORS
from harombe_core.store.shared import Lease, SharedRegistry
from harombe_core.store.sqlite_checks import plan_open
from harombe_core.store.unspaced import sql_spaced

#: Seconds a read waits, one after another, for an in-memory database's table lock to go.
_TABLE_LOCK_WAITS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6)

__all__ = [
    "FORK_WAIT_SECONDS",
    "SQLiteFile",
    "classify",
    "is_busy",
    "memory_file",
    "ns_head",
    "ns_label",
    "open_file",
    "open_files",
]

log = logging.getLogger(__name__)

#: Milliseconds an erasure's WAL truncation waits for readers (and so may hold up writers)
#: before it gives up and is retried later (:meth:`SQLiteFile.truncate_wal`); close waits
#: the file's busy timeout instead.
TRUNCATE_WAIT_MS = 50

T = TypeVar("T")

#: How long a fork waits for the operations running on a file before giving up on it.
FORK_WAIT_SECONDS = 10.0

#: The most a file's -wal keeps after a checkpoint, in bytes (SQLite's journal_size_limit): four
#: times what the default auto-checkpoint lets it reach (1,000 pages of 4 KiB).
WAL_SIZE_LIMIT = 16 * 1024 * 1024


def ns_label(namespace: Any, position: int | None) -> str | None:
    """SQL ``harombe_ns_label(namespace, position)``: the label of a dotted store namespace at
    ``position``, 1-based from the start or negative from the end (-1 the last); NULL past
    either end. SQLite has no string split, and a store's wildcard match compares labels by
    position (:func:`harombe_core.store.items.list_namespaces`)."""
    if type(namespace) is not str or position is None or position == 0:
        return None  # (NULL, or a value edited outside harombe: no label matches it)
    labels = namespace.split(".")
    if abs(position) > len(labels):
        return None
    return labels[position - 1 if position > 0 else position]


def ns_head(namespace: Any, depth: int | None) -> Any:
    """SQL ``harombe_ns_head(namespace, depth)``: the first ``depth`` labels of a dotted
    namespace (a LangGraph ``list_namespaces(max_depth=...)`` cut, made distinct in SQL)."""
    if type(namespace) is not str or depth is None:
        return namespace  # (a value edited outside harombe is named as it is by the caller)
    return ".".join(namespace.split(".")[: max(int(depth), 0)])


def classify(exc: sqlite3.Error, location: str) -> StoreError:
    """The typed error for a SQLite error on ``location``."""
    message = str(exc).lower()
    if "disk is full" in message or "database or disk is full" in message:
        return StorageFullError(
            f"{location}: the disk (or a file-size limit) is full; the write was rolled back and "
            "nothing stored was changed. Free space and retry."
        )
    if "readonly" in message or "read-only" in message:
        return StoreReadOnlyError(
            f"{location} cannot be written ({exc}). Check the file's and its directory's "
            "permissions, or open it elsewhere for reading only."
        )
    if "not a database" in message or "malformed" in message:
        return NotAHarombeDatabaseError(
            f"{location} is corrupt ({exc}). If only searches fail, the keyword index is what "
            "is damaged: `harombe reindex` (MemoryManager.reindex()) rebuilds it from the "
            "messages. Otherwise restore the file from a backup, or export what can be read "
            "with `harombe export` and start a new file."
        )
    if "disk i/o error" in message and _out_of_space(location):
        # A write refused with EFBIG (a file-size limit) or ENOSPC surfaces as an I/O error.
        return StorageFullError(
            f"{location}: the disk (or a file-size limit) is full ({exc}); the write was rolled "
            "back and nothing stored was changed. Free space or raise the limit and retry."
        )
    if "locked" in message or "busy" in message:
        return StoreBusyError(
            f"{location} stayed locked by other writers after every retry ({exc}). Reduce the "
            "number of concurrent writers or raise busy_timeout."
        )
    return StoreError(f"{location}: {exc}")


def _out_of_space(location: str) -> bool:
    """True when a file-size limit is set or the database's filesystem is (nearly) full."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY:
        return True
    try:
        fs = os.statvfs(os.path.dirname(location) or ".")
    except OSError:
        return False
    return fs.f_bavail * fs.f_frsize < 1_000_000


def is_busy(exc: sqlite3.Error) -> bool:
    message = str(exc).lower()
    return "locked" in message or "busy" in message


def _key_digest(key: str | None) -> bytes:
    return b"" if key is None else hashlib.sha256(key.encode("utf-8")).digest()


class SQLiteFile:
    """The connections to one database in this process, shared by all its openers.

    Operations run through :meth:`read`, :meth:`write` and :meth:`connection`, which hand the
    calling thread its connection and count the operation as running, so :meth:`close` and a
    ``fork()`` wait for it instead of closing a connection in use.
    """

    def __init__(
        self,
        location: str,
        uri: str,
        *,
        key: str | None = None,
        busy_timeout_ms: int = 5_000,
        read_only: bool = False,
        why_read_only: str = "",
        memory: bool = False,
    ) -> None:
        self.location = location
        self.read_only = read_only
        self._why_read_only = why_read_only
        self._uri = uri
        self._key = key
        self._key_digest = _key_digest(key)
        self._busy_timeout_ms = busy_timeout_ms
        self._memory = memory
        #: The keyword debt (store/erasure.py) whose segments this process already merged
        #: while the WAL, whose old page images still hold the deleted text, could not be
        #: truncated yet (a reader held it): a retry truncates without merging again.
        self.merged_debt: str | None = None
        # Called after the commit of a transaction that recorded an erasure owed (see
        # on_erasure_owed); the ids of the connections that carry the trigger telling so.
        self._owed_listeners: list[Callable[[], Callable[[], object] | None]] = []
        self._watched: set[int] = set()
        # ``_mutex`` is ``_cond``'s lock, taken directly where no wait or notify is needed (every
        # operation's start and end): a Condition's ``with`` costs two Python calls more.
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._writer = threading.RLock()  # RLock: it can say whether this thread holds it
        self._local = threading.local()
        self._connections: list[Any] = []  # every open connection, idle or in use
        self._idle: list[Any] = []  # connections no operation holds, ready for any thread
        self._users = 0  # operations running now, over all threads
        self._paused = False  # a fork is waiting for the running operations
        self._closed = False
        self._fork_safe = True
        self._inherited = ""  # set in a child whose parent could not close this file
        self._at_close: list[Callable[[SQLiteFile], object]] = []
        self.block = AtomicBlock()  # the atomic() block open on this thread, if any
        if memory:  # the shared-cache database lives as long as one connection to it does
            self._connections.append(self._connect())
        with _LIVE_LOCK:
            _LIVE.add(self)

    def __repr__(self) -> str:
        return f"SQLiteFile({self.location!r}, read_only={self.read_only})"

    # connections ----------------------------------------------------------------------------
    def _connect(self) -> Any:
        try:
            if self._key is not None:
                from harombe_core.store.encryption import connect as encrypted_connect

                conn = encrypted_connect(
                    self._uri, self._key, timeout=self._busy_timeout_ms / 1000
                )
            else:
                conn = sqlite3.connect(
                    self._uri,
                    uri=True,
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=self._busy_timeout_ms / 1000,
                )
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            conn.create_function("harombe_ns_label", 2, ns_label, deterministic=True)
            conn.create_function("harombe_ns_head", 2, ns_head, deterministic=True)
            conn.execute("PRAGMA foreign_keys = ON")
            # Deleted rows are zeroed, not just marked free, whatever the build's default:
            # deleted means gone from the file (store/erasure.py).
            conn.execute("PRAGMA secure_delete = ON")
            # The keyword indexes' transform of unspaced scripts (store/unspaced.py), for the
            # re-indexing migration and the messages' catch-up. No trigger, view or index may
            # call it: the file must stay writable by a connection without it (sqlite3).
            conn.create_function("harombe_spaced", 1, sql_spaced, deterministic=True)
            if not self._memory:
                conn.execute("PRAGMA synchronous = NORMAL")
                # A checkpoint gives the -wal file back down to this size; without it the file
                # stays as large as it ever grew (e.g. while a long read held the WAL open)
                # for as long as the app runs.
                conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
        except sqlite3.Error as exc:
            raise classify(exc, self.location) from exc
        return conn

    def _enter(self) -> Any:
        """Count an operation of this thread as running and return the connection it runs on:
        the one this thread already holds (a nested call), else an idle one, else a new one."""
        local = self._local
        depth = getattr(local, "depth", 0)
        conn = None
        with self._mutex:
            if self._inherited:
                raise StoreError(self._inherited)
            if depth == 0:  # a nested call of a running operation never waits for itself
                while self._paused and not self._closed:
                    self._cond.wait()  # (holding _mutex: the condition's lock)
                if self._closed:
                    raise StoreError(
                        f"{self.location}: the store is closed; open a new MemoryManager."
                    )
                if self._idle:
                    conn = self._idle.pop()
            self._users += 1
        local.depth = depth + 1
        if depth > 0:
            held: Any = local.conn
            return held
        try:
            if conn is None:
                # No lock needed to connect: while this operation runs nothing closes them.
                conn = self._connect()
                with self._mutex:
                    self._connections.append(conn)
            local.conn = conn
            return conn
        except BaseException:
            self._exit()
            raise

    def _exit(self) -> None:
        local = self._local
        local.depth -= 1
        conn = local.__dict__.pop("conn", None) if local.depth == 0 else None
        if conn is not None and conn.in_transaction:
            # An operation interrupted between BEGIN and COMMIT or ROLLBACK (Ctrl-C, a
            # notebook's interrupt: KeyboardInterrupt lands between any two bytecodes) must not
            # hand its open transaction to the next operation, which would fail with "cannot
            # start a transaction within a transaction" and keep SQLite's write lock from every
            # other connection. Nothing of it was acknowledged: roll it back.
            with contextlib.suppress(sqlite3.Error):
                conn.rollback()
        with self._mutex:
            self._users -= 1
            if conn is not None and conn in self._connections:
                self._idle.append(conn)  # not closed meanwhile: ready for the next operation
            if self._users == 0 and (self._paused or self._closed):
                if self._closed:
                    self._close_connections()
                self._cond.notify_all()

    def running_here(self) -> bool:
        """Whether this thread is inside one of this file's operations (a call made from it
        runs on that operation's connection, within its transaction)."""
        return getattr(self._local, "depth", 0) > 0

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        """This thread's connection, for the duration of one operation."""
        conn = self._enter()
        try:
            yield conn
        finally:
            self._exit()

    def _close_connections(self) -> None:
        """Close every connection (caller holds ``_cond`` and no operation is running)."""
        conns, self._connections, self._idle = self._connections, [], []
        self._watched = set()  # (a new connection may reuse a closed one's id)
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    # operations -----------------------------------------------------------------------------
    def read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of one statement."""
        conn = self._enter()
        try:
            rows: list[Any] = conn.execute(sql, params).fetchall()
            return rows
        except sqlite3.Error as exc:
            raise classify(exc, self.location) from exc
        finally:
            self._exit()

    def refuse_writes(self, what: str = "the write") -> None:
        """Raise StoreReadOnlyError if this file is open for reading only."""
        if self.read_only:
            raise StoreReadOnlyError(
                f"{self.location} cannot be written: {self._why_read_only}, so it was opened "
                f"for reading only (reads and searches work) and {what} was refused; nothing "
                "was changed. Check the file's and its folder's permissions, or open a "
                "writable copy."
            )

    def _typed(self, exc: sqlite3.Error) -> HarombeError:
        if isinstance(exc, sqlite3.IntegrityError):
            return InvalidInputError(f"{self.location}: {exc}")
        return classify(exc, self.location)

    def write(self, fn: Callable[[Any], T], retries: int, *, begin: bool = True) -> T:
        """Run ``fn(connection)`` in one IMMEDIATE transaction, retrying while it is locked.

        Inside :meth:`atomic` (on its thread) ``fn`` joins that block's transaction instead.
        ``begin=False`` for an ``fn`` of one statement, which commits by itself: the BEGIN
        and COMMIT (two statements more) are left out.
        """
        self.refuse_writes()
        if self.block.handle is not None:
            return self._write_inside(fn)
        if not self._owed_listeners:
            return self._commit(fn, retries, begin)
        local = self._local
        result = self._commit(functools.partial(self._watching, fn), retries, begin)
        installed = local.__dict__.pop("installed", None)
        if installed is not None:  # committed: the trigger stays on that connection
            self._watched.add(installed)
        if local.__dict__.pop("owed", False):
            for ref in list(self._owed_listeners):
                listener = ref()
                if listener is not None:
                    listener()
        return result

    def _commit(self, fn: Callable[[Any], T], retries: int, begin: bool) -> T:
        """:meth:`write` outside an atomic block: the transaction and its retries."""
        delay = 0.005
        for attempt in range(retries + 1):
            conn = self._enter()  # held per attempt, so a fork never waits for a backoff
            try:
                self._writer.acquire(timeout=self._busy_timeout_ms / 1000)
                try:
                    if begin:
                        conn.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as exc:
                    if not (is_busy(exc) and attempt < retries):
                        raise classify(exc, self.location) from exc
                else:
                    try:
                        result = fn(conn)
                        if begin:
                            conn.execute("COMMIT")
                        return result
                    except BaseException as exc:
                        with contextlib.suppress(sqlite3.Error):
                            conn.execute("ROLLBACK")
                        # An atomic block's call fails typed; its cause tells if it was busy.
                        cause = exc.__cause__ if isinstance(exc, StoreBusyError) else exc
                        busy = isinstance(cause, sqlite3.OperationalError) and is_busy(cause)
                        if not (busy and attempt < retries):
                            if isinstance(exc, sqlite3.Error):
                                raise self._typed(exc) from exc
                            raise
            finally:
                # Whether this thread holds the lock, not what acquire returned: an interrupt
                # (Ctrl-C) can land between the two, and a lock kept by nobody would make every
                # later write of the process wait busy_timeout before going ahead.
                if self._writer._is_owned():  # type: ignore[attr-defined]
                    self._writer.release()
                self._exit()
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)
        raise StoreBusyError(f"{self.location}: still locked after {retries} retries")

    # erasure owed ---------------------------------------------------------------------------
    def on_erasure_owed(self, fn: Callable[[], object]) -> Callable[[], None]:
        """Call ``fn()`` (on the writing thread, after the commit) whenever a write of this
        process records an erasure owed in ``harombe_meta`` (:mod:`~harombe_core.store.erasure`),
        whichever code deleted or replaced the text: the manager's methods, a trigger (a
        deleted session, a replaced summary, a deleted checkpoint or LangGraph store item),
        the LangGraph checkpointer's SQL. So the background eraser owes its work to the
        deletion itself, not to each caller remembering to ask. Returns what stops it. A
        bound method is held weakly, so a manager dropped without close is still collected.

        Watching costs nothing until someone asks: then each connection carries a temporary
        trigger (this process only, not in the file) on ``harombe_meta`` that calls back into
        Python, and a write checks one thread-local flag after its commit."""
        ref: Callable[[], Callable[[], object] | None] = (
            weakref.WeakMethod(fn) if inspect.ismethod(fn) else lambda: fn
        )
        with self._mutex:
            self._owed_listeners.append(ref)

        def stop() -> None:
            with self._mutex:
                if ref in self._owed_listeners:
                    self._owed_listeners.remove(ref)

        return stop

    def _watching(self, fn: Callable[[Any], T], conn: Any) -> T:
        """Run one attempt of a watched write: the trigger put on ``conn`` first if it lacks
        it (kept once the write commits), the flag cleared (a retried attempt starts over)."""
        local = self._local
        local.owed = False
        if id(conn) not in self._watched:
            conn.create_function("harombe_erasure_owed", 0, self._erasure_recorded)
            for event in ("INSERT", "UPDATE OF value"):
                conn.execute(
                    "CREATE TEMP TRIGGER IF NOT EXISTS "
                    f"harombe_owed_{event.split()[0].lower()} AFTER {event} ON main.harombe_meta "
                    f"WHEN new.key IN ('{ERASED_KEYWORDS}', '{ERASED_VECTORS}') "
                    f"AND new.value <> '{DONE}' BEGIN SELECT harombe_erasure_owed(); END"
                )
            local.installed = id(conn)
        return fn(conn)

    def _erasure_recorded(self) -> None:
        """The temporary trigger's call: this thread's write recorded an erasure owed."""
        self._local.owed = True

    def snapshot(self, fn: Callable[[Any], T], *, begin: bool = True) -> T:
        """Run ``fn(connection)`` in one read transaction: a consistent view of the file that
        takes no write lock. Inside :meth:`atomic` (on its thread) it joins that block.
        ``begin=False``: ``fn`` runs a single statement, which is its own snapshot, so the
        BEGIN and COMMIT (two statements more) are left out."""
        if self.block.handle is not None:
            return self._write_inside(fn)
        for wait in _TABLE_LOCK_WAITS:
            try:
                return self._snapshot_once(fn, begin)
            except StoreBusyError as exc:
                # An in-memory database shares one cache between connections: a read meets a
                # writer's table lock at once (SQLITE_LOCKED, which busy_timeout never waits
                # for). A read has no effect, so it waits for the writer and runs again.
                if "table is locked" not in str(exc):
                    raise
                time.sleep(wait)
        return self._snapshot_once(fn, begin)

    def _snapshot_once(self, fn: Callable[[Any], T], begin: bool) -> T:
        conn = self._enter()
        try:
            if not begin:
                return fn(conn)
            conn.execute("BEGIN")
            try:
                result = fn(conn)
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result
        except sqlite3.Error as exc:
            raise classify(exc, self.location) from exc
        finally:
            self._exit()

    def _write_inside(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn`` inside this thread's :meth:`atomic` block."""
        conn = self._enter()  # the block's connection: this thread's
        try:
            with self.block.call():
                try:
                    return fn(conn)
                except sqlite3.Error as exc:
                    raise self._typed(exc) from exc
        finally:
            self._exit()

    def atomic(self, fn: Callable[[], T], retries: int) -> T:
        """Run ``fn()`` as one transaction that every write on this thread joins.

        See :meth:`~harombe_core.store.sqlite.SQLiteStore.atomic`; a nested call joins.
        """
        if self.block.handle is not None:
            return fn()

        def block(conn: Any) -> T:
            with self.block.open(conn):
                value = fn()
            return self.block.result(value)

        return self.write(block, retries)

    def enable_wal(self, retries: int) -> None:
        """Switch the file to WAL once; it stays so, later opens only read the mode.

        Switching needs an exclusive lock and SQLite reports a busy database at once rather
        than through the busy handler, so several processes creating one new file retry here.
        """
        if self._memory or self.read_only:
            return
        delay = 0.005
        for attempt in range(retries + 1):
            try:
                with self.connection() as conn:
                    mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
                    if mode.lower() != "wal":
                        mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
                if mode.lower() != "wal":
                    log.warning("%s: journal mode is %s, not WAL", self.location, mode)
                return
            except sqlite3.Error as exc:
                if not is_busy(exc) or attempt >= retries:
                    raise classify(exc, self.location) from exc
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)

    # lifetime -------------------------------------------------------------------------------
    @property
    def encrypted(self) -> bool:
        """True when the file is opened with a SQLCipher key."""
        return self._key is not None

    def check_key(self, key: str | None) -> None:
        """Refuse a second opener whose encryption key differs from the first's."""
        if not hmac.compare_digest(self._key_digest, _key_digest(key)):
            raise EncryptionKeyError(
                f"{self.location} is already open in this process "
                f"{'with another encryption key' if self._key else 'without encryption'}.",
                fix=Fix(
                    api="Every opener of one file must pass the key it was created with "
                    "(encryption_key=... or HAROMBE_DB_KEY).",
                    cli="Every opener of one file must use the key it was created with "
                    "(HAROMBE_DB_KEY).",
                ),
            )

    def truncate_wal(self, wait_ms: int | None = None) -> int:
        """Copy the WAL into the database file and truncate it to zero bytes, so no old page
        image (of a deleted row) stays in it; returns the bytes the WAL still holds (0:
        truncated, or no WAL). Readers of other connections holding an older snapshot can
        keep it from finishing; the caller tries again later.

        ``wait_ms``: how long to wait for such readers, None for the file's busy timeout (at
        close, where waiting is fine). An erasure while the file stays open passes
        :data:`TRUNCATE_WAIT_MS`: a ``TRUNCATE`` checkpoint waiting for readers blocks new
        writers meanwhile, so it gives up after a moment (in-process readers are short)."""
        if self._memory or self.read_only:
            return 0
        with self.connection() as conn:
            try:
                if wait_ms is None:
                    busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                else:
                    conn.execute(f"PRAGMA busy_timeout = {int(wait_ms)}")
                    try:
                        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                    finally:
                        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            except sqlite3.Error as exc:
                raise classify(exc, self.location) from exc
        if not busy:
            return 0
        try:
            return os.path.getsize(f"{self.location}-wal")
        except OSError:
            return 0

    def at_close(self, fn: Callable[[SQLiteFile], object]) -> None:
        """Run ``fn(file)`` when the last opener closes, before the connections close."""
        self._at_close.append(fn)

    def close(self) -> None:
        """Close every connection, once the operations running on them have finished."""
        with self._cond:
            if self._closed:
                return
        try:
            for fn in self._at_close:
                try:
                    fn(self)
                except HarombeError as exc:  # closing must close; what was stored is committed
                    log.warning("%s: while closing: %s", self.location, exc)
        finally:
            with self._cond:
                self._closed = True
                mine = getattr(self._local, "depth", 0)
                while self._users > mine:
                    self._cond.wait()
                if self._users == 0:
                    self._close_connections()
                self._cond.notify_all()
            with _LIVE_LOCK:
                _LIVE.discard(self)

    @property
    def closed(self) -> bool:
        return self._closed

    # fork -----------------------------------------------------------------------------------
    def _before_fork(self) -> None:
        """Close the connections (once idle) so the child inherits no SQLite state."""
        with self._cond:
            if self._closed or self._memory:
                return
            self._paused = True
            mine = getattr(self._local, "depth", 0)
            deadline = time.monotonic() + FORK_WAIT_SECONDS
            while self._users > 0 and mine == 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            self._fork_safe = self._users == 0
            if self._fork_safe:
                self._close_connections()

    def _after_fork_in_parent(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def _after_fork_in_child(self) -> None:
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._writer = threading.RLock()
        self._local = threading.local()
        self.block = AtomicBlock()
        self._idle = []
        self._users = 0
        self._paused = False
        if not self._fork_safe and not self._closed:
            self._inherited = (
                f"{self.location} was in use by another thread when this process was forked, "
                "and SQLite connections cannot cross a fork: using the file here could lose "
                "writes. Open it in the child only after the fork (or use the 'spawn' or "
                "'forkserver' start method)."
            )
            _ABANDONED.extend(self._connections)  # never closed here: closing drops locks
            self._connections = []


# every SQLiteFile not yet closed, for the fork hooks
_LIVE: weakref.WeakSet[SQLiteFile] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()
_ABANDONED: list[Any] = []


def _before_fork() -> None:
    _LIVE_LOCK.acquire()
    for file in list(_LIVE):
        file._before_fork()


def _after_fork_in_parent() -> None:
    for file in list(_LIVE):
        file._after_fork_in_parent()
    _LIVE_LOCK.release()


def _after_fork_in_child() -> None:
    global _LIVE_LOCK
    _LIVE_LOCK = threading.Lock()
    for file in list(_LIVE):
        file._after_fork_in_child()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


# the registry ---------------------------------------------------------------------------------
_FILES: SharedRegistry[SQLiteFile] = SharedRegistry(SQLiteFile.close)
#: Leases of openers that were garbage-collected without close(); released on the next open.
_ORPHANED: list[Lease[SQLiteFile]] = []


def open_files() -> list[SQLiteFile]:
    """The database files open in this process (for diagnostics and tests)."""
    return _FILES.values()


def _release_orphans() -> None:
    while _ORPHANED:
        try:
            lease = _ORPHANED.pop()
        except IndexError:
            return
        lease.release()


def orphan_on_collect(owner: object, lease: Lease[SQLiteFile]) -> weakref.finalize:
    """Give ``lease`` back (at the next open) if ``owner`` is collected without closing.

    Not released right in the finalizer: it may run inside any code, even ours holding a lock.
    """
    return weakref.finalize(owner, _ORPHANED.append, lease)


def open_file(
    path: str | os.PathLike[str],
    *,
    key: str | None,
    busy_timeout_ms: int,
    schema_version: int,
    setup: Callable[[SQLiteFile], None],
) -> Lease[SQLiteFile]:
    """A lease on the shared :class:`SQLiteFile` of ``path``, opening it if needed.

    The first opener checks the file (see :mod:`harombe_core.store.sqlite_checks`) and runs
    ``setup(file)`` (migrations); later openers get the same object after their ``key`` is
    checked against the first's. Its connections keep the first opener's ``busy_timeout_ms``.
    Release the lease exactly once, when the opener closes.
    """
    _release_orphans()
    file = Path(os.fspath(path)).expanduser().resolve()

    def create() -> SQLiteFile:
        plan = plan_open(file, key, schema_version)
        shared = SQLiteFile(
            str(file),
            plan.uri,
            key=key,
            busy_timeout_ms=busy_timeout_ms,
            read_only=plan.read_only,
            why_read_only=plan.why_read_only,
        )
        try:
            setup(shared)
        except BaseException:
            shared.close()  # a refused file must not stay open (or locked) behind the error
            raise
        return shared

    return _FILES.acquire(str(file), create, check=lambda shared: shared.check_key(key))


def memory_file(busy_timeout_ms: int) -> SQLiteFile:
    """A private in-memory database shared by its one opener's threads."""
    _release_orphans()
    uri = f"file:harombe-{uuid.uuid4().hex}?mode=memory&cache=shared"
    return SQLiteFile(":memory:", uri, busy_timeout_ms=busy_timeout_ms, memory=True)
