"""An exact, in-process vector index: a test double and a reference for the protocol."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harombe_core.vectors.base import (
    FloatArray,
    Metadatas,
    MetaValue,
    VectorIndexBase,
    VectorMatch,
    matches_where,
)

__all__ = ["InMemoryVectorIndex"]


class InMemoryVectorIndex(VectorIndexBase):
    """Brute-force cosine search over a dict; thread-safe, no dependencies.

    Use it to test code built on harombe without ChromaDB, or as a reference implementation
    when writing another backend.
    """

    def __init__(self, name: str = "memory") -> None:
        self._name = name
        self._vectors: dict[int, FloatArray] = {}
        self._metadata: dict[int, dict[str, MetaValue]] = {}
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._name

    def _write(self, ids: list[int], vectors: FloatArray, metadatas: Metadatas) -> None:
        with self._lock:
            for mid, vector, meta in zip(ids, vectors, metadatas, strict=True):
                self._vectors[mid] = vector.copy()
                self._metadata[mid] = dict(meta)

    def query(
        self, vector: FloatArray, k: int, where: Mapping[str, Any] | None = None
    ) -> list[VectorMatch]:
        with self._lock:
            ids = [i for i, meta in self._metadata.items() if matches_where(meta, where)]
            if not ids or k <= 0:
                return []
            matrix = np.stack([self._vectors[i] for i in ids])
        sims = matrix @ np.asarray(vector, dtype=np.float32)
        order = np.argsort(-sims)[:k]
        return [VectorMatch(ids[i], float(sims[i])) for i in order]

    def get_vectors(self, ids: Sequence[int]) -> dict[int, FloatArray]:
        with self._lock:
            return {int(i): self._vectors[int(i)] for i in ids if int(i) in self._vectors}

    def ids(self) -> list[int]:
        """Every message id held (to compare with the store)."""
        with self._lock:
            return list(self._vectors)

    def delete(self, ids: Sequence[int]) -> None:
        with self._lock:
            for mid in ids:
                self._vectors.pop(int(mid), None)
                self._metadata.pop(int(mid), None)

    def delete_where(self, where: Mapping[str, Any]) -> None:
        with self._lock:
            doomed = [i for i, meta in self._metadata.items() if matches_where(meta, where)]
        self.delete(doomed)

    def count(self) -> int:
        with self._lock:
            return len(self._vectors)

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()
            self._metadata.clear()

    def close(self) -> None:
        """Nothing to release."""
