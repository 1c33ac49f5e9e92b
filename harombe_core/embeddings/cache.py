"""An in-memory LRU cache of embeddings of identical text, wrapping any embedder.

Chat repeats itself ("ok", "thanks!", the same question asked again, a retrieval query run on
every turn); a cache hit costs a dict look-up instead of a model call. Keys are a hash of the
text, so memory holds vectors, not long texts.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from harombe_core.embeddings.base import (
    BaseEmbedder,
    Embedder,
    FloatArray,
    check_texts,
    one_text,
    validate_vectors,
)
from harombe_core.errors import InvalidInputError

__all__ = ["CachedEmbedder"]


def _key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class CachedEmbedder(BaseEmbedder):
    """Wraps ``inner`` and remembers up to ``max_entries`` vectors, least recently used out.

    ``name`` and ``dimension`` are the inner embedder's: the cache never changes a vector, so
    an index built with or without it is the same index. Thread-safe; ``hits`` and ``misses``
    count look-ups since creation (or :meth:`clear`). ``embed_query`` is the base class's, on
    the cached :meth:`embed`.
    """

    def __init__(self, inner: Embedder, max_entries: int = 10_000) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise InvalidInputError(f"max_entries must be a positive int, got {max_entries!r}")
        self.inner = inner
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[bytes, FloatArray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every vector and reset the counters."""
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def _lookup(self, items: list[str]) -> tuple[list[FloatArray | None], list[str]]:
        """Cached rows (None where missing) and the distinct texts still to embed."""
        found: list[FloatArray | None] = []
        missing: dict[str, None] = {}
        with self._lock:
            for text in items:
                vector = self._entries.get(_key(text))
                if vector is None:
                    self.misses += 1
                    missing[text] = None
                else:
                    self.hits += 1
                    self._entries.move_to_end(_key(text))
                found.append(vector)
        return found, list(missing)

    def _store(self, texts: list[str], vectors: FloatArray) -> dict[str, FloatArray]:
        fresh: dict[str, FloatArray] = {}
        with self._lock:
            for text, vector in zip(texts, vectors, strict=True):
                row = vector.copy()
                row.setflags(write=False)  # shared between callers: nobody may mutate it
                fresh[text] = row
                self._entries[_key(text)] = row
                self._entries.move_to_end(_key(text))
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return fresh

    def _assemble(
        self, items: list[str], found: list[FloatArray | None], fresh: dict[str, FloatArray]
    ) -> FloatArray:
        out = np.empty((len(items), self.dimension), dtype=np.float32)
        for i, (text, vector) in enumerate(zip(items, found, strict=True)):
            out[i] = vector if vector is not None else fresh[text]
        return out

    def embed(self, texts: Sequence[str]) -> FloatArray:
        items = check_texts(texts)
        found, missing = self._lookup(items)
        fresh: dict[str, FloatArray] = {}
        if missing:
            vectors = validate_vectors(
                self.inner.embed(missing), len(missing), self.dimension, self.name
            )
            fresh = self._store(missing, vectors)
        return self._assemble(items, found, fresh)

    async def aembed(self, texts: Sequence[str]) -> FloatArray:
        items = check_texts(texts)
        found, missing = self._lookup(items)
        fresh: dict[str, FloatArray] = {}
        if missing:
            vectors = validate_vectors(
                await self.inner.aembed(missing), len(missing), self.dimension, self.name
            )
            fresh = self._store(missing, vectors)
        return self._assemble(items, found, fresh)

    async def aembed_query(self, text: str) -> FloatArray:
        vectors = await self.aembed([one_text(text, "aembed_query")])
        result: FloatArray = vectors[0]
        return result

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, max_entries={self.max_entries})"
