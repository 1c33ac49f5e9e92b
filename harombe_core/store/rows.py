"""Rows of the message store, the same on every SQL dialect.

The column lists, a row to a :class:`~harombe_core.models.Message` or
:class:`~harombe_core.models.Session` and back, times as integer microseconds, the checks of
what an update may store, ids, and the SQL that keeps a query inside a
:class:`~harombe_core.store.base.SearchScope`. Written once so that both backends store and
read the same thing: a value one of them accepts, the other accepts too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from harombe_core.errors import CorruptRowError, InvalidInputError
from harombe_core.limits import current_limits
from harombe_core.models import ROLES, Message, Session
from harombe_core.store.base import UNSET, KeywordHit, OnCorrupt, SearchScope
from harombe_core.validate import (
    check_count,
    check_id,
    check_mapping,
    check_time,
    optional_count,
    optional_id,
    optional_text,
    show,
)

__all__ = [
    "MESSAGE_COLUMNS",
    "SESSION_COLUMNS",
    "LeftOut",
    "OnCorrupt",
    "check_id",
    "check_summary",
    "corrupt_row",
    "dumps",
    "from_micros",
    "json_problem",
    "message_ids",
    "readable",
    "readable_messages",
    "row_to_message",
    "row_to_session",
    "row_to_summary",
    "scope_hits",
    "scope_messages",
    "scope_sql",
    "session_changes",
    "session_span",
    "time_problem",
    "to_micros",
]

MESSAGE_COLUMNS = (
    "m.id, m.session_id, m.role, m.content, m.name, m.tool_calls, m.tool_call_id, m.metadata, "
    "m.created_at, m.token_count, m.parent_id"
)
SESSION_COLUMNS = (
    "id, user_id, system_prompt, metadata, created_at, updated_at, message_count, summary, "
    "summary_json, summary_until_id"
)


T = TypeVar("T")
log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(value: datetime) -> int:
    """Datetimes are stored as integer microseconds since the epoch: exact, sortable, small.

    A time that is not already UTC is converted (naive ones are taken as UTC); one whose UTC
    equivalent falls outside years 1 to 9999 is refused with InvalidInputError.
    """
    if value.tzinfo is not UTC:
        value = check_time(value, "time")
    return (value - _EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    # Timedelta arithmetic rather than fromtimestamp(): exact, and valid for years 1 to 9999.
    return _EPOCH + timedelta(microseconds=int(value))


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _text(what: str, limit: str) -> Callable[[Any], str | None]:
    """A check of an optional text field within the size limit named ``limit``."""
    return lambda value: optional_text(
        value, what, limit=getattr(current_limits(), limit), field=limit
    )


def _metadata(value: Any) -> str:
    limit = current_limits().session_metadata_chars
    metadata = check_mapping(
        value, "session metadata", limit=limit, field="session_metadata_chars"
    )
    return dumps(metadata)


def _summary_data(value: Any) -> str | None:
    return None if value is None else dumps(check_summary(value, "summary_data"))


#: Session field -> (its column, the check that turns a caller's value into the stored one).
_SESSION_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "user_id": ("user_id", lambda value: optional_id(value, "user_id")),  # None: no owner
    "system_prompt": ("system_prompt", _text("system_prompt", "system_prompt_chars")),
    "system_prompt_tokens": (
        "system_prompt_tokens", lambda value: check_count(value, "system_prompt_tokens")
    ),
    "metadata": ("metadata", _metadata),
    "summary": ("summary", _text("summary", "summary_chars")),
    "summary_data": ("summary_json", _summary_data),
    "summary_until_id": (
        "summary_until_id", lambda value: optional_count(value, "summary_until_id")
    ),
}


def session_changes(**fields: Any) -> dict[str, Any]:
    """Column -> stored value for the session fields given (UNSET ones are left out).

    Shared by every backend so an update means the same thing everywhere (``user_id`` is
    checked as :meth:`create_session` checks it); column names come from a fixed table, never
    from the caller. Every value is checked against its kind and size limit
    (:mod:`harombe_core.limits`) here, whichever path it came by (manager, import, migration),
    before anything is written.
    """
    changes: dict[str, Any] = {}
    for name, value in fields.items():
        if value is UNSET:
            continue
        if name not in _SESSION_FIELDS:
            raise TypeError(f"session_changes() got an unexpected keyword argument {name!r}")
        column, check = _SESSION_FIELDS[name]
        changes[column] = check(value)
    return changes


def check_summary(value: Any, what: str) -> dict[str, Any]:
    """A session's or a message's summary data: a JSON object within ``summary_chars``."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{what} must be a dict, got {type(value).__name__}.")
    limits = current_limits()
    return check_mapping(value, what, limit=limits.summary_chars, field="summary_chars")


