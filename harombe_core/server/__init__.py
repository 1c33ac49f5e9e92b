"""``harombe serve``: memory as a service (the ``server`` extra).

One ASGI app (:func:`create_app`) serves a JSON API over the public MemoryManager, an MCP
server at ``/mcp`` and a web inspector at ``/``, every request scoped to the user of its API
key; :class:`HarombeClient` / :class:`AsyncHarombeClient` talk to it from Python. Names load
lazily, so importing this package does not import FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harombe_core.lazy import lazy_attributes as _lazy_attributes

if TYPE_CHECKING:
    from harombe_core.server.api import create_app
    from harombe_core.server.client import AsyncHarombeClient, HarombeClient, HarombeServerError
    from harombe_core.server.keys import Scope, create_key

_LAZY: dict[str, str] = {
    "create_app": "harombe_core.server.api",
    "HarombeClient": "harombe_core.server.client",
    "AsyncHarombeClient": "harombe_core.server.client",
    "HarombeServerError": "harombe_core.server.client",
    "Scope": "harombe_core.server.keys",
    "create_key": "harombe_core.server.keys",
}

__all__ = [
    "AsyncHarombeClient",
    "HarombeClient",
    "HarombeServerError",
    "Scope",
    "create_app",
    "create_key",
]

__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, __all__)
