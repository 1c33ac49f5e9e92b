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
  a message is found the moment its save returns, and ranks as it will once indexed.
"""

from __future__ import annotations

import functools
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
from harombe_core.store.sqlite_file import SQLiteFile

__all__ = [
    "KEYWORD_MARK",
    "TAIL_LIMIT",
    "KeywordIndexer",
    "TermCounts",
    "catch_up",
    "fts_query",
    "index_terms",
    "index_totals",
    "keyword_indexer",
    "query_words",
    "score_tail",
    "split_tail",
    "tail_rows",
]

log = logging.getLogger(__name__)

KEYWORD_MARK = "keyword_index_upto"
#: BM25 column weights: the turn a message answers counts 0.4 against the message itself.
BM25_WEIGHTS = (1.0, 0.4)
#: FTS5's bm25() constants (fts5_aux.c).
_K1, _B = 1.2, 0.75
#: The most unindexed messages a search scores itself (the newest ones). The tail is longer
#: only when no writer indexes it (a read-only file, a crashed writer): it is then logged once.
TAIL_LIMIT = 5_000

_WORD = re.compile(r"\w+", re.UNICODE)

#: The keyword index's tokenizer (``messages_fts``, migration 1); query words go through it too.
TOKENIZER = "porter unicode61 remove_diacritics 2"


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


def tokens(text: str) -> tuple[str, ...]:
    """``text`` as the keyword index holds it: FTS5's own tokenizer, so case-folded, accents
    removed and porter-stemmed exactly as the messages were ("running" -> "run")."""
    if not text:
        return ()
    with _TERMS_LOCK:
        if not _TERMS_DB:
            db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            db.execute(f"CREATE VIRTUAL TABLE words USING fts5(word, tokenize = '{TOKENIZER}')")
            db.execute("CREATE VIRTUAL TABLE word_terms USING fts5vocab(words, 'instance')")
            _TERMS_DB.append(db)
        db = _TERMS_DB[0]
        db.execute("BEGIN")
        try:
            db.execute("INSERT INTO words (rowid, word) VALUES (1, ?)", (text,))
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


def indexed_upto(c: sqlite3.Connection) -> int:
    """The highest message id the keyword index covers: every message at or below it is
    indexed (a file indexed row by row, before the mark existed: its highest FTS row)."""
    row = c.execute("SELECT value FROM harombe_meta WHERE key = ?", (KEYWORD_MARK,)).fetchone()
    if row is not None:
        return int(row[0])
    return int(c.execute("SELECT MAX(rowid) FROM messages_fts").fetchone()[0] or 0)


def set_keyword_mark(c: sqlite3.Connection, upto: int) -> None:
    c.execute(
        "INSERT INTO harombe_meta (key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (KEYWORD_MARK, str(upto)),
    )


def catch_up(file: SQLiteFile, retries: int) -> int:
    """Index every message the keyword index lacks, in one transaction; returns how many.

    Costs one indexed lookup, and no lock, when nothing is new. A file open for reading only
    is not caught up: its searches score the unindexed messages themselves.
    """
    latest = file.read("SELECT MAX(id) FROM messages")[0][0] or 0
    mark = file.read("SELECT value FROM harombe_meta WHERE key = ?", (KEYWORD_MARK,))
    if (mark and int(mark[0][0]) >= latest) or file.read_only:
        return 0

    def run(c: sqlite3.Connection) -> int:
        done = indexed_upto(c)
        count = c.execute(
            "INSERT INTO messages_fts (rowid, content, context) "
            f"SELECT m.id, m.content, {CONTEXT_SQL} FROM messages m WHERE m.id > ? ORDER BY m.id",
            (done,),
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
    global _INDEXERS_LOCK
    _INDEXERS_LOCK = threading.Lock()


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


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """One SQLite varint of ``data`` at ``at``: (value, next offset)."""
    value = 0
    for i in range(8):
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at + i + 1
    return (value << 8) | data[at + 8], at + 9


def index_totals(c: Any) -> tuple[int, int]:
    """(rows, tokens over every column) of the keyword index: FTS5's own averages record,
    which is what its bm25() divides by, read in one lookup."""
    row = c.execute("SELECT block FROM messages_fts_data WHERE id = 1").fetchone()
    if row is None or not row[0]:
        return 0, 0
    data = bytes(row[0])
    rows, at = _varint(data, 0)
    total = 0
    while at < len(data):
        size, at = _varint(data, at)
        total += size
    return rows, total


def _phrase_count(doc: tuple[str, ...], phrase: tuple[str, ...]) -> int:
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
    return sum(1 for a, b in split if _phrase_count(a, phrase) or _phrase_count(b, phrase))


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
    average = total / rows if rows else 1.0
    idf: list[float] = []
    for phrase in phrases:
        hits = min(counts.rows_of.get(t, 0) for t in phrase) + tail_rows(split, phrase)
        # Counts are cached between searches, so a term can seem to be in more rows than the
        # store now holds (rows deleted, or indexed since); no term is in more than all of them.
        hits = min(hits, rows)
        idf.append(max(math.log((rows - hits + 0.5) / (hits + 0.5)), 1e-6))
    scores = []
    for content, context in split:
        length = len(content) + len(context)
        score = 0.0
        for phrase, weight in zip(phrases, idf, strict=True):
            freq = BM25_WEIGHTS[0] * _phrase_count(content, phrase) + BM25_WEIGHTS[
                1
            ] * _phrase_count(context, phrase)
            if freq:
                score += (
                    weight
                    * (freq * (_K1 + 1))
                    / (freq + _K1 * (1 - _B + _B * length / (average or 1.0)))
                )
        scores.append(score)
    return scores
