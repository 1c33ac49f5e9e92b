"""Derived rows owed by a background job are written before a read, never inside one.

A read of this process settles what its jobs owe the database first (read your writes, see
``harombe_core.store.pending``), such as the session of a LangGraph thread checkpointed a
moment ago. A job can become owed while a read runs (another thread's put); the read's own
nested statements must then leave it for the next operation: drained there, its writes ran on
the read's connection, inside its read transaction, and failed ("cannot start a transaction
within a transaction"), which a keyword search of several words did at random under load.
"""

from __future__ import annotations

from pathlib import Path

from harombe_core.models import Message
from harombe_core.store import ops, pending
from harombe_core.store.sqlite import SQLiteStore


def _say(text: str) -> Message:
    return Message(role="user", content=text, token_count=2)


def test_a_job_owed_during_a_keyword_search_is_written_outside_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    try:
        store.run(ops.add_messages("s", [_say("the red kettle")]))
        written: list[int] = []

        def drain() -> None:  # a job that always owes one more row, as under steady puts
            written.extend(store.run(ops.add_messages("owed", [_say(f"owed {len(written)}")])))

        unregister = pending.register(store.location, drain)
        try:
            # Two words: the search reads their row counts inside its snapshot.
            hits = store.keyword_search("red kettle", limit=5)
        finally:
            unregister()
        assert [h.message.content for h in hits] == ["the red kettle"]
        assert written  # drained before the search's reads, and only there
        stored = [m.content for m in store.run(ops.get_messages("owed"))]
        assert stored == [f"owed {n}" for n in range(len(written))]
    finally:
        store.close()
