"""Deterministic interleavings: another writer's whole call, run at the moment a concurrent
task could commit it (just before this call's transaction or write begins).

Used by the tests of calls that must be one step (a set, a delete by position, a threaded
append): written as a read and then a write, the other call lands between the two.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harombe_core.manager import MemoryManager


class Interloper:
    """Runs ``other`` once, just before ``manager``'s next transaction (``atomic``) or write
    operation begins, whichever the code under test reaches first."""

    def __init__(self, manager: MemoryManager, other: Callable[[], Any]) -> None:
        self.other: Callable[[], Any] | None = other
        self.atomic, self.run = manager.atomic, manager.store.run

    def install(self, monkeypatch: pytest.MonkeyPatch, manager: MemoryManager) -> None:
        monkeypatch.setattr(manager, "atomic", self.in_atomic)
        monkeypatch.setattr(manager.store, "run", self.in_run)

    def fire(self) -> None:
        if self.other is not None:
            other, self.other = self.other, None
            other()

    def in_atomic(self, fn: Callable[[], Any]) -> Any:
        self.fire()
        return self.atomic(fn)

    def in_run(self, op: Any) -> Any:
        if op.write:
            self.fire()
        return self.run(op)


def interleave(
    monkeypatch: pytest.MonkeyPatch, manager: MemoryManager, other: Callable[[], Any]
) -> None:
    """Make ``other`` commit just before the next transaction or write on ``manager``."""
    Interloper(manager, other).install(monkeypatch, manager)
