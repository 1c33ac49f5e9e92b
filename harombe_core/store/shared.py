"""Objects shared by every opener of one resource in this process, reference-counted.

A program opens one database from many places: managers, LangChain histories and retrievers,
LlamaIndex chat stores and memory blocks, the CLI. They must not each hold their own copy of
what belongs to the file (its SQLite connections; the semantic memory built beside it): copies
waste memory and threads, and two copies of one resource disagree about who is still using it.

:class:`SharedRegistry` gives each opener a :class:`Lease` on one value per key. The first
opener creates the value, later ones get the same object, and the value is closed when the last
lease is released. Releasing a lease twice is a no-op, so an adapter's ``close()`` can be called
as often as a framework likes. Openers of one key wait for each other while the value is being
created or closed (the value is created and closed at most once at a time); openers of other
keys never wait.

After ``fork()`` the child gets fresh locks: a lock held at that moment by another thread,
which does not exist in the child, would otherwise never be released there. What the values
themselves must do across a fork is their owner's business (see
:mod:`harombe_core.store.sqlite_file`).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["Lease", "SharedRegistry"]

V = TypeVar("V")


class _Entry(Generic[V]):
    """One key's value, its lease count and the lock that serialises its creation and close."""

    __slots__ = ("lock", "refs", "value", "waiters")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.value: V | None = None
        self.refs = 0
        self.waiters = 0  # threads between finding this entry and taking its lock


class Lease(Generic[V]):
    """One opener's hold on a shared value; :meth:`release` it exactly when that opener closes."""

    __slots__ = ("_entry", "_key", "_registry", "_released", "value")

    def __init__(
        self, registry: SharedRegistry[V], key: Hashable, entry: _Entry[V], value: V
    ) -> None:
        self._registry = registry
        self._key = key
        self._entry = entry
        self._released = False
        self.value = value

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Give the value back; the last lease closes it. A second call does nothing."""
        self._registry._release(self)


class SharedRegistry(Generic[V]):
    """One value per key for the whole process, created on first use, closed after last use.

    ``close`` is called with the value when its last lease is released (and not otherwise).
    """

    def __init__(self, close: Callable[[V], None]) -> None:
        self._close = close
        self._lock = threading.Lock()
        self._entries: dict[Hashable, _Entry[V]] = {}
        _REGISTRIES.add(self)

    def acquire(
        self,
        key: Hashable,
        create: Callable[[], V],
        check: Callable[[V], None] | None = None,
    ) -> Lease[V]:
        """A lease on ``key``'s value, made by ``create()`` if no opener holds one.

        ``check(value)`` runs for every later opener before it gets its lease; an exception
        from it (or from ``create``) reaches the caller, and no lease is taken.
        """
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry()
            entry.waiters += 1
        try:
            with entry.lock:
                with self._lock:
                    entry.waiters -= 1
                if entry.value is None:
                    entry.value = create()
                elif check is not None:
                    check(entry.value)
                entry.refs += 1
                return Lease(self, key, entry, entry.value)
        except BaseException:
            self._forget_if_unused(key, entry)
            raise

    def _release(self, lease: Lease[V]) -> None:
        entry = lease._entry
        with entry.lock:
            if lease._released:
                return
            lease._released = True
            entry.refs -= 1
            if entry.refs > 0:
                return
            value, entry.value = entry.value, None
            try:
                if value is not None:
                    self._close(value)
            finally:
                self._forget_if_unused(lease._key, entry)

    def _forget_if_unused(self, key: Hashable, entry: _Entry[V]) -> None:
        with self._lock:
            unused = entry.refs == 0 and entry.value is None and entry.waiters == 0
            if unused and self._entries.get(key) is entry:
                del self._entries[key]

    def values(self) -> list[V]:
        """The values held right now (a snapshot)."""
        with self._lock:
            return [e.value for e in self._entries.values() if e.value is not None]

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for e in self._entries.values() if e.value is not None)

    def _after_fork_in_child(self) -> None:
        # Only the forking thread survives: nobody else can be waiting or holding a lock.
        self._lock = threading.Lock()
        for entry in self._entries.values():
            entry.lock = threading.Lock()
            entry.waiters = 0


_REGISTRIES: weakref.WeakSet[SharedRegistry[Any]] = weakref.WeakSet()


def _reset_registries_in_child() -> None:
    for registry in list(_REGISTRIES):
        registry._after_fork_in_child()


os.register_at_fork(after_in_child=_reset_registries_in_child)
