"""HarombeStore: LangGraph long-term memory (``BaseStore``) in the harombe database.

Items live in the ``store_items`` table of the same database as the conversations (the SQLite
file, or the PostgreSQL database), so one database (and one backup) holds both. Values are JSON;
namespaces are stored dotted (LangGraph forbids dots in labels, so this is unambiguous). Semantic
search embeds the configured fields on put (one vector per text, kept in ``store_vectors``) and
ranks by the best cosine per item. Filters are evaluated on the decoded JSON (equality, nested
dicts, ``$eq $ne $gt $gte $lt $lte``), as LangGraph's own stores do. TTL is honest: expired items
are invisible to every read at once, reads refresh their expiry when asked, and
:meth:`~HarombeStore.sweep_ttl` deletes them.

A batch is written once, as a body of SQL steps (:mod:`harombe_core.store.sql_body`), and runs
in one transaction on either backend: on SQLite through the store's write transaction, on
PostgreSQL through the store's pooled, retrying transaction (natively async for ``abatch``, and
applied exactly once when a retry follows a connection lost at COMMIT).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base.embed import get_text_at_path, tokenize_path

from harombe_core.errors import InvalidInputError
from harombe_core.limits import current_limits
from harombe_core.manager import MemoryManager
from harombe_core.store.sql_body import Body, sql_runner
from harombe_core.store.sqlite import from_micros, to_micros
from harombe_core.validate import (
    check_count,
    check_flag,
    check_id,
    check_json,
    check_list,
    check_number,
    check_options,
    check_query,
    optional_count,
)
from langchain_harombe.embeddings import as_embedder
from langchain_harombe.history import resolve_manager

__all__ = ["HarombeStore"]

_COLUMNS = "namespace, key, value, created_at, updated_at, expires_at, ttl_minutes"


_Vectors = dict[tuple[str, str], list[tuple[str, bytes]]]

_OPS = (GetOp, PutOp, SearchOp, ListNamespacesOp)
#: Longest TTL, in minutes (about 1,900 years; expiry times are 64-bit microseconds).
MAX_TTL_MINUTES = 1_000_000_000


def _ns(namespace: tuple[str, ...]) -> str:
    return ".".join(namespace)


def _now() -> int:
    return to_micros(datetime.now(UTC))


class HarombeStore(BaseStore):
    """A LangGraph ``BaseStore`` on a harombe database (SQLite or PostgreSQL).

    Use it as ``create_agent(..., store=HarombeStore(manager))`` or anywhere LangGraph takes a
    store (LangMem tools, graph nodes via ``get_store()``). Items share the manager's database
    with its conversations and behave the same on both backends; on PostgreSQL many processes
    can use one store at once.

    Args:
        manager: The application's :class:`~harombe_core.MemoryManager` (SQLite or PostgreSQL),
        or
        storage_path: a database path or ``postgresql://`` URL (the store then opens its own
            manager).
        index: ``{"fields": ["text"], "embed": embedder}``; ``embed`` is a harombe Embedder or
            a LangChain ``Embeddings``. Default: the manager's embedder on the whole value
            (``"$"``) when semantic memory is on, else no semantic search.
        ttl: LangGraph ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``).
    """

    supports_ttl = True

    def __init__(
        self,
        manager: MemoryManager | None = None,
        *,
        storage_path: str | os.PathLike[str] | None = None,
        index: dict[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        manager_options: dict[str, Any] | None = None,
    ) -> None:
        index = check_options(index, frozenset({"fields", "embed", "dims"}), "index")
        fields = index.get("fields") or ["$"]
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise InvalidInputError("index['fields'] must be a list of str paths such as ['text'].")
        embed = as_embedder(index["embed"]) if index.get("embed") is not None else None
        if embed is not None and not (hasattr(embed, "embed") and hasattr(embed, "embed_query")):
            raise InvalidInputError(
                "index['embed'] must be a LangChain Embeddings or a harombe Embedder, got "
                f"{type(embed).__name__}."
            )
        ttl_config = check_options(
            ttl, frozenset({"default_ttl", "refresh_on_read", "sweep_interval_minutes"}), "ttl"
        )
        if ttl_config.get("default_ttl") is not None:
            check_number(ttl_config["default_ttl"], "default_ttl", low=0.0, high=MAX_TTL_MINUTES)
        check_flag(ttl_config.get("refresh_on_read", True), "refresh_on_read")
        optional_count(ttl_config.get("sweep_interval_minutes"), "sweep_interval_minutes")
        self.manager, self._owns_manager = resolve_manager(
            manager, storage_path, manager_options, owner="HarombeStore"
        )
        try:
            self._backend = sql_runner(self.manager.store)
        except InvalidInputError:
            if self._owns_manager:
                self.manager.close()
            raise InvalidInputError(
                "HarombeStore keeps its items in SQLite or PostgreSQL; "
                f"{type(self.manager.store).__name__} is not supported. Use a SQLite database "
                "path or a postgresql:// URL."
            ) from None
        self.ttl_config = ttl
        self.embedder: Any = embed if embed is not None else self.manager.embedder
        self.fields: list[tuple[str, list[str] | str]] = [
            (f, "$" if f == "$" else tokenize_path(f)) for f in fields
        ]

    # batch --------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order, in one transaction (embedding happens before it starts)."""
        ops = check_list(ops, "batch", of="store operations", single=_OPS)
        vectors, queries = self._prepare(ops)
        raw = self._backend.run(
            lambda: self._body(ops, vectors, queries), exactly_once=_writes(ops)
        )
        return _results(ops, raw)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = check_list(ops, "abatch", of="store operations", single=_OPS)
        vectors, queries = await asyncio.to_thread(self._prepare, ops)
        raw = await self._backend.arun(
            lambda: self._body(ops, vectors, queries), exactly_once=_writes(ops)
        )
        return _results(ops, raw)

    def _prepare(self, ops: Sequence[Op]) -> tuple[_Vectors, dict[str, np.ndarray]]:
        """Check the ops and embed what they need (outside the transaction)."""
        for op in ops:
            _check_op(op)
        return self._embed_puts(ops), self._embed_queries(ops)

    def _body(
        self, ops: Sequence[Op], vectors: _Vectors, queries: dict[str, np.ndarray]
    ) -> Body[list[Any]]:
        """The batch's statements; returns plain rows (JSON-serialisable), one entry per op."""
        out: list[Any] = []
        for op in ops:
            if isinstance(op, GetOp):
                out.append((yield from self._get(op)))
            elif isinstance(op, PutOp):
                yield from self._put(op, vectors.get((_ns(op.namespace), op.key)))
                out.append(None)
            elif isinstance(op, SearchOp):
                query = queries.get(op.query) if op.query else None
                out.append((yield from self._search(op, query)))
            else:
                out.append((yield from self._list_namespaces(op)))
        return out

    # embedding ----------------------------------------------------------------------------
    def _texts(self, op: PutOp) -> list[tuple[str, str]]:
        if op.value is None or op.index is False or self.embedder is None:
            return []
        fields = (
            self.fields
            if op.index is None
            else [(f, "$" if f == "$" else tokenize_path(f)) for f in op.index]
        )
        out: list[tuple[str, str]] = []
        for path, tokens in fields:
            texts = get_text_at_path(dict(op.value), tokens)
            for i, text in enumerate(texts):
                out.append((path if len(texts) == 1 else f"{path}.{i}", text))
        return out

    def _embed_puts(self, ops: Sequence[Op]) -> _Vectors:
        wanted = [(op, self._texts(op)) for op in ops if isinstance(op, PutOp)]
        flat = [text for _, texts in wanted for _, text in texts]
        if not flat:
            return {}
        matrix = np.asarray(self.embedder.embed(flat), dtype=np.float32)
        out: _Vectors = {}
        row = 0
        for op, texts in wanted:
            entries = []
            for path, _ in texts:
                entries.append((path, matrix[row].tobytes()))
                row += 1
            out[(_ns(op.namespace), op.key)] = entries
        return out

    def _embed_queries(self, ops: Sequence[Op]) -> dict[str, np.ndarray]:
        if self.embedder is None:
            return {}
        queries = {op.query for op in ops if isinstance(op, SearchOp) and op.query}
        return {q: np.asarray(self.embedder.embed_query(q), dtype=np.float32) for q in queries}

    # operations ---------------------------------------------------------------------------
    def _get(self, op: GetOp) -> Body[Any]:
        now = _now()
        rows = (
            yield self._backend.step(
                f"SELECT {_COLUMNS} FROM store_items WHERE namespace = ? AND key = ? "
                "AND (expires_at IS NULL OR expires_at > ?)",
                (_ns(op.namespace), op.key, now),
            )
        ).rows
        if not rows:
            return None
        if op.refresh_ttl:
            yield from self._refresh(rows, now)
        return rows[0]

    def _put(self, op: PutOp, vectors: list[tuple[str, bytes]] | None) -> Body[None]:
        namespace = _ns(op.namespace)
        if op.value is None:
            yield self._backend.step(
                "DELETE FROM store_items WHERE namespace = ? AND key = ?", (namespace, op.key)
            )
            return
        now = _now()
        ttl = op.ttl if op.ttl is not None else None
        expires = None if ttl is None else now + int(ttl * 60_000_000)
        yield self._backend.step(
            "INSERT INTO store_items (namespace, key, value, created_at, updated_at, expires_at, "
            "ttl_minutes) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, key) DO UPDATE SET "
            "value = excluded.value, updated_at = excluded.updated_at, "
            "expires_at = excluded.expires_at, ttl_minutes = excluded.ttl_minutes",
            (namespace, op.key, _dumps(op.value), now, now, expires, ttl),
        )
        yield self._backend.step(
            "DELETE FROM store_vectors WHERE namespace = ? AND key = ?", (namespace, op.key)
        )
        if vectors:
            yield self._backend.step(
                "INSERT INTO store_vectors (namespace, key, path, vector) VALUES "
                + ", ".join(["(?, ?, ?, ?)"] * len(vectors)),
                [v for path, blob in vectors for v in (namespace, op.key, path, blob)],
            )

    def _search(self, op: SearchOp, query: np.ndarray | None) -> Body[list[Any]]:
        now = _now()
        prefix = _ns(op.namespace_prefix)
        where = "(expires_at IS NULL OR expires_at > ?)"
        params: list[Any] = [now]
        if prefix:
            where += " AND (namespace = ? OR substr(namespace, 1, CAST(? AS INTEGER)) = ?)"
            params += [prefix, len(prefix) + 1, prefix + "."]
        rows = (
            yield self._backend.step(
                f"SELECT {_COLUMNS} FROM store_items WHERE {where} ORDER BY updated_at DESC, key",
                params,
            )
        ).rows
        if op.filter:
            rows = [r for r in rows if _matches(json.loads(r[2]), op.filter)]
        scored: list[tuple[float | None, Any]] = [(None, r) for r in rows]
        if query is not None and rows:
            best = yield from self._best_scores(rows, query)
            scored = [(best.get((r[0], r[1])), r) for r in rows]
            scored.sort(key=lambda sr: (sr[0] is None, -(sr[0] or 0.0)))
        page = scored[op.offset : op.offset + op.limit]
        if op.refresh_ttl:
            yield from self._refresh([r for _, r in page], now)
        return [[row, score] for score, row in page]

    def _list_namespaces(self, op: ListNamespacesOp) -> Body[list[Any]]:
        rows = (
            yield self._backend.step(
                "SELECT DISTINCT namespace FROM store_items "
                "WHERE expires_at IS NULL OR expires_at > ?",
                (_now(),),
            )
        ).rows
        namespaces = [tuple(r[0].split(".")) for r in rows]
        if op.match_conditions:
            namespaces = [
                ns for ns in namespaces if all(_ns_matches(m, ns) for m in op.match_conditions)
            ]
        if op.max_depth is not None:
            namespaces = [ns[: op.max_depth] for ns in namespaces]
        return sorted(set(namespaces))[op.offset : op.offset + op.limit]

    def _best_scores(
        self, rows: Sequence[Any], query: np.ndarray
    ) -> Body[dict[tuple[str, str], float]]:
        keys = {(r[0], r[1]) for r in rows}
        namespaces = sorted({k[0] for k in keys})
        best: dict[tuple[str, str], float] = {}
        for start in range(0, len(namespaces), 500):
            chunk = namespaces[start : start + 500]
            found = yield self._backend.step(
                "SELECT namespace, key, vector FROM store_vectors WHERE namespace IN "
                f"({', '.join('?' * len(chunk))})",
                chunk,
            )
            for namespace, key, blob in found.rows:
                if (namespace, key) not in keys:
                    continue
                score = float(np.dot(np.frombuffer(blob, dtype=np.float32), query))
                if score > best.get((namespace, key), -2.0):
                    best[(namespace, key)] = score
        return best

    def _refresh(self, rows: Sequence[Any], now: int) -> Body[None]:
        for row in rows:
            if row[6] is not None:
                yield self._backend.step(
                    "UPDATE store_items SET expires_at = ? WHERE namespace = ? AND key = ?",
                    (now + int(row[6] * 60_000_000), row[0], row[1]),
                )

    def _sweep(self) -> Body[int]:
        deleted = yield self._backend.step(
            "DELETE FROM store_items WHERE expires_at IS NOT NULL AND expires_at <= ?", (_now(),)
        )
        return deleted.rowcount

    # maintenance --------------------------------------------------------------------------
    def sweep_ttl(self) -> int:
        """Delete expired items (and their vectors); returns how many."""
        return int(self._backend.run(self._sweep, exactly_once=True))

    async def asweep_ttl(self) -> int:
        return int(await self._backend.arun(self._sweep, exactly_once=True))

    def close(self) -> None:
        """Close the manager if this store opened it from ``storage_path``."""
        if self._owns_manager:
            self.manager.close()


