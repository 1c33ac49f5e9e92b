"""SQLite's keyword piece: FTS5 queries, the background catch-up, and the unindexed tail.

Why it looks the way it does:

* An FTS5 row written in the writer's own transaction costs a fresh index segment per commit
  (about 2.5x the raw commit, +65-107 % on ``save_message``), so writers do not index. The
  messages are indexed in batches by :func:`catch_up`, one transaction, many rows, with a
  high-water mark in ``harombe_meta`` that makes it idempotent across processes (ids grow in
  commit order).
* The catch-up takes the write lock, so it must never run on a reader's path: a search under
  eight writers would otherwise queue behind them. One :class:`KeywordIndexer` per database
  file per process hands it to the process's background worker after a commit that added
  messages; the file's last close runs a final one, so a later read-only opener finds every
  message indexed.
* A search reads the index as it is, in one read snapshot, plus the messages above the mark
  (the *tail*), which it scores with FTS5's own BM25 formula in Python (:func:`score_tail`):
  a message is found the moment its save returns, and ranks as it will once indexed. The
  search is a body of SQL steps (:func:`search_body`), the SQLite side of the store operation
  :func:`~harombe_core.store.ops.keyword_search`, so the store runs it like any other.
* A keyword search leaves out the words that are in a large share of rows when the query has
  rarer ones (:func:`_drop_common_words`), so its cost follows the rare words.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harombe_core.errors import HarombeError
from harombe_core.folding import KEYWORDS, SummaryFolder
from harombe_core.store.base import KeywordHit, SearchScope
from harombe_core.store.erasure import KEYWORD_TABLES
from harombe_core.store.rows import MESSAGE_COLUMNS, scope_hits, scope_sql
from harombe_core.store.runner import Body, Dialect, Step
from harombe_core.store.schema import TS_CONFIG
from harombe_core.store.sqlite_file import SQLiteFile
from harombe_core.store.unspaced import UNSPACED, spaced, sql_spaced
from harombe_core.store.unspaced import phrase as spaced_phrase

__all__ = [
    "BM25_WEIGHTS",
    "COMMON_MIN_ROWS",
    "K1",
    "KEYWORD_MARK",
    "TAIL_LIMIT",
    "B",
    "Instances",
    "KeywordIndexer",
    "Split",
    "TermCounts",
    "behind",
    "bm25",
    "catch_up",
    "fts_query",
    "index_terms",
    "keyword_indexer",
    "pg_keyword_body",
    "pg_query",
    "phrase_count",
    "query_words",
    "rarer_words",
    "read_tail",
    "rebuild_body",
    "score_tail",
    "search_body",
    "span_rows",
    "sparse",
    "split_tail",
    "tail_rows",
    "tokens",
    "totals",
    "varint",
]

log = logging.getLogger(__name__)

KEYWORD_MARK = "keyword_index_upto"
#: BM25 column weights: the turn a message answers counts 0.4 against the message itself.
BM25_WEIGHTS = (1.0, 0.4)
#: FTS5's bm25() constants (fts5_aux.c).
K1, B = 1.2, 0.75
#: The most unindexed messages a search scores itself (the newest ones). The tail is longer
#: only when no writer indexes it (a read-only file, a crashed writer): it is then logged once.
TAIL_LIMIT = 5_000

_WORD = re.compile(r"\w+", re.UNICODE)
#: The keyword index's tokenizer (``messages_fts``, migration 1); query words go through it too.
TOKENIZER = "porter unicode61 remove_diacritics 2"


_UNSPACED_RUN = re.compile(f"({UNSPACED.pattern}+)")


def query_words(text: str) -> list[str]:
    """The distinct words of free text that a keyword search looks for (at most 64).

    Chinese and Japanese are written without spaces (and Korean writes particles onto its
    words), so a run of their characters gives itself and its overlapping pairs of characters
    ("東京の寿司" -> "東京の寿司", "東京", "京の", "の寿", "寿司"), each looked up as a phrase
    of its characters (:func:`fts_query`, :func:`pg_query`), as every keyword index holds
    them (:mod:`~harombe_core.store.unspaced`): BM25 then ranks a turn by how many of the
    question's pairs it has, as it does words (one character alone is a word).
    """
    words: dict[str, None] = {}
    for word in _WORD.findall(text):
        for piece in _UNSPACED_RUN.split(word.lower()):
            if UNSPACED.match(piece):
                pairs = [piece[i : i + 2] for i in range(len(piece) - 1)]
                words.update(dict.fromkeys([piece, *pairs]))
            elif len(piece) > 1 or piece.isdigit():
                words[piece] = None
    return list(words)[:64]


def fts_query(text: str | Sequence[str]) -> str | None:
    """Turn free text (or its words) into an FTS5 query: every word quoted (no syntax
    injection), OR-ed.

    BM25 then ranks by how many rare words match, which is what a user typing a question means.
    A word of Chinese, Japanese or Korean characters is the phrase of its characters (as
    :func:`spaced` indexes them; an index written before that was re-indexed as the file was
    opened, schema migration 17).
    """
    words = query_words(text) if isinstance(text, str) else list(text)
    if not words:
        return None
    return " OR ".join(f'"{spaced_phrase(w)}"' for w in words)


def pg_query(words: Sequence[str]) -> str | None:
    """The same words as a ``websearch_to_tsquery`` text for PostgreSQL's keyword indexes:
    OR-ed, a word of Chinese, Japanese or Korean characters quoted as the phrase of its
    characters (the index holds them spaced: ``harombe_spaced``, PG migration 13). A word is
    letters and digits only (:func:`query_words`), so the one syntax it can carry is a literal
    "or", which is what joins them anyway."""
    if not words:
        return None
    return " or ".join(f'"{spaced_phrase(w)}"' if UNSPACED.search(w) else w for w in words)


def pg_keyword_body(
    d: Dialect, words: Sequence[str], limit: int, scope: SearchScope | None
) -> Body[list[KeywordHit]]:
    """PostgreSQL's keyword search (``ops.keyword_search``): ``ts_rank`` over the weighted
    ``tsvector`` of each message and the turn it answers, inside ``scope``."""
    where, params = scope_sql(scope)
    sql = (
        f"SELECT {MESSAGE_COLUMNS}, ts_rank(m.fts, q) AS rank "
        f"FROM websearch_to_tsquery('{TS_CONFIG}', ?) AS q, messages m "
        "JOIN sessions s ON s.id = m.session_id "
        f"WHERE m.fts @@ q{where} ORDER BY rank DESC, m.id DESC LIMIT ?"
    )
    rows = (yield d.step(sql, [pg_query(words), *params, limit])).rows
    return scope_hits(rows, scope)


_TERMS_LOCK = threading.Lock()
_TERMS_DB: list[sqlite3.Connection] = []


def _terms_db() -> sqlite3.Connection:
    """The in-memory FTS5 table that tokenizes as the keyword index does (``_TERMS_LOCK``
    held)."""
    if not _TERMS_DB:
        db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        db.execute(f"CREATE VIRTUAL TABLE words USING fts5(word, tokenize = '{TOKENIZER}')")
        db.execute("CREATE VIRTUAL TABLE word_terms USING fts5vocab(words, 'instance')")
        _TERMS_DB.append(db)
    return _TERMS_DB[0]


def tokens(text: str, *, indexed: bool = False) -> tuple[str, ...]:
    """``text`` as the keyword index holds it: FTS5's own tokenizer, so case-folded, accents
    removed and porter-stemmed exactly as the messages were ("running" -> "run").
    ``indexed``: ``text`` is read from the index, its unspaced scripts spaced already."""
    if not text or type(text) is not str:  # not text: a blob written into a row by hand
        return ()
    with _TERMS_LOCK:
        db = _terms_db()
        db.execute("BEGIN")
        try:
            row = text if indexed else spaced(text)
            db.execute("INSERT INTO words (rowid, word) VALUES (1, ?)", (row,))
            rows = db.execute("SELECT term FROM word_terms ORDER BY offset").fetchall()
        finally:
            db.execute("ROLLBACK")
    return tuple(str(r[0]) for r in rows)


@functools.lru_cache(maxsize=16_384)
def index_terms(word: str) -> tuple[str, ...]:
    """The terms the keyword index holds for one query word (see :func:`tokens`)."""
    return tokens(word)


# the catch-up --------------------------------------------------------------------------------
def _max_message_id(c: sqlite3.Connection) -> int:
    return int(c.execute("SELECT MAX(id) FROM messages").fetchone()[0] or 0)


#: The keyword mark as SQL, trusted only if it is what harombe writes: digits, no higher than the
#: highest message id ever assigned (``sqlite_sequence``; ids are never reused). A mark edited
#: beyond it would silently hide every later message from keyword search, and one that is not
#: a number would fail every catch-up; either is NULL here, so the index is repaired instead.
_MARK_SQL = (
    "(SELECT CAST(value AS INTEGER) FROM harombe_meta WHERE key = 'keyword_index_upto' "
    "AND value <> '' AND value NOT GLOB '*[^0-9]*' AND CAST(value AS INTEGER) <= "
    "COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0))"
)
if KEYWORD_MARK not in _MARK_SQL:  # pragma: no cover - the two spellings must agree
    raise ImportError("_MARK_SQL does not read KEYWORD_MARK")


def indexed_upto(c: sqlite3.Connection) -> int | None:
    """The highest message id the keyword index covers: every message at or below it is
    indexed (a file indexed row by row, before the mark existed: its highest FTS row).
    None when the file's mark is not one harombe can have written (see ``_MARK_SQL``)."""
    mark, present, fts_top = c.execute(
        f"SELECT {_MARK_SQL}, EXISTS (SELECT 1 FROM harombe_meta WHERE key = ?), "
        "(SELECT MAX(rowid) FROM messages_fts)",
        (KEYWORD_MARK,),
    ).fetchone()
    if mark is not None:
        return int(mark)
    return None if present else int(fts_top or 0)


