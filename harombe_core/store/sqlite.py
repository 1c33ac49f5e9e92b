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
import itertools
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from harombe_core.errors import SchemaTooNewError, StoreError
from harombe_core.flows import off_loop
from harombe_core.store import ops, pending
from harombe_core.store.base import KeywordHit, SearchScope
from harombe_core.store.erasure import ERASED_KEYWORDS, compact_keywords, owed
from harombe_core.store.fts import (
    BM25_WEIGHTS,
    CONTEXT_SQL,
    TAIL_LIMIT,
    Split,
    TermCounts,
    catch_up,
    fts_query,
    index_terms,
    index_totals,
    indexed_upto,
    keyword_indexer,
    query_words,
    score_tail,
    set_keyword_mark,
    split_tail,
    tail_rows,
)
from harombe_core.store.rows import (
    MESSAGE_COLUMNS,
    from_micros,
    row_to_message,
    scope_sql,
    to_micros,
)
from harombe_core.store.runner import SQLITE, Op, drive
from harombe_core.store.schema import MIGRATIONS, SCHEMA_VERSION
from harombe_core.store.shared import Lease
from harombe_core.store.sqlite_checks import APPLICATION_ID
from harombe_core.store.sqlite_file import (
    SQLiteFile,
    classify,
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
    FTS5's segments merged (:func:`~harombe_core.store.erasure.compact_keywords`), then the
    WAL checkpointed into the file and truncated (its old page images held the text)."""
    keyword_indexer(file, retries).stop()
    catch_up(file, retries)
    if file.snapshot(lambda c: owed(c, ERASED_KEYWORDS)) and file.write(compact_keywords, retries):
        file.checkpoint()


class SQLiteStore:
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
        self._term_counts = TermCounts()  # shared by this store's threads
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
    def _write(self, fn: Callable[[sqlite3.Connection], T], *, adds: bool = False) -> T:
        """Run ``fn`` in one IMMEDIATE transaction, retrying while the database is locked.

        Inside :meth:`atomic` (on its thread) ``fn`` joins that block's transaction instead.
        ``adds``: ``fn`` may add messages, so the keyword indexer is woken after the commit.
        """
        result = self._open_file().write(fn, self._max_retries)
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
        self, fn: Callable[[sqlite3.Connection], T], *, adds_messages: bool = True
    ) -> T:
        """Run ``fn(connection)`` in one write transaction, with the store's retries.

        For tables kept beside the messages by an extension (the LangGraph store of the
        LangChain adapter, the stored vectors), so they share this file, its locking and its
        error types. ``adds_messages=False`` says ``fn`` adds no message, so the keyword
        indexer is not woken for it.
        """
        return self._write(fn, adds=adds_messages)

    def snapshot(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` in one read transaction: a consistent view of the file that
        takes no write lock, so writers in other processes are never kept waiting. Inside
        :meth:`atomic` (on its thread) it reads in that block's transaction."""
        return self._open_file().snapshot(fn)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of one read-only statement (see :meth:`transaction`)."""
        return self._read(sql, params)

    def _settle(self) -> None:
        """Write first the derived rows this process owes the file (see
        :mod:`~harombe_core.store.pending`), unless this thread is inside one of the file's
        operations (a read nested in a snapshot, as the keyword search's word counts): a job
        drained there would run its writes on that operation's connection, inside its read
        transaction, and fail. The operation settled when it began."""
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
    def keyword_search(
        self, query: str, *, limit: int = 10, scope: SearchScope | None = None
    ) -> list[KeywordHit]:
        """BM25 over each message and the turn it answers, scoped in the same query.

        One read snapshot, never the write lock: the index as it is, plus the messages it does
        not hold yet (the tail, scored with the same BM25 by
        :func:`~harombe_core.store.fts.score_tail`), so a message is found as soon as its save
        returns. Ties go to the newer message. Words found in a large share of the rows are
        left out when the query has rarer ones (see :meth:`_drop_common_words`), so the cost
        follows the rare words.
        """
        words = query_words(query)
        if not words or limit <= 0:
            return []
        self._settle()
        where, params = scope_sql(scope)
        id_range, range_params = _fts_id_range(scope)
        size = None if scope is None else self.run(ops.scope_size(scope))
        if size == 0:  # nothing is in scope (an unknown user, or only the excluded session)
            return []

        def search(c: sqlite3.Connection) -> tuple[list[Any], list[Any], list[Split], list[str]]:
            indexed: list[Any] = []
            tail = c.execute(
                f"SELECT {MESSAGE_COLUMNS}, {CONTEXT_SQL} FROM messages m "
                f"JOIN sessions s ON s.id = m.session_id WHERE m.id > ?{where} "
                "ORDER BY m.id DESC LIMIT ?",
                [indexed_upto(c), *params, TAIL_LIMIT],
            ).fetchall()
            split = split_tail([(r[3], r[-1]) for r in tail])
            kept = self._drop_common_words(words, split)
            match = fts_query(kept)
            # The tail is scored with the index's counts read in this same snapshot, never
            # cached ones: a message then scores exactly as it will once indexed.
            counts = _exact_counts(c, kept) if tail else TermCounts()
            if scope is None or scope == SearchScope():
                # Unscoped, FTS5 ranks and cuts on its own (rank MATCH picks the function):
                # the messages table is only read for the rows returned.
                sql = (
                    f"SELECT {MESSAGE_COLUMNS}, f.rank FROM (SELECT rowid, rank FROM "
                    f"messages_fts WHERE messages_fts MATCH ? AND rank MATCH 'bm25({_BM25})' "
                    "ORDER BY rank LIMIT ?) f JOIN messages m ON m.id = f.rowid ORDER BY f.rank"
                )
                indexed = c.execute(sql, [match, limit]).fetchall()
            elif size is not None and size <= _SMALL_SCOPE and (
                spans := _session_spans(c, scope)
            ) is not None:
                # A small scope in a few sessions: FTS5 reads only each session's rowid
                # span, so a long session outside the scope (the one excluded, or another
                # user's between them) is never scored.
                inner = " UNION ALL ".join(
                    f"SELECT rowid, bm25(messages_fts, {_BM25}) AS rank FROM messages_fts "
                    "WHERE messages_fts MATCH ? AND rowid BETWEEN ? AND ?"
                    for _ in spans
                )
                sql = (
                    f"SELECT {MESSAGE_COLUMNS}, f.rank FROM ({inner}) f "
                    "JOIN messages m ON m.id = f.rowid JOIN sessions s ON s.id = m.session_id "
                    f"WHERE 1 = 1{where} ORDER BY f.rank LIMIT ?"
                )
                args = [value for low, high in spans for value in (match, low, high)]
                if spans:
                    indexed = c.execute(sql, [*args, *params, limit]).fetchall()
            elif size is not None and size <= _SMALL_SCOPE:
                # A small scope's ids, listed once, filter the index's matches without a row
                # lookup each (the unary + keeps SQLite from asking FTS5 for each listed id).
                # Thousands of rows may match the words in a large store; a user's scope is
                # a few of them: the lookups, not BM25, were most of the cost.
                sql = (
                    f"SELECT {MESSAGE_COLUMNS}, f.rank FROM (SELECT rowid, "
                    f"bm25(messages_fts, {_BM25}) AS rank FROM messages_fts "
                    f"WHERE messages_fts MATCH ?{id_range} AND +rowid IN (SELECT m.id FROM "
                    f"messages m JOIN sessions s ON s.id = m.session_id WHERE 1 = 1{where}) "
                    "ORDER BY rank LIMIT ?) f JOIN messages m ON m.id = f.rowid "
                    f"JOIN sessions s ON s.id = m.session_id WHERE 1 = 1{where} ORDER BY f.rank"
                )
                args = [match, *range_params, *params, limit, *params]
                indexed = c.execute(sql, args).fetchall()
            else:
                sql = (
                    f"SELECT {MESSAGE_COLUMNS}, bm25(messages_fts, {_BM25}) AS rank "
                    "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
                    "JOIN sessions s ON s.id = m.session_id "
                    f"WHERE messages_fts MATCH ?{where}{id_range} ORDER BY rank LIMIT ?"
                )
                indexed = c.execute(sql, [match, *params, *range_params, limit]).fetchall()
            return indexed, tail, split, kept, counts

        indexed, tail, split, kept, counts = self._open_file().snapshot(search)
        hits = [KeywordHit(row_to_message(r[:-1]), -float(r[-1])) for r in indexed]
        if tail:
            self._keywords.notify()  # a writer that stopped before indexing, or one lagging
            if len(tail) == TAIL_LIMIT and self.location not in _WARNED_LONG_TAIL:
                _WARNED_LONG_TAIL.add(self.location)
                log.warning(
                    "%s: more than %d messages are not in the keyword index yet (a read-only "
                    "file, or its writer stopped before indexing them); keyword search scores "
                    "only the newest %d of them. Open it once with write access to index them.",
                    self.location, TAIL_LIMIT, TAIL_LIMIT,
                )
            scores = score_tail(split, kept, counts)
            hits += [
                KeywordHit(row_to_message(r[:-1]), score)
                for r, score in zip(tail, scores, strict=True)
                if score > 0
            ]
        hits.sort(key=lambda h: (-h.score, -(h.message.id or 0)))
        return hits[:limit]

    def _drop_common_words(self, words: list[str], tail: Sequence[Split] = ()) -> list[str]:
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
        borderline words are left out. The messages not indexed yet (``tail``, see
        :meth:`keyword_search`) count as if they were.
        """
        if len(words) < 2:
            return words
        counts, rows = self._word_rows(words)
        if tail:
            rows += len(tail)
            for word in words:
                terms = index_terms(word)
                if terms:
                    counts[word] += tail_rows(tail, terms)
        threshold = max(rows * _COMMON_SHARE, _COMMON_MIN_ROWS)
        kept = [w for w in words if counts[w] <= threshold]
        if not kept:
            rarest = sorted(words, key=lambda w: counts[w])[:_KEEP_WHEN_ALL_COMMON]
            kept = [w for w in words if w in rarest]
        return kept

    def _word_rows(self, words: list[str]) -> tuple[dict[str, int], int]:
        """Each word's number of indexed rows (its rarest term's; 0 if not in the index), and
        the number of rows in the index. The counts, with the index's size, stay cached in
        :attr:`_term_counts` for :func:`~harombe_core.store.fts.score_tail`."""
        upto = int(self._read("SELECT MAX(id) FROM messages")[0][0] or 0)
        with self._term_lock:
            counts = self._term_counts
            if counts.stale(upto):
                with self._open_file().connection() as conn:
                    try:
                        rows, tokens = index_totals(conn)
                    except sqlite3.Error as exc:
                        raise classify(exc, self.location) from exc
                counts = TermCounts(rows, upto, time.monotonic(), tokens)
                self._term_counts = counts
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
            set_keyword_mark(c, int(c.execute("SELECT MAX(id) FROM messages").fetchone()[0] or 0))
            return count

        return self._write(rebuild)

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

    def stats(self) -> dict[str, Any]:
        sessions, users = self._read("SELECT COUNT(*), COUNT(DISTINCT user_id) FROM sessions")[0]
        messages, tokens, pending = self._read(
            "SELECT COUNT(*), COALESCE(SUM(token_count), 0), "
            f"(SELECT COUNT(*) FROM messages m WHERE m.embedded = 0 AND {ops.NO_VECTOR}) "
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


#: Common words, see SQLiteStore._drop_common_words.
_COMMON_SHARE = 0.05
_COMMON_MIN_ROWS = 2_000
#: Scopes of at most this many messages filter keyword matches by their listed ids.
_SMALL_SCOPE = 5_000
_KEEP_WHEN_ALL_COMMON = 2
_BM25 = ", ".join(str(w) for w in BM25_WEIGHTS)
_WARNED_LONG_TAIL: set[str] = set()


#: At most this many sessions' rowid spans are searched one by one (see keyword_search):
#: each costs FTS5 one pass over every query word's row list, to weigh it for bm25.
_MAX_SPANS = 8


def _session_spans(c: sqlite3.Connection, scope: SearchScope) -> list[tuple[int, int]] | None:
    """The first and last message id of each session in a user or session scope, or None
    when searching them one by one does not pay: they are too many, or they overlap
    (sessions written at the same time interleave, and each span would be read again; the
    listed ids are then the cheaper filter). Two index seeks per session: the sessions'
    sizes do not matter."""
    if scope.session_id is not None:
        sql, params = "SELECT s.id FROM sessions s WHERE s.id = ?", [scope.session_id]
    elif scope.user_id is not None:
        sql, params = "SELECT s.id FROM sessions s WHERE s.user_id = ?", [scope.user_id]
    else:
        return None
    if scope.exclude_session_id is not None:
        sql += " AND s.id <> ?"
        params.append(scope.exclude_session_id)
    spans = c.execute(
        "SELECT (SELECT MIN(id) FROM messages WHERE session_id = x.id), "
        "(SELECT MAX(id) FROM messages WHERE session_id = x.id) "
        f"FROM ({sql} AND s.message_count > 0 LIMIT {_MAX_SPANS + 1}) x",
        params,
    ).fetchall()
    found = [(int(a), int(b)) for a, b in spans if a is not None]
    if len(spans) > _MAX_SPANS:
        return None
    found.sort()
    if any(later[0] < earlier[1] for earlier, later in itertools.pairwise(found)):
        return None
    return found


def _exact_counts(c: sqlite3.Connection, words: Sequence[str]) -> TermCounts:
    """The keyword index's row and token totals and the row count of each term of ``words``,
    read on ``c`` (in the caller's snapshot): what FTS5's bm25() would use now. Each count
    reads that term's list of rows, as FTS5's own scoring of the term does."""
    rows, tokens = index_totals(c)
    # In the temp schema: nothing is written to the file, and a read-only file can have it.
    c.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.messages_fts_rows "
        "USING fts5vocab(main, messages_fts, 'row')"
    )
    counts = TermCounts(rows=rows, tokens=tokens)
    for word in words:
        for term in index_terms(word):
            if term not in counts.rows_of:
                row = c.execute(
                    "SELECT doc FROM temp.messages_fts_rows WHERE term = ?", (term,)
                ).fetchone()
                counts.rows_of[term] = int(row[0]) if row else 0
    return counts


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
