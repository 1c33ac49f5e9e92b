"""``harombe check postgresql://...`` on a real PostgreSQL: a sound store passes (exit 0),
keyword vectors that differ from their text and vectors without their item are counted (exit
1), amcheck runs where it is installed and is reported skipped where not, and an unreachable
server, a missing database or a database without a store are typed errors (exit 2)."""

from __future__ import annotations

import psycopg
import pytest
from typer.testing import CliRunner

from harombe_core import MemoryManager, Message
from harombe_core.cli import app
from harombe_core.cli_check import check
from harombe_core.errors import (
    NotAHarombeDatabaseError,
    StoreNotFoundError,
    StoreUnavailableError,
)
from harombe_core.store.pg_server import EmbeddedPostgres, free_port

runner = CliRunner()


def _filled(url: str) -> list[str]:
    """A store with messages, summaries (set by the trigger), facts and store items; the
    session ids."""
    sessions = []
    with MemoryManager(url, embedding=None) as mm:
        for s in range(3):
            sid = mm.create_session(user_id="u1")
            mm.save_messages(
                sid, [Message(role="user", content=f"note {i} about topic {s}") for i in range(5)]
            )
            sessions.append(sid)
        mm.add_fact("u1", "Ann lives in Lisbon")
        mm.add_fact("u1", "Обожает чай", kind="preference")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE sessions SET summary = 'Talked about the garden, 花园', "
            'summary_json = \'{"topics": ["garden", "irrigation"]}\''
        )
    return sessions


def _found(results: list[tuple[str, bool, str]], label: str) -> tuple[bool, str]:
    ok, detail = next((r[1], r[2]) for r in results if r[0] == label)
    return ok, detail


def test_a_sound_store_passes_and_is_left_as_it_was(pg_url: str) -> None:
    _filled(pg_url)
    with psycopg.connect(pg_url) as conn:
        before = conn.execute("SELECT id, xmin::text, summary_fts::text FROM sessions").fetchall()
    result = runner.invoke(app, ["check", pg_url])
    assert result.exit_code == 0, result.output
    for line in (
        "schema version:",
        "message keyword vectors differing from their text: 0 row(s)",
        "summary keyword vectors differing from their text: 0 row(s)",
        "fact keyword vectors differing from their text: 0 row(s)",
        "store vectors without their item: 0 row(s)",
    ):
        assert line in result.output
    assert "sound" in result.output
    with psycopg.connect(pg_url) as conn:
        after = conn.execute("SELECT id, xmin::text, summary_fts::text FROM sessions").fetchall()
        temp = conn.execute("SELECT to_regclass('harombe_check_summaries')").fetchone()
    assert sorted(after) == sorted(before)  # not even rewritten with the same values
    assert temp == (None,)


def test_vectors_differing_from_their_text_are_counted(pg_url: str) -> None:
    sessions = _filled(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE messages SET fts = to_tsvector('simple', 'stale') "
            "WHERE id = (SELECT min(id) FROM messages)"
        )
        # Only the summary's own columns fire its trigger: this vector stays as set here.
        conn.execute("UPDATE sessions SET summary_fts = NULL WHERE id = %s", (sessions[0],))
    code, results = check(pg_url)
    assert code == 1
    assert _found(results, "message keyword vectors differing from their text") == (
        False,
        "1 row(s): run `harombe reindex`",
    )
    ok, detail = _found(results, "summary keyword vectors differing from their text")
    assert not ok
    assert detail.startswith("1 row(s)")
    result = runner.invoke(app, ["check", pg_url])
    assert result.exit_code == 1
    assert "problems found" in result.output
    assert runner.invoke(app, ["reindex", "--db", pg_url]).exit_code == 0
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the repair the report names
        conn.execute("UPDATE sessions SET summary = summary WHERE summary <> ''")
    assert check(pg_url)[0] == 0


def test_a_function_changed_under_stored_vectors_is_found(pg_url: str) -> None:
    """A generated column (facts.fts) and the messages' vectors keep the values of the
    function they were computed with: a changed function leaves them stale."""
    _filled(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION harombe_spaced(t TEXT) RETURNS TEXT LANGUAGE sql "
            "IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT upper(t) || ' changed' $$"
        )
    code, results = check(pg_url)
    assert code == 1
    assert _found(results, "fact keyword vectors differing from their text")[1].startswith(
        "2 row(s)"
    )
    assert _found(results, "message keyword vectors differing from their text")[1].startswith(
        "15 row(s)"
    )


