"""Who closes the database: a LlamaIndex piece either opened its MemoryManager or shares one.

A memory block, a chat store or a retriever built from a location opens its own manager and
closes it with :meth:`close`; one given ``manager=`` shares it with whoever made it, so closing
the piece must leave it open. The rule lives here once for all of them.
"""

from __future__ import annotations

import os
from typing import Any

from harombe_core import MemoryManager
from llamaindex_harombe.memory import open_manager

__all__ = ["OwnedManager"]


class OwnedManager:
    """Mixin: the ``manager`` property and a ``close`` that closes only a manager opened here.

    Pydantic models declare ``_manager`` and ``_owns_manager`` as private attributes; other
    classes get them from :meth:`_take_manager`.
    """

    _manager: MemoryManager
    _owns_manager: bool

    def _take_manager(
        self,
        manager: MemoryManager | None,
        storage_path: str | os.PathLike[str],
        embedding: Any,
        vector_store: Any,
    ) -> None:
        """Use ``manager``, or open one on ``storage_path`` that :meth:`close` will close."""
        self._owns_manager = manager is None
        self._manager = manager or open_manager(storage_path, embedding, vector_store)

    @property
    def manager(self) -> MemoryManager:
        """The MemoryManager underneath."""
        return self._manager

    def close(self) -> None:
        """Close the database if this object opened it (a shared manager stays open)."""
        if self._owns_manager:
            self._manager.close()