def _writes(ops: Sequence[Op]) -> bool:
    return any(isinstance(op, PutOp) for op in ops)


def _check_namespace(value: Any, what: str, *, empty: bool) -> None:
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


def _check_op(op: Op) -> None:
    """Refuse a malformed operation before anything is embedded or written (a batch is all or
    nothing): namespaces, keys, values within ``store_value_chars``, TTLs, pages, filters."""
    if isinstance(op, (GetOp, PutOp)):
        _check_namespace(op.namespace, "namespace", empty=False)
        if op.key != "":
            check_id(op.key, "store key")
    if isinstance(op, GetOp):
        check_flag(op.refresh_ttl, "refresh_ttl")
    elif isinstance(op, PutOp):
        if op.value is not None:
            if not isinstance(op.value, dict):
                raise InvalidInputError(
                    f"a store value must be a dict (a JSON object), got {type(op.value).__name__}."
                )
            limit = current_limits().store_value_chars
            check_json(op.value, "store value", limit=limit, field="store_value_chars")
        if op.index is not None and op.index is not False and (
            not isinstance(op.index, list) or not all(isinstance(f, str) for f in op.index)
        ):
            raise InvalidInputError("index must be False, None or a list of field paths (str).")
        if op.ttl is not None:
            check_number(op.ttl, "ttl (minutes)", low=0.0, high=MAX_TTL_MINUTES)
    elif isinstance(op, SearchOp):
        _check_namespace(op.namespace_prefix, "namespace_prefix", empty=True)
        if op.filter is not None:
            if not isinstance(op.filter, dict):
                raise InvalidInputError(f"filter must be a dict, got {type(op.filter).__name__}.")
            limit = current_limits().store_value_chars
            check_json(op.filter, "filter", limit=limit, field="store_value_chars")
        if op.query is not None:
            check_query(op.query)
        check_count(op.limit, "limit")
        check_count(op.offset, "offset")
        check_flag(op.refresh_ttl, "refresh_ttl")
    elif isinstance(op, ListNamespacesOp):
        conditions = op.match_conditions or ()
        if not isinstance(conditions, (tuple, list)):
            raise InvalidInputError("match_conditions must be a tuple of MatchCondition.")
        for condition in conditions:
            if (
                not isinstance(condition, MatchCondition)
                or condition.match_type not in ("prefix", "suffix")
                or not isinstance(condition.path, tuple)
                or not all(isinstance(p, str) for p in condition.path)
            ):
                raise InvalidInputError(
                    "match_conditions must be MatchCondition(match_type='prefix' or 'suffix', "
                    "path=tuple of str)."
                )
        optional_count(op.max_depth, "max_depth")
        check_count(op.limit, "limit")
        check_count(op.offset, "offset")
    else:
        raise InvalidInputError(f"unknown store operation {type(op).__name__}.")


