"""pgvector as the vector index: the vectors live in the same PostgreSQL as the messages.

Why this shape:

* One database holds messages, keywords and vectors, so a process that can read a message can
  search it, nothing has to be kept in step across two services, and a restart loses nothing.
* The ``message_vectors`` table references ``messages(id)`` with ``ON DELETE CASCADE``: deleting
  a session or a message removes its vectors in the same transaction, and a vector can never
  outlive its message.
* A search is ONE SQL statement joining ``message_vectors``, ``messages`` and ``sessions`` with
  the caller's scope in its WHERE clause. The metadata stored with a vector is never trusted for
  scoping (it is not even stored): ``user_id`` is read from the session row at query time, so a
  session moved to another user is searched under its new owner at once.
* The column is an untyped ``vector`` with a ``dimension`` column beside it, and the HNSW index
  (cosine, ``vector_cosine_ops``) is a partial expression index per dimension, the pgvector way
  of keeping vectors of different models in one column. Switching models is a reindex, not a
  schema change.
* Filtered HNSW scans use pgvector's iterative scan (``hnsw.iterative_scan = strict_order``), so
  a narrow scope still gets its ``k`` nearest neighbours instead of the few that survive the
  filter out of the first ``ef_search`` candidates.
* Writing a vector sets the message's ``embedded`` flag in the same transaction, so the flag and
  the vector cannot disagree after a crash.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from harombe_core.errors import InvalidInputError, StoreError
from harombe_core.store.postgres import PostgresStore
from harombe_core.store.runner import Body, Dialect, Op, Step
from harombe_core.store.schema import VECTORS_TABLE_DDL
from harombe_core.vectors.base import FloatArray, Metadatas, VectorIndexBase, VectorMatch

T = TypeVar("T")

__all__ = ["HNSW_MAX_DIMENSION", "PgVectorIndex", "where_sql"]

log = logging.getLogger(__name__)

#: pgvector's HNSW index takes ``vector`` columns of at most this many dimensions; larger ones
#: are searched exactly (a sequential scan), which is correct but slower.
HNSW_MAX_DIMENSION = 2000
#: Largest ``hnsw.ef_search`` pgvector accepts.
_EF_SEARCH_MAX = 1000
#: Advisory lock id taken while creating the vector table or an HNSW index ("HRMV").
_VECTOR_DDL_LOCK = 0x48524D56

#: ``where`` keys and the column each filters, in the join ``v`` / ``m`` / ``s``.
_COLUMNS = {
    "message_id": "v.message_id",
    "session_id": "m.session_id",
    "user_id": "s.user_id",
    "role": "m.role",
    "created_at": "m.created_at",
}
_OPERATORS = {"$eq": "=", "$ne": "<>", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def where_sql(where: Mapping[str, Any] | None) -> tuple[str, list[Any]]:
    """Translate a ``where`` mapping into an AND-ed SQL fragment over ``v``/``m``/``s``.

    Every value is a bound parameter; only the column names (from a fixed table) and the
    operators (from a fixed table) are written into the SQL text. An unknown key or operator is
    an :class:`InvalidInputError` rather than a filter silently ignored, because an ignored
    filter would widen a scope.
    """
    if not where:
        return "", []
    parts: list[str] = []
    params: list[Any] = []
    for key, condition in where.items():
        column = _COLUMNS.get(key)
        if column is None:
            raise InvalidInputError(
                f"cannot filter vectors by {key!r}; use one of {', '.join(sorted(_COLUMNS))}."
            )
        if isinstance(condition, Mapping):
            for op, operand in condition.items():
                if op == "$in":
                    parts.append(f"{column} = ANY(%s)")
                    params.append(list(operand))
                elif op == "$nin":
                    parts.append(f"NOT ({column} = ANY(%s))")
                    params.append(list(operand))
                elif op in _OPERATORS:
                    parts.append(f"{column} {_OPERATORS[op]} %s")
                    params.append(operand)
                else:
                    raise InvalidInputError(
                        f"unknown filter operator {op!r} for {key!r}; use $eq, $ne, $gt, $gte, "
                        "$lt, $lte, $in or $nin."
                    )
        else:
            parts.append(f"{column} = %s")
            params.append(condition)
    return "".join(f" AND {p}" for p in parts), params


def _literal(vector: FloatArray) -> str:
    """pgvector's text form (``[x,y,...]``); float32 values round-trip exactly through it."""
    values = np.asarray(vector, dtype=np.float32).ravel()
    if not np.all(np.isfinite(values)):
        raise InvalidInputError("a vector contains NaN or infinity; it cannot be indexed.")
    return "[" + ",".join(repr(float(x)) for x in values) + "]"


