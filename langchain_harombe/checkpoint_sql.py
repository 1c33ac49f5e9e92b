"""The checkpointer's statements, written once as SQL bodies for SQLite and PostgreSQL.

Each public method is a body (:mod:`harombe_core.store.sql_body`): a generator of ``?``
statements that the store's runner executes in one transaction, so a put writes its blobs, its
checkpoint row and the session's new messages together or not at all, with the store's locking,
retries and error types (and exactly once on PostgreSQL). Bodies that only read run in one
snapshot. Nothing here serialises or deserialises values beyond a checkpoint's own small row
(:mod:`langchain_harombe.checkpoint_rows` does that before and after the transaction).

A thread is the session of the same id, so writes first create the session if needed (owned by
the run's user), then read it locked and check its owner: a saver acts for the run's user, so
a call naming another user, or none on a user's thread, is refused. That lock (``FOR NO KEY
UPDATE`` on PostgreSQL; SQLite's write transactions lock the file) orders two processes writing
one thread, as the row lock of ``add_messages`` does.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.serde.base import SerializerProtocol

from harombe_core.errors import InvalidInputError
from harombe_core.integration import Body, SqlRunner, StepResult, check_owner
from harombe_core.models import Message
from langchain_harombe.checkpoint_mirror import Head, Mirror, ThreadState, mirror_json, reconcile
from langchain_harombe.checkpoint_rows import (
    REFS_TYPE,
    UNDECODABLE,
    BlobCache,
    PutPlan,
    Serialised,
    load_messages,
    needed_blobs,
    split_refs,
    undecodable,
)

__all__ = ["CheckpointTables", "Loaded"]

_CHUNK = 200
#: Message blobs to read from which one pass over the thread's blobs is cheaper.
_SCAN_FROM = 256
_ROW = (
    "c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.metadata, "
    "c.type, c.checkpoint, s.user_id, t.blob_epoch"
)
_FROM = (
    "FROM checkpoints c JOIN sessions s ON s.id = c.thread_id "
    "LEFT JOIN checkpoint_threads t ON t.thread_id = c.thread_id"
)
_NEW_SESSION = (
    "INSERT INTO sessions (id, user_id, created_at, updated_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (id) DO NOTHING"
)
_STATE = (
    "SELECT s.user_id, s.message_count, (SELECT MAX(m.id) FROM messages m "
    "WHERE m.session_id = s.id), (SELECT MAX(c.checkpoint_id) FROM checkpoints c "
    "WHERE c.thread_id = s.id AND c.checkpoint_ns = ''), t.blob_epoch, "
    "EXISTS (SELECT 1 FROM checkpoint_mirror_due d WHERE d.thread_id = s.id) "
    "FROM sessions s LEFT JOIN checkpoint_threads t ON t.thread_id = s.id WHERE s.id = ?"
)
#: ``_STATE`` as a put needs it: the session's message count and newest message (which only the
#: background job that writes the session reads) as zeros.
_PUT_STATE = _STATE.replace(
    "s.message_count, (SELECT MAX(m.id) FROM messages m WHERE m.session_id = s.id)", "0, 0"
)
#: :meth:`CheckpointTables.get`'s two statements, a named checkpoint or the newest: its row
#: and whether it has pending writes (read by :data:`_GET_WRITES` only then: the read at the
#: start of an agent turn, of a checkpoint without any, stays one statement).
_HAS_WRITES = (
    "EXISTS (SELECT 1 FROM checkpoint_writes w WHERE w.thread_id = c.thread_id "
    "AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id)"
)
_OWNER = "SELECT user_id FROM sessions WHERE id = ?"
_GET_ONE = (
    f"SELECT {_ROW}, {_HAS_WRITES} {_FROM} WHERE c.thread_id = ? AND c.checkpoint_ns = ? "
    "AND c.checkpoint_id = ?"
)
_GET_NEWEST = (
    f"SELECT {_ROW}, {_HAS_WRITES} {_FROM} WHERE c.thread_id = ? AND c.checkpoint_ns = ? "
    "ORDER BY c.checkpoint_id DESC LIMIT 1"
)
_GET_WRITES = (
    "SELECT task_id, channel, type, blob FROM checkpoint_writes WHERE thread_id = ? "
    "AND checkpoint_ns = ? AND checkpoint_id = ? ORDER BY task_path, task_id, idx"
)
#: The checkpoint row a put writes, and what a put of the same checkpoint id replaces.
_CHECKPOINT_ROW = (
    "checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, "
    "checkpoint, metadata)"
)
_CHECKPOINT_CONFLICT = (
    "(thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
    "parent_checkpoint_id = excluded.parent_checkpoint_id, run_id = excluded.run_id, "
    "type = excluded.type, checkpoint = excluded.checkpoint, metadata = excluded.metadata"
)
_PUT_CHECKPOINT = (
    f"INSERT INTO {_CHECKPOINT_ROW} VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    f"ON CONFLICT {_CHECKPOINT_CONFLICT}"
)
#: :data:`_PUT_CHECKPOINT` if the thread is as this process's last put of it left it (see
#: :meth:`CheckpointTables.put`): its session is the run's user's, its blob epoch is the one
#: known, and (``_PUT_IF_DUE``) its session is still marked owed. It reads no checkpoint:
#: SQLite copies the rows of an INSERT whose SELECT reads its own table into a temporary table.
_PUT_IF = (
    f"INSERT INTO {_CHECKPOINT_ROW} SELECT ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM "
    "sessions s JOIN checkpoint_threads t ON t.thread_id = s.id WHERE s.id = ? AND "
    "s.user_id IS ? AND t.blob_epoch = ?){due} "
    f"ON CONFLICT {_CHECKPOINT_CONFLICT}"
)
_PUT_IF_DUE = _PUT_IF.format(
    due=" AND EXISTS (SELECT 1 FROM checkpoint_mirror_due d WHERE d.thread_id = ?)"
)
_PUT_IF = _PUT_IF.format(due="")
_MARK_DUE = (
    "INSERT INTO checkpoint_mirror_due (thread_id) VALUES (?) ON CONFLICT (thread_id) DO NOTHING"
)
_COPY = {
    "checkpoints": "checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, "
    "checkpoint, metadata",
    "checkpoint_blobs": "checkpoint_ns, channel, version, type, blob",
    "checkpoint_writes": "checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, "
    "type, blob",
    "checkpoint_message_blobs": "hash, type, blob",
}


@dataclass(slots=True)
class Loaded:
    """What one stored checkpoint needs to become a CheckpointTuple (see ``assemble``):
    its row and decoded checkpoint, channel blobs, the hashes of its message lists, message
    blobs by hash (``fetched``: those read from the database) and pending writes."""

    row: tuple[Any, ...]
    checkpoint: Checkpoint
    blobs: dict[tuple[str, str], tuple[str, bytes | None]] = field(default_factory=dict)
    refs: dict[tuple[str, str], list[bytes] | Serialised] = field(default_factory=dict)
    messages: Mapping[bytes, tuple[str, bytes]] = field(default_factory=dict)
    fetched: dict[bytes, tuple[str, bytes]] = field(default_factory=dict)
    writes: list[tuple[str, str, str, bytes]] = field(default_factory=list)


def _keys(keys: Sequence[tuple[Any, ...]]) -> str:
    """``keys`` as a table ``k`` (columns ``column1``...) to join on, so that each key is an
    index lookup (SQLite scans the whole table for a row-value ``IN (VALUES ...)``)."""
    row = "(" + ", ".join("?" * len(keys[0])) + ")"
    return f"(VALUES {', '.join([row] * len(keys))}) AS k"


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@functools.lru_cache(maxsize=256)
def _insert_sql(into: str, width: int, count: int, conflict: str) -> str:
    """The statement inserting ``count`` rows of ``width`` values (written once per shape: a
    put builds the same few every time)."""
    marks = "(" + ", ".join("?" * width) + ")"
    return f"INSERT INTO {into} VALUES {', '.join([marks] * count)} ON CONFLICT {conflict}"


_WRITES_INTO = (
    "checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, "
    "channel, type, blob)"
)
_WRITES_REPLACE = (
    "(thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET "
    "channel = excluded.channel, type = excluded.type, blob = excluded.blob, "
    "task_path = excluded.task_path"
)
_WRITES_KEEP = "(thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING"


@functools.lru_cache(maxsize=256)
def _owned_writes_sql(count: int, replace: bool, nobody: bool) -> str:
    """:meth:`CheckpointTables.put_writes`'s insert of ``count`` rows that go in only if the
    thread's session is the run's user's (``nobody``: owned by no one)."""
    marks = "(" + ", ".join("?" * 9) + ")"
    owned = "s.user_id IS NULL" if nobody else "s.user_id = ?"
    return (
        f"INSERT INTO {_WRITES_INTO} SELECT * FROM (VALUES {', '.join([marks] * count)}) "
        f"AS v WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.id = ? AND {owned}) "
        f"ON CONFLICT {_WRITES_REPLACE if replace else _WRITES_KEEP}"
    )


