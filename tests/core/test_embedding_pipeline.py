"""The embedding pipeline: batches of like length, progress, a backlog said once, and search
that stays complete while a backlog is embedded (real SQLite and ChromaDB, fake embedders)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence

import pytest

from harombe_core.errors import InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.testing import FakeEmbedder
from harombe_core.vectors.indexer import BACKLOG_NOTICE, SemanticMemory


class RecordingEmbedder(FakeEmbedder):
    """A FakeEmbedder that keeps every batch it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    def _embed_batch(self, texts: list[str]) -> object:
        self.batches.append(list(texts))
        return super()._embed_batch(texts)


class GatedEmbedder(FakeEmbedder):
    """Embeds queries at once but holds stored messages until ``release`` is set: a backlog
    that is still being embedded, for as long as a test needs."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def embed(self, texts: Sequence[str]) -> object:
        assert self.release.wait(30), "the test never released the embedder"
        return super().embed(texts)

    def embed_query(self, text: str) -> object:
        return FakeEmbedder.embed(self, [text])[0]


def _mixed(n: int) -> list[Message]:
    """Short acknowledgements and long paragraphs, interleaved as chat has them."""
    out = []
    for i in range(n):
        words = 2 if i % 3 else 40
        out.append(Message(role="user", content=" ".join(f"w{i}x{j}" for j in range(words))))
    return out


def test_pending_messages_are_embedded_in_batches_of_like_length(db_path: str) -> None:
    embedder = RecordingEmbedder()
    with MemoryManager(db_path, embedding=None) as plain:
        plain.save_messages("s", _mixed(30))
    with MemoryManager(db_path, embedding=None) as mm:
        semantic = SemanticMemory(mm.store, embedder, None, batch_size=4, poll=None)
        try:
            assert semantic.embed_pending(100) == 30
        finally:
            semantic.close()
        assert mm.store.run(ops.pending_count()) == 0
    lengths = [[len(text) for text in batch] for batch in embedder.batches]
    assert sum(len(batch) for batch in lengths) == 30
    assert all(len(batch) <= 4 for batch in lengths)
    flat = [n for batch in lengths for n in batch]
    assert flat == sorted(flat), "each batch holds texts of about one length, shortest first"


def test_a_stop_ends_the_window_after_the_batch_in_hand(db_path: str) -> None:
    embedder = RecordingEmbedder()
    with MemoryManager(db_path, embedding=None) as plain:
        plain.save_messages("s", _mixed(12))
        semantic = SemanticMemory(plain.store, embedder, None, batch_size=4, poll=None)
        semantic._listeners.append(lambda n: semantic._stop.set())  # stop after the first
        try:
            assert semantic.embed_pending(100) == 4
            assert plain.store.run(ops.pending_count()) == 8  # the rest waits for the next round
        finally:
            semantic._listeners.clear()
            semantic._stop.clear()
            semantic.close()


def test_flush_reports_progress_to_a_callback(db_path: str) -> None:
    seen: list[tuple[int, int]] = []
    with MemoryManager(db_path, embedding=FakeEmbedder()) as mm:
        mm._semantic.stop()  # the caller embeds everything, so every batch is reported here
        mm.save_messages("s", _mixed(40))
        mm.flush(progress=lambda done, total: seen.append((done, total)))
        assert mm.stats()["pending_embeddings"] == 0
    assert seen, "a backlog reports its progress"
    assert seen[-1] == (40, 40)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)


def test_flush_bar_on_request_and_silence_when_nobody_watches(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with MemoryManager(db_path, embedding=FakeEmbedder()) as mm:
        mm._semantic.stop()
        mm.save_messages("s", _mixed(BACKLOG_NOTICE))
        mm.flush()  # stderr is not a terminal here: no bar
        assert "msg/s" not in capsys.readouterr().err
        assert mm.stats()["pending_embeddings"] == 0
        mm.save_messages("s", _mixed(5))
        mm.flush(progress=True)
        assert "5/5" in capsys.readouterr().err
        mm.flush(progress=True)  # nothing pending: nothing to show, not an empty bar
        assert capsys.readouterr().err == ""
        with pytest.raises(InvalidInputError, match="progress must be"):
            mm.flush(progress="yes")  # type: ignore[arg-type]


def test_a_backlog_is_announced_once_per_database(
    db_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    with MemoryManager(db_path, embedding=None) as plain:
        plain.save_messages("s", _mixed(BACKLOG_NOTICE + 10))
    embedder = GatedEmbedder()  # keeps the backlog in place while the second manager opens
    caplog.set_level(logging.WARNING, logger="harombe_core.vectors.indexer")
    first = MemoryManager(db_path, embedding=embedder)
    second = MemoryManager(db_path, embedding=embedder)
    try:
        notices = [r.getMessage() for r in caplog.records if "in the background" in r.getMessage()]
        assert notices == [
            f"{first.store.location}: embedding {BACKLOG_NOTICE + 10:,} messages in the "
            "background; until each is done, search finds it by its keywords. "
            "MemoryManager.flush() waits for them (with a progress bar on a terminal)."
        ]
    finally:
        embedder.release.set()
        second.close()
        first.close()


@pytest.fixture
def half_embedded(db_path: str) -> Iterator[tuple[MemoryManager, GatedEmbedder]]:
    """A keyword-only store reopened with an embedder that has not reached its messages."""
    with MemoryManager(db_path, embedding=None) as plain:
        plain.save_messages(
            "trip",
            [
                Message(role="user", content="We fly to Lisbon on May 3rd"),
                Message(role="assistant", content="Noted, Lisbon it is"),
                Message(role="user", content="My sister lives in Porto"),
            ],
            user_id="ann",
        )
    embedder = GatedEmbedder()
    mm = MemoryManager(db_path, embedding=embedder)
    try:
        yield mm, embedder
    finally:
        embedder.release.set()
        mm.close()


def test_search_during_a_backfill_ranks_unembedded_messages_by_their_keywords(
    half_embedded: tuple[MemoryManager, GatedEmbedder],
) -> None:
    mm, embedder = half_embedded
    assert mm.stats()["pending_embeddings"] == 3
    hits = mm.search("Lisbon flight", top_k=3, user_id="ann")
    lisbon = {"We fly to Lisbon on May 3rd", "Noted, Lisbon it is"}
    assert {h.message.content for h in hits[:2]} == lisbon
    assert all(h.vector_score is None for h in hits)  # nothing has a vector yet
    assert hits[0].keyword_score == 1.0
    # min_similarity judges cosines; messages without one yet are kept on their keywords.
    kept = mm.search("Lisbon", top_k=3, user_id="ann", min_similarity=0.5)
    assert {h.message.content for h in kept} >= {"We fly to Lisbon on May 3rd"}

    embedder.release.set()
    mm.flush()
    after = mm.search("Lisbon flight", top_k=3, user_id="ann")
    assert {h.message.content for h in after[:2]} == lisbon
    assert all(h.vector_score is not None for h in after)


def test_an_unembedded_exact_match_is_not_buried_under_embedded_ones(db_path: str) -> None:
    """Half the store embedded, half waiting: the waiting half scores as keyword search would,
    not as if its cosine were the worst of the candidates."""
    with MemoryManager(db_path, embedding=FakeEmbedder()) as mm:
        mm.save_messages(
            "old",
            [Message(role="user", content=f"pottery class number {i} was fun") for i in range(6)],
        )
        mm.flush()
    with MemoryManager(db_path, embedding=None) as plain:
        plain.save_message("new", Message(role="user", content="pottery kiln glaze recipe"))
    embedder = GatedEmbedder()
    with MemoryManager(db_path, embedding=embedder) as mm:
        try:
            hits = mm.search("pottery kiln glaze", top_k=3)
            assert hits[0].message.content == "pottery kiln glaze recipe"
            assert hits[0].vector_score is None
        finally:
            embedder.release.set()
