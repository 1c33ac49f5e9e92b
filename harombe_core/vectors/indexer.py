"""Semantic memory: the embedder, the vector index and the background worker that fills it.

``save_message`` only commits the row (and its keyword entry) to the store and calls
:meth:`SemanticMemory.notify`; a worker thread embeds pending messages in batches. What is
embedded is decided by the store alone, so whatever was committed but not embedded when a
process died is picked up by the next worker, in this process or another.

On SQLite the vectors live in the database (``message_vectors``) and the index is a derived
copy (see :mod:`harombe_core.vectors.stored` for what the ``embedded`` flag means):

* **Index first, flag second.** A vector is flagged as indexed only after the index accepted
  it, so a crash in between leaves the message unflagged and it is filed again (an upsert: no
  duplicate). A ``1`` in the database is therefore the truth about what the index holds, except
  when the index itself loses data (a folder deleted or restored from a backup, a rebuild
  killed half-way). The owner checks that when it opens the index, before it searches it:
  if the index's count differs from the flagged count, the two id sets are compared, flagged
  ids the index lacks go back to the tail and ids of deleted messages are dropped from it.
  ``reindex`` puts every row on the tail *before* it clears the index, so a rebuild killed at
  any moment leaves rows on the tail, never flagged ones missing.
* **One process owns an embedded Chroma folder** (see
  :mod:`harombe_core.vectors.chroma_folder`); the others store vectors in SQLite only. The
  owner's worker files what they stored (the tail) into the index, and retries ownership when
  the owner goes away.
* **The default on SQLite keeps no index beside the database** (``vector_store="database"``):
  the stored vectors are the index. Searches scoped to a user or a session read that scope's
  vectors through SQLite's indexes and rank them exactly; searches across users rank an
  in-process matrix of every stored vector (:mod:`harombe_core.vectors.matrix`), also exactly.
  One file is then the whole memory: encrypted with the database's key, deleted in its
  transactions, backed up by copying it. ChromaDB (``vector_store="chroma"``) stays for very
  large corpora searched across users (``docs/vector-index.md`` has the numbers).
* **Search never misses a stored vector.** Small scopes are searched exactly from SQLite. Larger
  ones ask the index and add an exact search over the tail; without an index (another process
  owns it, the folder is read-only, it has not been checked yet, or it fails) the whole scope is
  searched exactly, and a failing index is logged once. So after :meth:`SemanticMemory.flush`
  (every message has a stored vector) every acknowledged message is found, on every path.

On PostgreSQL the vectors are the index (pgvector in the same database, written with the flag in
one transaction), so none of this is needed there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from harombe_core.errors import (
    CorruptRowError,
    EmbeddingError,
    EmbeddingModelMismatchError,
    Fix,
    StoreReadOnlyError,
    VectorIndexBusyError,
)
from harombe_core.folding import SummaryFolder
from harombe_core.models import Message
from harombe_core.progress import Progress, progress_reporter, silent
from harombe_core.store import ops
from harombe_core.store.base import MessageStore, OnCorrupt, SearchScope
from harombe_core.store.erasure import ERASED_VECTORS, owed
from harombe_core.vectors.base import FloatArray, VectorIndex, VectorMatch, scope_metadata_filter
from harombe_core.vectors.choice import resolve_embedder_spec, resolve_index
from harombe_core.vectors.erase import close_erasing
from harombe_core.vectors.matrix import VectorMatrix
from harombe_core.vectors.stored import StoredVectors
from harombe_core.vectors.worker import (
    BACKLOG_NOTICE,
    EMBED_WINDOW,
    INDEX_FAILURES,
    POLL_SECONDS,
    EmbeddingWorker,
    IndexOpener,
    check_batch_size,
    embedding_text,
)

if TYPE_CHECKING:
    from harombe_core.config import MemoryConfig
    from harombe_core.embeddings.base import Embedder

__all__ = [
    "BACKLOG_NOTICE",
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
#: With the in-database index, a user's or session's scope up to this size is read through
#: SQLite; a larger one is ranked through the in-process matrix (its candidates checked).
MATRIX_SCOPE_LIMIT = 16_000
#: Seconds a flush whose time is up, with nothing left to embed, waits at a time for the
#: index's lock (a worker's step in hand holds it briefly).
LOCK_GRACE = 0.05


def check_recorded_model(store: MessageStore, embedder: Embedder) -> bool:
    """True when the store's vectors were made by another model (or dimension)."""
    recorded = store.run(ops.get_meta(META_MODEL))
    recorded_dim = store.run(ops.get_meta(META_DIMENSION))
    return recorded is not None and (
        recorded != embedder.name or recorded_dim != str(embedder.dimension)
    )


