"""``harombe check``'s "rows harombe can read", the same on SQLite and PostgreSQL.

A row edited outside harombe (a blob for text, bad JSON, a time that is not one) passes the
database's own checks (SQLite's ``quick_check``, PostgreSQL's constraints and amcheck) but
fails every read that meets it with CorruptRowError. The check reads every message, session
and LangGraph store item as harombe reads them, and names the first few such rows with their
repair. It only reads, on both backends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harombe_core.errors import CorruptRowError

__all__ = ["LABEL", "rows_check"]

LABEL = "rows harombe can read"
#: At most this many unreadable rows are named (all are counted).
NAMED = 5


def rows_check(
    execute: Callable[[str], Any], tables: set[str], errors: tuple[type[Exception], ...]
) -> tuple[str, bool, str]:
    """``(label, passed, detail)`` for the rows of ``tables`` that ``execute(sql)`` (a cursor
    with ``fetchmany``) reads; ``errors`` are the driver's, reported as the check's failure."""
    from harombe_core.store import items
    from harombe_core.store.rows import (
        MESSAGE_COLUMNS,
        SESSION_COLUMNS,
        row_to_message,
        row_to_session,
    )

    reads = [
        ("messages", f"SELECT {MESSAGE_COLUMNS} FROM messages m", row_to_message),
        ("sessions", f"SELECT {SESSION_COLUMNS} FROM sessions", row_to_session),
        ("store_items", f"SELECT {items.COLUMNS} FROM store_items", items.to_item),
    ]
    found: list[str] = []
    count = 0
    for table, sql, read in reads:
        if table not in tables:
            continue
        try:
            cursor = execute(sql)
            while batch := cursor.fetchmany(1000):
                for row in batch:
                    try:
                        read(row)
                    except CorruptRowError as exc:
                        count += 1
                        if len(found) < NAMED:
                            found.append(str(exc))
        except errors as exc:
            return (LABEL, False, f"{table}: {exc}")
    detail = "ok" if not count else f"{count} row(s) cannot be read: " + " | ".join(found)
    return (LABEL, count == 0, detail)
