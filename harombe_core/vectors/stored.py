"""Embeddings kept in SQLite beside their messages (the ``message_vectors`` table).

Why a second copy of every vector, when Chroma already has one:

* SQLite is the truth and the index is derived: with the vectors in the database, ``harombe
  reindex`` rebuilds Chroma without running the model again, and a lost index directory costs
  a re-insert, not a re-embed.
* Most searches are scoped to one session or one user, a few hundred or thousand rows. An exact
  dot product over those rows, read through the indexes SQLite already has, is both faster than
  a filtered HNSW query and exact (HNSW with a selective filter loses recall).
* The vector and the ``embedded`` flag are written in one transaction, so a crash can never
  leave a message marked as embedded without its vector.

What ``messages.embedded`` means on SQLite: ``1`` when the message's vector is stored here AND
the vector index holds it with its current owner; ``0`` otherwise. A message with ``embedded
= 0`` and a stored vector is on the *tail*: searchable exactly from here, waiting to be copied
into the index by the process that owns it. The flag is only ever set after the index accepted
the vector, and only if the session's owner is still the one the index copy carries (a compare
and set), so after any crash a ``1`` is true unless the index itself lost data, which the
owner's check at open finds (see :mod:`harombe_core.vectors.indexer`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np

from harombe_core.store.base import OnCorrupt, SearchScope
from harombe_core.store.rows import corrupt_row, readable, scope_sql
from harombe_core.store.sqlite import SQLiteStore
from harombe_core.vectors.base import FloatArray, VectorMatch

__all__ = ["StoredVectors", "decode_vectors"]


def decode_vectors(
    rows: Sequence[Sequence[Any]], dimension: int, on_corrupt: OnCorrupt = None
) -> tuple[list[int], FloatArray]:
    """The ids and vectors of ``(message_id, vector)`` rows, the vectors as one matrix.

    A blob of another length (the row was edited outside harombe, or written by another
    model without the model change being recorded) raises CorruptRowError naming it, with the
    rebuild that repairs it, instead of numpy's "buffer size must be a multiple of element
    size"; or, with ``on_corrupt``, is given to it and left out (``rows.readable``).
    """
    size = dimension * 4

    def read(row: Sequence[Any]) -> Sequence[Any]:
        if type(row[1]) is not bytes or len(row[1]) != size:
            held = f"{len(row[1])} bytes" if type(row[1]) is bytes else type(row[1]).__name__
            raise corrupt_row(
                "message_vectors",
                {"message_id": row[0]},
                "vector",
                f"holds {held}, not {dimension} float32 values. The vectors are derived: "
                "`harombe reindex --reembed` (MemoryManager.reindex(reembed=True)) writes them "
                "anew",
            )
        return row

    kept = readable(rows, read, on_corrupt)
    if not kept:
        return [], np.zeros((0, dimension), dtype=np.float32)
    joined = b"".join(r[1] for r in kept)
    ids = [int(r[0]) for r in kept]
    return ids, np.frombuffer(joined, dtype=np.float32).reshape(len(kept), dimension)


class StoredVectors:
    """Reads and writes the float32 blobs of one :class:`SQLiteStore`."""

    def __init__(self, store: SQLiteStore, dimension: int) -> None:
        self.store = store
        self.dimension = dimension

    def write(
        self, ids: Sequence[int], vectors: FloatArray, indexed_users: Sequence[Any] | None
    ) -> int:
        """Store vectors in one transaction (rows deleted meanwhile are skipped); returns how
        many were stored, so a caller can tell that some messages were deleted meanwhile.

        ``indexed_users`` (the owner each vector carries in the index, or None when the index
        did not take them) marks the rows as indexed, see :meth:`mark_indexed`.
        """
        array = np.ascontiguousarray(vectors, dtype=np.float32)
        rows = [(int(i), array[n].tobytes(), int(i)) for n, i in enumerate(ids)]

        def write(c: sqlite3.Connection) -> int:
            stored = c.executemany(
                "INSERT OR REPLACE INTO message_vectors (message_id, vector) "
                "SELECT ?, ? WHERE EXISTS (SELECT 1 FROM messages WHERE id = ?)",
                rows,
            ).rowcount
            if indexed_users is not None:
                _mark_indexed(c, ids, indexed_users)
            return int(stored)

        if not rows:
            return 0
        return int(self.store.transaction(write, adds_messages=False))

    def mark_indexed(self, ids: Sequence[int], users: Sequence[Any]) -> None:
        """Flag rows as held by the index, each only if its session's owner is still
        ``users[n]`` (a session moved meanwhile stays on the tail and is copied again)."""
        if len(ids):
            self.store.transaction(lambda c: _mark_indexed(c, ids, users), adds_messages=False)

    def unindex(self, ids: Sequence[int]) -> None:
        """These rows are not (or no longer) in the index: back to the tail."""
        wanted = [int(i) for i in ids]

        def unmark(c: sqlite3.Connection) -> None:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                c.execute(
                    "UPDATE messages SET embedded = 0 WHERE embedded != 0 AND id IN "
                    f"({','.join('?' * len(chunk))})",
                    chunk,
                )

        if wanted:
            self.store.transaction(unmark, adds_messages=False)

    def unindex_all(self) -> int:
        """Every row back to the tail (before the index is cleared or rebuilt)."""
        return int(
            self.store.transaction(
                lambda c: c.execute("UPDATE messages SET embedded = 0 WHERE embedded").rowcount,
                adds_messages=False,
            )
        )

    def indexed_count(self) -> int:
        """Rows flagged as held by the index (cheap: two index counts)."""
        rows = self.store.query(
            "SELECT (SELECT COUNT(*) FROM messages) - "
            "(SELECT COUNT(*) FROM messages WHERE embedded = 0)"
        )
        return int(rows[0][0])

    def indexed_ids(self) -> set[int]:
        return {int(r[0]) for r in self.store.query("SELECT id FROM messages WHERE embedded != 0")}

    def existing(self, ids: Sequence[int]) -> set[int]:
        """Which of these message ids still exist."""
        return self._which(ids, "")

    def without_vectors(self, ids: Sequence[int]) -> set[int]:
        """Which of these messages still exist with no stored vector (a batch read a while
        ago, less what another process embedded or a delete removed since)."""
        return self._which(
            ids, " AND NOT EXISTS (SELECT 1 FROM message_vectors v WHERE v.message_id = m.id)"
        )

    def _which(self, ids: Sequence[int], condition: str) -> set[int]:
        wanted = [int(i) for i in ids]
        found: set[int] = set()
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            found.update(
                int(r[0])
                for r in self.store.query(
                    f"SELECT m.id FROM messages m WHERE m.id IN ({','.join('?' * len(chunk))})"
                    + condition,
                    chunk,
                )
            )
        return found

    def tail(
        self, after: int, limit: int, on_corrupt: OnCorrupt = None
    ) -> tuple[list[int], FloatArray, list[dict[str, Any]], int]:
        """Up to ``limit`` stored vectors the index does not hold, ids above ``after``, with
        the metadata the index keeps (read now, so a moved session carries its new owner),
        and the last id read (``after`` when none was), to read on from past a vector
        ``on_corrupt`` was given (``decode_vectors``)."""
        rows = self.store.query(
            "SELECT m.id, v.vector, m.session_id, s.user_id, m.role, m.created_at "
            "FROM messages m JOIN message_vectors v ON v.message_id = m.id "
            "JOIN sessions s ON s.id = m.session_id "
            "WHERE m.embedded = 0 AND m.id > ? ORDER BY m.id LIMIT ?",
            (after, limit),
        )
        ids, vectors = decode_vectors(rows, self.dimension, on_corrupt)
        kept = set(ids)
        metas = [
            index_metadata(int(r[0]), r[2], r[3], r[4], int(r[5])) for r in rows if r[0] in kept
        ]
        return ids, vectors, metas, int(rows[-1][0]) if rows else after

    def settle_tail(self) -> int:
        """Where the stored vectors are the index (``vector_store="database"``), a stored
        vector is an indexed one: flag the tail (rows stored by a process that used Chroma, or
        put back by a session's move) so it stays empty. Reads first, so a store with nothing
        to settle, or a read-only one, is never written."""
        if self.store.read_only or not self.store.query(_TAIL + " LIMIT 1"):
            return 0

        def settle(c: sqlite3.Connection) -> int:
            done = c.execute(f"UPDATE messages SET embedded = 1 WHERE id IN ({_TAIL})")
            return int(done.rowcount)

        return int(self.store.transaction(settle, adds_messages=False))

    def tail_count(self) -> int:
        """Stored vectors the index does not hold yet (the rows :meth:`tail` pages through)."""
        rows = self.store.query(
            "SELECT COUNT(*) FROM messages m JOIN message_vectors v ON v.message_id = m.id "
            "WHERE m.embedded = 0"
        )
        return int(rows[0][0])

    def exact_search(
        self, query: FloatArray, k: int, scope: SearchScope | None, *, tail_only: bool = False
    ) -> list[VectorMatch]:
        """Exact cosine top-k over every stored vector inside ``scope`` (all when None), or
        over the tail only (the vectors the index does not hold yet)."""
        if k <= 0:
            return []
        where, params = scope_sql(scope)
        join = "JOIN"
        if tail_only:
            # CROSS JOIN keeps messages the outer loop, read through the small partial index
            # of unflagged rows, rather than every message of a large user's sessions.
            where, join = f" AND m.embedded = 0{where}", "CROSS JOIN"
        rows = self.store.query(
            f"SELECT v.message_id, v.vector FROM messages m {join} sessions s "
            "ON s.id = m.session_id "
            f"JOIN message_vectors v ON v.message_id = m.id WHERE 1 = 1{where}",
            params,
        )
        on_corrupt = None if scope is None else scope.on_corrupt
        ids, matrix = decode_vectors(rows, self.dimension, on_corrupt)
        if not ids:
            return []
        sims = matrix @ np.asarray(query, dtype=np.float32)
        if len(ids) > k:
            top = np.argpartition(-sims, k - 1)[:k]
            order = top[np.argsort(-sims[top])]
        else:
            order = np.argsort(-sims)
        return [VectorMatch(int(ids[i]), float(sims[i])) for i in order]

    def get(self, ids: Sequence[int], on_corrupt: OnCorrupt = None) -> dict[int, FloatArray]:
        """The stored vectors of these messages (those that have one), read as
        :func:`decode_vectors` reads them."""
        wanted = [int(i) for i in ids]
        out: dict[int, FloatArray] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            rows = self.store.query(
                "SELECT message_id, vector FROM message_vectors WHERE message_id IN "
                f"({','.join('?' * len(chunk))})",
                chunk,
            )
            read, matrix = decode_vectors(rows, self.dimension, on_corrupt)
            out.update(zip(read, matrix, strict=True))
        return out

    def count(self) -> int:
        return int(self.store.query("SELECT COUNT(*) FROM message_vectors")[0][0])

    def clear(self) -> None:
        """Drop every stored vector and mark every message as not embedded."""

        def clear(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM message_vectors")
            c.execute("UPDATE messages SET embedded = 0 WHERE embedded != 0")

        self.store.transaction(clear, adds_messages=False)

    def unmark_missing(self) -> int:
        """Messages flagged embedded whose vector is not here go back to pending.

        Reads first, so a store that has nothing to repair is never written (it may be
        read-only).
        """
        if not self.store.query(_FLAGGED_WITHOUT_VECTOR + " LIMIT 1"):
            return 0
        return int(
            self.store.transaction(
                lambda c: (
                    c.execute(
                        "UPDATE messages SET embedded = 0 WHERE embedded = 1 AND NOT EXISTS "
                        "(SELECT 1 FROM message_vectors v WHERE v.message_id = messages.id)"
                    ).rowcount
                ),
                adds_messages=False,
            )
        )


_TAIL = (
    "SELECT m.id FROM messages m WHERE m.embedded = 0 AND EXISTS "
    "(SELECT 1 FROM message_vectors v WHERE v.message_id = m.id)"
)
_FLAGGED_WITHOUT_VECTOR = (
    "SELECT id FROM messages WHERE embedded = 1 AND NOT EXISTS "
    "(SELECT 1 FROM message_vectors v WHERE v.message_id = messages.id)"
)


def _mark_indexed(c: sqlite3.Connection, ids: Sequence[int], users: Sequence[Any]) -> None:
    c.executemany(
        "UPDATE messages SET embedded = 1 WHERE id = ? AND embedded = 0 "
        "AND EXISTS (SELECT 1 FROM message_vectors v WHERE v.message_id = messages.id) "
        "AND (SELECT s.user_id FROM sessions s WHERE s.id = messages.session_id) IS ?",
        [(int(i), u) for i, u in zip(ids, users, strict=True)],
    )


def index_metadata(
    message_id: int, session_id: str, user_id: str | None, role: str, created_at: int
) -> dict[str, Any]:
    """The metadata stored with each vector in the index (``None`` values are left out)."""
    meta: dict[str, Any] = {
        "message_id": message_id,
        "session_id": session_id,
        "role": role,
        "created_at": created_at,
    }
    if user_id is not None:
        meta["user_id"] = user_id
    return meta
