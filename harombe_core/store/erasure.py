"""Deletion that leaves nothing to find: what a delete does besides removing the rows.

Deleting a row is not enough to make its text gone:

* **Neighbours.** Each message's keyword entry (FTS5 on SQLite, the ``fts`` tsvector on
  PostgreSQL) and its embedding hold the turn it answers, the message before it. Deleting one
  message would leave its words findable, at full score, through the next one's entry. So the
  transaction that deletes messages also re-indexes each surviving successor with its new
  previous turn (:func:`relink_successors`), drops its vector (the embedder makes a new one
  from the new context) and drops a session summary that covered a deleted message.
* **Pages.** SQLite marks deleted rows free but keeps their bytes, and FTS5 keeps deleted
  entries in its older segments until they are merged. Every connection sets
  ``PRAGMA secure_delete = ON`` (whatever the build's default), so freed b-tree space is
  zeroed as it is freed; what FTS5 holds is merged away by :func:`compact_keywords` when the
  file's last opener closes, followed by a WAL checkpoint that truncates the log. FTS5's own
  ``secure-delete`` option (SQLite 3.44+) is not used: it upgrades the index's file format, and
  the file could no longer be opened by the SQLite of many Python builds (3.40 here).
* **Derived indexes elsewhere.** A vector index outside the database (Chroma) keeps deleted
  vectors and their metadata in its files (its log and its HNSW segments). On SQLite each
  deleting transaction records the erasure it owes in ``harombe_meta`` (:data:`ERASED_KEYWORDS`,
  :data:`ERASED_VECTORS`; a trigger does it for sessions deleted by any code), so the work is
  owed until it is done, even if the process is killed or the call cancelled after the commit:
  the keyword index is compacted at the file's last close, and the vector index's owner empties
  it and erases its files when it closes (:mod:`harombe_core.vectors.erase`).
"""

from __future__ import annotations

import bisect
import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any

from harombe_core.store.runner import Body, Dialect
from harombe_core.store.schema import TS_CONFIG
from harombe_core.store.unspaced import sql_spaced

__all__ = [
    "ERASED_KEYWORDS",
    "ERASED_VECTORS",
    "KEYWORD_TABLES",
    "compact_keywords",
    "mark_erased",
    "merge_keywords",
    "owed",
    "relink_successors",
    "settle",
]

#: harombe_meta keys set by a deleting transaction: the keyword index still holds deleted text
#: in its pages (SQLite), the vector index outside the database still holds deleted vectors.
ERASED_KEYWORDS = "erased_keywords_pending"
ERASED_VECTORS = "erased_vectors_pending"

#: The keyword vector of a message on PostgreSQL, from its own content column and one ``?``
#: (its new previous turn); see ``schema.TSVECTOR_SQL``.
_PG_RELINK = (
    "UPDATE messages SET context = ?, fts = setweight(to_tsvector("
    f"'{TS_CONFIG}', harombe_spaced(content)), 'A') || "
    f"setweight(to_tsvector('{TS_CONFIG}', harombe_spaced(?)), 'B') WHERE id = ?"
)


#: The FTS5 tables compacted after a deletion, where the file has them: the messages' keyword
#: index, user memory's (facts) and the session summaries'.
KEYWORD_TABLES = ("messages_fts", "facts_fts", "sessions_fts")

#: The value of a key once its erasure is done.
DONE = "0"


def mark_erased(d: Dialect) -> Body[None]:
    """Record, in the deleting transaction, that the derived indexes owe an erasure.

    The value is new each time, so whoever does the erasure clears only the debt it saw
    (:func:`settle`): a deletion committed meanwhile stays owed."""
    if d.name != "sqlite":  # the debt is paid on SQLite (FTS5 pages, a Chroma folder beside)
        return
    token = uuid.uuid4().hex
    for key in (ERASED_KEYWORDS, ERASED_VECTORS):
        yield d.step(
            "INSERT INTO harombe_meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, token),
        )


