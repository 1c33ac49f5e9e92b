"""The worker of semantic memory: it embeds pending messages and keeps the index in step.

:class:`EmbeddingWorker` is the part of :class:`~harombe_core.vectors.indexer.SemanticMemory`
that runs on its background thread (and in ``flush``/``backfill``): it opens and checks the
index, embeds what the store says is pending, a window of texts of about one length at a
time, and files vectors stored by other processes (the tail) into the index. The rules it
keeps (index first, flag second; one owner per embedded folder) are described in
:mod:`harombe_core.vectors.indexer`.

**Exit.** The worker is a daemon thread, so a program that never closes its memory (a script,
a notebook, a CI job) still exits. But a daemon thread that is inside native code (ONNX
Runtime, the tokenizers, Chroma) while the interpreter finalises is ended by force when it
comes back for the GIL, and unwinding C++ or Rust frames that way aborts the whole process
("terminate called without an active exception", exit code 134). So every running worker is
stopped and joined when the interpreter starts to shut down (:func:`stop_workers_at_exit`,
run before the ``atexit`` handlers and before any module is torn down): it finishes the batch
in hand, within :data:`EXIT_WAIT` seconds, and the messages still pending are embedded by the
next process that opens the store.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from harombe_core.errors import (
    EmbeddingError,
    EmbeddingModelMismatchError,
    InvalidInputError,
    StoreError,
    StoreReadOnlyError,
    VectorIndexBusyError,
    VectorIndexError,
)
from harombe_core.models import Message
from harombe_core.progress import Progress, progress_reporter, silent
from harombe_core.store import ops
from harombe_core.store.base import MessageStore
from harombe_core.store.sqlite import to_micros
from harombe_core.vectors.base import FloatArray, VectorIndex
from harombe_core.vectors.stored import StoredVectors, index_metadata

if TYPE_CHECKING:
    from harombe_core.embeddings.base import Embedder

__all__ = ["EmbeddingWorker", "check_batch_size", "embedding_text", "stop_workers_at_exit"]

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


#: Seconds the interpreter waits at exit for running workers to finish the batch in hand (a
#: batch takes well under a second; a model being converted on the worker a few seconds).
EXIT_WAIT = 30.0

_running: dict[threading.Thread, EmbeddingWorker] = {}
_running_lock = threading.Lock()
_exit_hook = False


def _track(worker: EmbeddingWorker) -> None:
    """Note the calling thread as a running worker, to be stopped before the interpreter
    finalises (see the module docstring)."""
    global _exit_hook
    with _running_lock:
        _running[threading.current_thread()] = worker
        if not _exit_hook:
            # threading's own exit hooks run first at shutdown, before atexit handlers (some
            # of which tear down native libraries) and before daemon threads are cut off.
            register = getattr(threading, "_register_atexit", None)
            try:
                (register or atexit.register)(stop_workers_at_exit)
            except RuntimeError:  # the interpreter is already shutting down
                atexit.register(stop_workers_at_exit)
            _exit_hook = True


def _untrack() -> None:
    with _running_lock:
        _running.pop(threading.current_thread(), None)


def stop_workers_at_exit(wait: float = EXIT_WAIT) -> None:
    """Stop every running worker of this process and join it, waiting at most ``wait`` seconds
    in all; called when the interpreter shuts down. Pending messages stay pending."""
    with _running_lock:
        running = list(_running.items())
    for _thread, worker in running:
        worker._stop.set()
        worker._wake.set()
    deadline = time.monotonic() + wait
    for thread, _worker in running:
        thread.join(max(deadline - time.monotonic(), 0.0))
        if thread.is_alive():
            log.warning(
                "the embedding worker did not stop within %.0f s of exit; its batch is left "
                "pending for the next open",
                wait,
            )


def _forget_workers_in_child() -> None:
    """A forked child has none of its parent's threads (and a lock held by one stays held)."""
    global _running_lock
    _running_lock = threading.Lock()
    _running.clear()


os.register_at_fork(after_in_child=_forget_workers_in_child)


