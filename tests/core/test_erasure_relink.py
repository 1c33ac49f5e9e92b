"""Deleting any set of messages leaves every survivor's keyword entry holding exactly the turn
it now answers (the message just before it that is left), as a rebuild of the index would."""

from __future__ import annotations

import random
from pathlib import Path

from harombe_core import MemoryManager, Message


def _entries(mm: MemoryManager) -> dict[int, tuple[str, str]]:
    rows = mm.store.query("SELECT rowid, content, context FROM messages_fts")
    return {int(r[0]): (r[1], r[2]) for r in rows}


def _expected(mm: MemoryManager) -> dict[int, tuple[str, str]]:
    out: dict[int, tuple[str, str]] = {}
    for session in mm.list_sessions(limit=None):
        previous = ""
        for message in mm.get_messages(session.id):
            out[message.id or 0] = (message.content, previous)
            previous = message.content
    return out


def test_random_deletions_relink_every_survivor(tmp_path: Path) -> None:
    rng = random.Random(5)
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        for case in range(40):
            sid = f"s{case % 4}"
            ids = mm.save_messages(
                sid,
                [Message(role="user", content=f"c{case} m{n}") for n in range(rng.randint(1, 9))],
            )
            mm.store.index_keywords()
            present = [m.id or 0 for m in mm.get_messages(sid)]
            doomed = rng.sample(present, rng.randint(1, len(present)))
            if case % 5 == 0:  # an id of another session is ignored
                doomed.append(ids[0] + 10_000)
            mm.replace_messages(sid, doomed, [Message(role="user", content=f"new {case}")])
            mm.store.index_keywords()
            assert _entries(mm) == _expected(mm), f"case {case}: deleted {sorted(doomed)}"
