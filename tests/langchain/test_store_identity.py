"""A store's vectors record the identity of the model that made them, not only its name.

Two embedders of one name and dimension (two lambdas of one module, a model swapped behind a
name) made vectors of different spaces; the identity (name, dimension, a fingerprint of the
embedding of a fixed probe text) tells them apart, so old items are not scored against a new
model's queries until ``store.reindex()``. Vectors recorded under the bare name, before
identities, keep being ranked as they were, and ``reindex`` records them anew.
"""

from __future__ import annotations

import asyncio
from typing import Any

from harombe_core.embeddings import aidentity, identity
from harombe_core.manager import MemoryManager
from harombe_core.testing import FakeEmbedder
from langchain_harombe import HarombeStore


def _fake(text: str, shift: int) -> list[float]:
    """A 3-d vector from the text's letters; ``shift`` rotates the axes (another model)."""
    counts = [float(sum(ord(c) % 3 == i for c in text)) + 0.1 for i in range(3)]
    return counts[shift:] + counts[:shift]


def test_two_embedders_of_one_name_are_told_apart(backend_manager: MemoryManager) -> None:
    old = lambda texts: [_fake(t, 0) for t in texts]  # noqa: E731  (two lambdas: one name)
    new = lambda texts: [_fake(t, 1) for t in texts]  # noqa: E731
    before = HarombeStore(backend_manager, index={"embed": old, "dims": 3, "fields": ["text"]})
    after = HarombeStore(backend_manager, index={"embed": new, "dims": 3, "fields": ["text"]})
    assert before._embedder.name == after._embedder.name  # the name alone cannot tell
    before.put(("m",), "trip", {"text": "lisbon flight"})
    after.put(("m",), "fresh", {"text": "green tea"})

    hits = after.search(("m",), query="lisbon flight")
    assert [(h.key, h.score is None) for h in hits] == [("fresh", False), ("trip", True)]
    assert after.reindex() == 1
    assert all(h.score is not None for h in after.search(("m",), query="lisbon flight"))
    assert identity(before._embedder) != identity(after._embedder)


def test_vectors_recorded_under_the_bare_name_rank_until_reindex(
    backend_manager: MemoryManager,
) -> None:
    embedder = FakeEmbedder()
    store = HarombeStore(backend_manager, index={"embed": embedder, "fields": ["text"]})
    store.put(("m",), "trip", {"text": "lisbon flight"})
    store.put(("m",), "tea", {"text": "green tea"})

    def legacy() -> Any:  # what a store wrote before identities: the embedder's name
        yield store._backend.step("UPDATE store_vectors SET model = ?", [embedder.name])

    store._backend.run(legacy)
    reopened = HarombeStore(backend_manager, index={"embed": embedder, "fields": ["text"]})
    hits = reopened.search(("m",), query="lisbon flight")
    assert hits[0].key == "trip"
    assert all(h.score is not None for h in hits)  # still ranked, as before
    assert asyncio.run(reopened.areindex()) == 2  # recorded anew under the identity
    assert reopened.reindex() == 0

    def models() -> Any:
        return (yield store._backend.step("SELECT DISTINCT model FROM store_vectors")).rows

    assert [r[0] for r in store._backend.read(models)] == [identity(embedder)]


def test_identity_is_computed_once_per_embedder() -> None:
    embedder = FakeEmbedder()
    first = identity(embedder)
    calls = embedder.calls
    assert identity(embedder) == first == asyncio.run(aidentity(embedder))
    assert embedder.calls == calls
    assert first.startswith(f"{embedder.name}@256:")
    other = FakeEmbedder(ngram=4)
    other._name = embedder.name  # same name and dimension, other vectors
    assert identity(other) != first
