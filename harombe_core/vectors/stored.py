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
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from harombe_core.store.base import SearchScope
from harombe_core.store.sqlite import SQLiteStore, _scope_sql
from harombe_core.vectors.base import FloatArray, VectorMatch

__all__ = ["StoredVectors"]


def _decode(blobs: Sequence[bytes], dimension: int) -> FloatArray:
    if not blobs:
        return np.zeros((0, dimension), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dimension)


class StoredVectors:
    """Reads and writes the float32 blobs of one :class:`SQLiteStore`."""

    def __init__(self, store: SQLiteStore, dimension: int) -> None:
        self.store = store
        self.dimension = dimension

    def write_and_mark(self, ids: Sequence[int], vectors: FloatArray) -> None:
        """Store vectors and set ``embedded = 1`` in one transaction (deleted rows are skipped)."""
        array = np.ascontiguousarray(vectors, dtype=np.float32)
        rows = [(int(i), array[n].tobytes(), int(i)) for n, i in enumerate(ids)]

        def write(c: sqlite3.Connection) -> None:
            c.executemany(
                "INSERT OR REPLACE INTO message_vectors (message_id, vector) "
                "SELECT ?, ? WHERE EXISTS (SELECT 1 FROM messages WHERE id = ?)",
                rows,
            )
            for start in range(0, len(rows), 500):
                chunk = [r[0] for r in rows[start : start + 500]]
                c.execute(
                    f"UPDATE messages SET embedded = 1 WHERE id IN ({','.join('?' * len(chunk))})",
                    chunk,
                )

        if rows:
            self.store._write(write)

    def scope_size(self, scope: SearchScope) -> int | None:
        """Messages a session or user scope can hold (an upper bound); None if unscoped."""
        if scope.session_id is not None:
            rows = self.store._read(
                "SELECT message_count FROM sessions WHERE id = ?", (scope.session_id,)
            )
            return int(rows[0][0]) if rows else 0
        if scope.user_id is not None:
            rows = self.store._read(
                "SELECT COALESCE(SUM(message_count), 0) FROM sessions WHERE user_id = ?",
                (scope.user_id,),
            )
            return int(rows[0][0])
        return None

    def exact_search(self, query: FloatArray, k: int, scope: SearchScope) -> list[VectorMatch]:
        """Exact cosine top-k over every stored vector inside ``scope``."""
        where, params = _scope_sql(scope)
        rows = self.store._read(
            "SELECT v.message_id, v.vector FROM messages m "
            "JOIN sessions s ON s.id = m.session_id "
            f"JOIN message_vectors v ON v.message_id = m.id WHERE 1 = 1{where}",
            params,
        )
        if not rows or k <= 0:
            return []
        ids = [r[0] for r in rows]
        matrix = _decode([r[1] for r in rows], self.dimension)
        sims = matrix @ np.asarray(query, dtype=np.float32)
        if len(ids) > k:
            top = np.argpartition(-sims, k - 1)[:k]
            order = top[np.argsort(-sims[top])]
        else:
            order = np.argsort(-sims)
        return [VectorMatch(int(ids[i]), float(sims[i])) for i in order]

    def get(self, ids: Sequence[int]) -> dict[int, FloatArray]:
        wanted = [int(i) for i in ids]
        out: dict[int, FloatArray] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            for mid, blob in self.store._read(
                "SELECT message_id, vector FROM message_vectors WHERE message_id IN "
                f"({','.join('?' * len(chunk))})",
                chunk,
            ):
                out[int(mid)] = np.frombuffer(blob, dtype=np.float32)
        return out

    def count(self) -> int:
        return int(self.store._read("SELECT COUNT(*) FROM message_vectors")[0][0])

    def iter_with_metadata(
        self, batch_size: int = 1000
    ) -> Iterator[tuple[list[int], FloatArray, list[dict[str, Any]]]]:
        """Every stored vector with the metadata the index keeps, in id order, in batches."""
        after = 0
        while True:
            rows = self.store._read(
                "SELECT m.id, v.vector, m.session_id, s.user_id, m.role, m.created_at "
                "FROM message_vectors v JOIN messages m ON m.id = v.message_id "
                "JOIN sessions s ON s.id = m.session_id WHERE m.id > ? ORDER BY m.id LIMIT ?",
                (after, batch_size),
            )
            if not rows:
                return
            ids = [int(r[0]) for r in rows]
            metas = [
                index_metadata(int(r[0]), r[2], r[3], r[4], int(r[5])) for r in rows
            ]
            yield ids, _decode([r[1] for r in rows], self.dimension), metas
            after = ids[-1]

    def clear(self) -> None:
        """Drop every stored vector and mark every message as not embedded."""

        def clear(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM message_vectors")
            c.execute("UPDATE messages SET embedded = 0 WHERE embedded != 0")

        self.store._write(clear)

    def unmark_missing(self) -> int:
        """Messages flagged embedded whose vector is not here go back to pending."""
        return int(
            self.store._write(
                lambda c: c.execute(
                    "UPDATE messages SET embedded = 0 WHERE embedded = 1 AND id NOT IN "
                    "(SELECT message_id FROM message_vectors)"
                ).rowcount
            )
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
