"""Key/value items with vectors: the long-term memory kept beside the conversations.

An item is a JSON object filed under a namespace (a tuple of labels, stored dotted) and a key,
with its creation and update times, an optional time to live, and any number of float32 vectors
(one per embedded text) that rank it in a search. Items live in the ``store_items`` and
``store_vectors`` tables of the same database as the messages, so one file (or one PostgreSQL
database) and one backup hold both; the LangGraph store of the LangChain adapter is built on
them, and ``harombe migrate`` copies them.

Each operation is written once, as a body of SQL steps (:mod:`harombe_core.store.sql_body`)
that runs unchanged on SQLite and PostgreSQL. Bodies compose: a caller can run several of them
in one transaction (reads first, then writes, as a batch of the LangGraph store does) with
:meth:`SqlRunner.run`. They take and return plain values (namespace tuples, JSON text, numbers,
rows as lists) so a body's result can be recorded as JSON when a write must be applied exactly
once; :func:`to_item` turns a row into the item's fields. Times are integer microseconds since
the epoch, passed in as ``now`` so the caller owns the clock.

Filters match on the decoded JSON as LangGraph's own stores match them: equality, nested dicts,
dotted paths to nested keys and ``$eq $ne $gt $gte $lt $lte``, a missing or null field matching
none but ``$eq: None``.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import orjson

from harombe_core.embeddings.base import legacy_name
from harombe_core.errors import CorruptRowError, InvalidInputError
from harombe_core.limits import current_limits
from harombe_core.store.rows import corrupt_row, from_micros, json_problem, time_problem
from harombe_core.store.schema import NS_ORDER
from harombe_core.store.sql_body import Body, SqlRunner
from harombe_core.validate import check_id, check_text

__all__ = [
    "COLUMNS",
    "check_filter",
    "check_key",
    "check_namespace",
    "delete",
    "encode_values",
    "filter_field",
    "get",
    "list_namespaces",
    "matches_filter",
    "ns_matches",
    "ns_order",
    "put",
    "search",
    "sweep",
    "to_item",
]

#: An item's row, in this order: what :func:`get` and :func:`search` return.
COLUMNS = "namespace, key, value, created_at, updated_at, expires_at, ttl_minutes"
_LIVE = " AND (expires_at IS NULL OR expires_at > ?)"
_MINUTE = 60_000_000  # microseconds

Namespace = tuple[str, ...]
K = TypeVar("K")


def check_namespace(value: Any, what: str, *, empty: bool) -> None:
    """A namespace: a tuple of labels, each a non-empty id without dots (they are stored
    dotted, so a dot would make two namespaces one)."""
    if not isinstance(value, tuple) or (not value and not empty):
        raise InvalidInputError(
            f"{what} must be a {'' if empty else 'non-empty '}tuple of str labels, got "
            f"{type(value).__name__}{'' if value or empty else ' ()'}."
        )
    for label in value:
        check_id(label, f"a {what} label")
        if "." in label:
            raise InvalidInputError(f"{what} labels cannot contain '.', got {label!r:.60}.")


def check_key(namespace: Any, key: Any) -> None:
    """An item's address; the key may be empty, as in LangGraph's stores."""
    check_namespace(namespace, "namespace", empty=False)
    if key != "":
        check_id(key, "store key")


def encode_values(values: Mapping[K, Any]) -> dict[K, str]:
    """Each value as the JSON text :func:`put` stores, as LangGraph's ``SqliteStore`` writes it
    (orjson: NaN and infinities become ``null``, datetimes, dates, times and UUIDs ISO 8601 /
    canonical strings, tuples lists); all are serialised, then each is measured against
    ``store_value_chars``, so nothing is written unless every value fits."""
    out = {k: _dumps(v) for k, v in values.items()}
    limit = current_limits().store_value_chars
    for text in out.values():  # measured as stored, before anything is embedded
        check_text(text, "a store value (as JSON)", limit=limit, field="store_value_chars")
    return out


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(dict(value)).decode()
    except (TypeError, ValueError) as exc:  # orjson.JSONEncodeError is a TypeError
        raise InvalidInputError(
            "store values must be JSON objects with str keys (str, numbers, bools, None, lists, "
            f"dicts, datetimes; integers within 64 bits): {exc}. Convert the value first."
        ) from exc


def to_item(row: Sequence[Any]) -> dict[str, Any]:
    """An item's fields from its row: ``namespace`` (tuple), ``key``, ``value`` (the decoded
    JSON), ``created_at`` and ``updated_at`` (UTC datetimes)."""
    try:
        item = {
            "namespace": tuple(row[0].split(".")),
            "key": row[1],
            "value": _value(row),
            "created_at": from_micros(row[3]),
            "updated_at": from_micros(row[4]),
        }
    except (TypeError, ValueError, OverflowError):
        raise _corrupt(row) from None
    return item


def _value(row: Sequence[Any]) -> Any:
    """An item row's value, decoded; CorruptRowError naming the row when it is not a JSON
    object (the row was edited outside harombe)."""
    try:
        value = json.loads(row[2])
    except (TypeError, ValueError):
        raise _corrupt(row) from None
    if type(value) is not dict:
        raise _corrupt(row)
    return value


def _corrupt(row: Sequence[Any]) -> CorruptRowError:
    checks = [
        ("namespace", None if type(row[0]) is str else f"holds a {type(row[0]).__name__}"),
        ("value", json_problem(row[2], dict, nullable=False)),
        ("created_at", time_problem(row[3])),
        ("updated_at", time_problem(row[4])),
    ]
    column, what = next(((c, p) for c, p in checks if p), ("?", "could not be read"))
    return corrupt_row("store_items", {"namespace": row[0], "key": row[1]}, column, what)


def _live(omit_expired: bool, now: int) -> tuple[str, list[Any]]:
    """The clause (and its parameter) hiding expired rows when ``omit_expired`` is set."""
    return (_LIVE, [now]) if omit_expired else ("", [])


# operations -------------------------------------------------------------------------------
def get(
    sql: SqlRunner,
    namespace: Namespace,
    key: str,
    *,
    now: int,
    omit_expired: bool = False,
    refresh: bool = False,
) -> Body[Any]:
    """The item's row, or None. An expired item is found until it is swept, unless
    ``omit_expired``; ``refresh`` renews its expiry from ``now`` (if it has a TTL)."""
    check_key(namespace, key)
    live, params = _live(omit_expired, now)
    rows = (
        yield sql.step(
            f"SELECT {COLUMNS} FROM store_items WHERE namespace = ? AND key = ?{live}",
            [".".join(namespace), key, *params],
        )
    ).rows
    if not rows:
        return None
    if refresh:
        yield from _refresh(sql, rows, now)
    return rows[0]


def put(
    sql: SqlRunner,
    namespace: Namespace,
    key: str,
    value: str | None,
    *,
    now: int,
    ttl: float | None = None,
    vectors: Sequence[tuple[str, Any]] | None = None,
    model: str | None = None,
) -> Body[None]:
    """Write an item: ``value`` is its JSON text (:func:`encode_values`), or None to delete it
    and its vectors. A write keeps the item's creation time, sets its update time to ``now``
    and its expiry ``ttl`` minutes later (None: never), and replaces its vectors with
    ``vectors``: ``(path, vector)`` pairs, each vector stored as float32 with ``model`` (the
    name of the embedder that made them), so a search by another model can tell them apart."""
    check_key(namespace, key)
    if value is None:
        yield from delete(sql, namespace, key)
        return
    name = ".".join(namespace)
    expires = None if ttl is None else now + int(ttl * _MINUTE)
    yield sql.step(
        "INSERT INTO store_items (namespace, key, value, created_at, updated_at, expires_at, "
        "ttl_minutes) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, key) DO UPDATE SET "
        "value = excluded.value, updated_at = excluded.updated_at, "
        "expires_at = excluded.expires_at, ttl_minutes = excluded.ttl_minutes",
        (name, key, value, now, now, expires, ttl),
    )
    yield sql.step("DELETE FROM store_vectors WHERE namespace = ? AND key = ?", (name, key))
    if vectors:
        yield from put_vectors(sql, name, key, vectors, model)


def put_vectors(
    sql: SqlRunner, name: str, key: str, vectors: Sequence[tuple[str, Any]], model: str | None
) -> Body[None]:
    """Insert an item's vectors (``name`` is its namespace joined by dots), made by ``model``."""
    blobs = [(path, np.asarray(v, dtype=np.float32).tobytes()) for path, v in vectors]
    yield sql.step(
        "INSERT INTO store_vectors (namespace, key, path, vector, model) VALUES "
        + ", ".join(["(?, ?, ?, ?, ?)"] * len(blobs)),
        [v for path, blob in blobs for v in (name, key, path, blob, model)],
    )