def model_mismatch(store: MessageStore, embedder: Embedder) -> EmbeddingModelMismatchError:
    reindex = f"harombe reindex --db {shlex.quote(store.location)}"
    model, dimension = store.run(ops.get_meta(META_MODEL)), store.run(ops.get_meta(META_DIMENSION))
    return EmbeddingModelMismatchError(
        f"{store.location} was indexed with the embedding model "
        f"{model!r} (dimension {dimension}), but "
        f"{embedder.name!r} (dimension {embedder.dimension}) was asked for.",
        fix=Fix(
            api=f"Open it with the same model, or rebuild the index for the new one with "
            f"`{reindex}` (or MemoryManager.reindex()).",
            cli=f"Pass the model it was indexed with (--embedding), or rebuild the index for "
            f"the new one with `{reindex} --embedding MODEL`.",
        ),
    )


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
    (unless ``allow_model_change``, which ``harombe reindex`` uses), and VectorIndexError when
    the index cannot be opened for a reason other than another process holding it.
    """
    embedder = resolve_embedder_spec(embedding)
    changed = check_recorded_model(store, embedder)
    if changed and not allow_model_change:
        raise model_mismatch(store, embedder)
    target = resolve_index(vector_store, store, config)
    batch_size = config.vector_store.batch_size if config is not None else 32
    embed_context = config.vector_store.embed_context if config is not None else False
    if target is None:
        semantic = SemanticMemory(
            store,
            embedder,
            None,
            batch_size=batch_size,
            embed_context=embed_context,
            in_database=True,
        )
    elif isinstance(target, VectorIndex):
        semantic = SemanticMemory(
            store, embedder, target, batch_size=batch_size, embed_context=embed_context
        )
    elif getattr(store, "read_only", False):
        # Nothing can be embedded into a read-only store: search its stored vectors exactly,
        # and create no index folder beside it.
        semantic = SemanticMemory(
            store, embedder, None, batch_size=batch_size, embed_context=embed_context
        )
    else:
        semantic = SemanticMemory(
            store,
            embedder,
            None,
            open_index=target,
            batch_size=batch_size,
            embed_context=embed_context,
        )
        semantic.try_open_index(raise_errors=True)
    semantic.vector_store = vector_store if isinstance(vector_store, str) else "custom"
    try:
        if store.run(ops.get_meta(META_MODEL)) is None:
            try:
                semantic.record_model()
            except StoreReadOnlyError:
                log.info("%s is read-only: searching it without recording a model", store.location)
        if start and not changed:
            semantic.start()
            semantic.announce_backlog()
    except BaseException:
        semantic.close()
        raise
    return semantic


def _batch_lock(store: MessageStore) -> Any:
    """A lock beside a SQLite file taken around each embedding batch, so processes sharing
    the file do not all embed the same pending rows at once (each would run the model on
    them; only one write would count). None where there is no file."""
    from harombe_core.store.sqlite import SQLiteStore

    if not isinstance(store, SQLiteStore) or store.location == ":memory:":
        return None
    from filelock import FileLock

    return FileLock(f"{store.location}.embed.lock", mode=0o600, thread_local=False)


class SemanticMemory(EmbeddingWorker):
    """Keeps a vector index in step with a store and answers vector queries for retrieval.

    ``index`` is the index in use, or None while another process owns the embedded folder
    (then ``open_index`` is retried by the worker) or when it cannot be written.
    ``in_database``: the stored vectors are the index (SQLite, ``vector_store="database"``);
    a vector stored is a vector indexed.
    """

    def __init__(
        self,
        store: MessageStore,
        embedder: Embedder,
        index: VectorIndex | None,
        *,
        open_index: IndexOpener | None = None,
        batch_size: int = 32,
        exact_search_limit: int = EXACT_SEARCH_LIMIT,
        linger: float = 0.05,
        poll: float | None = POLL_SECONDS,
        embed_context: bool = False,
        window: int = EMBED_WINDOW,
        in_database: bool = False,
    ) -> None:
        check_batch_size(batch_size)
        self.store = store
        self.embedder = embedder
        self.index = index
        self.open_index = open_index
        self.batch_size = batch_size
        self.window = max(window, batch_size)
        self.exact_search_limit = exact_search_limit
        self.matrix_scope_limit = MATRIX_SCOPE_LIMIT
        self.linger = linger
        # A private in-memory store gets work only from this process: no need to look.
        self.poll = None if store.location == ":memory:" else poll
        self.embed_context = embed_context
        from harombe_core.store.sqlite import SQLiteStore

        self.stored: StoredVectors | None = (
            StoredVectors(store, embedder.dimension) if isinstance(store, SQLiteStore) else None
        )
        # The index is searched only once it was checked against the store (see the module
        # docstring); until then every search is exact. Nothing to check on Postgres.
        self._checked = self.stored is None
        self.in_database = in_database and self.stored is not None
        #: The vector store asked for, as named ("database", "chroma", "pgvector"; "custom"
        #: for an index object).
        self.vector_store = "database" if self.in_database else "custom"
        self._matrix: VectorMatrix | None = None  # made by the first search across users
        self._work_lock = threading.RLock()
        self._stop = threading.Event()
        # The embedder's jobs on the process's background worker, and the window of pending
        # messages its batches are taken from (see harombe_core.vectors.worker).
        self._jobs: SummaryFolder | None = None
        self._pid = os.getpid()
        self._window: deque[tuple[Message, str]] = deque()
        self._owners: dict[str, str | None] = {}
        self._backoff = self.poll or 0.0
        self._batch_lock = _batch_lock(store)
        self._batch_lock_pid = os.getpid()
        self._next_open_attempt = 0.0
        self._logged: set[str] = set()
        # Called with the size of every batch embedded, by whichever thread embeds it (the
        # worker or a caller of flush), so a caller's progress bar counts both.
        self._listeners: list[Callable[[int], None]] = []
        self.last_error: BaseException | None = None

    # lifecycle ------------------------------------------------------------------------------
    def record_model(self) -> None:
        self.store.run(ops.set_meta(META_MODEL, self.embedder.name))
        self.store.run(ops.set_meta(META_DIMENSION, str(self.embedder.dimension)))

    def start(self) -> None:
        """Hand the embedding to the process's background worker (:mod:`harombe_core.folding`);
        it first checks the index, then embeds whatever is pending, one batch per step."""
        self._start_jobs()

    def notify(self) -> None:
        """New messages were committed: have them embedded in the background (returns at
        once)."""
        self._notify_jobs()

    def flush(self, timeout: float | None = None, *, progress: Progress = None) -> None:
        """Return once every committed message is embedded and searchable.

        Embeds what is pending now (helping the worker). Where this process holds the index it
        is also checked and given the tail, so it holds every stored vector; elsewhere the
        vectors are searched exactly from the database, so they are found all the same.
        ``progress`` (see :mod:`harombe_core.progress`): by default a bar on stderr when it is
        a terminal and at least ``BACKLOG_NOTICE`` messages are waiting.
        Raises EmbeddingError when the model fails or ``timeout`` seconds pass first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout

        def remaining() -> float | None:
            if deadline is None:
                return None
            left = deadline - time.monotonic()
            if left <= 0 and self.pending_count() == 0:
                # Time is up but nothing is waiting (flush(timeout=0) asks "caught up?"):
                # no error; only the index check in hand, if any, is waited for.
                return LOCK_GRACE
            if left <= 0:
                raise EmbeddingError(
                    f"flush() timed out after {timeout} s with messages still waiting to be "
                    "embedded; call flush() again or raise the timeout."
                )
            return left

        total = 0 if silent(progress) else self.pending_count()
        with (
            progress_reporter(
                progress, total, desc="embedding", auto_from=BACKLOG_NOTICE
            ) as advance,
            self._listening(advance),
        ):
            while self.embed_pending(self.window, timeout=remaining(), deadline=deadline) > 0:
                pass
        while True:
            left = remaining()  # raises once the deadline passed
            if self._work_lock.acquire(timeout=-1 if left is None else min(left, 1.0)):
                break
        try:
            self._check_index()
            self.sync_tail()
        finally:
            self._work_lock.release()

    def announce_backlog(self) -> int:
        """Say once (a log warning) that a large backlog is being embedded in the background;
        returns the backlog. Until it is done, searches find those messages by keyword (see
        :mod:`harombe_core.retrieval`)."""
        if getattr(self.store, "read_only", False):
            return 0
        count = self.pending_count()
        if count >= BACKLOG_NOTICE:
            self._log_once(
                "backlog",
                f"{self.store.location}: embedding {count:,} messages in the background; "
                "until each is done, search finds it by its keywords. MemoryManager.flush() "
                "waits for them (with a progress bar on a terminal).",
            )
        return count

    def stop(self) -> None:
        """Stop embedding in the background after the batch in hand (``start()`` hands it
        over again)."""
        self._stop_jobs()

    def close(self) -> None:
        """Stop the worker and close the index (an embedded folder is given back).

        Messages still waiting to be embedded are not embedded first: they are committed, and
        the next process to open the store (or one open now) embeds them.
        """
        self.stop()
        with self._work_lock:
            index, self.index = self.index, None
            if index is not None:
                close_erasing(index, self.stored)  # after deletions: leaves no vector in files

    def erase_deleted(self) -> bool:
        """Erase deleted vectors from the index's files now, as its close would: an embedded
        Chroma folder is emptied, closed (vacuumed, unused segments removed) and opened again;
        True when nothing deleted is left there (or nothing was owed).

        Nothing is lost: every vector stays in SQLite, searches read them exactly until the
        background worker has filed them again (no model runs). Searches running meanwhile
        fall back to the stored vectors. False when deleted vectors stay owed: another
        process owns the folder (its erasure or close erases them), or the index is an object
        passed in, which this memory cannot reopen (its close erases them)."""
        stored = self.stored
        if stored is None:
            return True
        with self._work_lock:
            index = self.index
            if index is None and self.open_index is None:
                return True  # the vectors are in the database only: erased with its pages
            if index is not None and getattr(index, "erase_deleted", None) is None:
                return True  # an index that keeps no files
            if stored.store.snapshot(lambda c: owed(c, ERASED_VECTORS)) is None:
                return True
            if index is None or self.open_index is None:
                return False  # another process owns the folder, or only close can reopen it
            self.index = None  # searches read the stored vectors exactly from here on
            close_erasing(index, stored)
            self.try_open_index()  # (if another process took the folder, the worker retries)
            erased = stored.store.snapshot(lambda c: owed(c, ERASED_VECTORS)) is None
        self.notify()  # the worker files every vector into the emptied index again
        return erased

    def forget_sessions(self, session_ids: Iterable[str]) -> None:
        """Remove deleted sessions' vectors from the index (SQLite's went with the rows).

        Where this process does not hold the index, the owner drops them at its next check;
        until then the store's scope check keeps them out of every result.
        """
        index = self.index
        if index is None:
            return
        try:
            for sid in session_ids:
                index.delete_where({"session_id": sid})
        except INDEX_FAILURES as exc:
            self._log_once("forget", f"could not drop deleted sessions from the index: {exc}")

    def session_moved(self, session_id: str, user_id: str | None) -> None:
        """A session has a new owner: file its vectors under it.

        On SQLite the store put them back on the tail in the same transaction; the worker
        re-files them. An index beside a PostgreSQL store is re-labelled here (pgvector reads
        the owner from the session row, so it needs nothing).
        """
        if self.stored is not None:
            self.notify()
            return
        relabel = getattr(self.index, "set_session_user", None)
        if relabel is not None:
            relabel(session_id, user_id)

    def reindex(
        self,
        batch_size: int = 100,
        *,
        progress: Progress = True,
        reembed: bool = False,
        embedder: Embedder | None = None,
    ) -> int:
        """Rebuild the index from the store; idempotent. Returns how many vectors it holds.

        Vectors already in SQLite for the same model are re-used; a new model (``embedder``)
        or ``reembed`` embeds everything again. Every row goes back to the tail before the
        index is cleared, so a rebuild killed at any point is finished by the next open.
        Raises VectorIndexBusyError when another process holds the embedded index.
        """
        check_batch_size(batch_size)
        if self.in_database:
            return self._reindex_in_database(batch_size, progress, reembed, embedder)
        self.stop()  # no batch of the old model may land after the switch
        try:
            with self._work_lock:
                index = self._owned_index()
                if embedder is not None:
                    self.embedder = embedder
                    if self.stored is not None:
                        self.stored = StoredVectors(self.stored.store, embedder.dimension)
                model_changed = check_recorded_model(self.store, self.embedder)
                if self.stored is None:
                    self.store.run(ops.reset_embedded())
                    index.clear()
                    self.record_model()
                elif model_changed or reembed:
                    self.stored.clear()
                    self.record_model()
                    index.clear()
                else:
                    self.stored.unmark_missing()
                    self.stored.unindex_all()
                    index.clear()
                self._checked = True
                self._file_tail_with_progress(progress)
            self.backfill(batch_size, progress=progress)
            return index.count()
        finally:
            self.start()

    def _reindex_in_database(
        self, batch_size: int, progress: Progress, reembed: bool, embedder: Embedder | None
    ) -> int:
        """Reindex where the stored vectors are the index: only a new model (or ``reembed``)
        has anything to redo; returns how many vectors are stored."""
        assert self.stored is not None
        self.stop()  # no batch of the old model may land after the switch
        try:
            with self._work_lock:
                if embedder is not None:
                    self.embedder = embedder
                    self.stored = StoredVectors(self.stored.store, embedder.dimension)
                if check_recorded_model(self.store, self.embedder) or reembed:
                    self.stored.clear()
                    self.record_model()
                else:
                    self.stored.unmark_missing()
                self._matrix = None
            self.backfill(batch_size, progress=progress)
            return self.stored.count()
        finally:
            self.start()

    def _owned_index(self) -> VectorIndex:
        if self.index is None and not self.try_open_index(raise_errors=True):
            raise VectorIndexBusyError(
                f"the vector index of {self.store.location} is held by another process (or "
                "cannot be written); close the other processes using this database and run "
                "`harombe reindex` again."
            )
        assert self.index is not None
        return self.index

    @property
    def index_name(self) -> str | None:
        """Where vectors are searched, for messages: ``"database"``, the index's name, or None
        while the index is not open (another process holds it, or the store is read-only)."""
        if self.in_database:
            return "database"
        index = self.index
        return None if index is None else index.name

    # search -----------------------------------------------------------------------------------
    def embed_query(self, text: str) -> FloatArray:
        return np.asarray(self.embedder.embed_query(text), dtype=np.float32)

    def nearest(self, query: FloatArray, k: int, scope: SearchScope | None) -> list[VectorMatch]:
        """Candidate ids by cosine: exact over small scopes, the index plus its tail otherwise.

        The store re-checks every candidate against ``scope`` afterwards; this only proposes.
        """
        if k <= 0:
            return []
        index, stored = self.index, self.stored
        if stored is None:
            if index is None:
                return []
            try:
                return index.query(query, k, scope_metadata_filter(scope))
            except INDEX_FAILURES as exc:
                self._log_once("search", f"{exc} Searching by keyword only meanwhile.")
                return []
        if self.in_database:
            return self._nearest_in_database(stored, query, k, scope)
        if scope is not None:
            size = stored.store.run(ops.scope_size(scope))
            if size is not None and size <= self.exact_search_limit:
                return stored.exact_search(query, k, scope)
        if index is not None and not self._checked and self._work_lock.acquire(blocking=False):
            try:  # cheap when the index agrees with the store (two counts), as it usually does
                self._check_index()
            finally:
                self._work_lock.release()
        if index is None or not self._checked:
            return stored.exact_search(query, k, scope)
        # The tail is read before the index is asked. The worker files a row into the index
        # first and flags it second, so a row that leaves the tail between the two reads is
        # already in the index when it is asked; the other order could miss it in both.
        tail = stored.exact_search(query, k, scope, tail_only=True)
        try:
            found = index.query(query, k, scope_metadata_filter(scope))
        except INDEX_FAILURES as exc:
            self._log_once("search", f"{exc} Searching the stored vectors exactly instead.")
            return stored.exact_search(query, k, scope)
        best = {m.message_id: m for m in found}
        for match in tail:
            held = best.get(match.message_id)
            if held is None or held.similarity < match.similarity:
                best[match.message_id] = match
        return sorted(best.values(), key=lambda m: -m.similarity)[:k]

    def _nearest_in_database(
        self, stored: StoredVectors, query: FloatArray, k: int, scope: SearchScope | None
    ) -> list[VectorMatch]:
        """Exact search of the stored vectors: a user's or a session's through SQLite's indexes
        (they read only that scope), anything wider (or a user with very many messages)
        through the in-process matrix, whose candidates the store checks against the scope."""
        if scope is not None and (scope.user_id is not None or scope.session_id is not None):
            size = stored.store.run(ops.scope_size(scope))
            if size is None or size <= self.matrix_scope_limit:
                return stored.exact_search(query, k, scope)
        matrix = self._matrix
        if matrix is None or matrix.stored is not stored:
            matrix = self._matrix = VectorMatrix(stored, self._left_out)
        found = matrix.search(query, k, scope)
        return stored.exact_search(query, k, scope) if found is None else found

    def _left_out(self, error: CorruptRowError) -> None:
        self._log_once(
            f"matrix-{error.row_id}",
            f"{self.store.location}: a stored vector is left out of searches across users: {error}",
        )

    def vectors_for(
        self, ids: Sequence[int], on_corrupt: OnCorrupt = None
    ) -> dict[int, FloatArray]:
        """Stored vectors of these messages (SQLite copy first, else the index)."""
        return self.vectors_or_pending(ids, on_corrupt)[0]

    def vectors_or_pending(
        self, ids: Sequence[int], on_corrupt: OnCorrupt = None
    ) -> tuple[dict[int, FloatArray], frozenset[int]]:
        """Stored vectors of these messages, and which of them are not embedded yet.

        Every embedded message has a vector where this looks (SQLite's copy; on PostgreSQL the
        pgvector table), so an id without one is waiting for the embedder. An index that cannot
        return vectors tells nothing: then no id is called pending. A stored vector that is
        not one of this model's raises CorruptRowError, or goes to ``on_corrupt`` (and its id
        is called pending).
        """
        if self.stored is not None:
            found = self.stored.get(ids, on_corrupt)
            return found, frozenset(int(i) for i in ids) - found.keys()
        index = self.index
        if index is None:
            return {}, frozenset()
        with contextlib.suppress(NotImplementedError):
            try:
                found = index.get_vectors(ids)
            except INDEX_FAILURES as exc:
                self._log_once("vectors", str(exc))
            else:
                return found, frozenset(int(i) for i in ids) - found.keys()
        return {}, frozenset()
