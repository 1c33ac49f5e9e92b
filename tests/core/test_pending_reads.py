"""Derived rows owed by a background job are written before an operation, never inside one.

A store operation of this process first settles what its jobs owe the database (read your
writes, see ``harombe_core.store.pending``), such as the session of a LangGraph thread
checkpointed a moment ago. A job can become owed while an operation runs (another thread's
put); a statement read inside the operation (in its snapshot or its transaction, with
``store.query``) must then leave it for the next operation: drained there, the job's writes
ran on the operation's connection, inside its transaction, and failed ("cannot start a
transaction within a transaction"). The keyword search did so at random under load while it
read its words' row counts that way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harombe_core.models import Message
from harombe_core.store import ops, pending
from harombe_core.store.sqlite import SQLiteStore


def _say(text: str) -> Message:
    return Message(role="user", content=text, token_count=2)


@pytest.mark.parametrize("outer", ["snapshot", "transaction"])
def test_a_job_owed_during_an_operation_is_written_outside_it(tmp_path: Path, outer: str) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    try:
        store.run(ops.add_messages("s", [_say("the red kettle")]))
        written: list[int] = []

        def drain() -> None:  # a job that always owes one more row, as under steady puts
            written.extend(store.run(ops.add_messages("owed", [_say(f"owed {len(written)}")])))

        def nested(_conn: Any) -> int:
            # A statement an extension reads inside its own operation (as the keyword search
            # read its words' row counts inside its snapshot).
            return int(store.query("SELECT COUNT(*) FROM messages WHERE session_id = 's'")[0][0])

        unregister = pending.register(store.location, drain)
        try:
            if outer == "snapshot":
                assert store.snapshot(nested) == 1
            else:
                assert store.transaction(nested, adds_messages=False) == 1
            store.run(ops.get_session("s"))  # the next operation: settles before it begins
        finally:
            unregister()
        assert written  # drained outside the operations only
        stored = [m.content for m in store.run(ops.get_messages("owed"))]
        assert stored == [f"owed {n}" for n in range(len(written))]
    finally:
        store.close()
