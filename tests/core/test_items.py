"""The core's key/value items (:mod:`harombe_core.store.items`) on SQLite and PostgreSQL,
used directly: plain tuples, JSON text and numbers in and out, no LangGraph anywhere.

Each test runs on a SQLite file and on PostgreSQL (the session's embedded server), so the
operations written once behave the same on both.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from harombe_core import MemoryManager
from harombe_core.errors import InvalidInputError
from harombe_core.store import items
from harombe_core.store.sql_body import Body, SqlRunner, sql_runner

T = TypeVar("T")
NOW = 1_700_000_000 * 1_000_000  # microseconds since the epoch
MINUTE = 60_000_000


@pytest.fixture(params=["sqlite", "postgres"])
def sql(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlRunner]:
    url = (
        str(request.getfixturevalue("pg_url"))
        if request.param == "postgres"
        else str(tmp_path / "items.db")
    )
    with MemoryManager(url, embedding=None) as manager:
        yield sql_runner(manager.store)


def run(sql: SqlRunner, body: Callable[[], Body[T]]) -> T:
    return sql.run(body, exactly_once=True)


def put(sql: SqlRunner, ns: tuple[str, ...], key: str, value: dict[str, Any], **kw: Any) -> None:
    text, now = items.encode_values({key: value})[key], kw.pop("now", NOW)
    run(sql, lambda: items.put(sql, ns, key, text, now=now, **kw))


def count(sql: SqlRunner, table: str) -> int:
    def body() -> Body[int]:
        return int((yield sql.step(f"SELECT COUNT(*) FROM {table}")).rows[0][0])

    return sql.read(body)


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_put_get_update_delete(sql: SqlRunner) -> None:
    put(sql, ("users", "ann"), "prefs", {"tea": "green", "n": 1}, vectors=[("$", unit(1, 0))])
    row = run(sql, lambda: items.get(sql, ("users", "ann"), "prefs", now=NOW))
    item = items.to_item(row)
    assert item["namespace"] == ("users", "ann")
    assert (item["key"], item["value"]) == ("prefs", {"tea": "green", "n": 1})
    assert item["created_at"] == item["updated_at"]
    assert int(item["created_at"].timestamp()) == NOW // 1_000_000

    put(sql, ("users", "ann"), "prefs", {"tea": "black"}, now=NOW + MINUTE)
    again = items.to_item(run(sql, lambda: items.get(sql, ("users", "ann"), "prefs", now=NOW)))
    assert again["value"] == {"tea": "black"}
    assert again["created_at"] == item["created_at"]  # an update keeps the creation time
    assert (again["updated_at"] - again["created_at"]).total_seconds() == 60
    assert count(sql, "store_vectors") == 0  # replaced by the new write's (none)

    put(sql, ("users", "ann"), "prefs", {"tea": "oolong"}, vectors=[("$", unit(0, 1))])
    run(sql, lambda: items.delete(sql, ("users", "ann"), "prefs"))
    assert run(sql, lambda: items.get(sql, ("users", "ann"), "prefs", now=NOW)) is None
    assert (count(sql, "store_items"), count(sql, "store_vectors")) == (0, 0)


def test_search_ranks_by_best_vector_and_filters(sql: SqlRunner) -> None:
    put(sql, ("docs", "a"), "tea", {"kind": "drink", "n": 3},
        vectors=[("title", unit(0, 1)), ("body", unit(1, 0.1))])
    put(sql, ("docs", "b"), "cake", {"kind": "food", "n": 1}, vectors=[("$", unit(0, 1))],
        now=NOW + 1)
    put(sql, ("docs",), "plain", {"kind": "drink", "n": 2}, now=NOW + 2)  # no vector
    put(sql, ("docsx",), "other", {"kind": "drink"}, vectors=[("$", unit(1, 0))])
    put(sql, ("docs", "c"), "other-model", {"kind": "drink"}, vectors=[("$", unit(1, 0, 0))],
        now=NOW + 3)

    def search(**kw: Any) -> list[tuple[str, float | None]]:
        hits = run(sql, lambda: items.search(sql, ("docs",), now=NOW, **kw))
        return [(row[1], None if score is None else round(score, 3)) for row, score in hits]

    # Newest update first without a query; "docsx" is not under the prefix "docs".
    assert [k for k, _ in search()] == ["other-model", "plain", "cake", "tea"]
    ranked = search(query=unit(1, 0))
    assert [k for k, _ in ranked] == ["tea", "cake", "other-model", "plain"]
    assert ranked[0][1] == pytest.approx(0.995, abs=1e-3)  # its best vector, not its first
    assert ranked[1][1] == 0.0
    assert ranked[2][1] is None  # a vector of another length is not comparable
    assert search(value_filter={"kind": "drink", "n": {"$gte": 2}}) == [
        ("plain", None), ("tea", None)
    ]
    assert [k for k, _ in search(query=unit(1, 0), offset=1, limit=2)] == ["cake", "other-model"]


def test_ttl_expiry_refresh_and_sweep(sql: SqlRunner) -> None:
    put(sql, ("s",), "short", {"v": 1}, ttl=1)
    put(sql, ("s",), "long", {"v": 2}, ttl=10)
    put(sql, ("s",), "forever", {"v": 3})
    later = NOW + 2 * MINUTE

    def get(key: str, **kw: Any) -> Any:
        return run(sql, lambda: items.get(sql, ("s",), key, now=later, **kw))

    assert get("short") is not None  # expired, but readable until swept
    assert get("short", omit_expired=True) is None
    assert get("long", refresh=True)[5] == NOW + 10 * MINUTE  # the row as it was read
    assert get("long")[5] == later + 10 * MINUTE  # then renewed from the read
    hits = run(sql, lambda: items.search(sql, ("s",), now=later, omit_expired=True))
    assert sorted(row[1] for row, _ in hits) == ["forever", "long"]
    assert run(sql, lambda: items.sweep(sql, now=later)) == 1
    assert get("short") is None
    assert run(sql, lambda: items.sweep(sql, now=later)) == 0


def test_list_namespaces_matches_cuts_and_pages(sql: SqlRunner) -> None:
    for ns in [("a", "x", "1"), ("a", "y"), ("b", "x"), ("a", "x", "2")]:
        put(sql, ns, "k", {"v": 1})

    def names(**kw: Any) -> list[tuple[str, ...]]:
        return [tuple(n) for n in run(sql, lambda: items.list_namespaces(sql, now=NOW, **kw))]

    assert names() == [("a", "x", "1"), ("a", "x", "2"), ("a", "y"), ("b", "x")]
    assert names(match=[("prefix", ("a", "*"))], max_depth=2) == [("a", "x"), ("a", "y")]
    assert names(match=[("suffix", ("x",))]) == [("b", "x")]
    assert names(offset=1, limit=2) == [("a", "x", "2"), ("a", "y")]


def test_bodies_share_one_transaction_and_bad_input_changes_nothing(sql: SqlRunner) -> None:
    value = items.encode_values({"k": {"v": 1}})["k"]

    def batch() -> Body[Any]:
        yield from items.put(sql, ("ok",), "k", value, now=NOW)
        yield from items.put(sql, ("bad.label",), "k", value, now=NOW)  # refused mid-way

    with pytest.raises(InvalidInputError, match="labels cannot contain"):
        run(sql, batch)
    assert count(sql, "store_items") == 0  # the first put was rolled back with it

    with pytest.raises(InvalidInputError, match="JSON objects"):
        items.encode_values({"k": {"v": object()}})
    with pytest.raises(InvalidInputError, match="unsupported filter operator"):
        items.check_filter({"n": {"$near": 1}})
    with pytest.raises(InvalidInputError, match="store key"):
        run(sql, lambda: items.get(sql, ("ok",), "a\x00b", now=NOW))


def test_items_need_no_langgraph() -> None:
    code = (
        "import sys, harombe_core.store.items\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in "
        "('langgraph', 'langchain_core', 'langchain', 'langchain_harombe')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# SqlRunner.read_one ---------------------------------------------------------------------------
def _new_session(sql: SqlRunner, session_id: str) -> Body[None]:
    yield sql.step(
        "INSERT INTO sessions (id, user_id, created_at, updated_at) VALUES (?, ?, ?, ?)",
        (session_id, "u", NOW, NOW),
    )


def test_read_one_answers_as_read_for_bodies_of_none_one_and_several_statements(
    sql: SqlRunner,
) -> None:
    """A body of one statement runs alone (no BEGIN/COMMIT); one that asks more is run again
    from its start in one read snapshot."""
    for session_id in ("s1", "s2"):
        sql.run(lambda s=session_id: _new_session(sql, s), exactly_once=True)
    starts: list[str] = []

    def nothing() -> Body[str]:
        starts.append("nothing")
        return "none asked"
        yield  # a generator that asks no statement

    def one() -> Body[list[str]]:
        starts.append("one")
        rows = (yield sql.step("SELECT id FROM sessions WHERE id IN ('s1', 's2') ORDER BY id")).rows
        return [r[0] for r in rows]

    def two() -> Body[tuple[list[str], int]]:
        starts.append("two")
        rows = (yield sql.step("SELECT id FROM sessions WHERE id IN ('s1', 's2') ORDER BY id")).rows
        counted = (yield sql.step("SELECT COUNT(*) FROM sessions WHERE id = ?", ("s1",))).rows
        return [r[0] for r in rows], counted[0][0]

    assert sql.read_one(nothing) == sql.read(nothing) == "none asked"
    assert sql.read_one(one) == sql.read(one) == ["s1", "s2"]
    assert sql.read_one(two) == sql.read(two) == (["s1", "s2"], 1)
    if sql.store.dialect.name == "sqlite":
        # The body of two statements was dropped after its first and run again from the start.
        assert starts == ["nothing", "nothing", "one", "one", "two", "two", "two"]


def test_run_first_alone_commits_a_lone_statement_and_runs_a_longer_body_again(
    sql: SqlRunner,
) -> None:
    """A body whose first statement wrote something and stops is that statement alone; one
    whose first statement wrote nothing and asks another is run again from its start in one
    transaction (as :meth:`SqlRunner.run`), so both answer as ``run`` does."""
    starts: list[str] = []

    def insert_or_create(session_id: str) -> Body[str]:
        starts.append(session_id)
        done = yield sql.step(
            "UPDATE sessions SET updated_at = updated_at + 1 WHERE id = ?", (session_id,)
        )
        if done.rowcount:
            return "updated"
        yield from _new_session(sql, session_id)
        return "created"

    def alone(body: Callable[[], Body[str]]) -> str:
        return sql.run(body, exactly_once=True, first_alone=True)

    assert alone(lambda: insert_or_create("r1")) == "created"
    assert alone(lambda: insert_or_create("r1")) == "updated"
    assert sql.read(lambda: _updated("r1", sql)) == NOW + 1
    if sql.store.dialect.name == "sqlite":
        # The creating body was dropped after its first statement and run again.
        assert starts == ["r1", "r1", "r1"]


def _updated(session_id: str, sql: SqlRunner) -> Body[int]:
    rows = (yield sql.step("SELECT updated_at FROM sessions WHERE id = ?", (session_id,))).rows
    return int(rows[0][0])


def test_read_one_inside_an_atomic_block_sees_its_writes(tmp_path: Path) -> None:
    with MemoryManager(str(tmp_path / "atomic.db"), embedding=None) as manager:
        sql = sql_runner(manager.store)

        def ids() -> Body[list[str]]:
            rows = (yield sql.step("SELECT id FROM sessions ORDER BY id")).rows
            return [r[0] for r in rows]

        def inside() -> list[str]:
            manager.create_session(user_id="u", session_id="inside")
            return sql.read_one(ids)

        assert manager.store.atomic(inside) == ["inside"]
