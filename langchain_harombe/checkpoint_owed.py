"""The sessions a killed checkpointing process still owed, written by whichever process opens next.

A put marks its thread in ``checkpoint_mirror_due`` with the checkpoint, and the saver's
background job writes the thread's session later (:mod:`~langchain_harombe.checkpoint_mirror`).
When that process is killed first, the next :class:`~harombe_core.MemoryManager` opened on the
database, in any process and without any saver, finds the marks
(:mod:`harombe_core.store.rederive`) and calls :func:`start` through the entry point
``harombe_core.derived: checkpoint_mirror_due``: this module is loaded only then.

:class:`OwedSessions` writes each marked thread's session to hold its newest checkpoint's
messages and clears the mark, in one transaction (:meth:`CheckpointTables.mirror`), on the
background worker or, first, on a reader's thread. That transaction is the saver's own: it
reads the thread's state under the write lock (the session's row lock on PostgreSQL) and makes
the session equal to the newest checkpoint, so a saver still running in another process, or
another reader, deriving the same thread at the same time changes nothing the second time.

It reads checkpoints with the default serializer and the default ``messages`` channel, as a
saver opened with no options does. What it cannot read that way is left marked for the saver
that wrote it (whose own open derives it): a checkpoint its serializer refuses (a custom or
encrypting serializer), and a thread whose newest checkpoint has no ``messages`` channel while
its session holds messages (a saver with another ``messages_key``; writing an empty list
would delete them).
"""

from __future__ import annotations

import logging
from typing import Any

from harombe_core import MemoryManager
from harombe_core.errors import UnsafeCheckpointError
from harombe_core.integration import SESSIONS, Body, SummaryFolder, sql_runner
from langchain_harombe.checkpoint_mirror import convert_with
from langchain_harombe.checkpoint_rows import UNDECODABLE, BlobCache, undecodable
from langchain_harombe.checkpoint_serde import HarombeSerializer
from langchain_harombe.checkpoint_sql import CheckpointTables

__all__ = ["MESSAGES_KEY", "OwedSessions", "start"]

log = logging.getLogger(__name__)

#: The channel a saver opened with no options keeps the conversation in.
MESSAGES_KEY = "messages"

#: Bytes of serialised messages kept while deriving (the job reads each thread once).
_CACHE_BYTES = 8 * 1024 * 1024

_warned = False


def start(manager: MemoryManager) -> OwedSessions:
    """The entry point: write, for ``manager``'s database, the sessions marked owed."""
    return OwedSessions(manager)


class OwedSessions:
    """Writes the session of every thread marked owed when it was made (see the module)."""

    def __init__(self, manager: MemoryManager) -> None:
        self._manager = manager
        self._runner = sql_runner(manager.store)
        self._serde = HarombeSerializer()
        self._tables = CheckpointTables(
            self._runner,
            self._serde,
            BlobCache(_CACHE_BYTES),
            convert_with(manager.token_counter),
            MESSAGES_KEY,
        )
        self._jobs = SummaryFolder(self._step, priority=SESSIONS, drain_at_exit=True)
        for thread_id in self._runner.read(self._tables.due):
            self._jobs.request(thread_id, 0)

    def drain(self) -> None:
        """Write now, on the calling thread, every session still owed (a read follows)."""
        self._jobs.drain()

    def close(self) -> None:
        """Stop; what is still owed stays marked for the next open."""
        self._jobs.close()

    def _step(self, thread_id: str, _: int) -> bool:
        """One thread's session written (or left marked, see the module); never more to do."""
        global _warned
        if not self._runner.read(lambda: self._marked(thread_id)):
            return False  # written meanwhile (by a saver of this process or another opener)
        try:
            written = self._runner.run(lambda: self._mirror(thread_id), exactly_once=True)
        except UnsafeCheckpointError as exc:
            if not _warned:
                _warned = True
                log.warning(
                    "thread %s: its session is owed its newest checkpoint's messages, which "
                    "the default serializer cannot read (%s); the HarombeSaver that wrote it "
                    "writes the session when it is opened.",
                    thread_id,
                    exc,
                )
            return False
        except UNDECODABLE as exc:
            # A checkpoint row edited outside harombe: other reads must not fail for it; the
            # session stays as it is and the mark stays, and the saver's reads name the row.
            log.warning(
                "thread %s: its session is owed its newest checkpoint's messages, but %s",
                thread_id,
                undecodable("checkpoints", {"thread_id": thread_id}, "checkpoint", exc),
            )
            return False
        if written:
            self._manager.notify_written()
        return False

    def _marked(self, thread_id: str) -> Body[bool]:
        """Whether the thread's session is still owed (a read: no write lock is taken)."""
        rows = (
            yield self._runner.step(
                "SELECT 1 FROM checkpoint_mirror_due WHERE thread_id = ?", (thread_id,)
            )
        ).rows
        return bool(rows)

    def _mirror(self, thread_id: str) -> Body[bool]:
        """The thread's session made to hold its newest checkpoint's messages and its mark
        cleared, in one transaction; False when it is left marked (see the module)."""
        step = self._runner.step
        rows = (
            yield step(
                "SELECT c.type, c.checkpoint, s.message_count FROM sessions s JOIN "
                "checkpoints c ON c.thread_id = s.id AND c.checkpoint_ns = '' WHERE s.id = ? "
                "ORDER BY c.checkpoint_id DESC LIMIT 1",
                (thread_id,),
            )
        ).rows
        if rows and rows[0][2]:
            checkpoint: dict[str, Any] = self._serde.loads_typed((rows[0][0], bytes(rows[0][1])))
            named = checkpoint["channel_versions"].keys() | checkpoint["channel_values"].keys()
            if MESSAGES_KEY not in named:
                return False
        yield from self._tables.mirror(thread_id, None, {})
        return True
