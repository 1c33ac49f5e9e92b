"""SQLite store: the default source of truth.

Why it looks the way it does:

* WAL journal, so readers never wait for a writer and a crash never loses a committed row.
* Every write is one ``BEGIN IMMEDIATE`` transaction: it takes the write lock up front (no
  deadlock on upgrade), waits ``busy_timeout`` for it, and is retried with exponential backoff
  while another process holds it, so concurrent writers see no error.
* Each thread gets its own connection (sqlite3 connections are not shareable across threads);
  the async twins in the manager run on worker threads and so never block the event loop.
* A file is checked before anything is written to it: the SQLite header, the size the header
  promises, our ``application_id`` and the schema version. A foreign or corrupt file is refused
  with :class:`NotAHarombeDatabaseError` and left byte-for-byte as it was.
* Schema changes are forward migrations keyed by ``PRAGMA user_version``, each applied in the
  same transaction that bumps the version.
* The keyword index (FTS5, BM25) is derived: each row holds the message and the turn it
  answers, so a question finds its answer. It is brought up to date (one transaction, many rows)
  just before it is read, not on every append: an FTS5 row costs a fresh index segment per
  commit, which would triple the cost of ``save_message``. A high-water mark in ``harombe_meta``
  makes the catch-up idempotent and safe with many writers (ids grow in commit order).
* A keyword search leaves out the words that are in a large share of rows when the query has
  rarer ones (:meth:`SQLiteStore.keyword_search`), so its cost follows the rare words.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import random
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from harombe_core.errors import (
    HarombeError,
    InvalidInputError,
    NotAHarombeDatabaseError,
    SchemaTooNewError,
    StorageFullError,
    StoreBusyError,
    StoreError,
    StoreReadOnlyError,
)
from harombe_core.limits import current_limits
from harombe_core.models import Message, Session
from harombe_core.owners import check_owner
from harombe_core.store.base import UNSET, AtomicBlock, KeywordHit, SearchScope
from harombe_core.validate import (
    check_count,
    check_mapping,
    check_time,
    optional_count,
    optional_text,
)
from harombe_core.validate import check_id as _check_id

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SQLiteStore", "from_micros", "to_micros"]

log = logging.getLogger(__name__)

#: Written to the SQLite header so a harombe database can be told from any other SQLite file.
APPLICATION_ID = 0x48524D42  # "HRMB"
SQLITE_MAGIC = b"SQLite format 3\x00"

T = TypeVar("T")

_MESSAGE_COLUMNS = (
    "m.id, m.session_id, m.role, m.content, m.name, m.tool_calls, m.tool_call_id, m.metadata, "
    "m.created_at, m.token_count, m.parent_id"
)
#: A message (alias ``m``) whose vector is not stored yet.
_NO_VECTOR = "NOT EXISTS (SELECT 1 FROM message_vectors v WHERE v.message_id = m.id)"
_SESSION_COLUMNS = (
    "id, user_id, system_prompt, metadata, created_at, updated_at, message_count, summary, "
    "summary_json, summary_until_id"
)

# Each migration is a list of statements run in one transaction with the version bump.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE harombe_meta (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        )""",
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            user_id TEXT,
            system_prompt TEXT,
            system_prompt_tokens INTEGER NOT NULL DEFAULT 0,
            metadata TEXT NOT NULL DEFAULT '{}',
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            summary TEXT,
            summary_json TEXT,
            summary_until_id INTEGER
        )""",
        "CREATE INDEX sessions_updated ON sessions(updated_at DESC)",
        "CREATE INDEX sessions_user_updated ON sessions(user_id, updated_at DESC)",
        """CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
            content TEXT NOT NULL,
            name TEXT,
            tool_calls TEXT,
            tool_call_id TEXT,
            metadata TEXT NOT NULL DEFAULT '{}',
            created_at INTEGER NOT NULL,
            token_count INTEGER NOT NULL,
            parent_id INTEGER REFERENCES messages(id) ON DELETE SET NULL,
            summary_json TEXT,
            embedded INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX messages_session ON messages(session_id, id)",
        "CREATE INDEX messages_parent ON messages(parent_id) WHERE parent_id IS NOT NULL",
        "CREATE INDEX messages_unembedded ON messages(id) WHERE embedded = 0",
        """CREATE VIRTUAL TABLE messages_fts USING fts5(
            content, context, tokenize = 'porter unicode61 remove_diacritics 2'
        )""",
        """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
            DELETE FROM messages_fts WHERE rowid = old.id;
        END""",
    ],
    # 2: each message's embedding as a float32 blob, so small scopes are searched exactly here
    # and the vector index can be rebuilt without re-embedding.
    [
        """CREATE TABLE message_vectors (
            message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
            vector BLOB NOT NULL
        )""",
    ],
    # 3: long-term key-value memory (the LangGraph store of the LangChain adapter): JSON values
    # under a dotted namespace, optional expiry, and one embedding per indexed text field.
    [
        """CREATE TABLE store_items (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            expires_at INTEGER,
            ttl_minutes REAL,
            PRIMARY KEY (namespace, key)
        )""",
        "CREATE INDEX store_items_expiry ON store_items(expires_at) WHERE expires_at IS NOT NULL",
        """CREATE TABLE store_vectors (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            path TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (namespace, key, path),
            FOREIGN KEY (namespace, key) REFERENCES store_items(namespace, key) ON DELETE CASCADE
        )""",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)
