"""Text PostgreSQL cannot hold, and search strings in its query syntax, behave the same on
every backend."""

from __future__ import annotations

import pytest

from harombe_core.errors import InvalidMessageError
from harombe_core.manager import MemoryManager


@pytest.mark.parametrize("metadata", [{"k": "v\x00"}, {"k\x00": 1}, {"k": ["a", {"deep": "\x00"}]}])
def test_a_nul_byte_in_metadata_is_refused_on_every_backend(
    manager: MemoryManager, metadata: dict[str, object]
) -> None:
    """PostgreSQL reads message metadata as jsonb, which cannot hold \\u0000; SQLite stored it,
    so a store could not be moved to PostgreSQL. Now both refuse it, by name."""
    with pytest.raises(InvalidMessageError, match="NUL byte"):
        manager.save_message("s", {"role": "user", "content": "c", "metadata": metadata})
    assert manager.count_messages("s") == 0


@pytest.mark.parametrize("query", ["hello & !", "a:* | (", "'\\", "hello <-> world", "!!!"])
def test_tsquery_syntax_in_a_search_is_searched_as_words(
    manager: MemoryManager, query: str
) -> None:
    manager.save_message("s", {"role": "user", "content": "hello world"})
    hits = manager.search(query, session_id="s")
    assert len(hits) == (1 if "hello" in query else 0)