def delete(sql: SqlRunner, namespace: Namespace, key: str) -> Body[None]:
    """Delete an item and its vectors (nothing if there is none)."""
    check_key(namespace, key)
    yield sql.step(
        "DELETE FROM store_items WHERE namespace = ? AND key = ?", (".".join(namespace), key)
    )


def search(
    sql: SqlRunner,
    prefix: Namespace,
    *,
    now: int,
    value_filter: Mapping[str, Any] | None = None,
    query: np.ndarray | None = None,
    offset: int = 0,
    limit: int = 10,
    omit_expired: bool = False,
    refresh: bool = False,
    model: str | None = None,
    stale: Callable[[int], None] | None = None,
) -> Body[list[Any]]:
    """``[row, score]`` pairs for the items under ``prefix`` that match ``value_filter`` (checked
    first with :func:`check_filter`), the page ``offset:offset + limit``.

    Without ``query`` they come newest update first (then by key), score None. With a
    ``query`` vector (unit length) they are ranked by the best cosine of their vectors of the
    same length; items without one follow, unscored, in the same newest-first order.
    ``refresh`` renews the expiry of the items returned.

    ``model`` (the identity of the embedder that made ``query``, from
    :func:`harombe_core.embeddings.base.identity`): only vectors recorded with that
    model are compared; an item whose vectors another model made is stale and follows unscored,
    never ranked by a meaningless cosine. ``stale`` is then called with how many such items the
    search met. Vectors written before models were recorded (model unknown), or recorded under
    the embedder's bare name before identities, are compared as they always were, so an upgrade
    loses no search by meaning; ``reindex`` re-embeds them under the identity.
    """
    check_namespace(prefix, "namespace_prefix", empty=True)
    name = ".".join(prefix)
    live, params = _live(omit_expired, now)
    where = "TRUE" + live
    if name:
        where += " AND (namespace = ? OR substr(namespace, 1, CAST(? AS INTEGER)) = ?)"
        params += [name, len(name) + 1, name + "."]
    rest = value_filter
    if value_filter:
        clauses, values, rest = yield from _pushed_filter(sql, where, params, value_filter)
        where += "".join(" AND " + c for c in clauses)
        params += values
    order = f"SELECT {COLUMNS} FROM store_items WHERE {where} ORDER BY updated_at DESC, key"
    if not rest and query is None:
        # Nothing to filter or rank in Python: the database pages, so a search reads the page,
        # not every item under the prefix (a user's thousands of memories for limit=10). A
        # filter SQL says exactly (:func:`_filter_sql`) is already in the WHERE clause.
        page_rows = (yield sql.step(order + " LIMIT ? OFFSET ?", [*params, limit, offset])).rows
        if refresh:
            yield from _refresh(sql, page_rows, now)
        return [[row, None] for row in page_rows]
    rows = (yield sql.step(order, params)).rows
    if rest:
        rows = [r for r in rows if matches_filter(_value(r), rest)]
    scored: list[tuple[float | None, Any]] = [(None, r) for r in rows]
    if query is not None and rows:
        best, old = yield from _best_scores(sql, rows, query, model)
        if old and stale is not None:
            stale(len(old))
        scored = [(best.get((r[0], r[1])), r) for r in rows]
        scored.sort(key=lambda sr: (sr[0] is None, -(sr[0] or 0.0)))
    page = scored[offset : offset + limit]
    if refresh:
        yield from _refresh(sql, [r for _, r in page], now)
    return [[row, score] for score, row in page]


