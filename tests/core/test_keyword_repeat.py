"""Keyword search repeats exactly: after ``flush()`` two identical stores rank and score every
query the same, and a message the background indexer has not reached yet scores exactly as it
will once indexed (FTS5's own bm25, with the index's counts read in the search's snapshot).

The background indexer is stopped from running in these tests (its ``notify`` does nothing),
so how far it got is set by the test, never by the machine's speed.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harombe_core import MemoryManager, Message
from harombe_core.store.fts import KeywordIndexer

VOCABULARY = [
    "garden",
    "river",
    "piano",
    "guitar",
    "painting",
    "camping",
    "hiking",
    "pottery",
    "recipe",
    "bakery",
    "museum",
    "violin",
    "concert",
    "festival",
    "beach",
    "mountain",
    "sunset",
    "library",
    "novel",
    "poetry",
    "school",
    "teacher",
    "doctor",
    "hospital",
    "adoption",
    "family",
    "sister",
    "brother",
    "parents",
    "wedding",
    "birthday",
    "dinner",
    "kitchen",
    "coffee",
    "tea",
    "breakfast",
    "marathon",
    "running",
    "swimming",
    "yoga",
    "meditation",
    "workshop",
    "project",
    "deadline",
    "meeting",
    "interview",
    "promotion",
    "salary",
    "vacation",
    "passport",
    "airport",
    "train",
]
FILLER = [
    "the",
    "a",
    "of",
    "and",
    "to",
    "my",
    "we",
    "it",
    "was",
    "is",
    "that",
    "for",
    "on",
    "with",
    "at",
    "this",
]


def messages(seed: int = 7, count: int = 400) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for n in range(count):
        words = rng.sample(VOCABULARY, rng.randint(2, 6)) + rng.sample(FILLER, rng.randint(1, 5))
        rng.shuffle(words)
        out.append((f"s{n % 9}", " ".join(words)))
    return out


def queries(seed: int = 11, count: int = 150) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(VOCABULARY + FILLER, rng.randint(1, 4))) for _ in range(count)]


@pytest.fixture(autouse=True)
def no_background_indexer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(KeywordIndexer, "notify", lambda self: None)


def _save(mm: MemoryManager, batch: list[tuple[str, str]]) -> None:
    for sid, text in batch:
        mm.save_message(sid, Message(role="user", content=text))


def _results(mm: MemoryManager) -> list[list[tuple[int, float]]]:
    return [[(h.message.id or 0, h.score) for h in mm.search(q, top_k=40)] for q in queries()]


def test_identical_stores_rank_and_score_alike_after_flush(tmp_path: Path) -> None:
    batch = messages()
    with (
        MemoryManager(str(tmp_path / "a.db"), embedding=None) as a,
        MemoryManager(str(tmp_path / "b.db"), embedding=None) as b,
    ):
        _save(a, batch[:150])
        a.store.index_keywords()  # a got further than b before the flush
        _save(a, batch[150:])
        _save(b, batch)
        a.flush()
        b.flush()
        assert a.stats()["messages"] == b.stats()["messages"] == len(batch)
        assert _results(a) == _results(b)


def test_a_message_not_indexed_yet_scores_as_it_will_once_indexed(tmp_path: Path) -> None:
    batch = messages(count=370)
    with (
        MemoryManager(str(tmp_path / "indexed.db"), embedding=None) as indexed,
        MemoryManager(str(tmp_path / "tail.db"), embedding=None) as lagging,
    ):
        _save(indexed, batch)
        indexed.store.index_keywords()
        _save(lagging, batch[:340])
        lagging.store.index_keywords()
        _results(lagging)  # a store in use: it has searched before
        _save(lagging, batch[340:355])
        lagging.store.index_keywords()
        _save(lagging, batch[355:])  # 15 messages the keyword index does not hold yet
        tail_ids = set(range(356, len(batch) + 1))
        compared = 0
        for query in queries():
            final = {h.message.id: h.score for h in indexed.store.keyword_search(query, limit=400)}
            for hit in lagging.store.keyword_search(query, limit=400):
                if hit.message.id in tail_ids:
                    assert hit.score == pytest.approx(final[hit.message.id], rel=1e-12, abs=1e-12)
                    compared += 1
        assert compared > 30  # the queries did reach the tail
        lagging.flush()  # waits for the keyword index: now identical in every way
        assert _results(lagging) == _results(indexed)
