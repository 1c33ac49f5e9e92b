"""The worker of semantic memory: it embeds pending messages and keeps the index in step.

:class:`EmbeddingWorker` is the part of :class:`~harombe_core.vectors.indexer.SemanticMemory`
that runs as a kind of job on the process's background worker (:mod:`harombe_core.folding`,
priority :data:`~harombe_core.folding.VECTORS`) and in ``flush``/``backfill``: it opens and
checks the index, embeds what the store says is pending, and files vectors stored by other
processes (the tail) into the index. The rules it keeps (index first, flag second; one owner
per embedded folder) are described in :mod:`harombe_core.vectors.indexer`.

**Bounded steps.** One step embeds one batch (``batch_size`` messages), so the worker's other
jobs of a higher priority (checkpointed sessions, keyword entries) wait for one batch, not for
a backlog. Batches are taken from a *window* of pending messages read at once
(:data:`EMBED_WINDOW`) and sorted by length, kept between steps: a model pads every text of a
batch to its longest, so batches of like length are what keeps ingestion fast. Before a batch is
embedded, the rows another process embedded since the window was read are dropped from it (on
SQLite, under the database's embedding lock), so no message is embedded twice.

**Exit.** The background worker finishes the batch in hand when the interpreter shuts down and
stops (see :mod:`harombe_core.folding`); the messages still pending are embedded by the next
process that opens the store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from harombe_core.errors import (
    CorruptRowError,
    EmbeddingError,
    EmbeddingModelMismatchError,
    InvalidInputError,
    StoreError,
    StoreReadOnlyError,
    VectorIndexBusyError,
    VectorIndexError,
)
from harombe_core.folding import VECTORS, SummaryFolder
from harombe_core.models import Message
from harombe_core.progress import Progress, progress_reporter, silent
from harombe_core.store import ops
from harombe_core.store.base import MessageStore
from harombe_core.store.sqlite import to_micros
from harombe_core.vectors.base import FloatArray, VectorIndex
from harombe_core.vectors.stored import StoredVectors, index_metadata

if TYPE_CHECKING:
    from harombe_core.embeddings.base import Embedder

__all__ = ["EmbeddingWorker", "check_batch_size", "embedding_text"]

# One logger for all of semantic memory, whichever module of it speaks.
log = logging.getLogger("harombe_core.vectors.indexer")

#: Seconds between the worker's checks for work other processes left (pending rows, the tail)
#: and, when another process owns the index, for the index becoming free.
POLL_SECONDS = 1.0

#: Longest pause of a worker whose last round failed (unless a new message wakes it).
MAX_BACKOFF = 60.0

#: Vectors copied from SQLite into the index per batch (no model run, so larger than embedding).
TAIL_BATCH = 500

#: Pending messages taken at a time. They are sorted by length and embedded ``batch_size`` at
#: a time, so each batch holds texts of about one length: a model pads every text of a batch
#: to its longest, and chat mixes "ok" with paragraphs, so batches in arrival order cost the
#: model 2-3 times the work (``benchmarks/bench_embeddings.py --ingest``).
EMBED_WINDOW = 512

#: A backlog at least this large is announced once (logged) when semantic memory opens, and
#: ``flush()`` shows a progress bar for it when stderr is a terminal.
BACKLOG_NOTICE = 200

#: Opens an index only one process may hold; raises VectorIndexBusyError when another has it.
IndexOpener = Callable[[], VectorIndex]

#: What an index failure is: the index's own error, or vectors of another dimension in it.
INDEX_FAILURES = (VectorIndexError, EmbeddingModelMismatchError)

#: Messages of at most this many words are acknowledgements: embedded without context.
ACK_WORDS = 2

_WORDS = re.compile(r"\w+")

#: Characters of the previous turn kept as context; the model truncates long inputs anyway.
CONTEXT_CHARS = 400


def embedding_text(message: Message, context: str = "", *, with_context: bool = True) -> str:
    """What is embedded for a message: the turn it answers, then the message itself.

    A reply such as "Yes, in Lisbon last May" means little alone; with the question before it,
    its vector lands near later questions about the trip. A message of one or two words
    ("Noted!", "ok thanks") is embedded alone all the same: it says nothing of its own, and
    with the turn before it its vector would be a near-copy of that turn's, found in its place
    (or beside it, taking a result). Retrieval still reaches it through its neighbours
    (``rag.neighbor_weight``). ``with_context=False`` (``vector_store.embed_context: false``)
    embeds every message alone. The speaker's name stays with the words because users ask
    about people ("what did Ann say about ...").
    """
    speaker = f"{message.name}: " if message.name else ""
    text = f"{speaker}{message.content}"
    if with_context and context and len(_WORDS.findall(message.content)) > ACK_WORDS:
        return f"{context[-CONTEXT_CHARS:]}\n{text}"
    return text


#: The embedder's keys on the background worker: work saved in this process (after a linger
#: that gathers a batch) and the look for work other processes left (every ``poll`` seconds).
_NEW, _POLL = "new", "poll"


def check_batch_size(batch_size: Any) -> None:
    """Refuse a batch size that is not a positive int, before any work starts."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive int, got {batch_size!r}.")