_SQL_FIELD = re.compile(r"[A-Za-z0-9_]+")  # a top-level field a JSON path names unquoted
_EQUALITY = ("$eq", "$ne")
# A field's JSON text as written (escapes kept): SQLite's -> (3.38+; json_extract would cut a
# str at an escaped NUL), PostgreSQL's json -> (jsonb refuses a stored "\u0000").
_JSON_TEXT = {
    "sqlite": "(value -> ?)" if sqlite3.sqlite_version_info >= (3, 38) else "",
    "postgres": "(value::json -> ?::text)::text",
}
_SQL_OPERATORS = {"$eq": "=", "$ne": "<>", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _filter_sql(
    value_filter: Mapping[str, Any], dialect: str
) -> tuple[list[str], list[Any], dict[str, Any]]:
    """The conditions of ``value_filter`` SQL says exactly as :func:`matches_filter` does, as
    WHERE clauses and their parameters, and the rest (left to Python).

    Exact means: a top-level field (a plain name: no dot, so no path to resolve) compared with
    a str or a number, by equality or LangGraph's operators. A str matches only strings (in
    code point order on SQLite; PostgreSQL compares a str as JSON text, so only ``$eq`` and
    ``$ne``); a number matches numbers and booleans (Python's ``True == 1``); a missing or
    null field matches nothing. Dotted paths, nested dicts, lists, bools and
    None operands. The field name and operand are bound parameters, never SQL text."""
    clauses: list[str] = []
    params: list[Any] = []
    rest: dict[str, Any] = {}
    for key, wanted in value_filter.items():
        pairs = (
            list(wanted.items())
            if isinstance(wanted, Mapping) and wanted and all(k in _SQL_OPERATORS for k in wanted)
            else [("$eq", wanted)]
        )
        pushable = _SQL_FIELD.fullmatch(key) is not None and all(
            _sql_operand(operand)
            # a str compares as JSON text: equal or not, but not in order
            and not (
                isinstance(operand, str) and (name not in _EQUALITY or not _JSON_TEXT[dialect])
            )
            for name, operand in pairs
        )
        if not pushable:
            rest[key] = wanted
            continue
        for name, operand in pairs:
            clause, values = _field_clause(dialect, key, _SQL_OPERATORS[name], operand)
            clauses.append(clause)
            params += values
    return clauses, params, rest


def _pushed_filter(
    sql: SqlRunner, where: str, params: list[Any], value_filter: Mapping[str, Any]
) -> Body[tuple[list[str], list[Any], Mapping[str, Any]]]:
    """:func:`_filter_sql` for this store. PostgreSQL's json parser refuses a stored
    ``"\u0000"``, so there a value holding one (a NUL in a string, rare) under the prefix
    sends the whole filter back to Python, and the SQL never parses such a value."""
    dialect = sql.store.dialect.name
    clauses, values, rest = _filter_sql(value_filter, dialect)
    if not clauses:
        return clauses, values, rest
    if dialect != "postgres":
        # A value that is not JSON (edited outside harombe) passes the SQL filter, so that
        # decoding it names its row (CorruptRowError), as every other read of it does,
        # instead of the JSON functions failing the whole search.
        return (
            [f"CASE WHEN json_valid(value) THEN ({' AND '.join(clauses)}) ELSE 1 END"],
            values,
            rest,
        )
    nul = (
        yield sql.step(
            f"SELECT 1 FROM store_items WHERE {where} AND strpos(value, ?) > 0 LIMIT 1",
            [*params, _NUL],
        )
    ).rows
    if nul:
        return [], [], value_filter
    guarded = f"CASE WHEN strpos(value, ?) > 0 THEN FALSE ELSE ({' AND '.join(clauses)}) END"
    return [guarded], [_NUL, *values], rest


_NUL = "\\u0000"  # how orjson writes a NUL character in a stored value


def _sql_operand(operand: Any) -> bool:
    """A str, or a finite int or float within 64 bits (not a bool)."""
    if isinstance(operand, str):
        return True
    if isinstance(operand, bool) or not isinstance(operand, (int, float)):
        return False
    return -(2**63) <= operand < 2**63 and operand == operand and abs(operand) != float("inf")


def _field_clause(dialect: str, key: str, op: str, operand: Any) -> tuple[str, list[Any]]:
    """One field compared in SQL; ``<>`` (``$ne``) matches any non-null value of another type
    too, as ``a is not None and a != b`` does. A str compares as its JSON text (values are
    written by orjson, so one string has one text), a number as a number."""
    postgres = dialect == "postgres"
    name: Any = key if postgres else f'$."{key}"'
    kind = "json_typeof(value::json -> ?::text)" if postgres else "json_type(value, ?)"
    present = f"{kind} <> 'null'"
    if isinstance(operand, str):
        encoded = orjson.dumps(operand).decode()
        if op == "<>":
            return f"({present} AND {_JSON_TEXT[dialect]} <> ?)", [name, name, encoded]
        return f"({_JSON_TEXT[dialect]} = ?)", [name, encoded]
    if postgres:
        field = "(value::json -> ?::text)"
        same = f"{kind} IN ('number', 'boolean')"
        compare = (  # CASE, not AND, keeps a str from ever reaching the ::numeric cast
            f"(CASE {kind} WHEN 'boolean' THEN ({field}::text)::boolean::int "
            f"WHEN 'number' THEN ({field}::text)::numeric END) {op} ?::numeric"
        )
        names, value = [name] * 3, str(operand)
    else:
        same = f"{kind} IN ('integer', 'real', 'true', 'false')"
        compare = f"json_extract(value, ?) {op} ?"
        names, value = [name], operand
    if op == "<>":
        clause = f"({present} AND NOT ({same}) OR ({same} AND {compare}))"
        return clause, [name, name, name, *names, value]
    return f"({same} AND {compare})", [name, *names, value]


def list_namespaces(
    sql: SqlRunner,
    *,
    now: int,
    match: Sequence[tuple[str, Sequence[str]]] = (),
    max_depth: int | None = None,
    offset: int = 0,
    limit: int = 100,
    omit_expired: bool = False,
) -> Body[list[Namespace]]:
    """The distinct namespaces holding items, sorted, the page ``offset:offset + limit``:
    those matching every ``(match_type, path)`` of ``match`` (:func:`ns_matches`), each cut
    to ``max_depth`` labels (then deduplicated).

    The database answers the whole question, so a store of thousands of users hands back
    ``limit`` names, not every one. Without ``max_depth`` it walks the index on the names'
    sort key (:data:`harombe_core.store.schema.NS_ORDER`, tuple order) from the page's start:
    the labels before a prefix's first ``"*"`` are a range of that key, the labels after a
    suffix's last ``"*"`` compare by text, every other label of a path by position, and the
    walk stops after ``offset + limit`` names, so no call sorts the whole store. With
    ``max_depth`` the names are cut, made distinct and sorted by the same key in SQL.
    PostgreSQL splits a name with ``string_to_array``; SQLite with the two functions each
    harombe connection carries (:func:`harombe_core.store.sqlite_file.ns_label`,
    ``ns_head``)."""
    postgres = sql.store.dialect.name == "postgres"
    order = NS_ORDER[sql.store.dialect.name]
    live, params = _live(omit_expired, now)
    scope, scope_params, named, named_params = _namespace_conditions(match, order, postgres)
    where = "TRUE" + live + scope
    params += scope_params
    if max_depth is None and postgres and named:
        # Planned apart (OFFSET 0 keeps PostgreSQL from pushing the conditions on labels into
        # the walk, whose rows it would then underestimate and sort all): the walk of the
        # index in order, then the names it meets that match, up to the page's end.
        query = (
            f"SELECT namespace FROM (SELECT {order} AS k, namespace FROM store_items "
            f"WHERE {where} GROUP BY {order}, namespace ORDER BY {order}, namespace OFFSET 0) "
            f"AS walked WHERE TRUE{named} ORDER BY k, namespace LIMIT ? OFFSET ?"
        )
        params += named_params
    elif max_depth is None:
        # Grouped and ordered by the key and the name it is made of (the key alone orders the
        # same, but SQLite would sort the groups again): the index's order, so the database
        # reads the index from the start to the page's end, and no further.
        query = (
            f"SELECT namespace FROM store_items WHERE {where}{named} "
            f"GROUP BY {order}, namespace ORDER BY {order}, namespace LIMIT ? OFFSET ?"
        )
        params += named_params
    else:
        head = (
            "array_to_string((string_to_array(namespace, '.'))[1:CAST(? AS INTEGER)], '.')"
            if postgres
            else "harombe_ns_head(namespace, ?)"
        )
        collate = ' COLLATE "C"' if postgres else ""  # (a cut name's is already, in principle)
        query = (
            f"SELECT namespace FROM (SELECT DISTINCT {head} AS namespace FROM store_items "
            f"WHERE {where}{named}) AS heads ORDER BY {order}{collate} LIMIT ? OFFSET ?"
        )
        params = [int(max_depth), *params, *named_params]
    params += [min(limit, 2**62), min(offset, 2**62)]
    rows = (yield sql.step(query, params)).rows
    return [_namespace(r[0]) for r in rows]


def _namespace(name: Any) -> Namespace:
    """A stored namespace name as LangGraph's tuple; CorruptRowError naming it when it is not
    text (a row edited outside harombe), rather than a TypeError from ``split``."""
    if type(name) is not str:
        what = f"holds {type(name).__name__}, not text"
        raise corrupt_row("store_items", {"namespace": name}, "namespace", what)
    return tuple(name.split("."))


def _namespace_conditions(
    match: Sequence[tuple[str, Sequence[str]]], order: str, postgres: bool
) -> tuple[str, list[Any], str, list[Any]]:
    """The WHERE conditions of ``match`` in two parts, each as `` AND ...`` text and its
    parameters: the range of sort keys the labels before each prefix's first wildcard make
    (what the index answers), and the conditions each name is then checked by: the labels
    after a suffix's last wildcard by text, every other fixed label of a path by position."""
    scope, named = "", ""
    scope_params: list[Any] = []
    named_params: list[Any] = []
    for kind, path in match:
        labels = tuple(path)
        if kind == "prefix":  # the labels before the first wildcard: a range of sort keys
            head = labels[: labels.index("*")] if "*" in labels else labels
            if head:
                scope += f" AND {order} >= ? AND {order} < ?"
                scope_params += [ns_order(head), ns_order(head) + "\x01\x02"]
        elif kind == "suffix":  # the labels after the last wildcard
            cut = labels[::-1].index("*") if "*" in labels else len(labels)
            name = ".".join(labels[len(labels) - cut :])
            if name:
                named += (
                    " AND (namespace = ? OR "
                    "substr(namespace, length(namespace) - CAST(? AS INTEGER) + 1) = ?)"
                )
                named_params += [name, len(name) + 1, "." + name]
        if "*" not in labels:
            continue  # the key or text condition said it all
        # Labels counted as dots + 1; each fixed label compared at its position (1-based from
        # the start for a prefix, from the end, as -1, -2, ..., for a suffix).
        named += " AND length(namespace) - length(replace(namespace, '.', '')) + 1 >= ?"
        named_params.append(len(labels))
        first, last = labels.index("*"), len(labels) - 1 - labels[::-1].index("*")
        for i, label in enumerate(labels):
            if label == "*" or (i < first if kind == "prefix" else i > last):
                continue  # (a label before a prefix's first "*", after a suffix's last: above)
            position = i + 1 if kind == "prefix" else i - len(labels)
            named += f" AND {_label_sql(postgres)} = ?"
            named_params += [*[position] * (3 if postgres else 1), label]
    return scope, scope_params, named, named_params


def ns_order(namespace: Namespace) -> str:
    """A namespace's sort key, as the database computes it from the dotted name
    (:data:`harombe_core.store.schema.NS_ORDER`): keys compare as the tuples do."""
    return "\x01\x01".join(label.replace("\x01", "\x01\x02") for label in namespace)


def _label_sql(postgres: bool) -> str:
    """The label of ``namespace`` at a position (``?``): 1-based from the start, or from the
    end when negative (-1 the last); NULL past either end."""
    if postgres:
        arr = "(string_to_array(namespace, '.'))"
        return (
            f"{arr}[CASE WHEN CAST(? AS INTEGER) > 0 THEN CAST(? AS INTEGER) "
            f"ELSE array_length({arr}, 1) + 1 + CAST(? AS INTEGER) END]"
        )
    return "harombe_ns_label(namespace, ?)"


def sweep(sql: SqlRunner, *, now: int) -> Body[int]:
    """Delete the items expired at ``now`` (their vectors go with them); how many."""
    deleted = yield sql.step(
        "DELETE FROM store_items WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)
    )
    return deleted.rowcount


def _best_scores(
    sql: SqlRunner, rows: Sequence[Any], query: np.ndarray, model: str | None
) -> Body[tuple[dict[tuple[str, str], float], set[tuple[str, str]]]]:
    """Each item's best cosine with ``query`` among its vectors ``model`` (or an unrecorded
    model, or the bare name ``model`` was recorded as before identities) made, and the items
    with vectors only another model made."""
    keys = {(r[0], r[1]) for r in rows}
    namespaces = sorted({k[0] for k in keys})
    legacy = None if model is None else legacy_name(model)  # recorded before identities
    best: dict[tuple[str, str], float] = {}
    other: set[tuple[str, str]] = set()
    for start in range(0, len(namespaces), 500):
        chunk = namespaces[start : start + 500]
        found = yield sql.step(
            "SELECT namespace, key, vector, model FROM store_vectors WHERE namespace IN "
            f"({', '.join('?' * len(chunk))})",
            chunk,
        )
        for namespace, key, blob, made_by in found.rows:
            if (namespace, key) not in keys:
                continue
            if not isinstance(blob, bytes | memoryview) or len(blob) % 4:  # edited outside
                raise _corrupt_vector(namespace, key, blob)
            vector = np.frombuffer(blob, dtype=np.float32)
            if made_by not in (None, model, legacy) or vector.shape != query.shape:
                other.add((namespace, key))  # another model's space: not comparable
                continue
            score = float(np.dot(vector, query))
            if score > best.get((namespace, key), -2.0):
                best[(namespace, key)] = score
    return best, other - best.keys()


def _corrupt_vector(namespace: str, key: str, blob: Any) -> CorruptRowError:
    size = f"{len(blob)} bytes" if isinstance(blob, bytes) else f"a {type(blob).__name__}"
    return corrupt_row(
        "store_vectors",
        {"namespace": namespace, "key": key},
        "vector",
        f"holds {size}, not float32 values. The vectors are derived: putting the item again "
        "writes them anew",
    )


def _refresh(sql: SqlRunner, rows: Sequence[Any], now: int) -> Body[None]:
    for row in rows:
        if row[6] is not None:
            yield sql.step(
                "UPDATE store_items SET expires_at = ? WHERE namespace = ? AND key = ?",
                (now + int(row[6] * _MINUTE), row[0], row[1]),
            )


# matching ---------------------------------------------------------------------------------
def ns_matches(match_type: str, path: Sequence[str], namespace: Namespace) -> bool:
    """``namespace`` starts (``"prefix"``) or ends (``"suffix"``) with ``path``, ``"*"``
    matching any label."""
    path = tuple(path)
    if len(namespace) < len(path):
        return False
    if match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InvalidInputError(f"unsupported match type {match_type!r}.")
    return all(p == "*" or n == p for n, p in pairs)


_OPERATORS = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a is not None and a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}
"""LangGraph's filter operators. A missing or null field matches none but ``$eq: None``, as
in ``SqliteStore`` and ``PostgresStore`` (SQL comparisons with NULL are never true)."""


