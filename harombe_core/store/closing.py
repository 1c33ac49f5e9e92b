"""The ``with`` block of everything that holds a database open.

A manager, a chat memory, a checkpointer or a local Postgres server opened for one block of
code should be closed when the block ends, an error or not. The protocol is the same for all
of them (enter gives the object itself, leaving calls its ``close()``), so it is written once
here.
"""

from __future__ import annotations

from typing import Self

__all__ = ["ClosesOnExit"]


class ClosesOnExit:
    """Mixin: ``with obj as o:`` binds ``obj`` itself and calls ``obj.close()`` on leaving.

    The class defines ``close``; it must be safe to call more than once.
    """

    def close(self) -> None:  # pragma: no cover - every user defines its own
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