def check_batch_size(batch_size: Any) -> None:
    """Refuse a batch size that is not a positive int, before any work starts."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive int, got {batch_size!r}.")


class EmbeddingWorker:
    """Embedding and index upkeep of :class:`~harombe_core.vectors.indexer.SemanticMemory`,
    which sets the state below and runs these methods on its worker thread."""

    store: MessageStore
    embedder: Embedder
    index: VectorIndex | None
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
    _wake: threading.Event
    _stop: threading.Event
    _batch_lock: Any
    _next_open_attempt: float
    _logged: set[str]
    _listeners: list[Callable[[int], None]]

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

    def _run(self) -> None:
        _track(self)
        try:
            self._loop()
        finally:
            _untrack()

    def _loop(self) -> None:
        wait = self.poll
        while not self._stop.is_set():
            try:
                self._cycle()
                wait = self.poll
            except Exception as exc:  # logged and kept: flush() raises it to the caller
                self.last_error = exc
                self._log_once(
                    f"worker:{type(exc).__name__}",
                    f"background embedding failed, will retry: {exc}",
                )
                # A failing model or server is not asked again every poll: back off (a new
                # message still wakes the worker at once).
                wait = None if wait is None else min(max(wait * 2, 1.0), MAX_BACKOFF)
            if self._wake.wait(wait):
                # Messages usually arrive one by one; lingering a moment lets a batch gather,
                # so the model runs once per batch instead of once per message.
                self._stop.wait(self.linger)
            self._wake.clear()

    def _cycle(self) -> None:
        """One round of the worker: own the index if free, check it, embed, file the tail."""
        due = time.monotonic() >= self._next_open_attempt
        if self.index is None and self.open_index is not None and due:
            self.try_open_index()
        with self._work_lock:
            self._check_index()
        while not self._stop.is_set() and self.embed_pending(self.window) > 0:
            pass
        if not self._stop.is_set():
            with self._work_lock:
                self.sync_tail()

    def embed_pending(
        self,
        limit: int,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        batch_size: int | None = None,
    ) -> int:
        """Embed up to ``limit`` pending messages; returns how many were embedded.

        They are embedded ``batch_size`` (default: this memory's) at a time, shortest texts
        first, each batch stored before the next; a stop, or the ``deadline`` (a
        ``time.monotonic()`` value) passing, ends the call after the batch in hand.
        """
        if not self._work_lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            return 1  # the worker holds the lock and is making progress: the caller loops
        try:
            with self._embedding_turn(timeout) as turn:
                if not turn:
                    return 1  # another process is embedding a batch: the caller loops
                return self._embed_window(limit, batch_size or self.batch_size, deadline)
        finally:
            self._work_lock.release()

    @contextlib.contextmanager
    def _embedding_turn(self, timeout: float | None) -> Iterator[bool]:
        """Hold the database's embedding lock for one batch (see :meth:`_batch_lock`)."""
        lock = self._batch_lock
        if lock is None:
            yield True
            return
        from filelock import Timeout

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

    def _embed_window(self, limit: int, batch_size: int, deadline: float | None) -> int:
        """Embed and store up to ``limit`` pending messages, in batches of similar length."""
        pending = self.store.run(ops.pending_embeddings(limit))
        if not pending:
            return 0
        texts = [
            embedding_text(message, context, with_context=self.embed_context)
            for message, context in pending
        ]
        # Characters stand in for tokens: close enough to keep each batch's padding small,
        # and known without the model's tokenizer (any embedder works this way).
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        owners: dict[str, str | None] = {}
        done = 0
        for start in range(0, len(order), batch_size):
            if start and (
                self._stop.is_set() or (deadline is not None and time.monotonic() >= deadline)
            ):
                break  # what is stored stays stored; the rest is still pending
            chunk = order[start : start + batch_size]
            self._embed_batch([pending[i][0] for i in chunk], [texts[i] for i in chunk], owners)
            done += len(chunk)
            for listener in list(self._listeners):
                listener(len(chunk))
        return done

    def _embed_batch(
        self, messages: list[Message], texts: list[str], owners: dict[str, str | None]
    ) -> None:
        """Embed one batch and store it: index first, flag second (see the module docstring).

        ``owners`` caches each session's owner for the window (read once per session).
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
        self.stored.write(ids, vectors, users)

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
                ids, vectors, metas = stored.tail(after, TAIL_BATCH)
                if not ids:
                    break
                if not self._upsert(ids, vectors, metas):
                    break
                stored.mark_indexed(ids, [meta.get("user_id") for meta in metas])
                copied += len(ids)
                after = ids[-1]
                if advance is not None:
                    advance(len(ids))
            return copied

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
