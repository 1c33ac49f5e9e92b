"""A delete whose async caller is cancelled while it runs still has its bytes erased by the
background eraser. The delete commits (a cancelled call waits for its store operation), so
what arms the eraser must not be a step after it that the cancellation skips: before, a
cancelled ``adelete_session``, ``aclear_session``, ``areplace_messages``, ``aforget_fact``
... left the deleted text in the files of a long-running process (a server) until its close
or some later deletion."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.testing import FakeEmbedder
from tests.core.test_cancellation_sweep import HopCanceller
from tests.core.test_cancellation_sweep import canceller as canceller  # (the fixture)
from tests.reliability.test_erase_while_open import clocked_manager

Delete = Callable[[MemoryManager, list[int], int], Awaitable[Any]]

DELETES: dict[str, Delete] = {
    "adelete_session": lambda mm, ids, fact: mm.adelete_session("s"),
    "aclear_session": lambda mm, ids, fact: mm.aclear_session("s"),
    "areplace_messages": lambda mm, ids, fact: mm.areplace_messages("s", ids[:1]),
    "aprune_old_sessions": lambda mm, ids, fact: mm.aprune_old_sessions(0),
    "aforget_user": lambda mm, ids, fact: mm.aforget_user("u"),
    "aforget_fact": lambda mm, ids, fact: mm.aforget_fact("u", fact),
    "aforget_user_facts": lambda mm, ids, fact: mm.aforget_user_facts("u"),
}


@pytest.mark.parametrize("semantic", [False, True], ids=["keywords", "semantic"])
@pytest.mark.parametrize("name", list(DELETES))
def test_a_cancelled_delete_still_arms_the_background_eraser(
    tmp_path: Path, canceller: HopCanceller, name: str, semantic: bool
) -> None:
    embedding = FakeEmbedder() if semantic else None
    with clocked_manager(tmp_path / "m.db", embedding=embedding) as (mm, eraser, clock):

        def fill() -> tuple[list[int], int]:
            batch = [Message(role="user", content=f"secret {n}") for n in range(3)]
            ids = mm.save_messages("s", batch, user_id="u")
            return ids, mm.add_fact("u", "likes secret things").id

        ids, fact = fill()
        delete = DELETES[name]

        async def hops() -> int:
            return await canceller.hops(lambda: delete(mm, ids, fact))

        total = asyncio.run(hops())  # an uncancelled run, to count its hops
        clock.now += 3600
        assert eraser.run_due() is not None  # (it armed the eraser)
        ids, fact = fill()

        async def cancelled() -> bool:  # cancelled while its last store operation runs
            return await canceller.cancelled_at(lambda: delete(mm, ids, fact), total - 1, True)

        assert asyncio.run(cancelled())
        clock.now += 3600
        assert eraser.run_due() is not None  # the deletion committed: it is erased