def check_filter(condition: Any, top: bool = True) -> None:
    """Refuse an unknown operator (or a non-JSON operand) before the batch starts, whether or
    not any item would have been compared."""
    if not isinstance(condition, Mapping):
        if top:
            raise InvalidInputError(f"filter must be a dict, got {type(condition).__name__}.")
        _operand(condition)
        return
    operators = [k for k in condition if isinstance(k, str) and k.startswith("$")]
    if top and operators:
        raise InvalidInputError(
            f"filter keys name fields, not operators ({operators[0]!r}); logical operators "
            "such as $or are not supported: give {field: value} or {field: {'$gt': value}}."
        )
    for name, operand in condition.items():
        if not isinstance(name, str):
            raise InvalidInputError(f"filter keys must be str, got {type(name).__name__}.")
        if operators and name not in _OPERATORS:
            raise InvalidInputError(
                f"unsupported filter operator {name!r}; use one of {sorted(_OPERATORS)}."
            )
        check_filter(operand, top=False)


def filter_field(value: Mapping[str, Any], key: str) -> Any:
    """The value a filter key names: the key itself, else a dotted path through nested
    objects (``"user.access-level"``), as ``SqliteStore`` reads it; None when missing. (The
    checkpointer reads ``list`` filters of checkpoint metadata the same way.)"""
    if key in value:
        return value[key]
    node: Any = value
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def matches_filter(value: Mapping[str, Any], condition: Mapping[str, Any]) -> bool:
    """``value`` satisfies a LangGraph filter: every key, a field or dotted path, compares."""
    return all(_compare(filter_field(value, key), wanted) for key, wanted in condition.items())