def _parse(text: str) -> FloatArray:
    return np.asarray(json.loads(text), dtype=np.float32)


class PgVectorIndex(VectorIndexBase):
    """A :class:`~harombe_core.vectors.base.VectorIndex` in the ``message_vectors`` table of a
    :class:`~harombe_core.store.postgres.PostgresStore` (extension ``vector`` required).

    Only vectors of messages that exist are kept (ids of deleted messages are skipped), and the
    ``metadatas`` passed to :meth:`upsert` are not stored: scope filters read the message and
    session rows themselves.
    """

    def __init__(self, store: PostgresStore) -> None:
        if getattr(getattr(store, "dialect", None), "name", None) != "postgres":
            raise InvalidInputError(
                f"the pgvector index needs a PostgresStore, got {type(store).__name__}; open "
                "the MemoryManager with a postgresql:// URL or use vector_store='chroma'."
            )
        self.store = store
        self._indexed: set[int] = set()
        self._ensure_table()

    # schema -----------------------------------------------------------------------------------
    def _ensure_table(self) -> None:
        """Create the table when the store's migration could not (pgvector was added later)."""

        def exists() -> Body[bool]:
            rows = (yield Step("SELECT to_regclass('message_vectors') IS NOT NULL")).rows
            return bool(rows[0][0])

        if self.store.run(_op(exists)):
            return

        def create() -> Body[None]:
            yield Step("SELECT pg_advisory_xact_lock(%s)", (_VECTOR_DDL_LOCK,))
            yield Step("CREATE EXTENSION IF NOT EXISTS vector")
            yield Step(VECTORS_TABLE_DDL)

        try:
            self.store.run(_op(create, write=True))
        except StoreError as exc:
            raise StoreError(
                f"{self.store.location} has no pgvector extension and it could not be created "
                f"({exc}). Install pgvector on the server and run `CREATE EXTENSION vector;` as "
                "a superuser in this database, or keep vectors in a Chroma server "
                "(vector_store mode http)."
            ) from exc

    def _ensure_hnsw(self, dimension: int) -> None:
        """The partial HNSW index for one dimension, created once (idempotent, many processes)."""
        if dimension in self._indexed:
            return
        if dimension > HNSW_MAX_DIMENSION:
            log.info(
                "%s: %d-dimensional vectors exceed pgvector's HNSW limit (%d); searching them "
                "exactly", self.store.location, dimension, HNSW_MAX_DIMENSION,
            )
            self._indexed.add(dimension)
            return
        dim = int(dimension)
        name = f"message_vectors_hnsw_{dim}"

        def body() -> Body[None]:
            found = (yield Step("SELECT to_regclass(%s) IS NOT NULL", (name,))).rows
            if found[0][0]:
                return
            yield Step("SELECT pg_advisory_xact_lock(%s)", (_VECTOR_DDL_LOCK,))
            yield Step(
                f"CREATE INDEX IF NOT EXISTS {name} ON message_vectors USING hnsw "
                f"((embedding::vector({dim})) vector_cosine_ops) WHERE dimension = {dim}"
            )
            log.info("%s: created HNSW index %s", self.store.location, name)

        self.store.run(_op(body, write=True))
        self._indexed.add(dim)

    # protocol ---------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"pgvector {self.store.location}"

    def _write(self, wanted: list[int], array: FloatArray, metadatas: Metadatas) -> None:
        """Insert or replace vectors and set ``embedded`` on their messages, in one transaction."""
        dim = int(array.shape[1])
        self._ensure_hnsw(dim)
        literals = [_literal(row) for row in array]

        def body() -> Body[None]:
            yield Step(
                "INSERT INTO message_vectors (message_id, dimension, embedding) "
                "SELECT x.id, %s, x.v::vector FROM unnest(%s::bigint[], %s::text[]) AS x(id, v) "
                "JOIN messages m ON m.id = x.id "
                "ON CONFLICT (message_id) DO UPDATE SET dimension = EXCLUDED.dimension, "
                "embedding = EXCLUDED.embedding",
                (dim, wanted, literals),
            )
            yield Step(
                "UPDATE messages SET embedded = TRUE WHERE id = ANY(%s) AND NOT embedded",
                (wanted,),
            )

        self.store.run(_op(body, write=True))

    def _query_body(
        self, literal: str, dim: int, k: int, where: Mapping[str, Any] | None
    ) -> Body[list[VectorMatch]]:
        scope, params = where_sql(where)
        # Iterative scan: keep walking the graph until k rows pass the scope filter.
        yield Step("SET LOCAL hnsw.iterative_scan = strict_order")
        yield Step(f"SET LOCAL hnsw.ef_search = {max(40, min(k, _EF_SEARCH_MAX))}")
        distance = f"v.embedding::vector({dim}) <=> %s::vector({dim})"
        rows = (
            yield Step(
                f"SELECT v.message_id, {distance} AS d FROM message_vectors v "
                "JOIN messages m ON m.id = v.message_id JOIN sessions s ON s.id = m.session_id "
                f"WHERE v.dimension = {dim}{scope} ORDER BY {distance} LIMIT %s",
                [literal, *params, literal, k],
            )
        ).rows
        return [VectorMatch(int(mid), 1.0 - float(d)) for mid, d in rows]

    def _query_op(
        self, vector: FloatArray, k: int, where: Mapping[str, Any] | None
    ) -> Op[list[VectorMatch]] | None:
        """The nearest-``k`` search as one store operation (``None`` when ``k`` asks for
        nothing), built once so :meth:`query` runs it and :meth:`aquery` awaits the same."""
        if k <= 0:
            return None
        array = np.asarray(vector, dtype=np.float32).ravel()
        dim = int(array.shape[0])
        literal = _literal(array)
        return _op(lambda: self._query_body(literal, dim, int(k), where))

    def query(
        self, vector: FloatArray, k: int, where: Mapping[str, Any] | None = None
    ) -> list[VectorMatch]:
        """The ``k`` nearest messages inside ``where``, by cosine, in one SQL statement."""
        op = self._query_op(vector, k, where)
        return [] if op is None else self.store.run(op)

    async def aquery(
        self, vector: FloatArray, k: int, where: Mapping[str, Any] | None = None
    ) -> list[VectorMatch]:
        """The async twin of :meth:`query`: the store's ``arun`` (one worker-thread hop)."""
        op = self._query_op(vector, k, where)
        return [] if op is None else await self.store.arun(op)

    def get_vectors(self, ids: Sequence[int]) -> dict[int, FloatArray]:
        wanted = [int(i) for i in ids]
        if not wanted:
            return {}
        rows = self.store.run(
            _rows(
                "SELECT message_id, embedding::text FROM message_vectors "
                "WHERE message_id = ANY(%s)",
                (wanted,),
            )
        )
        return {int(mid): _parse(text) for mid, text in rows}

    def delete(self, ids: Sequence[int]) -> None:
        """Drop these vectors; their messages go back to pending (re-embedded by the worker)."""
        wanted = [int(i) for i in ids]
        if not wanted:
            return

        def body() -> Body[None]:
            yield Step("DELETE FROM message_vectors WHERE message_id = ANY(%s)", (wanted,))
            yield Step(
                "UPDATE messages SET embedded = FALSE WHERE id = ANY(%s) AND embedded", (wanted,)
            )

        self.store.run(_op(body, write=True))

    def delete_where(self, where: Mapping[str, Any]) -> None:
        scope, params = where_sql(where)

        def body() -> Body[None]:
            rows = (
                yield Step(
                    "DELETE FROM message_vectors v USING messages m JOIN sessions s "
                    f"ON s.id = m.session_id WHERE m.id = v.message_id{scope} "
                    "RETURNING v.message_id",
                    params,
                )
            ).rows
            if rows:
                yield Step(
                    "UPDATE messages SET embedded = FALSE WHERE id = ANY(%s)",
                    ([int(r[0]) for r in rows],),
                )

        self.store.run(_op(body, write=True))

    def count(self) -> int:
        return int(self.store.run(_rows("SELECT COUNT(*) FROM message_vectors"))[0][0])

    def clear(self) -> None:
        """Remove every vector and mark every message pending, in one transaction."""

        def body() -> Body[None]:
            yield Step("DELETE FROM message_vectors")
            yield Step("UPDATE messages SET embedded = FALSE WHERE embedded")

        self.store.run(_op(body, write=True))

    def close(self) -> None:
        """Nothing to release: the store owns the connections."""


def _op(factory: Callable[[], Body[T]], *, write: bool = False) -> Op[T]:
    """A PostgreSQL-only body as a store operation: its writes are idempotent (an upsert, a
    delete, DDL under a lock), so a retry may simply run them again."""

    def body(_dialect: Dialect) -> Body[T]:
        return factory()

    return Op(body, write=write, exactly_once=False)


def _rows(sql: str, params: Sequence[Any] = ()) -> Op[list[Any]]:
    """The rows of one read statement."""

    def read() -> Body[list[Any]]:
        return (yield Step(sql, params)).rows

    return _op(read)

