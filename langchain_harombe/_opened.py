"""``from_conn_string`` of the saver and the store: one object for ``with`` and ``async with``.

LangGraph opens its savers and stores from a connection string with ``with
SqliteSaver.from_conn_string(...)`` and, for the async classes (``AsyncSqliteSaver``,
``AsyncPostgresStore``), ``async with``. ``HarombeSaver`` and ``HarombeStore`` are sync and
async at once, so what their ``from_conn_string`` returns takes either form; the async form
opens and closes the database off the event loop (the library's one thread hop, as every
async store call takes). Their ``setup()`` has nothing to do (the database's migrations ran
when it opened) and returns :class:`Ready`, so the sync classes' ``store.setup()`` and the
async ones' ``await store.setup()`` both run unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Generic, Protocol, TypeVar

from harombe_core.integration import Flow, Work, adrive, drive

__all__ = ["Opened", "Ready"]


class _Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


class Opened(Generic[C]):
    """Opens ``make()`` on entering, closes it on leaving; ``with`` or ``async with`` (one
    flow each way, driven in place or off the event loop)."""

    def __init__(self, make: Callable[[], C]) -> None:
        self._make = make
        self._opened: C | None = None

    def _open(self) -> Flow[C]:
        opened: C = yield Work(self._make)
        self._opened = opened
        return opened

    def _close(self) -> Flow[None]:
        opened, self._opened = self._opened, None
        if opened is not None:
            yield Work(opened.close)

    def __enter__(self) -> C:
        return drive(self._open())

    def __exit__(self, *exc_info: object) -> None:
        drive(self._close())

    async def __aenter__(self) -> C:
        return await adrive(self._open())

    async def __aexit__(self, *exc_info: object) -> None:
        await adrive(self._close())


class Ready:
    """What ``setup()`` returns: nothing to wait for, whether awaited or not."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # (a generator that finishes at once)