class EmbeddingWorker:
    """Embedding and index upkeep of :class:`~harombe_core.vectors.indexer.SemanticMemory`,
    which sets the state below and runs these methods on its worker thread."""

    store: MessageStore
    embedder: Embedder
    _index: VectorIndex | None
    _index_pid: int  # the process that opened _index
    open_index: IndexOpener | None
    batch_size: int
    window: int
    linger: float
    poll: float | None
    embed_context: bool
    stored: StoredVectors | None
    in_database: bool
    last_error: BaseException | None
    _checked: bool
    _work_lock: threading.RLock
    _stop: threading.Event
    _jobs: SummaryFolder | None
    _pid: int
    _window: deque[tuple[Message, str]]
    _owners: dict[str, str | None]
    _backoff: float
    _batch_lock: Any
    _batch_lock_pid: int  # the process that made _batch_lock
    _next_open_attempt: float
    _logged: set[str]
    _listeners: list[Callable[[int], None]]

    @property
    def index(self) -> VectorIndex | None:
        """The vector index, in the process that opened it. A child forked after it was
        opened gets None on SQLite: its copy of the parent's client (Chroma's runs native
        threads that fork does not copy) would hang on the first call, so the child works as a
        process that does not own the index (vectors stored in the database, searched
        exactly; the parent files them into the index). On PostgreSQL the index is the store's
        own tables, which the store reconnects after a fork."""
        if self._index_pid != os.getpid() and self.stored is not None:
            return None
        return self._index

    @index.setter
    def index(self, value: VectorIndex | None) -> None:
        self._index, self._index_pid = value, os.getpid()

    @contextlib.contextmanager
    def _listening(self, listener: Callable[[int], None]) -> Iterator[None]:
        """Have ``listener`` told of every batch embedded in this process meanwhile."""
        self._listeners.append(listener)
        try:
            yield
        finally:
            self._listeners.remove(listener)

    def try_open_index(self, *, raise_errors: bool = False) -> bool:
        """Open the embedded index if no other process holds it; True when this one does."""
        if self.index is not None:
            return True
        if self.open_index is None:
            return False
        with self._work_lock:
            if self.index is not None:
                return True
            self._next_open_attempt = time.monotonic() + (self.poll or 0.0)
            try:
                self.index = self.open_index()
            except VectorIndexBusyError as exc:
                self._log_once(
                    "busy",
                    f"{exc} Searching the stored vectors exactly meanwhile.",
                    level=logging.INFO,
                )
                return False
            except StoreReadOnlyError as exc:
                self._log_once("read-only", str(exc))
                return False
            except StoreError as exc:
                if raise_errors:
                    raise
                self._log_once("open", str(exc))
                return False
            self._checked = self.stored is None
            return True

    def _check_index(self) -> None:
        """Compare the index with the store once after opening it (see the module docstring)."""
        index, stored = self.index, self.stored
        if index is None or stored is None or self._checked:
            return
        try:
            stored.unmark_missing()
            want, have = stored.indexed_count(), index.count()
            if have != want:
                self._reconcile(index, stored, want, have)
        except INDEX_FAILURES as exc:
            self._log_once("check", f"could not check the vector index against the store: {exc}")
            return
        self._checked = True

    def _reconcile(self, index: VectorIndex, stored: StoredVectors, want: int, have: int) -> None:
        flagged = stored.indexed_ids()
        ids = getattr(index, "ids", None)
        if ids is None:  # an index that cannot list its ids: file everything again
            stored.unindex(sorted(flagged))
            return
        present = set(ids())
        missing = flagged - present
        if missing:
            log.warning(
                "vector index %s lacks %d of the %d vectors flagged as indexed (%d held); "
                "rebuilding it from the store's copy",
                index.name,
                len(missing),
                want,
                have,
            )
            stored.unindex(sorted(missing))
        extra = sorted(present - flagged)
        if extra:
            gone = set(extra) - stored.existing(extra)
            if gone:
                index.delete(sorted(gone))

    def _heal_dimension(self, index: VectorIndex, exc: Exception) -> None:
        """The index holds another model's vectors: every row to the tail, then clear it."""
        log.warning(
            "vector index %s holds another model's vectors (%s); rebuilding it", index.name, exc
        )
        if self.stored is not None:
            self.stored.unindex_all()
        index.clear()

    def _upsert(
        self, ids: Sequence[int], vectors: FloatArray, metas: Sequence[dict[str, Any]]
    ) -> bool:
        """File vectors in the index; False (logged once) when it fails."""
        index = self.index
        if index is None:
            return False
        try:
            try:
                index.upsert(ids, vectors, metas)
            except EmbeddingModelMismatchError as exc:
                self._heal_dimension(index, exc)
                index.upsert(ids, vectors, metas)
        except INDEX_FAILURES as exc:
            self._log_once(
                "write", f"{exc} The vectors are kept in the database and searched exactly."
            )
            return False
        return True

    def _log_once(self, kind: str, message: str, *, level: int = logging.WARNING) -> None:
        """Log one kind of trouble once per SemanticMemory, however often it recurs."""
        if kind in self._logged:
            return
        self._logged.add(kind)
        log.log(level, "%s", message)

    # on the background worker -----------------------------------------------------------
    def _start_jobs(self) -> None:
        """Hand the embedder to the process's background worker; it first checks the index,
        then embeds whatever is pending."""
        if self._jobs is None:
            self._pid = os.getpid()
            self._jobs = SummaryFolder(self._background_step, linger=self.linger, priority=VECTORS)
            self._jobs.request(_NEW, 0, delay=0)

    def _notify_jobs(self) -> None:
        jobs = self._jobs
        # In a child after fork() the parent's embedder (its index client above all) stays
        # the parent's: the child embeds through its own semantic memory, or on flush().
        if jobs is not None and self._pid == os.getpid():
            jobs.request(_NEW, 0)  # after the linger: a burst of saves becomes one batch

    def _stop_jobs(self) -> None:
        """Take the embedder off the background worker after the step in hand; the window
        read so far is dropped (its rows are still pending in the store)."""
        self._stop.set()
        try:
            jobs, self._jobs = self._jobs, None
            if jobs is not None:
                jobs.close()
            with self._work_lock:
                self._window.clear()
        finally:
            self._stop.clear()

    def _background_step(self, _key: str, _until: int) -> bool:
        """One step on the background worker; True while more is pending. When nothing is,
        the look for work other processes left is handed over again, ``poll`` seconds on
        (longer after a failure, which is logged and kept for ``flush()`` to raise)."""
        jobs = self._jobs
        if self._pid != os.getpid():
            return False
        try:
            more = self._step()
        except Exception as exc:
            self.last_error = exc
            self._log_once(
                f"worker:{type(exc).__name__}", f"background embedding failed, will retry: {exc}"
            )
            # A failing model or server is not asked again every poll: back off (a new message
            # still starts a step after the linger).
            self._backoff = min(max(self._backoff * 2, 1.0), MAX_BACKOFF)
            if jobs is not None and self.poll is not None:
                jobs.request(_POLL, 0, delay=self._backoff)
            return False
        self._backoff = self.poll or 0.0
        if jobs is None:
            return False
        if more is None:  # another thread or process has the turn: try again shortly
            jobs.request(_NEW, 0, delay=max(self.linger, 0.01))
            return False
        if not more and self.poll is not None:
            jobs.request(_POLL, 0, delay=self.poll)
        return more

    def _step(self) -> bool | None:
        """Own the index if free, check it, embed one batch or file one batch of the tail.
        True when more may be pending, False when nothing was, None when another thread (a
        caller's flush) or process holds the turn."""
        if self._stop.is_set():
            return False
        due = time.monotonic() >= self._next_open_attempt
        if self.index is None and self.open_index is not None and due:
            self.try_open_index()
        if not self._work_lock.acquire(blocking=False):
            return None
        try:
            self._check_index()
            taken = self._embed_next(self.batch_size, timeout=0.0)
            if taken is None or taken > 0:
                return None if taken is None else True
            return self._file_tail_batch() > 0
        finally:
            self._work_lock.release()

    def embed_pending(
        self,
        limit: int,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        batch_size: int | None = None,
    ) -> int:
        """Embed about ``limit`` pending messages on this thread; returns how many were taken
        (0: nothing is pending).

        They are embedded ``batch_size`` (default: this memory's) at a time, shortest texts
        of a window first, each batch stored before the next; a stop, or the ``deadline`` (a
        ``time.monotonic()`` value) passing, ends the call after the batch in hand.
        """
        if not self._work_lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            return 1  # the worker holds the lock and is making progress: the caller loops
        try:
            done = 0
            while done < limit:
                if done and (
                    self._stop.is_set() or (deadline is not None and time.monotonic() >= deadline)
                ):
                    break  # what is stored stays stored; the rest is still pending
                taken = self._embed_next(batch_size or self.batch_size, timeout)
                if taken is None:
                    return max(done, 1)  # another process is embedding a batch: the caller loops
                if taken == 0:
                    break
                done += taken
            return done
        finally:
            self._work_lock.release()

    def _embed_next(self, batch_size: int, timeout: float | None) -> int | None:
        """Embed and store the next batch of the window (read again from the store when it
        is used up); returns the rows taken (0: nothing is pending), or None when another
        process holds the database's embedding lock. Caller holds ``_work_lock``."""
        with self._embedding_turn(timeout) as turn:
            if not turn:
                return None
            if not self._window:
                self._read_window()
            taken = [self._window.popleft() for _ in range(min(batch_size, len(self._window)))]
            if not taken:
                return 0
            batch = taken
            if self.stored is not None and self._batch_lock is not None:
                # Another process may have embedded some since the window was read.
                left = self.stored.without_vectors([int(m.id or 0) for m, _ in taken])
                batch = [pair for pair in taken if int(pair[0].id or 0) in left]
            if batch:
                self._embed_batch([m for m, _ in batch], [t for _, t in batch], self._owners)
                for listener in list(self._listeners):
                    listener(len(batch))
            return len(taken)

    def _read_window(self) -> None:
        """Read up to ``window`` pending messages, shortest embedding text first (each batch
        then holds texts of about one length)."""
        pending = self.store.run(ops.pending_embeddings(self.window, self._passed_over))
        texts = [
            embedding_text(message, context, with_context=self.embed_context)
            for message, context in pending
        ]
        # Characters stand in for tokens: close enough to keep each batch's padding small,
        # and known without the model's tokenizer (any embedder works this way).
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        self._window = deque((pending[i][0], texts[i]) for i in order)
        self._owners = {}  # each session's owner, read once per window

    def _passed_over(self, error: CorruptRowError) -> None:
        self._log_once(
            f"corrupt-{error.row_id}", f"{self.store.location}: a message is not embedded: {error}"
        )

    def _not_filed(self, error: CorruptRowError) -> None:
        self._log_once(
            f"corrupt-vector-{error.row_id}",
            f"{self.store.location}: a stored vector is not filed into the index: {error}",
        )

    @contextlib.contextmanager
    def _embedding_turn(self, timeout: float | None) -> Iterator[bool]:
        """Hold the database's embedding lock for one batch (see :meth:`_batch_lock`)."""
        lock = self._batch_lock
        if lock is None:
            yield True
            return
        from filelock import FileLock, Timeout

        if self._batch_lock_pid != os.getpid():
            # A forked child (flush() on a manager it inherited): a file lock belongs to the
            # process that made it (filelock refuses one inherited across fork), so make ours.
            lock = FileLock(lock.lock_file, mode=0o600, thread_local=False)
            self._batch_lock, self._batch_lock_pid = lock, os.getpid()

        try:
            lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0))
        except Timeout:
            yield False
            return
        except OSError as exc:  # a read-only folder: the store refuses the writes anyway
            self._log_once(
                "batch-lock", f"embedding without the batch lock: {exc}", level=logging.DEBUG
            )
            yield True
            return
        try:
            yield True
        finally:
            lock.release()

    def _embed_batch(
        self, messages: list[Message], texts: list[str], owners: dict[str, str | None]
    ) -> None:
        """Embed one batch and store it: index first, flag second (see the module docstring).

        ``owners`` caches each session's owner (read once per session and window).
        """
        vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        if vectors.shape != (len(messages), self.embedder.dimension):
            raise EmbeddingError(
                f"{self.embedder.name} returned shape {vectors.shape} for {len(messages)} "
                f"texts; expected ({len(messages)}, {self.embedder.dimension})."
            )
        ids = [int(message.id or 0) for message in messages]
        metas = []
        for mid, message in zip(ids, messages, strict=True):
            sid = message.session_id or ""
            if sid not in owners:
                session = self.store.run(ops.get_session(sid))
                owners[sid] = session.user_id if session is not None else None
            created = to_micros(message.created_at)
            metas.append(index_metadata(mid, sid, owners[sid], message.role, created))
        if self.stored is None:
            # Postgres: pgvector writes the vectors and the flag in one transaction; any
            # other index is written first and flagged second (a crash re-embeds).
            index = self.index
            if index is None:
                raise VectorIndexError(f"{self.store.location}: the vector index is closed.")
            index.upsert(ids, vectors, metas)
            self.store.run(ops.mark_embedded(ids))
            return
        # Where the stored vectors are the index, storing one is indexing it.
        indexed = self.in_database or self._upsert(ids, vectors, metas)
        users = [meta.get("user_id") for meta in metas] if indexed else None
        stored = self.stored.write(ids, vectors, users)
        if indexed and not self.in_database and stored < len(ids):
            # Some messages were deleted while the batch was embedded, and their delete
            # dropped its vectors from the index before this upsert filed them again: drop
            # them now (deleted means gone, from the index too, not just at the next check).
            self.forget_messages(ids)

    def forget_messages(self, ids: Sequence[int]) -> None:
        """Remove deleted messages' vectors from the index (those of ``ids`` that are gone
        from the store: an id of another session was not deleted and keeps its vector)."""
        index = self.index
        if index is None or not len(ids):
            return
        kept = {m.id for m in self.store.run(ops.get_messages_by_ids(ids))}
        gone = sorted({int(i) for i in ids} - kept)
        try:
            index.delete(gone)
        except INDEX_FAILURES as exc:
            self._log_once("forget", f"could not drop deleted messages from the index: {exc}")

    def sync_tail(self, *, advance: Callable[[int], None] | None = None) -> int:
        """File every stored vector the index lacks (this process must hold the index)."""
        stored = self.stored
        if stored is not None and self.in_database:
            return stored.settle_tail()
        if stored is None or self.index is None:
            return 0
        with self._work_lock:
            copied, after = 0, 0
            while not self._stop.is_set():
                ids, vectors, metas, last = stored.tail(after, TAIL_BATCH, self._not_filed)
                if last == after:
                    break
                after = last
                if not ids:  # (only unreadable vectors, passed over: read on past them)
                    continue
                if not self._upsert(ids, vectors, metas):
                    break
                stored.mark_indexed(ids, [meta.get("user_id") for meta in metas])
                copied += len(ids)
                if advance is not None:
                    advance(len(ids))
            return copied

    def _file_tail_batch(self) -> int:
        """One step of :meth:`sync_tail`: file up to ``TAIL_BATCH`` stored vectors the index
        lacks; returns how many (0 when none are left, or the index refused them)."""
        stored = self.stored
        if stored is not None and self.in_database:
            return stored.settle_tail()
        if stored is None or self.index is None:
            return 0
        after = 0
        while True:
            ids, vectors, metas, last = stored.tail(after, TAIL_BATCH, self._not_filed)
            if ids or last == after:
                break
            after = last  # a batch of only unreadable vectors, passed over: read on past it
        if not ids or not self._upsert(ids, vectors, metas):
            return 0
        stored.mark_indexed(ids, [meta.get("user_id") for meta in metas])
        return len(ids)

    def pending_count(self) -> int:
        """Messages committed but not embedded yet (a stored vector counts as embedded)."""
        return int(self.store.run(ops.pending_count()))

    def backfill(self, batch_size: int = 100, *, progress: Progress = True) -> int:
        """Embed every pending message in batches of ``batch_size``; returns the count.

        ``progress``: a bar by default (see :mod:`harombe_core.progress`).
        """
        check_batch_size(batch_size)
        total = self.pending_count()
        done = 0
        with (
            progress_reporter(progress, total, desc="embedding") as advance,
            self._listening(advance),
        ):
            while True:
                count = self.embed_pending(max(self.window, batch_size), batch_size=batch_size)
                if count == 0:
                    break
                done += count
        with self._work_lock:
            self._check_index()
            self.sync_tail()
        return done

    def _file_tail_with_progress(self, progress: Progress) -> None:
        if self.stored is None:
            return
        total = 0 if silent(progress) else self.stored.tail_count()
        with progress_reporter(progress, total, desc="indexing", unit="vec") as advance:
            self.sync_tail(advance=advance)