_SET_MARK = (
    "INSERT INTO harombe_meta (key, value) VALUES (?, ?) "
    "ON CONFLICT(key) DO UPDATE SET value = excluded.value"
)


def set_keyword_mark(c: sqlite3.Connection, upto: int) -> None:
    c.execute(_SET_MARK, (KEYWORD_MARK, str(upto)))


def catch_up(file: SQLiteFile, retries: int) -> int:
    """Index every message the keyword index lacks, in one transaction; returns how many.

    Costs one indexed lookup, and no lock, when nothing is new. A file open for reading only
    is not caught up: its searches score the unindexed messages themselves. A mark harombe
    cannot have written (edited by hand, copied from another file) is repaired: every message
    the index lacks is indexed and the mark set anew.
    """
    latest, mark = file.read(f"SELECT (SELECT MAX(id) FROM messages), {_MARK_SQL}")[0]
    if (mark is not None and mark >= (latest or 0)) or file.read_only:
        return 0

    def run(c: sqlite3.Connection) -> int:
        done = indexed_upto(c)
        if done is None:
            log.warning(
                "%s: the keyword index's mark (harombe_meta %s) was not one harombe writes; "
                "indexing every message the index lacks.",
                file.location,
                KEYWORD_MARK,
            )
            done = 0
        # Rows the index already holds above the mark are skipped (one empty rowid range when
        # the mark is right), so a mark set too low cannot fail every catch-up on a rowid
        # the index has.
        count = c.execute(
            "INSERT INTO messages_fts (rowid, content, context) SELECT m.id, "
            f"harombe_spaced(m.content), harombe_spaced({CONTEXT_SQL}) FROM messages m "
            "WHERE m.id > ? AND m.id NOT IN (SELECT rowid FROM messages_fts WHERE rowid > ?) "
            "ORDER BY m.id",
            (done, done),
        ).rowcount
        set_keyword_mark(c, max(done, _max_message_id(c)))
        return int(count)

    return file.write(run, retries)


