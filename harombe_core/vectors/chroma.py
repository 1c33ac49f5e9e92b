"""ChromaDB as the vector index: embedded (persistent or in-memory) or a Chroma server.

Chroma stores the vectors we give it (no embedding function of its own, so it never tries to
download a model), in cosine space, keyed by the message id as a string, with the metadata
``session_id``, ``user_id``, ``role``, ``message_id`` and ``created_at`` (integer microseconds).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np

from harombe_core.errors import (
    EmbeddingModelMismatchError,
    HarombeError,
    InvalidInputError,
    MissingExtraError,
    StoreError,
    VectorIndexError,
)
from harombe_core.vectors.base import FloatArray, Metadatas, VectorIndexBase, VectorMatch
from harombe_core.vectors.chroma_folder import is_out_of_space, room_left, scrub_unused_slots

log = logging.getLogger(__name__)

__all__ = ["ChromaVectorIndex", "chroma_where"]

DEFAULT_COLLECTION = "harombe_messages"
#: Room (bytes) a write into an embedded folder must leave beside the bytes it adds: SQLite's
#: log and Chroma's write-ahead log grow with it, and the HNSW files grow in steps.
WRITE_MARGIN = 8 * 2**20
#: Besides ``WRITE_MARGIN``, this fraction of the largest file (HNSW files grow by a share of
#: their size when the graph is resized).
GROWTH_SHARE = 0.25
#: Ids read per page when listing what the index holds.
_ID_PAGE = 10_000

P = ParamSpec("P")
T = TypeVar("T")


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


def _typed_errors(method: Callable[P, T]) -> Callable[P, T]:
    """Chroma's own exceptions never reach a caller: each becomes a harombe error.

    A collection deleted under this client (another client's rebuild on a shared server) is
    opened again and the call retried once. Vectors of another dimension raise
    :class:`EmbeddingModelMismatchError`, a request Chroma refuses :class:`InvalidInputError`,
    anything else :class:`VectorIndexError`.
    """

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        index: Any = args[0]
        from chromadb.errors import InvalidArgumentError, NotFoundError

        if index._failed is not None:
            raise VectorIndexError(index._failed)
        try:
            try:
                return method(*args, **kwargs)
            except NotFoundError:
                index._collection = index._open_collection(index._client)
                return method(*args, **kwargs)
        except HarombeError:
            raise
        except Exception as exc:  # chromadb raises ChromaError, ValueError, httpx errors, ...
            text = str(exc)
            what = method.__name__.strip("_")
            if index._folder is not None and is_out_of_space(exc):
                index._failed = (
                    f"the vector index {index.name} failed to write for want of space ({text}) "
                    "and is not used again in this process (after such a failure Chroma's next "
                    "call can hang every thread). Messages and their vectors are safe in the "
                    "database and searched exactly; free space and reopen to use the index."
                )
                raise VectorIndexError(index._failed) from exc
            if "dimension" in text.lower() and "expect" in text.lower():
                raise EmbeddingModelMismatchError(
                    f"the vector index {index.name} holds vectors of another dimension ({text}); "
                    "rebuild it for the current model with `harombe reindex`."
                ) from exc
            if isinstance(exc, InvalidArgumentError):
                raise InvalidInputError(
                    f"the vector index {index.name} refused to {what} ({text}); check the "
                    "search filters (roles, since, until) and the vectors passed."
                ) from exc
            raise VectorIndexError(
                f"the vector index {index.name} failed to {what} ({type(exc).__name__}: "
                f"{text}). Messages and their vectors are safe in the store; if this persists, "
                "rebuild the index with `harombe reindex`."
            ) from exc

    return wrapper


class ChromaVectorIndex(VectorIndexBase):
    """A :class:`~harombe_core.vectors.base.VectorIndex` on one Chroma collection.

    ``mode`` is ``"persistent"`` (``path`` is a directory, by default ``<database>.chroma``
    beside the SQLite file), ``"memory"`` (a private collection that disappears on close) or
    ``"http"`` (``host``/``port`` of a Chroma server; name the ``collection`` per database).

    A persistent index owns its folder while it is open (see
    :mod:`harombe_core.vectors.chroma_folder`): opening one that another process holds raises
    :class:`~harombe_core.errors.VectorIndexBusyError` at once. Every Chroma failure is raised
    as a :class:`~harombe_core.errors.VectorIndexError`.
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
        self._folder: Any = None
        self._collection_name = collection
        self._lock = threading.Lock()
        self._closed = False
        self._erase_on_close = False
        self._unscrubbed = True  # (see _write)
        #: Set once a write failed for want of space: every later call raises it at once.
        self._failed: str | None = None
        if mode == "memory":
            # In-process Chroma clients share one backend, so every in-memory index gets a
            # collection of its own: two throwaway stores never see each other's vectors.
            self._collection_name = f"{collection}-{uuid.uuid4().hex}"
            self._ephemeral = True
            self._name = f"chroma (in memory) {self._collection_name}"
            try:
                self._client = chromadb.EphemeralClient(settings=settings)
                self._collection = self._open_collection(self._client)
            except Exception as exc:  # chromadb's own errors, typed like every other
                raise VectorIndexError(f"cannot open {self._name} ({exc}).") from exc
        elif mode == "persistent":
            if not path:
                raise StoreError("a persistent Chroma index needs a directory path.")
            from harombe_core.vectors.chroma_folder import ChromaFolder

            self._folder = ChromaFolder(path)
            self._name = f"chroma {self._folder.folder}"
            self._client, self._collection = self._folder.open_client(self._open_collection)
        elif mode == "http":
            self._name = f"chroma http://{host}:{port}/{collection}"
            try:
                self._client = chromadb.HttpClient(host=host, port=port, settings=settings)
                self._collection = self._open_collection(self._client)
            except Exception as exc:  # chromadb raises bare exceptions for connection failures
                raise VectorIndexError(
                    f"cannot reach the Chroma server at {host}:{port} ({exc}). Start it with "
                    "`chroma run --port PORT` or set vector_store.mode to persistent."
                ) from exc
        else:
            raise StoreError(f"unknown Chroma mode {mode!r}; use persistent, memory or http.")
        try:
            self._max_batch = int(self._client.get_max_batch_size())
        except Exception:  # older servers do not report it; Chroma's own default applies
            self._max_batch = 5_000

    def _open_collection(self, client: Any) -> Any:
        return client.get_or_create_collection(
            self._collection_name,
            embedding_function=None,
            configuration={"hnsw": {"space": "cosine"}},
        )

    @property
    def name(self) -> str:
        return self._name

    @property
    def folder(self) -> Path | None:
        """The folder of a persistent index (None in memory or on a server)."""
        return None if self._folder is None else self._folder.folder

    def _wrote(self) -> None:
        if self._folder is not None:
            self._folder.after_write()

    def _make_room(self, adding: int) -> None:
        """Refuse a write to an embedded folder that might not fit, before Chroma starts it.

        Why here: when a write fails half-way for want of space (a full disk, a file-size
        limit), chromadb 1.x reports "disk I/O error", and its next call may then never
        return while holding the GIL, which stops every thread of the application. So a write
        that might not fit is never attempted: the vectors stay in the database, searched
        exactly, and the index catches up from there once there is room.
        """
        if self._folder is None:
            return
        folder = self._folder.folder
        largest = 0
        with contextlib.suppress(OSError):
            largest = max((p.stat().st_size for p in folder.rglob("*") if p.is_file()), default=0)
        needed = WRITE_MARGIN + 4 * adding + int(GROWTH_SHARE * largest)
        room = room_left(folder)
        if room < needed:
            raise VectorIndexError(
                f"the vector index {self.name} was not written: {room:,} bytes are left "
                f"(disk or file-size limit) and the write needs up to {needed:,}. Messages and "
                "their vectors are safe in the database and searched exactly; free space and "
                "the index catches up."
            )

    @_typed_errors
    def _write(self, ids: list[int], array: FloatArray, metadatas: Metadatas) -> None:
        self._make_room(int(array.nbytes) + 200 * len(ids))
        with self._lock:  # (only upserts add HNSW elements: the clearing below sees no other)
            for start in range(0, len(ids), self._max_batch):
                stop = start + self._max_batch
                self._collection.upsert(
                    ids=[str(i) for i in ids[start:stop]],
                    embeddings=array[start:stop],
                    # Chroma merges metadata on upsert: an explicit None removes an old owner.
                    metadatas=[{"user_id": None, **m} for m in metadatas[start:stop]],
                )
            if self._unscrubbed and self._folder is not None:
                # The first upsert since opening creates a new collection's HNSW segment,
                # saved from memory hnswlib never zeroed (after an erasure it held the deleted
                # records): its unused slots are cleared now, before they are ever read.
                self._unscrubbed = False
                scrub_unused_slots(self._folder.folder)
        self._wrote()

    @_typed_errors
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

    @_typed_errors
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

    @_typed_errors
    def ids(self) -> list[int]:
        """Every message id the index holds, read page by page (to compare with the store)."""
        found: list[int] = []
        while True:
            page = self._collection.get(include=[], limit=_ID_PAGE, offset=len(found))["ids"]
            found.extend(int(i) for i in page)
            if len(page) < _ID_PAGE:
                return found

    @_typed_errors
    def delete(self, ids: Sequence[int]) -> None:
        if len(ids) > 0:
            self._make_room(0)
            self._collection.delete(ids=[str(int(i)) for i in ids])
            self._wrote()

    @_typed_errors
    def delete_where(self, where: Mapping[str, Any]) -> None:
        self._make_room(0)
        self._collection.delete(where=chroma_where(where))
        self._wrote()

    @_typed_errors
    def set_session_user(self, session_id: str, user_id: str | None) -> None:
        """Re-label a session's vectors with its new owner (scoped searches filter on it)."""
        ids = self._collection.get(where={"session_id": session_id}, include=[])["ids"]
        if ids:  # a None value removes the key
            self._make_room(200 * len(ids))
            self._collection.update(ids=ids, metadatas=[{"user_id": user_id}] * len(ids))
            self._wrote()

    @_typed_errors
    def count(self) -> int:
        return int(self._collection.count())

    @_typed_errors
    def clear(self) -> None:
        from chromadb.errors import NotFoundError

        self._make_room(0)
        with self._lock:
            with contextlib.suppress(NotFoundError):  # already gone: nothing to clear
                self._client.delete_collection(self._collection_name)
            self._collection = self._open_collection(self._client)
            self._unscrubbed = True  # (a new collection: its first upsert makes a new segment)
        self._wrote()

    def erase_deleted(self) -> None:
        """Have :meth:`close` leave no deleted vector in the folder's files.

        Chroma keeps what was deleted: its log (``embeddings_queue``) holds every upserted
        vector with its metadata until the HNSW segment is saved, its SQLite file keeps freed
        pages, and a dropped collection's HNSW segment stays on disk. After the collection
        was emptied (:meth:`clear`), close vacuums the SQLite file and removes segment folders
        no collection uses (see ``ChromaFolder.purge``). Only a persistent index has such
        files; elsewhere this does nothing.
        """
        self._erase_on_close = self._folder is not None

    def close(self) -> None:
        """Release the collection (a private one is dropped) and, on disk, the folder."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._ephemeral:
                with contextlib.suppress(Exception):  # a throwaway collection: best effort
                    self._client.delete_collection(self._collection_name)
            elif self._folder is not None and self._failed is None:
                # (after a failed write Chroma is not called again, not even to close: see
                # _make_room; the process lets its client go with it)
                self._client.close()  # Chroma forgets its cached copy of the folder
                if self._erase_on_close:
                    self._folder.purge()
                    scrub_unused_slots(self._folder.folder)
                self._folder.after_write()  # anything Chroma wrote while closing
        finally:
            if self._folder is not None:
                self._folder.release()
