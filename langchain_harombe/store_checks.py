"""What :class:`~langchain_harombe.store.HarombeStore` checks before a batch starts.

A batch is all or nothing, so every operation is checked (namespaces, keys, values, TTL
settings, pages) before anything is embedded or written. Filters are checked, and matched, by
the core's items (:func:`harombe_core.store.items.check_filter`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.store.base import (
    GetOp,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchOp,
)

from harombe_core import current_limits
from harombe_core.errors import InvalidInputError
from harombe_core.integration import check_key, check_namespace
from harombe_core.validate import (
    check_count,
    check_flag,
    check_json,
    check_number,
    check_query,
    optional_count,
)

__all__ = ["MAX_TTL_MINUTES", "check_op", "check_ttl_config", "with_tuple_prefixes"]


#: Longest TTL, in minutes (about 1,900 years; expiry times are 64-bit microseconds).
MAX_TTL_MINUTES = 1_000_000_000


def check_ttl_config(ttl: Any) -> None:
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


def with_tuple_prefixes(op: Op) -> Op:
    """``op`` with a namespace prefix given as a list made a tuple, as LangGraph's own stores
    take it (``store.search(["users", "ann"])``, ``list_namespaces(prefix=[...])``)."""
    if isinstance(op, SearchOp) and isinstance(op.namespace_prefix, list):
        return op._replace(namespace_prefix=tuple(op.namespace_prefix))
    if isinstance(op, ListNamespacesOp) and isinstance(op.match_conditions, (tuple, list)):
        conditions = tuple(
            c._replace(path=tuple(c.path))
            if isinstance(c, MatchCondition) and isinstance(c.path, list)
            else c
            for c in op.match_conditions
        )
        return op._replace(match_conditions=conditions)
    return op


def check_op(op: Op) -> None:
    """Refuse a malformed operation before anything is embedded or written (a batch is all or
    nothing): namespaces, keys, value types, TTLs, pages. Filters are checked by
    :func:`check_filter`, value sizes once serialised (:meth:`HarombeStore._plan`)."""
    if isinstance(op, (GetOp, PutOp)):
        check_key(op.namespace, op.key)
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
            check_json(
                op.value, "a store value", limit=limit, field="store_value_chars", strict=False
            )
        if (
            op.index is not None
            and op.index is not False
            and (not isinstance(op.index, list) or not all(isinstance(f, str) for f in op.index))
        ):
            raise InvalidInputError("index must be False, None or a list of field paths (str).")
        if op.ttl is not None:
            check_number(op.ttl, "ttl (minutes)", low=0.0, high=MAX_TTL_MINUTES)
    elif isinstance(op, SearchOp):
        check_namespace(op.namespace_prefix, "namespace_prefix", empty=True)
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
