"""One home for checking what callers pass to harombe, by kind of value, and for writing
values back to a person (:func:`show`, :func:`plural`).

Every public entry point (``MemoryManager``, ``ChatMemory``, the stores, the adapters, the CLI)
checks its arguments with these functions before doing any work: ids, free text, times,
numbers, counts, token budgets, role lists, flags and JSON values. A check returns the value in
the form the rest of the library uses (a UTC ``datetime``, a tuple of roles, a plain dict) or
raises a typed :class:`~harombe_core.errors.InvalidInputError` naming the argument, what was
wrong and how to fix it, so nothing below ever meets a value it cannot handle (a ``TypeError``
from a tokenizer, an ``OverflowError`` from a date, a ``RecursionError`` from JSON).

Sizes are measured first and the measurement stops as soon as a limit is passed, so a 50 MB
value is refused in microseconds instead of after being tokenised and indexed. The limits come
from :mod:`harombe_core.limits`.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar, get_args

from harombe_core.errors import (
    InputTooLargeError,
    InvalidBudgetError,
    InvalidInputError,
    InvalidMessageError,
    MessageTooLargeError,
    UnknownArgumentError,
)
from harombe_core.limits import MAX_ID_CHARS, current_limits

__all__ = [
    "MAX_COUNT",
    "MAX_TOP_K",
    "TIME_RANGE",
    "Role",
    "check_budget",
    "check_config",
    "check_count",
    "check_flag",
    "check_id",
    "check_json",
    "check_list",
    "check_location",
    "check_mapping",
    "check_number",
    "check_options",
    "check_path",
    "check_query",
    "check_roles",
    "check_text",
    "check_time",
    "keywords_checked",
    "known_arguments",
    "optional_count",
    "optional_id",
    "optional_number",
    "optional_text",
    "optional_time",
    "plural",
    "pydantic_errors",
    "show",
]

#: Largest count or id accepted: SQLite's and PostgreSQL's 64-bit integers.
MAX_COUNT = 2**63 - 1
#: Most results one search may ask for; beyond it, page through ``get_messages``.
MAX_TOP_K = 10_000
#: What the store can keep: integer microseconds since the epoch of a UTC time in years 1-9999.
TIME_RANGE = "0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z"
#: Largest integer stored in JSON, in decimal digits (Python refuses to print longer ones).
_MAX_INT_DIGITS = 4_000

Error = type[InvalidInputError]


def show(value: Any, width: int = 60) -> str:
    """A short, safe repr for an error message (huge ints cannot even be printed)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an int of {value.bit_length():,} bits"
    if isinstance(value, str) and len(value) > width:
        value = value[:width]
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def plural(count: int, word: str, words: str | None = None) -> str:
    """``count`` and ``word`` as a person writes them in a message or the command's output
    (``1 session``, ``2 sessions``, ``1,204 messages``): in the plural (``words``, else
    ``word + "s"``) unless it is 1."""
    return f"{count:,} {word if count == 1 else (words or word + 's')}"


def _too_large(error: Error) -> Error:
    """The size error matching ``error``: a message field's is also an InvalidMessageError."""
    return MessageTooLargeError if issubclass(error, InvalidMessageError) else InputTooLargeError


def _raise_limit(
    error: Error, what: str, size: int | None, limit: int, field: str, fix: str
) -> None:
    over = (
        f"{what} is {size:,} characters, over the limit of {limit:,}"
        if size is not None
        else f"{what} is over the limit of {limit:,} characters of JSON"
    )
    raise _too_large(error)(
        f"{over}. {fix} (or raise the limit for this process: "
        f"harombe_core.set_limits({field}=...))."
    )


# ids and text ----------------------------------------------------------------------------------
def check_id(value: Any, what: str, *, error: Error = InvalidInputError) -> str:
    """A session id, user id or key: a non-empty str of at most 512 characters, valid Unicode,
    without NUL bytes."""
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS or "\x00" in value:
        raise error(
            f"{what} must be a non-empty str of at most {MAX_ID_CHARS} characters without NUL "
            f"bytes, got {show(value)}."
        )
    _check_unicode(value, what, error)
    return value


def optional_id(value: Any, what: str, *, error: Error = InvalidInputError) -> str | None:
    """:func:`check_id`, or None."""
    return None if value is None else check_id(value, what, error=error)