def test_store_vectors_without_their_item_are_counted(pg_url: str) -> None:
    _filled(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # What a bulk load with triggers off (pg_restore --disable-triggers) can leave.
        conn.execute("SET session_replication_role = replica")
        conn.execute(
            "INSERT INTO store_vectors (namespace, key, path, vector) "
            "VALUES ('gone', 'k', '$', '\\x00')"
        )
    code, results = check(pg_url)
    assert code == 1
    ok, detail = _found(results, "store vectors without their item")
    assert not ok
    assert detail.startswith("1 row(s)")


def test_amcheck_runs_when_installed_and_is_skipped_when_not(pg_url: str) -> None:
    _filled(pg_url)
    ok, detail = _found(check(pg_url)[1], "amcheck B-tree indexes")
    assert ok
    assert detail.startswith("skipped: the amcheck extension is not installed")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION amcheck")
    code, results = check(pg_url)
    assert code == 0
    ok, detail = _found(results, "amcheck B-tree indexes")
    assert ok
    assert detail.endswith("index(es) ok")
    assert int(detail.split()[0]) > 10
    # A role that may read the store but not run amcheck: skipped, not failed.
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS checker")
        conn.execute("CREATE ROLE checker LOGIN")
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO checker")
        conn.execute("REVOKE EXECUTE ON FUNCTION bt_index_check(regclass) FROM PUBLIC")
    try:
        code, results = check(pg_url.replace("postgres@", "checker@"))
        ok, detail = _found(results, "amcheck B-tree indexes")
        assert ok
        assert detail.startswith("skipped: this role may not run amcheck")
        assert code == 0
        # A role that may not read the tables at all: a typed error, exit code 2.
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("REVOKE SELECT ON ALL TABLES IN SCHEMA public FROM checker")
        result = runner.invoke(app, ["check", pg_url.replace("postgres@", "checker@")])
        assert result.exit_code == 2
        assert "may read harombe's tables" in result.output
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP OWNED BY checker")
            conn.execute("DROP ROLE checker")


def test_a_newer_schema_fails(pg_url: str) -> None:
    _filled(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO harombe_schema (version) VALUES (999)")
    code, results = check(pg_url)
    assert code == 1
    ok, detail = _found(results, "schema version")
    assert not ok
    assert "upgrade harombe-memory" in detail


def test_an_unreachable_server_is_a_typed_error_and_exit_code_2() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    with pytest.raises(StoreUnavailableError):
        check(url)
    result = runner.invoke(app, ["check", url])
    assert result.exit_code == 2
    assert "could not be reached" in result.output


def test_a_missing_database_or_one_without_a_store_is_exit_code_2(
    pg_server: EmbeddedPostgres,
) -> None:
    with pytest.raises(StoreNotFoundError):
        check(pg_server.url_for("no_such_database"))
    empty = pg_server.create_database("check_empty")
    with pytest.raises(NotAHarombeDatabaseError):
        check(empty)
    result = runner.invoke(app, ["check", empty])
    assert result.exit_code == 2
    assert "holds no harombe store" in result.output


def test_rows_edited_outside_harombe_are_named_and_nothing_is_changed(pg_url: str) -> None:
    """A row whose JSON is not what harombe writes passes PostgreSQL's constraints but fails
    every read that meets it; the check names it, as on SQLite, and changes nothing."""
    sessions = _filled(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE messages SET tool_calls = 'oops' WHERE content = 'note 1 about topic 0'"
        )
        conn.execute("UPDATE sessions SET metadata = '[]' WHERE id = %s", (sessions[2],))
        rows = "(SELECT string_agg(x::text || x.xmin::text, '|' ORDER BY x.id) FROM {} x)"
        snapshot = f"SELECT {rows.format('messages')}, {rows.format('sessions')}"
        before = conn.execute(snapshot).fetchone()
    ok, detail = _found(check(pg_url)[1], "rows harombe can read")
    assert not ok
    assert detail.startswith("2 row(s) cannot be read")
    assert "of table messages: column tool_calls is not valid JSON" in detail
    assert f"row '{sessions[2]}' of table sessions: column metadata" in detail
    result = runner.invoke(app, ["check", pg_url])
    assert result.exit_code == 1, result.output
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(snapshot).fetchone() == before
