"""Derived rows a killed process still owed: found when a database opens, written before a read.

Some derived rows are written by a background job after the transaction that made them owed:
the LangGraph checkpointer (``langchain_harombe``) commits a checkpoint and writes the thread's
messages into its harombe session later (:mod:`harombe_core.store.pending` makes the reads of
that process see them). The owing transaction marks what it owes in a table, so a kill loses
nothing; but then another process must derive it, and any process may be the next to read:
a bare ``MemoryManager``, ``harombe search``, ``harombe serve``, a LlamaIndex chat store. The
code that derives the rows belongs to the adapter that made them (it reads LangGraph's
serialised checkpoints), which the core never imports.

So the core knows only the tables of marks (:data:`MARKS`, created by its own migrations) and an
entry point group, :data:`GROUP`: an installed package names, under the table's name, a
function ``start(manager)`` that returns a job (:class:`OwedJob`) deriving every row the table
marks (``[project.entry-points."harombe_core.derived"]`` in ``pyproject.toml``). When a
:class:`~harombe_core.MemoryManager` opens a SQLite file or PostgreSQL database, one indexed
statement per table asks whether anything is marked; only then are the entry points listed and
loaded. Each job is registered with :mod:`~harombe_core.store.pending`, so the manager's first
read of messages, sessions or search (in this process, through any manager or adapter on the
database) and ``flush()`` wait for it, and it stops when the manager closes. When nothing is
marked (the common case) opening costs those statements and nothing is imported.

Two processes may derive the same marked row at once (a reader here and the still-running
process that marked it, or two readers): a job's write is one transaction that makes the rows
equal to their source and clears the mark, so whichever commits second changes nothing.

If the package cannot be loaded (an install without LangChain), the marks stay for a process
that can derive them, and a warning says so once per process.

A process may be killed after a long-lived manager opened (``harombe serve``, an app's
manager): what it owed is marked after that open. So a manager keeps asking, cheaply: its
store's operations check the marks (the same indexed statements) at most once every
:data:`PROBE_SECONDS` (``HAROMBE_OWED_PROBE_SECONDS`` in the environment sets another interval;
0 checks at every operation), as a watcher of :mod:`~harombe_core.store.pending`, and
``flush()`` checks at once. What it finds is derived there and then, on the calling thread,
before the operation that checked; in between an operation costs a read of the clock. A mark
of a process still running (its background job about to clear it) may be derived by the
checker too: the transaction makes the rows equal to their source, so that changes nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any, Protocol

from harombe_core.errors import ConfigError
from harombe_core.store import pending
from harombe_core.store.runner import Body, Dialect, Op

__all__ = ["GROUP", "MARKS", "PROBE_SECONDS", "OwedJob", "Rederived", "probe_seconds", "start_jobs"]

log = logging.getLogger(__name__)

#: Entry point group of the functions that derive rows a process left owed (name: the table).
GROUP = "harombe_core.derived"

#: Tables whose rows mark derived rows owed, each cleared by the transaction that writes them:
#: ``checkpoint_mirror_due``, the checkpointed threads whose session is not yet written
#: (``langchain_harombe.checkpoint_mirror``).
MARKS = ("checkpoint_mirror_due",)

#: How often (seconds, at most) a long-lived manager's operations check the marks again.
PROBE_SECONDS = 10.0
_PROBE_ENV = "HAROMBE_OWED_PROBE_SECONDS"


def probe_seconds() -> float:
    """:data:`PROBE_SECONDS`, or ``HAROMBE_OWED_PROBE_SECONDS`` when set (0: every operation)."""
    raw = os.environ.get(_PROBE_ENV)
    if raw is None or not raw.strip():
        return PROBE_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 86_400:
        raise ConfigError(
            f"{_PROBE_ENV}={raw!r} is not a number of seconds from 0 to 86400: set it to how "
            f"often a long-running process checks for work a killed process left owed "
            f"(default {PROBE_SECONDS:g}), or unset it."
        )
    return seconds


class OwedJob(Protocol):
    """What an entry point's ``start(manager)`` returns: derives every row marked when it
    started (in the background, or on the calling thread when drained)."""

    def drain(self) -> None:
        """Derive now, on the calling thread, whatever is still owed (or wait for the job in
        hand): a read that follows sees it."""

    def close(self) -> None:
        """Stop: what is still owed stays marked for the next open."""


class Rederived:
    """The jobs one manager started for what its database was owed, until it closes; and,
    for a manager that may derive (``manager`` given), the watcher that checks the marks
    again now and then (see the module)."""

    def __init__(self, manager: Any = None) -> None:
        self._manager = manager
        #: table -> its jobs and their unregisters: the manager holds the jobs alive.
        self._jobs: dict[str, list[tuple[OwedJob, Callable[[], None]]]] = {}
        self._unwatch: Callable[[], None] | None = None
        if manager is not None:
            location = manager.store.location
            self._unwatch = pending.watch(location, self.probe, probe_seconds())

    def start(self, tables: list[str]) -> None:
        """Start the jobs deriving what ``tables`` mark (each table's earlier jobs, done or
        not, are replaced: a new job derives every row marked now)."""
        store = self._manager.store
        for table in tables:
            for job, unregister in self._jobs.pop(table, []):
                unregister()
                job.close()
            started = [start(self._manager) for start in _starters(table)]
            self._jobs[table] = [
                (job, pending.register(store.location, job.drain)) for job in started
            ]

    def probe(self) -> None:
        """Check the marks; derive what they name, on this thread (a watcher: called by
        :func:`~harombe_core.store.pending.settle`, with settling off on this thread)."""
        marked = self._manager.store.run(_marked())
        self.start(marked)
        for table in marked:
            for job, _ in self._jobs[table]:
                job.drain()

    def close(self) -> None:
        """Stop the jobs and the watcher (a closing manager settles first, so nothing is left
        owed)."""
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        jobs, self._jobs = self._jobs, {}
        for table_jobs in jobs.values():
            for job, unregister in table_jobs:
                unregister()
                job.close()


def _marked() -> Op[list[str]]:
    """The tables of :data:`MARKS` that hold a row (one primary-key probe each)."""

    def body(d: Dialect) -> Body[list[str]]:
        found = []
        for table in MARKS:
            if (yield d.step(f"SELECT 1 FROM {table} LIMIT 1")).rows:
                found.append(table)
        return found

    return Op(body)


def start_jobs(manager: Any) -> Rederived:
    """Start, for ``manager`` (a :class:`~harombe_core.MemoryManager`), the jobs that derive
    what its database was left owed; registered with :mod:`~harombe_core.store.pending` so
    its reads and ``flush()`` wait for them. Nothing when nothing is marked."""
    store = manager.store
    if (
        getattr(getattr(store, "dialect", None), "name", None) not in ("sqlite", "postgres")
        or getattr(store, "read_only", False)  # nothing can be written: the marks stay
        or store.location == ":memory:"  # no other process ever had it
    ):
        return Rederived()
    marked = store.run(_marked())
    owed = Rederived(manager)
    owed.start(marked)
    return owed


@cache
def _starters(table: str) -> tuple[Callable[[Any], OwedJob], ...]:
    """The ``start`` functions installed packages name for ``table`` (listed once per process:
    listing entry points reads every installed package's metadata; a failure is told once)."""
    return tuple(_load(table))


def _load(table: str) -> Iterator[Callable[[Any], OwedJob]]:
    from importlib.metadata import entry_points

    seen: set[str] = set()
    for entry in entry_points(group=GROUP, name=table):
        if entry.value in seen:
            continue
        seen.add(entry.value)
        try:
            start = entry.load()
        except ImportError as exc:
            extra = f" (install harombe-memory[{entry.extras[0]}])" if entry.extras else ""
            log.warning(
                "%s marks rows still owed to the database (by a process that stopped), but %s "
                "cannot be loaded (%s)%s: they stay owed until a process that can derive them "
                "opens the database.",
                table,
                entry.value,
                exc,
                extra,
            )
            continue
        yield start
    if not seen:
        log.warning(
            "%s marks rows still owed to the database (by a process that stopped), and no "
            "installed package derives them (entry point group %r): they stay owed.",
            table,
            GROUP,
        )