#: The turn a message (alias ``m``) answers: the previous message of its session.
CONTEXT_SQL = (
    "COALESCE((SELECT p.content FROM messages p WHERE p.session_id = m.session_id "
    "AND p.id < m.id ORDER BY p.id DESC LIMIT 1), '')"
)


class KeywordIndexer:
    """Catches the keyword index up off every caller's path: one per file per process.

    :meth:`notify` (after a commit that added messages) hands a job to the process's
    background worker (:mod:`harombe_core.folding`, priority
    :data:`~harombe_core.folding.KEYWORDS`), which lingers :attr:`LINGER` seconds so a burst of
    writes becomes one batch and runs :func:`catch_up`, one transaction. In a child process
    after ``fork()`` the parent's jobs are the parent's: the first notify there hands over
    new ones. An in-memory database indexes on the notifying thread instead: its shared-cache
    connections lock whole tables, so a background writer would make readers fail rather
    than wait.
    """

    LINGER = 0.05

    def __init__(self, file: SQLiteFile, retries: int) -> None:
        self._file = file
        self._retries = retries
        self._inline = file.location == ":memory:"
        self._lock = threading.Lock()
        self._indexed = 0  # rows indexed since the last explicit index_now()
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._stopped = False
        self._jobs = SummaryFolder(self._step, linger=self.LINGER, priority=KEYWORDS)

    def _here(self) -> None:
        if self._pid != os.getpid():  # forked: the parent's jobs stay the parent's
            self._reset()

    def notify(self) -> None:
        """Messages were committed: have them indexed soon (at once for an in-memory file)."""
        if self._file.read_only:
            return
        if self._inline:
            self._run_once()
            return
        self._here()
        if not self._stopped:
            self._jobs.request(self._file.location, 0)

    def index_now(self) -> int:
        """Catch up on this thread; returns the rows indexed since the previous call in this
        process, by this call or by the background worker."""
        count = catch_up(self._file, self._retries)
        with self._lock:
            count += self._indexed
            self._indexed = 0
        return count

    def stop(self) -> None:
        """Hand no more jobs to the background, and wait for the one in hand (the file is
        closing; its final catch-up follows)."""
        self._here()
        self._stopped = True
        self._jobs.close()
        with _INDEXERS_LOCK:  # it holds its file: forgotten here, or neither is ever freed
            if _INDEXERS.get(self._file) is self:
                del _INDEXERS[self._file]

    def _step(self, _location: str, _until: int) -> bool:
        self._run_once()
        return False  # one transaction indexed everything committed before it

    def _run_once(self) -> None:
        try:
            count = catch_up(self._file, self._retries)
        except HarombeError as exc:  # committed messages stay searchable through the tail
            log.warning("%s: keyword indexing failed (retried later): %s", self._file.location, exc)
            return
        with self._lock:
            self._indexed += count