def _check_unicode(value: str, what: str, error: Error) -> None:
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(
            f"{what} is not valid Unicode text ({exc.reason} at position {exc.start}); lone "
            "surrogates usually come from decoding bytes with errors='surrogateescape'. Decode "
            "it as UTF-8 (errors='replace') first."
        ) from None


def check_text(
    value: Any,
    what: str,
    *,
    limit: int,
    field: str,
    error: Error = InvalidInputError,
    fix: str = "Store large data elsewhere and keep a reference",
    hint: str = "",
) -> str:
    """Free text to store or search with: a str within ``limit`` characters (the ``field``
    of :class:`~harombe_core.limits.Limits`), valid Unicode, without NUL bytes."""
    if not isinstance(value, str):
        raise error(f"{what} must be a str, got {type(value).__name__}.{hint}")
    if len(value) > limit:
        _raise_limit(error, what, len(value), limit, field, fix)
    if "\x00" in value:
        raise error(
            f"{what} contains a NUL byte (\\x00), which text stores and tokenizers mangle. "
            "Strip it (value.replace('\\x00', '')) or store binary data elsewhere."
        )
    _check_unicode(value, what, error)
    return value


def optional_text(
    value: Any, what: str, *, limit: int, field: str, error: Error = InvalidInputError
) -> str | None:
    """:func:`check_text`, or None."""
    return None if value is None else check_text(value, what, limit=limit, field=field, error=error)


def check_query(value: Any, what: str = "query") -> str:
    """A search query: text no longer than a message may be (what could it match otherwise?)."""
    return check_text(
        value,
        what,
        limit=current_limits().content_chars,
        field="content_chars",
        fix="Search with the words that matter",
    )


def check_path(value: Any, what: str = "path") -> Path:
    """A file path (str or os.PathLike, ``~`` expanded) the operating system can be given."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise InvalidInputError(
            f"{what} must be a file path (a non-empty str or pathlib.Path), got "
            f"{type(value).__name__}."
        )
    try:
        if "\x00" in value:
            raise ValueError
        os.fsencode(value)
    except (ValueError, UnicodeError):
        raise InvalidInputError(
            f"{what} {show(value)} cannot be a file name (NUL byte or invalid Unicode)."
        ) from None
    return Path(value).expanduser()


def check_location(value: Any, what: str = "storage_path") -> str:
    """Where a store lives: ``":memory:"``, a ``postgresql://`` URL or a file path (a str or
    os.PathLike the file system can be given); returned as a str, ``~`` not yet expanded."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise InvalidInputError(
            f"{what} must be a file path, ':memory:' or a postgresql:// URL, got "
            f"{type(value).__name__}."
        )
    if value != ":memory:" and not value.startswith(("postgresql://", "postgres://")):
        _not_another_url(value, what)
        check_path(value, what)
    return value


def _not_another_url(value: str, what: str) -> None:
    """A SQLAlchemy-style URL (LangChain's ``SQLChatMessageHistory(connection=...)``, LlamaIndex's
    ``SQLAlchemyChatStore``) is not a file name: taken as one, ``sqlite:///chat.db`` became a
    folder ``sqlite:`` in the working directory. Say what to write instead."""
    scheme, sep, rest = value.partition("://")
    if not sep or not scheme or not all(c.isalnum() or c in "+.-" for c in scheme):
        return
    dialect = scheme.split("+")[0].lower()
    if dialect == "sqlite":
        path = rest[1:] if rest.startswith("/") else rest  # sqlite:///x.db -> x.db
        fix = f"the file's path, {path!r}" if path else "':memory:'"
        raise InvalidInputError(f"{what} {value!r} is a SQLAlchemy URL; harombe takes {fix}.")
    if dialect in ("postgresql", "postgres"):
        raise InvalidInputError(
            f"{what} {value!r} names a driver; harombe takes the plain "
            f"'postgresql://{rest}' (it uses psycopg 3)."
        )
    raise InvalidInputError(
        f"{what} {value!r} is a {scheme}:// URL; harombe stores in a SQLite file (pass its path) "
        "or PostgreSQL (a postgresql:// URL)."
    )


