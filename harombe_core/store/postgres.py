"""PostgreSQL store: the same protocol as SQLite, for apps that run as many processes on many hosts.

Why it looks the way it does:

* Each operation is written once, as a generator that yields the SQL it needs and receives the
  rows back; a small sync driver (psycopg ``ConnectionPool``) and a small async driver
  (``AsyncConnectionPool``) run it. So the ``a``-prefixed async methods are native async with no
  second copy of the logic and no thread hop.
* Every write is one transaction, retried with backoff while the server is unreachable (a restart,
  a failover) or reports a serialisation failure. A write whose COMMIT may have been applied
  before the connection dropped is *not* applied twice: each write records a unique key with its
  result in the same transaction, and a retry first looks that key up. An acknowledged message is
  therefore stored exactly once. A key expires once no retry can need it, and writes delete
  expired keys as they go, so the log holds only the last few minutes of writes.
* :meth:`PostgresStore.atomic` makes many calls one transaction (an import is all or nothing).
* Writers to one session take that session's row lock first, so message ids grow in commit order
  within a session (readers paging with ``after_id`` never miss a row).
* The keyword index is a weighted ``tsvector`` (the message, and the turn it answers at lower
  weight) with a GIN index, written in the same transaction as the message; queries go through
  ``websearch_to_tsquery`` with bound parameters.
* Schema changes are forward migrations recorded in ``harombe_schema``, applied under an advisory
  lock so many processes can start at once.
* Times are integer microseconds since the epoch, exactly as in the SQLite store, so a migration
  between the two backends is lossless and orders identically.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import random
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from harombe_core.errors import (
    InvalidInputError,
    MissingExtraError,
    SchemaTooNewError,
    SessionNotFoundError,
    StorageFullError,
    StoreError,
    StoreNotFoundError,
    StoreReadOnlyError,
    StoreUnavailableError,
)
from harombe_core.models import Message, Session
from harombe_core.owners import check_owner
from harombe_core.store.base import (
    UNSET,
    AtomicBlock,
    KeywordHit,
    SearchScope,
    adjacent_ids_sql,
)
from harombe_core.store.context_sql import ContextReads, context_indexes
from harombe_core.store.sqlite import (
    _check_id,
    _dumps,
    _row_to_message,
    _row_to_session,
    check_summary,
    session_changes,
    session_span,
    to_micros,
)

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg_pool import AsyncConnectionPool, ConnectionPool
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError("The PostgreSQL store", "postgres", "psycopg") from _exc

__all__ = [
    "PG_MIGRATIONS",
    "PG_SCHEMA_VERSION",
    "PostgresStore",
    "redact_url",
    "same_database",
    "store_exists",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Advisory lock id taken while migrating ("HRMB").
_MIGRATION_LOCK = 0x48524D42
_TS_CONFIG = "english"

_MESSAGE_COLUMNS = (
    "m.id, m.session_id, m.role, m.content, m.name, m.tool_calls, m.tool_call_id, m.metadata, "
    "m.created_at, m.token_count, m.parent_id"
)
_SESSION_COLUMNS = (
    "id, user_id, system_prompt, metadata, created_at, updated_at, message_count, summary, "
    "summary_json, summary_until_id"
)
_FTS_EXPR = (
    f"setweight(to_tsvector('{_TS_CONFIG}', %s), 'A') || "
    f"setweight(to_tsvector('{_TS_CONFIG}', %s), 'B')"
)

#: The pgvector table: one vector per message, gone with its message. The column is untyped so
#: vectors of any model fit; each dimension gets its own partial HNSW index (vectors/pgvector.py).
VECTORS_TABLE_DDL = (
    "CREATE TABLE IF NOT EXISTS message_vectors ("
    "message_id BIGINT PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE, "
    "dimension INTEGER NOT NULL, "
    "embedding vector NOT NULL)"
)

# Each migration runs in one transaction together with its row in harombe_schema.
PG_MIGRATIONS: list[list[str]] = [
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
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            summary TEXT,
            summary_json TEXT,
            summary_until_id BIGINT,
            seq BIGSERIAL
        )""",
        "CREATE INDEX sessions_updated ON sessions (updated_at DESC, seq DESC)",
        "CREATE INDEX sessions_user_updated ON sessions (user_id, updated_at DESC, seq DESC)",
        """CREATE TABLE messages (
            id BIGSERIAL PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
            content TEXT NOT NULL,
            name TEXT,
            tool_calls TEXT,
            tool_call_id TEXT,
            metadata TEXT NOT NULL DEFAULT '{}',
            created_at BIGINT NOT NULL,
            token_count INTEGER NOT NULL,
            parent_id BIGINT REFERENCES messages(id) ON DELETE SET NULL,
            summary_json TEXT,
            embedded BOOLEAN NOT NULL DEFAULT FALSE,
            context TEXT NOT NULL DEFAULT '',
            fts TSVECTOR NOT NULL
        )""",
        "CREATE INDEX messages_session ON messages (session_id, id)",
        "CREATE INDEX messages_parent ON messages (parent_id) WHERE parent_id IS NOT NULL",
        "CREATE INDEX messages_unembedded ON messages (id) WHERE NOT embedded",
        "CREATE INDEX messages_fts ON messages USING GIN (fts)",
        """CREATE TABLE harombe_writes (
            key UUID PRIMARY KEY,
            result TEXT NOT NULL,
            at TIMESTAMPTZ NOT NULL DEFAULT now()
        )""",
    ],
    # 2: vectors beside the messages (pgvector). Skipped, with a notice, where the extension
    # cannot be created; the pgvector index creates the table itself once it can.
    [
        """DO $$
        BEGIN
            BEGIN
                CREATE EXTENSION IF NOT EXISTS vector;
            EXCEPTION WHEN OTHERS THEN
                RAISE NOTICE USING MESSAGE = 'pgvector is not available: ' || SQLERRM;
                RETURN;
            END;
            EXECUTE $ddl$"""
        + VECTORS_TABLE_DDL
        + """$ddl$;
        END $$""",
    ],
    # 3: long-term key-value memory (the LangGraph store of the LangChain adapter), as SQLite
    # migration 3: JSON text values under a dotted namespace, optional expiry, one float32
    # embedding per indexed text field. Names sort by code point ("C"), as in SQLite.
    [
        """CREATE TABLE store_items (
            namespace TEXT COLLATE "C" NOT NULL,
            key TEXT COLLATE "C" NOT NULL,
            value TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            expires_at BIGINT,
            ttl_minutes DOUBLE PRECISION,
            PRIMARY KEY (namespace, key)
        )""",
        "CREATE INDEX store_items_expiry ON store_items (expires_at) WHERE expires_at IS NOT NULL",
        """CREATE TABLE store_vectors (
            namespace TEXT COLLATE "C" NOT NULL,
            key TEXT COLLATE "C" NOT NULL,
            path TEXT NOT NULL,
            vector BYTEA NOT NULL,
            PRIMARY KEY (namespace, key, path),
            FOREIGN KEY (namespace, key) REFERENCES store_items (namespace, key) ON DELETE CASCADE
        )""",
    ],
    # 4: each exactly-once key says until when a retry may still look it up, so expired keys
    # are deleted as writes go on (PostgresStore._keyed). Keys written without one (by an
    # older harombe) keep the day that its prune_write_log() allowed them.
    [
        "ALTER TABLE harombe_writes ADD COLUMN forget_after TIMESTAMPTZ NOT NULL "
        "DEFAULT now() + interval '1 day'",
        "CREATE INDEX harombe_writes_forget ON harombe_writes (forget_after)",
    ],
    # 5: LangGraph checkpoints (the checkpointer of the LangChain adapter), as SQLite
    # migration 4: per thread (the session of the same id), channel blobs per version and one
    # blob per message.
    [
        """CREATE TABLE checkpoints (
            thread_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            checkpoint_ns TEXT COLLATE "C" NOT NULL,
            checkpoint_id TEXT COLLATE "C" NOT NULL,
            parent_checkpoint_id TEXT COLLATE "C",
            run_id TEXT COLLATE "C",
            type TEXT NOT NULL,
            checkpoint BYTEA NOT NULL,
            metadata TEXT NOT NULL,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
        )""",
        """CREATE TABLE checkpoint_blobs (
            thread_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            checkpoint_ns TEXT COLLATE "C" NOT NULL,
            channel TEXT COLLATE "C" NOT NULL,
            version TEXT COLLATE "C" NOT NULL,
            type TEXT NOT NULL,
            blob BYTEA,
            PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
        )""",
        """CREATE TABLE checkpoint_writes (
            thread_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            checkpoint_ns TEXT COLLATE "C" NOT NULL,
            checkpoint_id TEXT COLLATE "C" NOT NULL,
            task_id TEXT COLLATE "C" NOT NULL,
            idx INTEGER NOT NULL,
            task_path TEXT COLLATE "C" NOT NULL,
            channel TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BYTEA NOT NULL,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
        )""",
        """CREATE TABLE checkpoint_message_blobs (
            thread_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            hash BYTEA NOT NULL,
            type TEXT NOT NULL,
            blob BYTEA NOT NULL,
            PRIMARY KEY (thread_id, hash)
        )""",
        """CREATE TABLE checkpoint_threads (
            thread_id TEXT COLLATE "C" PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
            blob_epoch TEXT NOT NULL
        )""",
    ],
    # 6: partial indexes for the context strategies' O(window) reads (store/context_sql.py),
    # as SQLite migration 5.
    context_indexes("postgres"),
]
PG_SCHEMA_VERSION = len(PG_MIGRATIONS)