_INDEXERS: weakref.WeakKeyDictionary[SQLiteFile, KeywordIndexer] = weakref.WeakKeyDictionary()
_INDEXERS_LOCK = threading.Lock()


def keyword_indexer(file: SQLiteFile, retries: int) -> KeywordIndexer:
    """The one :class:`KeywordIndexer` of ``file`` in this process."""
    with _INDEXERS_LOCK:
        indexer = _INDEXERS.get(file)
        if indexer is None:
            indexer = _INDEXERS[file] = KeywordIndexer(file, retries)
        return indexer


def _reset_lock_in_child() -> None:
    global _INDEXERS_LOCK, _TERM_COUNTS_LOCK
    _INDEXERS_LOCK = threading.Lock()
    _TERM_COUNTS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_reset_lock_in_child)


# scoring the tail ----------------------------------------------------------------------------
@dataclass(slots=True)
class TermCounts:
    """Rows per index term, counted when the index had ``rows`` rows and the highest message
    id was ``upto``, at ``time.monotonic()`` ``at``; ``tokens`` is the index's total size."""

    rows: int = 0
    upto: int = -1
    at: float = -math.inf
    tokens: int = 0
    rows_of: dict[str, int] = field(default_factory=dict)

    def stale(self, upto: int) -> bool:
        """Whether to count again: the store grew by a tenth, lost rows, or a minute passed."""
        return (
            upto - self.upto > self.rows / 10 or upto < self.upto or time.monotonic() - self.at > 60
        )


def varint(data: bytes, at: int) -> tuple[int, int]:
    """One SQLite varint of ``data`` at ``at``: (value, next offset)."""
    value = 0
    for i in range(8):
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at + i + 1
    return (value << 8) | data[at + 8], at + 9


def _parse_totals(block: Any) -> tuple[int, int]:
    """(rows, tokens) from FTS5's averages record (``None`` or empty: an empty index)."""
    if not block:
        return 0, 0
    data = bytes(block)
    rows, at = varint(data, 0)
    total = 0
    while at < len(data):
        size, at = varint(data, at)
        total += size
    return rows, total


def phrase_count(doc: tuple[str, ...], phrase: tuple[str, ...]) -> int:
    n = len(phrase)
    if n == 0:
        return 0
    if n == 1:
        return doc.count(phrase[0])
    return sum(1 for i in range(len(doc) - n + 1) if doc[i : i + n] == phrase)


#: A tail message as the index would hold it: (its content's terms, its context's terms).
Split = tuple[tuple[str, ...], tuple[str, ...]]


def split_tail(docs: Sequence[tuple[str, str]]) -> list[Split]:
    """Each (content, context) pair as the keyword index would hold it."""
    return [(tokens(content), tokens(context)) for content, context in docs]


def tail_rows(split: Sequence[Split], phrase: tuple[str, ...]) -> int:
    """How many tail messages hold ``phrase`` in either column (its row count, once indexed)."""
    return sum(1 for a, b in split if phrase_count(a, phrase) or phrase_count(b, phrase))


def score_tail(split: Sequence[Split], words: Sequence[str], counts: TermCounts) -> list[float]:
    """FTS5's ``bm25(messages_fts, 1.0, 0.4)`` (as a positive score) of each tail message
    (see :func:`split_tail`), as if it were indexed: the index's row and token totals and
    each term's row count, plus the tail itself. A message matching no word scores 0."""
    phrases = [index_terms(w) for w in words]
    phrases = [p for p in phrases if p]
    if not split or not phrases:
        return [0.0] * len(split)
    rows = counts.rows + len(split)
    total = counts.tokens + sum(len(a) + len(b) for a, b in split)
    # Counts are cached between searches, so a term can seem to be in more rows than the
    # store now holds (rows deleted, or indexed since); no term is in more than all of them.
    hits = [
        min(min(counts.rows_of.get(t, 0) for t in phrase) + tail_rows(split, phrase), rows)
        for phrase in phrases
    ]
    freqs = [sparse([(phrase_count(a, p), phrase_count(b, p)) for p in phrases]) for a, b in split]
    return bm25(freqs, [len(a) + len(b) for a, b in split], hits, rows, total)


