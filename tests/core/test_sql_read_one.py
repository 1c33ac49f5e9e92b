"""SqlRunner.read_one: a read body of one statement runs alone (no BEGIN/COMMIT around it);
a body that asks more is run again from its start in one read snapshot, so its answer is the
same as :meth:`SqlRunner.read`'s."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harombe_core import MemoryManager
from harombe_core.store.sql_body import Body, SqlRunner, sql_runner


@pytest.fixture(params=["sqlite", "postgres"])
def sql(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlRunner]:
    url = (
        str(request.getfixturevalue("pg_url"))
        if request.param == "postgres"
        else str(tmp_path / "read_one.db")
    )
    with MemoryManager(url, embedding=None) as manager:
        manager.create_session(user_id="u", session_id="s1")
        manager.create_session(user_id="u", session_id="s2")
        yield sql_runner(manager.store)


def test_bodies_of_none_one_and_several_statements_answer_as_read(sql: SqlRunner) -> None:
    starts: list[str] = []

    def nothing() -> Body[str]:
        starts.append("nothing")
        return "none asked"
        yield  # a generator that asks no statement

    def one() -> Body[list[str]]:
        starts.append("one")
        rows = (yield sql.step("SELECT id FROM sessions ORDER BY id")).rows
        return [r[0] for r in rows]

    def two() -> Body[tuple[list[str], int]]:
        starts.append("two")
        rows = (yield sql.step("SELECT id FROM sessions ORDER BY id")).rows
        counted = (yield sql.step("SELECT COUNT(*) FROM sessions WHERE id = ?", ("s1",))).rows
        return [r[0] for r in rows], counted[0][0]

    assert sql.read_one(nothing) == sql.read(nothing) == "none asked"
    assert sql.read_one(one) == sql.read(one) == ["s1", "s2"]
    assert sql.read_one(two) == sql.read(two) == (["s1", "s2"], 1)
    if sql.store.dialect.name == "sqlite":
        # The body of two statements was dropped after its first and run again from the start.
        assert starts == ["nothing", "nothing", "one", "one", "two", "two", "two"]


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