#: Seconds an exactly-once key outlives the longest retry of its write (the retry window plus
#: one connection attempt): the backoff sleeps and a slow lookup fit many times over.
_WRITE_LOG_SLACK = 300.0
#: Every this many keyed writes, a store deletes expired keys in the same transaction ...
_PRUNE_EVERY = 64
#: ... at most this many at a time, so a write never carries a long delete.
_PRUNE_BATCH = 1000
_PRUNE_SQL = (
    "DELETE FROM harombe_writes WHERE key IN (SELECT key FROM harombe_writes "
    "WHERE forget_after < now() ORDER BY forget_after LIMIT %s FOR UPDATE SKIP LOCKED)"
)


def redact_url(url: str) -> str:
    """The URL with its password replaced, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def store_exists(url: str, *, connect_timeout: float = 5.0) -> bool:
    """Whether the database at ``url`` holds a harombe store, found without creating anything.

    Raises :class:`StoreNotFoundError` if the database itself does not exist and
    :class:`StoreUnavailableError` if the server cannot be reached.
    """
    try:
        with psycopg.connect(
            url, autocommit=True, connect_timeout=max(1, int(connect_timeout))
        ) as conn:
            row = conn.execute("SELECT to_regclass('harombe_schema') IS NOT NULL").fetchone()
    except psycopg.OperationalError as exc:
        if "does not exist" in str(exc):
            raise StoreNotFoundError(
                f"{redact_url(url)}: {str(exc).strip()}; check the database name in the URL."
            ) from None
        raise StoreUnavailableError(
            f"{redact_url(url)} could not be reached ({str(exc).strip()}). Check that the "
            "server is running and the URL is right."
        ) from None
    return bool(row and row[0])


def same_database(a: str, b: str) -> bool:
    """Whether two ``postgresql://`` URLs name the same database (host, port and name)."""
    from psycopg.conninfo import conninfo_to_dict

    def place(url: str) -> tuple[str, str, str]:
        parts = conninfo_to_dict(url)
        host = str(parts.get("host") or "localhost")
        name = parts.get("dbname") or parts.get("user") or ""
        return host, str(parts.get("port") or 5432), str(name)

    return place(a) == place(b)