#: A row's instances of the query's phrases: ``(phrase index, in content, in context)`` for
#: each phrase it holds, by increasing phrase index.
Instances = list[tuple[int, int, int]]


def bm25(
    freqs: Sequence[Instances],
    lengths: Sequence[int],
    hits: Sequence[int],
    rows: int,
    total: int,
) -> list[float]:
    """FTS5's ``bm25(messages_fts, 1.0, 0.4)`` formula (fts5_aux.c), as a positive score, of
    rows whose statistics are given: ``freqs[row]`` the phrases' instances in the row
    (:data:`Instances`), ``lengths[row]`` the row's tokens, ``hits[phrase]`` the rows holding
    the phrase among ``rows`` rows of ``total`` tokens. A row matching no phrase scores 0."""
    average = (total / rows if rows else 1.0) or 1.0
    idf = [max(math.log((rows - n + 0.5) / (n + 0.5)), 1e-6) for n in hits]
    scores = []
    for row, length in zip(freqs, lengths, strict=True):
        score = 0.0
        norm = K1 * (1 - B + B * length / average)
        for i, content, context in row:
            # In FTS5's order of operations, so that a score equals its bm25() to the last
            # bit: each instance adds its column's weight, content's before context's, and
            # the idf multiplies the fraction.
            freq = 0.0
            for _ in range(content):
                freq += BM25_WEIGHTS[0]
            for _ in range(context):
                freq += BM25_WEIGHTS[1]
            if freq:
                score += idf[i] * ((freq * (K1 + 1)) / (freq + norm))
        scores.append(score)
    return scores


def sparse(counts: Sequence[tuple[int, int]]) -> Instances:
    return [(i, a, b) for i, (a, b) in enumerate(counts) if a or b]


# the search ----------------------------------------------------------------------------------
#: Common words (see :func:`_drop_common_words`): a word in more than this share of the rows,
#: and in more than ``COMMON_MIN_ROWS`` rows, is left out when the query has rarer ones.
_COMMON_SHARE = 0.05
COMMON_MIN_ROWS = 2_000
_KEEP_WHEN_ALL_COMMON = 2
#: Scopes of at most this many messages filter keyword matches by their listed ids.
_SMALL_SCOPE = 5_000
#: At most this many sessions' rowid spans are searched one by one (see :func:`search_body`):
#: each costs FTS5 one pass over every query word's row list, to weigh it for bm25.
_MAX_SPANS = 8
_BM25 = ", ".join(str(w) for w in BM25_WEIGHTS)
_VOCABULARY = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.messages_fts_rows "
    "USING fts5vocab(main, messages_fts, 'row')"
)

#: Term counts per database file (its path) in this process, see :func:`_word_rows`.
_TERM_COUNTS: dict[str, TermCounts] = {}
_TERM_COUNTS_LOCK = threading.Lock()
_FILES_REMEMBERED = 64
_WARNED_LONG_TAIL: set[str] = set()


def read_tail(scope: SearchScope | None) -> Body[tuple[str, int, int, list[Any]]]:
    """The file's path (\'\' in memory), the keyword index's mark, the highest message id, and
    the scope's messages above the mark (the tail, newest first, at most ``TAIL_LIMIT``;
    each row the message's columns and the turn it answers)."""
    where, params = scope_sql(scope)
    path, upto, newest = (
        yield Step(
            "SELECT (SELECT file FROM pragma_database_list WHERE name = 'main'), "
            f"COALESCE({_MARK_SQL}, (SELECT MAX(rowid) FROM messages_fts), 0), "
            "(SELECT MAX(id) FROM messages)",
        )
    ).rows[0]
    tail = (
        yield Step(
            f"SELECT {MESSAGE_COLUMNS}, {CONTEXT_SQL} FROM messages m "
            f"JOIN sessions s ON s.id = m.session_id WHERE m.id > ?{where} "
            "ORDER BY m.id DESC LIMIT ?",
            [int(upto), *params, TAIL_LIMIT],
        )
    ).rows
    return str(path or ""), int(upto), int(newest or 0), list(tail)


