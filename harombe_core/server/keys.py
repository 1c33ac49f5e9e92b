"""API keys of ``harombe serve``: made once, kept only as a hash, resolved to a scope.

A key is ``hk_`` followed by 32 random bytes (URL-safe base64), printed once when it is made
(``harombe keys create --user ann``) and never stored: the ``api_keys`` table (schema migration
7 on both backends) keeps its SHA-256, which is enough for a secret of that entropy
(a slow password hash protects guessable passwords, not random keys) and lets a request be
authenticated with one indexed lookup. A key belongs to one user, whose memory is all it
reaches, or is an admin key (no user) that reaches every user's. Keys live in the same database
as the memory they open, so every ``harombe serve`` process on one SQLite file or one PostgreSQL
database accepts the same keys, and a revoked key stops working in all of them at once.

A key's public id (what ``harombe keys list`` shows, ``harombe keys revoke`` takes and
:attr:`Scope.key_id` carries) is random and unrelated to the key (:func:`new_key_id`), so a
listing, a log line or a screenshot of one gives away no bit of the key.

Each operation is one SQL body (:mod:`harombe_core.store.sql_body`), the same on both backends.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

from harombe_core.errors import HarombeError, InvalidInputError
from harombe_core.store.sql_body import Body, SqlRunner, sql_runner
from harombe_core.validate import check_id

__all__ = [
    "KEY_PREFIX",
    "AccessDeniedError",
    "ApiKey",
    "NotAuthenticatedError",
    "Scope",
    "aresolve_key",
    "create_key",
    "hash_key",
    "list_keys",
    "new_key_id",
    "resolve_key",
    "revoke_key",
]

#: What every key starts with, so a leaked one is recognisable (secret scanners, logs).
KEY_PREFIX = "hk_"


class NotAuthenticatedError(HarombeError):
    """A request without a live API key (HTTP 401): none sent, unknown, or revoked."""


class AccessDeniedError(HarombeError):
    """A live key asked for what its scope does not allow (HTTP 403): another user's memory, or
    an admin-only operation."""


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose memory a request may reach: one user's (``user_id``), or everyone's (admin)."""

    user_id: str | None
    admin: bool = False
    key_id: str | None = None

    def user_for(self, requested: str | None) -> str | None:
        """The ``user_id`` to pass the manager for a request naming ``requested``.

        A user key always acts as its own user, whatever the request names (naming another user
        is refused, so a client learns of its mistake rather than reading its own memory
        instead). An admin acts as the user the request names, or as the application itself
        (every user) when it names none.
        """
        if self.admin:
            return requested
        if requested is not None and requested != self.user_id:
            raise AccessDeniedError(
                f"this API key belongs to user {self.user_id!r} and cannot act for user "
                f"{requested!r}; use that user's key, or an admin key."
            )
        return self.user_id


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key's record, as ``harombe keys list`` shows it (never the key itself)."""

    id: str
    user_id: str | None
    admin: bool
    label: str | None
    created_at: float
    revoked: bool


def new_key_id() -> str:
    """A key's public id: ``k`` and 16 random hex digits, drawn apart from the key (schema
    migration 16 gives keys made before the same form)."""
    return "k" + secrets.token_hex(8)


def hash_key(key: str) -> str:
    """The stored form of ``key``: its SHA-256, in hex."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def create_key(
    store: Any, *, user_id: str | None = None, admin: bool = False, label: str | None = None
) -> tuple[str, ApiKey]:
    """Make a key for ``user_id`` (or an admin key) in ``store``; returns the key (show it once:
    it cannot be recovered) and its record."""
    if admin == (user_id is not None):
        raise InvalidInputError(
            "a key is either one user's (pass --user USER) or an admin key (pass --admin), "
            "not both or neither."
        )
    if user_id is not None:
        check_id(user_id, "user_id")
    if label is not None and (not isinstance(label, str) or len(label) > 200):
        raise InvalidInputError("a key's label must be a string of at most 200 characters.")
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    record = ApiKey(
        id=new_key_id(),
        user_id=user_id,
        admin=admin,
        label=label,
        created_at=time.time(),
        revoked=False,
    )
    runner = sql_runner(store)

    def body() -> Body[None]:
        yield runner.step(
            "INSERT INTO api_keys (id, key_hash, user_id, admin, label, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                record.id,
                hash_key(secret),
                user_id,
                int(admin),
                label,
                int(record.created_at * 1_000_000),
            ),
        )

    runner.run(body, exactly_once=True)
    return secret, record


def _record(row: Any) -> ApiKey:
    key_id, user_id, admin, label, created_at, revoked_at = row
    return ApiKey(
        key_id, user_id, bool(admin), label, created_at / 1_000_000, revoked_at is not None
    )


def list_keys(store: Any, *, user_id: str | None = None) -> list[ApiKey]:
    """Every key's record (of ``user_id`` only, when given), oldest first."""
    runner = sql_runner(store)
    where, params = ("WHERE user_id = ?", (user_id,)) if user_id is not None else ("", ())

    def body() -> Body[list[Any]]:
        result = yield runner.step(
            "SELECT id, user_id, admin, label, created_at, revoked_at FROM api_keys "
            f"{where} ORDER BY created_at, id",
            params,
        )
        return list(result.rows)

    return [_record(row) for row in runner.read(body)]


def revoke_key(store: Any, key_id: str) -> bool:
    """Stop the key whose public id (as listed) is ``key_id``; True if it was live. The
    record stays, so a listing shows the key existed."""
    check_id(key_id, "key id")
    runner = sql_runner(store)

    def body() -> Body[int]:
        result = yield runner.step(
            "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            (int(time.time() * 1_000_000), key_id),
        )
        return result.rowcount

    return bool(runner.run(body, exactly_once=True))


def _lookup(runner: SqlRunner, digest: str) -> Body[list[Any]]:
    result = yield runner.step(
        "SELECT id, user_id, admin FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL",
        (digest,),
    )
    return list(result.rows)


def _scope(rows: list[Any]) -> Scope | None:
    if not rows:
        return None
    key_id, user_id, admin = rows[0]
    return Scope(user_id=user_id, admin=bool(admin), key_id=key_id)


def _well_formed(key: str) -> bool:
    """Whether ``key`` can be a key at all (anything else is refused without a lookup)."""
    return isinstance(key, str) and key.startswith(KEY_PREFIX) and len(key) <= 200


def resolve_key(store: Any, key: str) -> Scope | None:
    """The scope of a live ``key``, or None for an unknown or revoked one."""
    if not _well_formed(key):
        return None
    runner = sql_runner(store)
    return _scope(runner.read(lambda: _lookup(runner, hash_key(key))))


async def aresolve_key(store: Any, key: str) -> Scope | None:
    """:func:`resolve_key` without blocking the event loop."""
    if not _well_formed(key):
        return None
    runner = sql_runner(store)
    return _scope(await runner.aread(lambda: _lookup(runner, hash_key(key))))
