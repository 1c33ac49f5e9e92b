"""``harombe check postgresql://...``: is a PostgreSQL store sound? One result per check.

What a SQLite file is checked for, where PostgreSQL has an equivalent worth asking:

* the schema version against this harombe's (newer: this harombe must not write to it;
  older: the next open migrates it);
* every keyword vector against what the database computes from its text *now*:

  - ``messages.fts``, which harombe computes when it inserts a message (from the message and
    the turn it answers, ``schema.PG_MESSAGE_VECTOR``): a row restored from a dump made with
    other text search settings, or edited by hand, is counted;
  - ``sessions.summary_fts``, set by the ``harombe_summary_fts`` trigger: the summaries are
    copied into a temporary table carrying the same trigger function, so the vector compared
    is exactly what the database's own trigger makes today (no hand-kept copy of its body,
    and no row of ``sessions`` is written or locked);
  - ``facts.fts``, a generated column, compared with its generation expression as the
    catalog holds it (a stored generated value goes stale when a function it calls changes);
* derived rows whose source is gone: message vectors, store vectors (both have foreign keys,
  so only a restore or a bulk load with triggers off leaves such rows);
* ``amcheck``'s ``bt_index_check`` of each B-tree index of harombe's tables, only when the
  extension is already installed and this role may run it: installing it needs a superuser,
  and a check must not change the database or ask for more rights than reading it. Without
  it the line says so (a skipped check, not a failed one).

The whole check runs in one transaction that is rolled back, so it writes nothing that lasts
(the temporary table dies with it). It reads every message once (O(messages)); run it when
convenient, not on every request. SQLite's PRAGMA quick_check has no PostgreSQL equivalent
short of ``pg_amcheck`` or data checksums, which are the server operator's tools.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg_errors

from harombe_core.errors import NotAHarombeDatabaseError, StoreError, StoreUnavailableError
from harombe_core.store.postgres import TABLES, redact_url, store_exists
from harombe_core.store.rows_check import rows_check
from harombe_core.store.schema import PG_MESSAGE_VECTOR, PG_SCHEMA_VERSION

__all__ = ["Result", "check_postgres"]

#: (check, passed, detail); a check that could not run passes with a detail of "skipped: ...".
Result = tuple[str, bool, str]

_SUMMARY_COPY = "harombe_check_summaries"


def check_postgres(url: str, *, connect_timeout: float = 5.0) -> list[Result]:
    """Every check of the store at ``url``, changing nothing.

    Raises StoreUnavailableError (server unreachable, wrong host/port/password),
    StoreNotFoundError (no such database), NotAHarombeDatabaseError (no harombe schema) or
    StoreError (a role that may not read the store's tables).
    """
    where = redact_url(url)
    if not store_exists(url, connect_timeout=connect_timeout):
        raise NotAHarombeDatabaseError(
            f"{where} holds no harombe store (no harombe_schema table); nothing was checked. "
            "Check the database name, and the search_path if the store is in its own schema."
        )
    try:
        conn = psycopg.connect(url, connect_timeout=max(1, int(connect_timeout)))
    except psycopg.OperationalError as exc:
        raise StoreUnavailableError(
            f"{where} could not be reached ({str(exc).strip()}). Check that the server is "
            "running and the URL is right."
        ) from None
    try:
        with conn.cursor() as cur:
            return _checks(cur)
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StoreError(
            f"{where}: the check could not read the store ({first}); nothing was changed. Run "
            "it as a role that may read harombe's tables (the role the application uses)."
        ) from None
    finally:
        conn.rollback()
        conn.close()


def _checks(cur: psycopg.Cursor[Any]) -> list[Result]:
    results = [_schema_version(cur)]
    tables = _tables(cur)
    if "messages" in tables:
        results.append(
            _count(
                cur,
                "message keyword vectors differing from their text",
                f"SELECT count(*) FROM messages WHERE fts IS DISTINCT FROM ({PG_MESSAGE_VECTOR})",
                "run `harombe reindex`",
            )
        )
    if "sessions" in tables:
        results.append(_summaries(cur))
    if "facts" in tables:
        results.append(_facts(cur))
    if "message_vectors" in tables:
        results.append(
            _count(
                cur,
                "message vectors without their message",
                "SELECT count(*) FROM message_vectors v "
                "WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = v.message_id)",
                "run `harombe reindex`",
            )
        )
    if "store_vectors" in tables:
        results.append(
            _count(
                cur,
                "store vectors without their item",
                "SELECT count(*) FROM store_vectors v WHERE NOT EXISTS (SELECT 1 FROM "
                "store_items i WHERE i.namespace = v.namespace AND i.key = v.key)",
                "delete them: DELETE FROM store_vectors v WHERE NOT EXISTS (SELECT 1 FROM "
                "store_items i WHERE i.namespace = v.namespace AND i.key = v.key)",
            )
        )
    results.append(rows_check(cur.execute, tables, (psycopg.Error,)))
    results.append(_amcheck(cur, sorted(tables)))
    return results


def _schema_version(cur: psycopg.Cursor[Any]) -> Result:
    row = cur.execute("SELECT COALESCE(MAX(version), 0) FROM harombe_schema").fetchone()
    version = int(row[0]) if row else 0
    name = "schema version"
    if version > PG_SCHEMA_VERSION:
        return (
            name,
            False,
            f"{version}, newer than this harombe understands ({PG_SCHEMA_VERSION}): upgrade "
            "harombe-memory before using it",
        )
    if version < PG_SCHEMA_VERSION:
        return (
            name,
            True,
            f"{version} ({PG_SCHEMA_VERSION - version} migration(s) to apply "
            f"on the next open, which brings it to {PG_SCHEMA_VERSION})",
        )
    return (name, True, str(version))


def _tables(cur: psycopg.Cursor[Any]) -> set[str]:
    """harombe's tables as this connection's search_path finds them."""
    rows = cur.execute(
        "SELECT name FROM unnest(%s::text[]) AS name WHERE to_regclass(name) IS NOT NULL",
        (TABLES,),
    ).fetchall()
    return {str(r[0]) for r in rows}


def _count(cur: psycopg.Cursor[Any], label: str, sql: str, fix: str) -> Result:
    row = cur.execute(sql).fetchone()
    found = int(row[0]) if row else 0
    return (label, found == 0, f"{found} row(s)" + (f": {fix}" if found else ""))


def _summaries(cur: psycopg.Cursor[Any]) -> Result:
    """Summary vectors against what ``harombe_summary_fts`` computes now (see the module)."""
    label = "summary keyword vectors differing from their text"
    if cur.execute("SELECT to_regproc('harombe_summary_fts') IS NULL").fetchone() == (True,):
        return (label, True, "skipped: no summary index in this schema version")
    cur.execute("SAVEPOINT summaries")
    try:
        cur.execute(
            f"CREATE TEMPORARY TABLE {_SUMMARY_COPY} ON COMMIT DROP AS "
            "SELECT id, summary, summary_json, summary_fts FROM sessions WITH NO DATA"
        )
        cur.execute(
            f"CREATE TRIGGER recompute BEFORE INSERT ON {_SUMMARY_COPY} "
            "FOR EACH ROW EXECUTE FUNCTION harombe_summary_fts()"
        )
        cur.execute(
            f"INSERT INTO {_SUMMARY_COPY} (id, summary, summary_json) "
            "SELECT id, summary, summary_json FROM sessions"
        )
    except (pg_errors.InsufficientPrivilege, pg_errors.ReadOnlySqlTransaction) as exc:
        cur.execute("ROLLBACK TO SAVEPOINT summaries")
        first = str(exc).strip().splitlines()[0]
        return (label, True, f"skipped: a temporary table cannot be made here ({first})")
    return _count(
        cur,
        label,
        f"SELECT count(*) FROM {_SUMMARY_COPY} c JOIN sessions s USING (id) "
        "WHERE c.summary_fts IS DISTINCT FROM s.summary_fts",
        "recompute them: UPDATE sessions SET summary = summary WHERE summary <> ''",
    )


def _facts(cur: psycopg.Cursor[Any]) -> Result:
    """The stored ``facts.fts`` against its generation expression (read from the catalog)."""
    label = "fact keyword vectors differing from their text"
    row = cur.execute(
        "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a "
        "ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
        "WHERE d.adrelid = to_regclass('facts') AND a.attname = 'fts' AND a.attgenerated = 's'"
    ).fetchone()
    if row is None:
        return (label, True, "skipped: facts.fts is not a generated column here")
    return _count(
        cur,
        label,
        f"SELECT count(*) FROM facts WHERE fts IS DISTINCT FROM ({row[0]})",
        "recompute them: UPDATE facts SET text = text",
    )


def _amcheck(cur: psycopg.Cursor[Any], tables: list[str]) -> Result:
    """``bt_index_check`` of every B-tree index of harombe's tables, if amcheck is installed
    and this role may run it; else a skipped line saying why."""
    label = "amcheck B-tree indexes"
    row = cur.execute(
        "SELECT quote_ident(n.nspname) FROM pg_extension e "
        "JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'amcheck'"
    ).fetchone()
    if row is None:
        return (
            label,
            True,
            "skipped: the amcheck extension is not installed (a superuser can add it: "
            "CREATE EXTENSION amcheck, then GRANT EXECUTE ON FUNCTION bt_index_check(regclass) "
            "to this role)",
        )
    schema = row[0]
    indexes = [
        str(r[0])
        for r in cur.execute(
            "SELECT i.indexrelid::regclass::text FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
            "WHERE a.amname = 'btree' AND i.indrelid = ANY(SELECT to_regclass(t) "
            "FROM unnest(%s::text[]) AS t) ORDER BY 1",
            (tables,),
        ).fetchall()
    ]
    broken: list[str] = []
    for index in indexes:
        cur.execute("SAVEPOINT amcheck")
        try:
            cur.execute(f"SELECT {schema}.bt_index_check(%s::regclass)", (index,))
        except pg_errors.InsufficientPrivilege as exc:
            cur.execute("ROLLBACK TO SAVEPOINT amcheck")
            first = str(exc).strip().splitlines()[0]
            return (label, True, f"skipped: this role may not run amcheck ({first})")
        except psycopg.DatabaseError as exc:
            cur.execute("ROLLBACK TO SAVEPOINT amcheck")
            broken.append(f"{index}: {str(exc).strip().splitlines()[0]}")
    if broken:
        return (label, False, "; ".join(broken) + ": REINDEX INDEX each one named")
    return (label, True, f"{len(indexes)} index(es) ok")
