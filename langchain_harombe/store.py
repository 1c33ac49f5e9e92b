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

The items and their operations are the core's (:mod:`harombe_core.store.items`, bodies of SQL
steps written once for both backends); this class translates LangGraph's operations, results
and index configuration into them, embeds texts and runs the TTL sweeper. A batch runs
in one transaction on either backend: on SQLite through the store's write transaction, on
PostgreSQL through the store's pooled, retrying transaction (in one worker-thread hop for
``abatch``, and applied exactly once when a retry follows a connection lost at COMMIT).
Embedding happens before the transaction starts, natively async in ``abatch``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import math
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import numpy as np
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

from harombe_core import MemoryManager
from harombe_core.embeddings import Embedder, aidentity, identity
from harombe_core.errors import HarombeError, InvalidInputError, MissingExtraError
from harombe_core.integration import Body, adrive, drive, items, sql_runner, to_micros
from harombe_core.integration import Op as StoreOp
from harombe_core.validate import (
    check_list,
    check_number,
    keywords_checked,
)
from langchain_harombe._opened import Opened, Ready
from langchain_harombe._packages import missing_package
from langchain_harombe.embeddings import LangChainEmbedder
from langchain_harombe.history import resolve_manager
from langchain_harombe.store_checks import (
    MAX_TTL_MINUTES,
    check_op,
    check_ttl_config,
    with_tuple_prefixes,
)
from langchain_harombe.store_facts import (
    check_fact_ttl,
    fact_namespaces,
    is_fact_op,
    plan_fact_write,
    read_fact_op,
)

__all__ = ["HarombeStore"]

logger = logging.getLogger(__name__)

_Key = tuple[tuple[str, ...], str]
_Vectors = dict[_Key, list[tuple[str, np.ndarray]]]
_Fields = list[tuple[str, Any]]  # (path, "$" or its tokens), as LangGraph's __tokenized_fields


class _Plan(NamedTuple):
    """What a batch writes, worked out before its transaction: the last put of each key (in
    the order keys were first put), their serialised values, vectors and query vectors."""

    puts: dict[_Key, PutOp]
    values: dict[_Key, str]
    vectors: _Vectors
    queries: dict[str, np.ndarray]


_OPS = (GetOp, PutOp, SearchOp, ListNamespacesOp)


def _now() -> int:
    return to_micros(datetime.now(UTC))


