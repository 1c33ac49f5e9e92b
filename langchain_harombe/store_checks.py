"""What :class:`~langchain_harombe.store.HarombeStore` checks and how its filters match.

A batch is all or nothing, so every operation is checked (namespaces, TTL settings, filters
with their operators) before anything is embedded or written; filters and namespace
conditions then match as LangGraph's own stores match them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from langgraph.store.base import (
    GetOp,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchOp,
)

from harombe_core.errors import InvalidInputError
from harombe_core.limits import current_limits
from harombe_core.validate import (
    check_count,
    check_flag,
    check_id,
    check_json,
    check_number,
    check_query,
    optional_count,
)

__all__ = [
    "MAX_TTL_MINUTES",
    "check_filter",
    "check_namespace",
    "check_op",
    "check_ttl_config",
    "matches_filter",
    "ns_matches",
]


#: Longest TTL, in minutes (about 1,900 years; expiry times are 64-bit microseconds).
MAX_TTL_MINUTES = 1_000_000_000


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


def check_op(op: Op) -> None:
    """Refuse a malformed operation before anything is embedded or written (a batch is all or
    nothing): namespaces, keys, value types, TTLs, pages. Filters are checked by
    :func:`check_filter`, value sizes once serialised (:meth:`HarombeStore._plan`)."""
    if isinstance(op, (GetOp, PutOp)):
        check_namespace(op.namespace, "namespace", empty=False)
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


def ns_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
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


def matches_filter(value: Mapping[str, Any], condition: Mapping[str, Any]) -> bool:
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
