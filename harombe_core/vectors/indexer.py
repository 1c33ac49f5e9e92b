"""Semantic memory: the embedder, the vector index and the background worker that fills it.

``save_message`` only commits the row (and its keyword entry) to the store and calls
:meth:`SemanticMemory.notify`; a worker thread embeds pending messages in batches. The
``embedded`` flag lives in the store, so whatever was committed but not yet embedded when a
process died is picked up by the worker the next time the store is opened.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from harombe_core.errors import (
    EmbeddingError,
    EmbeddingModelMismatchError,
    Fix,
    InvalidInputError,
)
from harombe_core.models import Message
from harombe_core.store.base import MessageStore, SearchScope
from harombe_core.store.sqlite import to_micros
from harombe_core.vectors.base import FloatArray, VectorIndex, VectorMatch, scope_metadata_filter
from harombe_core.vectors.stored import StoredVectors, index_metadata

if TYPE_CHECKING:
    from harombe_core.config import MemoryConfig
    from harombe_core.embeddings.base import Embedder

__all__ = [
    "EXACT_SEARCH_LIMIT",
    "META_DIMENSION",
    "META_MODEL",
    "SemanticMemory",
    "embedding_text",
    "open_semantic_memory",
]

log = logging.getLogger(__name__)

META_MODEL = "embedding_model"
META_DIMENSION = "embedding_dimension"
#: Scopes with at most this many messages are searched exactly from SQLite; larger ones go to
#: the HNSW index. Exact search reads ~1.5 KB per message, so this keeps it within a few ms.
EXACT_SEARCH_LIMIT = 4_000
#: Characters of the previous turn kept as context; the model truncates long inputs anyway.
CONTEXT_CHARS = 400


def embedding_text(message: Message, context: str) -> str:
    """What is embedded for a message: the turn it answers, then the message itself.

    A reply such as "Yes, in Lisbon last May" means little alone; with the question before it,
    its vector lands near later questions about the trip. The speaker's name stays with the
    words because users ask about people ("what did Ann say about ...").
    """
    speaker = f"{message.name}: " if message.name else ""
    text = f"{speaker}{message.content}"
    if context:
        return f"{context[-CONTEXT_CHARS:]}\n{text}"
    return text


def resolve_index(
    vector_store: Any, store: MessageStore, config: MemoryConfig | None
) -> VectorIndex:
    """A vector index from a name (``"chroma"``) or an object implementing the protocol."""
    if isinstance(vector_store, VectorIndex):
        return vector_store
    if vector_store not in ("chroma", "pgvector"):
        raise InvalidInputError(
            "vector_store must be 'chroma', 'pgvector', None or a VectorIndex object, got "
            f"{vector_store!r}."
        )
    section = config.vector_store if config is not None else None
    mode = section.mode if section is not None else "persistent"
    on_postgres = store.location.startswith(("postgresql://", "postgres://"))
    if vector_store == "pgvector" or (mode == "persistent" and on_postgres):
        # A PostgreSQL store keeps its vectors in the same database (pgvector), so they
        # persist with the messages and a scoped search is one SQL query.
        from harombe_core.vectors.pgvector import PgVectorIndex

        return PgVectorIndex(store)  # type: ignore[arg-type]
    from harombe_core.vectors.chroma import DEFAULT_COLLECTION, ChromaVectorIndex

    collection = section.collection if section is not None else DEFAULT_COLLECTION
    if mode == "http":
        assert section is not None
        return ChromaVectorIndex(
            mode="http", host=section.host, port=section.port, collection=collection
        )
    if mode == "memory" or store.location == ":memory:" or "://" in store.location:
        return ChromaVectorIndex(mode="memory", collection=collection)
    path = section.path if section is not None and section.path else f"{store.location}.chroma"
    return ChromaVectorIndex(mode="persistent", path=path, collection=collection)


def resolve_embedder_spec(embedding: Any) -> Embedder:
    """An embedder from a spec string (``"default"``, a model name or path) or an object."""
    if hasattr(embedding, "embed") and hasattr(embedding, "dimension"):
        return embedding
    from harombe_core.embeddings import resolve_embedder

    return resolve_embedder(embedding)


def open_semantic_memory(
    store: MessageStore,
    *,
    embedding: Any,
    vector_store: Any,
    config: MemoryConfig | None = None,
    allow_model_change: bool = False,
    start: bool = True,
) -> SemanticMemory:
    """Embedder + index + worker for ``store``; checks the recorded model first.

    Raises EmbeddingModelMismatchError when the store's vectors were made by another model
    (unless ``allow_model_change``, which ``harombe reindex`` uses).
    """
    embedder = resolve_embedder_spec(embedding)
    recorded = store.get_meta(META_MODEL)
    recorded_dim = store.get_meta(META_DIMENSION)
    changed = recorded is not None and (
        recorded != embedder.name or recorded_dim != str(embedder.dimension)
    )
    if changed and not allow_model_change:
        reindex = f"harombe reindex --db {shlex.quote(store.location)}"
        raise EmbeddingModelMismatchError(
            f"{store.location} was indexed with the embedding model {recorded!r} "
            f"(dimension {recorded_dim}), but {embedder.name!r} (dimension "
            f"{embedder.dimension}) was asked for.",
            fix=Fix(
                api=f"Open it with the same model, or rebuild the index for the new one with "
                f"`{reindex}` (or MemoryManager.reindex()).",
                cli=f"Pass the model it was indexed with (--embedding), or rebuild the index "
                f"for the new one with `{reindex} --embedding MODEL`.",
            ),
        )
    index = resolve_index(vector_store, store, config)
    batch_size = config.vector_store.batch_size if config is not None else 32
    semantic = SemanticMemory(store, embedder, index, batch_size=batch_size)
    if recorded is None:
        semantic.record_model()
    if start and not changed:
        semantic.start()
    return semantic


class SemanticMemory:
    """Keeps a vector index in step with a store and answers vector queries for retrieval."""

    def __init__(
        self,
        store: MessageStore,
        embedder: Embedder,
        index: VectorIndex,
        *,
        batch_size: int = 32,
        exact_search_limit: int = EXACT_SEARCH_LIMIT,
        linger: float = 0.05,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive int, got {batch_size!r}.")
        self.store = store
        self.embedder = embedder
        self.index = index
        self.batch_size = batch_size
        self.exact_search_limit = exact_search_limit
        self.linger = linger
        from harombe_core.store.sqlite import SQLiteStore

        self.stored: StoredVectors | None = (
            StoredVectors(store, embedder.dimension) if isinstance(store, SQLiteStore) else None
        )
        self._work_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: BaseException | None = None

    # lifecycle ------------------------------------------------------------------------------
    def record_model(self) -> None:
        self.store.set_meta(META_MODEL, self.embedder.name)
        self.store.set_meta(META_DIMENSION, str(self.embedder.dimension))

    def start(self) -> None:
        """Start the worker; it first repairs the index, then embeds whatever is pending."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="harombe-embedder", daemon=True)
        self._wake.set()
        self._thread.start()

    def notify(self) -> None:
        """New messages were committed: wake the worker (returns at once)."""
        self._wake.set()

    def flush(self, timeout: float | None = None) -> None:
        """Embed everything pending now (helping the worker), within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise EmbeddingError(
                    f"flush() timed out after {timeout} s with messages still waiting to be "
                    "embedded; call flush() again or raise the timeout."
                )
            if self.embed_pending(self.batch_size, timeout=remaining) == 0:
                return

    def stop(self) -> None:
        """Stop the worker after its current batch (``start()`` runs it again)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        self._stop.clear()

    def close(self) -> None:
        self.stop()
        self.index.close()

    def forget_sessions(self, session_ids: Iterable[str]) -> None:
        """Remove deleted sessions' vectors from the index (SQLite's went with the rows)."""
        for sid in session_ids:
            self.index.delete_where({"session_id": sid})

    # embedding --------------------------------------------------------------------------------
    def _run(self) -> None:
        self._repair_index()
        while not self._stop.is_set():
            self._wake.wait()
            # Messages usually arrive one by one; lingering a moment lets a batch gather, so
            # the model runs once per batch instead of once per message.
            self._stop.wait(self.linger)
            self._wake.clear()
            while not self._stop.is_set():
                try:
                    done = self.embed_pending(self.batch_size)
                except Exception as exc:  # logged and kept: flush() re-raises it to the caller
                    self.last_error = exc
                    log.warning("background embedding failed, will retry on next save: %s", exc)
                    break
                if done == 0:
                    break

    def _repair_index(self) -> None:
        """Re-insert vectors the index lost (deleted directory, new server) from SQLite."""
        if self.stored is None:
            return
        try:
            # Rows flagged as embedded by a version that kept no vectors in SQLite: embed again.
            self.stored.unmark_missing()
            have, want = self.index.count(), self.stored.count()
            if have < want:
                log.warning(
                    "vector index %s holds %d of %d vectors; rebuilding it from the store",
                    self.index.name, have, want,
                )
                self.rebuild_index_from_store()
        except Exception as exc:  # a broken index must not stop embedding; reindex fixes it
            self.last_error = exc
            log.warning("could not repair the vector index (run `harombe reindex`): %s", exc)

    def embed_pending(self, limit: int, *, timeout: float | None = None) -> int:
        """Embed up to ``limit`` pending messages; returns how many were embedded."""
        if not self._work_lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            return 1  # the worker holds the lock and is making progress: the caller loops
        try:
            pending = self.store.pending_embeddings(limit)
            if not pending:
                return 0
            texts = [embedding_text(message, context) for message, context in pending]
            vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
            if vectors.shape != (len(pending), self.embedder.dimension):
                raise EmbeddingError(
                    f"{self.embedder.name} returned shape {vectors.shape} for {len(pending)} "
                    f"texts; expected ({len(pending)}, {self.embedder.dimension})."
                )
            ids = [int(message.id or 0) for message, _ in pending]
            users: dict[str, str | None] = {}
            metas = []
            for mid, (message, _) in zip(ids, pending, strict=True):
                sid = message.session_id or ""
                if sid not in users:
                    session = self.store.get_session(sid)
                    users[sid] = session.user_id if session is not None else None
                created = to_micros(message.created_at)
                metas.append(index_metadata(mid, sid, users[sid], message.role, created))
            # Index first, flag second: a crash in between re-embeds (upsert, no duplicate).
            self.index.upsert(ids, vectors, metas)
            if self.stored is not None:
                self.stored.write_and_mark(ids, vectors)
            else:
                self.store.mark_embedded(ids)
            return len(pending)
        finally:
            self._work_lock.release()

    def pending_count(self) -> int:
        return int(self.store.stats().get("pending_embeddings", 0))

    def backfill(self, batch_size: int = 100, *, progress: bool = True) -> int:
        """Embed every pending message in batches, with a progress bar; returns the count."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive int, got {batch_size!r}.")
        from tqdm.auto import tqdm

        total = self.pending_count()
        done = 0
        with tqdm(total=total, unit="msg", desc="embedding", disable=not progress) as bar:
            while True:
                count = self.embed_pending(batch_size)
                if count == 0:
                    break
                done += count
                bar.update(count)
        return done

    def rebuild_index_from_store(self, *, progress: bool = False) -> int:
        """Re-insert every vector kept in SQLite into the index (no model run)."""
        if self.stored is None:
            return 0
        from tqdm.auto import tqdm

        copied = 0
        with tqdm(
            total=self.stored.count(), unit="vec", desc="indexing", disable=not progress
        ) as bar:
            for ids, vectors, metas in self.stored.iter_with_metadata():
                self.index.upsert(ids, vectors, metas)
                copied += len(ids)
                bar.update(len(ids))
        return copied

    def reindex(
        self, batch_size: int = 100, *, progress: bool = True, reembed: bool = False
    ) -> int:
        """Rebuild the index from the store; idempotent. Returns how many vectors it holds.

        Vectors already in SQLite for the same model are re-used; a new model (or ``reembed``)
        embeds everything again.
        """
        with self._work_lock:
            model_changed = self.store.get_meta(META_MODEL) not in (None, self.embedder.name) or (
                self.store.get_meta(META_DIMENSION) not in (None, str(self.embedder.dimension))
            )
            self.index.clear()
            if self.stored is None or model_changed or reembed:
                if self.stored is not None:
                    self.stored.clear()
                else:
                    self.store.reset_embedded()
                self.record_model()
            else:
                self.stored.unmark_missing()
        self.rebuild_index_from_store(progress=progress)
        self.backfill(batch_size, progress=progress)
        return self.index.count()

    # search -----------------------------------------------------------------------------------
    def embed_query(self, text: str) -> FloatArray:
        return np.asarray(self.embedder.embed_query(text), dtype=np.float32)

    def nearest(self, query: FloatArray, k: int, scope: SearchScope | None) -> list[VectorMatch]:
        """Candidate ids by cosine: exact over small scopes, HNSW otherwise.

        The store re-checks every candidate against ``scope`` afterwards; this only proposes.
        """
        if k <= 0:
            return []
        if self.stored is not None and scope is not None:
            size = self.stored.scope_size(scope)
            if size is not None and size <= self.exact_search_limit:
                return self.stored.exact_search(query, k, scope)
        where = scope_metadata_filter(scope)
        return self.index.query(query, k, where)

    def vectors_for(self, ids: Sequence[int]) -> dict[int, FloatArray]:
        """Stored vectors of these messages (SQLite copy first, else the index)."""
        if self.stored is not None:
            return self.stored.get(ids)
        with contextlib.suppress(NotImplementedError):
            return self.index.get_vectors(ids)
        return {}