# times -----------------------------------------------------------------------------------------
def check_time(value: Any, what: str, *, error: Error = InvalidInputError) -> datetime:
    """A point in time as a UTC ``datetime`` the store can represent.

    Accepts a ``datetime`` (naive ones are taken as UTC, like every stored time) or an ISO 8601
    string (``"2024-05-01"``, ``"2024-05-01T12:00:00+02:00"``). Numbers are refused: seconds
    and milliseconds since the epoch look alike, and guessing would silently be off by 1,000.
    """
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise error(
                f"{what} {show(value)} is not an ISO 8601 time; use a datetime or a string such "
                "as '2024-05-01' or '2024-05-01T12:00:00+00:00'."
            ) from None
    if not isinstance(value, datetime):
        raise error(
            f"{what} must be a datetime (or an ISO 8601 string such as '2024-05-01T12:00:00Z'), "
            f"got {type(value).__name__}. For a Unix timestamp use "
            "datetime.fromtimestamp(seconds, UTC)."
        )
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise error(
            f"{what} {value.isoformat()} is outside the times harombe can store ({TIME_RANGE}, "
            "in UTC); its UTC equivalent falls before year 1 or after year 9999."
        ) from None


def optional_time(value: Any, what: str) -> datetime | None:
    """:func:`check_time`, or None."""
    return None if value is None else check_time(value, what)


# numbers ---------------------------------------------------------------------------------------
def check_number(
    value: Any, what: str, *, low: float | None = None, high: float | None = None
) -> float:
    """A finite real number (not a bool, not a numeric string) within ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidInputError(f"{what} must be a number, got {type(value).__name__}.")
    try:
        number = float(value)
    except (OverflowError, ValueError):
        number = math.inf
    if not math.isfinite(number):
        raise InvalidInputError(f"{what} must be a finite number, got {show(value)}.")
    if (low is not None and number < low) or (high is not None and number > high):
        span = (
            f"between {low:g} and {high:g}"
            if low is not None and high is not None
            else (f">= {low:g}" if low is not None else f"<= {high:g}")
        )
        raise InvalidInputError(f"{what} must be {span}, got {number!r}.")
    return number


def optional_number(
    value: Any, what: str, *, low: float | None = None, high: float | None = None
) -> float | None:
    """:func:`check_number`, or None."""
    return None if value is None else check_number(value, what, low=low, high=high)


def check_count(
    value: Any, what: str, *, low: int = 0, high: int = MAX_COUNT, error: Error = InvalidInputError
) -> int:
    """A whole number (not a bool, not a float) between ``low`` and ``high``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise error(f"{what} must be an int, got {type(value).__name__}.")
    number = int(value)
    if not low <= number <= high:
        if high != MAX_COUNT:
            span = f"an int between {low:,} and {high:,}"
        else:
            span = "a non-negative int" if low == 0 else f"an int >= {low:,}"
        raise error(f"{what} must be {span}, got {show(number)}.")
    return number


def optional_count(value: Any, what: str, *, low: int = 0, high: int = MAX_COUNT) -> int | None:
    """:func:`check_count`, or None."""
    return None if value is None else check_count(value, what, low=low, high=high)


def check_budget(max_tokens: object, what: str = "max_tokens") -> int:
    """A token budget: a non-negative int (bools are refused, 0 is valid)."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise InvalidBudgetError(
            f"{what} must be an int number of tokens, got {type(max_tokens).__name__}."
        )
    if max_tokens < 0:
        raise InvalidBudgetError(f"{what} must be >= 0, got {max_tokens}.")
    if max_tokens > MAX_COUNT:
        raise InvalidBudgetError(f"{what} must be at most {MAX_COUNT:,} tokens.")
    return max_tokens


def check_config(value: Any) -> Any:
    """A ``MemoryConfig`` given as ``config=`` (InvalidInputError for anything else); the
    configuration module (pydantic) is imported only when one is given."""
    from harombe_core.config import MemoryConfig

    if not isinstance(value, MemoryConfig):
        raise InvalidInputError(
            f"config must be a MemoryConfig, got {type(value).__name__}; build one "
            "with harombe_core.config.load_config(path_or_dict)."
        )
    return value


def check_flag(value: Any, what: str) -> bool:
    """A yes/no argument: a real bool, so that ``"no"`` or ``0.0`` is not silently taken."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{what} must be True or False, got {show(value)}.")
    return value


# roles -----------------------------------------------------------------------------------------
#: The roles a message may have (:mod:`harombe_core.models` re-exports it with ROLES).
Role = Literal["user", "assistant", "system", "tool"]


