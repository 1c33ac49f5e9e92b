"""The ``VectorIndex`` protocol: add, search with a metadata filter, delete.

A vector index is derived data: SQLite holds the truth, the index only proposes candidates, and
every candidate is re-read through the store with the caller's scope. So an index may be stale,
lossy or shared; it can never leak a message out of its scope.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from harombe_core.errors import InvalidInputError
from harombe_core.store.base import SearchScope

__all__ = [
    "VectorIndex",
    "VectorIndexBase",
    "VectorMatch",
    "build_where",
    "scope_metadata_filter",
]

FloatArray = npt.NDArray[np.float32]
#: Metadata values an index stores per vector (no ``None``: absent keys are simply omitted).
MetaValue = str | int | float | bool
#: One metadata mapping per vector, in the order of the ids.
Metadatas = Sequence[Mapping[str, MetaValue]]


@dataclass(frozen=True, slots=True)
class VectorMatch:
    """One nearest neighbour: the message id and its cosine similarity to the query."""

    message_id: int
    similarity: float


@runtime_checkable
class VectorIndex(Protocol):
    """What every vector backend implements (cosine space, message ids as keys).

    ``where`` is a mapping of metadata key to a required value, or to an operator dict
    (``{"$in": [...]}``, ``{"$gte": n}``, ``{"$lte": n}``), AND-ed together.

    An index may also offer ``ids() -> list[int]`` (every id it holds): when its count disagrees
    with the store, the missing vectors are then found and re-filed one by one; without it,
    every vector is filed again.
    """

    @property
    def name(self) -> str:
        """Human-readable location, for messages and ``harombe stats``."""
        ...

    def upsert(self, ids: Sequence[int], vectors: FloatArray, metadatas: Metadatas) -> None:
        """Insert or replace vectors by message id (idempotent: no duplicates on repeat)."""
        ...

    def query(
        self, vector: FloatArray, k: int, where: Mapping[str, Any] | None = None
    ) -> list[VectorMatch]:
        """Up to ``k`` nearest ids, most similar first."""
        ...

    def get_vectors(self, ids: Sequence[int]) -> dict[int, FloatArray]:
        """The stored vectors of these ids (missing ids are left out)."""
        ...

    def delete(self, ids: Sequence[int]) -> None: ...

    def delete_where(self, where: Mapping[str, Any]) -> None: ...

    def count(self) -> int: ...

    def clear(self) -> None:
        """Remove every vector (used by ``harombe reindex``)."""
        ...

    def close(self) -> None: ...


class VectorIndexBase:
    """What every backend's ``upsert`` checks, written once: subclasses implement ``_write``.

    ``upsert`` turns the vectors into one float32 matrix and refuses a batch whose ids, vectors
    and metadatas do not line up (a typed error before anything is written), so a backend
    receives only a consistent, non-empty batch.
    """

    def upsert(self, ids: Sequence[int], vectors: FloatArray, metadatas: Metadatas) -> None:
        """Insert or replace vectors by message id (idempotent: no duplicates on repeat)."""
        if len(ids) == 0:
            return
        array = np.asarray(vectors, dtype=np.float32)
        if array.ndim != 2 or array.shape[0] != len(ids):
            raise InvalidInputError(
                f"expected one vector per id ({len(ids)}), got an array of shape {array.shape}."
            )
        if len(metadatas) != len(ids):
            raise InvalidInputError(
                f"expected one metadata mapping per id ({len(ids)}), got {len(metadatas)}."
            )
        self._write([int(i) for i in ids], array, metadatas)

    def _write(self, ids: list[int], vectors: FloatArray, metadatas: Metadatas) -> None:
        """Store a checked batch: one float32 row per id, one metadata mapping per id."""
        raise NotImplementedError


def build_where(**conditions: Any) -> dict[str, Any] | None:
    """A ``where`` mapping from the conditions that are not ``None``."""
    where = {key: value for key, value in conditions.items() if value is not None}
    return where or None


def scope_metadata_filter(scope: SearchScope | None) -> dict[str, Any] | None:
    """The index-side filter for a scope: narrows candidates; the store still re-checks them."""
    if scope is None:
        return None
    from harombe_core.store.sqlite import to_micros

    where: dict[str, Any] = {}
    if scope.user_id is not None:
        where["user_id"] = scope.user_id
    if scope.session_id is not None:
        where["session_id"] = scope.session_id
    elif scope.exclude_session_id is not None:
        where["session_id"] = {"$ne": scope.exclude_session_id}
    if scope.roles:
        where["role"] = {"$in": list(scope.roles)}
    time_range: dict[str, int] = {}
    if scope.since is not None:
        time_range["$gte"] = to_micros(scope.since)
    if scope.until is not None:
        time_range["$lte"] = to_micros(scope.until)
    if time_range:
        where["created_at"] = time_range
    return where or None


def matches_where(metadata: Mapping[str, Any], where: Mapping[str, Any] | None) -> bool:
    """Evaluate a ``where`` mapping against one vector's metadata (for in-process indexes)."""
    if not where:
        return True
    for key, condition in where.items():
        value = metadata.get(key)
        if isinstance(condition, Mapping):
            for op, operand in condition.items():
                if op == "$in" and value not in operand:
                    return False
                if op == "$ne" and value == operand:
                    return False
                if op == "$gte" and (value is None or value < operand):
                    return False
                if op == "$lte" and (value is None or value > operand):
                    return False
        elif value != condition:
            return False
    return True
