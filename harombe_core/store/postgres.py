"""PostgreSQL store: the same protocol as SQLite, for apps that run as many processes on many hosts.

Why it looks the way it does:

* Each operation is written once, as a generator that yields the SQL it needs and receives the
  rows back; one driver runs it on psycopg's sync ``ConnectionPool``. The async path is the
  SQLite store's: ``arun(op)`` runs ``run(op)`` in a worker thread
  (:func:`harombe_core.flows.off_loop`), one hop per operation. Measured beside the former
  design (psycopg's ``AsyncConnectionPool`` on a private event loop,
  ``benchmarks/bench_pg_async.py``), the hop is faster per call and under bursts, and one pool
  serves every thread and every event loop, with nothing to close but that pool.
* Every write is one transaction, retried with backoff while the server is unreachable (a restart,
  a failover) or reports a serialisation failure. A write whose COMMIT may have been applied
  before the connection dropped is *not* applied twice: each write records a unique key with its
  result in the same transaction, and a retry first looks that key up. An acknowledged message is
  therefore stored exactly once. A key expires once no retry can need it, and writes delete
  expired keys as they go, so the log holds only the last few minutes of writes.
* A transaction runs in psycopg's pipeline mode (:func:`_pipelined`): statements go out as the
  body yields them and the body waits only where it reads an answer, so BEGIN, a lock and the
  read after it, inserts and the exactly-once record share round trips; COMMIT follows by
  itself (safe behind pgbouncer). A body that usually asks one statement can run it alone
  outside a transaction (``first_alone``).
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

import contextlib
import itertools
import json
import logging
import random
import re
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit, urlunsplit

from harombe_core.errors import (
    InvalidInputError,
    MissingExtraError,
    NotAHarombeDatabaseError,
    SchemaTooNewError,
    StorageFullError,
    StoreBusyError,
    StoreError,
    StoreNotFoundError,
    StoreReadOnlyError,
    StoreUnavailableError,
)
from harombe_core.flows import off_loop
from harombe_core.store import pending
from harombe_core.store.base import AtomicBlock
from harombe_core.store.ops import KeywordShortcuts
from harombe_core.store.rows import dumps
from harombe_core.store.runner import MORE, POSTGRES, Body, Op, Step, StepResult, drive, drive_first
from harombe_core.store.schema import PG_MIGRATIONS, PG_SCHEMA_VERSION

#: Every table the migrations create (read from their statements).
TABLES = sorted(
    {
        match.group(1)
        for statements in PG_MIGRATIONS
        for statement in statements
        for match in re.finditer(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", statement)
    }
)

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg_pool import ConnectionPool
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


#: Limits a DBA sets on the role: the server gave up on purpose, so retrying for the whole
#: window would only override them (and then blame an unreachable server).
_GAVE_UP = {
    "55P03": "a lock was not granted within the server's lock_timeout",
    "57014": "the server cancelled the statement (its statement_timeout, or a cancel request)",
    "25P03": "the server ended a transaction left idle longer than its "
    "idle_in_transaction_session_timeout (an atomic() block paused between its calls)",
    "25P04": "the server ended a transaction that ran longer than its transaction_timeout",
}

#: "prepared statement does not exist" / "already exists": the pooler changed connections.
_PREPARED_LOST = ("26000", "42P05")

#: libpq's words for a connection the URL itself gets wrong (a restart cannot fix these).
_WRONG_URL = (
    "does not exist",  # database or role
    "password authentication failed",
    "no pg_hba.conf entry",
    "failed to resolve host",
    "could not translate host name",
    "invalid connection option",
    "invalid URI",
)
_TRANSIENT_STATES = {"40001", "40P01", "57P01", "57P02", "57P03", "08000", "08003", "08006"}


class PostgresStore(KeywordShortcuts):
    """A :class:`~harombe_core.store.base.MessageStore` on PostgreSQL (extra ``postgres``).

    ``url`` is a libpq URL (``postgresql://user:pass@host:5432/db``). ``retry_seconds`` is how long
    a call keeps retrying while the server is unreachable before raising
    :class:`StoreUnavailableError`.

    One pool of ``min_size`` to ``max_size`` connections serves sync callers and async ones
    (each async operation holds one worker thread of the event loop's default executor,
    ``min(32, cpus + 4)`` threads, and one connection while it runs). The default of 10 is
    enough for the threads of a small machine; callers beyond ``max_size`` queue for a
    connection (a wait longer than ``connect_timeout`` is retried like a lost connection).
    Raise it for a server with many cores or many threads, within the server's
    ``max_connections`` across every process.
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
        self.dialect = POSTGRES
        self.location = redact_url(url)
        self._retry_seconds = retry_seconds
        self._connect_timeout = connect_timeout
        self._write_log_seconds = retry_seconds + connect_timeout + _WRITE_LOG_SLACK
        self._writes = itertools.count()
        self._block = AtomicBlock()  # this thread's atomic() block, if one is open
        self._closed = False
        #: psycopg's default; None once a pooler showed that prepared statements do not survive
        #: from one transaction to the next (see :meth:`_retry_wait`).
        self._prepare_threshold: int | None = 5
        self._warned_unreachable = False
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
        try:
            self._with_retry(self._first_connection)
            # Not wait=True: a pool that fails to fill once cannot be opened again; the first
            # call waits for a connection and retries like any other.
            self._pool.open(wait=False)
            self._run(self._migrate_body, write=False, keyed=False)
        except BaseException:
            self._pool.close()
            raise

    def _first_connection(self) -> None:
        """One plain connection before the pool: its error is the real cause (refused, unknown
        host, bad password), where a pool that never filled says only that it timed out. The
        first failure worth waiting for is logged as a warning, so a wrong port is not a
        silent wait of ``retry_seconds``."""
        try:
            psycopg.connect(self.url, **self._kwargs).close()
        except psycopg.Error as exc:
            if self._transient(exc) and not self._warned_unreachable:
                self._warned_unreachable = True
                log.warning(
                    "%s: %s; retrying for up to %g s (retry_seconds)",
                    self.location,
                    str(exc).strip(),
                    self._retry_seconds,
                )
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
        if state == "3F000" or (state == "42704" and '"vector"' in str(exc)):
            first = str(exc).strip().splitlines()[0]
            return StoreError(
                f"{self.location}: {first}. This connection's search_path (the role's setting, "
                "or options=-csearch_path%3D... in the URL) must name an existing schema first, "
                "and the schema pgvector is installed in (usually public) after it, e.g. "
                "options=-csearch_path%3Dmyschema,public."
            )
        if state in _GAVE_UP:
            return StoreBusyError(
                f"{self.location}: {_GAVE_UP[state]} ({str(exc).strip()}); the transaction was "
                "rolled back. Retry later, or raise that setting for this role "
                "(ALTER ROLE name SET ...)."
            )
        if isinstance(exc, (psycopg.IntegrityError, psycopg.DataError, UnicodeError)):
            return InvalidInputError(f"{self.location}: the value cannot be stored ({exc}).")
        if not state and any(cause in str(exc) for cause in _WRONG_URL):
            return StoreUnavailableError(
                f"{self.location} cannot be connected to as given ({str(exc).strip()}). Check "
                "the host, port, database name, user and password in the URL."
            )
        if isinstance(exc, psycopg.OperationalError):
            return StoreUnavailableError(
                f"{self.location} could not be reached for {self._retry_seconds:g} s ({exc}). "
                "Check that the server is running and the URL is right."
            )
        return StoreError(f"{self.location}: {exc}")

    @staticmethod
    def _transient(exc: BaseException) -> bool:
        state = getattr(exc, "sqlstate", None) or ""
        if state in ("53100", "25006", "42501") or state in _GAVE_UP:
            return False
        if not state and any(cause in str(exc) for cause in _WRONG_URL):  # not a SQL error
            return False  # waiting will not fix the URL: say so now, not after retry_seconds
        if state in _TRANSIENT_STATES or state.startswith("08"):
            return True
        return isinstance(exc, psycopg.OperationalError) and not isinstance(exc, pg_errors.DiskFull)

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

    def _retry_wait(
        self, exc: BaseException, deadline: float, attempt: int, delay: float
    ) -> float | None:
        """Seconds to wait before retrying after ``exc``, or None when it must be raised.

        Only transient server errors (a restart, a dropped connection, a serialisation
        conflict) are retried, with jittered exponential backoff, until the deadline.
        """
        if (
            getattr(exc, "sqlstate", None) in _PREPARED_LOST
            and time.monotonic() < deadline
            and not self._closed
        ):
            # pgbouncer in transaction pooling mode (before 1.21's max_prepared_statements):
            # each transaction may get another server connection, without the statements
            # prepared on the last. The failed transaction was rolled back; retry unprepared
            # (a call that began before another thread switched may still meet one).
            if self._prepare_threshold is not None:
                self._prepare_threshold = None
                log.warning(
                    "%s: prepared statements do not survive between transactions here (a "
                    "pooler in transaction mode?); running without them from now on",
                    self.location,
                )
            return 0.0
        if (
            isinstance(exc, psycopg.Error)
            and self._transient(exc)
            and time.monotonic() < deadline
            and not self._closed
        ):
            log.warning("%s: %s (attempt %d); retrying", self.location, str(exc).strip(), attempt)
            return delay * (1 + random.random())
        return None

    def _keyed(self, factory: Callable[[], Body[T]], tries: _Attempts[T]) -> Body[T]:
        """``factory``'s body, applied exactly once however often the transaction is retried.

        The write records ``key`` and its result in ``harombe_writes`` in its own transaction,
        and a retry (its COMMIT may have landed before the connection dropped) first looks the
        key up. A row is kept for ``_write_log_seconds``: longer than any retry of its call can
        last (the retry window, one more connection attempt, the backoff), so the lookup always
        finds a committed write, and every ``_PRUNE_EVERY``-th write of a store deletes rows
        past that age (``SKIP LOCKED``: never waits for another writer). The log therefore
        holds about the last ``_write_log_seconds`` of writes, never more. A result holding
        text (a removed message, a session id) is deleted as soon as the call has it
        (:meth:`_Attempts.forget_recorded`): a retry of a call that returned cannot come, and
        text a user deleted must not outlive the call in this log.
        """
        key, attempt, started = tries.key, tries.attempt, tries.started
        if attempt > 1:
            if time.monotonic() - started > self._write_log_seconds - _WRITE_LOG_SLACK / 2:
                raise StoreUnavailableError(
                    f"{self.location}: a write was interrupted and could not be confirmed for "
                    f"{time.monotonic() - started:.0f} s; whether it was applied is unknown. "
                    "Read the data back before writing it again."
                )
            done = (yield Step("SELECT result FROM harombe_writes WHERE key = %s", (key,))).rows
            if done:
                tries.holds_text = '"' in done[0][0]
                return json.loads(done[0][0])
        value = yield from factory()
        try:
            recorded = dumps(value)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"the result of a write must be JSON-serialisable on PostgreSQL, to be returned "
                f"again after a retry ({exc})."
            ) from None
        yield Step(
            "INSERT INTO harombe_writes (key, result, forget_after) "
            "VALUES (%s, %s, now() + make_interval(secs => %s))",
            (key, recorded, self._write_log_seconds),
        )
        tries.holds_text = '"' in recorded  # only JSON strings can hold a user's text
        if next(self._writes) % _PRUNE_EVERY == 0:
            yield Step(_PRUNE_SQL, (_PRUNE_BATCH,))
        return value

    def _run(
        self,
        factory: Callable[[], Body[T]],
        *,
        write: bool = True,
        keyed: bool = True,
        pin: bool = False,
        alone: bool = False,
        text_free: bool = False,
    ) -> T:
        """Run a body in one transaction; retry transient failures without applying it twice.

        Inside :meth:`atomic` (on its thread) the body joins that block's transaction instead.
        With ``pin`` every store call the body makes on this thread joins this transaction.
        Else the body runs pipelined (:func:`_pipelined`). With ``alone`` its first statement
        runs first by itself, outside a transaction, and the body runs again as usual only if
        it asks a second (see :meth:`run_body`).
        """
        if self._closed:
            raise StoreError(f"{self.location}: the store is closed; open a new MemoryManager.")
        if self._block.handle is not None:
            return self._run_inside(self._block.handle, factory)
        if alone:
            done = self._attempts(_Attempts(self, factory, False), _alone)
            if done is not MORE:
                return done
        tries = _Attempts(self, factory, write and keyed, text_free=text_free)
        return self._attempts(tries, self._pinned if pin else _pipelined)

    def _attempts(
        self, tries: _Attempts[T], drive_on: Callable[[psycopg.Connection[Any], Body[T]], Any]
    ) -> Any:
        """``drive_on(connection, body)`` with a fresh body per try until one succeeds (or the
        error is not transient, or the retry window has passed: raised typed)."""
        while True:
            try:
                with self._pool.connection() as conn:
                    conn.prepare_threshold = self._prepare_threshold
                    value = drive_on(conn, tries.body())
            except (psycopg.Error, UnicodeError) as exc:
                time.sleep(tries.wait(exc))
            else:
                tries.forget_recorded()
                return value

    def _pinned(self, conn: psycopg.Connection[Any], body: Body[T]) -> T:
        """``body`` in a transaction that every store call of this thread joins (atomic)."""
        with conn.transaction(), conn.cursor() as cur, self._block.open(cur):
            return drive(cur, body)

    def _run_inside(self, cur: psycopg.Cursor[Any], factory: Callable[[], Body[T]]) -> T:
        """Run a body inside the :meth:`atomic` block of this thread.

        A transient error is passed on untouched, so the block's driver retries the whole
        block; any other is typed as outside a block.
        """
        with self._block.call():
            try:
                return drive(cur, factory())
            except (psycopg.Error, UnicodeError) as exc:
                if isinstance(exc, psycopg.Error) and (
                    self._transient(exc) or exc.sqlstate in _PREPARED_LOST
                ):
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

    def run(self, op: Op[T]) -> T:
        """Run one operation (:mod:`harombe_core.store.ops`) in one transaction: a write is
        applied exactly once however often a lost connection makes it retry."""
        if op.empty:
            return op.result_without_sql(POSTGRES)
        pending.settle(self.location, self._block)  # derived rows owed are written first
        return self._run(lambda: op.body(POSTGRES), write=op.write, keyed=op.exactly_once)

    async def arun(self, op: Op[T]) -> T:
        """:meth:`run` in a worker thread (:func:`~harombe_core.flows.off_loop`), as on SQLite:
        one hop per operation, on the same pool, retries and transaction as :meth:`run`."""
        if op.empty:
            return op.result_without_sql(POSTGRES)
        return await off_loop(self.run, op)

    def run_body(
        self,
        factory: Callable[[], Body[T]],
        *,
        exactly_once: bool = False,
        first_alone: bool = False,
        text_free: bool = False,
    ) -> T:
        """Run a body in one transaction, with the store's retries and error types.

        For tables kept beside the messages by an extension (the LangGraph store of the
        LangChain adapter). A body is a generator that yields steps (objects with ``sql``, in
        ``%s`` placeholder style, and ``params``) and receives results (``rows``, ``rowcount``);
        what it returns is the call's result. ``factory`` is called again for each retry. With
        ``exactly_once`` a retry after a COMMIT that may have landed returns the first result
        (which must then be JSON-serialisable) instead of running the body again.

        ``first_alone`` for a body that usually asks a single statement (a read of one row, a
        write that checks its own condition): that statement runs alone, outside a
        transaction (one round trip, no BEGIN and COMMIT). A body that asks a second one is
        dropped and run again from its start in one transaction, so its first statement must
        have written nothing when the body goes on; and it is not recorded for
        ``exactly_once`` (a retry runs it again), so running it twice must change nothing
        (an insert that skips rows already stored).

        ``text_free`` when the result of an ``exactly_once`` body holds no text of a user
        (flags, counts, random tokens): its write-log row is then left to expire, not deleted
        once the call has its answer (a round trip less; see :meth:`_keyed`).
        """
        return self._run(
            factory,
            write=exactly_once,
            keyed=exactly_once,
            alone=first_alone,
            text_free=text_free,
        )

    async def arun_body(
        self,
        factory: Callable[[], Body[T]],
        *,
        exactly_once: bool = False,
        first_alone: bool = False,
        text_free: bool = False,
    ) -> T:
        """:meth:`run_body` in a worker thread, one hop (as :meth:`arun`)."""
        return await off_loop(
            self.run_body,
            factory,
            exactly_once=exactly_once,
            first_alone=first_alone,
            text_free=text_free,
        )

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        pending.settle(self.location, self._block)

        def body() -> Body[list[tuple[Any, ...]]]:
            return (yield Step(sql, params)).rows

        return self._run(body, write=False)

    def close(self) -> None:
        """Close the pool, from any thread. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._pool.close()

    async def aclose(self) -> None:
        self.close()

    # schema ---------------------------------------------------------------------------------
    def _migrate_body(self) -> Body[None]:
        # Processes opening at once wait for the one migrating, whatever the role's lock_timeout.
        yield Step("SET LOCAL lock_timeout = 0")
        yield Step("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        # Created only when missing: even IF NOT EXISTS is refused by a read-only transaction,
        # and a store on a read replica (default_transaction_read_only) must open for reads.
        if not (yield Step("SELECT to_regclass('harombe_schema') IS NOT NULL")).rows[0][0]:
            yield Step(
                "CREATE TABLE harombe_schema (version INTEGER PRIMARY KEY, "
                "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
        current = (yield Step("SELECT COALESCE(MAX(version), 0) FROM harombe_schema")).rows[0][0]
        if current > PG_SCHEMA_VERSION:
            raise SchemaTooNewError(
                f"{self.location} has schema version {current}, newer than this harombe "
                f"understands ({PG_SCHEMA_VERSION}). Upgrade harombe-memory."
            )
        if current == 0:
            # A database harombe has never set up: a table of another application under one of
            # harombe's names would fail the migration with a bare "relation ... already
            # exists" (nothing is created either way: one transaction).
            taken = (
                yield Step(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                    "current_schema() AND table_name = ANY(%s) ORDER BY table_name",
                    (TABLES,),
                )
            ).rows
            if taken:
                raise NotAHarombeDatabaseError(
                    f"{self.location} is not a harombe database: it has no harombe_schema "
                    f"record but already holds table(s) {', '.join(r[0] for r in taken)} of "
                    "another application, which harombe would create. Nothing was changed. "
                    "Give harombe a database of its own (CREATE DATABASE harombe) and pass its "
                    "URL."
                )
        for index in range(current, PG_SCHEMA_VERSION):
            for statement in PG_MIGRATIONS[index]:
                yield Step(statement)
            yield Step("INSERT INTO harombe_schema (version) VALUES (%s)", (index + 1,))
            log.info("%s: applied schema migration %d", self.location, index + 1)

    def applied_migrations(self) -> list[int]:
        """Schema versions recorded in ``harombe_schema`` (read-only)."""
        return [int(r[0]) for r in self._read("SELECT version FROM harombe_schema ORDER BY 1")]

    # the write log ------------------------------------------------------------------------
    def prune_write_log(self, older_than_hours: float = 24.0) -> int:
        """Delete every expired exactly-once key written more than ``older_than_hours`` ago.

        Writes already do this as they go (a few at a time); this empties the backlog at once.
        A key whose write may still be retried is never deleted, whatever the age given.
        """

        def body() -> Body[int]:
            return (
                yield Step(
                    "DELETE FROM harombe_writes WHERE forget_after < now() "
                    "AND at < now() - make_interval(secs => %s)",
                    (older_than_hours * 3600,),
                )
            ).rowcount

        return int(self._run(body, keyed=False))


class _Attempts(Generic[T]):
    """One call's tries: its exactly-once key (None when the body need not be keyed), deadline
    and backoff."""

    def __init__(
        self,
        store: PostgresStore,
        factory: Callable[[], Body[T]],
        keyed: bool,
        *,
        text_free: bool = False,
    ) -> None:
        self.store = store
        self.text_free = text_free  # its result holds no user's text: nothing to forget
        self.factory = factory
        self.key = uuid.uuid4() if keyed else None
        self.started = time.monotonic()
        self.deadline = self.started + store._retry_seconds
        self.delay = 0.05
        self.attempt = 0
        self.holds_text = False  # the recorded result holds a string (set by _keyed)

    def body(self) -> Body[T]:
        """A fresh body for the next try (keyed, so a retry never applies it twice)."""
        self.attempt += 1
        if self.key is None:
            return self.factory()
        return self.store._keyed(self.factory, self)

    def forget_recorded(self) -> None:
        """Delete the committed call's write-log row if its result holds text.

        Run once the call's connection is back in the pool with its result in hand, so no
        retry of this call will look the row up; left in place, a removed message
        (LlamaIndex ``delete_message`` returns it) would stay in a row until the log is
        pruned. A failure here loses nothing: the row still expires.
        """
        if self.key is None or not self.holds_text or self.text_free:
            return
        try:
            with self.store._pool.connection() as conn:
                conn.execute("DELETE FROM harombe_writes WHERE key = %s", (self.key,))
        except psycopg.Error as exc:
            log.debug("%s: a write-log row is left to expire (%s)", self.store.location, exc)

    def wait(self, exc: BaseException) -> float:
        """Seconds to wait before the next try after ``exc``; raises it, typed, when it is
        not transient or the deadline has passed."""
        wait = self.store._retry_wait(exc, self.deadline, max(self.attempt, 1), self.delay)
        if wait is None:
            raise self.store._classify(exc) from exc
        self.delay = min(self.delay * 2, 1.0)
        return wait


class _Pending(StepResult):
    """The result of a statement sent in pipeline mode: reading ``rows`` or ``rowcount`` waits
    for the server (one round trip answers every statement sent until then), so a body that
    reads nothing of a statement does not wait for it."""

    __slots__ = ("_cursor", "_pipeline", "_rows")

    def __init__(self, cursor: psycopg.Cursor[Any], pipeline: psycopg.Pipeline) -> None:
        self._cursor, self._pipeline = cursor, pipeline
        self._rows: list[Any] | None = None

    @property
    def arrived(self) -> bool:
        return self._cursor.pgresult is not None

    def _arrived(self) -> psycopg.Cursor[Any]:
        if self._cursor.pgresult is None:
            self._pipeline.sync()  # raises the first error of what was sent
        return self._cursor

    @property
    def rows(self) -> list[Any]:  # type: ignore[override]
        if self._rows is None:
            cursor = self._arrived()
            self._rows = cursor.fetchall() if cursor.description is not None else []
        return self._rows

    @property
    def rowcount(self) -> int:  # type: ignore[override]
        return self._arrived().rowcount


def _pipelined(conn: psycopg.Connection[Any], body: Body[T]) -> T:
    """Run ``body`` in one transaction in pipeline mode, on a connection in autocommit.

    Each statement goes to the server as soon as the body yields it, and the body waits only
    when it reads a result (:class:`_Pending`). So BEGIN travels with the first statement, a
    lock with the read that must follow it, inserts whose counts are not read yet with each
    other: a checkpoint put is three round trips, not eight. The server still runs the
    statements one after the other, each in its own snapshot as before (READ COMMITTED): only
    the waits between them are gone. An error surfaces at the next read or on leaving pipeline
    mode, and the transaction is rolled back as before.

    COMMIT runs after pipeline mode is left, by itself. Leaving pipeline mode sends a Sync and
    then a Flush; were the transaction already committed by then, pgbouncer before 1.21 (in
    transaction mode) would have given the server connection back at the Sync and hand one
    out again for the Flush, which no answer ever ends: that client held the server connection
    and every other client sharing it waited until pgbouncer's query_wait_timeout. Left while
    the transaction is open, both messages reach the connection the transaction holds.
    """
    try:
        with conn.pipeline() as pipeline:
            try:
                conn.execute("BEGIN")
                result: StepResult | None = None
                while True:
                    try:
                        step = next(body) if result is None else body.send(result)
                    except StopIteration as stop:
                        value: T = stop.value
                        break
                    cursor = conn.cursor()  # one per statement: each keeps its own result
                    cursor.execute(step.sql, step.params)
                    result = _Pending(cursor, pipeline)
            except BaseException:
                with contextlib.suppress(psycopg.Error):
                    pipeline.sync()  # what was still in flight (its errors follow this one)
                raise
        # (Leaving pipeline mode waited for every result, still inside the transaction.)
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            conn.rollback()  # (nothing if the transaction already ended)
        raise
    return value


def _alone(conn: psycopg.Connection[Any], body: Body[T]) -> Any:
    """``body``'s result if it asks a single statement, run outside a transaction; else
    :data:`~harombe_core.store.runner.MORE` (nothing was written: see ``run_body``)."""
    with conn.cursor() as cursor:
        return drive_first(cursor, body)