def session_span(message_times: Sequence[int], now: int) -> tuple[int, int]:
    """(created_at, updated_at) a batch of messages gives its session, in microseconds.

    A session's last activity is its newest message's time, not the moment it was written:
    imported history keeps its real dates, so it sorts and prunes by when it happened. A
    session first made by this batch starts at its oldest message (or now, if later).
    """
    if not message_times:
        return now, now
    return min(now, min(message_times)), max(message_times)


def row_to_message(row: Sequence[Any]) -> Message:
    # Rows were validated when they were written, so they skip Message's checks; and each
    # field is set directly (a token window builds dozens of these per call, a context with
    # important messages a hundred). _MESSAGE_FIELDS below keeps this list whole. A row edited
    # outside harombe is caught by the few type checks below (cheap) and named by
    # _message_problem (only then), never passed on to fail deep in a caller.
    message = _new_message(Message)
    try:
        mid, session_id, role, content, name, calls, call_id, meta, created, tokens, parent = row
        message.id = mid
        message.session_id = session_id
        message.role = role
        message.content = content
        message.name = name
        message.tool_calls = json.loads(calls) if calls is not None else None
        message.tool_call_id = call_id
        message.metadata = json.loads(meta) if meta != "{}" else {}
        message.created_at = from_micros(created)
        message.token_count = tokens
        message.parent_id = parent
    except (TypeError, ValueError, OverflowError):
        raise _corrupt("messages", row, _message_problem(row)) from None
    if (
        type(content) is not str
        or type(tokens) is not int
        or tokens < 0
        or role not in ROLES
        or (meta != "{}" and type(message.metadata) is not dict)
        or (calls is not None and type(message.tool_calls) is not list)
        or (name is not None and type(name) is not str)
        or (call_id is not None and type(call_id) is not str)
        or (parent is not None and type(parent) is not int)
    ):
        raise _corrupt("messages", row, _message_problem(row))
    return message


def readable(
    rows: Iterable[Sequence[Any]], read: Callable[[Sequence[Any]], T], on_corrupt: OnCorrupt
) -> list[T]:
    """``read`` of each row. A row edited outside harombe that ``read`` cannot make sense of
    is given to ``on_corrupt`` (it says so) and left out, where one such row must not stop
    the others (every later message of every user from being embedded, every turn of a user
    from being answered); its CorruptRowError is raised when ``on_corrupt`` is None."""
    out: list[T] = []
    for row in rows:
        try:
            out.append(read(row))
        except CorruptRowError as exc:
            if on_corrupt is None:
                raise
            on_corrupt(exc)
    return out


class LeftOut:
    """The ``on_corrupt`` of a read that enriches a prompt (recall, the user's profile): it
    leaves an unreadable row out and says so once per row, naming it and the check that
    lists every such row, however many turns read past it."""

    #: Rows remembered as told at most (then the memory starts again).
    LIMIT = 10_000

    def __init__(self, location: str, what: str) -> None:
        self.location = location
        self.what = what
        self.told: set[tuple[str, str, str]] = set()

    def __call__(self, error: CorruptRowError) -> None:
        key = (error.table, str(error.row_id), error.column)
        if key in self.told:
            return
        if len(self.told) >= self.LIMIT:
            self.told.clear()
        self.told.add(key)
        log.warning(
            "%s: a row was left out of %s: %s `harombe check %s` lists every row harombe "
            "cannot read.",
            self.location,
            self.what,
            error,
            self.location,
        )


def readable_messages(
    rows: Sequence[Sequence[Any]], on_corrupt: OnCorrupt
) -> list[tuple[Message, str]]:
    """``(message, context)`` of each row of message columns followed by a context, as
    :func:`readable` reads them."""
    return readable(rows, lambda row: (row_to_message(row[:-1]), row[-1] or ""), on_corrupt)


