"""Who a request is: its API key resolved to a scope, by the one dependency every route takes.

:func:`current_scope` is a dependency of the whole app (see :mod:`harombe_core.server.api`);
``/mcp`` calls :func:`scope_for_key` itself before the MCP SDK sees a request. Errors map to
HTTP status codes here (:data:`STATUS`), for every surface alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from harombe_core import errors as err
from harombe_core.manager import MemoryManager
from harombe_core.server.keys import (
    AccessDeniedError,
    NotAuthenticatedError,
    Scope,
    aresolve_key,
)
from harombe_core.server.memory import ScopedMemory, SessionIdUnavailableError

__all__ = [
    "KEY_COOKIE",
    "LOOPBACK_HOSTS",
    "STATUS",
    "Memory",
    "ServerState",
    "bearer_key",
    "current_scope",
    "scope_for_key",
    "scoped",
    "status_of",
]

#: Hosts only this machine reaches, as ``--host`` names them.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

#: The cookie the inspector's login form sets (HttpOnly, SameSite=Strict).
KEY_COOKIE = "harombe_key"

#: HTTP status of each error class (the most specific listed ancestor wins); others are 400.
STATUS: dict[type[err.HarombeError], int] = {
    NotAuthenticatedError: 401,
    AccessDeniedError: 403,
    err.SessionOwnershipError: 403,
    SessionIdUnavailableError: 409,
    err.SessionNotFoundError: 404,
    err.FactNotFoundError: 404,
    err.InputTooLargeError: 413,
    err.InvalidInputError: 422,
    err.MissingExtraError: 501,
    err.StoreBusyError: 503,
    err.StoreUnavailableError: 503,
    err.StorageFullError: 507,
    err.StoreError: 500,
    err.EmbeddingError: 502,
    err.SummarizationError: 502,
}


def status_of(error: err.HarombeError) -> int:
    """The status code of ``error``: that of the nearest class of :data:`STATUS` in its MRO."""
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 400


@dataclass
class ServerState:
    """What every request of one app shares: the manager, and the scope of ``--no-auth``."""

    manager: MemoryManager
    open_scope: Scope | None = None


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.harombe
    return state


def bearer_key(headers: Any) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header, if there is one."""
    value = headers.get("authorization")
    if not value:
        return None
    kind, _, key = value.partition(" ")
    return key.strip() if kind.lower() == "bearer" and key.strip() else None


async def scope_for_key(state: ServerState, key: str | None) -> Scope:
    """The scope of ``key`` (or of ``--no-auth``); NotAuthenticatedError for none or a bad one."""
    if state.open_scope is not None:
        return state.open_scope
    if key is None:
        raise NotAuthenticatedError(
            "no API key: send it as `Authorization: Bearer <key>`; make one with "
            "`harombe keys create --user USER`."
        )
    scope = await aresolve_key(state.manager.store, key)
    if scope is None:
        raise NotAuthenticatedError(
            "this API key is unknown or revoked; `harombe keys list` shows the live ones."
        )
    return scope


async def current_scope(request: Request) -> Scope:
    """The dependency of every route: the request's key resolved to its scope.

    The inspector's key cookie counts only for GET (reads), so a page on another site cannot
    make a browser write with it; the JSON API's clients send the header.
    """
    key = bearer_key(request.headers)
    if key is None and request.method == "GET":
        key = request.cookies.get(KEY_COOKIE)
    scope = await scope_for_key(_state(request), key)
    request.state.scope = scope
    return scope


def scoped(request: Request, scope: Annotated[Scope, Depends(current_scope)]) -> ScopedMemory:
    """The memory as this request's key may use it."""
    return ScopedMemory(_state(request).manager, scope)


Memory = Annotated[ScopedMemory, Depends(scoped)]
