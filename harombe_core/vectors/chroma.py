"""ChromaDB as the vector index: embedded (persistent or in-memory) or a Chroma server.

Chroma stores the vectors we give it (no embedding function of its own, so it never tries to
download a model), in cosine space, keyed by the message id as a string, with the metadata
``session_id``, ``user_id``, ``role``, ``message_id`` and ``created_at`` (integer microseconds).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harombe_core.errors import MissingExtraError, StoreError
from harombe_core.vectors.base import FloatArray, MetaValue, VectorMatch

log = logging.getLogger(__name__)

__all__ = ["ChromaVectorIndex", "chroma_where"]

DEFAULT_COLLECTION = "harombe_messages"


def chroma_where(where: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Translate our flat ``where`` mapping into Chroma's syntax (``$and`` of single clauses)."""
    if not where:
        return None
    clauses: list[dict[str, Any]] = []
    for key, condition in where.items():
        if isinstance(condition, Mapping):
            for op, operand in condition.items():
                clauses.append({key: {op: list(operand) if op == "$in" else operand}})
        else:
            clauses.append({key: condition})
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def _import_chromadb() -> Any:
    try:
        import chromadb
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise MissingExtraError("the ChromaDB vector index", "chroma", "chromadb") from exc
    return chromadb


class ChromaVectorIndex:
    """A :class:`~harombe_core.vectors.base.VectorIndex` on one Chroma collection.

    ``mode`` is ``"persistent"`` (``path`` is a directory, by default ``<database>.chroma``
    beside the SQLite file), ``"memory"`` (a private collection that disappears on close) or
    ``"http"`` (``host``/``port`` of a Chroma server; name the ``collection`` per database).
    """

    def __init__(
        self,
        *,
        mode: str = "persistent",
        path: str | None = None,
        host: str = "127.0.0.1",
        port: int = 8000,
        collection: str = DEFAULT_COLLECTION,
    ) -> None:
        chromadb = _import_chromadb()
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        self._ephemeral = False
        if mode == "memory":
            # In-process Chroma clients share one backend, so every in-memory index gets a
            # collection of its own: two throwaway stores never see each other's vectors.
            self._client = chromadb.EphemeralClient(settings=settings)
            collection = f"{collection}-{uuid.uuid4().hex}"
            self._ephemeral = True
            self._name = f"chroma (in memory) {collection}"
        elif mode == "persistent":
            if not path:
                raise StoreError("a persistent Chroma index needs a directory path.")
            directory = Path(path).expanduser()
            directory.mkdir(parents=True, exist_ok=True)
            try:
                self._client = chromadb.PersistentClient(path=str(directory), settings=settings)
            except Exception as exc:  # chromadb raises its own untyped errors for a bad file
                # The index is derived data: set the damaged copy aside and start an empty
                # one; the indexer refills it from the vectors and messages in the store.
                aside = directory.with_name(f"{directory.name}.corrupt-{int(time.time())}")
                directory.rename(aside)
                log.warning(
                    "vector index %s is damaged (%s); moved it to %s and rebuilding it from "
                    "the store's messages", directory, exc, aside,
                )
                directory.mkdir(parents=True, exist_ok=True)
                from chromadb.api.shared_system_client import SharedSystemClient

                SharedSystemClient.clear_system_cache()  # forget the failed client for this path
                self._client = chromadb.PersistentClient(path=str(directory), settings=settings)
            self._name = f"chroma {directory}"
        elif mode == "http":
            try:
                self._client = chromadb.HttpClient(host=host, port=port, settings=settings)
            except Exception as exc:  # chromadb raises bare exceptions for connection failures
                raise StoreError(
                    f"cannot reach the Chroma server at {host}:{port} ({exc}). Start it with "
                    "`chroma run --port PORT` or set vector_store.mode to persistent."
                ) from exc
            self._name = f"chroma http://{host}:{port}/{collection}"
        else:
            raise StoreError(f"unknown Chroma mode {mode!r}; use persistent, memory or http.")
        self._collection_name = collection
        self._collection = self._open_collection()
        self._lock = threading.Lock()
        try:
            self._max_batch = int(self._client.get_max_batch_size())
        except Exception:  # older servers do not report it
            self._max_batch = 5_000

    def _open_collection(self) -> Any:
        return self._client.get_or_create_collection(
            self._collection_name,
            embedding_function=None,
            configuration={"hnsw": {"space": "cosine"}},
        )

    @property
    def name(self) -> str:
        return self._name

    def upsert(
        self,
        ids: Sequence[int],
        vectors: FloatArray,
        metadatas: Sequence[Mapping[str, MetaValue]],
    ) -> None:
        if len(ids) == 0:
            return
        array = np.asarray(vectors, dtype=np.float32)
        for start in range(0, len(ids), self._max_batch):
            stop = start + self._max_batch
            self._collection.upsert(
                ids=[str(int(i)) for i in ids[start:stop]],
                embeddings=array[start:stop],
                metadatas=[dict(m) for m in metadatas[start:stop]],
            )

    def query(
        self, vector: FloatArray, k: int, where: Mapping[str, Any] | None = None
    ) -> list[VectorMatch]:
        if k <= 0:
            return []
        result = self._collection.query(
            query_embeddings=np.asarray(vector, dtype=np.float32).reshape(1, -1),
            n_results=int(k),
            where=chroma_where(where),
            include=["distances"],
        )
        ids = result["ids"][0] if result["ids"] else []
        distances = result["distances"][0] if result.get("distances") else []
        return [
            VectorMatch(int(i), 1.0 - float(d)) for i, d in zip(ids, distances, strict=True)
        ]

    def get_vectors(self, ids: Sequence[int]) -> dict[int, FloatArray]:
        if len(ids) == 0:
            return {}
        result = self._collection.get(ids=[str(int(i)) for i in ids], include=["embeddings"])
        embeddings = result.get("embeddings")
        if embeddings is None:
            return {}
        return {
            int(i): np.asarray(e, dtype=np.float32)
            for i, e in zip(result["ids"], embeddings, strict=True)
        }

    def delete(self, ids: Sequence[int]) -> None:
        if len(ids) > 0:
            self._collection.delete(ids=[str(int(i)) for i in ids])

    def delete_where(self, where: Mapping[str, Any]) -> None:
        self._collection.delete(where=chroma_where(where))

    def count(self) -> int:
        return int(self._collection.count())

    def clear(self) -> None:
        with self._lock:
            self._client.delete_collection(self._collection_name)
            self._collection = self._open_collection()

    def close(self) -> None:
        if self._ephemeral:
            with contextlib.suppress(Exception):
                self._client.delete_collection(self._collection_name)
