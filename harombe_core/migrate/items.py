"""Copy the long-term key-value items (the LangGraph store) along with a migration.

Items and their vectors live in ``store_items`` / ``store_vectors`` beside the messages, which
the message-store protocol does not model, so they are copied as SQL bodies
(:mod:`harombe_core.store.sql_body`) that run unchanged on SQLite and PostgreSQL. Why it is safe
to stop and re-run at any point:

* Items are read in key order, a page at a time, and each page is written to the destination in
  one transaction, item and vectors together (vectors are copied as stored, with the name of
  the model that made them, so no model is needed and semantic search finds the same items).
* An item the destination already holds identically (a page an interrupted run committed) is
  skipped; one it holds with a different value is a conflict: MigrationError names it and
  nothing of that page is written, so a destination's own data is never overwritten.
* Verification reads both sides again, page by page, and every source item must be present with
  the same value, dates, expiry and vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from harombe_core.errors import InvalidInputError, MigrationError
from harombe_core.store.sql_body import Body, SqlRunner, sql_runner

__all__ = ["copy_store_items", "verify_store_items"]

_COLUMNS = "namespace, key, value, created_at, updated_at, expires_at, ttl_minutes"
# Items per page at most, whatever the batch size: a page's keys are bound as parameters (two
# each), well inside SQLite's and PostgreSQL's limits.
_PAGE_CAP = 1000

Key = tuple[str, str]
Item = tuple[Any, ...]
Vector = tuple[str, str, str, bytes, str | None]  # namespace, key, path, vector, model
Page = tuple[list[Item], list[Vector]]


def _runner(store: Any) -> SqlRunner | None:
    try:
        return sql_runner(store)
    except InvalidInputError:
        return None


def _read_page(runner: SqlRunner, after: Key | None, limit: int) -> Body[Page]:
    """The first ``limit`` items after ``after`` in key order, and their vectors."""
    where = "" if after is None else " WHERE (namespace, key) > (?, ?)"
    keys = (
        yield runner.step(
            f"SELECT namespace, key FROM store_items{where} ORDER BY namespace, key LIMIT ?",
            (*(after or ()), limit),
        )
    ).rows
    if not keys:
        return [], []
    return (yield from _read_keys(runner, [(k[0], k[1]) for k in keys]))


def _read_keys(runner: SqlRunner, keys: list[Key]) -> Body[Page]:
    """Exactly these items (those present), in key order, and their vectors."""
    among = "(namespace, key) IN (VALUES " + ", ".join(["(?, ?)"] * len(keys)) + ")"
    params = tuple(part for key in keys for part in key)
    items = (
        yield runner.step(
            f"SELECT {_COLUMNS} FROM store_items WHERE {among} ORDER BY namespace, key", params
        )
    ).rows
    vectors = (
        yield runner.step(
            f"SELECT namespace, key, path, vector, model FROM store_vectors WHERE {among} "
            "ORDER BY namespace, key, path",
            params,
        )
    ).rows
    return [tuple(r) for r in items], [(r[0], r[1], r[2], bytes(r[3]), r[4]) for r in vectors]


def _keys(page: Page) -> list[Key]:
    return [(item[0], item[1]) for item in page[0]]


def _by_key(page: Page) -> dict[Key, tuple[Item, list[Vector]]]:
    items, vectors = page
    out: dict[Key, tuple[Item, list[Vector]]] = {(i[0], i[1]): (i, []) for i in items}
    for v in vectors:
        if (v[0], v[1]) in out:
            out[(v[0], v[1])][1].append(v)
    return out


def _conflicts(source: Page, destination: Page) -> tuple[list[Key], list[Key]]:
    """(keys the destination lacks, keys it holds differently)."""
    have = _by_key(destination)
    missing, different = [], []
    for key, entry in _by_key(source).items():
        if key not in have:
            missing.append(key)
        elif have[key] != entry:
            different.append(key)
    return missing, different


def _write_page(runner: SqlRunner, source: Page) -> Body[int]:
    """Insert the page's items the destination lacks; refuse if it holds any differently."""
    existing = yield from _read_keys(runner, _keys(source))
    missing, different = _conflicts(source, existing)
    if different:
        shown = ", ".join(f"{ns}/{key}" for ns, key in different[:5])
        raise MigrationError(
            f"the destination already holds {len(different)} store item(s) with other values "
            f"({shown}); nothing of them was overwritten. Delete them there, or migrate into "
            "an empty database."
        )
    entries = _by_key(source)
    for key in missing:
        item, vectors = entries[key]
        yield runner.step(
            f"INSERT INTO store_items ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", item
        )
        for vector in vectors:
            yield runner.step(
                "INSERT INTO store_vectors (namespace, key, path, vector, model) "
                "VALUES (?, ?, ?, ?, ?)",
                vector,
            )
    return len(missing)


def _pages(runner: SqlRunner, batch_size: int) -> Iterator[Page]:
    """The source's items, page by page, each read in its own short transaction."""
    after: Key | None = None
    limit = min(batch_size, _PAGE_CAP)
    while True:
        page = runner.run(partial(_read_page, runner, after, limit))
        if not page[0]:
            return
        yield page
        after = _keys(page)[-1]


def _destination(dst: Any) -> SqlRunner:
    target = _runner(dst)
    if target is None:
        raise MigrationError(
            f"the source holds store items but {type(dst).__name__} cannot keep them; "
            "migrate to a SQLite path or a postgresql:// URL."
        )
    return target


def copy_store_items(
    src: Any, dst: Any, *, batch_size: int = 500, on_page: Callable[[int], None] | None = None
) -> tuple[int, int]:
    """Copy every store item of ``src`` that ``dst`` lacks: (items in the source, copied now)."""
    source = _runner(src)
    if source is None:
        return 0, 0
    total = copied = 0
    target: SqlRunner | None = None
    for page in _pages(source, batch_size):
        target = target or _destination(dst)
        total += len(page[0])
        # exactly once: a retry after a lost COMMIT reports what the first attempt copied
        copied += target.run(partial(_write_page, target, page), exactly_once=True)
        if on_page is not None:
            on_page(len(page[0]))
    return total, copied


def verify_store_items(src: Any, dst: Any, *, batch_size: int = 500) -> list[str]:
    """What differs: a line per missing or different item (empty when all arrived intact)."""
    source = _runner(src)
    if source is None:
        return []
    problems: list[str] = []
    target: SqlRunner | None = None
    for page in _pages(source, batch_size):
        target = target or _destination(dst)
        there = target.run(partial(_read_keys, target, _keys(page)))
        missing, different = _conflicts(page, there)
        problems += [f"store item {ns}/{key}: missing" for ns, key in missing]
        problems += [f"store item {ns}/{key}: differs" for ns, key in different]
    return problems
