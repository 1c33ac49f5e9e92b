"""Copy tables kept beside the messages, row for row, along with a migration.

The LangGraph checkpoints of the LangChain adapter live in plain tables keyed by thread (the
session of the same id) whose values are opaque blobs: nothing in them refers to a message id,
so they are copied as they are, after the sessions (their rows reference them), by SQL bodies
(:mod:`harombe_core.store.sql_body`) that run unchanged on SQLite and PostgreSQL. Why it is
safe to stop and re-run at any point:

* Each table is read in primary-key order, a page at a time, and each page is written to the
  destination in one transaction, applied exactly once.
* A row the destination already holds identically (a page an interrupted run committed) is
  skipped; one it holds with other values is a conflict: MigrationError names the table and
  nothing of that page is written, so a destination's own data is never overwritten.
* Verification reads both sides again, page by page: every source row must be there, equal.
* Before anything is copied, every serialised value is checked against a
  :class:`~harombe_core.checkpoint_safety.TypePolicy` (:func:`check_tables`): a row that would
  revive a type nobody allowed (a crafted ``os.system``, a pickle) is refused, so a database
  someone hands over cannot become code run by whoever reads the destination.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from harombe_core.checkpoint_safety import TypePolicy, check_row
from harombe_core.errors import Fix, InvalidInputError, MigrationError, UnsafeCheckpointError
from harombe_core.store.sql_body import Body, SqlRunner, sql_runner

__all__ = [
    "CHECKPOINT_MARKS",
    "CHECKPOINT_TABLES",
    "KEY_TABLES",
    "Table",
    "check_tables",
    "copy_tables",
    "verify_tables",
]

# Rows per page at most: a page's keys are bound as parameters (up to five each).
_PAGE_CAP = 500


@dataclass(frozen=True)
class Table:
    """A table copied row for row: its primary-key columns and its other columns, and which
    two of those hold a serialised value (its tag and its bytes), if any."""

    name: str
    key: tuple[str, ...]
    values: tuple[str, ...]
    payload: tuple[str, str] | None = None

    @property
    def columns(self) -> str:
        return ", ".join((*self.key, *self.values))


#: The checkpointer's tables (schema migration 4), in an order their references allow.
CHECKPOINT_TABLES = (
    Table("checkpoint_threads", ("thread_id",), ("blob_epoch",)),
    Table("checkpoints", ("thread_id", "checkpoint_ns", "checkpoint_id"),
          ("parent_checkpoint_id", "run_id", "type", "checkpoint", "metadata"),
          ("type", "checkpoint")),
    Table("checkpoint_blobs", ("thread_id", "checkpoint_ns", "channel", "version"),
          ("type", "blob"), ("type", "blob")),
    Table("checkpoint_writes", ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
          ("task_path", "channel", "type", "blob"), ("type", "blob")),
    Table("checkpoint_message_blobs", ("thread_id", "hash"), ("type", "blob"),
          ("type", "blob")),
)

#: Threads whose session is still owed its newest checkpoint's messages (schema migration 9):
#: copied too, so the destination's first checkpointer writes those sessions.
CHECKPOINT_MARKS = (Table("checkpoint_mirror_due", ("thread_id",), ()),)

#: The API keys of ``harombe serve`` (schema migration 8), by their SHA-256 only (never a key):
#: copied so a server moved to the destination accepts the keys its clients already hold, and a
#: revoked key stays revoked there.
KEY_TABLES = (
    Table(
        "api_keys",
        ("id",),
        ("key_hash", "user_id", "admin", "label", "created_at", "revoked_at"),
    ),
)

Row = tuple[Any, ...]


def _plain(row: Any) -> Row:
    """A row with ``bytes`` where a driver returned another buffer type, so rows compare."""
    return tuple(bytes(v) if isinstance(v, (memoryview, bytearray)) else v for v in row)


def _read_page(runner: SqlRunner, table: Table, after: Row | None, limit: int) -> Body[list[Row]]:
    """The first ``limit`` rows after key ``after``, in key order."""
    where = ""
    if after is not None:
        where = f" WHERE ({', '.join(table.key)}) > ({', '.join('?' * len(table.key))})"
    rows = (
        yield runner.step(
            f"SELECT {table.columns} FROM {table.name}{where} ORDER BY {', '.join(table.key)} "
            "LIMIT ?",
            (*(after or ()), limit),
        )
    ).rows
    return [_plain(r) for r in rows]


def _read_keys(runner: SqlRunner, table: Table, keys: list[Row]) -> Body[dict[Row, Row]]:
    """The rows of these keys the destination holds, by key (one index lookup each)."""
    width = len(table.key)
    marks = "(" + ", ".join("?" * width) + ")"
    on = " AND ".join(f"t.{c} = k.column{n}" for n, c in enumerate(table.key, 1))
    columns = ", ".join(f"t.{c}" for c in (*table.key, *table.values))
    rows = (
        yield runner.step(
            f"SELECT {columns} FROM (VALUES {', '.join([marks] * len(keys))}) AS k "
            f"JOIN {table.name} t ON {on}",
            [value for key in keys for value in key],
        )
    ).rows
    return {row[:width]: row for row in map(_plain, rows)}


def _compare(table: Table, page: list[Row], there: dict[Row, Row]) -> tuple[list[Row], int]:
    """(source rows the destination lacks, how many it holds differently)."""
    width = len(table.key)
    missing = [row for row in page if row[:width] not in there]
    different = sum(1 for row in page if there.get(row[:width], row) != row)
    return missing, different


def _write_page(runner: SqlRunner, table: Table, page: list[Row]) -> Body[int]:
    """Insert the page's rows the destination lacks; refuse if it holds any differently."""
    there = yield from _read_keys(runner, table, [row[: len(table.key)] for row in page])
    missing, different = _compare(table, page, there)
    if different:
        raise MigrationError(
            f"the destination already holds {different} row(s) of {table.name} with other "
            "values; nothing of them was overwritten. Migrate into an empty database."
        )
    marks = "(" + ", ".join("?" * len(missing[0])) + ")" if missing else ""
    if missing:
        yield runner.step(
            f"INSERT INTO {table.name} ({table.columns}) VALUES "
            + ", ".join([marks] * len(missing)),
            [value for row in missing for value in row],
        )
    return len(missing)


