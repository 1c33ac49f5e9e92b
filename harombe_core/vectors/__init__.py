"""Vector indexes: derived, rebuildable copies of message embeddings.

Nothing heavy is imported here; ChromaDB loads only when a :class:`ChromaVectorIndex` is opened.
"""

from __future__ import annotations

from harombe_core.vectors.base import VectorIndex, VectorMatch, build_where
from harombe_core.vectors.memory import InMemoryVectorIndex

__all__ = ["InMemoryVectorIndex", "VectorIndex", "VectorMatch", "build_where"]