# --------------------------------------------------------------------------------------------
# operation plumbing: a body yields Steps and receives Results


@dataclass(frozen=True, slots=True)
class _Step:
    sql: str
    params: Sequence[Any] | Mapping[str, Any] = ()


@dataclass(frozen=True, slots=True)
class _Result:
    rows: list[tuple[Any, ...]]
    rowcount: int


Body = Generator[_Step, _Result, T]

_TRANSIENT_STATES = {"40001", "40P01", "57P01", "57P02", "57P03", "08000", "08003", "08006"}
_WORD = re.compile(r"\w+", re.UNICODE)


def _ts_query_text(text: str) -> str | None:
    """Free text to a ``websearch_to_tsquery`` input: the words OR-ed (as the SQLite store does)."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text) if len(w) > 1 or w.isdigit()))
    if not words:
        return None
    return " or ".join(words[:64])


def _scope_sql(scope: SearchScope | None) -> tuple[str, list[Any]]:
    """The WHERE fragment (aliases ``m`` and ``s``) that keeps a query inside its scope."""
    if scope is None:
        return "", []
    parts: list[str] = []
    params: list[Any] = []
    if scope.user_id is not None:
        parts.append("s.user_id = %s")
        params.append(scope.user_id)
    if scope.session_id is not None:
        parts.append("m.session_id = %s")
        params.append(scope.session_id)
    if scope.roles:
        parts.append("m.role = ANY(%s)")
        params.append(list(scope.roles))
    if scope.since is not None:
        parts.append("m.created_at >= %s")
        params.append(to_micros(scope.since))
    if scope.until is not None:
        parts.append("m.created_at <= %s")
        params.append(to_micros(scope.until))
    return "".join(f" AND {p}" for p in parts), params


def _ids(values: Sequence[Any]) -> list[int]:
    try:
        return [int(v) for v in values]
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"message ids must be integers: {exc}") from exc


class PostgresStore(ContextReads):
    """A :class:`~harombe_core.store.base.MessageStore` on PostgreSQL (extra ``postgres``).

    ``url`` is a libpq URL (``postgresql://user:pass@host:5432/db``). ``retry_seconds`` is how long
    a call keeps retrying while the server is unreachable before raising
    :class:`StoreUnavailableError`.
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        retry_seconds: float = 30.0,
        connect_timeout: float = 5.0,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
            raise InvalidInputError(
                f"a PostgreSQL location must be a postgresql:// URL, got {url!r:.80}."
            )
        self.url = url
        self.location = redact_url(url)
        self._retry_seconds = retry_seconds
        self._write_log_seconds = retry_seconds + connect_timeout + _WRITE_LOG_SLACK
        self._writes = itertools.count()
        self._block = AtomicBlock()  # this thread's atomic() block, if one is open
        self._closed = False
        self._kwargs = {"autocommit": True, "connect_timeout": max(1, int(connect_timeout))}
        self._pool = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs=self._kwargs,
            open=False,
            timeout=connect_timeout,
            name="harombe",
        )
        self._apool: AsyncConnectionPool | None = None
        self._apool_loop: asyncio.AbstractEventLoop | None = None
        self._alock = threading.Lock()
        self._max_size = max_size
        self._connect_timeout = connect_timeout
        try:
            self._with_retry(lambda: self._pool.open(wait=True, timeout=connect_timeout))
            self._run(self._migrate_body, write=False, keyed=False)
        except BaseException:
            self._pool.close()
            raise

    # drivers ----------------------------------------------------------------------------------
    def _classify(self, exc: BaseException) -> StoreError | InvalidInputError:
        state = getattr(exc, "sqlstate", None) or ""
        if state == "53100" or isinstance(exc, pg_errors.DiskFull):
            return StorageFullError(
                f"{self.location}: the database server's disk is full ({exc}); the write was "
                "rolled back and nothing stored was changed. Free space on the server and retry."
            )
        if state in ("25006", "42501") or isinstance(exc, pg_errors.ReadOnlySqlTransaction):
            return StoreReadOnlyError(
                f"{self.location} cannot be written ({exc}). Connect to the primary or grant "
                "this role write access."
            )
        if isinstance(exc, (psycopg.IntegrityError, psycopg.DataError, UnicodeError)):
            return InvalidInputError(f"{self.location}: the value cannot be stored ({exc}).")
        if isinstance(exc, psycopg.OperationalError):
            return StoreUnavailableError(
                f"{self.location} could not be reached for {self._retry_seconds:g} s ({exc}). "
                "Check that the server is running and the URL is right."
            )
        return StoreError(f"{self.location}: {exc}")

    @staticmethod
    def _transient(exc: BaseException) -> bool:
        state = getattr(exc, "sqlstate", None) or ""
        if state in ("53100", "25006", "42501"):
            return False
        if state in _TRANSIENT_STATES or state.startswith("08"):
            return True
        return isinstance(exc, psycopg.OperationalError) and not isinstance(
            exc, pg_errors.DiskFull
        )

    def _with_retry(self, fn: Callable[[], T]) -> T:
        deadline = time.monotonic() + self._retry_seconds
        delay = 0.05
        while True:
            try:
                return fn()
            except psycopg.Error as exc:
                if not self._transient(exc) or time.monotonic() >= deadline:
                    raise self._classify(exc) from exc
                log.info("%s: transient error, retrying: %s", self.location, exc)
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)

    @staticmethod
    def _step(body: Body[T], result: _Result | None) -> _Step:
        return next(body) if result is None else body.send(result)

    def _retry_wait(
        self, exc: BaseException, deadline: float, attempt: int, delay: float
    ) -> float | None:
        """Seconds to wait before retrying after ``exc``, or None when it must be raised.

        Only transient server errors (a restart, a dropped connection, a serialisation
        conflict) are retried, with jittered exponential backoff, until the deadline.
        """
        if (
            isinstance(exc, psycopg.Error)
            and self._transient(exc)
            and time.monotonic() < deadline
            and not self._closed
        ):
            log.warning("%s: %s (attempt %d); retrying", self.location, str(exc).strip(), attempt)
            return delay * (1 + random.random())
        return None

    def _drive(self, cur: psycopg.Cursor[Any], body: Body[T]) -> T:
        """Run ``body``'s steps on ``cur`` (inside the caller's transaction)."""
        result: _Result | None = None
        try:
            while True:
                step = self._step(body, result)
                cur.execute(step.sql, step.params)
                rows = cur.fetchall() if cur.description is not None else []
                result = _Result(rows, cur.rowcount)
        except StopIteration as stop:
            return stop.value

    async def _adrive(self, cur: psycopg.AsyncCursor[Any], body: Body[T]) -> T:
        """The async twin of :meth:`_drive`."""
        result: _Result | None = None
        try:
            while True:
                step = self._step(body, result)
                await cur.execute(step.sql, step.params)
                rows = await cur.fetchall() if cur.description is not None else []
                result = _Result(rows, cur.rowcount)
        except StopIteration as stop:
            return stop.value

    def _keyed(
        self, factory: Callable[[], Body[T]], key: uuid.UUID, attempt: int, started: float
    ) -> Body[T]:
        """``factory``'s body, applied exactly once however often the transaction is retried.

        The write records ``key`` and its result in ``harombe_writes`` in its own transaction,
        and a retry (its COMMIT may have landed before the connection dropped) first looks the
        key up. A row is kept for ``_write_log_seconds``: longer than any retry of its call can
        last (the retry window, one more connection attempt, the backoff), so the lookup always
        finds a committed write, and every ``_PRUNE_EVERY``-th write of a store deletes rows
        past that age (``SKIP LOCKED``: never waits for another writer). The log therefore
        holds about the last ``_write_log_seconds`` of writes, never more.
        """
        if attempt > 1:
            if time.monotonic() - started > self._write_log_seconds - _WRITE_LOG_SLACK / 2:
                raise StoreUnavailableError(
                    f"{self.location}: a write was interrupted and could not be confirmed for "
                    f"{time.monotonic() - started:.0f} s; whether it was applied is unknown. "
                    "Read the data back before writing it again."
                )
            done = (
                yield _Step("SELECT result FROM harombe_writes WHERE key = %s", (key,))
            ).rows
            if done:
                return json.loads(done[0][0])
        value = yield from factory()
        try:
            recorded = _dumps(value)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"the result of a write must be JSON-serialisable on PostgreSQL, to be returned "
                f"again after a retry ({exc})."
            ) from None
        yield _Step(
            "INSERT INTO harombe_writes (key, result, forget_after) "
            "VALUES (%s, %s, now() + make_interval(secs => %s))",
            (key, recorded, self._write_log_seconds),
        )
        if next(self._writes) % _PRUNE_EVERY == 0:
            yield _Step(_PRUNE_SQL, (_PRUNE_BATCH,))
        return value

    def _run(
        self,
        factory: Callable[[], Body[T]],
        *,
        write: bool = True,
        keyed: bool = True,
        pin: bool = False,
    ) -> T:
        """Run a body in one transaction; retry transient failures without applying it twice.

        Inside :meth:`atomic` (on its thread) the body joins that block's transaction instead.
        With ``pin`` every store call the body makes on this thread joins this transaction.
        """
        if self._closed:
            raise StoreError(f"{self.location}: the store is closed; open a new MemoryManager.")
        if self._block.handle is not None:
            return self._run_inside(self._block.handle, factory)
        key = uuid.uuid4() if (write and keyed) else None
        started = time.monotonic()
        deadline = started + self._retry_seconds
        delay = 0.05
        attempt = 0
        while True:
            attempt += 1
            try:
                with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                    body = factory() if key is None else self._keyed(factory, key, attempt, started)
                    if not pin:
                        return self._drive(cur, body)
                    with self._block.open(cur):
                        return self._drive(cur, body)
            except (psycopg.Error, UnicodeError) as exc:
                wait = self._retry_wait(exc, deadline, attempt, delay)
                if wait is None:
                    raise self._classify(exc) from exc
                time.sleep(wait)
                delay = min(delay * 2, 1.0)

    def _run_inside(self, cur: psycopg.Cursor[Any], factory: Callable[[], Body[T]]) -> T:
        """Run a body inside the :meth:`atomic` block of this thread.

        A transient error is passed on untouched, so the block's driver retries the whole
        block; any other is typed as outside a block.
        """
        with self._block.call():
            try:
                return self._drive(cur, factory())
            except (psycopg.Error, UnicodeError) as exc:
                if isinstance(exc, psycopg.Error) and self._transient(exc):
                    raise
                raise self._classify(exc) from exc

    def _atomic_body(self, fn: Callable[[], T]) -> Body[T]:
        return self._block.result(fn())
        yield  # a body (generator) whose statements fn runs through the block's cursor

    def atomic(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` as one transaction: every store call it makes on this thread joins it.

        All of ``fn``'s writes commit together or not at all (a killed process leaves none of
        them). If a call inside fails, the block is rolled back and raises that error, even if
        ``fn`` caught it. After a transient failure (a server restart, a dropped connection)
        the whole block runs again, so ``fn`` must do nothing but read and write this store;
        its result must be JSON-serialisable, because a retry after a COMMIT whose answer was
        lost returns the recorded result instead of running ``fn`` twice. Async calls made
        inside do not join it. A nested ``atomic`` joins the outer block.
        """
        if self._block.handle is not None:
            return fn()
        return self._run(lambda: self._atomic_body(fn), pin=True)

    async def _apool_get(self) -> AsyncConnectionPool:
        loop = asyncio.get_running_loop()
        if self._apool is not None and self._apool_loop is loop:
            return self._apool
        # A pool belongs to one event loop; a new loop (a new asyncio.run) gets a new pool.
        old = self._apool
        pool = AsyncConnectionPool(
            self.url,
            min_size=1,
            max_size=self._max_size,
            kwargs=self._kwargs,
            open=False,
            timeout=self._connect_timeout,
            name="harombe-async",
        )
        await pool.open(wait=False)
        self._apool, self._apool_loop = pool, loop
        if old is not None:
            with contextlib.suppress(Exception):
                await old.close()
        return pool

    async def _arun(
        self, factory: Callable[[], Body[T]], *, write: bool = True, keyed: bool = True
    ) -> T:
        """The async driver of :meth:`_run` (same transaction and retry semantics)."""
        if self._closed:
            raise StoreError(f"{self.location}: the store is closed; open a new MemoryManager.")
        pool = await self._apool_get()
        key = uuid.uuid4() if (write and keyed) else None
        started = time.monotonic()
        deadline = started + self._retry_seconds
        delay = 0.05
        attempt = 0
        while True:
            attempt += 1
            try:
                async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                    body = factory() if key is None else self._keyed(factory, key, attempt, started)
                    return await self._adrive(cur, body)
            except (psycopg.Error, UnicodeError) as exc:
                wait = self._retry_wait(exc, deadline, attempt, delay)
                if wait is None:
                    raise self._classify(exc) from exc
                await asyncio.sleep(wait)
                delay = min(delay * 2, 1.0)

    def run_body(self, factory: Callable[[], Body[T]], *, exactly_once: bool = False) -> T:
        """Run a body in one transaction, with the store's retries and error types.

        For tables kept beside the messages by an extension (the LangGraph store of the
        LangChain adapter). A body is a generator that yields steps (objects with ``sql``, in
        ``%s`` placeholder style, and ``params``) and receives results (``rows``, ``rowcount``);
        what it returns is the call's result. ``factory`` is called again for each retry. With
        ``exactly_once`` a retry after a COMMIT that may have landed returns the first result
        (which must then be JSON-serialisable) instead of running the body again.
        """
        return self._run(factory, write=exactly_once, keyed=exactly_once)

    async def arun_body(self, factory: Callable[[], Body[T]], *, exactly_once: bool = False) -> T:
        """The native async twin of :meth:`run_body`."""
        return await self._arun(factory, write=exactly_once, keyed=exactly_once)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        def body() -> Body[list[tuple[Any, ...]]]:
            return (yield _Step(sql, params)).rows

        return self._run(body, write=False)

    def close(self) -> None:
        """Close both pools. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._pool.close()
        apool, loop = self._apool, self._apool_loop
        self._apool = None
        if apool is not None and loop is not None and not loop.is_closed():
            with contextlib.suppress(Exception):
                if loop.is_running():
                    asyncio.run_coroutine_threadsafe(apool.close(), loop)
                else:
                    loop.run_until_complete(apool.close())

    async def aclose(self) -> None:
        apool = self._apool
        self._apool = None
        if apool is not None:
            await apool.close()
        self.close()

    # schema ---------------------------------------------------------------------------------
    def _migrate_body(self) -> Body[None]:
        yield _Step("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        yield _Step(
            "CREATE TABLE IF NOT EXISTS harombe_schema (version INTEGER PRIMARY KEY, "
            "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        current = (yield _Step("SELECT COALESCE(MAX(version), 0) FROM harombe_schema")).rows[0][0]
        if current > PG_SCHEMA_VERSION:
            raise SchemaTooNewError(
                f"{self.location} has schema version {current}, newer than this harombe "
                f"understands ({PG_SCHEMA_VERSION}). Upgrade harombe-memory."
            )
        for index in range(current, PG_SCHEMA_VERSION):
            for statement in PG_MIGRATIONS[index]:
                yield _Step(statement)
            yield _Step("INSERT INTO harombe_schema (version) VALUES (%s)", (index + 1,))
            log.info("%s: applied schema migration %d", self.location, index + 1)

    def applied_migrations(self) -> list[int]:
        """Schema versions recorded in ``harombe_schema`` (read-only)."""
        return [int(r[0]) for r in self._read("SELECT version FROM harombe_schema ORDER BY 1")]

    # sessions -------------------------------------------------------------------------------
    def _create_session_body(
        self,
        session_id: str,
        user_id: str | None,
        system_prompt: str | None,
        system_prompt_tokens: int,
        meta: str,
        now: int,
    ) -> Body[bool]:
        result = yield _Step(
            "INSERT INTO sessions (id, user_id, system_prompt, system_prompt_tokens, metadata, "
            "created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (id) DO NOTHING",
            (session_id, user_id, system_prompt, system_prompt_tokens, meta, now, now),
        )
        return result.rowcount == 1

    def _create_args(
        self,
        session_id: str,
        user_id: str | None,
        system_prompt: str | None,
        system_prompt_tokens: int,
        metadata: Mapping[str, Any] | None,
        created_at: datetime | None,
    ) -> tuple[Any, ...]:
        _check_id(session_id, "session_id")
        if user_id is not None:
            _check_id(user_id, "user_id")
        now = to_micros(created_at or datetime.now(UTC))
        fields = session_changes(
            system_prompt=system_prompt,
            system_prompt_tokens=system_prompt_tokens,
            metadata=metadata,
        )
        return (session_id, user_id, fields["system_prompt"], fields["system_prompt_tokens"],
                fields["metadata"], now)

    def _exists_error(self, session_id: str) -> InvalidInputError:
        return InvalidInputError(
            f"session {session_id!r} already exists; load it with load_session() or choose "
            "another id."
        )

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
        args = self._create_args(
            session_id, user_id, system_prompt, system_prompt_tokens, metadata, created_at
        )
        if not self._run(lambda: self._create_session_body(*args)):
            raise self._exists_error(session_id)
        session = self.get_session(session_id)
        assert session is not None
        return session

    async def acreate_session(
        self,
        session_id: str,
        *,
        user_id: str | None = None,
        system_prompt: str | None = None,
        system_prompt_tokens: int = 0,
        metadata: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
    ) -> Session:
        args = self._create_args(
            session_id, user_id, system_prompt, system_prompt_tokens, metadata, created_at
        )
        if not await self._arun(lambda: self._create_session_body(*args)):
            raise self._exists_error(session_id)
        session = await self.aget_session(session_id)
        assert session is not None
        return session

    def _get_session_body(self, session_id: str) -> Body[Session | None]:
        _check_id(session_id, "session_id")
        rows = (
            yield _Step(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = %s", (session_id,))
        ).rows
        return _row_to_session(rows[0]) if rows else None

    def get_session(self, session_id: str) -> Session | None:
        _check_id(session_id, "session_id")
        return self._run(lambda: self._get_session_body(session_id), write=False)

    async def aget_session(self, session_id: str) -> Session | None:
        _check_id(session_id, "session_id")
        return await self._arun(lambda: self._get_session_body(session_id), write=False)

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
            if user_id is not None:
                _check_id(user_id, "user_id")
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
        # Column names come from the fixed set above, never from the caller.
        assignments = ", ".join(f"{column} = %s" for column in changes)

        def body() -> Body[int]:
            result = yield _Step(
                f"UPDATE sessions SET {assignments} WHERE id = %s",
                (*changes.values(), session_id),
            )
            return result.rowcount

        if self._run(body) == 0:
            raise SessionNotFoundError(f"no session {session_id!r} in {self.location}")

    def system_prompt_tokens(self, session_id: str) -> int:
        rows = self._read("SELECT system_prompt_tokens FROM sessions WHERE id = %s", (session_id,))
        return int(rows[0][0]) if rows else 0

    def _list_sessions_body(
        self, limit: int | None, user_id: str | None, offset: int
    ) -> Body[list[Session]]:
        sql = f"SELECT {_SESSION_COLUMNS} FROM sessions"
        params: list[Any] = []
        if user_id is not None:
            sql += " WHERE user_id = %s"
            params.append(user_id)
        sql += " ORDER BY updated_at DESC, seq DESC LIMIT %s OFFSET %s"
        params += [limit, offset]
        return [_row_to_session(r) for r in (yield _Step(sql, params)).rows]

    def list_sessions(
        self, *, limit: int | None = 10, user_id: str | None = None, offset: int = 0
    ) -> list[Session]:
        return self._run(lambda: self._list_sessions_body(limit, user_id, offset), write=False)

    async def alist_sessions(
        self, *, limit: int | None = 10, user_id: str | None = None, offset: int = 0
    ) -> list[Session]:
        return await self._arun(
            lambda: self._list_sessions_body(limit, user_id, offset), write=False
        )

    def delete_session(self, session_id: str) -> bool:
        _check_id(session_id, "session_id")

        def body() -> Body[bool]:
            return (yield _Step("DELETE FROM sessions WHERE id = %s", (session_id,))).rowcount > 0

        return bool(self._run(body))

    def delete_sessions_before(self, cutoff: datetime) -> list[str]:
        """Delete sessions with no activity since ``cutoff``; returns their ids."""
        limit = to_micros(cutoff)

        def body() -> Body[list[str]]:
            rows = (
                yield _Step("DELETE FROM sessions WHERE updated_at < %s RETURNING id", (limit,))
            ).rows
            return [r[0] for r in rows]

        return self._run(body)

    # messages -------------------------------------------------------------------------------
    def _add_body(
        self,
        session_id: str,
        rows: list[tuple[Any, ...]],
        user_id: str | None,
        doomed: list[int],
        now: int,
    ) -> Body[list[int]]:
        # The upsert takes the session's row lock first: writers to one session queue here,
        # so ids grow in commit order within a session.
        # It returns the owner: a user who is not it rolls the whole call back.
        owner = (
            yield _Step(
                "INSERT INTO sessions (id, user_id, created_at, updated_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET updated_at = "
                "GREATEST(sessions.updated_at, EXCLUDED.updated_at) RETURNING user_id",
                (session_id, user_id, *session_span([r[6] for r in rows], now)),
            )
        ).rows[0][0]
        check_owner(session_id, owner, user_id)
        removed = 0
        if doomed:
            removed = (
                yield _Step(
                    "DELETE FROM messages WHERE session_id = %s AND id = ANY(%s)",
                    (session_id, doomed),
                )
            ).rowcount
        previous = (
            yield _Step(
                "SELECT content FROM messages WHERE session_id = %s ORDER BY id DESC LIMIT 1",
                (session_id,),
            )
        ).rows
        context = previous[0][0] if previous else ""
        ids: list[int] = []
        for row in rows:
            content = row[1]
            new = (
                yield _Step(
                    "INSERT INTO messages (session_id, role, content, name, tool_calls, "
                    "tool_call_id, metadata, created_at, token_count, parent_id, context, fts) "
                    f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, {_FTS_EXPR}) "
                    "RETURNING id",
                    (session_id, *row, context, content, context),
                )
            ).rows
            ids.append(int(new[0][0]))
            context = content
        yield _Step(
            "UPDATE sessions SET message_count = message_count + %s WHERE id = %s",
            (len(rows) - removed, session_id),
        )
        return ids

    def _add_args(
        self,
        session_id: str,
        messages: Sequence[Message],
        user_id: str | None,
        replace_ids: Sequence[int],
    ) -> tuple[Any, ...]:
        _check_id(session_id, "session_id")
        if user_id is not None:
            _check_id(user_id, "user_id")
        rows = []
        for message in messages:
            if message.token_count is None:
                raise InvalidInputError("token_count must be set before a message is stored.")
            rows.append(
                (
                    message.role,
                    message.content,
                    message.name,
                    None if message.tool_calls is None else _dumps(message.tool_calls),
                    message.tool_call_id,
                    _dumps(message.metadata),
                    to_micros(message.created_at),
                    message.token_count,
                    message.parent_id,
                )
            )
        now = to_micros(datetime.now(UTC))
        return (session_id, rows, user_id, _ids(replace_ids), now)

    def add_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        user_id: str | None = None,
        replace_ids: Sequence[int] = (),
    ) -> list[int]:
        """Insert messages (creating the session if needed) and index them, in one transaction.

        ``replace_ids`` (messages of this session) are deleted in the same transaction.
        """
        args = self._add_args(session_id, messages, user_id, replace_ids)
        return self._run(lambda: self._add_body(*args))

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

    async def aadd_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        user_id: str | None = None,
        replace_ids: Sequence[int] = (),
    ) -> list[int]:
        args = self._add_args(session_id, messages, user_id, replace_ids)
        return await self._arun(lambda: self._add_body(*args))

    def _get_messages_body(
        self, session_id: str, after_id: int | None, limit: int | None
    ) -> Body[list[Message]]:
        sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = %s"
        params: list[Any] = [session_id]
        if after_id is not None:
            sql += " AND m.id > %s"
            params.append(int(after_id))
        sql += " ORDER BY m.id LIMIT %s"
        params.append(limit)
        return [_row_to_message(r) for r in (yield _Step(sql, params)).rows]

    def get_messages(
        self, session_id: str, *, after_id: int | None = None, limit: int | None = None
    ) -> list[Message]:
        _check_id(session_id, "session_id")
        return self._run(lambda: self._get_messages_body(session_id, after_id, limit), write=False)

    async def aget_messages(
        self, session_id: str, *, after_id: int | None = None, limit: int | None = None
    ) -> list[Message]:
        _check_id(session_id, "session_id")
        return await self._arun(
            lambda: self._get_messages_body(session_id, after_id, limit), write=False
        )

    def _newest_page_body(self, session_id: str, before: int | None) -> Body[list[Message]]:
        sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = %s"
        params: list[Any] = [session_id]
        if before is not None:
            sql += " AND m.id < %s"
            params.append(before)
        sql += " ORDER BY m.id DESC LIMIT 64"
        return [_row_to_message(r) for r in (yield _Step(sql, params)).rows]

    def iter_newest(self, session_id: str) -> Iterator[Message]:
        """Newest first, a page at a time: a token window stops reading as soon as it is full."""
        _check_id(session_id, "session_id")
        before: int | None = None
        while True:
            page = self._run(
                lambda before=before: self._newest_page_body(session_id, before), write=False
            )
            yield from page
            if len(page) < 64:
                return
            before = page[-1].id

    async def aiter_newest(self, session_id: str) -> AsyncIterator[Message]:
        _check_id(session_id, "session_id")
        before: int | None = None
        while True:
            page = await self._arun(
                lambda before=before: self._newest_page_body(session_id, before), write=False
            )
            for message in page:
                yield message
            if len(page) < 64:
                return
            before = page[-1].id

    def _by_ids_body(self, wanted: list[int], scope: SearchScope | None) -> Body[list[Message]]:
        where, params = _scope_sql(scope)
        rows = (
            yield _Step(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages m JOIN sessions s ON s.id = m.session_id "
                f"WHERE m.id = ANY(%s){where}",
                [wanted, *params],
            )
        ).rows
        found = {int(r[0]): _row_to_message(r) for r in rows}
        return [found[i] for i in wanted if i in found]

    def get_messages_by_ids(
        self, ids: Sequence[int], scope: SearchScope | None = None
    ) -> list[Message]:
        """Messages with these ids that fall inside ``scope``, in the order of ``ids``."""
        wanted = _ids(ids)
        if not wanted:
            return []
        return self._run(lambda: self._by_ids_body(wanted, scope), write=False)

    async def aget_messages_by_ids(
        self, ids: Sequence[int], scope: SearchScope | None = None
    ) -> list[Message]:
        wanted = _ids(ids)
        if not wanted:
            return []
        return await self._arun(lambda: self._by_ids_body(wanted, scope), write=False)

    def adjacent_ids(self, ids: Sequence[int]) -> dict[int, tuple[int | None, int | None]]:
        """For each existing id: the ids just before and after it in its session (or None)."""
        wanted = list(dict.fromkeys(_ids(ids)))
        if not wanted:
            return {}
        rows = self._read(adjacent_ids_sql("m.id = ANY(%s)"), [wanted])
        return {int(mid): (before, after) for mid, before, after in rows}

    def count_messages(self, session_id: str | None = None) -> int:
        if session_id is None:
            return int(self._read("SELECT COUNT(*) FROM messages")[0][0])
        rows = self._read("SELECT message_count FROM sessions WHERE id = %s", (session_id,))
        return int(rows[0][0]) if rows else 0

    def clear_session(self, session_id: str) -> int:
        _check_id(session_id, "session_id")

        def body() -> Body[int]:
            count = (
                yield _Step("DELETE FROM messages WHERE session_id = %s", (session_id,))
            ).rowcount
            yield _Step(
                "UPDATE sessions SET message_count = 0, summary = NULL, summary_json = NULL, "
                "summary_until_id = NULL WHERE id = %s",
                (session_id,),
            )
            return int(count)

        return self._run(body)

    def set_parent(self, message_id: int, parent_id: int | None) -> None:
        mid = _ids([message_id])[0]
        pid = None if parent_id is None else _ids([parent_id])[0]

        def body() -> Body[None]:
            result = yield _Step("UPDATE messages SET parent_id = %s WHERE id = %s", (pid, mid))
            if result.rowcount == 0:
                raise InvalidInputError(f"no message with id {message_id}")

        self._run(body)

    def set_message_summary(self, message_id: int, summary: Mapping[str, Any] | None) -> None:
        value = None if summary is None else _dumps(check_summary(summary, "message summary"))
        mid = _ids([message_id])[0]

        def body() -> Body[None]:
            yield _Step("UPDATE messages SET summary_json = %s WHERE id = %s", (value, mid))

        self._run(body)

    def get_message_summaries(self, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        wanted = _ids(ids)
        if not wanted:
            return {}
        rows = self._read(
            "SELECT id, summary_json FROM messages WHERE id = ANY(%s) AND summary_json IS NOT NULL",
            (wanted,),
        )
        return {int(mid): json.loads(value) for mid, value in rows}

    # derived indexes ------------------------------------------------------------------------
    def _keyword_body(
        self, text: str, limit: int, scope: SearchScope | None
    ) -> Body[list[KeywordHit]]:
        where, params = _scope_sql(scope)
        rows = (
            yield _Step(
                f"SELECT {_MESSAGE_COLUMNS}, ts_rank(m.fts, q) AS rank "
                f"FROM websearch_to_tsquery('{_TS_CONFIG}', %s) AS q, messages m "
                "JOIN sessions s ON s.id = m.session_id "
                f"WHERE m.fts @@ q{where} ORDER BY rank DESC, m.id DESC LIMIT %s",
                [text, *params, limit],
            )
        ).rows
        return [KeywordHit(_row_to_message(r[:-1]), float(r[-1])) for r in rows]

    def keyword_search(
        self, query: str, *, limit: int = 10, scope: SearchScope | None = None
    ) -> list[KeywordHit]:
        """Full-text rank over each message and the turn it answers, scoped in the same query."""
        text = _ts_query_text(query) if isinstance(query, str) else None
        if text is None or limit <= 0:
            return []
        return self._run(lambda: self._keyword_body(text, limit, scope), write=False)

    async def akeyword_search(
        self, query: str, *, limit: int = 10, scope: SearchScope | None = None
    ) -> list[KeywordHit]:
        text = _ts_query_text(query) if isinstance(query, str) else None
        if text is None or limit <= 0:
            return []
        return await self._arun(lambda: self._keyword_body(text, limit, scope), write=False)

    def pending_embeddings(self, limit: int) -> list[tuple[Message, str]]:
        """Oldest messages not yet in the vector index, each with the turn it answers."""
        rows = self._read(
            f"SELECT {_MESSAGE_COLUMNS}, m.context FROM messages m WHERE NOT m.embedded "
            "ORDER BY m.id LIMIT %s",
            (limit,),
        )
        return [(_row_to_message(r[:-1]), r[-1] or "") for r in rows]

    def mark_embedded(self, ids: Sequence[int]) -> None:
        wanted = _ids(ids)
        if not wanted:
            return

        def body() -> Body[None]:
            yield _Step("UPDATE messages SET embedded = TRUE WHERE id = ANY(%s)", (wanted,))

        self._run(body)

    def reset_embedded(self) -> int:
        def body() -> Body[int]:
            return (yield _Step("UPDATE messages SET embedded = FALSE WHERE embedded")).rowcount

        return int(self._run(body))

    def rebuild_keyword_index(self) -> int:
        """Recompute every message's context and tsvector from the messages (idempotent)."""

        def body() -> Body[int]:
            result = yield _Step(
                "WITH ctx AS (SELECT id, COALESCE(LAG(content) OVER (PARTITION BY session_id "
                "ORDER BY id), '') AS context FROM messages) "
                "UPDATE messages m SET context = ctx.context, "
                f"fts = setweight(to_tsvector('{_TS_CONFIG}', m.content), 'A') || "
                f"setweight(to_tsvector('{_TS_CONFIG}', ctx.context), 'B') "
                "FROM ctx WHERE ctx.id = m.id"
            )
            return result.rowcount

        return int(self._run(body))

    def get_meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM harombe_meta WHERE key = %s", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        def body() -> Body[None]:
            yield _Step(
                "INSERT INTO harombe_meta (key, value) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                (key, value),
            )

        self._run(body)

    def prune_write_log(self, older_than_hours: float = 24.0) -> int:
        """Delete every expired exactly-once key written more than ``older_than_hours`` ago.

        Writes already do this as they go (a few at a time); this empties the backlog at once.
        A key whose write may still be retried is never deleted, whatever the age given.
        """

        def body() -> Body[int]:
            return (
                yield _Step(
                    "DELETE FROM harombe_writes WHERE forget_after < now() "
                    "AND at < now() - make_interval(secs => %s)",
                    (older_than_hours * 3600,),
                )
            ).rowcount

        return int(self._run(body, keyed=False))

    def pending_count(self) -> int:
        """Messages not embedded yet (read through the partial index of such rows)."""
        return int(self._read("SELECT COUNT(*) FROM messages WHERE NOT embedded")[0][0])

    def stats(self) -> dict[str, Any]:
        sessions, users = self._read("SELECT COUNT(*), COUNT(DISTINCT user_id) FROM sessions")[0]
        messages, tokens, pending = self._read(
            "SELECT COUNT(*), COALESCE(SUM(token_count), 0), COUNT(*) FILTER (WHERE NOT embedded) "
            "FROM messages"
        )[0]
        size = self._read(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r' "
            "AND n.nspname = current_schema() AND c.relname IN "
            "('sessions', 'messages', 'harombe_meta', 'harombe_writes', 'message_vectors', "
            "'store_items', 'store_vectors', 'checkpoints', 'checkpoint_blobs', "
            "'checkpoint_writes', 'checkpoint_message_blobs', 'checkpoint_threads')"
        )[0][0]
        return {
            "location": self.location,
            "schema_version": PG_SCHEMA_VERSION,
            "sessions": int(sessions),
            "users": int(users),
            "messages": int(messages),
            "tokens": int(tokens),
            "pending_embeddings": int(pending),
            "bytes": int(size),
        }

    # context reads (O(window)): important_before, is_threaded, thread_path ----------------
    _context_dialect = "postgres"
    _context_mark = "%s"

    @staticmethod
    def _context_row(row: Sequence[Any]) -> Message:
        return _row_to_message(row)

