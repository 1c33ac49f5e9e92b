"""``harombe check LOCATION``: is this memory store sound? A report and an exit code.

A SQLite file (encrypted ones too: the key comes from ``HAROMBE_DB_KEY``, as for every other
command) gets these checks, each read-only (the FTS checks run in a transaction rolled back):

* for an encrypted file, SQLCipher's ``PRAGMA cipher_integrity_check``: every page's HMAC
  (a page changed by anything but SQLCipher with this key is named);
* SQLite's ``PRAGMA quick_check``: every page, b-tree and record of the file is well formed;
* FTS5 ``integrity-check`` of each keyword index (``messages_fts``, ``facts_fts``,
  ``sessions_fts``): the index agrees with itself;
* derived rows against their sources: message vectors and store vectors whose message or item
  is gone;
* every message, session and store item decoded as harombe reads it (a row edited outside
  harombe is named, with the SQL that deletes it).

A ``postgresql://`` URL gets the checks that have a meaning there
(:mod:`harombe_core.store.pg_check`).

Exit code 0 when every check passes, 1 when one fails (the report says which and how to
repair: restore a backup, or ``harombe reindex`` for derived rows), 2 when the store cannot be
opened at all (no file, not a database, a wrong key, a server that cannot be reached: a typed
error says which). The file is opened by SQLite itself, never read around it. See
docs/store-maintenance.md.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from harombe_core.cli_app import command, console, error_line
from harombe_core.errors import HarombeError, MissingExtraError
from harombe_core.store.rows_check import rows_check

__all__ = ["check", "check_command", "check_file"]

#: (check, passed, detail); a check that could not run passes with a detail of "skipped: ...".
Result = tuple[str, bool, str]

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


def check(location: str) -> tuple[int, list[Result]]:
    """``(exit code, results)`` for a SQLite file (its key, if encrypted, from
    ``HAROMBE_DB_KEY``) or a ``postgresql://`` URL.

    Raises EncryptionKeyError (a wrong key, or a key for an unencrypted file),
    StoreUnavailableError / StoreNotFoundError (a server or database that cannot be reached),
    NotAHarombeDatabaseError (a database without a harombe store), MissingExtraError.
    """
    if location.startswith(("postgresql://", "postgres://")):
        try:
            from harombe_core.store.pg_check import check_postgres
        except ImportError as exc:
            raise MissingExtraError("harombe check on PostgreSQL", "postgres", "psycopg") from exc
        results = check_postgres(location)
        return (0 if all(ok for _, ok, _ in results) else 1), results
    from harombe_core.store.encryption import resolve_key

    return check_file(location, resolve_key(None))


def check_file(path: str, key: str | None = None) -> tuple[int, list[Result]]:
    """``(exit code, [(check, passed, detail)])`` for the SQLite file at ``path``, opened with
    SQLCipher and ``key`` when one is given. Raises EncryptionKeyError when ``key`` does not
    open it."""
    file = Path(path)
    if not file.is_file():
        return 2, [("open", False, f"no file at {path}")]
    try:
        conn = _connect(f"{file.resolve().as_uri()}?mode=rw", key)
    except sqlite3.Error as exc:
        return 2, [("open", False, str(exc))]
    try:
        try:  # the header: what tells a database (with this key) from anything else
            conn.execute("PRAGMA application_id").fetchone()
        except sqlite3.DatabaseError as exc:
            if key is not None and "not a database" in str(exc).lower():
                from harombe_core.store.sqlite_checks import wrong_key

                raise wrong_key(file, exc) from None
            return 2, [("open", False, _unreadable(exc))]
        results: list[Result] = []
        if key is not None:
            results.append(_cipher_check(conn))
        results.append(_quick_check(conn))
        tables = {str(r[0]) for r in _safe(conn, "SELECT name FROM sqlite_master")}
        for fts in (t for t in _FTS if t in tables):
            results.append(_fts_check(conn, fts))
        for label, (table, sql) in _CONSISTENCY.items():
            if table in tables:
                results.append(_count_check(conn, label, sql))
        results.append(rows_check(conn.execute, tables, (sqlite3.DatabaseError,)))
    finally:
        conn.close()
    return (0 if all(ok for _, ok, _ in results) else 1), results


def _connect(uri: str, key: str | None) -> Any:
    if key is None:
        return sqlite3.connect(uri, uri=True, isolation_level=None)
    from harombe_core.store.encryption import connect

    return connect(uri, key, timeout=5.0)


def _unreadable(exc: sqlite3.Error) -> str:
    from harombe_core.store.encryption import KEY_ENV

    return (
        f"{exc}: not a SQLite database, or its header is gone (if it is an encrypted harombe "
        f"database, set {KEY_ENV} to its key)"
    )


def _cipher_check(conn: Any) -> Result:
    """SQLCipher's HMAC of every page: names the pages changed behind its back."""
    try:
        rows = [str(r[0]) for r in conn.execute("PRAGMA cipher_integrity_check")]
    except sqlite3.DatabaseError as exc:
        return ("cipher_integrity_check", False, str(exc))
    if not rows:
        return ("cipher_integrity_check", True, "ok")
    shown = "; ".join(rows[:5]) + (f"; and {len(rows) - 5} more" if len(rows) > 5 else "")
    return ("cipher_integrity_check", False, f"{shown}: restore a backup")


