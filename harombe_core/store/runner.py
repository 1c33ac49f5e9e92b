"""Store operations as bodies: one generator of SQL steps, run by any dialect's driver.

An operation is written once as a *body*: a generator that yields :class:`Step` s and receives
each one's :class:`StepResult`. One driver, :func:`drive`, runs it on a connection inside the
transaction the store opened (the store brings its locking, retries and error types), a
``sqlite3.Connection`` or a psycopg ``Cursor``. So the logic of an operation exists once, on
both backends; the async path runs the same driver in a worker thread (the store's ``arun``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, NamedTuple, TypeVar

__all__ = [
    "MORE",
    "POSTGRES",
    "SQLITE",
    "Body",
    "Dialect",
    "Op",
    "Step",
    "StepResult",
    "drive",
    "drive_first",
]

T = TypeVar("T")


class Step(NamedTuple):
    """One statement of a body, in its dialect's placeholder style, with its parameters."""

    sql: str
    params: Sequence[Any] = ()


class StepResult:
    """What a statement returned: its rows (empty for writes) and its row count.

    (A plain class, not a tuple: PostgreSQL's pipelined driver answers a subclass that waits
    for the server only when the body reads it.)"""

    __slots__ = ("rowcount", "rows")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    @property
    def arrived(self) -> bool:
        """Whether the answer is here to read without asking the server (always, but for a
        pipelined statement whose answer has not come, or never will: a connection lost)."""
        return True


Body = Generator[Step, StepResult, T]


def _send(body: Body[T], result: StepResult | None) -> tuple[bool, Any]:
    """Advance ``body``: (True, its next step), or (False, its return value) once it is done."""
    try:
        return True, next(body) if result is None else body.send(result)
    except StopIteration as stop:
        return False, stop.value


def drive(cursor: Any, body: Body[T]) -> T:
    """Run ``body`` on ``cursor`` (anything whose ``execute(sql, params)`` returns a cursor:
    a ``sqlite3.Connection``, a psycopg ``Cursor``), inside the caller's transaction; its
    return value."""
    more, value = _send(body, None)
    while more:
        done = cursor.execute(value.sql, value.params)
        rows = done.fetchall() if done.description is not None else []
        more, value = _send(body, StepResult(rows, done.rowcount))
    result: T = value
    return result


#: What :func:`drive_first` answers for a body of more than one statement.
MORE: Any = object()


def drive_first(cursor: Any, body: Body[T]) -> Any:
    """``body``'s result when it asks at most one statement (run on ``cursor``), else
    :data:`MORE` (the body is then closed, its answer unused): the driver of a body whose one
    statement may run alone, without the BEGIN and COMMIT around it."""
    try:
        step = next(body)
        done = cursor.execute(step.sql, step.params)
        rows = done.fetchall() if done.description is not None else []
        body.send(StepResult(rows, done.rowcount))
    except StopIteration as stop:
        return stop.value
    body.close()
    return MORE


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between SQLite and PostgreSQL in the operations written once, and nothing
    else: the placeholder, the list_sessions tie-break, and the LIMIT meaning "all"."""

    name: Literal["sqlite", "postgres"]  # the one backend test anyone makes
    mark: str
    session_order: str
    no_limit: int | None

    def step(self, sql: str, params: Sequence[Any] = ()) -> Step:
        """A statement written with ``?`` placeholders, in this dialect's style (the SQL
        itself holds no literal ``?`` or ``%``: every value is a parameter)."""
        return Step(sql if self.mark == "?" else sql.replace("?", self.mark), params)

    def marks(self, count: int) -> str:
        """``count`` placeholders, comma separated: the inside of ``IN (...)``."""
        return ", ".join(["?"] * count)


SQLITE = Dialect("sqlite", "?", "rowid", -1)
POSTGRES = Dialect("postgres", "%s", "seq", None)


@dataclass(frozen=True, slots=True)
class Op(Generic[T]):
    """One store operation: its body, written once for every dialect, and how it must run.

    ``body`` is called again on a retry, so it must build a fresh generator each time. A read
    (``write=False``) runs in a read snapshot (on SQLite it never takes the write lock);
    ``adds_messages`` wakes SQLite's keyword indexer after the commit. A write is applied
    exactly once even when a lost connection makes PostgreSQL retry it (its result must then
    be JSON); ``exactly_once=False`` skips that bookkeeping for a write that is idempotent.
    An ``empty`` op has nothing to ask the database (no ids were given, no field changes):
    the store returns its body's result without opening a transaction.
    """

    body: Callable[[Dialect], Body[T]]
    write: bool = False
    adds_messages: bool = False
    exactly_once: bool = True
    empty: bool = False

    def result_without_sql(self, dialect: Dialect) -> T:
        """What an ``empty`` op returns: its body run without a connection (it asks for no
        statement)."""
        return drive(None, self.body(dialect))
