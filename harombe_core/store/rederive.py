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
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any, Protocol

from harombe_core.store import pending
from harombe_core.store.runner import Body, Dialect, Op

__all__ = ["GROUP", "MARKS", "OwedJob", "Rederived", "start_jobs"]

log = logging.getLogger(__name__)

#: Entry point group of the functions that derive rows a process left owed (name: the table).
GROUP = "harombe_core.derived"

#: Tables whose rows mark derived rows owed, each cleared by the transaction that writes them:
#: ``checkpoint_mirror_due``, the checkpointed threads whose session is not yet written
#: (``langchain_harombe.checkpoint_mirror``).
MARKS = ("checkpoint_mirror_due",)


class OwedJob(Protocol):
    """What an entry point's ``start(manager)`` returns: derives every row marked when it
    started (in the background, or on the calling thread when drained)."""

    def drain(self) -> None:
        """Derive now, on the calling thread, whatever is still owed (or wait for the job in
        hand): a read that follows sees it."""

    def close(self) -> None:
        """Stop: what is still owed stays marked for the next open."""


class Rederived:
    """The jobs one manager started for what its database was owed, until it closes."""

    def __init__(self, jobs: list[tuple[OwedJob, Callable[[], None]]]) -> None:
        self._jobs = jobs  # (job, its unregister): the manager holds the jobs alive

    def close(self) -> None:
        """Stop the jobs (a closing manager settles first, so nothing is left owed)."""
        jobs, self._jobs = self._jobs, []
        for job, unregister in jobs:
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
        return Rederived([])
    marked = store.run(_marked())
    jobs: list[tuple[OwedJob, Callable[[], None]]] = []
    for table in marked:
        for start in _starters(table):
            job = start(manager)
            jobs.append((job, pending.register(store.location, job.drain)))
    return Rederived(jobs)


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