def _quick_check(conn: Any) -> Result:
    """SQLite's own check of pages and records; a page it cannot read at all (SQLCipher
    refuses a page whose HMAC fails) is a failed check too, not a file that cannot open."""
    try:
        rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check(20)")]
    except sqlite3.DatabaseError as exc:
        return ("quick_check", False, f"{exc}: restore a backup")
    return ("quick_check", rows == ["ok"], "ok" if rows == ["ok"] else "; ".join(rows))


def _safe(conn: Any, sql: str) -> list[tuple[object, ...]]:
    try:
        rows: list[tuple[object, ...]] = conn.execute(sql).fetchall()
        return rows
    except sqlite3.DatabaseError:
        return []


def _fts_check(conn: Any, table: str) -> Result:
    """FTS5's own check; it is an INSERT, so it runs in a transaction that is rolled back."""
    conn.execute("BEGIN")
    try:
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
        return (f"{table} integrity-check", True, "ok")
    except sqlite3.DatabaseError as exc:
        return (f"{table} integrity-check", False, f"{exc}: run `harombe reindex`")
    finally:
        conn.execute("ROLLBACK")


def _count_check(conn: Any, label: str, sql: str) -> Result:
    try:
        found = int(conn.execute(sql).fetchone()[0])
    except sqlite3.DatabaseError as exc:
        return (label, False, str(exc))
    return (label, found == 0, f"{found} row(s)" + (": run `harombe reindex`" if found else ""))


@command("check")
def check_command(
    location: Annotated[
        str,
        typer.Argument(
            metavar="PATH|URL",
            help="A SQLite database file (encrypted: its key in HAROMBE_DB_KEY) or a "
            "postgresql:// URL.",
        ),
    ],
) -> None:
    """Check a memory store: a SQLite file's pages and records (quick_check; an encrypted
    file's page HMACs), keyword indexes and derived rows against their sources; on PostgreSQL
    the schema version, keyword vectors against their text, derived rows and (if installed)
    amcheck. Exit code 0 sound, 1 a check failed, 2 the store cannot be opened."""
    try:
        code, results = check(location)
    except HarombeError as exc:
        error_line(exc.cli_message())
        raise typer.Exit(2) from None
    for name, ok, detail in results:
        mark = "[green]    ok[/green]" if ok else "[red]FAILED[/red]"
        if ok and detail.startswith("skipped"):
            mark = "[yellow]  skip[/yellow]"
        console.print(f"{mark}  {escape(name)}: {escape(detail)}")
    console.print("sound" if code == 0 else "[red]problems found[/red]")
    raise typer.Exit(code)
