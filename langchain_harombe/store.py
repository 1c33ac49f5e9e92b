"""HarombeStore: LangGraph long-term memory (``BaseStore``) in the harombe database.

Items live in the ``store_items`` table of the same SQLite file as the conversations, so one
file (and one backup) holds both. Values are JSON; namespaces are stored dotted (LangGraph
forbids dots in labels, so this is unambiguous). Semantic search embeds the configured fields
on put (one vector per text, kept in ``store_vectors``) and ranks by the best cosine per item.
Filters are evaluated on the decoded JSON (equality, nested dicts, ``$eq $ne $gt $gte $lt
$lte``), as LangGraph's own stores do. TTL is honest: expired items are invisible to every read
at once, reads refresh their expiry when asked, and :meth:`sweep_ttl` deletes them.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
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
from harombe_core.manager import MemoryManager
from harombe_core.store.sqlite import SQLiteStore, from_micros, to_micros
from langchain_harombe.embeddings import as_embedder
from langchain_harombe.history import resolve_manager

__all__ = ["HarombeStore"]

_COLUMNS = "namespace, key, value, created_at, updated_at, expires_at, ttl_minutes"


def _ns(namespace: tuple[str, ...]) -> str:
    return ".".join(namespace)


def _now() -> int:
    return to_micros(datetime.now(UTC))


class HarombeStore(BaseStore):
    """A LangGraph ``BaseStore`` on a harombe database.

    Use it as ``create_agent(..., store=HarombeStore(manager))`` or anywhere LangGraph takes a
    store (LangMem tools, graph nodes via ``get_store()``).

    Args:
        manager: The application's :class:`~harombe_core.MemoryManager` (SQLite), or
        storage_path: a database path (the store then opens its own manager).
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
        self.manager, self._owns_manager = resolve_manager(
            manager, storage_path, manager_options, owner="HarombeStore"
        )
        store = self.manager.store
        if not isinstance(store, SQLiteStore):
            raise InvalidInputError(
                f"HarombeStore keeps its items in SQLite; {type(store).__name__} is not "
                "supported yet. Use a SQLite database path."
            )
        self._db = store
        self.ttl_config = ttl
        index = dict(index or {})
        embed = index.get("embed")
        self.embedder: Any = as_embedder(embed) if embed is not None else self.manager.embedder
        fields = index.get("fields") or ["$"]
        self.fields: list[tuple[str, list[str] | str]] = [
            (f, "$" if f == "$" else tokenize_path(f)) for f in fields
        ]

    # batch --------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order, in one transaction (embedding happens before it starts)."""
        ops = list(ops)
        vectors = self._embed_puts(ops)
        queries = self._embed_queries(ops)
        return self._db.transaction(lambda c: [self._apply(c, op, vectors, queries) for op in ops])

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _apply(
        self,
        c: sqlite3.Connection,
        op: Op,
        vectors: dict[tuple[str, str], list[tuple[str, bytes]]],
        queries: dict[str, np.ndarray],
    ) -> Result:
        if isinstance(op, GetOp):
            return self._get(c, op)
        if isinstance(op, PutOp):
            self._put(c, op, vectors.get((_ns(op.namespace), op.key)))
            return None
        if isinstance(op, SearchOp):
            return self._search(c, op, queries.get(op.query) if op.query else None)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(c, op)
        raise InvalidInputError(f"unknown store operation {type(op).__name__}.")

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

    def _embed_puts(self, ops: Sequence[Op]) -> dict[tuple[str, str], list[tuple[str, bytes]]]:
        wanted = [(op, self._texts(op)) for op in ops if isinstance(op, PutOp)]
        flat = [text for _, texts in wanted for _, text in texts]
        if not flat:
            return {}
        matrix = np.asarray(self.embedder.embed(flat), dtype=np.float32)
        out: dict[tuple[str, str], list[tuple[str, bytes]]] = {}
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
    def _get(self, c: sqlite3.Connection, op: GetOp) -> Item | None:
        now = _now()
        row = c.execute(
            f"SELECT {_COLUMNS} FROM store_items WHERE namespace = ? AND key = ? "
            "AND (expires_at IS NULL OR expires_at > ?)",
            (_ns(op.namespace), op.key, now),
        ).fetchone()
        if row is None:
            return None
        if op.refresh_ttl:
            self._refresh(c, [row], now)
        return _item(row)

    def _put(
        self, c: sqlite3.Connection, op: PutOp, vectors: list[tuple[str, bytes]] | None
    ) -> None:
        namespace = _ns(op.namespace)
        if op.value is None:
            c.execute(
                "DELETE FROM store_items WHERE namespace = ? AND key = ?", (namespace, op.key)
            )
            return
        now = _now()
        ttl = op.ttl if op.ttl is not None else None
        expires = None if ttl is None else now + int(ttl * 60_000_000)
        c.execute(
            "INSERT INTO store_items (namespace, key, value, created_at, updated_at, expires_at, "
            "ttl_minutes) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(namespace, key) DO UPDATE SET "
            "value = excluded.value, updated_at = excluded.updated_at, "
            "expires_at = excluded.expires_at, ttl_minutes = excluded.ttl_minutes",
            (namespace, op.key, _dumps(op.value), now, now, expires, ttl),
        )
        c.execute("DELETE FROM store_vectors WHERE namespace = ? AND key = ?", (namespace, op.key))
        c.executemany(
            "INSERT INTO store_vectors (namespace, key, path, vector) VALUES (?, ?, ?, ?)",
            [(namespace, op.key, path, blob) for path, blob in vectors or []],
        )

    def _search(
        self, c: sqlite3.Connection, op: SearchOp, query: np.ndarray | None
    ) -> list[SearchItem]:
        now = _now()
        prefix = _ns(op.namespace_prefix)
        where = "(expires_at IS NULL OR expires_at > ?)"
        params: list[Any] = [now]
        if prefix:
            where += " AND (namespace = ? OR substr(namespace, 1, ?) = ?)"
            params += [prefix, len(prefix) + 1, prefix + "."]
        rows = c.execute(
            f"SELECT {_COLUMNS} FROM store_items WHERE {where} ORDER BY updated_at DESC, key",
            params,
        ).fetchall()
        if op.filter:
            rows = [r for r in rows if _matches(json.loads(r[2]), op.filter)]
        scored: list[tuple[float | None, Any]] = [(None, r) for r in rows]
        if query is not None and rows:
            best = self._best_scores(c, rows, query)
            scored = [(best.get((r[0], r[1])), r) for r in rows]
            scored.sort(key=lambda sr: (sr[0] is None, -(sr[0] or 0.0)))
        page = scored[op.offset : op.offset + op.limit]
        if op.refresh_ttl:
            self._refresh(c, [r for _, r in page], now)
        return [_search_item(r, score) for score, r in page]

    @staticmethod
    def _best_scores(
        c: sqlite3.Connection, rows: Sequence[Any], query: np.ndarray
    ) -> dict[tuple[str, str], float]:
        keys = {(r[0], r[1]) for r in rows}
        namespaces = sorted({k[0] for k in keys})
        best: dict[tuple[str, str], float] = {}
        for start in range(0, len(namespaces), 500):
            chunk = namespaces[start : start + 500]
            for namespace, key, blob in c.execute(
                "SELECT namespace, key, vector FROM store_vectors WHERE namespace IN "
                f"({','.join('?' * len(chunk))})",
                chunk,
            ):
                if (namespace, key) not in keys:
                    continue
                score = float(np.dot(np.frombuffer(blob, dtype=np.float32), query))
                if score > best.get((namespace, key), -2.0):
                    best[(namespace, key)] = score
        return best

    def _refresh(self, c: sqlite3.Connection, rows: Sequence[Any], now: int) -> None:
        for row in rows:
            if row[6] is not None:
                c.execute(
                    "UPDATE store_items SET expires_at = ? WHERE namespace = ? AND key = ?",
                    (now + int(row[6] * 60_000_000), row[0], row[1]),
                )

    def _list_namespaces(
        self, c: sqlite3.Connection, op: ListNamespacesOp
    ) -> list[tuple[str, ...]]:
        rows = c.execute(
            "SELECT DISTINCT namespace FROM store_items WHERE expires_at IS NULL OR expires_at > ?",
            (_now(),),
        ).fetchall()
        namespaces = [tuple(r[0].split(".")) for r in rows]
        if op.match_conditions:
            namespaces = [
                ns for ns in namespaces if all(_ns_matches(m, ns) for m in op.match_conditions)
            ]
        if op.max_depth is not None:
            namespaces = [ns[: op.max_depth] for ns in namespaces]
        return sorted(set(namespaces))[op.offset : op.offset + op.limit]

    # maintenance --------------------------------------------------------------------------
    def sweep_ttl(self) -> int:
        """Delete expired items (and their vectors); returns how many."""
        now = _now()
        return int(
            self._db.transaction(
                lambda c: c.execute(
                    "DELETE FROM store_items WHERE expires_at IS NOT NULL AND expires_at <= ?",
                    (now,),
                ).rowcount
            )
        )

    async def asweep_ttl(self) -> int:
        return await asyncio.to_thread(self.sweep_ttl)

    def close(self) -> None:
        """Close the manager if this store opened it from ``storage_path``."""
        if self._owns_manager:
            self.manager.close()


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