def relink_successors(d: Dialect, session_id: str, removed: Sequence[int]) -> Body[None]:
    """After ``removed`` (ids of this session) were deleted in this transaction: re-index the
    message that now follows each of them without the deleted text, and drop what was derived
    from it (its vector; a session summary that covered a deleted message)."""
    if not removed:
        return
    low, high = min(removed), max(removed)
    # The messages left from the one before the first deleted to the one after the last (one
    # read, however many were deleted): each deleted message's successor is among them, and
    # the turn it now answers is the one just before it in this list.
    rows = (
        yield d.step(
            "SELECT id, content FROM messages WHERE session_id = ? "
            "AND id >= COALESCE((SELECT MAX(id) FROM messages WHERE session_id = ? AND id < ?), ?) "
            "AND id <= COALESCE((SELECT MIN(id) FROM messages WHERE session_id = ? AND id > ?), ?) "
            "ORDER BY id",
            (session_id, session_id, low, low, session_id, high, high),
        )
    ).rows
    gone = sorted(set(removed))
    successors: dict[int, tuple[str, str]] = {}  # id -> (content, its new previous turn)
    before: tuple[int, str] = (-1, "")
    for mid, content in rows:
        first_gone = bisect.bisect_right(gone, before[0])
        if first_gone < len(gone) and gone[first_gone] < mid:  # a deleted one was between
            successors[int(mid)] = (str(content), before[1])
        before = (int(mid), str(content))
    for nid, (content, context) in successors.items():
        if d.name == "postgres":
            yield d.step(_PG_RELINK, (context, context, nid))
        else:
            held = (yield d.step("SELECT rowid FROM messages_fts WHERE rowid = ?", (nid,))).rows
            if held:  # not yet indexed: the catch-up indexes it with its context as it is then
                yield d.step("DELETE FROM messages_fts WHERE rowid = ?", (nid,))
                yield d.step(
                    "INSERT INTO messages_fts (rowid, content, context) VALUES (?, ?, ?)",
                    (nid, sql_spaced(content), sql_spaced(context)),
                )
    yield from _drop_vectors(d, sorted(successors))
    until = (yield d.step("SELECT summary_until_id FROM sessions WHERE id = ?", (session_id,))).rows
    if until and until[0][0] is not None and min(removed) <= int(until[0][0]):
        yield d.step(
            "UPDATE sessions SET summary = NULL, summary_json = NULL, summary_until_id = NULL "
            "WHERE id = ?",
            (session_id,),
        )


def _drop_vectors(d: Dialect, ids: list[int]) -> Body[None]:
    """Forget these messages' vectors, so the embedder makes new ones (their context changed)."""
    if not ids:
        return
    if d.name == "postgres":
        table = (yield d.step("SELECT to_regclass('message_vectors') IS NOT NULL")).rows
        if not table[0][0]:
            return
    marks = d.marks(len(ids))
    yield d.step(f"DELETE FROM message_vectors WHERE message_id IN ({marks})", ids)
    yield d.step(f"UPDATE messages SET embedded = FALSE WHERE id IN ({marks})", ids)


def owed(c: Any, key: str) -> str | None:
    """The debt recorded under ``key`` (:data:`ERASED_KEYWORDS` or :data:`ERASED_VECTORS`),
    or None when nothing is owed."""
    row = c.execute("SELECT value FROM harombe_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None or row[0] == DONE else str(row[0])


def settle(c: Any, key: str, token: str) -> None:
    """The debt ``token`` under ``key`` is paid (a later deletion's stays owed)."""
    c.execute("UPDATE harombe_meta SET value = ? WHERE key = ? AND value = ?", (DONE, key, token))


def compact_keywords(c: sqlite3.Connection) -> bool:
    """Merge FTS5's segments into one, which drops every deleted entry from the file's pages
    (freed pages are zeroed: ``secure_delete``), and clear the debt; True if there was one.

    Costs one pass over the keyword index, so it runs only after a deletion, at close."""
    token = owed(c, ERASED_KEYWORDS)
    if token is None:
        return False
    merge_keywords(c)
    settle(c, ERASED_KEYWORDS, token)
    return True


def merge_keywords(c: sqlite3.Connection) -> None:
    """Merge each FTS5 index's segments into one (deleted entries are dropped); the debt is
    left to the caller, who settles it once the WAL is truncated too."""
    names = ", ".join(f"'{name}'" for name in KEYWORD_TABLES)
    for (table,) in c.execute(
        f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({names})"
    ).fetchall():
        c.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")  # a name of ours