class HarombeStore(BaseStore):
    """A LangGraph ``BaseStore`` on a harombe database (SQLite or PostgreSQL).

    Use it as ``create_agent(..., store=HarombeStore(manager))`` or anywhere LangGraph takes a
    store (LangMem tools, graph nodes via ``get_store()``). Items share the manager's database
    with its conversations and behave the same on both backends; on PostgreSQL many processes
    can use one store at once. The namespace ``("harombe", "facts", user_id)`` is the user's
    facts in harombe's user memory (:mod:`langchain_harombe.store_facts`).

    Args:
        manager: The application's :class:`~harombe_core.MemoryManager` (SQLite or PostgreSQL),
            or else
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

    @keywords_checked
    def __init__(
        self,
        manager: MemoryManager | None = None,
        *,
        storage_path: str | os.PathLike[str] | None = None,
        index: Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        manager_options: dict[str, Any] | None = None,
    ) -> None:
        check_ttl_config(ttl)
        # Items are searched by meaning through ``index`` (as LangGraph's stores): the manager
        # a path opens needs no semantic memory of its own unless asked for.
        self.manager, self._owns_manager = resolve_manager(
            manager,
            storage_path,
            manager_options,
            owner="HarombeStore",
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
        # The embedder's identity (name, dimension, fingerprint), found on the first batch
        # that embeds: opening a store loads no model.
        self._model: str | None = None
        self._warned_stale = False
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()
        self._sweeper_future: concurrent.futures.Future[None] = concurrent.futures.Future()

    # batch --------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in one transaction: reads first (they see the store as it was before
        the batch), then the writes in batch order, the last put of a key winning (as
        LangGraph's stores do); the facts namespace's writes join the same transaction.
        Embedding happens before the transaction starts."""
        ops = [
            with_tuple_prefixes(op)
            for op in check_list(ops, "batch", of="store operations", single=_OPS)
        ]
        plan = self._plan(ops)
        facts = _Facts(
            {i: drive(read_fact_op(self.manager, op)) for i, op in _fact_reads(ops)},
            {i: drive(plan_fact_write(self.manager, op)) for i, op in _fact_writes(ops)},
        )
        docs = self._embed_texts(plan)
        if docs:
            plan = _with_vectors(plan, docs, self._embedder.embed([t for _, _, t in docs]))
        queries = {q: self._embedder.embed_query(q) for q in _queries(ops, self._embedder)}
        if (docs or queries) and self._model is None:
            self._model = identity(self._embedder)
        plan = plan._replace(queries=queries)
        raw = self._backend.run(lambda: self._body(ops, plan, facts), exactly_once=_writes(ops))
        return _results(ops, raw, facts.reads)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` with the embedder's own async methods and the database's async path."""
        ops = [
            with_tuple_prefixes(op)
            for op in check_list(ops, "abatch", of="store operations", single=_OPS)
        ]
        plan = self._plan(ops)
        reads = {i: await adrive(read_fact_op(self.manager, op)) for i, op in _fact_reads(ops)}
        writes = {i: await adrive(plan_fact_write(self.manager, op)) for i, op in _fact_writes(ops)}
        facts = _Facts(reads, writes)
        docs = self._embed_texts(plan)
        if docs:
            vectors = await self._embedder.aembed([t for _, _, t in docs])
            plan = _with_vectors(plan, docs, vectors)
        texts = _queries(ops, self._embedder)
        found = await asyncio.gather(*(self._embedder.aembed_query(q) for q in texts))
        plan = plan._replace(queries=dict(zip(texts, found, strict=True)))
        if (docs or texts) and self._model is None:
            self._model = await aidentity(self._embedder)
        raw = await self._backend.arun(
            lambda: self._body(ops, plan, facts), exactly_once=_writes(ops)
        )
        return _results(ops, raw, facts.reads)

    def _plan(self, ops: Sequence[Op]) -> _Plan:
        """Check the ops and serialise what they write (outside the transaction)."""
        puts: dict[_Key, PutOp] = {}
        for op in ops:
            if is_fact_op(op):  # a user's facts: checked as it is planned (store_facts.py)
                check_fact_ttl(op, (self.ttl_config or {}).get("default_ttl"))
                continue
            check_op(op)
            if isinstance(op, SearchOp) and op.filter:
                items.check_filter(op.filter)
            elif isinstance(op, PutOp):
                key = (op.namespace, op.key)
                puts.pop(key, None)  # the last put of a key wins, in its place in the batch
                puts[key] = op
        values = items.encode_values(
            {k: op.value for k, op in puts.items() if op.value is not None}
        )
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

    def _body(self, ops: Sequence[Op], plan: _Plan, facts: _Facts) -> Body[list[Any]]:
        """The batch's statements; returns plain rows (JSON-serialisable), one entry per op
        (None for a put, and for a fact read, done before: ``facts.reads``)."""
        out: list[Any] = []
        for op in ops:
            done = isinstance(op, PutOp) or is_fact_op(op)
            out.append(None if done else (yield from self._read(op, plan)))
        dialect = self.manager.store.dialect
        for i, op in enumerate(ops):
            if i in facts.writes:
                yield from facts.writes[i].body(dialect)
                continue
            if not isinstance(op, PutOp):
                continue
            key = (op.namespace, op.key)
            if plan.puts.get(key) is not op:  # a later put of the key wins
                continue
            yield from items.put(
                self._backend,
                op.namespace,
                op.key,
                plan.values.get(key),
                now=_now(),
                ttl=op.ttl,
                vectors=plan.vectors.get(key),
                model=self._model,
            )
        return out

    def _read(self, op: Op, plan: _Plan) -> Body[Any]:
        """The core's item read for one of LangGraph's read operations."""
        sql, omit = self._backend, self._omit_expired
        refresh = bool(getattr(op, "refresh_ttl", False) and self._refresh_on_read)
        if isinstance(op, GetOp):
            return items.get(
                sql, op.namespace, op.key, now=_now(), omit_expired=omit, refresh=refresh
            )
        if isinstance(op, SearchOp):
            query = plan.queries.get(op.query) if op.query else None
            return items.search(
                sql,
                op.namespace_prefix,
                now=_now(),
                value_filter=op.filter,
                query=query,
                offset=op.offset,
                limit=op.limit,
                omit_expired=omit,
                refresh=refresh,
                model=self._model,
                stale=self._warn_stale,
            )
        assert isinstance(op, ListNamespacesOp)  # check_op refused any other kind
        return self._namespaces(op)

    def _warn_stale(self, count: int) -> None:
        """Say once per store that searches by meaning leave out items another model embedded."""
        if self._warned_stale:
            return
        self._warned_stale = True
        logger.warning(
            "HarombeStore: %d item(s) under the searched namespace have vectors another "
            "embedding model made, not %r; searches by meaning leave them out of the "
            "ranking (they follow, unscored) until store.reindex() embeds them again.",
            count,
            self._model,
        )

    def reindex(self, batch_size: int = 100) -> int:
        """Embed again, with this store's model, every item whose vectors another (or an
        unknown) model made, so searches by meaning rank them again; returns how many.

        Needed after reopening a store with another ``index`` embedding: until then such items
        are left out of the ranking, never scored against a query of another model. Items
        written before the model was recorded are still ranked (as they were before); they are
        re-embedded too, which matters only if the model changed with the upgrade. Each item
        is re-embedded at the paths it was embedded at before; an item deleted or rewritten
        meanwhile is skipped (a put already embedded it with the current model). Safe to stop
        and run again."""
        self._reindexing()
        model = self._model = self._model or identity(self._embedder)
        done = 0
        while todo := self._backend.read(lambda: items.stale(self._backend, model, batch_size)):
            texts = _stale_texts(todo)
            vectors = _grouped(todo, texts, self._embedder.embed([t for _, _, t in texts]))
            done += self._backend.run(
                functools.partial(items.replace_vectors, self._backend, todo, vectors, model)
            )
        return done

    async def areindex(self, batch_size: int = 100) -> int:
        """:meth:`reindex` on the async path (embedding with the embedder's async methods)."""
        self._reindexing()
        model = self._model = self._model or await aidentity(self._embedder)
        done = 0
        while todo := await self._backend.aread(
            lambda: items.stale(self._backend, model, batch_size)
        ):
            texts = _stale_texts(todo)
            matrix = await self._embedder.aembed([t for _, _, t in texts])
            vectors = _grouped(todo, texts, matrix)
            done += await self._backend.arun(
                functools.partial(items.replace_vectors, self._backend, todo, vectors, model)
            )
        return done

    def _reindexing(self) -> None:
        """Refuses a reindex of a store without ``index``."""
        if self._embedder is None:
            raise InvalidInputError(
                "this HarombeStore has no index: open it with index={'embed': ...} (the model "
                "to embed the items with) to reindex them."
            )

    def _namespaces(self, op: ListNamespacesOp) -> Body[list[tuple[str, ...]]]:
        """The item namespaces and the facts namespaces of users with facts, matched, cut to
        ``max_depth`` and paged together (as LangGraph's stores page one list). Without facts
        that match, the database pages the item names alone; with them, the page of the merged
        list lies in the first ``offset + limit`` of each."""
        match = [(m.match_type, m.path) for m in op.match_conditions or ()]
        facts = yield from fact_namespaces(self.manager.store.dialect)
        found = {  # the item names come matched and cut; the facts' are here
            ns[: op.max_depth] if op.max_depth is not None else ns
            for ns in facts
            if all(items.ns_matches(kind, path, ns) for kind, path in match)
        }
        every: list[tuple[str, ...]] = yield from items.list_namespaces(
            self._backend,
            now=_now(),
            match=match,
            max_depth=op.max_depth,
            offset=op.offset if not found else 0,
            limit=op.limit if not found else op.offset + op.limit,
            omit_expired=self._omit_expired,
        )
        if not found:
            return every
        return sorted(found.union(every))[op.offset : op.offset + op.limit]

    # TTL settings, read live (LangGraph's own tests change ttl_config on a running store) --
    @property
    def _refresh_on_read(self) -> bool:
        """Reads renew TTLs only when the store asks for it, as ``SqliteStore`` does."""
        return bool(self.ttl_config and self.ttl_config.get("refresh_on_read"))

    @property
    def _omit_expired(self) -> bool:
        return bool(self.ttl_config and self.ttl_config.get("omit_expired"))

    # maintenance --------------------------------------------------------------------------
    def sweep_ttl(self) -> int:
        """Delete expired items (and their vectors); returns how many."""
        return int(self._backend.run(self._sweep, exactly_once=True))

    def _sweep(self) -> Body[int]:
        return items.sweep(self._backend, now=_now())

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
        if (
            isinstance(interval, bool)
            or not isinstance(interval, (int, float))
            or not (0 < interval < math.inf)
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

    @classmethod
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        index: Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        manager_options: dict[str, Any] | None = None,
    ) -> Opened[HarombeStore]:
        """A store on its own manager for a database path or ``postgresql://`` URL, closed on
        exit: ``with`` as LangGraph's ``SqliteStore.from_conn_string``, or ``async with`` as
        ``AsyncSqliteStore``'s and ``AsyncPostgresStore``'s (one store does both)."""
        return Opened(
            functools.partial(
                cls,
                storage_path=conn_string,
                index=index,
                ttl=ttl,
                manager_options=manager_options,
            )
        )

    def setup(self) -> Ready:
        """Nothing to do: the tables are created by the database's schema migrations when it
        is opened. (Kept so code written for LangGraph's stores runs unchanged: ``setup()``
        as for ``SqliteStore``, or ``await setup()`` as for ``AsyncPostgresStore``.)"""
        return Ready()

    def close(self) -> None:
        """Stop the TTL sweeper, and close the manager if this store opened it from
        ``storage_path``."""
        self.stop_ttl_sweeper()
        if self._owns_manager:
            self.manager.close()


def _index(index: Mapping[str, Any] | None, default: Any) -> tuple[dict[str, Any] | None, Any, Any]:
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
    embedder = LangChainEmbedder(embeddings, probe=False, name=_function_name(embeddings))
    return config | {"__tokenized_fields": _fields(config)}, embeddings, embedder


def _function_name(embeddings: Any) -> str | None:
    """The name item vectors record for an ``embed`` function (LangGraph wraps it in an
    ``EmbeddingsLambda``): the function's own, so that switching to another function is seen
    as another model. None for an ``Embeddings`` object (its class and model name it)."""
    func = getattr(embeddings, "func", None) or getattr(embeddings, "afunc", None)
    if type(embeddings).__name__ != "EmbeddingsLambda" or func is None:
        return None
    module = getattr(func, "__module__", None) or "?"
    return f"langchain/function/{module}.{getattr(func, '__qualname__', repr(func))}"


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


def _with_vectors(plan: _Plan, docs: Sequence[tuple[_Key, str, str]], matrix: np.ndarray) -> _Plan:
    """``plan`` with one float32 vector per embedded text, grouped by item."""
    rows = np.asarray(matrix, dtype=np.float32)
    vectors: _Vectors = {}
    for (key, path, _), row in zip(docs, rows, strict=True):
        vectors.setdefault(key, []).append((path, row))
    return plan._replace(vectors=vectors)


def _stale_texts(todo: Sequence[items.Stale]) -> list[tuple[int, str, str]]:
    """``(item index, path, text)`` for every path the stale items were embedded at, read
    from their values again as a put reads them (a list's ``path.i`` is its i-th text)."""
    out: list[tuple[int, str, str]] = []
    for n, (_, _, value_json, _, paths) in enumerate(todo):
        value = json.loads(value_json)
        for path in paths:
            text = _text_at(value, path)
            if text is not None:
                out.append((n, path, text))
    return out


def _text_at(value: Any, path: str) -> str | None:
    """The text a put embedded at ``path`` (see ``_embed_texts``), or None if it is gone."""
    texts = get_text_at_path(value, "$" if path == "$" else tokenize_path(path))
    if len(texts) == 1:
        return texts[0]
    base, _, index = path.rpartition(".")
    if base and index.isdigit():
        listed = get_text_at_path(value, "$" if base == "$" else tokenize_path(base))
        if int(index) < len(listed):
            return listed[int(index)]
    return None


def _grouped(
    todo: Sequence[items.Stale], texts: Sequence[tuple[int, str, str]], matrix: np.ndarray
) -> list[list[tuple[str, np.ndarray]]]:
    """One ``(path, vector)`` list per stale item, from the rows of ``matrix``."""
    out: list[list[tuple[str, np.ndarray]]] = [[] for _ in todo]
    for (n, path, _), row in zip(texts, matrix, strict=True):
        out[n].append((path, row))
    return out


def _writes(ops: Sequence[Op]) -> bool:
    return any(isinstance(op, PutOp) for op in ops)


class _Facts(NamedTuple):
    """A batch's fact operations by their place in it: the results of its reads (run before
    the transaction) and the store operations of its writes (run inside it)."""

    reads: dict[int, Result]
    writes: dict[int, StoreOp[Any]]


def _fact_reads(ops: Sequence[Op]) -> list[tuple[int, Op]]:
    return [(i, op) for i, op in enumerate(ops) if is_fact_op(op) and not isinstance(op, PutOp)]


def _fact_writes(ops: Sequence[Op]) -> list[tuple[int, PutOp]]:
    return [(i, op) for i, op in enumerate(ops) if is_fact_op(op) and isinstance(op, PutOp)]


def _results(ops: Sequence[Op], raw: Sequence[Any], facts: Mapping[int, Result]) -> list[Result]:
    """The batch's results from the plain rows its body returned (and the fact reads')."""
    out: list[Result] = []
    for i, (op, value) in enumerate(zip(ops, raw, strict=True)):
        if i in facts:
            out.append(facts[i])
        elif isinstance(op, GetOp):
            out.append(None if value is None else Item(**items.to_item(value)))
        elif isinstance(op, SearchOp):
            out.append([SearchItem(**items.to_item(row), score=score) for row, score in value])
        elif isinstance(op, ListNamespacesOp):
            out.append([tuple(ns) for ns in value])
        else:
            out.append(None)
    return out
