"""Threaded turns written at the same time continue one another, on every backend.

Two Threaders on one session (two memories, tasks or processes): the second one's turn commits
after the first chose its parent and before the first writes. The first turn is then placed
again, under the turn that now ends the session, so the session stays one thread.
"""

from __future__ import annotations

import pytest

from harombe_core.integration import Threader, resolve_selector
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from tests.interleave import interleave


def exchange(question: str) -> list[Message]:
    return [Message(role="user", content=question), Message(role="assistant", content="re")]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_turn_committed_meanwhile_is_continued_not_branched_from(
    manager: MemoryManager, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    def threader() -> Threader:
        return Threader(manager, "s", resolve_selector("linear"), user_id="ann")

    mine, theirs = threader(), threader()
    mine.append(exchange("first"))
    interleave(monkeypatch, manager, lambda: theirs.append(exchange("theirs")))
    if mode == "sync":
        mine.append(exchange("mine"))
    else:
        await mine.aappend(exchange("mine"))
    stored = manager.get_messages("s")
    assert [m.content for m in stored] == ["first", "re", "theirs", "re", "mine", "re"]
    assert [m.parent_id for m in stored[1:]] == [m.id for m in stored[:-1]]
    assert sorted(mine.refresh().nodes) == sorted(theirs.refresh().nodes)