def _compare(value: Any, condition: Any) -> bool:
    """Nested equality (a dict matches the keys it names) and comparison operators."""
    if isinstance(condition, Mapping):
        if any(k.startswith("$") for k in condition):
            for name, operand in condition.items():
                try:
                    if not _OPERATORS[name](value, _operand(operand)):
                        return False
                except TypeError:  # "a" > 1: unordered types never match
                    return False
            return True
        if not isinstance(value, Mapping):
            return False
        return all(_compare(value.get(k), v) for k, v in condition.items())
    return bool(value == _operand(condition))


def _operand(value: Any) -> Any:
    """A filter operand in the form values are stored in (a datetime as its ISO string, a
    tuple as a list), so it compares with what was stored; JSON scalars pass as they are."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, Mapping):
        return {k: _operand(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_operand(v) for v in value]
    try:
        return orjson.loads(orjson.dumps(value))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"filter values must be JSON values: {exc}.") from exc


# re-embedding ---------------------------------------------------------------------------------
#: An item to embed again: namespace (joined), key, JSON value, update time, embedded paths.
Stale = tuple[str, str, str, int, list[str]]


def stale(sql: SqlRunner, model: str, limit: int) -> Body[list[Stale]]:
    """Up to ``limit`` items (in key order) with vectors ``model`` did not make (another model's,
    or recorded before models were: unknown), with the paths they were embedded at."""
    found = (
        yield sql.step(
            "SELECT i.namespace, i.key, i.value, i.updated_at, v.path FROM store_items i "
            "JOIN store_vectors v ON v.namespace = i.namespace AND v.key = i.key "
            "WHERE (i.namespace, i.key) IN (SELECT namespace, key FROM store_vectors "
            "WHERE model IS NULL OR model <> ? GROUP BY namespace, key "
            "ORDER BY namespace, key LIMIT ?) ORDER BY i.namespace, i.key, v.path",
            (model, limit),
        )
    ).rows
    out: dict[tuple[str, str], Stale] = {}
    for namespace, key, value, updated, path in found:
        out.setdefault((namespace, key), (namespace, key, value, updated, []))[4].append(path)
    return list(out.values())


def replace_vectors(
    sql: SqlRunner, items: Sequence[Stale], vectors: Sequence[Sequence[tuple[str, Any]]], model: str
) -> Body[int]:
    """Replace each stale item's vectors by ``vectors`` (made by ``model``), unless the item was
    written or deleted since it was read (that write embedded it already); how many."""
    done = 0
    for (namespace, key, _, updated, _), new in zip(items, vectors, strict=True):
        same = (
            yield sql.step(
                "SELECT 1 FROM store_items WHERE namespace = ? AND key = ? AND updated_at = ?",
                (namespace, key, updated),
            )
        ).rows
        if not same:
            continue
        yield sql.step(
            "DELETE FROM store_vectors WHERE namespace = ? AND key = ?", (namespace, key)
        )
        if new:
            yield from put_vectors(sql, namespace, key, new, model)
        done += 1
    return done