def _results(ops: Sequence[Op], raw: Sequence[Any]) -> list[Result]:
    """The batch's results from the plain rows its body returned."""
    out: list[Result] = []
    for op, value in zip(ops, raw, strict=True):
        if isinstance(op, GetOp):
            out.append(None if value is None else _item(value))
        elif isinstance(op, SearchOp):
            out.append([_search_item(row, score) for row, score in value])
        elif isinstance(op, ListNamespacesOp):
            out.append([tuple(ns) for ns in value])
        else:
            out.append(None)
    return out


def _dumps(value: Any) -> str:
    try:
        return json.dumps(dict(value), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(
            f"store values must be JSON objects (dicts of str, numbers, bools, None, lists, "
            f"dicts): {exc}."
        ) from exc


def _item(row: Sequence[Any]) -> Item:
    return Item(
        value=json.loads(row[2]),
        key=row[1],
        namespace=tuple(row[0].split(".")),
        created_at=from_micros(row[3]),
        updated_at=from_micros(row[4]),
    )


def _search_item(row: Sequence[Any], score: float | None) -> SearchItem:
    return SearchItem(
        namespace=tuple(row[0].split(".")),
        key=row[1],
        value=json.loads(row[2]),
        created_at=from_micros(row[3]),
        updated_at=from_micros(row[4]),
        score=score,
    )


def _ns_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InvalidInputError(f"unsupported match type {condition.match_type!r}.")
    return all(p == "*" or n == p for n, p in pairs)


_OPERATORS = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}


def _matches(value: Any, condition: Any) -> bool:
    """``value`` satisfies a LangGraph filter (nested equality and comparison operators)."""
    if isinstance(condition, dict):
        if any(k.startswith("$") for k in condition):
            for name, operand in condition.items():
                operator = _OPERATORS.get(name)
                if operator is None:
                    raise InvalidInputError(
                        f"unsupported filter operator {name!r}; use one of {sorted(_OPERATORS)}."
                    )
                try:
                    if not operator(value, operand):
                        return False
                except TypeError:
                    return False
            return True
        if not isinstance(value, dict):
            return False
        return all(_matches(value.get(k), v) for k, v in condition.items())
    return bool(value == condition)
