"""HarombeStore: LangGraph long-term memory (``BaseStore``) in the harombe database.

Items live in the ``store_items`` table of the same database as the conversations (the SQLite
file, or the PostgreSQL database), so one database (and one backup) holds both. It behaves as
LangGraph's own ``SqliteStore`` / ``PostgresStore`` do, so code written against them (and their
tests) runs unchanged:

* values are serialised as ``SqliteStore`` does (orjson: NaN and infinities become ``null``,
  datetimes ISO 8601 strings, tuples lists), and ``get`` returns what that JSON reads back as;
* ``index`` is LangGraph's ``IndexConfig``: ``embed`` is an ``Embeddings``, a sync or ``async``
  function, or a ``"provider:model"`` string resolved by ``init_embeddings`` exactly as LangGraph
  resolves it (a harombe ``Embedder`` works too); ``fields`` (or ``SqliteStore``'s
  ``text_fields``) choose what is embedded, one vector per text, and search ranks by the best
  cosine per item; ``store.index_config`` and ``store.embeddings`` are there as on LangGraph's;
* filters match on the decoded JSON: equality, nested dicts, dotted paths to nested keys
  (``{"user.access-level": "x"}``, any characters in a key) and ``$eq $ne $gt $gte $lt $lte``
  with ``SqliteStore``'s treatment of missing and null values;
* a batch reads before it writes: its gets, searches and listings see the store as it was
  before the batch, and its puts are applied last, the last put of a key winning;
* TTL follows ``TTLConfig``: ``default_ttl`` for puts that give none, reads renew an item only
  when ``refresh_on_read`` is set (and the read did not opt out), an expired item stays readable
  until it is swept unless ``omit_expired`` is set, and ``start_ttl_sweeper()`` deletes expired
  items every ``sweep_interval_minutes`` in a background thread.

A batch is written once, as a body of SQL steps (:mod:`harombe_core.store.sql_body`), and runs
in one transaction on either backend: on SQLite through the store's write transaction, on
PostgreSQL through the store's pooled, retrying transaction (natively async for ``abatch``, and
applied exactly once when a retry follows a connection lost at COMMIT). Embedding happens before
the transaction starts, natively async in ``abatch``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import numpy as np
import orjson
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
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

from harombe_core.embeddings.base import Embedder
from harombe_core.errors import HarombeError, InvalidInputError, MissingExtraError
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
    check_query,
    check_text,
    optional_count,
)
from langchain_harombe._packages import missing_package
from langchain_harombe.embeddings import LangChainEmbedder
from langchain_harombe.history import resolve_manager

__all__ = ["HarombeStore"]

logger = logging.getLogger(__name__)

_COLUMNS = "namespace, key, value, created_at, updated_at, expires_at, ttl_minutes"
_LIVE = " AND (expires_at IS NULL OR expires_at > ?)"

_Key = tuple[str, str]
_Vectors = dict[_Key, list[tuple[str, bytes]]]
_Fields = list[tuple[str, Any]]  # (path, "$" or its tokens), as LangGraph's __tokenized_fields


class _Plan(NamedTuple):
    """What a batch writes, worked out before its transaction: the last put of each key (in
    the order keys were first put), their serialised values, vectors and query vectors."""

    puts: dict[_Key, PutOp]
    values: dict[_Key, str]
    vectors: _Vectors
    queries: dict[str, np.ndarray]

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
        index: LangGraph's ``IndexConfig``: ``{"embed": ..., "fields": ["text"], "dims": n}``.
            ``embed`` is a LangChain ``Embeddings``, a function (sync or ``async``) from a list
            of texts to vectors, a ``"provider:model"`` string for ``init_embeddings``, or a
            harombe ``Embedder``. Default: the manager's embedder on the whole value (``"$"``)
            when semantic memory is on, else no semantic search. Items not indexed (or indexed
            by a model of another dimension) follow the ranked ones, unscored.
        ttl: LangGraph's ``TTLConfig``: ``default_ttl`` (minutes), ``refresh_on_read``,
            ``omit_expired``, ``sweep_interval_minutes`` (see :meth:`start_ttl_sweeper`).

    Raises:
        MissingExtraError: ``embed`` names a provider whose package is not installed (it is
            also the ``ImportError`` LangGraph raises).
        InvalidInputError: an unknown provider or a bad ``index``; the manager is not SQL.
    """

    supports_ttl = True

    def __init__(
        self,
        manager: MemoryManager | None = None,
        *,
        storage_path: str | os.PathLike[str] | None = None,
        index: Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        manager_options: dict[str, Any] | None = None,
    ) -> None:
        _check_ttl_config(ttl)
        # Items are searched by meaning through ``index`` (as LangGraph's stores): the manager
        # a path opens needs no semantic memory of its own unless asked for.
        self.manager, self._owns_manager = resolve_manager(
            manager, storage_path, manager_options, owner="HarombeStore",
            defaults={"embedding": None},
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
        try:
            self.index_config, self.embeddings, self._embedder = _index(
                index, self.manager.embedder
            )
        except HarombeError:
            if self._owns_manager:
                self.manager.close()
            raise
        self.ttl_config = ttl
        self._fields: _Fields = (
            [] if self.index_config is None else self.index_config["__tokenized_fields"]
        )
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()
        self._sweeper_future: concurrent.futures.Future[None] = concurrent.futures.Future()

    # batch --------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in one transaction: reads first (they see the store as it was before
        the batch), then the puts, the last put of a key winning (as LangGraph's stores do).
        Embedding happens before the transaction starts."""
        ops = check_list(ops, "batch", of="store operations", single=_OPS)
        plan = self._plan(ops)
        docs = self._embed_texts(plan)
        if docs:
            plan = _with_vectors(plan, docs, self._embedder.embed([t for _, _, t in docs]))
        queries = {q: self._embedder.embed_query(q) for q in _queries(ops, self._embedder)}
        plan = plan._replace(queries=queries)
        raw = self._backend.run(lambda: self._body(ops, plan), exactly_once=_writes(ops))
        return _results(ops, raw)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` with the embedder's own async methods and the database's async path."""
        ops = check_list(ops, "abatch", of="store operations", single=_OPS)
        plan = self._plan(ops)
        docs = self._embed_texts(plan)
        if docs:
            vectors = await self._embedder.aembed([t for _, _, t in docs])
            plan = _with_vectors(plan, docs, vectors)
        texts = _queries(ops, self._embedder)
        found = await asyncio.gather(*(self._embedder.aembed_query(q) for q in texts))
        plan = plan._replace(queries=dict(zip(texts, found, strict=True)))
        raw = await self._backend.arun(lambda: self._body(ops, plan), exactly_once=_writes(ops))
        return _results(ops, raw)

    def _plan(self, ops: Sequence[Op]) -> _Plan:
        """Check the ops and serialise what they write (outside the transaction)."""
        puts: dict[_Key, PutOp] = {}
        for op in ops:
            _check_op(op)
            if isinstance(op, SearchOp) and op.filter:
                _check_filter(op.filter)
            elif isinstance(op, PutOp):
                key = (_ns(op.namespace), op.key)
                puts.pop(key, None)  # the last put of a key wins, in its place in the batch
                puts[key] = op
        values = {k: _dumps(op.value) for k, op in puts.items() if op.value is not None}
        limit = current_limits().store_value_chars
        for text in values.values():  # measured as stored, before anything is embedded
            check_text(text, "a store value (as JSON)", limit=limit, field="store_value_chars")
        return _Plan(puts, values, {}, {})

    def _embed_texts(self, plan: _Plan) -> list[tuple[_Key, str, str]]:
        """``(item, path, text)`` for every text the batch's puts index."""
        if self._embedder is None:
            return []
        out: list[tuple[_Key, str, str]] = []
        for key, op in plan.puts.items():
            if op.value is None or op.index is False:
                continue
            fields = self._fields if op.index is None else _tokenized(op.index)
            value = json.loads(plan.values[key])  # what is stored: datetimes are text here
            for path, tokens in fields:
                texts = get_text_at_path(value, tokens)
                for i, text in enumerate(texts):
                    out.append((key, path if len(texts) == 1 else f"{path}.{i}", text))
        return out

    def _body(self, ops: Sequence[Op], plan: _Plan) -> Body[list[Any]]:
        """The batch's statements; returns plain rows (JSON-serialisable), one entry per op."""
        out: list[Any] = []
        for op in ops:
            if isinstance(op, GetOp):
                out.append((yield from self._get(op)))
            elif isinstance(op, SearchOp):
                query = plan.queries.get(op.query) if op.query else None
                out.append((yield from self._search(op, query)))
            elif isinstance(op, ListNamespacesOp):
                out.append((yield from self._list_namespaces(op)))
            else:
                out.append(None)
        for key, op in plan.puts.items():
            yield from self._put(op, plan.values.get(key), plan.vectors.get(key))
        return out

    # TTL settings, read live (LangGraph's own tests change ttl_config on a running store) --
    @property
    def _refresh_on_read(self) -> bool:
        """Reads renew TTLs only when the store asks for it, as ``SqliteStore`` does."""
        return bool(self.ttl_config and self.ttl_config.get("refresh_on_read"))

    @property
    def _omit_expired(self) -> bool:
        return bool(self.ttl_config and self.ttl_config.get("omit_expired"))

    def _live(self, now: int) -> tuple[str, list[Any]]:
        """The clause (and its parameter) hiding expired rows when ``omit_expired`` is set."""
        return (_LIVE, [now]) if self._omit_expired else ("", [])

    # operations ---------------------------------------------------------------------------
    def _get(self, op: GetOp) -> Body[Any]:
        now = _now()
        live, params = self._live(now)
        rows = (
            yield self._backend.step(
                f"SELECT {_COLUMNS} FROM store_items WHERE namespace = ? AND key = ?{live}",
                [_ns(op.namespace), op.key, *params],
            )
        ).rows
        if not rows:
            return None
        if op.refresh_ttl and self._refresh_on_read:
            yield from self._refresh(rows, now)
        return rows[0]

    def _put(
        self, op: PutOp, value: str | None, vectors: list[tuple[str, bytes]] | None
    ) -> Body[None]:
        namespace = _ns(op.namespace)
        if value is None:
            yield self._backend.step(
                "DELETE FROM store_items WHERE namespace = ? AND key = ?", (namespace, op.key)
            )
            return
        now = _now()
        ttl = op.ttl
        expires = None if ttl is None else now + int(ttl * 60_000_000)
        yield self._backend.step(
            "INSERT INTO store_items (namespace, key, value, created_at, updated_at, expires_at, "
            "ttl_minutes) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, key) DO UPDATE SET "
            "value = excluded.value, updated_at = excluded.updated_at, "
            "expires_at = excluded.expires_at, ttl_minutes = excluded.ttl_minutes",
            (namespace, op.key, value, now, now, expires, ttl),
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
        live, params = self._live(now)
        where = "TRUE" + live
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
        if op.refresh_ttl and self._refresh_on_read:
            yield from self._refresh([r for _, r in page], now)
        return [[row, score] for score, row in page]

    def _list_namespaces(self, op: ListNamespacesOp) -> Body[list[Any]]:
        live, params = self._live(_now())
        rows = (
            yield self._backend.step(
                f"SELECT DISTINCT namespace FROM store_items WHERE TRUE{live}", params
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
                vector = np.frombuffer(blob, dtype=np.float32)
                if (namespace, key) not in keys or vector.shape != query.shape:
                    continue  # another item, or embedded by another model: not comparable
                score = float(np.dot(vector, query))
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

    def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Delete expired items every ``sweep_interval_minutes`` (else the ``TTLConfig``'s, else
        5) in a daemon thread, as LangGraph's stores do; :meth:`stop_ttl_sweeper` (or
        :meth:`close`) ends it. Without a ``ttl`` configuration nothing is started.

        Returns:
            A future that completes when the sweeper stops; cancelling it stops the sweeper. A
            sweep that fails (the database busy, say) is logged and tried again next time.
        """
        if sweep_interval_minutes is not None:
            check_number(
                sweep_interval_minutes, "sweep_interval_minutes", low=0.0, high=MAX_TTL_MINUTES
            )
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not self.ttl_config:
            future.set_result(None)
            return future
        if self._sweeper is not None and self._sweeper.is_alive():
            return self._sweeper_future  # one sweeper per store
        interval = sweep_interval_minutes or self.ttl_config.get("sweep_interval_minutes") or 5
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not (
            0 < interval < math.inf
        ):
            raise InvalidInputError(
                f"sweep_interval_minutes must be a positive number of minutes, got {interval!r}."
            )
        self._sweeper_stop.clear()
        future.add_done_callback(lambda f: self._sweeper_stop.set() if f.cancelled() else None)

        def sweep_loop() -> None:
            while not self._sweeper_stop.wait(interval * 60):
                try:
                    swept = self.sweep_ttl()
                except HarombeError as exc:  # busy, unreachable: the next sweep may succeed
                    logger.warning("HarombeStore TTL sweep failed (will retry): %s", exc)
                    continue
                except Exception as exc:  # a bug: stop, and hand it to whoever holds the future
                    logger.exception("HarombeStore TTL sweeper stopped")
                    if not future.done():
                        future.set_exception(exc)
                    return
                if swept:
                    logger.info("HarombeStore swept %d expired items", swept)
            if not future.done():
                future.set_result(None)

        self._sweeper_future = future
        self._sweeper = threading.Thread(
            target=sweep_loop, daemon=True, name="harombe-store-ttl-sweeper"
        )
        self._sweeper.start()
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; True once it has stopped (or was not running), False if it was
        still finishing a sweep after ``timeout`` seconds."""
        sweeper = self._sweeper
        if sweeper is None or not sweeper.is_alive():
            return True
        self._sweeper_stop.set()
        sweeper.join(timeout)
        if sweeper.is_alive():
            return False
        self._sweeper = None
        return True

    def close(self) -> None:
        """Stop the TTL sweeper, and close the manager if this store opened it from
        ``storage_path``."""
        self.stop_ttl_sweeper()
        if self._owns_manager:
            self.manager.close()


def _index(
    index: Mapping[str, Any] | None, default: Any
) -> tuple[dict[str, Any] | None, Any, Any]:
    """``(index_config, embeddings, embedder)`` from LangGraph's ``IndexConfig``.

    ``index_config`` is the caller's configuration plus LangGraph's ``__tokenized_fields``;
    ``embeddings`` is what LangGraph's stores expose under that name (the resolved
    ``Embeddings``, or the harombe ``Embedder`` given); ``embedder`` is the harombe ``Embedder``
    the store calls (float32, unit rows). Non-harombe ``embed`` values go through LangGraph's
    own ``ensure_embeddings``, so functions and provider strings resolve exactly as there.
    """
    if index is None:
        if default is None:
            return None, None, None
        index = {"embed": default, "dims": default.dimension}
    elif not isinstance(index, Mapping):
        raise InvalidInputError(
            f"index must be a dict (LangGraph's IndexConfig), got {type(index).__name__}."
        )
    config = dict(index)
    embed = config.get("embed", default)
    if embed is None:
        raise InvalidInputError(
            "index has no 'embed' and the manager has no embedder: give index={'embed': ...} "
            "(Embeddings, a function, or a 'provider:model' string), or open the manager with "
            "semantic memory on."
        )
    config["embed"] = embed
    if isinstance(embed, Embedder):
        return config | {"__tokenized_fields": _fields(config)}, embed, embed
    try:
        embeddings = ensure_embeddings(embed)
    except ImportError as exc:  # init_embeddings: the provider's package is not installed
        package = missing_package(exc, str(embed))
        raise MissingExtraError(
            f"index embed {embed!r}", "langchain", package, install=f"pip install {package}"
        ) from exc
    except ValueError as exc:  # an unknown provider, or no embed at all
        raise InvalidInputError(f"index embed {embed!r} cannot be used: {exc}") from exc
    # ``dims`` is advice in LangGraph's SQLite and in-memory stores: the model's own length wins.
    embedder = LangChainEmbedder(embeddings, probe=False)
    return config | {"__tokenized_fields": _fields(config)}, embeddings, embedder


def _fields(config: Mapping[str, Any]) -> _Fields:
    """The configured paths to embed: ``fields`` (``IndexConfig``), else ``text_fields``
    (``SqliteStore``'s name for it), else the whole value."""
    fields = config.get("fields") or config.get("text_fields") or ["$"]
    return _tokenized([fields] if isinstance(fields, str) else fields)


def _tokenized(fields: Sequence[str]) -> _Fields:
    return [(f, "$" if f == "$" else tokenize_path(f)) for f in fields]


def _queries(ops: Sequence[Op], embedder: Any) -> list[str]:
    """The distinct query texts of the batch's searches (none without an embedder)."""
    if embedder is None:
        return []
    return list(dict.fromkeys(op.query for op in ops if isinstance(op, SearchOp) and op.query))


def _with_vectors(
    plan: _Plan, docs: Sequence[tuple[_Key, str, str]], matrix: np.ndarray
) -> _Plan:
    """``plan`` with one float32 vector per embedded text, grouped by item."""
    rows = np.asarray(matrix, dtype=np.float32)
    vectors: _Vectors = {}
    for (key, path, _), row in zip(docs, rows, strict=True):
        vectors.setdefault(key, []).append((path, row.tobytes()))
    return plan._replace(vectors=vectors)


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


def _check_ttl_config(ttl: Any) -> None:
    """LangGraph's ``TTLConfig``: a dict whose known settings have their types."""
    if ttl is None:
        return
    if not isinstance(ttl, Mapping):
        raise InvalidInputError(
            f"ttl must be a dict (LangGraph's TTLConfig), got {type(ttl).__name__}."
        )
    if ttl.get("default_ttl") is not None:
        check_number(ttl["default_ttl"], "default_ttl (minutes)", low=0.0, high=MAX_TTL_MINUTES)
    for flag in ("refresh_on_read", "omit_expired"):
        if ttl.get(flag) is not None:
            check_flag(ttl[flag], flag)
    if ttl.get("sweep_interval_minutes") is not None:
        check_number(
            ttl["sweep_interval_minutes"], "sweep_interval_minutes", low=0.0, high=MAX_TTL_MINUTES
        )


def _check_op(op: Op) -> None:
    """Refuse a malformed operation before anything is embedded or written (a batch is all or
    nothing): namespaces, keys, value types, TTLs, pages. Filters are checked by
    :func:`_check_filter`, value sizes once serialised (:meth:`HarombeStore._plan`)."""
    if isinstance(op, (GetOp, PutOp)):
        _check_namespace(op.namespace, "namespace", empty=False)
        if op.key != "":
            check_id(op.key, "store key")
    if isinstance(op, GetOp):
        if op.refresh_ttl is not None:
            check_flag(op.refresh_ttl, "refresh_ttl")
    elif isinstance(op, PutOp):
        if op.value is not None:
            if not isinstance(op.value, Mapping):
                raise InvalidInputError(
                    f"a store value must be a dict (a JSON object), got {type(op.value).__name__}."
                )
            # Measured before it is serialised (a 50 MB value is refused at once); the exact
            # length of its JSON is checked again in _plan.
            limit = current_limits().store_value_chars
            check_json(op.value, "a store value", limit=limit, field="store_value_chars",
                       strict=False)
        if op.index is not None and op.index is not False and (
            not isinstance(op.index, list) or not all(isinstance(f, str) for f in op.index)
        ):
            raise InvalidInputError("index must be False, None or a list of field paths (str).")
        if op.ttl is not None:
            check_number(op.ttl, "ttl (minutes)", low=0.0, high=MAX_TTL_MINUTES)
    elif isinstance(op, SearchOp):
        _check_namespace(op.namespace_prefix, "namespace_prefix", empty=True)
        if op.query is not None:
            check_query(op.query)
        check_count(op.limit, "limit")
        check_count(op.offset, "offset")
        if op.refresh_ttl is not None:
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
    """A value as LangGraph's ``SqliteStore`` writes it (orjson): NaN and infinities become
    ``null``, datetimes, dates, times and UUIDs ISO 8601 / canonical strings, tuples lists."""
    try:
        return orjson.dumps(dict(value)).decode()
    except (TypeError, ValueError) as exc:  # orjson.JSONEncodeError is a TypeError
        raise InvalidInputError(
            "store values must be JSON objects with str keys (str, numbers, bools, None, lists, "
            f"dicts, datetimes; integers within 64 bits): {exc}. Convert the value first."
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
    "$ne": lambda a, b: a is not None and a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}
"""LangGraph's filter operators. A missing or null field matches none but ``$eq: None``, as
in ``SqliteStore`` and ``PostgresStore`` (SQL comparisons with NULL are never true)."""


def _check_filter(condition: Any, top: bool = True) -> None:
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
        _check_filter(operand, top=False)


def _field(value: Mapping[str, Any], key: str) -> Any:
    """The value a filter key names: the key itself, else a dotted path through nested
    objects (``"user.access-level"``), as ``SqliteStore`` reads it; None when missing."""
    if key in value:
        return value[key]
    node: Any = value
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _matches(value: Mapping[str, Any], condition: Mapping[str, Any]) -> bool:
    """``value`` satisfies a LangGraph filter: every key, a field or dotted path, compares."""
    return all(_compare(_field(value, key), wanted) for key, wanted in condition.items())


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
