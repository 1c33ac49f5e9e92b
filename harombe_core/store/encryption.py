"""Encryption at rest for the SQLite store, through SQLCipher (extra ``encryption``).

``sqlcipher3`` is a drop-in copy of the ``sqlite3`` module linked against SQLCipher, but its
exception classes are its own. The SQLite store classifies errors by the standard ``sqlite3``
classes (busy, read-only, disk full), so the connection returned here re-raises each SQLCipher
error as the ``sqlite3`` class of the same name: every retry and typed error of the store works
unchanged on an encrypted file.

The key comes from ``encryption_key=`` (or the ``memory.encryption_key`` config), else from the
``HAROMBE_DB_KEY`` environment variable. A wrong key is reported as
:class:`~harombe_core.errors.EncryptionKeyError` before anything is written (the open-time check
in :mod:`harombe_core.store.sqlite_checks` reads the file through this module).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from typing import Any

from harombe_core.errors import EncryptionKeyError, Fix, InvalidInputError, MissingExtraError

__all__ = ["KEY_ENV", "check_key", "connect", "resolve_key"]

KEY_ENV = "HAROMBE_DB_KEY"


def check_key(key: object, *, from_env: bool = False) -> str | None:
    """``key`` if it can encrypt a database (None: no encryption was asked for).

    An empty key is refused, never read as "no encryption": ``os.environ.get(K, "")`` or an
    unset secret in a deployment gives ``""``, and treating that as no key would write the
    user's messages in plain text while they believe them encrypted. Raises
    EncryptionKeyError for an empty key, InvalidInputError for a non-str or one with NUL.
    """
    if key is None:
        return None
    if not isinstance(key, str) or "\x00" in key:
        raise InvalidInputError(
            f"encryption_key must be a non-empty str without NUL bytes, got {type(key).__name__}."
        )
    if key == "":
        where = (
            f"the environment variable {KEY_ENV} is set but empty"
            if from_env
            else "encryption_key is the empty string"
        )
        raise EncryptionKeyError(
            f"{where}: an empty key cannot encrypt anything, and harombe will not write an "
            "unencrypted database in its place.",
            fix=Fix(
                api=f"Pass the real key (check that the variable or secret you read it from is "
                f"set), or pass encryption_key=None and unset {KEY_ENV} for an unencrypted "
                "database.",
                cli=f"Set {KEY_ENV} to the real key, or unset it (`unset {KEY_ENV}`) for an "
                "unencrypted database.",
            ),
        )
    return key


def resolve_key(explicit: str | None) -> str | None:
    """The key to use: the explicit one, else ``HAROMBE_DB_KEY``, else None (no encryption).

    An empty key, given or in the environment, raises EncryptionKeyError (see
    :func:`check_key`)."""
    if explicit is not None:
        return check_key(explicit)
    return check_key(os.environ.get(KEY_ENV), from_env=True)


def _module() -> Any:
    try:
        from sqlcipher3 import dbapi2
    except ImportError as exc:
        raise MissingExtraError("An encrypted database", "encryption", "sqlcipher3") from exc
    return dbapi2


def _translate(exc: BaseException) -> BaseException:
    cls = getattr(sqlite3, type(exc).__name__, sqlite3.Error)
    if not (isinstance(cls, type) and issubclass(cls, sqlite3.Error)):
        cls = sqlite3.Error
    return cls(*exc.args)


class _Cursor:
    def __init__(self, cursor: Any, errors: tuple[type[BaseException], ...]) -> None:
        self._cursor = cursor
        self._errors = errors

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._cursor, name)(*args)
        except self._errors as exc:
            raise _translate(exc) from exc

    def fetchone(self) -> Any:
        return self._call("fetchone")

    def fetchall(self) -> list[Any]:
        return self._call("fetchall")  # type: ignore[no-any-return]

    def fetchmany(self, size: int = 1) -> list[Any]:
        return self._call("fetchmany", size)  # type: ignore[no-any-return]

    def execute(self, sql: str, params: Any = ()) -> _Cursor:
        self._call("execute", sql, params)
        return self

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())

    def __getattr__(self, name: str) -> Any:  # rowcount, lastrowid, description, close
        return getattr(self._cursor, name)


class _Connection:
    """A SQLCipher connection that raises the standard ``sqlite3`` exception classes."""

    def __init__(self, conn: Any, errors: tuple[type[BaseException], ...]) -> None:
        self._conn = conn
        self._errors = errors

    def execute(self, sql: str, params: Any = ()) -> _Cursor:
        try:
            return _Cursor(self._conn.execute(sql, params), self._errors)
        except self._errors as exc:
            raise _translate(exc) from exc

    def executemany(self, sql: str, rows: Any) -> _Cursor:
        try:
            return _Cursor(self._conn.executemany(sql, rows), self._errors)
        except self._errors as exc:
            raise _translate(exc) from exc

    def cursor(self) -> _Cursor:
        return _Cursor(self._conn.cursor(), self._errors)

    def close(self) -> None:
        self._conn.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _quote(key: str) -> str:
    return "'" + key.replace("'", "''") + "'"


def connect(uri: str, key: str, *, timeout: float) -> Any:
    """Open ``uri`` with SQLCipher and apply ``key`` (before any other statement)."""
    module = _module()
    errors = (module.Error,)
    try:
        raw = module.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False, timeout=timeout
        )
        raw.execute("PRAGMA cipher_log_level = NONE")
        raw.execute(f"PRAGMA key = {_quote(key)}")
    except errors as exc:
        raise _translate(exc) from exc
    return _Connection(raw, errors)