def _pages(runner: SqlRunner, table: Table, batch_size: int) -> Iterator[list[Row]]:
    after: Row | None = None
    limit = min(batch_size, _PAGE_CAP)
    while True:
        page = runner.read(partial(_read_page, runner, table, after, limit))
        if not page:
            return
        yield page
        after = page[-1][: len(table.key)]


def _runners(src: Any, dst: Any) -> tuple[SqlRunner, SqlRunner] | None:
    """Both stores' runners, or None when the source keeps no such tables."""
    try:
        source = sql_runner(src)
    except InvalidInputError:
        return None
    try:
        return source, sql_runner(dst)
    except InvalidInputError:
        raise MigrationError(
            f"{type(dst).__name__} cannot keep the source's checkpoints; migrate to a SQLite "
            "path or a postgresql:// URL."
        ) from None


def copy_tables(
    src: Any, dst: Any, tables: tuple[Table, ...], *, batch_size: int = 500
) -> tuple[int, int]:
    """Copy every row of ``tables`` that ``dst`` lacks: (rows in the source, copied now)."""
    runners = _runners(src, dst)
    if runners is None:
        return 0, 0
    source, target = runners
    total = copied = 0
    for table in tables:
        for page in _pages(source, table, batch_size):
            total += len(page)
            copied += target.run(partial(_write_page, target, table, page), exactly_once=True)
    return total, copied


def check_tables(src: Any, tables: tuple[Table, ...], policy: TypePolicy) -> None:
    """Raise UnsafeCheckpointError, naming the table and thread, for the first row whose
    value would revive a type ``policy`` does not permit. Reads only; constructs nothing."""
    try:
        source = sql_runner(src)
    except InvalidInputError:
        return
    for table in tables:
        if table.payload is None:
            continue
        columns = (*table.key, *table.values)
        tag_at, data_at = (columns.index(c) for c in table.payload)
        for page in _pages(source, table, _PAGE_CAP):
            for row in page:
                if row[data_at] is None:
                    continue
                try:
                    check_row(str(row[tag_at]), row[data_at], policy)
                except UnsafeCheckpointError as exc:
                    raise _refused_copy(src.location, table.name, row[0], exc) from None


def _refused_copy(
    location: str, table: str, thread_id: Any, exc: UnsafeCheckpointError
) -> UnsafeCheckpointError:
    """The refusal of a row, naming where it is and how a migration allows its type."""
    module, _, name = exc.type_name.rpartition(".")
    fix = exc.fix
    if fix is not None and module:
        fix = Fix(
            api="If the application stores this type itself, allow exactly it: "
            f"migrate(..., allowed_types=[({module!r}, {name!r})]).",
            cli=fix.cli,
        )
    return UnsafeCheckpointError(
        f"{location}: {table} (thread {thread_id!r}): {exc.problem} Nothing was copied.",
        type_name=exc.type_name,
        fix=fix,
    )


def verify_tables(src: Any, dst: Any, tables: tuple[Table, ...]) -> list[str]:
    """What differs: a line per table with rows missing or different at the destination."""
    runners = _runners(src, dst)
    if runners is None:
        return []
    source, target = runners
    problems: list[str] = []
    for table in tables:
        missing = different = 0
        for page in _pages(source, table, _PAGE_CAP):
            keys = [row[: len(table.key)] for row in page]
            there = target.read(partial(_read_keys, target, table, keys))
            lacking, changed = _compare(table, page, there)
            missing, different = missing + len(lacking), different + changed
        if missing or different:
            problems.append(f"{table.name}: {missing} rows missing, {different} different")
    return problems