def search_body(
    words: Sequence[str],
    limit: int,
    scope: SearchScope | None,
    size: int | None,
    read: tuple[str, int, int, list[Any]] | None = None,
) -> Body[list[KeywordHit]]:
    """The SQLite body of :func:`~harombe_core.store.ops.keyword_search`: BM25 over each
    message and the turn it answers, scoped in the same query, best first (ties to the newer
    message). ``size`` is the scope's size (:func:`~harombe_core.store.ops.scope_size`).

    One read snapshot, never the write lock: the index as it is, plus the messages it does not
    hold yet (the tail, scored with the same BM25 by :func:`score_tail`), so a message is found
    as soon as its save returns; a tail found has the file's indexer catch up soon (its writer
    stopped before indexing it, or lags). Words found in a large share of the rows are left out
    when the query has rarer ones (:func:`_drop_common_words`), so the cost follows the rare
    words. ``read`` is :func:`read_tail`'s answer for ``scope`` when the caller has it, in this
    snapshot.
    """
    where, params = scope_sql(scope)
    id_range, range_params = _fts_id_range(scope)
    path, _, newest, tail = read if read is not None else (yield from read_tail(scope))
    split = split_tail([(r[3], r[-1]) for r in tail])
    kept = yield from _drop_common_words(words, split, path, newest)
    match = fts_query(kept)
    # The tail is scored with the index's counts read in this same snapshot, never cached
    # ones: a message then scores exactly as it will once indexed.
    counts = (yield from _exact_counts(kept)) if tail else TermCounts()
    indexed: list[Any] = []
    if scope is None or scope == SearchScope():
        # Unscoped, FTS5 ranks and cuts on its own (rank MATCH picks the function): the
        # messages table is only read for the rows returned.
        sql = (
            f"SELECT {MESSAGE_COLUMNS}, f.rank FROM (SELECT rowid, rank FROM "
            f"messages_fts WHERE messages_fts MATCH ? AND rank MATCH 'bm25({_BM25})' "
            "ORDER BY rank, rowid DESC LIMIT ?) f JOIN messages m ON m.id = f.rowid"
        )
        indexed = (yield Step(sql, [match, limit])).rows
    elif (
        size is not None
        and size <= _SMALL_SCOPE
        and (spans := (yield from _session_spans(scope))) is not None
    ):
        # A small scope in a few sessions: FTS5 reads only each session's rowid span, so a
        # long session outside the scope (the one excluded, or another user's between them)
        # is never scored.
        inner = " UNION ALL ".join(
            f"SELECT rowid, bm25(messages_fts, {_BM25}) AS rank FROM messages_fts "
            "WHERE messages_fts MATCH ? AND rowid BETWEEN ? AND ?"
            for _ in spans
        )
        sql = (
            f"SELECT {MESSAGE_COLUMNS}, f.rank FROM ({inner}) f "
            "JOIN messages m ON m.id = f.rowid JOIN sessions s ON s.id = m.session_id "
            f"WHERE 1 = 1{where} ORDER BY f.rank, f.rowid DESC LIMIT ?"
        )
        args = [value for low, high in spans for value in (match, low, high)]
        if spans:
            indexed = (yield Step(sql, [*args, *params, limit])).rows
    elif size is not None and size <= _SMALL_SCOPE:
        # A small scope's ids, listed once, filter the index's matches without a row lookup
        # each (the unary + keeps SQLite from asking FTS5 for each listed id). Thousands of
        # rows may match the words in a large store; a user's scope is a few of them: the
        # lookups, not BM25, were most of the cost.
        sql = (
            f"SELECT {MESSAGE_COLUMNS}, f.rank FROM (SELECT rowid, "
            f"bm25(messages_fts, {_BM25}) AS rank FROM messages_fts "
            f"WHERE messages_fts MATCH ?{id_range} AND +rowid IN (SELECT m.id FROM "
            f"messages m JOIN sessions s ON s.id = m.session_id WHERE 1 = 1{where}) "
            "ORDER BY rank, rowid DESC LIMIT ?) f JOIN messages m ON m.id = f.rowid "
            f"JOIN sessions s ON s.id = m.session_id WHERE 1 = 1{where}"
        )
        indexed = (yield Step(sql, [match, *range_params, *params, limit, *params])).rows
    else:
        sql = (
            f"SELECT {MESSAGE_COLUMNS}, bm25(messages_fts, {_BM25}) AS rank "
            "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
            "JOIN sessions s ON s.id = m.session_id "
            f"WHERE messages_fts MATCH ?{where}{id_range} ORDER BY rank, m.id DESC LIMIT ?"
        )
        indexed = (yield Step(sql, [match, *params, *range_params, limit])).rows
    hits = scope_hits(indexed, scope, -1.0)
    if tail:
        behind(path or "", len(tail))
        scores = score_tail(split, kept, counts)
        scored = [(*r[:-1], score) for r, score in zip(tail, scores, strict=True) if score > 0]
        hits += scope_hits(scored, scope)
    # Ties go to the newer message, here and in every cut above (``rowid DESC``), as in the
    # scoped search (:mod:`harombe_core.store.fts_scope`).
    hits.sort(key=lambda h: (-h.score, -(h.message.id or 0)))
    return hits[:limit]