def scope_messages(rows: Iterable[Sequence[Any]], scope: SearchScope | None) -> list[Message]:
    """The messages of rows a search read within ``scope``: an unreadable one raises, or goes
    to the scope's ``on_corrupt`` when the search passes over such rows."""
    return readable(rows, row_to_message, None if scope is None else scope.on_corrupt)


def scope_hits(
    rows: Iterable[Sequence[Any]], scope: SearchScope | None, sign: float = 1.0
) -> list[KeywordHit]:
    """Keyword hits of rows of message columns followed by a rank (times ``sign``), read as
    :func:`scope_messages` reads them."""
    return readable(
        rows,
        lambda row: KeywordHit(row_to_message(row[:-1]), sign * float(row[-1])),
        None if scope is None else scope.on_corrupt,
    )


def row_to_summary(message_id: Any, value: Any) -> dict[str, Any]:
    """A message's stored summary (``summary_json``); CorruptRowError naming the row when it
    is not a JSON object."""
    try:
        summary = json.loads(value)
    except (TypeError, ValueError):
        summary = None
    if type(summary) is not dict:
        problem = json_problem(value, dict, nullable=False) or "could not be read"
        raise corrupt_row("messages", message_id, "summary_json", problem)
    return summary


_new_message = Message.__new__
#: The fields row_to_message sets: all of Message's (checked when this module loads).
_MESSAGE_FIELDS = ("id", "session_id", "role", "content", "name", "tool_calls", "tool_call_id",
                   "metadata", "created_at", "token_count", "parent_id")
if set(_MESSAGE_FIELDS) != {f.name for f in fields(Message)}:  # pragma: no cover - a new field
    raise ImportError("row_to_message does not set every Message field; update it.")


def row_to_session(row: Sequence[Any]) -> Session:
    try:
        session = Session(
            id=row[0],
            user_id=row[1],
            system_prompt=row[2],
            metadata=json.loads(row[3]),
            created_at=from_micros(row[4]),
            updated_at=from_micros(row[5]),
            message_count=row[6],
            summary=row[7],
            summary_data=json.loads(row[8]) if row[8] is not None else None,
            summary_until_id=row[9],
        )
    except (TypeError, ValueError, OverflowError):
        raise _corrupt("sessions", row, _session_problem(row)) from None
    if (
        type(session.metadata) is not dict
        or (session.summary_data is not None and type(session.summary_data) is not dict)
        or any(row[i] is not None and type(row[i]) is not str for i in (1, 2, 7))
    ):
        raise _corrupt("sessions", row, _session_problem(row))
    return session


def json_problem(value: Any, kind: type, nullable: bool) -> str | None:
    """Why ``value`` is not the JSON text of a ``kind`` (None when it is)."""
    if value is None:
        return None if nullable else "is NULL"
    if not isinstance(value, str):
        return f"holds a {type(value).__name__}, not JSON text"
    try:
        decoded = json.loads(value)
    except ValueError:
        return "is not valid JSON"
    if type(decoded) is not kind:
        return f"holds a JSON {type(decoded).__name__}, not a JSON {kind.__name__}"
    return None


def time_problem(value: Any) -> str | None:
    if type(value) is not int:
        return f"holds a {type(value).__name__}, not integer microseconds"
    try:
        from_micros(value)
    except OverflowError:
        return "is a time outside years 1 to 9999"
    return None


def _message_problem(row: Sequence[Any]) -> tuple[str, str]:
    """(column, what is wrong with it) for a message row row_to_message refused."""
    checks: list[tuple[str, str | None]] = [
        ("role", None if row[2] in ROLES else f"is {show(row[2])}, not one of {sorted(ROLES)}"),
        ("content", None if type(row[3]) is str else f"holds a {type(row[3]).__name__}"),
        ("tool_calls", json_problem(row[5], list, nullable=True)),
        ("metadata", json_problem(row[7], dict, nullable=False)),
        ("created_at", time_problem(row[8])),
        (
            "token_count",
            None if type(row[9]) is int and row[9] >= 0 else f"is {show(row[9])}, not a count",
        ),
        ("name", _type_problem(row[4], str)),
        ("tool_call_id", _type_problem(row[6], str)),
        ("parent_id", _type_problem(row[10], int)),
    ]
    return next(((c, p) for c, p in checks if p is not None), ("?", "could not be read"))