_KNOWN_TABLES = {
    "harombe_meta", "sessions", "messages", "messages_fts", "message_vectors", "store_items",
    "store_vectors",
}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(value: datetime) -> int:
    """Datetimes are stored as integer microseconds since the epoch: exact, sortable, small.

    A time that is not already UTC is converted (naive ones are taken as UTC); one whose UTC
    equivalent falls outside years 1 to 9999 is refused with InvalidInputError.
    """
    if value.tzinfo is not UTC:
        value = check_time(value, "time")
    return (value - _EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    # Timedelta arithmetic rather than fromtimestamp(): exact, and valid for years 1 to 9999.
    return _EPOCH + timedelta(microseconds=int(value))


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def session_changes(
    *,
    system_prompt: Any = UNSET,
    system_prompt_tokens: Any = UNSET,
    metadata: Any = UNSET,
    summary: Any = UNSET,
    summary_data: Any = UNSET,
    summary_until_id: Any = UNSET,
) -> dict[str, Any]:
    """Column -> stored value for the session fields given (UNSET ones are left out).

    Shared by every backend so an update means the same thing everywhere; column names come
    from this fixed set, never from the caller. Every value is checked against its kind and
    size limit (:mod:`harombe_core.limits`) here, whichever path it came by (manager, import,
    migration), before anything is written.
    """
    limits = current_limits()
    changes: dict[str, Any] = {}
    if system_prompt is not UNSET:
        changes["system_prompt"] = optional_text(
            system_prompt,
            "system_prompt",
            limit=limits.system_prompt_chars,
            field="system_prompt_chars",
        )
    if system_prompt_tokens is not UNSET:
        changes["system_prompt_tokens"] = check_count(
            system_prompt_tokens, "system_prompt_tokens"
        )
    if metadata is not UNSET:
        changes["metadata"] = _dumps(
            check_mapping(
                metadata,
                "session metadata",
                limit=limits.session_metadata_chars,
                field="session_metadata_chars",
            )
        )
    if summary is not UNSET:
        changes["summary"] = optional_text(
            summary, "summary", limit=limits.summary_chars, field="summary_chars"
        )
    if summary_data is not UNSET:
        changes["summary_json"] = None if summary_data is None else _dumps(
            check_summary(summary_data, "summary_data")
        )
    if summary_until_id is not UNSET:
        changes["summary_until_id"] = optional_count(summary_until_id, "summary_until_id")
    return changes


def check_summary(value: Any, what: str) -> dict[str, Any]:
    """A session's or a message's summary data: a JSON object within ``summary_chars``."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{what} must be a dict, got {type(value).__name__}.")
    limits = current_limits()
    return check_mapping(value, what, limit=limits.summary_chars, field="summary_chars")


def session_span(message_times: Sequence[int], now: int) -> tuple[int, int]:
    """(created_at, updated_at) a batch of messages gives its session, in microseconds.

    A session's last activity is its newest message's time, not the moment it was written:
    imported history keeps its real dates, so it sorts and prunes by when it happened. A
    session first made by this batch starts at its oldest message (or now, if later).
    """
    if not message_times:
        return now, now
    return min(now, min(message_times)), max(message_times)


def _row_to_message(row: Sequence[Any]) -> Message:
    # Rows were validated when they were written, so they skip Message's checks: a token window
    # builds dozens of these per call.
    return Message.trusted(
        id=row[0],
        session_id=row[1],
        role=row[2],
        content=row[3],
        name=row[4],
        tool_calls=json.loads(row[5]) if row[5] is not None else None,
        tool_call_id=row[6],
        metadata=json.loads(row[7]) if row[7] != "{}" else {},
        created_at=from_micros(row[8]),
        token_count=row[9],
        parent_id=row[10],
    )


def _row_to_session(row: Sequence[Any]) -> Session:
    return Session(
        id=row[0],
        user_id=row[1],
        system_prompt=row[2],
        metadata=json.loads(row[3]),
        created_at=from_micros(row[4]),
        updated_at=from_micros(row[5]),
        message_count=row[6],
        summary=row[7],
        summary_data=json.loads(row[8]) if row[8] is not None else None,
        summary_until_id=row[9],
    )


_WORD = re.compile(r"\w+", re.UNICODE)

#: The keyword index's tokenizer (``messages_fts``, migration 1); query words go through it too.
_TOKENIZER = "porter unicode61 remove_diacritics 2"


def query_words(text: str) -> list[str]:
    """The distinct words of free text that a keyword search looks for (at most 64)."""
    words = dict.fromkeys(w.lower() for w in _WORD.findall(text) if len(w) > 1 or w.isdigit())
    return list(words)[:64]


def fts_query(text: str | Sequence[str]) -> str | None:
    """Turn free text (or its words) into an FTS5 query: every word quoted (no syntax
    injection), OR-ed.

    BM25 then ranks by how many rare words match, which is what a user typing a question means.
    """
    words = query_words(text) if isinstance(text, str) else list(text)
    if not words:
        return None
    return " OR ".join(f'"{w}"' for w in words)


_TERMS_LOCK = threading.Lock()
_TERMS_DB: list[sqlite3.Connection] = []


@functools.lru_cache(maxsize=16_384)
def index_terms(word: str) -> tuple[str, ...]:
    """The terms the keyword index holds for ``word``: FTS5's own tokenizer, so case-folded,
    accents removed and porter-stemmed exactly as the messages were ("running" -> "run")."""
    with _TERMS_LOCK:
        if not _TERMS_DB:
            db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            db.execute(f"CREATE VIRTUAL TABLE words USING fts5(word, tokenize = '{_TOKENIZER}')")
            db.execute("CREATE VIRTUAL TABLE word_terms USING fts5vocab(words, 'instance')")
            _TERMS_DB.append(db)
        db = _TERMS_DB[0]
        db.execute("BEGIN")
        try:
            db.execute("INSERT INTO words (rowid, word) VALUES (1, ?)", (word,))
            rows = db.execute("SELECT term FROM word_terms ORDER BY offset").fetchall()
        finally:
            db.execute("ROLLBACK")
    return tuple(str(r[0]) for r in rows)


def _promised_size(header: bytes) -> int:
    """The file size a database header promises (0 when it makes no promise).

    The header's page count is only meaningful when the change counter matches the
    version-valid-for number (SQLite file format, section 1.3.7).
    """
    if header[24:28] != header[92:96]:
        return 0
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    return page_size * int.from_bytes(header[28:32], "big")


def _inspect_once(file: Path) -> NotAHarombeDatabaseError | None:
    """Why ``file`` cannot be opened as a harombe database right now, or None if it can."""
    try:
        with file.open("rb") as handle:
            header = handle.read(100)
            size = os.fstat(handle.fileno()).st_size
    except OSError as exc:
        raise StoreError(f"cannot read {file}: {exc.strerror}") from exc
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        return NotAHarombeDatabaseError(
            f"{file} is not a SQLite database (no SQLite header), so it is not a harombe "
            "database; it was left untouched. Pass a new path with storage_path=..."
        )
    promised = _promised_size(header)
    if size < promised:
        return NotAHarombeDatabaseError(
            f"{file} is truncated ({size} bytes, its header promises {promised}); it was left "
            "untouched. Restore it from a backup."
        )
    # A file whose header does not name us is read as immutable: no lock, and none of the
    # -wal/-shm files a WAL-mode database would otherwise get beside it. One with a -wal beside
    # it is live (its header is stale until a checkpoint): read it through SQLite's locks.
    ours = int.from_bytes(header[68:72], "big") == APPLICATION_ID
    live = ours or Path(f"{file}-wal").exists()
    try:
        app_id, tables, check = _probe(file, "mode=ro" if live else "mode=ro&immutable=1")
    except sqlite3.Error as exc:
        return NotAHarombeDatabaseError(
            f"{file} cannot be read as a SQLite database ({exc}); it was left untouched. If "
            "it is a harombe database it is corrupt: restore it from a backup."
        )
    if app_id != APPLICATION_ID and tables:
        return NotAHarombeDatabaseError(
            f"{file} is a SQLite database of another application (tables: "
            f"{', '.join(sorted(tables)[:5])}); it was left untouched. Point harombe at its "
            "own file."
        )
    if check != "ok":
        return NotAHarombeDatabaseError(
            f"{file} is a damaged harombe database ({check}); it was left untouched. "
            "Restore it from a backup."
        )
    return None


def _probe(file: Path, options: str) -> tuple[int, set[str], str]:
    """Application id, table names and (for our files) quick_check of a file, read-only."""
    probe = sqlite3.connect(f"{file.as_uri()}?{options}", uri=True)
    try:
        app_id = int(probe.execute("PRAGMA application_id").fetchone()[0])
        tables = {
            r[0]
            for r in probe.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        }
        check = "ok"
        if app_id == APPLICATION_ID:
            check = probe.execute("PRAGMA quick_check(1)").fetchone()[0]
        return app_id, tables, check
    finally:
        probe.close()


def _classify(exc: sqlite3.Error, location: str) -> StoreError:
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
            f"{location} is corrupt ({exc}). Restore it from a backup or export what can be "
            "read with `harombe export` and start a new file."
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


def _is_busy(exc: sqlite3.Error) -> bool:
    message = str(exc).lower()
    return "locked" in message or "busy" in message


class SQLiteStore:
    """The default :class:`~harombe_core.store.base.MessageStore`.

    ``path`` is a file path (``~`` expanded, parent directories created, file mode 0600) or
    ``":memory:"`` for a private in-memory database shared by this object's threads.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        busy_timeout_ms: int = 5_000,
        max_retries: int = 12,
        encryption_key: str | None = None,
    ) -> None:
        self._busy_timeout_ms = busy_timeout_ms
        self._max_retries = max_retries
        # SQLCipher key (argument, else HAROMBE_DB_KEY); see harombe_core.store.encryption.
        self._key: str | None = None
        if os.fspath(path) not in (":memory:", ""):
            from harombe_core.store.encryption import resolve_key

            self._key = resolve_key(encryption_key)
        self._local = threading.local()
        self._block = AtomicBlock()  # this thread's atomic() block, if one is open
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self._term_counts = _TermCounts()  # shared by this store's threads
        self._term_lock = threading.Lock()
        raw = os.fspath(path)
        if raw in (":memory:", ""):
            self.location = ":memory:"
            self._uri = f"file:harombe-{uuid.uuid4().hex}?mode=memory&cache=shared"
            self._keepalive: sqlite3.Connection | None = self._connect()
        else:
            file = Path(raw).expanduser().resolve()
            self.location = str(file)
            self._uri = file.as_uri()
            self._keepalive = None
            self._prepare_file(file)
        try:
            self._migrate()
        except BaseException:
            self.close()  # a refused file must not stay open (or locked) behind the error
            raise

    # connection handling ------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
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
            conn.execute("PRAGMA foreign_keys = ON")
            if self.location != ":memory:":
                conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise _classify(exc, self.location) from exc
        with self._lock:
            self._connections.append(conn)
        return conn

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"{self.location}: the store is closed; open a new MemoryManager.")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def close(self) -> None:
        """Close every connection this store opened, from any thread."""
        with self._lock:
            conns, self._connections = self._connections, []
            self._closed = True
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()

    # opening and migrations ---------------------------------------------------------------
    def _prepare_file(self, file: Path) -> None:
        if file.is_dir():
            raise NotAHarombeDatabaseError(f"{file} is a directory; pass a file path.")
        if file.exists() and file.stat().st_size > 0:
            if self._key is not None:
                from harombe_core.store.encryption import check_key

                check_key(file, self._key)
                return
            self._inspect_existing(file)
            return
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            if not file.exists():
                fd = os.open(file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
                os.close(fd)
        except FileExistsError:
            pass
        except OSError as exc:
            raise StoreReadOnlyError(
                f"cannot create {file} ({exc.strerror}). Choose a writable location with "
                "storage_path=... or HAROMBE_DB."
            ) from exc

    def _inspect_existing(self, file: Path) -> None:
        """Refuse foreign or damaged files before anything can write to them.

        Another process may be creating or checkpointing this very file: its header can
        promise pages not yet written, and a lock-free (immutable) read can see the schema
        before the page that names us. Such states pass within milliseconds while a foreign
        or damaged file stays as it is, so a refusal only stands once it held for a second.
        """
        deadline = time.monotonic() + 1.0
        while True:
            problem = _inspect_once(file)
            if problem is None:
                return
            if time.monotonic() >= deadline:
                raise problem
            time.sleep(0.02)

    def _enable_wal(self, conn: sqlite3.Connection) -> str:
        """Switch the file to WAL once; it stays so, later opens only read the mode.

        Switching needs an exclusive lock and SQLite reports a busy database at once rather
        than through the busy handler, so several processes creating one new file retry here.
        """
        delay, attempt = 0.005, 0
        while True:
            try:
                mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
                if mode.lower() == "wal":
                    return mode
                return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.Error as exc:
                if not _is_busy(exc) or attempt >= self._max_retries:
                    raise _classify(exc, self.location) from exc
            attempt += 1
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)

    def _migrate(self) -> None:
        conn = self._conn
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error as exc:
            raise _classify(exc, self.location) from exc
        if version > SCHEMA_VERSION:
            raise SchemaTooNewError(
                f"{self.location} has schema version {version}, newer than this harombe "
                f"understands ({SCHEMA_VERSION}). Upgrade harombe-memory."
            )
        if self.location != ":memory:":
            mode = self._enable_wal(conn)
            if str(mode).lower() != "wal":
                log.warning("%s: journal mode is %s, not WAL", self.location, mode)
        if version == SCHEMA_VERSION:
            return

        def apply(c: sqlite3.Connection) -> None:
            current = c.execute("PRAGMA user_version").fetchone()[0]
            for index in range(current, SCHEMA_VERSION):
                for statement in MIGRATIONS[index]:
                    c.execute(statement)
                c.execute(f"PRAGMA user_version = {index + 1}")
            c.execute(f"PRAGMA application_id = {APPLICATION_ID}")

        self._write(apply)

    # transactions -------------------------------------------------------------------------
    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one IMMEDIATE transaction, retrying while the database is locked.

        Inside :meth:`atomic` (on its thread) ``fn`` joins that block's transaction instead.
        """
        conn = self._conn
        if self._block.handle is not None:
            return self._write_inside(conn, fn)
        delay = 0.005
        for attempt in range(self._max_retries + 1):
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if _is_busy(exc) and attempt < self._max_retries:
                    time.sleep(delay * (1 + random.random()))
                    delay = min(delay * 2, 1.0)
                    continue
                raise _classify(exc, self.location) from exc
            try:
                result = fn(conn)
                conn.execute("COMMIT")
                return result
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                busy = isinstance(exc, sqlite3.OperationalError) and _is_busy(exc)
                if busy and attempt < self._max_retries:
                    time.sleep(delay * (1 + random.random()))
                    delay = min(delay * 2, 1.0)
                    continue
                if isinstance(exc, sqlite3.Error):
                    raise self._typed(exc) from exc
                raise
        raise StoreBusyError(f"{self.location}: still locked after {self._max_retries} retries")

    def _typed(self, exc: sqlite3.Error) -> HarombeError:
        if isinstance(exc, sqlite3.IntegrityError):
            return InvalidInputError(f"{self.location}: {exc}")
        return _classify(exc, self.location)

    def _write_inside(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` inside this thread's :meth:`atomic` block."""
        with self._block.call():
            try:
                return fn(conn)
            except sqlite3.Error as exc:
                raise self._typed(exc) from exc

    def atomic(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` as one transaction: every store call it makes on this thread joins it.

        All of ``fn``'s writes commit together or not at all (a killed process leaves none of
        them). If a call inside fails, the block is rolled back and raises that error, even if
        ``fn`` caught it. Other writers wait for the block (``busy_timeout``, then retries),
        so keep it to one job such as an import. A nested ``atomic`` joins the outer block.
        """
        if self._block.handle is not None:
            return fn()

        def block(conn: sqlite3.Connection) -> T:
            with self._block.open(conn):
                value = fn()
            return self._block.result(value)

        return self._write(block)

    def transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` in one write transaction, with the store's retries.

        For tables kept beside the messages by an extension (the LangGraph store of the
        LangChain adapter), so they share this file, its locking and its error types.
        """
        return self._write(fn)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of one read-only statement (see :meth:`transaction`)."""
        return self._read(sql, params)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise _classify(exc, self.location) from exc

    # sessions -----------------------------------------------------------------------------
    def create_session(
        self,
        session_id: str,
        *,
        user_id: str | None = None,
        system_prompt: str | None = None,
        system_prompt_tokens: int = 0,
        metadata: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
    ) -> Session:
        _check_id(session_id, "session_id")
        if user_id is not None:
            _check_id(user_id, "user_id")
        now = to_micros(created_at or datetime.now(UTC))
        fields = session_changes(
            system_prompt=system_prompt,
            system_prompt_tokens=system_prompt_tokens,
            metadata=metadata,
        )
        system_prompt, meta = fields["system_prompt"], fields["metadata"]

        def insert(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO sessions (id, user_id, system_prompt, system_prompt_tokens, "
                "metadata, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (session_id, user_id, system_prompt, system_prompt_tokens, meta, now, now),
            )

        try:
            self._write(insert)
        except InvalidInputError as exc:
            raise InvalidInputError(
                f"session {session_id!r} already exists; load it with load_session() or choose "
                "another id."
            ) from exc
        session = self.get_session(session_id)
        assert session is not None
        return session

    def get_session(self, session_id: str) -> Session | None:
        _check_id(session_id, "session_id")
        rows = self._read(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,))
        return _row_to_session(rows[0]) if rows else None

    def update_session(
        self,
        session_id: str,
        *,
        user_id: Any = UNSET,
        system_prompt: Any = UNSET,
        system_prompt_tokens: Any = UNSET,
        metadata: Any = UNSET,
        summary: Any = UNSET,
        summary_data: Any = UNSET,
        summary_until_id: Any = UNSET,
    ) -> None:
        _check_id(session_id, "session_id")
        changes: dict[str, Any] = {}
        if user_id is not UNSET:
            changes["user_id"] = user_id
        changes.update(
            session_changes(
                system_prompt=system_prompt,
                system_prompt_tokens=system_prompt_tokens,
                metadata=metadata,
                summary=summary,
                summary_data=summary_data,
                summary_until_id=summary_until_id,
            )
        )
        if not changes:
            return
        assignments = ", ".join(f"{column} = ?" for column in changes)

        def update(c: sqlite3.Connection) -> int:
            before = c.execute("SELECT user_id FROM sessions WHERE id = ?", (session_id,))
            owner = before.fetchone()
            cursor = c.execute(
                f"UPDATE sessions SET {assignments} WHERE id = ?", (*changes.values(), session_id)
            )
            if owner is not None and "user_id" in changes and owner[0] != changes["user_id"]:
                # The vector index files each vector under its owner: in the same transaction,
                # a moved session's vectors go back to the tail (searched exactly from here)
                # until the index owner files them under the new owner.
                c.execute(
                    "UPDATE messages SET embedded = 0 WHERE session_id = ? AND embedded != 0",
                    (session_id,),
                )
            return cursor.rowcount

        if self._write(update) == 0:
            from harombe_core.errors import SessionNotFoundError

            raise SessionNotFoundError(f"no session {session_id!r} in {self.location}")

    def system_prompt_tokens(self, session_id: str) -> int:
        rows = self._read("SELECT system_prompt_tokens FROM sessions WHERE id = ?", (session_id,))
        return int(rows[0][0]) if rows else 0

    def list_sessions(
        self, *, limit: int | None = 10, user_id: str | None = None, offset: int = 0
    ) -> list[Session]:
        sql = f"SELECT {_SESSION_COLUMNS} FROM sessions"
        params: list[Any] = []
        if user_id is not None:
            sql += " WHERE user_id = ?"
            params.append(user_id)
        sql += " ORDER BY updated_at DESC, rowid DESC LIMIT ? OFFSET ?"
        params += [-1 if limit is None else limit, offset]
        return [_row_to_session(r) for r in self._read(sql, params)]

    def delete_session(self, session_id: str) -> bool:
        _check_id(session_id, "session_id")
        return bool(
            self._write(
                lambda c: c.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount
            )
        )

    def delete_sessions_before(self, cutoff: datetime) -> list[str]:
        """Delete sessions with no activity since ``cutoff``; returns their ids."""
        limit = to_micros(cutoff)

        def delete(c: sqlite3.Connection) -> list[str]:
            ids = [
                r[0]
                for r in c.execute("SELECT id FROM sessions WHERE updated_at < ?", (limit,))
            ]
            c.execute("DELETE FROM sessions WHERE updated_at < ?", (limit,))
            return ids

        return self._write(delete)

    # messages -----------------------------------------------------------------------------
    def add_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        user_id: str | None = None,
        replace_ids: Sequence[int] = (),
    ) -> list[int]:
        """Insert messages (creating the session if needed) and index them, in one transaction.

        ``replace_ids`` are messages of this session deleted in the same transaction, so a
        framework's "replace the history" or "delete message i" never leaves half a history.
        """
        _check_id(session_id, "session_id")
        doomed = [int(i) for i in replace_ids]
        if user_id is not None:
            _check_id(user_id, "user_id")
        rows = []
        for message in messages:
            if message.token_count is None:
                raise InvalidInputError("token_count must be set before a message is stored.")
            rows.append(
                (
                    session_id,
                    message.role,
                    message.content,
                    message.name,
                    None if message.tool_calls is None else _dumps(message.tool_calls),
                    message.tool_call_id,
                    _dumps(message.metadata) if message.metadata else "{}",
                    to_micros(message.created_at),
                    message.token_count,
                    message.parent_id,
                )
            )
        created, active = session_span([r[7] for r in rows], time.time_ns() // 1000)

        def insert(c: sqlite3.Connection) -> list[int]:
            # One upsert creates the session or bumps its activity and count. The keyword index
            # is caught up lazily (see index_keywords), so an append touches as few pages as it can.
            # It returns the owner: a user who is not it rolls the whole call back.
            ((owner,),) = c.execute(
                "INSERT INTO sessions (id, user_id, created_at, updated_at, message_count) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                "updated_at = MAX(updated_at, excluded.updated_at), "
                "message_count = message_count + excluded.message_count RETURNING user_id",
                (session_id, user_id, created, active, len(rows)),
            ).fetchall()  # read to the end: the statement must finish before COMMIT
            check_owner(session_id, owner, user_id)
            removed = 0
            for start in range(0, len(doomed), 500):
                chunk = doomed[start : start + 500]
                removed += c.execute(
                    f"DELETE FROM messages WHERE session_id = ? AND id IN "
                    f"({','.join('?' * len(chunk))})",
                    (session_id, *chunk),
                ).rowcount
            ids: list[int] = []
            for row in rows:
                cursor = c.execute(
                    "INSERT INTO messages (session_id, role, content, name, tool_calls, "
                    "tool_call_id, metadata, created_at, token_count, parent_id) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
                ids.append(int(cursor.lastrowid or 0))
            if removed:
                c.execute(
                    "UPDATE sessions SET message_count = message_count - ? WHERE id = ?",
                    (removed, session_id),
                )
            return ids

        return self._write(insert)

    def get_messages(
        self, session_id: str, *, after_id: int | None = None, limit: int | None = None
    ) -> list[Message]:
        _check_id(session_id, "session_id")
        sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = ?"
        params: list[Any] = [session_id]
        if after_id is not None:
            sql += " AND m.id > ?"
            params.append(after_id)
        sql += " ORDER BY m.id LIMIT ?"
        params.append(-1 if limit is None else limit)
        return [_row_to_message(r) for r in self._read(sql, params)]

    def iter_newest(self, session_id: str) -> Iterator[Message]:
        """Newest first, fetched lazily: a token window stops reading as soon as it is full."""
        _check_id(session_id, "session_id")
        try:
            cursor = self._conn.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = ? "
                "ORDER BY m.id DESC",
                (session_id,),
            )
        except sqlite3.Error as exc:
            raise _classify(exc, self.location) from exc
        try:
            while True:
                batch = cursor.fetchmany(32)
                if not batch:
                    return
                for row in batch:
                    yield _row_to_message(row)
        finally:
            cursor.close()

    def get_messages_by_ids(
        self, ids: Sequence[int], scope: SearchScope | None = None
    ) -> list[Message]:
        """Messages with these ids that fall inside ``scope``, in the order of ``ids``."""
        wanted = [int(i) for i in ids]
        if not wanted:
            return []
        found: dict[int, Message] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            where, params = _scope_sql(scope)
            sql = (
                f"SELECT {_MESSAGE_COLUMNS} FROM messages m JOIN sessions s ON s.id = m.session_id "
                f"WHERE m.id IN ({','.join('?' * len(chunk))}){where}"
            )
            for row in self._read(sql, [*chunk, *params]):
                found[row[0]] = _row_to_message(row)
        return [found[i] for i in wanted if i in found]

    def count_messages(self, session_id: str | None = None) -> int:
        if session_id is None:
            return int(self._read("SELECT COUNT(*) FROM messages")[0][0])
        rows = self._read("SELECT message_count FROM sessions WHERE id = ?", (session_id,))
        return int(rows[0][0]) if rows else 0

    def clear_session(self, session_id: str) -> int:
        _check_id(session_id, "session_id")

        def clear(c: sqlite3.Connection) -> int:
            count = c.execute("DELETE FROM messages WHERE session_id = ?", (session_id,)).rowcount
            c.execute(
                "UPDATE sessions SET message_count = 0, summary = NULL, summary_json = NULL, "
                "summary_until_id = NULL WHERE id = ?",
                (session_id,),
            )
            return int(count)

        return self._write(clear)

    def set_parent(self, message_id: int, parent_id: int | None) -> None:
        def update(c: sqlite3.Connection) -> None:
            if c.execute(
                "UPDATE messages SET parent_id = ? WHERE id = ?", (parent_id, message_id)
            ).rowcount == 0:
                raise InvalidInputError(f"no message with id {message_id}")

        self._write(update)

    def set_message_summary(self, message_id: int, summary: Mapping[str, Any] | None) -> None:
        value = None if summary is None else _dumps(check_summary(summary, "message summary"))
        self._write(
            lambda c: c.execute(
                "UPDATE messages SET summary_json = ? WHERE id = ?", (value, message_id)
            )
        )

    def get_message_summaries(self, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        wanted = [int(i) for i in ids]
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            for mid, value in self._read(
                f"SELECT id, summary_json FROM messages WHERE id IN ({','.join('?' * len(chunk))}) "
                "AND summary_json IS NOT NULL",
                chunk,
            ):
                out[int(mid)] = json.loads(value)
        return out

    # derived indexes ----------------------------------------------------------------------
    def keyword_search(
        self, query: str, *, limit: int = 10, scope: SearchScope | None = None
    ) -> list[KeywordHit]:
        """BM25 over each message and the turn it answers, scoped in the same query.

        Words found in a large share of the rows are left out when the query has rarer ones
        (see :meth:`_drop_common_words`), so the cost follows the rare words, not the store.
        """
        words = query_words(query)
        if not words or limit <= 0:
            return []
        self.index_keywords()
        match = fts_query(self._drop_common_words(words))
        if scope is None or scope == SearchScope():
            # Unscoped, FTS5 ranks and cuts on its own (rank MATCH picks the function): the
            # messages table is only read for the rows returned.
            sql = (
                f"SELECT {_MESSAGE_COLUMNS}, f.rank FROM (SELECT rowid, rank FROM messages_fts "
                f"WHERE messages_fts MATCH ? AND rank MATCH 'bm25({_BM25_WEIGHTS})' "
                "ORDER BY rank LIMIT ?) f JOIN messages m ON m.id = f.rowid ORDER BY f.rank"
            )
            rows = self._read(sql, [match, limit])
        else:
            where, params = _scope_sql(scope)
            id_range, range_params = _fts_id_range(scope)
            where, params = where + id_range, [*params, *range_params]
            sql = (
                f"SELECT {_MESSAGE_COLUMNS}, bm25(messages_fts, {_BM25_WEIGHTS}) AS rank "
                "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
                "JOIN sessions s ON s.id = m.session_id "
                f"WHERE messages_fts MATCH ?{where} ORDER BY rank LIMIT ?"
            )
            rows = self._read(sql, [match, *params, limit])
        return [KeywordHit(_row_to_message(r[:-1]), -float(r[-1])) for r in rows]

    def _drop_common_words(self, words: list[str]) -> list[str]:
        """``words`` without those found in a large share of the rows, if rarer ones remain.

        With ``ORDER BY rank LIMIT``, FTS5 scores every row that matches any of the OR-ed
        words (one document-size lookup each), so a single word found in a third of the rows
        makes the search cost a third of the store. A word is left out when it is in more
        than ``_COMMON_SHARE`` (5 %) of the indexed rows and more than ``_COMMON_MIN_ROWS``
        (2,000) rows, and the query has a rarer word. Its BM25 weight (idf at most
        ln(19) = 2.9, against about 9 for a word in a handful of rows) barely moves the order of
        the rows the rarer words find, and the rows only it would add mostly rank below those.
        Below 2,000 rows scoring all of a word's rows takes a few milliseconds, so small stores
        keep every word. When every word is that common, the ``_KEEP_WHEN_ALL_COMMON`` (2)
        rarest are kept, so a query never loses all its words. A word whose terms are not in
        the index counts as rare (it matches nothing, so it costs nothing).

        Row counts come from an ``fts5vocab`` table over the index, looked up by each word's
        terms as FTS5's tokenizer makes them (:func:`index_terms`). They are cached per
        store and recounted when the store has grown by a tenth or after a minute, so a
        search usually costs no lookup at all; a slightly stale count only shifts which
        borderline words are left out.
        """
        if len(words) < 2:
            return words
        counts, rows = self._word_rows(words)
        threshold = max(rows * _COMMON_SHARE, _COMMON_MIN_ROWS)
        kept = [w for w in words if counts[w] <= threshold]
        if not kept:
            rarest = sorted(words, key=lambda w: counts[w])[:_KEEP_WHEN_ALL_COMMON]
            kept = [w for w in words if w in rarest]
        return kept

    def _word_rows(self, words: list[str]) -> tuple[dict[str, int], int]:
        """Each word's number of indexed rows (its rarest term's; 0 if not in the index), and
        the number of rows in the index."""
        upto = int(self._read("SELECT MAX(id) FROM messages")[0][0] or 0)
        with self._term_lock:
            counts = self._term_counts
            if counts.stale(upto):
                total = int(self._read("SELECT COUNT(*) FROM messages")[0][0])
                self._term_counts = counts = _TermCounts(total, upto, time.monotonic())
        out: dict[str, int] = {}
        for word in words:
            terms = index_terms(word)
            for term in terms:
                if term not in counts.rows_of:
                    counts.rows_of[term] = self._term_document_count(term)
            out[word] = min((counts.rows_of[t] for t in terms), default=0)
        return out, counts.rows

    def _term_document_count(self, term: str) -> int:
        conn = self._conn
        try:
            if getattr(self._local, "vocab", None) is not conn:
                # In the temp schema: nothing is written to the file, any schema version works.
                conn.execute(
                    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.messages_fts_rows "
                    "USING fts5vocab(main, messages_fts, 'row')"
                )
                self._local.vocab = conn
            row = conn.execute(
                "SELECT doc FROM temp.messages_fts_rows WHERE term = ?", (term,)
            ).fetchone()
        except sqlite3.Error as exc:
            raise _classify(exc, self.location) from exc
        return int(row[0]) if row else 0

    def pending_embeddings(self, limit: int) -> list[tuple[Message, str]]:
        """Oldest messages not embedded yet (no stored vector), each with the turn it answers.

        A message with ``embedded = 0`` and a stored vector is embedded but not yet in the
        vector index (see :mod:`harombe_core.vectors.stored`); it is not returned here.
        """
        self.index_keywords()
        rows = self._read(
            f"SELECT {_MESSAGE_COLUMNS}, f.context FROM messages m "
            "JOIN messages_fts f ON f.rowid = m.id WHERE m.embedded = 0 "
            f"AND {_NO_VECTOR} ORDER BY m.id LIMIT ?",
            (limit,),
        )
        return [(_row_to_message(r[:-1]), r[-1] or "") for r in rows]

    def mark_embedded(self, ids: Sequence[int]) -> None:
        wanted = [int(i) for i in ids]

        def mark(c: sqlite3.Connection) -> None:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                c.execute(
                    f"UPDATE messages SET embedded = 1 WHERE id IN ({','.join('?' * len(chunk))})",
                    chunk,
                )

        if wanted:
            self._write(mark)

    def reset_embedded(self) -> int:
        return int(
            self._write(
                lambda c: c.execute("UPDATE messages SET embedded = 0 WHERE embedded != 0").rowcount
            )
        )

    def rebuild_keyword_index(self) -> int:
        """Recreate every FTS row from the messages table (idempotent)."""

        def rebuild(c: sqlite3.Connection) -> int:
            c.execute("DELETE FROM messages_fts")
            count = 0
            previous_session: str | None = None
            context = ""
            for mid, session_id, content in c.execute(
                "SELECT id, session_id, content FROM messages ORDER BY session_id, id"
            ).fetchall():
                if session_id != previous_session:
                    previous_session, context = session_id, ""
                c.execute(
                    "INSERT INTO messages_fts (rowid, content, context) VALUES (?, ?, ?)",
                    (mid, content, context),
                )
                context = content
                count += 1
            _set_keyword_mark(c, _max_message_id(c))
            return count

        return self._write(rebuild)

    def index_keywords(self) -> int:
        """Bring the keyword index up to date with the messages table; returns rows indexed.

        Called before every read of the index. Costs one indexed lookup when nothing is new;
        otherwise indexes every new message in one transaction (fast: one FTS5 segment).
        """
        latest = self._read("SELECT MAX(id) FROM messages")[0][0] or 0
        mark = self._read("SELECT value FROM harombe_meta WHERE key = ?", (_KEYWORD_MARK,))
        if mark and int(mark[0][0]) >= latest:
            return 0

        def catch_up(c: sqlite3.Connection) -> int:
            row = c.execute(
                "SELECT value FROM harombe_meta WHERE key = ?", (_KEYWORD_MARK,)
            ).fetchone()
            if row is not None:
                done = int(row[0])
            else:  # a file whose index was written row by row: start after what it holds
                done = int(c.execute("SELECT MAX(rowid) FROM messages_fts").fetchone()[0] or 0)
            count = c.execute(
                "INSERT INTO messages_fts (rowid, content, context) "
                "SELECT m.id, m.content, COALESCE((SELECT p.content FROM messages p "
                "WHERE p.session_id = m.session_id AND p.id < m.id "
                "ORDER BY p.id DESC LIMIT 1), '') FROM messages m WHERE m.id > ? ORDER BY m.id",
                (done,),
            ).rowcount
            _set_keyword_mark(c, max(done, _max_message_id(c)))
            return int(count)

        return self._write(catch_up)

    def get_meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM harombe_meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        self._write(
            lambda c: c.execute(
                "INSERT INTO harombe_meta (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
        )

    def stats(self) -> dict[str, Any]:
        sessions, users = self._read("SELECT COUNT(*), COUNT(DISTINCT user_id) FROM sessions")[0]
        messages, tokens, pending = self._read(
            "SELECT COUNT(*), COALESCE(SUM(token_count), 0), "
            f"(SELECT COUNT(*) FROM messages m WHERE m.embedded = 0 AND {_NO_VECTOR}) "
            "FROM messages"
        )[0]
        size = 0
        if self.location != ":memory:":
            for suffix in ("", "-wal"):
                with contextlib.suppress(OSError):
                    size += os.stat(self.location + suffix).st_size
        return {
            "location": self.location,
            "schema_version": SCHEMA_VERSION,
            "sessions": sessions,
            "users": users,
            "messages": messages,
            "tokens": tokens,
            "pending_embeddings": pending,
            "bytes": size,
        }


_KEYWORD_MARK = "keyword_index_upto"
#: BM25 column weights: the turn a message answers counts 0.4 against the message itself.
_BM25_WEIGHTS = "1.0, 0.4"
#: Common words, see SQLiteStore._drop_common_words.
_COMMON_SHARE = 0.05
_COMMON_MIN_ROWS = 2_000
_KEEP_WHEN_ALL_COMMON = 2


@dataclass(slots=True)
class _TermCounts:
    """Rows per index term, counted when the index had ``rows`` rows and the highest message
    id was ``upto``, at ``time.monotonic()`` ``at``."""

    rows: int = 0
    upto: int = -1
    at: float = -math.inf
    rows_of: dict[str, int] = field(default_factory=dict)

    def stale(self, upto: int) -> bool:
        """Whether to count again: the store grew by a tenth, lost rows, or a minute passed."""
        return (
            upto - self.upto > self.rows / 10
            or upto < self.upto
            or time.monotonic() - self.at > 60
        )


def _max_message_id(c: sqlite3.Connection) -> int:
    return int(c.execute("SELECT MAX(id) FROM messages").fetchone()[0] or 0)


def _set_keyword_mark(c: sqlite3.Connection, upto: int) -> None:
    c.execute(
        "INSERT INTO harombe_meta (key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (_KEYWORD_MARK, str(upto)),
    )


def _scope_sql(scope: SearchScope | None) -> tuple[str, list[Any]]:
    """The WHERE fragment (on aliases ``m`` and ``s``) that keeps a query inside its scope."""
    if scope is None:
        return "", []
    parts: list[str] = []
    params: list[Any] = []
    if scope.user_id is not None:
        parts.append("s.user_id = ?")
        params.append(scope.user_id)
    if scope.session_id is not None:
        parts.append("m.session_id = ?")
        params.append(scope.session_id)
    if scope.roles:
        parts.append(f"m.role IN ({','.join('?' * len(scope.roles))})")
        params.extend(scope.roles)
    if scope.since is not None:
        parts.append("m.created_at >= ?")
        params.append(to_micros(scope.since))
    if scope.until is not None:
        parts.append("m.created_at <= ?")
        params.append(to_micros(scope.until))
    return ("".join(f" AND {p}" for p in parts), params)


def _fts_id_range(scope: SearchScope | None) -> tuple[str, list[Any]]:
    """A rowid range for FTS5 that contains every message of a session or user scope.

    FTS5 seeks straight to a rowid range, so a scoped keyword search then costs the scope's
    rows instead of every match in the store; the scope filter still decides what is returned.
    """
    if scope is None:
        return "", []
    if scope.session_id is not None:
        sub = "FROM messages WHERE session_id = ?"
        return (
            f" AND messages_fts.rowid BETWEEN (SELECT MIN(id) {sub}) AND (SELECT MAX(id) {sub})",
            [scope.session_id, scope.session_id],
        )
    if scope.user_id is not None:
        sub = (
            "FROM sessions s2 JOIN messages m2 ON m2.session_id = s2.id WHERE s2.user_id = ?"
        )
        return (
            f" AND messages_fts.rowid BETWEEN (SELECT MIN(m2.id) {sub}) "
            f"AND (SELECT MAX(m2.id) {sub})",
            [scope.user_id, scope.user_id],
        )
    return "", []
