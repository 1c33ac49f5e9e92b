"""SQLite store: the default source of truth.

Why it looks the way it does:

* WAL journal, so readers never wait for a writer and a crash never loses a committed row.
* The file's connections, transactions and retries belong to the file, not to a store: every
  store opened on one file in this process shares them (:mod:`harombe_core.store.sqlite_file`).
* A file is checked through SQLite, before anything is written to it: that it is SQLite, not
  truncated, our ``application_id``, the schema version. A foreign, corrupt or too new file is
  refused with a typed error and left exactly as it was (:mod:`harombe_core.store.sqlite_checks`).
* Schema changes are forward migrations keyed by ``PRAGMA user_version``, each applied in the
  same transaction that bumps the version.
* The keyword index (FTS5, BM25) is derived: each row holds the message and the turn it
  answers, so a question finds its answer. It is brought up to date (one transaction, many rows)
  just before it is read, not on every append: an FTS5 row costs a fresh index segment per
  commit, which would triple the cost of ``save_message``. A high-water mark in ``harombe_meta``
  makes the catch-up idempotent and safe with many writers (ids grow in commit order).
* The keyword search itself is a store operation like any other
  (:func:`~harombe_core.store.ops.keyword_search`, its SQLite body in
  :mod:`~harombe_core.store.fts`).
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from harombe_core.errors import SchemaTooNewError, StoreError
from harombe_core.flows import off_loop
from harombe_core.store import pending
from harombe_core.store.erasure import (
    ERASED_KEYWORDS,
    ERASED_VECTORS,
    merge_keywords,
    owed,
    settle,
)
from harombe_core.store.fts import catch_up, keyword_indexer
from harombe_core.store.ops import KeywordShortcuts
from harombe_core.store.rows import from_micros, to_micros
from harombe_core.store.runner import SQLITE, Op, drive
from harombe_core.store.schema import MIGRATIONS, SCHEMA_VERSION
from harombe_core.store.shared import Lease
from harombe_core.store.sqlite_checks import APPLICATION_ID
from harombe_core.store.sqlite_file import (
    TRUNCATE_WAIT_MS,
    SQLiteFile,
    memory_file,
    open_file,
    orphan_on_collect,
)

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SQLiteStore", "from_micros", "to_micros"]

log = logging.getLogger(__name__)


T = TypeVar("T")


def _migrate(file: SQLiteFile, retries: int) -> None:
    """Bring ``file`` to :data:`SCHEMA_VERSION` (run once, by the file's first opener)."""
    version = int(file.read("PRAGMA user_version")[0][0])
    if version > SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"{file.location} has schema version {version}, newer than this harombe "
            f"understands ({SCHEMA_VERSION}). Upgrade harombe-memory."
        )
    if version < SCHEMA_VERSION and file.read_only:
        state = "is a new, empty database" if version == 0 else f"has schema version {version}"
        file.refuse_writes(
            f"opening it (it {state} and must be brought to schema version {SCHEMA_VERSION} "
            "first, which writes to it)"
        )
    file.enable_wal(retries)
    if version == SCHEMA_VERSION:
        return

    def apply(c: sqlite3.Connection) -> None:
        current = c.execute("PRAGMA user_version").fetchone()[0]
        for index in range(current, SCHEMA_VERSION):
            for statement in MIGRATIONS[index]:
                c.execute(statement)
            c.execute(f"PRAGMA user_version = {index + 1}")
        c.execute(f"PRAGMA application_id = {APPLICATION_ID}")

    file.write(apply, retries)


def _setup_file(file: SQLiteFile, *, retries: int) -> None:
    """What the first opener of a file does: migrate it, and have its last close index it.

    Keyword indexing runs in the background (:class:`~harombe_core.store.fts.KeywordIndexer`);
    its thread stops as the file closes and a final catch-up follows, so a later reader that
    cannot write (a read-only copy) finds every message in the index.
    """
    _migrate(file, retries)
    if not file.read_only:
        file.at_close(functools.partial(_close_keywords, retries=retries))


def _close_keywords(file: SQLiteFile, retries: int) -> None:
    """Index what is left, and after a deletion leave none of the deleted text in the file:
    FTS5's segments merged (:func:`~harombe_core.store.erasure.merge_keywords`), then the
    WAL checkpointed into the file and truncated (its old page images held the text); the
    debt is settled only then, so when another process's reader kept the WAL it stays owed
    for the next erasure or close."""
    keyword_indexer(file, retries).stop()
    catch_up(file, retries)
    _erase_keywords(file, retries, wait_ms=None)


