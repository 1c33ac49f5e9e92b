"""HarombeSaver: a LangGraph checkpointer in the harombe database, whose threads are sessions.

``create_agent(model, tools, checkpointer=HarombeSaver(mm))`` (or any
``StateGraph.compile(checkpointer=...)``) keeps every checkpoint of every thread in the same
SQLite file or PostgreSQL database as the conversations, and resumes threads in any process.
It implements all of ``BaseCheckpointSaver``, ``copy_thread``, ``delete_for_runs`` and ``prune``
included, with sync methods and async twins (each store operation of an async twin takes the
library's one thread hop, as every async store call does).

Going beyond a checkpointer: the messages of a thread are also a harombe session
=================================================================================

A thread is the harombe session of the same id, owned by the ``user_id`` of the run that made
its first checkpoint (``config["configurable"]["user_id"]``, else the ``user_id`` of the run's
runtime context, as ``HarombeMemoryMiddleware`` reads it). The session holds the messages of
the thread's newest checkpoint (main namespace) as ordinary harombe messages, so they are
searchable by keyword and meaning, windowed, threaded, summarised, exportable, visible to
``harombe sessions``/``history``/``search``, recalled by ``HarombeMemoryMiddleware`` in the user's
other threads and counted by ``MemoryManager.stats()``.

Why this is stored twice without ever disagreeing:

* **One truth, one projection.** The checkpoint is the source of truth: its messages are stored
  (once per message, see :mod:`~langchain_harombe.checkpoint_rows`) exactly as LangGraph's serde
  writes them, and every read of a checkpoint returns them from there. The session is a
  projection of one checkpoint: the thread's newest in the main namespace.
* **Same transaction.** A put that makes a checkpoint the thread's newest rewrites the session in
  its own transaction (:mod:`~langchain_harombe.checkpoint_mirror`), so no reader, process or
  crash ever sees a checkpoint committed without its session, or the reverse. Everything else
  that can change which checkpoint is newest does the same: ``delete_for_runs`` (the session
  follows the newest checkpoint left), ``copy_thread`` (the copy gets its own session),
  ``prune`` (the newest is kept, so the session stands; ``strategy="delete"`` deletes it) and
  ``delete_thread`` (the session is deleted). Forks, ``RemoveMessage``, edits by message id
  and rollbacks are just new heads whose message list differs.
* **Derived by identity, not by replay.** The session is computed from the head's list of
  message hashes against the hashes it records for its rows, so it does not matter how the list
  changed (reducers, forks, ``update_state``): the result is that list. Deleting the session (or
  its messages) with harombe, or adding messages to it some other way, is detected by its
  message count and the next checkpoint repairs the projection.
* **Cheap.** The common step (messages appended) is found by a prefix comparison of two
  references blobs and costs only the new messages, whatever the length of the thread.
* **Lossless where it matters.** A message harombe cannot store as it is (NUL bytes, beyond the
  size limit, non-JSON extras) is kept in the session in a storable form, marked in its metadata;
  the checkpoint keeps it whole.

Deleting a thread's session with harombe (``harombe sessions``, ``prune_old_sessions``) deletes its
checkpoints too: a thread and its session are one thing. A session belongs to one user, and the
saver, like every adapter, acts for the run's user (``configurable["user_id"]``, else the
runtime context's ``user_id`` during a run; a call from outside a run, such as ``get_state``, has
no runtime context, so it names the user in ``configurable``): a call (run, ``get_state``,
``update_state``...) naming another user, or naming none on a user's thread, is refused with
:class:`~harombe_core.errors.SessionOwnershipError` before anything is read or written. The
configs it hands back (``get_state_history``, time travel) name the thread's owner, so they act
for that user. Calls that take no config (``delete_thread``, ``copy_thread``, ``prune``,
``delete_for_runs``) are the application's own; ``list`` without a thread lists every thread, or
the named user's.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from functools import partial
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from harombe_core import MemoryManager
from harombe_core.errors import InvalidInputError
from harombe_core.integration import (
    SESSIONS,
    AllowList,
    Body,
    ClosesOnExit,
    SqlRunner,
    SummaryFolder,
    Work,
    items,
    pending,
    sql_runner,
)
from harombe_core.validate import keywords_checked
from langchain_harombe._opened import Opened, Ready
from langchain_harombe.checkpoint_mirror import (
    Head,
    convert_ahead,
    convert_with,
    mirror_from_json,
)
from langchain_harombe.checkpoint_rows import (
    BlobCache,
    PutPlan,
    assemble,
    checked_id,
    checked_namespace,
    checkpoint_config,
    checkpoint_id_of,
    config_user,
    plan_put,
    thread_key,
)
from langchain_harombe.checkpoint_serde import HarombeSerializer
from langchain_harombe.checkpoint_sql import CheckpointTables, Loaded
from langchain_harombe.history import resolve_manager

__all__ = ["HarombeSaver"]

#: Checkpoints read per statement when listing.
_PAGE = 64

#: Seconds a thread's session waits to be written after the put that made it owed, so that
#: the puts of a turn or several (one every few milliseconds) become one background job.
#: Reads of this process never wait for it: they write what is owed first.
MIRROR_LINGER = 0.1


#: The type a channel without a stored blob is remembered with (LangGraph's own savers write
#: such channels as rows of this type with no blob).
_NO_BLOB = "empty"


def _now() -> int:
    return time.time_ns() // 1000


def _epoch() -> str:
    """A new blob epoch: 128 random bits (as a uuid4, without building one on every put)."""
    return os.urandom(16).hex()


class HarombeSaver(ClosesOnExit, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on a harombe database (SQLite or PostgreSQL).

    Args:
        manager: The application's :class:`~harombe_core.MemoryManager`: checkpoints live in its
            database and threads' messages become its sessions (embedded in the background when
            it has semantic memory), or
        storage_path: a database path or ``postgresql://`` URL (the saver then opens its own
            manager, without semantic memory unless ``manager_options`` says otherwise).
        serde: LangGraph serializer (default: :class:`~langchain_harombe.checkpoint_serde.
            HarombeSerializer`, which revives only LangGraph's own types and allowed ones; a
            serializer passed here is used as it is, LangGraph's permissive one included).
        allowed_msgpack_modules: Types of the application's own state to revive besides
            LangGraph's, as ``(module, name)`` pairs or classes (LangGraph's name for it; see
            ``docs/checkpoint-safety.md``). Any other type a stored row names is refused with
            :class:`~harombe_core.errors.UnsafeCheckpointError`.
        messages_key: The channel whose message list is the thread's conversation.
        cache_bytes: Bound of the in-process memory of serialised messages (shared by threads).
    """

    @keywords_checked
    def __init__(
        self,
        manager: MemoryManager | None = None,
        *,
        storage_path: str | os.PathLike[str] | None = None,
        serde: SerializerProtocol | None = None,
        allowed_msgpack_modules: AllowList = None,
        messages_key: str = "messages",
        manager_options: dict[str, Any] | None = None,
        cache_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        if serde is not None and allowed_msgpack_modules is not None:
            raise InvalidInputError(
                "pass allowed_msgpack_modules to your serializer, not beside it: "
                "HarombeSaver(serde=HarombeSerializer(allowed_msgpack_modules=[...]))."
            )
        super().__init__(
            serde=serde or HarombeSerializer(allowed_msgpack_modules=allowed_msgpack_modules)
        )
        if not isinstance(messages_key, str) or not messages_key:
            raise InvalidInputError("messages_key must be a non-empty str (a channel name).")
        # A checkpointer's own manager stays keyword-only unless asked: a graph step must not
        # wait for a model to load (the application's manager, passed as ``manager``, decides).
        self.manager, self._owns_manager = resolve_manager(
            manager, storage_path, manager_options, owner="HarombeSaver",
            defaults={"embedding": None},
        )
        try:
            self._runner: SqlRunner = sql_runner(self.manager.store)
        except InvalidInputError:
            if self._owns_manager:
                self.manager.close()
            raise InvalidInputError(
                "HarombeSaver keeps checkpoints in SQLite or PostgreSQL; "
                f"{type(self.manager.store).__name__} is not supported. Use a SQLite database "
                "path or a postgresql:// URL."
            ) from None
        self.messages_key = messages_key
        self._cache = BlobCache(cache_bytes)
        self._tables = self._make_tables()
        # Threads' sessions are written by a background job after their checkpoints (see
        # checkpoint_mirror): the newest head each put had in memory, the jobs, and the
        # database's reads made to apply what is owed first.
        self._heads: dict[str, Head] = {}
        self._heads_lock = threading.Lock()
        self._mirrors = SummaryFolder(
            self._mirror_step, linger=MIRROR_LINGER, priority=SESSIONS, drain_at_exit=True
        )
        self._unregister = pending.register(self.manager.store.location, self._mirrors.drain)
        if not getattr(self.manager.store, "read_only", False):  # (nothing can be written)
            for thread_id in self._runner.read(self._tables.due):  # owed by a dead process
                self._mirrors.request(thread_id, 0)

    @classmethod
    def from_conn_string(cls, conn_string: str, **options: Any) -> Opened[HarombeSaver]:
        """A saver on its own manager for a database path or ``postgresql://`` URL, closed on
        exit: ``with`` as LangGraph's ``SqliteSaver.from_conn_string``, or ``async with`` as
        ``AsyncSqliteSaver``'s (one saver does both)."""
        return Opened(partial(cls, storage_path=conn_string, **options))

    def setup(self) -> Ready:
        """Nothing to do: the tables are created by the database's schema migrations when it
        is opened. (Kept so code written for LangGraph's savers runs unchanged: ``setup()``,
        or ``await setup()`` as for ``AsyncSqliteSaver``.)"""
        return Ready()

    def _make_tables(self) -> CheckpointTables:
        return CheckpointTables(
            self._runner,
            self.serde,
            self._cache,
            convert_with(self.manager.token_counter),
            self.messages_key,
        )

    def with_allowlist(self, extra_allowlist: Any) -> HarombeSaver:
        """A clone whose serializer has a stricter msgpack allowlist (used by ``compile``)."""
        clone = super().with_allowlist(extra_allowlist)
        assert isinstance(clone, HarombeSaver)
        if clone is not self:
            clone._tables = clone._make_tables()
        return clone

    # put ----------------------------------------------------------------------------------
    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (and, if it is the thread's newest, its messages in the thread's
        session) in one transaction. Raises SessionOwnershipError for another user's thread."""
        plan = plan_put(self.serde, self._cache, config, checkpoint, metadata, new_versions)
        result = self._runner.run(
            lambda: self._tables.put(plan, _now(), _epoch), exactly_once=True,
            adds_messages=False, text_free=True,  # (a blob epoch and flags)
        )
        return self._after_put(plan, result)

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        plan = plan_put(self.serde, self._cache, config, checkpoint, metadata, new_versions)
        try:
            result = await self._runner.arun(
                lambda: self._tables.put(plan, _now(), _epoch), exactly_once=True,
                adds_messages=False, text_free=True,
            )
        except asyncio.CancelledError:
            # The put's thread finished before the cancellation went on: if it committed,
            # the thread's session is owed, so hand it to the job (which reads the newest
            # checkpoint back); else the job finds nothing to change.
            self._mirrors.request(plan.thread_id, 0)
            raise
        return self._after_put(plan, result)

    def _after_put(self, plan: PutPlan, result: dict[str, Any]) -> RunnableConfig:
        """What :meth:`put` and :meth:`aput` do once the transaction has committed: cache what
        it wrote, hand the thread's session to the background job if the checkpoint is the
        thread's newest, and answer the stored checkpoint's config."""
        # The channels it changed without a blob are known too, as absent (a value of None,
        # as a read that finds no blob makes of them), so a read of a later checkpoint that
        # still names their versions does not look for them.
        known = [
            (plan.namespace, channel, version, _NO_BLOB, None) for channel, version in plan.unstored
        ]
        if plan.blobs_stored():  # its blobs, unless one was stored before (then read them)
            known += [(plan.namespace, *blob) for blob in plan.blobs]
        self._cache.remember_put(
            plan.thread_id, result["epoch"], plan.written, plan.head_hashes(self.messages_key),
            known, plan.checkpoint_id if result["head"] else None,
        )
        if result["head"]:
            head = self._tables.plan_head(plan)
            with self._heads_lock:
                known = self._heads.get(plan.thread_id)
                if known is None or known.checkpoint_id <= head.checkpoint_id:
                    self._heads[plan.thread_id] = head
            self._mirrors.request(plan.thread_id, 0)
        return _next_config(plan)

    def _mirror_step(self, thread_id: str, _: int) -> bool:
        """The background job of one thread: its session made to hold its newest checkpoint's
        messages (from the head a put left in memory when it is still the newest)."""
        with self._heads_lock:
            head = self._heads.pop(thread_id, None)
        self._cache.mirrored(thread_id)  # (its transaction clears the session's owed mark)
        converted = convert_ahead(self._cache.mirror(thread_id), head, self._tables.convert)
        result, removed = self._runner.run(
            lambda: self._tables.mirror(thread_id, head, converted), exactly_once=True
        )
        mirror = mirror_from_json(result)
        if mirror is not None:
            self._cache.set_mirror(thread_id, mirror)
            # Messages deleted (a RemoveMessage): erased from the files once deletions pause,
            # as after delete_thread.
            self.manager.notify_written(deleted_sessions=[thread_id] if removed else ())
        return False

    # put_writes ---------------------------------------------------------------------------
    def _writes_op(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
        task_path: str,
    ) -> Callable[[], Body[Any]] | None:
        """The tables' call that stores ``writes`` (``None`` when there are none), built once
        so :meth:`put_writes` runs it and :meth:`aput_writes` awaits the same."""
        if not writes:
            return None
        thread_id, namespace = thread_key(config)
        checkpoint_id = checkpoint_id_of(config)
        if not checkpoint_id:
            raise InvalidInputError(
                "put_writes needs the config of a stored checkpoint (with checkpoint_id)."
            )
        rows = [
            (task_id, WRITES_IDX_MAP.get(channel, idx), task_path, channel,
             *self.serde.dumps_typed(value))
            for idx, (channel, value) in enumerate(writes)
        ]
        replace_ = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        args = (thread_id, namespace, str(checkpoint_id), config_user(config), rows, replace_,
                _now())
        return lambda: self._tables.put_writes(*args)

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's intermediate writes for the checkpoint ``config`` names."""
        if (write := self._writes_op(config, writes, task_id, task_path)) is not None:
            self._runner.run(write, exactly_once=True, adds_messages=False, first_alone=True)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
        task_path: str = "",
    ) -> None:
        if (write := self._writes_op(config, writes, task_id, task_path)) is not None:
            await self._runner.arun(
                write, exactly_once=True, adds_messages=False, first_alone=True
            )

    # reads --------------------------------------------------------------------------------
    def _get_args(self, config: RunnableConfig) -> tuple[str, str, str | None, str | None]:
        thread_id, namespace = thread_key(config)
        return thread_id, namespace, checkpoint_id_of(config), config_user(config)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (or the thread's newest), with its pending writes."""
        args = self._get_args(config)
        loaded = self._runner.read_one(lambda: self._tables.get(*args))
        return self._assemble(loaded[0]) if loaded else None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        args = self._get_args(config)
        loaded = await self._runner.aread_one(lambda: self._tables.get(*args))
        return self._assemble(loaded[0]) if loaded else None

    def _assemble(self, item: Loaded) -> CheckpointTuple:
        if item.fetched:
            self._cache.remember(item.row[0], [(h, *pair) for h, pair in item.fetched.items()])
        return assemble(self.serde, item.row, item.checkpoint, item.blobs, item.refs,
                        item.messages, item.writes)

    def _listing(
        self, config: RunnableConfig | None, filter: dict[str, Any] | None,
        before: RunnableConfig | None, limit: int | None,
    ) -> _Listing:
        """The pages :meth:`list` reads and :meth:`alist` awaits, built once for both."""
        filters: dict[str, str] = {}
        if config is not None:
            configurable = config.get("configurable") or {}
            if configurable.get("thread_id") is not None:
                filters["thread_id"] = checked_id(configurable["thread_id"], "thread_id")
            if configurable.get("checkpoint_ns") is not None:
                filters["checkpoint_ns"] = checked_namespace(configurable["checkpoint_ns"])
            if checkpoint_id := checkpoint_id_of(config):
                filters["checkpoint_id"] = checkpoint_id
        if before is not None and (before_id := checkpoint_id_of(before)):
            filters["before"] = before_id
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidInputError(f"limit must be an int or None, got {limit!r}.")
        matches = None
        if filter:
            wanted = dict(filter)

            def matches(metadata: dict[str, Any]) -> bool:
                # A key as written, else a dotted path into nested metadata (as SqliteSaver
                # reads it; InMemorySaver and PostgresSaver match keys as written).
                return all(items.filter_field(metadata, k) == v for k, v in wanted.items())

        return _Listing(self._tables, filters, matches, limit, config_user(config))

    def list(
        self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None, limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of a thread (and namespace) if ``config`` names one,
        whose metadata has every ``filter`` item, older than ``before``, at most ``limit``."""
        listing = self._listing(config, filter, before, limit)
        while (page := listing.next_page()) is not None:
            for item in listing.take(*self._runner.read(page)):
                yield self._assemble(item)

    async def alist(
        self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None, limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        listing = self._listing(config, filter, before, limit)
        while (page := listing.next_page()) is not None:
            for item in listing.take(*await self._runner.aread(page)):
                yield self._assemble(item)

    # deleting, copying, pruning -----------------------------------------------------------
    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread: its checkpoints, writes and its session (messages included)."""
        key = checked_id(thread_id, "thread_id")
        deleted = self._runner.run(lambda: self._tables.delete_threads([key]), exactly_once=True)
        self._forget(deleted)

    async def adelete_thread(self, thread_id: str) -> None:
        # The delete and what follows its commit (the cache, the index's vectors) in one
        # thread hop, which a cancelled caller waits for: a delete that committed is always
        # followed through (as the manager's adelete_session).
        await Work(self.delete_thread, thread_id).arun()

    def _forget(self, thread_ids: Sequence[str]) -> None:
        self._cache.forget(thread_ids)
        if thread_ids:
            self.manager.notify_written(deleted_sessions=thread_ids)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints and writes these runs made; each affected thread's session
        then holds the messages of its newest remaining checkpoint (or is deleted with it)."""
        runs = _run_ids(run_ids)
        if not runs:
            return
        emptied, mirrors = self._runner.run(
            lambda: self._tables.delete_runs(runs, _epoch()), exactly_once=True
        )
        self._after_rewrite(emptied, mirrors)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await Work(self.delete_for_runs, run_ids).arun()  # one hop (see adelete_thread)

    def _after_rewrite(self, emptied: Sequence[str], mirrors: dict[str, Any]) -> None:
        for thread_id, mirror in mirrors.items():
            state = mirror_from_json(mirror)
            if state is not None:
                self._cache.set_mirror(thread_id, state)
        self._forget(emptied)
        if mirrors:
            self.manager.notify_written()

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to another, whose session then holds
        the copy's messages. The target belongs to the source's owner."""
        source = checked_id(source_thread_id, "source_thread_id")
        target = checked_id(target_thread_id, "target_thread_id")
        result = self._runner.run(
            lambda: self._tables.copy(source, target, _now(), _epoch()), exactly_once=True
        )
        self._after_rewrite([], {target: result["mirror"]})

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        # One hop (see adelete_thread): a copy that committed always has its session written.
        await Work(self.copy_thread, source_thread_id, target_thread_id).arun()

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep the newest checkpoint of each namespace (and drop blobs no
        checkpoint needs any more); ``"delete"``: delete the threads (see delete_thread)."""
        threads = _thread_ids(thread_ids, strategy)
        if not threads:
            return
        if strategy == "delete":
            deleted = self._runner.run(
                lambda: self._tables.delete_threads(threads), exactly_once=True
            )
            self._forget(deleted)
            return
        self._runner.run(lambda: self._tables.prune(threads, _epoch()), exactly_once=True)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await Work(self.prune, thread_ids, strategy=strategy).arun()  # one hop (adelete_thread)

    # the session of a thread ------------------------------------------------------------
    def records_session(self, manager: MemoryManager, thread_id: Any, session_id: str) -> bool:
        """Whether this saver records thread ``thread_id``'s messages into session
        ``session_id`` of ``manager``'s database (so whoever asks need not save them too)."""
        if thread_id is None or str(thread_id) != session_id:
            return False
        mine, theirs = self.manager.store, manager.store
        return mine is theirs or (mine.location == theirs.location != ":memory:")

    # versions and lifecycle ---------------------------------------------------------------
    def get_next_version(self, current: str | None, channel: None) -> str:
        """A version that sorts after ``current``, with a random part so that two forks of a
        thread never give different values one version (blobs are keyed by version)."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    def flush(self) -> None:
        """Write every thread's session that this saver's puts still owe (reads of this
        process do so by themselves; ``MemoryManager.flush()`` does it too)."""
        self._mirrors.drain()

    async def __aenter__(self) -> HarombeSaver:
        """``async with HarombeSaver(...) as saver:`` as LangGraph's ``InMemorySaver`` allows
        (``with`` works too); leaving closes the saver off the event loop."""
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await Work(self.close).arun()  # one hop: close drains the sessions owed

    def close(self) -> None:
        """Write the sessions still owed, then close the manager if this saver opened it from
        ``storage_path``."""
        self._mirrors.drain()
        self._mirrors.close()
        self._unregister()
        if self._owns_manager:
            self.manager.close()


class _Listing:
    """Where a listing stands: the next page to read (None when done) and what to yield."""

    def __init__(
        self,
        tables: CheckpointTables,
        filters: dict[str, str],
        matches: Callable[[dict[str, Any]], bool] | None,
        limit: int | None,
        user_id: str | None,
    ) -> None:
        self.tables, self.filters, self.matches, self.user_id = tables, filters, matches, user_id
        self.left = limit
        self.cursor: tuple[str, str, str] | None = None
        self.done = False

    def next_page(self) -> Callable[[], Body[tuple[list[Loaded], Any]]] | None:
        if self.done or (self.left is not None and self.left <= 0):
            return None
        whole = self.left is None or self.matches is not None
        size = _PAGE if whole else min(self.left or 0, _PAGE)
        return partial(self.tables.page, self.filters, self.cursor, size, self.matches,
                       self.user_id)

    def take(self, page: list[Loaded], cursor: tuple[str, str, str] | None) -> list[Loaded]:
        self.cursor, self.done = cursor, cursor is None
        kept = page if self.left is None else page[: self.left]
        if self.left is not None:
            self.left -= len(kept)
        return kept


def _next_config(plan: PutPlan) -> RunnableConfig:
    return checkpoint_config(plan.thread_id, plan.namespace, plan.checkpoint_id, plan.user_id)


def _run_ids(run_ids: Sequence[str]) -> list[str]:
    if isinstance(run_ids, (str, bytes)):
        raise InvalidInputError("run_ids must be a list of run ids, not one str.")
    return [checked_id(r, "run_id") for r in run_ids]


def _thread_ids(thread_ids: Sequence[str], strategy: str) -> list[str]:
    if strategy not in ("keep_latest", "delete"):
        raise InvalidInputError(
            f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'."
        )
    if isinstance(thread_ids, (str, bytes)):
        raise InvalidInputError("thread_ids must be a list of thread ids, not one str.")
    return [checked_id(t, "thread_id") for t in thread_ids]