def check_roles(value: Any) -> tuple[str, ...] | None:
    """A role filter: None (every role) or a non-empty list of role names."""
    if value is None:
        return None
    known = get_args(Role)
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidInputError(
            f"roles must be a list of role names such as ['user'], got {show(value)}; "
            f"the roles are {', '.join(known)}."
        )
    roles = tuple(value)
    if not roles:
        raise InvalidInputError(
            "roles is empty, which would match nothing; pass None for every role."
        )
    unknown = [r for r in roles if not isinstance(r, str) or r not in known]
    if unknown:
        raise InvalidInputError(
            f"unknown role {show(unknown[0])} in roles; use {', '.join(known)}."
        )
    return tuple(dict.fromkeys(roles))


# JSON ------------------------------------------------------------------------------------------
def _json_walk(
    value: Any, limit: int, depth_limit: int, *, strict: bool = True, nul: bool = True
) -> tuple[str | None, int]:
    """(why ``value`` would not come back from the store as itself, its size so far).

    Stricter than ``json.dumps``, which silently turns tuples into lists and int keys into str
    keys: a read must return exactly what was saved. Iterative, so no nesting depth can
    overflow the stack, and it stops as soon as the size passes ``limit``. The size is the
    JSON text's length, exact for plain text and near it where strings need escapes.
    ``strict=False`` only measures (size and depth), for values a serialiser converts (tuples,
    NaN, datetimes), leaving what it refuses to it.
    """
    size = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack and size <= limit:
        item, depth = stack.pop()
        if item is None or isinstance(item, bool):
            size += 5
        elif isinstance(item, str):
            size += len(item) + 3  # quotes and a separator
            if not nul and "\x00" in item:
                return "a string contains a NUL byte (\\x00), which PostgreSQL cannot read", size
            if strict and size <= limit and not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError as exc:
                    return f"a string is not valid Unicode ({exc.reason})", size
        elif isinstance(item, int):
            digits = int(item.bit_length() * 0.30103) + 1
            if digits > _MAX_INT_DIGITS:
                return f"an integer has more than {_MAX_INT_DIGITS:,} digits", size
            size += digits + 2
        elif isinstance(item, float):
            if strict and not math.isfinite(item):
                return f"{item!r} is not a JSON number", size
            size += 24
        elif depth >= depth_limit and isinstance(item, (list, tuple, Mapping)):
            return f"it is nested more than {depth_limit} levels deep", size
        elif isinstance(item, list) or (not strict and isinstance(item, tuple)):
            size += len(item) + 2
            if size <= limit:
                stack.extend((x, depth + 1) for x in item)
        elif isinstance(item, dict) or (not strict and isinstance(item, Mapping)):
            size += 2 * len(item) + 2
            if size > limit:
                break
            for key, child in item.items():
                if strict and not isinstance(key, str):
                    return f"dict key {show(key)} is not a str (keys must be strings)", size
                stack.append((key, depth + 1))
                stack.append((child, depth + 1))
        elif strict:
            return f"{type(item).__name__} is not a JSON type", size
        else:
            size += 24  # a date, a UUID...: as the serialiser writes it, about this long
    return None, size


def check_json(
    value: Any,
    what: str,
    *,
    limit: int,
    field: str,
    error: Error = InvalidInputError,
    strict: bool = True,
    nul: bool = True,
) -> None:
    """``value`` is JSON that reads back as itself, within ``limit`` characters and the depth
    limit (``json_depth``); refused otherwise, before anything is done with it. With
    ``strict=False`` only the size and the depth are checked (for a value a serialiser will
    convert, such as LangGraph's store values)."""
    problem, size = _json_walk(value, limit, current_limits().json_depth, strict=strict, nul=nul)
    if problem is not None:
        raise error(
            f"{what} must be JSON (str, int, float, bool, None, list, dict with str keys; no "
            f"NaN/inf, no tuples): {problem}. Convert the value before saving it."
        )
    if size > limit:
        _raise_limit(
            error,
            what,
            None,
            limit,
            field,
            "Store large data elsewhere and keep a reference in it",
        )


