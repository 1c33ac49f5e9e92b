"""``harombe check PATH``: is this SQLite memory file sound? A report and an exit code.

Three kinds of check, each read-only (the FTS checks run in a transaction rolled back):

* SQLite's ``PRAGMA quick_check``: every page, b-tree and record of the file is well formed;
* FTS5 ``integrity-check`` of each keyword index (``messages_fts``, ``facts_fts``,
  ``sessions_fts``): the index agrees with itself;
* derived rows against their sources: message vectors and store vectors whose message or item
  is gone, and messages marked embedded without a vector.

Exit code 0 when every check passes, 1 when one fails (the report says which and how to
repair: restore a backup, or ``harombe reindex`` for derived rows), 2 when the file cannot be
opened at all. The file is opened by SQLite itself, never read around it; an encrypted file is
not checked (its key is not taken here). See docs/store-maintenance.md.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from harombe_core.cli_app import command, console

__all__ = ["check_command", "check_file"]

_FTS = ("messages_fts", "facts_fts", "sessions_fts")
_CONSISTENCY = {
    "message vectors without their message": (
        "message_vectors",
        "SELECT COUNT(*) FROM message_vectors v "
        "WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = v.message_id)",
    ),
    "store vectors without their item": (
        "store_vectors",
        "SELECT COUNT(*) FROM store_vectors v WHERE NOT EXISTS (SELECT 1 FROM store_items i "
        "WHERE i.namespace = v.namespace AND i.key = v.key)",
    ),
}


def check_file(path: str) -> tuple[int, list[tuple[str, bool, str]]]:
    """``(exit code, [(check, passed, detail)])`` for the SQLite file at ``path``."""
    if not Path(path).is_file():
        return 2, [("open", False, f"no file at {path}")]
    results: list[tuple[str, bool, str]] = []
    try:
        conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=rw", uri=True)
        conn.isolation_level = None
    except sqlite3.Error as exc:
        return 2, [("open", False, str(exc))]
    try:
        try:
            rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check(20)")]
        except sqlite3.DatabaseError as exc:
            return 2, [("quick_check", False, f"{exc} (not a database, or its header is gone)")]
        results.append(("quick_check", rows == ["ok"], "ok" if rows == ["ok"] else "; ".join(rows)))
        tables = {str(r[0]) for r in _safe(conn, "SELECT name FROM sqlite_master")}
        for fts in (t for t in _FTS if t in tables):
            results.append(_fts_check(conn, fts))
        for label, (table, sql) in _CONSISTENCY.items():
            if table in tables:
                results.append(_count_check(conn, label, sql))
    finally:
        conn.close()
    return (0 if all(ok for _, ok, _ in results) else 1), results


def _safe(conn: sqlite3.Connection, sql: str) -> list[tuple[object, ...]]:
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.DatabaseError:
        return []


def _fts_check(conn: sqlite3.Connection, table: str) -> tuple[str, bool, str]:
    """FTS5's own check; it is an INSERT, so it runs in a transaction that is rolled back."""
    conn.execute("BEGIN")
    try:
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
        return (f"{table} integrity-check", True, "ok")
    except sqlite3.DatabaseError as exc:
        return (f"{table} integrity-check", False, f"{exc}: run `harombe reindex`")
    finally:
        conn.execute("ROLLBACK")


def _count_check(conn: sqlite3.Connection, label: str, sql: str) -> tuple[str, bool, str]:
    try:
        found = int(conn.execute(sql).fetchone()[0])
    except sqlite3.DatabaseError as exc:
        return (label, False, str(exc))
    return (label, found == 0, f"{found} row(s)" + (": run `harombe reindex`" if found else ""))


@command("check")
def check_command(
    path: Annotated[str, typer.Argument(metavar="PATH", help="The SQLite database file.")],
) -> None:
    """Check a SQLite memory file: pages and records (quick_check), keyword indexes (FTS5
    integrity-check) and derived rows against their sources. Exit code 0 sound, 1 a check
    failed, 2 the file cannot be opened."""
    code, results = check_file(path)
    for name, ok, detail in results:
        mark = "[green]    ok[/green]" if ok else "[red]FAILED[/red]"
        console.print(f"{mark}  {escape(name)}: {escape(detail)}")
    console.print("sound" if code == 0 else "[red]problems found[/red]")
    raise typer.Exit(code)
