"""Test doubles shipped with the library, so users can test their own code against ours.

Nothing here needs a model, a network or a vector database: only numpy. ``FakeEmbedder`` is
deterministic across processes and machines (it hashes with blake2b, not Python's salted
``hash``), so expected rankings can be written into tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from harombe_core.embeddings.base import BaseEmbedder, FloatArray
from harombe_core.errors import EmbeddingError, InvalidInputError
from harombe_core.folding import SummaryFolder
from harombe_core.vectors.memory import InMemoryVectorIndex

__all__ = ["FailingEmbedder", "FakeEmbedder", "InMemoryVectorIndex", "hold_background"]

_WORD = re.compile(r"\w+", re.UNICODE)


def _bucket(feature: str, dimension: int) -> tuple[int, float]:
    """Index and sign of a feature: signed hashing keeps unrelated features near orthogonal."""
    digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dimension, 1.0 if (value >> 63) & 1 else -1.0


class FakeEmbedder(BaseEmbedder):
    """A deterministic hashing embedder: bag of words plus a little character n-gram.

    Texts that share words are close; paraphrases that share word stems ("embed",
    "embedding") partly overlap through the character trigrams; unrelated texts are near
    orthogonal. Empty text (or text with no word characters) gives a zero vector, which is
    the honest answer for "no content". ``calls`` counts batches actually embedded, so tests
    can assert on caching and batching.

    ``ngram_weight`` scales the trigram features against the whole-word ones (0 disables them).
    """

    def __init__(self, dimension: int = 256, *, ngram_weight: float = 0.35, ngram: int = 3) -> None:
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 8:
            raise InvalidInputError(f"dimension must be an int >= 8, got {dimension!r}")
        if ngram_weight < 0:
            raise InvalidInputError(f"ngram_weight must be >= 0, got {ngram_weight!r}")
        self._dimension = dimension
        self._name = f"harombe/fake-hashing-{dimension}-w{ngram_weight:g}-n{ngram}"
        self.ngram_weight = float(ngram_weight)
        self.ngram = int(ngram)
        self.calls = 0
        self.texts_embedded = 0

    def _vector(self, text: str) -> FloatArray:
        vector = np.zeros(self._dimension, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            index, sign = _bucket("w:" + word, self._dimension)
            vector[index] += sign
            if self.ngram_weight and len(word) >= self.ngram:
                padded = f"<{word}>"
                grams = [padded[i : i + self.ngram] for i in range(len(padded) - self.ngram + 1)]
                share = self.ngram_weight / len(grams) * 2.0
                for gram in grams:
                    index, sign = _bucket("g:" + gram, self._dimension)
                    vector[index] += sign * share
        return vector

    def _embed_batch(self, texts: list[str]) -> FloatArray:
        self.calls += 1
        self.texts_embedded += len(texts)
        return np.stack([self._vector(t) for t in texts])


class FailingEmbedder(BaseEmbedder):
    """Raises :class:`EmbeddingError` on every call (or after ``fail_after`` good batches).

    For testing that a caller survives an embedding outage: messages still stored, the error
    surfaced, the work retried later.
    """

    def __init__(self, dimension: int = 256, *, fail_after: int = 0, message: str = "") -> None:
        self._dimension = dimension
        self._name = f"harombe/failing-{dimension}"
        self.fail_after = fail_after
        self.message = message or "embedding backend unavailable (FailingEmbedder)"
        self._fake = FakeEmbedder(dimension)
        self.calls = 0

    def _embed_batch(self, texts: list[str]) -> FloatArray:
        self.calls += 1
        if self.calls > self.fail_after:
            raise EmbeddingError(self.message)
        return self._fake._embed_batch(texts)

    async def aembed(self, texts: Sequence[str]) -> FloatArray:
        await asyncio.sleep(0)
        return self.embed(texts)


@contextmanager
def hold_background(timeout: float = 60.0) -> Iterator[None]:
    """Keep the process's background worker busy until the block ends, so every job handed
    to it meanwhile (a checkpointed thread's session, keyword indexing, embedding, a summary
    backlog, fact extraction) waits: a test can then show, without depending on timing, what
    a read sees before the background has run (it must see its own writes) and what
    ``flush()`` does. ``timeout`` bounds the wait for the worker to take the holding job (it
    finishes its job in hand first)."""
    entered, gate = threading.Event(), threading.Event()

    def hold(_key: str, _until: int) -> bool:
        entered.set()
        gate.wait()
        return False

    blocker = SummaryFolder(hold, priority=1 << 30)
    blocker.request("hold", 0)
    if not entered.wait(timeout):
        blocker.close()
        raise TimeoutError(f"the background worker did not take the holding job in {timeout}s")
    try:
        yield
    finally:
        gate.set()
        blocker.flush()
        blocker.close()