def _erase_keywords(file: SQLiteFile, retries: int, *, wait_ms: int | None) -> int:
    """Pay the keyword debt of ``file``'s deletions: merge FTS5's segments (not again for a
    debt already merged), then truncate the WAL, waiting ``wait_ms`` for readers
    (:meth:`SQLiteFile.truncate_wal`); the debt is settled only once the WAL is truncated.
    Returns the bytes the WAL still holds (0: nothing deleted is left; one read when nothing
    was owed)."""
    token = file.snapshot(lambda c: owed(c, ERASED_KEYWORDS), begin=False)
    if token is None:
        return 0
    if file.merged_debt != token:
        file.write(merge_keywords, retries)
        file.merged_debt = token
    left = file.truncate_wal(wait_ms)
    if left == 0:
        # (a later deletion's debt, recorded meanwhile, stays owed: settle() compares)
        file.write(lambda c: settle(c, ERASED_KEYWORDS, token), retries)
    return left


class SQLiteStore(KeywordShortcuts):
    """The default :class:`~harombe_core.store.base.MessageStore`.

    ``path`` is a file path (``~`` expanded, parent directories created, file mode 0600) or
    ``":memory:"`` for a private in-memory database shared by this object's threads.

    Every store opened on one file in this process shares that file's connections (see
    :mod:`harombe_core.store.sqlite_file`): the file is checked once, and its connections close
    when the last store on it closes. :meth:`close` closes this opener only; closing twice is
    harmless. A file whose folder (or itself) cannot be written opens for reading only
    (:attr:`read_only`): writes raise :class:`StoreReadOnlyError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        busy_timeout_ms: int = 5_000,
        max_retries: int = 12,
        encryption_key: str | None = None,
    ) -> None:
        self._max_retries = max_retries
        self.dialect = SQLITE
        self._closed = False
        self._lease: Lease[SQLiteFile] | None = None
        raw = os.fspath(path)
        if raw in (":memory:", ""):
            self._file = memory_file(busy_timeout_ms)
            try:
                _migrate(self._file, max_retries)
            except BaseException:
                self._file.close()
                raise
        else:
            from harombe_core.store.encryption import resolve_key

            self._lease = open_file(
                raw,
                key=resolve_key(encryption_key),
                busy_timeout_ms=busy_timeout_ms,
                schema_version=SCHEMA_VERSION,
                setup=functools.partial(_setup_file, retries=max_retries),
            )
            self._file = self._lease.value
            self._finalizer = orphan_on_collect(self, self._lease)
        self.location = self._file.location
        self._keywords = keyword_indexer(self._file, max_retries)

    @property
    def file(self) -> SQLiteFile:
        """The database file's connections, shared by every store opened on it in this
        process (a private one for ``":memory:"``): the identity to key what else belongs to
        the file, such as a semantic index, for as long as it stays open."""
        return self._file

    @property
    def encrypted(self) -> bool:
        """True when the file is encrypted (SQLCipher): everything in it is covered by the key."""
        return self._file.encrypted

    @property
    def read_only(self) -> bool:
        """True when the file could not be opened for writing; writes are refused."""
        return self._file.read_only

    def close(self) -> None:
        """Close this store; the file's connections close with the last store on it."""
        if self._closed:
            return
        self._closed = True
        if self._lease is None:
            self._keywords.stop()
            self._file.close()
        else:
            self._finalizer.detach()
            self._lease.release()

    def _open_file(self) -> SQLiteFile:
        if self._closed:
            raise StoreError(f"{self.location}: the store is closed; open a new MemoryManager.")
        return self._file

    # transactions -------------------------------------------------------------------------
    def _write(
        self, fn: Callable[[sqlite3.Connection], T], *, adds: bool = False, begin: bool = True
    ) -> T:
        """Run ``fn`` in one IMMEDIATE transaction, retrying while the database is locked.

        Inside :meth:`atomic` (on its thread) ``fn`` joins that block's transaction instead.
        ``adds``: ``fn`` may add messages, so the keyword indexer is woken after the commit.
        ``begin=False``: ``fn`` is one statement, its own transaction (no BEGIN and COMMIT).
        """
        result = self._open_file().write(fn, self._max_retries, begin=begin)
        if adds:
            self._keywords.notify()
        return result

    def atomic(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` as one transaction: every store call it makes on this thread joins it.

        All of ``fn``'s writes commit together or not at all (a killed process leaves none of
        them). If a call inside fails, the block is rolled back and raises that error, even if
        ``fn`` caught it. Other writers wait for the block (``busy_timeout``, then retries),
        so keep it to one job such as an import. A nested ``atomic`` joins the outer block, and
        so do the calls of every other store on this file on this thread (they share its
        connection).
        """
        return self._open_file().atomic(fn, self._max_retries)

    def transaction(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        adds_messages: bool = True,
        begin: bool = True,
    ) -> T:
        """Run ``fn(connection)`` in one write transaction, with the store's retries.

        For tables kept beside the messages by an extension (the LangGraph store of the
        LangChain adapter, the stored vectors), so they share this file, its locking and its
        error types. ``adds_messages=False`` says ``fn`` adds no message, so the keyword
        indexer is not woken for it. ``begin=False`` for an ``fn`` of one statement, which
        commits by itself (no BEGIN and COMMIT around it).
        """
        return self._write(fn, adds=adds_messages, begin=begin)

    def snapshot(self, fn: Callable[[sqlite3.Connection], T], *, begin: bool = True) -> T:
        """Run ``fn(connection)`` in one read transaction: a consistent view of the file that
        takes no write lock, so writers in other processes are never kept waiting. Inside
        :meth:`atomic` (on its thread) it reads in that block's transaction. ``begin=False``
        for an ``fn`` of one statement (its own snapshot: no BEGIN and COMMIT around it)."""
        return self._open_file().snapshot(fn, begin=begin)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of one read-only statement (see :meth:`transaction`)."""
        return self._read(sql, params)

    def _settle(self) -> None:
        """Write first the derived rows this process owes the file (see
        :mod:`~harombe_core.store.pending`), unless this thread is inside one of the file's
        operations (a read or write nested in a snapshot or a transaction): a job drained
        there would run its writes on that operation's connection, inside its transaction,
        and fail. The operation settled when it began."""
        if not self._file.running_here():
            pending.settle(self.location, self._file.block)

    def run(self, op: Op[T]) -> T:
        """Run one operation (:mod:`harombe_core.store.ops`) in one transaction: a write under
        the write lock (waking the keyword indexer if it added messages), a read in a read
        snapshot that never takes it. Inside :meth:`atomic` it joins that block. Derived rows
        this process still owes the file are written first (:mod:`~harombe_core.store.pending`).
        """
        if op.empty:
            return op.result_without_sql(SQLITE)
        self._settle()
        if op.write:
            return self._write(lambda c: drive(c, op.body(SQLITE)), adds=op.adds_messages)
        return self._open_file().snapshot(lambda c: drive(c, op.body(SQLITE)))

    async def arun(self, op: Op[T]) -> T:
        """:meth:`run` on a worker thread (SQLite has no async driver): one hop per op."""
        if op.empty:
            return op.result_without_sql(SQLITE)
        return await off_loop(self.run, op)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        self._settle()
        return self._open_file().read(sql, params)

    # derived indexes ----------------------------------------------------------------------
    def erasure_owed(self) -> bool:
        """True while a deletion's text may still be in this file's bytes: the keyword index
        or the WAL not erased since (one indexed read)."""
        file = self._open_file()
        if file.read_only:
            return False
        return file.snapshot(lambda c: owed(c, ERASED_KEYWORDS) is not None, begin=False)

    def erasure_debt(self) -> str | None:
        """The erasure the file records as owed (the keyword index, the WAL, an embedded
        vector index), as one token that changes with every deletion; None when nothing is
        owed or the file is open for reading only (one indexed read)."""
        file = self._open_file()
        if file.read_only:
            return None
        debts = file.snapshot(lambda c: [owed(c, ERASED_KEYWORDS), owed(c, ERASED_VECTORS)])
        return None if debts == [None, None] else f"{debts[0]}/{debts[1]}"

    def erase_deleted(self) -> int:
        """Do now what the file's last close does after a deletion, with the file open: merge
        the keyword index's segments (dropping deleted entries), then truncate the WAL.
        Returns the bytes the WAL still holds when a reader with an older snapshot kept it
        from being truncated (0 when it was: no deleted text is left in the files).

        Writers wait only for the merge (one pass over the keyword index, in one short
        transaction); the truncation waits for readers only a moment
        (:meth:`SQLiteFile.truncate_wal` with :data:`TRUNCATE_WAIT_MS`), so
        call again later while this returns more than 0 (the merge is not repeated). The
        debt stays recorded until the WAL is truncated, so a close or another process pays
        it if this one cannot. Nothing owed: costs one read."""
        file = self._open_file()
        if file.read_only:
            return 0
        return _erase_keywords(file, self._max_retries, wait_ms=TRUNCATE_WAIT_MS)

    def index_keywords(self) -> int:
        """Bring the keyword index up to date now; returns the rows indexed since the previous
        call in this process (by this call or by the background indexer).

        Searches do not need it (they score what the index lacks themselves) and writers never
        wait for it; it is for ``harombe reindex`` and for a caller that wants the index
        complete at a known point. Costs one indexed lookup when nothing is new; otherwise
        indexes every new message in one transaction (fast: one FTS5 segment).
        """
        self._open_file()
        return self._keywords.index_now()
