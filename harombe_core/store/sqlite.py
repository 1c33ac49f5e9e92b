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
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from harombe_core.errors import InvalidInputError, SchemaTooNewError, StoreError
from harombe_core.limits import current_limits
from harombe_core.models import Message, Session
from harombe_core.owners import check_owner
from harombe_core.store.base import UNSET, KeywordHit, SearchScope, adjacent_ids_sql
from harombe_core.store.context_sql import ContextReads, context_indexes
from harombe_core.store.shared import Lease
from harombe_core.store.sql_body import Body, Step, drive
from harombe_core.store.sqlite_checks import APPLICATION_ID
from harombe_core.store.sqlite_file import (
    SQLiteFile,
    classify,
    memory_file,
    open_file,
    orphan_on_collect,
)
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
    # 4: LangGraph checkpoints (the checkpointer of the LangChain adapter), kept per thread; a
    # thread is the session of the same id, so deleting or pruning the session removes them.
    # Channel values are blobs per version; a list of messages is stored as references to one
    # blob per message (checkpoint_message_blobs), so a step writes only its new messages.
    # checkpoint_threads holds what every process must agree on about a thread's blobs.
    [
        """CREATE TABLE checkpoints (
            thread_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            checkpoint_ns TEXT NOT NULL,
            checkpoint_id TEXT NOT NULL,
            parent_checkpoint_id TEXT,
            run_id TEXT,
            type TEXT NOT NULL,
            checkpoint BLOB NOT NULL,
            metadata TEXT NOT NULL,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
        )""",
        """CREATE TABLE checkpoint_blobs (
            thread_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            checkpoint_ns TEXT NOT NULL,
            channel TEXT NOT NULL,
            version TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BLOB,
            PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
        )""",
        """CREATE TABLE checkpoint_writes (
            thread_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            checkpoint_ns TEXT NOT NULL,
            checkpoint_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            task_path TEXT NOT NULL,
            channel TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BLOB NOT NULL,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
        )""",
        """CREATE TABLE checkpoint_message_blobs (
            thread_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            hash BLOB NOT NULL,
            type TEXT NOT NULL,
            blob BLOB NOT NULL,
            PRIMARY KEY (thread_id, hash)
        )""",
        """CREATE TABLE checkpoint_threads (
            thread_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            blob_epoch TEXT NOT NULL
        ) WITHOUT ROWID""",
    ],
    # 5: partial indexes for the context strategies' O(window) reads (store/context_sql.py):
    # a session's important messages and whether it has any parent link.
    context_indexes("sqlite"),
]
SCHEMA_VERSION = len(MIGRATIONS)
_KNOWN_TABLES = {
    "harombe_meta", "sessions", "messages", "messages_fts", "message_vectors", "store_items",
    "store_vectors", "checkpoints", "checkpoint_blobs", "checkpoint_writes",
    "checkpoint_message_blobs", "checkpoint_threads",
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

    Keyword indexing is lazy (see :func:`_index_keywords`); catching up as the file closes
    means a later reader that cannot write (a read-only copy) still searches every message.
    """
    _migrate(file, retries)
    if not file.read_only:
        file.at_close(functools.partial(_index_keywords, retries=retries))


class SQLiteStore(ContextReads):
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
        self._closed = False
        self._term_counts = _TermCounts()  # shared by this store's threads
        self._term_lock = threading.Lock()
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

    @property
    def file(self) -> SQLiteFile:
        """The database file's connections, shared by every store opened on it in this
        process (a private one for ``":memory:"``): the identity to key what else belongs to
        the file, such as a semantic index, for as long as it stays open."""
        return self._file

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
            self._file.close()
        else:
            self._finalizer.detach()
            self._lease.release()

    def _open_file(self) -> SQLiteFile:
        if self._closed:
            raise StoreError(f"{self.location}: the store is closed; open a new MemoryManager.")
        return self._file

    # transactions -------------------------------------------------------------------------
    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one IMMEDIATE transaction, retrying while the database is locked.

        Inside :meth:`atomic` (on its thread) ``fn`` joins that block's transaction instead.
        """
        return self._open_file().write(fn, self._max_retries)

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

    def transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` in one write transaction, with the store's retries.

        For tables kept beside the messages by an extension (the LangGraph store of the
        LangChain adapter), so they share this file, its locking and its error types.
        """
        return self._write(fn)

    def snapshot(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` in one read transaction: a consistent view of the file that
        takes no write lock, so writers in other processes are never kept waiting. Inside
        :meth:`atomic` (on its thread) it reads in that block's transaction."""
        return self._open_file().snapshot(fn)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of one read-only statement (see :meth:`transaction`)."""
        return self._read(sql, params)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self._open_file().read(sql, params)

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
        args = self._add_args(session_id, messages, user_id, replace_ids)
        return self._write(lambda c: drive(c, self._add_body(*args)))

    def add_messages_body(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        user_id: str | None = None,
        replace_ids: Sequence[int] = (),
    ) -> Body[list[int]]:
        """:meth:`add_messages` as steps, to run inside another body's transaction."""
        return self._add_body(*self._add_args(session_id, messages, user_id, replace_ids))

    def _add_args(
        self,
        session_id: str,
        messages: Sequence[Message],
        user_id: str | None,
        replace_ids: Sequence[int],
    ) -> tuple[Any, ...]:
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
        return session_id, user_id, rows, doomed, created, active

    @staticmethod
    def _add_body(
        session_id: str,
        user_id: str | None,
        rows: list[tuple[Any, ...]],
        doomed: list[int],
        created: int,
        active: int,
    ) -> Body[list[int]]:
        # One upsert creates the session or bumps its activity and count. The keyword index
        # is caught up lazily (see index_keywords), so an append touches as few pages as it can.
        # It returns the owner: a user who is not it rolls the whole call back.
        ((owner,),) = (
            yield Step(
                "INSERT INTO sessions (id, user_id, created_at, updated_at, message_count) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                "updated_at = MAX(updated_at, excluded.updated_at), "
                "message_count = message_count + excluded.message_count RETURNING user_id",
                (session_id, user_id, created, active, len(rows)),
            )
        ).rows
        check_owner(session_id, owner, user_id)
        removed = 0
        for start in range(0, len(doomed), 500):
            chunk = doomed[start : start + 500]
            removed += (
                yield Step(
                    f"DELETE FROM messages WHERE session_id = ? AND id IN "
                    f"({','.join('?' * len(chunk))})",
                    (session_id, *chunk),
                )
            ).rowcount
        ids: list[int] = []
        for row in rows:
            new = yield Step(
                "INSERT INTO messages (session_id, role, content, name, tool_calls, "
                "tool_call_id, metadata, created_at, token_count, parent_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                row,
            )
            ids.append(int(new.rows[0][0]))
        if removed:
            yield Step(
                "UPDATE sessions SET message_count = message_count - ? WHERE id = ?",
                (removed, session_id),
            )
        return ids

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
        """Newest first, fetched lazily: a token window stops reading as soon as it is full.

        Read in pages of 32 rows, each its own statement: no statement stays open between
        pages, so a closing store or a fork never waits for a half-read window.
        """
        _check_id(session_id, "session_id")
        sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = ?"
        size, before = 32, None  # 32: most windows fit in one or two pages
        while True:
            if before is None:
                rows = self._read(f"{sql} ORDER BY m.id DESC LIMIT ?", (session_id, size))
            else:
                rows = self._read(
                    f"{sql} AND m.id < ? ORDER BY m.id DESC LIMIT ?", (session_id, before, size)
                )
            for row in rows:
                yield _row_to_message(row)
            if len(rows) < size:
                return
            before = rows[-1][0]

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

    def adjacent_ids(self, ids: Sequence[int]) -> dict[int, tuple[int | None, int | None]]:
        """For each existing id: the ids just before and after it in its session (or None)."""
        wanted = list(dict.fromkeys(int(i) for i in ids))
        out: dict[int, tuple[int | None, int | None]] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            sql = adjacent_ids_sql(f"m.id IN ({','.join('?' * len(chunk))})")
            for mid, before, after in self._read(sql, chunk):
                out[int(mid)] = (before, after)
        return out

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
            size = self.scope_size(scope)
            if size is not None and size <= _SMALL_SCOPE:
                # A small scope's ids, listed once, filter the index's matches without a row
                # lookup each (the unary + keeps SQLite from asking FTS5 for each listed id).
                # Thousands of rows may match the words in a large store; a user's scope is
                # a few of them: the lookups, not BM25, were most of the cost.
                sql = (
                    f"SELECT {_MESSAGE_COLUMNS}, f.rank FROM (SELECT rowid, "
                    f"bm25(messages_fts, {_BM25_WEIGHTS}) AS rank FROM messages_fts "
                    f"WHERE messages_fts MATCH ?{id_range} AND +rowid IN (SELECT m.id FROM "
                    f"messages m JOIN sessions s ON s.id = m.session_id WHERE 1 = 1{where}) "
                    "ORDER BY rank LIMIT ?) f JOIN messages m ON m.id = f.rowid "
                    f"JOIN sessions s ON s.id = m.session_id WHERE 1 = 1{where} ORDER BY f.rank"
                )
                rows = self._read(sql, [match, *range_params, *params, limit, *params])
            else:
                sql = (
                    f"SELECT {_MESSAGE_COLUMNS}, bm25(messages_fts, {_BM25_WEIGHTS}) AS rank "
                    "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
                    "JOIN sessions s ON s.id = m.session_id "
                    f"WHERE messages_fts MATCH ?{where}{id_range} ORDER BY rank LIMIT ?"
                )
                rows = self._read(sql, [match, *params, *range_params, limit])
        return [KeywordHit(_row_to_message(r[:-1]), -float(r[-1])) for r in rows]

    def scope_size(self, scope: SearchScope) -> int | None:
        """Messages a session or user scope can hold (an upper bound); None if unscoped."""
        if scope.session_id is not None:
            rows = self._read(
                "SELECT message_count FROM sessions WHERE id = ?", (scope.session_id,)
            )
            return int(rows[0][0]) if rows else 0
        if scope.user_id is not None:
            rows = self._read(
                "SELECT COALESCE(SUM(message_count), 0) FROM sessions WHERE user_id = ?",
                (scope.user_id,),
            )
            return int(rows[0][0])
        return None

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
        with self._open_file().connection() as conn:
            try:
                # In the temp schema: nothing is written to the file, any schema version works,
                # and a read-only file can have it too.
                conn.execute(
                    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.messages_fts_rows "
                    "USING fts5vocab(main, messages_fts, 'row')"
                )
                row = conn.execute(
                    "SELECT doc FROM temp.messages_fts_rows WHERE term = ?", (term,)
                ).fetchone()
            except sqlite3.Error as exc:
                raise classify(exc, self.location) from exc
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

    def pending_count(self) -> int:
        """Messages with no stored vector yet (read through the partial index of unflagged
        rows, so it costs the backlog and the tail, not the store)."""
        rows = self._read(f"SELECT COUNT(*) FROM messages m WHERE m.embedded = 0 AND {_NO_VECTOR}")
        return int(rows[0][0])

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
        return _index_keywords(self._open_file(), self._max_retries)

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

    # context reads (O(window)): important_before, is_threaded, thread_path ----------------
    _context_dialect = "sqlite"
    _context_mark = "?"

    @staticmethod
    def _context_row(row: Sequence[Any]) -> Message:
        return _row_to_message(row)


_KEYWORD_MARK = "keyword_index_upto"
#: BM25 column weights: the turn a message answers counts 0.4 against the message itself.
_BM25_WEIGHTS = "1.0, 0.4"
#: Common words, see SQLiteStore._drop_common_words.
_COMMON_SHARE = 0.05
_COMMON_MIN_ROWS = 2_000
#: Scopes of at most this many messages filter keyword matches by their listed ids.
_SMALL_SCOPE = 5_000
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


def _index_keywords(file: SQLiteFile, retries: int) -> int:
    """Index every message the keyword index lacks, in one transaction; returns how many.

    A file open for reading only cannot be caught up: its search then covers what was indexed
    (everything, when its writer closed normally: the last close catches up) and says so once.
    """
    latest = file.read("SELECT MAX(id) FROM messages")[0][0] or 0
    mark = file.read("SELECT value FROM harombe_meta WHERE key = ?", (_KEYWORD_MARK,))
    if mark and int(mark[0][0]) >= latest:
        return 0
    if file.read_only:
        if file.location not in _WARNED_UNINDEXED:
            _WARNED_UNINDEXED.add(file.location)
            log.warning(
                "%s is open for reading only and its keyword index lacks the newest messages "
                "(its writer stopped before indexing them); keyword search leaves them out. "
                "Open it once with write access to index them.",
                file.location,
            )
        return 0

    def catch_up(c: sqlite3.Connection) -> int:
        row = c.execute("SELECT value FROM harombe_meta WHERE key = ?", (_KEYWORD_MARK,)).fetchone()
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

    return file.write(catch_up, retries)


_WARNED_UNINDEXED: set[str] = set()


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