def _checkpoint_values(plan: PutPlan) -> tuple[Any, ...]:
    """The values of :data:`_CHECKPOINT_ROW` for ``plan``."""
    return (
        plan.thread_id,
        plan.namespace,
        plan.checkpoint_id,
        plan.parent_id,
        plan.run_id,
        plan.type,
        plan.checkpoint,
        plan.metadata,
    )


def _check_owner(owner: str | None, user_id: str | None, thread_id: str) -> None:
    """A call for ``user_id`` (``configurable["user_id"]``, None: for nobody) may use only a
    thread of that owner: a saver is an adapter acting for the run's user."""
    check_owner(thread_id, owner, user_id, exact=True)


@dataclass(frozen=True, eq=False)
class CheckpointTables:
    """Bodies over the checkpoint tables of one database (see the module docstring).

    It holds only its collaborators, fixed for its life: the runner of the database, the
    saver's serializer, blob cache and message converter, and the channel holding messages.
    """

    runner: SqlRunner
    serde: SerializerProtocol
    cache: BlobCache
    convert: Callable[[BaseMessage], Message]
    messages_key: str

    # writes -------------------------------------------------------------------------------
    def put(self, plan: PutPlan, now: int, new_epoch: Callable[[], str]) -> Body[dict[str, Any]]:
        """Store a checkpoint; when it becomes the thread's newest, mark its session owed.
        ``new_epoch()`` makes the blob epoch of a new thread (called only for one)."""
        step = self.runner.step
        thread_id = plan.thread_id
        known = self.cache.put_state(thread_id) if self.runner.writes_one_at_a_time else None
        if known is not None and (
            plan.namespace != "" or known.head_id is None or plan.checkpoint_id >= known.head_id
        ):
            # The common put, a step of a thread this process put before: the checkpoint row
            # goes in only if the thread is as that put left it, which its statement checks,
            # so the thread's state is not read. Else nothing went in: the full path below.
            due = known.due and plan.namespace == ""
            params = [*_checkpoint_values(plan), thread_id, plan.user_id, known.epoch]
            if due:
                params.append(thread_id)
            if (yield step(_PUT_IF_DUE if due else _PUT_IF, params)).rowcount:
                return (yield from self._put_blobs(plan, known.epoch, plan.namespace == "", due))
        # The thread's state read first, then plain inserts: a checkpoint row inserted with a
        # RETURNING of that state would be one statement less, but SQLite builds a temporary
        # table for a RETURNING clause, which costs a put more than the statement saved.
        state = yield from self._state(thread_id, create=(plan.user_id, now), sql=_PUT_STATE)
        _check_owner(state.owner, plan.user_id, thread_id)
        if state.epoch is None:
            # On PostgreSQL a put of the same new thread that committed while this one waited
            # for the session's lock is not in this statement's snapshot: keep its epoch.
            created = (
                yield step(
                    "INSERT INTO checkpoint_threads (thread_id, blob_epoch) VALUES (?, ?) "
                    "ON CONFLICT (thread_id) DO NOTHING RETURNING blob_epoch",
                    (thread_id, new_epoch()),
                )
            ).rows or (
                yield step(
                    "SELECT blob_epoch FROM checkpoint_threads WHERE thread_id = ?", (thread_id,)
                )
            ).rows
            state = replace(state, epoch=created[0][0])
        assert state.epoch is not None
        yield step(_PUT_CHECKPOINT, _checkpoint_values(plan))
        head = plan.namespace == "" and (
            state.head_id is None or plan.checkpoint_id >= state.head_id
        )
        return (yield from self._put_blobs(plan, state.epoch, head, state.due))

    def _put_blobs(self, plan: PutPlan, epoch: str, head: bool, due: bool) -> Body[dict[str, Any]]:
        """The rest of :meth:`put` once its checkpoint row is in: the blobs (those of its
        messages not known stored under the thread's blob ``epoch``) and, for a ``head`` (the
        thread's newest checkpoint) of a session not yet marked owed (``due``), the mark.

        A put that only believed its checkpoint the newest (a step after this process's
        last) may mark a session owed that is not: the job that writes the session follows
        the newest stored checkpoint anyway."""
        thread_id = plan.thread_id
        plan.written = self.cache.unwritten(thread_id, epoch, plan)
        yield from self._insert(
            "checkpoint_message_blobs (thread_id, hash, type, blob)",
            [(thread_id, *blob) for blob in plan.written],
            "(thread_id, hash) DO NOTHING",
        )
        plan.inserted = yield from self._insert(
            "checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)",
            [(thread_id, plan.namespace, *b) for b in plan.blobs],
            "(thread_id, checkpoint_ns, channel, version) DO NOTHING",
        )
        if head and not due:
            # The session now owes this head's messages: written by :meth:`mirror` in the
            # background, and found by the next open if this process dies first.
            yield self.runner.step(_MARK_DUE, (thread_id,))
        # Whether every blob went in is read after the commit (PutPlan.blobs_stored): on
        # PostgreSQL these inserts, the write-log record and COMMIT then share one round trip.
        # Counted, not returned by the insert, as SQLite builds a temporary table for a
        # RETURNING clause.
        return {"epoch": epoch, "head": head}

    def mirror(
        self, thread_id: str, head: Head | None, converted: dict[int, Message]
    ) -> Body[tuple[list[Any] | None, bool]]:
        """Make the thread's session hold the messages of its newest checkpoint (main
        namespace) and clear the thread's mark of an owed session, in one transaction.

        ``head``: that checkpoint's messages as a put of this process had them in memory
        (used if it is still the newest; else they are read back); ``converted``: harombe
        messages made from some of them before the transaction (by ``id()`` of the LangChain
        message), so the write lock is not held while converting. Returns what the session
        then mirrors (None when the thread is gone or has no checkpoint), and whether messages
        were deleted from it (a ``RemoveMessage``: the files then owe their erasure)."""
        step = self.runner.step
        rows = yield from self._locked_state(thread_id)
        mirror: Mirror | None = None
        removed: list[int] = []
        if rows:
            state = ThreadState.from_row(rows[0])
            if state.head_id is not None:
                if head is not None and head.checkpoint_id == state.head_id:
                    mirror = yield from self._reconcile(
                        thread_id, state, head, converted, removed
                    )
                else:
                    mirror = yield from self._reconcile_stored(thread_id, state, removed)
        yield step("DELETE FROM checkpoint_mirror_due WHERE thread_id = ?", (thread_id,))
        return mirror_json(mirror), bool(removed)

    def due(self) -> Body[list[str]]:
        """The threads whose session is owed the messages of their newest checkpoint."""
        rows = (yield self.runner.step("SELECT thread_id FROM checkpoint_mirror_due")).rows
        return [r[0] for r in rows]

    def put_writes(
        self,
        thread_id: str,
        namespace: str,
        checkpoint_id: str,
        user_id: str | None,
        rows: Sequence[tuple[Any, ...]],
        replace: bool,
        now: int,
    ) -> Body[None]:
        """Store a task's pending writes (replacing earlier ones only for special channels).

        The common case is one statement: the rows go in only if the thread's session exists
        and is ``user_id``'s (so its owner is checked by the insert itself). When nothing went
        in (no such session yet, another owner, or every row already stored) the session is
        read, created or refused, and the rows are inserted again (the same rows: idempotent).
        So a first statement followed by others has written nothing, and the saver runs this
        body with ``SqlRunner.run(first_alone=True)``: that statement commits alone, without
        BEGIN/COMMIT.
        """
        step = self.runner.step
        conflict = _WRITES_REPLACE if replace else _WRITES_KEEP
        full = [(thread_id, namespace, checkpoint_id, *row) for row in rows]
        if len(full) <= _CHUNK:
            done = yield step(
                _owned_writes_sql(len(full), replace, user_id is None),
                [value for row in full for value in row]
                + ([thread_id] if user_id is None else [thread_id, user_id]),
            )
            if done.rowcount > 0:
                return
        owner = (yield step("SELECT user_id FROM sessions WHERE id = ?", (thread_id,))).rows
        if not owner:
            yield step(_NEW_SESSION, (thread_id, user_id, now, now))
            owner = (yield step("SELECT user_id FROM sessions WHERE id = ?", (thread_id,))).rows
        _check_owner(owner[0][0], user_id, thread_id)
        yield from self._insert(_WRITES_INTO, full, conflict)

    def delete_threads(self, thread_ids: Sequence[str]) -> Body[list[str]]:
        """Delete threads and their sessions (everything cascades); returns those deleted."""
        deleted: list[str] = []
        for chunk in _chunks(list(dict.fromkeys(thread_ids))):
            marks = ", ".join("?" * len(chunk))
            rows = (
                yield self.runner.step(
                    f"DELETE FROM sessions WHERE id IN ({marks}) AND id IN "
                    f"(SELECT thread_id FROM checkpoint_threads WHERE thread_id IN ({marks})) "
                    "RETURNING id",
                    (*chunk, *chunk),
                )
            ).rows
            deleted += [r[0] for r in rows]
        return deleted

    def copy(self, source: str, target: str, now: int, epoch: str) -> Body[dict[str, Any]]:
        """Copy every checkpoint, blob and write of ``source`` to ``target`` (same owner)."""
        step = self.runner.step
        found = (
            yield step(
                "SELECT s.user_id FROM sessions s JOIN checkpoint_threads t "
                "ON t.thread_id = s.id WHERE s.id = ?",
                (source,),
            )
        ).rows
        if not found:
            return {"mirror": None}
        owner = found[0][0]
        state = yield from self._state(target, create=(owner, now))
        _check_owner(state.owner, owner, target)
        yield step(
            "INSERT INTO checkpoint_threads (thread_id, blob_epoch) VALUES (?, ?) "
            "ON CONFLICT (thread_id) DO NOTHING",
            (target, epoch),
        )
        for table, columns in _COPY.items():
            yield step(
                f"INSERT INTO {table} (thread_id, {columns}) SELECT CAST(? AS TEXT), {columns} "
                f"FROM {table} WHERE thread_id = ? ON CONFLICT DO NOTHING",
                (target, source),
            )
        state = yield from self._state(target)
        mirror = yield from self._reconcile_stored(target, state)
        return {"mirror": mirror_json(mirror)}

    def prune(self, thread_ids: Sequence[str], epoch: str) -> Body[None]:
        """Keep only the newest checkpoint of each namespace of these threads."""
        step = self.runner.step
        for thread_id in dict.fromkeys(thread_ids):
            yield from self._lock(thread_id)
            yield step(
                "DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id < "
                "(SELECT MAX(c.checkpoint_id) FROM checkpoints c WHERE c.thread_id = "
                "checkpoints.thread_id AND c.checkpoint_ns = checkpoints.checkpoint_ns)",
                (thread_id,),
            )
            yield from self._drop_orphans(thread_id, epoch)

    def delete_runs(
        self, run_ids: Sequence[str], epoch: str
    ) -> Body[tuple[list[str], dict[str, Any]]]:
        """Delete the checkpoints (and writes) of these runs; threads left empty are deleted,
        the others' sessions follow their (possibly older) newest checkpoint, and the blobs
        only the deleted checkpoints referenced (their messages) go too (new blob ``epoch``)."""
        step = self.runner.step
        runs = list(dict.fromkeys(run_ids))
        threads: list[str] = []
        for chunk in _chunks(runs):
            marks = ", ".join("?" * len(chunk))
            rows = (
                yield step(
                    f"SELECT DISTINCT thread_id FROM checkpoints WHERE run_id IN ({marks})", chunk
                )
            ).rows
            threads += [r[0] for r in rows if r[0] not in threads]
        for thread_id in threads:
            yield from self._lock(thread_id)
        for chunk in _chunks(runs):
            marks = ", ".join("?" * len(chunk))
            yield step(
                "DELETE FROM checkpoint_writes WHERE (thread_id, checkpoint_ns, checkpoint_id) "
                "IN (SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints "
                f"WHERE run_id IN ({marks}))",
                chunk,
            )
            yield step(f"DELETE FROM checkpoints WHERE run_id IN ({marks})", chunk)
        emptied: list[str] = []
        mirrors: dict[str, Any] = {}
        for thread_id in threads:
            state = yield from self._state(thread_id)
            left = (
                yield step("SELECT 1 FROM checkpoints WHERE thread_id = ? LIMIT 1", (thread_id,))
            ).rows
            if not left:
                emptied += yield from self.delete_threads([thread_id])
                continue
            yield from self._drop_orphans(thread_id, epoch)
            mirror = yield from self._reconcile_stored(thread_id, state)
            mirrors[thread_id] = mirror_json(mirror)
        return emptied, mirrors

    # reads --------------------------------------------------------------------------------
    def get(
        self, thread_id: str, namespace: str, checkpoint_id: str | None, user_id: str | None
    ) -> Body[list[Loaded]]:
        """The checkpoint ``checkpoint_id`` (or the newest) of a thread's namespace.

        Its row says whether it has pending writes, which are read only then, so the read at
        the start of an agent turn, whose channel blobs this process usually holds, is one
        statement. (Row and writes in one statement, a UNION ALL sorted as LangGraph wants the
        writes, cost SQLite twice the row's read even when there are none.)"""
        step = self.runner.step
        if checkpoint_id:
            found = (yield step(_GET_ONE, (thread_id, namespace, checkpoint_id))).rows
        else:
            found = (yield step(_GET_NEWEST, (thread_id, namespace))).rows
        if not found:
            yield from self._check_session_owner(thread_id, user_id)
            return []
        row = found[0]
        _check_owner(row[7], user_id, thread_id)
        pending: list[tuple[str, str, str, bytes]] = []
        if row[9]:
            written = (yield step(_GET_WRITES, (row[0], row[1], row[2]))).rows
            pending = [(w[0], w[1], w[2], bytes(w[3])) for w in written]
        return (yield from self._load([row[:9]], {(row[0], row[1], row[2]): pending}))

    def page(
        self,
        filters: dict[str, str],
        cursor: tuple[str, str, str] | None,
        size: int,
        matches: Callable[[dict[str, Any]], bool] | None,
        user_id: str | None,
    ) -> Body[tuple[list[Loaded], tuple[str, str, str] | None]]:
        """Up to ``size`` checkpoints, newest first, after ``cursor``; those whose metadata
        ``matches`` are loaded. ``filters`` may name ``thread_id``, ``checkpoint_ns``,
        ``checkpoint_id`` (equal) and ``before`` (a checkpoint id to list below). Returns the
        loaded checkpoints and the next page's cursor (None after the last page)."""
        clauses: list[str] = []
        params: list[Any] = []
        for name, value in filters.items():
            column, operator = ("checkpoint_id", "<") if name == "before" else (name, "=")
            if column not in ("thread_id", "checkpoint_ns", "checkpoint_id"):
                raise InvalidInputError(f"cannot list checkpoints by {name!r}.")
            clauses.append(f"c.{column} {operator} ?")
            params.append(value)
        if "thread_id" not in filters and user_id is not None:
            clauses.append("s.user_id = ?")  # every thread of this user
            params.append(user_id)
        if cursor is not None:
            clauses.append("(c.checkpoint_id, c.thread_id, c.checkpoint_ns) < (?, ?, ?)")
            params += cursor
        sql = f"SELECT {_ROW} {_FROM}"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC LIMIT ?"
        rows = (yield self.runner.step(sql, (*params, size))).rows
        if "thread_id" in filters:
            if rows:
                _check_owner(rows[0][7], user_id, filters["thread_id"])
            elif cursor is None:  # a first page (later ones were checked by the first)
                yield from self._check_session_owner(filters["thread_id"], user_id)
        following = (rows[-1][2], rows[-1][0], rows[-1][1]) if len(rows) == size else None
        if matches is not None:
            rows = [r for r in rows if matches(json.loads(r[4]))]
        return (yield from self._load(rows)), following

    # helpers ------------------------------------------------------------------------------
    def _check_session_owner(self, thread_id: str, user_id: str | None) -> Body[None]:
        """A read that found no checkpoint refuses another user's thread all the same, as
        when it has checkpoints (a session holding only messages, a namespace not written):
        the answer must not depend on whether it has any. A thread that does not exist at
        all reads as None, as in LangGraph's own savers. Only reads that miss pay this."""
        rows = (yield self.runner.step(_OWNER, (thread_id,))).rows
        if rows:
            _check_owner(rows[0][0], user_id, thread_id)

    def _state(
        self, thread_id: str, create: tuple[str | None, int] | None = None, sql: str = _STATE
    ) -> Body[ThreadState]:
        """The thread, locked until the transaction ends; with ``create`` (owner, now) its
        session is created first if it does not exist (else it must exist)."""
        rows = yield from self._locked_state(thread_id, sql)
        if not rows and create is not None:
            owner, now = create
            yield self.runner.step(_NEW_SESSION, (thread_id, owner, now, now))
            rows = yield from self._locked_state(thread_id, sql)
        return ThreadState.from_row(rows[0])

    def _locked_state(self, thread_id: str, sql: str = _STATE) -> Body[list[Any]]:
        """The rows of ``sql`` (a thread's state) read with the session's row locked.

        On PostgreSQL the lock is taken by a statement of its own, and the state read after
        it: a ``SELECT ... FOR UPDATE`` that waited for another transaction's lock re-reads
        the locked row but evaluates its subqueries in the snapshot taken before the wait
        (READ COMMITTED), so the newest checkpoint it named could be one that transaction had
        just deleted (``delete_for_runs``), and the background session write put the deleted
        run's messages back. SQLite's write transaction already holds the whole file."""
        if not self.runner.writes_one_at_a_time:
            yield from self._lock(thread_id)
        rows: list[Any] = (yield self.runner.step(sql, (thread_id,))).rows
        return rows

    def _lock(self, thread_id: str) -> Body[None]:
        """Take the session's row, so no put of this thread interleaves."""
        yield self.runner.step(
            "SELECT 1 FROM sessions s WHERE s.id = ?" + self.runner.for_update("s"), (thread_id,)
        )

    def _insert(
        self,
        into: str,
        rows: Sequence[tuple[Any, ...]],
        conflict: str,
    ) -> Body[list[StepResult]]:
        """Insert ``rows``; the statements' results, whose row counts are the rows really
        inserted (not those ``conflict`` skipped). They are left to the caller to read when
        it needs them: on PostgreSQL a statement's result is waited for only when read."""
        if not rows:
            return []
        width = len(rows[0])
        if len(rows) <= _CHUNK:  # the common case, without the chunks' generator
            done = yield self.runner.step(
                _insert_sql(into, width, len(rows), conflict),
                [value for row in rows for value in row],
            )
            return [done]
        results = []
        for chunk in _chunks(rows):
            results.append(
                (
                    yield self.runner.step(
                        _insert_sql(into, width, len(chunk), conflict),
                        [value for row in chunk for value in row],
                    )
                )
            )
        return results

    def _reconcile(
        self,
        thread_id: str,
        state: ThreadState,
        head: Head,
        converted: dict[int, Message] | None = None,
        removed: list[int] | None = None,
    ) -> Body[Mirror]:
        mirror: Mirror = yield from reconcile(
            self.runner,
            thread_id,
            state,
            head,
            cached=self.cache.mirror(thread_id),
            convert=self.convert,
            converted=converted,
            load_refs=lambda version: self._refs(thread_id, version),
            load_messages=lambda hashes: self._messages(thread_id, hashes),
            removed=removed,
        )
        return mirror

    def plan_head(self, plan: PutPlan) -> Head:
        """The messages of the checkpoint being put (in memory, or an unchanged list)."""
        entry = plan.lists.get(self.messages_key)
        if entry is not None:
            return Head(plan.checkpoint_id, entry.version, entry.refs, entry.messages)
        version = plan.versions.get(self.messages_key)
        if version is None or self.messages_key in plan.inline:
            return Head(plan.checkpoint_id, None, b"")
        return Head(plan.checkpoint_id, version, None)

    def _reconcile_stored(
        self, thread_id: str, state: ThreadState, removed: list[int] | None = None
    ) -> Body[Mirror | None]:
        """Make the session hold the messages of the thread's newest stored checkpoint."""
        rows = (
            yield self.runner.step(
                "SELECT checkpoint_id, type, checkpoint FROM checkpoints WHERE thread_id = ? "
                "AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1",
                (thread_id,),
            )
        ).rows
        if not rows:
            return None
        try:
            checkpoint = self.serde.loads_typed((rows[0][1], bytes(rows[0][2])))
        except UNDECODABLE as error:
            key = {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": rows[0][0]}
            raise undecodable("checkpoints", key, "checkpoint", error) from error
        version = checkpoint["channel_versions"].get(self.messages_key)
        if version is None or self.messages_key in checkpoint["channel_values"]:
            head = Head(rows[0][0], None, b"")
        else:
            head = Head(rows[0][0], str(version), None)
        return (yield from self._reconcile(thread_id, state, head, None, removed))

    def _refs(self, thread_id: str, version: str | None) -> Body[bytes]:
        """The message references of the main namespace's messages channel at ``version``."""
        if version is None:
            return b""
        rows = (
            yield self.runner.step(
                "SELECT type, blob FROM checkpoint_blobs WHERE thread_id = ? AND "
                "checkpoint_ns = '' AND channel = ? AND version = ?",
                (thread_id, self.messages_key, version),
            )
        ).rows
        if not rows or rows[0][0] != REFS_TYPE or rows[0][1] is None:
            return b""
        return bytes(rows[0][1])

    def _messages(self, thread_id: str, hashes: list[bytes]) -> Body[list[BaseMessage]]:
        blobs, _ = yield from self._message_blobs(thread_id, hashes)
        return load_messages(self.serde, [blobs[h] for h in hashes])

    def _message_blobs(
        self, thread_id: str, hashes: Iterable[bytes]
    ) -> Body[tuple[Mapping[bytes, tuple[str, bytes]], dict[bytes, tuple[str, bytes]]]]:
        """(blobs of ``hashes`` by hash, those of them read from the database)."""
        cached = self.cache.blobs_of(thread_id)
        wanted = set(hashes).difference(cached.keys())
        missing = list(wanted)
        fetched: dict[bytes, tuple[str, bytes]] = {}
        if len(missing) > _SCAN_FROM:
            # Many blobs: one pass over the thread's blobs beats a lookup per hash.
            rows = (
                yield self.runner.step(
                    "SELECT hash, type, blob FROM checkpoint_message_blobs WHERE thread_id = ?",
                    (thread_id,),
                )
            ).rows
            fetched = {
                digest: (r[1], bytes(r[2])) for r in rows if (digest := bytes(r[0])) in wanted
            }
            missing = []
        for chunk in _chunks(missing, 500):
            rows = (
                yield self.runner.step(
                    "SELECT hash, type, blob FROM checkpoint_message_blobs WHERE thread_id = ? "
                    f"AND hash IN ({', '.join('?' * len(chunk))})",
                    (thread_id, *chunk),
                )
            ).rows
            fetched.update((bytes(r[0]), (r[1], bytes(r[2]))) for r in rows)
        return ({**cached, **fetched} if fetched else cached), fetched

    def _load(
        self,
        rows: Sequence[Any],
        writes: dict[tuple[str, str, str], list[tuple[str, str, str, bytes]]] | None = None,
    ) -> Body[list[Loaded]]:
        """Blobs, message blobs and pending writes of these checkpoint rows (``writes``: their
        pending writes, when the caller read them already)."""
        if not rows:
            return []
        step = self.runner.step
        try:
            loaded = [Loaded(tuple(r), self.serde.loads_typed((r[5], bytes(r[6])))) for r in rows]
        except UNDECODABLE as error:
            bad = next(r for r in rows if not _decodes(self.serde, r[5], r[6]))
            key = {"thread_id": bad[0], "checkpoint_ns": bad[1], "checkpoint_id": bad[2]}
            raise undecodable("checkpoints", key, "checkpoint", error) from error
        wanted = list(
            dict.fromkeys(
                (item.row[0], item.row[1], channel, version)
                for item in loaded
                for channel, version in needed_blobs(item.checkpoint)
            )
        )
        blobs: dict[tuple[str, str, str, str], tuple[str, bytes | None]] = {}
        epochs = {item.row[0]: item.row[8] for item in loaded}
        for thread_id, epoch in epochs.items():
            own = [(w[1], w[2], w[3]) for w in wanted if w[0] == thread_id]
            for (namespace, channel, version), kept in self.cache.channel_blobs(
                thread_id, epoch, own
            ).items():
                blobs[(thread_id, namespace, channel, version)] = kept
        missing = [w for w in wanted if w not in blobs]
        read: dict[str, list[tuple[str, str, str, str, bytes | None]]] = {}
        for chunk in _chunks(missing):
            found = (
                yield step(
                    "SELECT b.thread_id, b.checkpoint_ns, b.channel, b.version, b.type, b.blob "
                    f"FROM {_keys(chunk)} JOIN checkpoint_blobs b ON b.thread_id = k.column1 "
                    "AND b.checkpoint_ns = k.column2 AND b.channel = k.column3 "
                    "AND b.version = k.column4",
                    [value for key in chunk for value in key],
                )
            ).rows
            for r in found:
                value = None if r[5] is None else bytes(r[5])
                blobs[(r[0], r[1], r[2], r[3])] = (r[4], value)
                read.setdefault(r[0], []).append((r[1], r[2], r[3], r[4], value))
        for thread_id, rows_read in read.items():
            if epochs[thread_id] is not None:
                self.cache.remember_channels(thread_id, epochs[thread_id], rows_read)
        refs: dict[tuple[str, str, str, str], list[bytes] | Serialised] = {}
        threads: dict[str, list[bytes]] = {}
        for key, (type_, blob) in blobs.items():
            if type_ != REFS_TYPE or blob is None:
                continue
            known = self.cache.serialised(key[0], (key[1], key[2]), blob)
            if known is not None:  # the list this process wrote: its blobs are at hand
                refs[key] = known
                continue
            try:
                hashes = refs[key] = split_refs(blob)
            except UNDECODABLE as error:
                names = ("thread_id", "checkpoint_ns", "channel", "version")
                where = dict(zip(names, key, strict=True))
                raise undecodable("checkpoint_blobs", where, "blob", error) from error
            threads.setdefault(key[0], []).extend(hashes)
        messages: dict[str, tuple[Mapping[bytes, tuple[str, bytes]], dict[bytes, Any]]] = {}
        for thread_id, hashes in threads.items():
            messages[thread_id] = yield from self._message_blobs(thread_id, hashes)
        keys: list[tuple[str, str, str]] = []
        if writes is None:  # not read with the rows: read them now
            keys = list(dict.fromkeys((item.row[0], item.row[1], item.row[2]) for item in loaded))
            writes = {}
        for chunk in _chunks(keys):
            found = (
                yield step(
                    "SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.channel, "
                    f"w.type, w.blob FROM {_keys(chunk)} JOIN checkpoint_writes w "
                    "ON w.thread_id = k.column1 AND w.checkpoint_ns = k.column2 "
                    "AND w.checkpoint_id = k.column3 ORDER BY w.thread_id, w.checkpoint_ns, "
                    "w.checkpoint_id, w.task_path, w.task_id, w.idx",
                    [value for key in chunk for value in key],
                )
            ).rows
            for r in found:
                writes.setdefault((r[0], r[1], r[2]), []).append((r[3], r[4], r[5], bytes(r[6])))
        for item in loaded:
            thread_id, namespace = item.row[0], item.row[1]
            item.blobs = {
                (channel, version): blobs[(thread_id, namespace, channel, version)]
                for channel, version in needed_blobs(item.checkpoint)
                if (thread_id, namespace, channel, version) in blobs
            }
            item.refs = {
                (channel, version): refs[(thread_id, namespace, channel, version)]
                for channel, version in item.blobs
                if (thread_id, namespace, channel, version) in refs
            }
            item.messages, item.fetched = messages.get(thread_id, ({}, {}))
            item.writes = writes.get((thread_id, namespace, item.row[2]), [])
        return loaded

    def _drop_orphans(self, thread_id: str, epoch: str) -> Body[None]:
        """Delete the thread's pending writes, channel blobs and message blobs that no stored
        checkpoint references; a new blob epoch tells every process its memory of the thread's
        blobs (message and channel blobs alike) is stale."""
        step = self.runner.step
        yield step(
            "DELETE FROM checkpoint_writes WHERE thread_id = ? AND NOT EXISTS (SELECT 1 FROM "
            "checkpoints c WHERE c.thread_id = checkpoint_writes.thread_id AND "
            "c.checkpoint_ns = checkpoint_writes.checkpoint_ns AND "
            "c.checkpoint_id = checkpoint_writes.checkpoint_id)",
            (thread_id,),
        )
        kept: set[tuple[str, str, str]] = set()
        for namespace, type_, blob, checkpoint_id in (
            yield step(
                "SELECT checkpoint_ns, type, checkpoint, checkpoint_id FROM checkpoints "
                "WHERE thread_id = ?",
                (thread_id,),
            )
        ).rows:
            try:
                checkpoint = self.serde.loads_typed((type_, bytes(blob)))
            except UNDECODABLE as error:
                key = {
                    "thread_id": thread_id,
                    "checkpoint_ns": namespace,
                    "checkpoint_id": checkpoint_id,
                }
                raise undecodable("checkpoints", key, "checkpoint", error) from error
            kept.update((namespace, c, v) for c, v in needed_blobs(checkpoint))
        stored = (
            yield step(
                "SELECT checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs "
                "WHERE thread_id = ?",
                (thread_id,),
            )
        ).rows
        doomed = [(r[0], r[1], r[2]) for r in stored if (r[0], r[1], r[2]) not in kept]
        for chunk in _chunks(doomed):
            yield step(
                "DELETE FROM checkpoint_blobs WHERE thread_id = ? AND (checkpoint_ns, channel, "
                f"version) IN (SELECT column1, column2, column3 FROM {_keys(chunk)})",
                [thread_id, *(value for key in chunk for value in key)],
            )
        live = {
            digest
            for r in stored
            if (r[0], r[1], r[2]) in kept and r[3] == REFS_TYPE and r[4]
            for digest in split_refs(bytes(r[4]))
        }
        hashes = (
            yield step(
                "SELECT hash FROM checkpoint_message_blobs WHERE thread_id = ?", (thread_id,)
            )
        ).rows
        dead = [bytes(r[0]) for r in hashes if bytes(r[0]) not in live]
        for chunk in _chunks(dead, 500):
            yield step(
                "DELETE FROM checkpoint_message_blobs WHERE thread_id = ? AND hash IN "
                f"({', '.join('?' * len(chunk))})",
                (thread_id, *chunk),
            )
        if dead or doomed:
            yield step(
                "UPDATE checkpoint_threads SET blob_epoch = ? WHERE thread_id = ?",
                (epoch, thread_id),
            )


def _decodes(serde: Any, type_: str, blob: Any) -> bool:
    """Whether one stored checkpoint decodes (asked only after a batch failed, to name the row)."""
    try:
        serde.loads_typed((type_, bytes(blob)))
    except UNDECODABLE:
        return False
    return True