def behind(path: str, unindexed: int) -> None:
    """A search found ``unindexed`` messages the index lacks in the file at ``path``: have the
    file's indexer in this process catch up (a writer that stopped before indexing, or one
    lagging; an in-memory file indexes as it is written), and say once when the tail is so
    long that only its newest part is scored."""
    if path:
        with _INDEXERS_LOCK:
            indexers = [i for f, i in _INDEXERS.items() if f.location == path]
        for indexer in indexers:
            indexer.notify()
    if unindexed == TAIL_LIMIT and path not in _WARNED_LONG_TAIL:
        _WARNED_LONG_TAIL.add(path)
        log.warning(
            "%s: more than %d messages are not in the keyword index yet (a read-only file, or "
            "its writer stopped before indexing them); keyword search scores only the newest "
            "%d of them. Open it once with write access to index them.",
            path or ":memory:",
            TAIL_LIMIT,
            TAIL_LIMIT,
        )


def _drop_common_words(
    words: Sequence[str], tail: Sequence[Split], path: str, newest: int
) -> Body[list[str]]:
    """``words`` without those found in a large share of the rows, if rarer ones remain.

    With ``ORDER BY rank LIMIT``, FTS5 scores every row that matches any of the OR-ed words
    (one document-size lookup each), so a single word found in a third of the rows makes the
    search cost a third of the store. A word is left out when it is in more than
    ``_COMMON_SHARE`` (5 %) of the indexed rows and more than ``COMMON_MIN_ROWS`` (2,000)
    rows, and the query has a rarer word. Its BM25 weight (idf at most ln(19) = 2.9, against
    about 9 for a word in a handful of rows) barely moves the order of the rows the rarer
    words find, and the rows only it would add mostly rank below those. Below 2,000 rows
    scoring all of a word's rows takes a few milliseconds, so small stores keep every word.
    When every word is that common, the ``_KEEP_WHEN_ALL_COMMON`` (2) rarest are kept, so a
    query never loses all its words. A word whose terms are not in the index is kept (it
    matches nothing, so it costs nothing), but it is not a rarer word that lets a common one
    go: "the garden yesterday" over a history where every turn names the garden would
    otherwise find nothing at all. The messages not indexed yet (``tail``) count as if they
    were.
    """
    if len(words) < 2:
        return list(words)
    counts, rows = yield from _word_rows(words, path, newest)
    if tail:
        rows += len(tail)
        for word in words:
            terms = index_terms(word)
            if terms:
                counts[word] += tail_rows(tail, terms)
    return rarer_words(words, counts, rows)


def rarer_words(words: Sequence[str], counts: dict[str, int], rows: int) -> list[str]:
    """``words`` without the common ones, given each word's rows ``counts`` among ``rows``
    rows (the rule is :func:`_drop_common_words`')."""
    threshold = max(rows * _COMMON_SHARE, COMMON_MIN_ROWS)
    kept = [w for w in words if counts[w] <= threshold]
    if not any(counts[w] for w in kept):  # what is left would match no row
        found = sorted((w for w in words if counts[w]), key=lambda w: counts[w])
        rarest = found[:_KEEP_WHEN_ALL_COMMON] or list(words)
        kept = [w for w in words if w in rarest or counts[w] == 0]
    return kept


def _word_rows(words: Sequence[str], path: str, newest: int) -> Body[tuple[dict[str, int], int]]:
    """Each word's number of indexed rows (its rarest term's; 0 if not in the index), and the
    number of rows in the index.

    Row counts come from an ``fts5vocab`` table over the index, looked up by each word's terms
    as FTS5's tokenizer makes them (:func:`index_terms`). For a file they are cached in this
    process (shared by every store on it) and recounted when the file has grown by a tenth or
    after a minute (``newest`` is its highest message id), so a search usually costs no lookup
    at all; a slightly stale count only shifts which borderline words are left out. An
    in-memory database (no path to know it by) counts afresh.
    """
    with _TERM_COUNTS_LOCK:
        counts = _TERM_COUNTS.get(path) if path else None
    if counts is None or counts.stale(newest):
        rows, tokens = yield from totals()
        counts = TermCounts(rows, newest, time.monotonic(), tokens)
        if path:
            with _TERM_COUNTS_LOCK:
                if len(_TERM_COUNTS) >= _FILES_REMEMBERED:
                    _TERM_COUNTS.clear()
                _TERM_COUNTS[path] = counts
    yield from _count_terms(counts, words)
    out = {w: min((counts.rows_of[t] for t in index_terms(w)), default=0) for w in words}
    return out, counts.rows


def totals() -> Body[tuple[int, int]]:
    """(rows, tokens over every column) of the keyword index: FTS5's own averages record,
    which is what its bm25() divides by, read in one lookup."""
    rows = (yield Step("SELECT block FROM messages_fts_data WHERE id = 1")).rows
    return _parse_totals(rows[0][0] if rows else None)