def check_mapping(
    value: Any,
    what: str,
    *,
    limit: int,
    field: str,
    error: Error = InvalidInputError,
    nul: bool = True,
) -> dict[str, Any]:
    """A JSON object (metadata): a dict with str keys, None meaning empty (see check_json).
    ``nul=False`` also refuses a NUL byte in any string, for a value PostgreSQL reads as jsonb
    (a message's metadata), so both backends store the same values."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise error(f"{what} must be a dict, got {type(value).__name__}.")
    data = dict(value)
    check_json(data, what, limit=limit, field=field, error=error, nul=nul)
    return data


def check_list(
    value: Any,
    what: str,
    *,
    of: str,
    single: tuple[type, ...] = (),
    error: Error = InvalidInputError,
    hint: str = "",
) -> list[Any]:
    """The items of a list argument. A str, bytes, dict or one of ``single`` (the item type,
    which may itself be iterable) is refused rather than iterated: it is one item, not a list."""
    if isinstance(value, (str, bytes, Mapping, *single)) or not isinstance(value, Iterable):
        raise error(
            f"{what} takes a list of {of}, got {type(value).__name__}"
            + (f"; {hint}." if hint else ".")
        )
    return list(value)


def check_options(value: Any, known: frozenset[str] | None, what: str) -> dict[str, Any]:
    """A dict of keyword options (None meaning none) whose names are all in ``known`` (any
    str names when ``known`` is None)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{what} must be a dict, got {type(value).__name__}.")
    if known is None:
        known = frozenset(name for name in value if isinstance(name, str))
    unknown = sorted(show(name) for name in set(value) - known)
    if unknown:
        raise InvalidInputError(
            f"unknown name {unknown[0]} in {what}; use {', '.join(sorted(known))}."
        )
    return dict(value)


# keyword arguments -----------------------------------------------------------------------------
def known_arguments(owner: str, known: Iterable[str], given: Iterable[str]) -> None:
    """A misspelt keyword is an error that names the nearest spelling: for an adapter built on
    a pydantic model (LlamaIndex's components ignore unknown fields) it would otherwise be a
    setting silently dropped (``token_limt=500`` left the default limit in place), and for a
    plain class Python's own TypeError names the wrong word but not the right one."""
    import difflib

    names = sorted(set(known))
    unknown = sorted(set(given) - set(names))
    if not unknown:
        return
    close = difflib.get_close_matches(unknown[0], names, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"its arguments: {', '.join(names)}."
    if not close and owner != "MemoryManager" and unknown[0] in _CHECKED.get("MemoryManager", ()):
        # A component that opens its own manager from a path takes none of the manager's
        # settings (HarombeMemory.from_defaults(user_memory=True)): they go on the manager.
        hint = (
            f"{unknown[0]} is a setting of the MemoryManager: open one with "
            f"MemoryManager(path, {unknown[0]}=...) and pass it as manager=."
        )
    raise UnknownArgumentError(f"{owner} got an unknown argument {unknown[0]!r}; {hint}")


#: The keywords of each class checked by :func:`keywords_checked`, by its name.
_CHECKED: dict[str, frozenset[str]] = {}


_P = ParamSpec("_P")
_R = TypeVar("_R")


def keywords_checked(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """``function`` refusing a keyword none of its parameters has with
    :class:`UnknownArgumentError` ("did you mean 'embedding'?") before it runs.

    For the constructors a user types first (``MemoryManager(..., embeding=...)``,
    ``HarombeChatMessageHistory(m, sesion_id=...)``). The signature, name and docstring are
    ``function``'s own (editors and ``help()`` show them); a function that takes ``**kwargs``
    is returned as it is, since every keyword is then one of its arguments.
    """
    parameters = inspect.signature(function).parameters.values()
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
        return function
    names = frozenset(
        parameter.name
        for parameter in parameters
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    )
    owner = function.__qualname__.rpartition("<locals>.")[2].removesuffix(".__init__")
    _CHECKED[owner] = names - {"self"}

    @functools.wraps(function)
    def checked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not names.issuperset(kwargs):
            known_arguments(owner, names - {"self"}, kwargs)
        return function(*args, **kwargs)

    return checked


# framework models ------------------------------------------------------------------------------


@contextmanager
def pydantic_errors(owner: str) -> Iterator[None]:
    """Report a pydantic validation failure (an adapter's fields) as InvalidInputError."""
    from pydantic import ValidationError

    try:
        yield
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidInputError(f"{owner}: {problems}.") from None
