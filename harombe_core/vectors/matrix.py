"""An in-process matrix of every vector kept in SQLite, for exact searches across users.

With the in-database vector index (``vector_store="database"``, the default for SQLite) a
search scoped to a user or a session reads only that scope's vectors through SQLite's indexes.
A search across every user cannot: reading a million 1.5 KB blobs takes seconds. This matrix
reads them once, on the first such search, and then only what was written since, so an
unscoped search costs one matrix product over float32 rows (about 1.5 KB of memory per
message) plus a few small queries. It is still exact: no approximate index, no lost recall.

Keeping in step without a write log: message ids only grow (``AUTOINCREMENT``), and a vector
is only ever written for a message that had none. Before each read the matrix notes the lowest
id of a message still without a vector (``low``); every vector written later belongs to a
message at or above it, so the next refresh reads the vectors at or above the previous
``low`` and keeps those it does not hold. Deleted messages are not looked for: every candidate
is checked against the store (which also applies the search's scope), and those gone are
dropped from the matrix as they are met. A vector of another model (``harombe reindex
--embedding``) is written by :meth:`SemanticMemory.reindex`, which resets the matrix.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np

from harombe_core.store.rows import scope_sql
from harombe_core.vectors.base import FloatArray, VectorMatch
from harombe_core.vectors.stored import decode_vectors

if TYPE_CHECKING:
    from harombe_core.store.base import OnCorrupt, SearchScope
    from harombe_core.vectors.stored import StoredVectors

__all__ = ["VectorMatrix"]

#: Vectors read per query when loading the matrix (bounds the blobs held in Python at once).
LOAD_PAGE = 20_000
#: Candidates checked against the store at most: a scope so selective that the best this many
#: all fall outside it is searched through SQLite instead (see ``StoredVectors.exact_search``).
MAX_CHECKED = 20_000
#: Ids per ``IN (...)`` list (below SQLite's default variable limit).
_CHUNK = 500

_LOW_SQL = (
    "SELECT COALESCE((SELECT MIN(m.id) FROM messages m WHERE m.embedded = 0 AND NOT EXISTS "
    "(SELECT 1 FROM message_vectors v WHERE v.message_id = m.id)), "
    "(SELECT COALESCE(MAX(id), 0) + 1 FROM messages))"
)


class VectorMatrix:
    """Every stored vector of one SQLite store as one float32 matrix, searched exactly."""

    def __init__(self, stored: StoredVectors, on_corrupt: OnCorrupt = None) -> None:
        self.stored = stored
        #: Where a stored vector edited outside harombe goes (left out of the matrix): the
        #: matrix holds every user's vectors, so one user's bad row must not fail the
        #: searches of the others, nor tell them its id. None raises (tests).
        self.on_corrupt = on_corrupt
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget everything (the stored vectors were cleared or replaced); reloaded on use."""
        with self._lock:
            dimension = self.stored.dimension
            self._ids = np.zeros(0, dtype=np.int64)
            self._matrix = np.zeros((0, dimension), dtype=np.float32)
            self._live = np.zeros(0, dtype=bool)
            self._size = 0
            self._low = 0  # every vector of a message below this id is held

    @property
    def nbytes(self) -> int:
        """Memory held by the matrix and its ids (what an unscoped search costs to keep)."""
        return int(self._matrix.nbytes + self._ids.nbytes + self._live.nbytes)

    def __len__(self) -> int:
        return int(self._live[: self._size].sum())

    def refresh(self) -> None:
        """Read the vectors written since the last refresh (all of them the first time)."""
        with self._lock:
            self._refresh()

    def _refresh(self) -> None:
        store = self.stored.store
        low = int(store.query(_LOW_SQL)[0][0])  # before reading: see the module docstring
        after = self._low - 1
        held = self._ids[: self._size]
        recent = set(held[held >= self._low].tolist()) if self._size else set()
        if not len(self._ids):  # the first load: room for every id there can be, at once
            top = store.query("SELECT MAX(message_id) FROM message_vectors")[0][0]
            self._reserve(int(top or 0))
        while True:
            rows = store.query(
                "SELECT message_id, vector FROM message_vectors WHERE message_id > ? "
                "ORDER BY message_id LIMIT ?",
                (after, LOAD_PAGE),
            )
            if not rows:
                break
            after = int(rows[-1][0])
            fresh = [r for r in rows if int(r[0]) not in recent]
            if fresh:
                ids, vectors = decode_vectors(fresh, self.stored.dimension, self.on_corrupt)
                self._append(np.asarray(ids, dtype=np.int64), vectors)
            if len(rows) < LOAD_PAGE:
                break
        self._low = low
        dead = self._size - int(self._live[: self._size].sum())
        if dead > max(1024, self._size // 4):  # many deleted: give their memory back
            keep = self._live[: self._size]
            self._ids = self._ids[: self._size][keep].copy()
            self._matrix = self._matrix[: self._size][keep].copy()
            self._size = len(self._ids)
            self._live = np.ones(self._size, dtype=bool)

    def _reserve(self, capacity: int) -> None:
        """Grow the arrays to hold ``capacity`` rows (copying what is held once)."""
        if capacity <= len(self._ids):
            return
        self._ids = np.resize(self._ids, capacity)
        self._live = np.resize(self._live, capacity)
        matrix = np.empty((capacity, self.stored.dimension), dtype=np.float32)
        matrix[: self._size] = self._matrix[: self._size]
        self._matrix = matrix

    def _append(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        need = self._size + len(ids)
        if need > len(self._ids):
            self._reserve(max(need, int(len(self._ids) * 1.25) + 1024))
        self._ids[self._size : need] = ids
        self._matrix[self._size : need] = vectors
        self._live[self._size : need] = True
        self._size = need

    def search(
        self, query: FloatArray, k: int, scope: SearchScope | None
    ) -> list[VectorMatch] | None:
        """Exact cosine top-``k`` inside ``scope``; None when the scope is too selective for
        this matrix (the caller then searches it through SQLite)."""
        if k <= 0:
            return []
        with self._lock:
            self._refresh()
            size = self._size
            if size == 0:
                return []
            sims = self._matrix[:size] @ np.asarray(query, dtype=np.float32)
            sims[~self._live[:size]] = -np.inf
            ids = self._ids[:size]
            take = min(size, max(2 * k, k + 16))
            while True:
                if take < size:
                    top = np.argpartition(-sims, take - 1)[:take]
                    order = top[np.argsort(-sims[top], kind="stable")]
                else:
                    order = np.argsort(-sims, kind="stable")
                order = order[np.isfinite(sims[order])]
                found = self._check(ids[order].tolist(), scope, order)
                matches = [VectorMatch(mid, float(sims[row])) for mid, row in found][:k]
                if len(matches) >= k or take >= size:
                    return matches
                if take >= MAX_CHECKED:
                    return None
                take = min(size, take * 4, MAX_CHECKED)

    def _check(
        self, candidates: list[int], scope: SearchScope | None, rows: np.ndarray
    ) -> list[tuple[int, int]]:
        """The candidates (with their matrix rows) that exist and are inside ``scope``, in
        order; rows of deleted messages are dropped from the matrix."""
        where, params = scope_sql(scope)
        inside: dict[int, bool] = {}
        for start in range(0, len(candidates), _CHUNK):
            chunk = candidates[start : start + _CHUNK]
            for mid, ok in self.stored.store.query(
                f"SELECT m.id, CASE WHEN 1 = 1{where} THEN 1 ELSE 0 END FROM messages m "
                "JOIN sessions s ON s.id = m.session_id "
                f"WHERE m.id IN ({','.join('?' * len(chunk))})",
                [*params, *chunk],
            ):
                inside[int(mid)] = bool(ok)
        out: list[tuple[int, int]] = []
        for mid, row in zip(candidates, rows.tolist(), strict=True):
            state = inside.get(mid)
            if state is None:
                self._live[row] = False  # deleted: never proposed again
            elif state:
                out.append((mid, row))
        return out