def _count_terms(counts: TermCounts, words: Sequence[str]) -> Body[None]:
    """Count the indexed rows of each term of ``words`` that ``counts`` lacks. The vocabulary
    table is in the temp schema: nothing is written to the file, any schema version works,
    and a read-only file can have it too."""
    missing = dict.fromkeys(t for w in words for t in index_terms(w) if t not in counts.rows_of)
    if not missing:
        return
    yield Step(_VOCABULARY)
    for term in missing:
        rows = (yield Step("SELECT doc FROM temp.messages_fts_rows WHERE term = ?", (term,))).rows
        counts.rows_of[term] = int(rows[0][0]) if rows else 0


def _exact_counts(words: Sequence[str]) -> Body[TermCounts]:
    """The keyword index's row and token totals and the row count of each term of ``words``,
    read in the caller's snapshot: what FTS5's bm25() would use now. Each count reads that
    term's list of rows, as FTS5's own scoring of the term does."""
    rows, tokens = yield from totals()
    counts = TermCounts(rows=rows, tokens=tokens)
    yield from _count_terms(counts, words)
    return counts


def span_rows(scope: SearchScope, cap: int) -> Body[list[tuple[int, int]] | None]:
    """(first id, last id) of up to ``cap + 1`` non-empty sessions of a user or session scope,
    sorted; None if the scope names neither."""
    if scope.session_id is not None:
        sql, params = "SELECT s.id FROM sessions s WHERE s.id = ?", [scope.session_id]
    elif scope.user_id is not None:
        sql, params = "SELECT s.id FROM sessions s WHERE s.user_id = ?", [scope.user_id]
    else:
        return None
    if scope.exclude_session_id is not None:
        sql += " AND s.id <> ?"
        params.append(scope.exclude_session_id)
    spans = (
        yield Step(
            "SELECT (SELECT MIN(id) FROM messages WHERE session_id = x.id), "
            "(SELECT MAX(id) FROM messages WHERE session_id = x.id) "
            f"FROM ({sql} AND s.message_count > 0 LIMIT {cap + 1}) x",
            params,
        )
    ).rows
    return sorted((int(a), int(b)) for a, b in spans if a is not None)


def _session_spans(scope: SearchScope) -> Body[list[tuple[int, int]] | None]:
    """The first and last message id of each session in a user or session scope, or None
    when searching them one by one does not pay: they are too many, or they overlap
    (sessions written at the same time interleave, and each span would be read again; the
    listed ids are then the cheaper filter). Two index seeks per session: the sessions'
    sizes do not matter."""
    found = yield from span_rows(scope, _MAX_SPANS)
    if found is None or len(found) > _MAX_SPANS:
        return None
    if any(later[0] < earlier[1] for earlier, later in itertools.pairwise(found)):
        return None
    return found


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
        sub = "FROM sessions s2 JOIN messages m2 ON m2.session_id = s2.id WHERE s2.user_id = ?"
        return (
            f" AND messages_fts.rowid BETWEEN (SELECT MIN(m2.id) {sub}) "
            f"AND (SELECT MAX(m2.id) {sub})",
            [scope.user_id, scope.user_id],
        )
    return "", []


def rebuild_body() -> Body[int]:
    """The SQLite body of :func:`~harombe_core.store.ops.rebuild_keyword_index`: every FTS
    row recreated from the messages table (idempotent); rows indexed.

    FTS5's ``rebuild`` comes first, on every keyword table of the file: it throws away each
    index's pages without reading them, so an index whose pages are damaged ("database disk
    image is malformed" on every search) is rebuilt too. Row-by-row deletes would read those
    pages and leave them as they were.
    """
    tables = (
        yield Step(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)",
            KEYWORD_TABLES,
        )
    ).rows
    for (table,) in tables:
        yield Step(f"INSERT INTO {table} ({table}) VALUES ('rebuild')")
    yield Step("DELETE FROM messages_fts")
    count = 0
    previous_session: str | None = None
    context = ""
    rows = (yield Step("SELECT id, session_id, content FROM messages ORDER BY session_id, id")).rows
    for mid, session_id, content in rows:
        if session_id != previous_session:
            previous_session, context = session_id, ""
        yield Step(
            "INSERT INTO messages_fts (rowid, content, context) VALUES (?, ?, ?)",
            (mid, sql_spaced(content), sql_spaced(context)),
        )
        context = content
        count += 1
    newest = (yield Step("SELECT MAX(id) FROM messages")).rows[0][0]
    yield Step(_SET_MARK, (KEYWORD_MARK, str(int(newest or 0))))
    return count
