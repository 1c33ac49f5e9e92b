"""Keyword search leaves out words found in a large share of rows when rarer ones exist."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harombe_core import MemoryManager, Message
from harombe_core.store import ops
from harombe_core.store.base import SearchScope
from harombe_core.store.fts import index_terms
from harombe_core.store.sqlite import SCHEMA_VERSION, SQLiteStore

# Above the size below which every word is searched (2,000 rows): "running" is in every row.
FILLER = 2_400
RARE = [
    "the zeppelin landed by the lake while we were running",
    "a zeppelin and a balloon crossed paths, running late",
    "my balloon popped while running",
    "nothing about airships here, only running",
]


@contextmanager
def _store(path: Path) -> Iterator[SQLiteStore]:
    with MemoryManager(path, embedding=None) as mm:
        yield mm.store


def _contents(hits: list) -> list[str]:
    return [h.message.content for h in hits]


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store where "running" is in every row and "zeppelin"/"balloon" are in a handful."""
    path = tmp_path_factory.mktemp("kw") / "big.db"
    with MemoryManager(path, embedding=None) as mm:
        for s in range(4):
            mm.save_messages(
                f"filler-{s}",
                [Message(role="user", content=f"running errand number {s}-{i} today")
                 for i in range(FILLER // 4)],
                user_id="someone",
            )
        # each message in its own session, so no row sees another's words as its context
        for i, text in enumerate(RARE):
            mm.save_message(f"rare-{i}", Message(role="user", content=text), user_id="u")
    return path


def _bm25_reference(path: Path, words: list[str], limit: int) -> list[str]:
    """What FTS5 ranks for every one of ``words``, straight from the index."""
    raw = sqlite3.connect(path)
    try:
        rows = raw.execute(
            "SELECT m.content FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
            "WHERE messages_fts MATCH ? ORDER BY bm25(messages_fts, 1.0, 0.4), m.id LIMIT ?",
            (" OR ".join(f'"{w}"' for w in words), limit),
        ).fetchall()
    finally:
        raw.close()
    return [r[0] for r in rows]


def test_query_words_are_looked_up_as_the_index_stems_them() -> None:
    assert index_terms("Running") == ("run",)
    assert index_terms("runs") == ("run",)
    assert index_terms("Café") == ("cafe",)
    assert index_terms("foo_bar") == ("foo", "bar")


def test_a_common_word_is_left_out_when_a_rarer_one_is_asked(big: Path) -> None:
    with _store(big) as store:
        hits = store.keyword_search("runs zeppelin", limit=10)
        # without the filter, "runs" (stemmed "run", in every row) would fill the other 8
        assert sorted(_contents(hits)) == sorted(RARE[:2])
        # A user's search decides what is common by the user's own rows (another user's
        # must not change it): u's four rows are few, so "runs" is kept, ranked below.
        scoped = store.keyword_search("runs zeppelin", limit=10, scope=SearchScope(user_id="u"))
        assert sorted(_contents(scoped[:2])) == sorted(RARE[:2])
        assert sorted(_contents(scoped)) == sorted(RARE)


def test_common_words_are_kept_in_a_small_store(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "small.db", embedding=None) as mm:
        for i, text in enumerate([*RARE, "running errand", "running again"]):
            mm.save_message(f"s{i}", Message(role="user", content=text))
        hits = mm.store.keyword_search("runs zeppelin", limit=10)
    assert len(hits) == len(RARE) + 2  # every row says "running": all are found
    assert sorted(_contents(hits[:2])) == sorted(RARE[:2])


def test_a_query_of_only_common_words_still_finds_its_matches(big: Path) -> None:
    with _store(big) as store:
        hits = store.keyword_search("running errands today", limit=5)
        assert len(hits) == 5
        assert all("errand" in h.message.content for h in hits)
        alone = store.keyword_search("running", limit=3, scope=SearchScope(user_id="u"))
        assert len(alone) == 3


def test_a_rare_word_query_ranks_as_bm25_over_all_its_words(big: Path) -> None:
    words = ["zeppelin", "balloon", "airships"]
    expected = _bm25_reference(big, words, 10)
    assert len(expected) == 4
    with _store(big) as store:
        assert _contents(store.keyword_search(" ".join(words), limit=10)) == expected
        # Scoped to u, the same rows, ranked by u's own statistics (test_keyword_scope_stats)
        scoped = store.keyword_search(" ".join(words), limit=10, scope=SearchScope(user_id="u"))
        assert sorted(_contents(scoped)) == sorted(expected)
        hits = store.keyword_search("zeppelin balloon airships running", limit=10)
        assert _contents(hits) == expected  # the common word changes nothing


def test_a_word_that_becomes_common_is_left_out_once_the_store_grows(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "grows.db", embedding=None) as mm:
        for i, text in enumerate(RARE):
            mm.save_message(f"rare-{i}", Message(role="user", content=text))
        assert len(mm.store.keyword_search("runs zeppelin", limit=10)) == len(RARE)
        mm.save_messages(
            "filler", [Message(role="user", content=f"running {i}") for i in range(FILLER)]
        )
        hits = mm.store.keyword_search("runs zeppelin", limit=10)
    assert sorted(_contents(hits)) == sorted(RARE[:2])


def test_an_existing_file_gets_it_without_a_schema_change(big: Path, tmp_path: Path) -> None:
    copy = tmp_path / "existing.db"
    source = sqlite3.connect(big)
    target = sqlite3.connect(copy)
    source.backup(target)
    source.close()

    def schema() -> list[tuple]:
        return target.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()

    before = schema()
    assert target.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    with _store(copy) as store:
        assert sorted(_contents(store.keyword_search("runs zeppelin"))) == sorted(RARE[:2])
        assert store.run(ops.count_messages()) == FILLER + len(RARE)
    # the counts are read through a temporary table: nothing is added to the file
    assert schema() == before
    assert target.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    target.close()