def _type_problem(value: Any, kind: type) -> str | None:
    """Why a nullable column's ``value`` is not a ``kind`` (None when it is, or is NULL)."""
    if value is None or type(value) is kind:
        return None
    return f"holds a {type(value).__name__}, not {'text' if kind is str else 'an integer'}"


def _session_problem(row: Sequence[Any]) -> tuple[str, str]:
    """(column, what is wrong with it) for a session row row_to_session refused."""
    checks: list[tuple[str, str | None]] = [
        ("metadata", json_problem(row[3], dict, nullable=False)),
        ("created_at", time_problem(row[4])),
        ("updated_at", time_problem(row[5])),
        ("summary_json", json_problem(row[8], dict, nullable=True)),
        ("user_id", _type_problem(row[1], str)),
        ("system_prompt", _type_problem(row[2], str)),
        ("summary", _type_problem(row[7], str)),
    ]
    return next(((c, p) for c, p in checks if p is not None), ("?", "could not be read"))


def _corrupt(table: str, row: Sequence[Any], problem: tuple[str, str]) -> CorruptRowError:
    return corrupt_row(table, row[0], *problem)


_EDITED = "harombe never writes that, so the database was edited outside harombe"


def corrupt_row(
    table: str, row_id: Any, column: str, what: str, *, cause: str = _EDITED
) -> CorruptRowError:
    """The error for a stored row harombe cannot read: which row, which column, what is
    wrong with it, why (by default: harombe cannot have written it), and the SQL that deletes
    it on SQLite and on PostgreSQL (``row_id`` is the row's ``id``, or for a table keyed
    otherwise a mapping of its key columns). The decoders that raise it serve both stores and
    do not know which one they read, so the message gives both statements."""
    keys = row_id.items() if isinstance(row_id, Mapping) else [("id", row_id)]
    where = " AND ".join(f"{k} = {_literal(v)}" for k, v in keys)
    pg_where = " AND ".join(f"{k} = {_literal(v, postgres=True)}" for k, v in keys)
    return CorruptRowError(
        f"row {show(row_id)} of table {table}: column {column} {what}. {cause}. Repair that "
        f"column, or delete the row (PRAGMA foreign_keys = ON; DELETE FROM {table} WHERE "
        f"{where};), on PostgreSQL (DELETE FROM {table} WHERE {pg_where};); the other rows "
        "are untouched and still readable.",
        table=table,
        row_id=row_id,
        column=column,
    )


def _literal(value: Any, *, postgres: bool = False) -> str:
    if isinstance(value, bytes):  # a BLOB / bytea key (a message hash)
        return f"'\\x{value.hex()}'::bytea" if postgres else f"x'{value.hex()}'"
    return str(value) if type(value) is int else "'" + str(value).replace("'", "''") + "'"


def message_ids(values: Sequence[Any]) -> list[int]:
    """Message ids as ints; InvalidInputError (not a bare ValueError) for one that is not."""
    try:
        return [int(v) for v in values]
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"message ids must be integers: {exc}") from exc


def scope_sql(scope: SearchScope | None, mark: str = "?") -> tuple[str, list[Any]]:
    """The WHERE fragment (on aliases ``m`` and ``s``) that keeps a query inside its scope,
    with ``mark`` as the dialect's placeholder."""
    if scope is None:
        return "", []
    parts: list[str] = []
    params: list[Any] = []
    if scope.user_id is not None:
        parts.append(f"s.user_id = {mark}")
        params.append(scope.user_id)
    if scope.session_id is not None:
        parts.append(f"m.session_id = {mark}")
        params.append(scope.session_id)
    if scope.exclude_session_id is not None:
        parts.append(f"m.session_id <> {mark}")
        params.append(scope.exclude_session_id)
    if scope.roles:
        parts.append(f"m.role IN ({', '.join([mark] * len(scope.roles))})")
        params.extend(scope.roles)
    if scope.since is not None:
        parts.append(f"m.created_at >= {mark}")
        params.append(to_micros(scope.since))
    if scope.until is not None:
        parts.append(f"m.created_at <= {mark}")
        params.append(to_micros(scope.until))
    return ("".join(f" AND {p}" for p in parts), params)
