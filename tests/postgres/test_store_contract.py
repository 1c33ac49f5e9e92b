"""The store contract over in-memory SQLite, file SQLite and a real PostgreSQL server."""

from __future__ import annotations

import asyncio

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store.base import MessageStore
from tests.postgres.contract import BEHAVIOURS, Behaviour


@pytest.mark.parametrize("behaviour", BEHAVIOURS, ids=lambda b: b.__name__)
def test_contract(behaviour: Behaviour, manager: MemoryManager) -> None:
    assert isinstance(manager.store, MessageStore)
    behaviour(manager)


async def test_async_twins(manager: MemoryManager) -> None:
    sid = await manager.acreate_session("sys", user_id="u")
    ids = await asyncio.gather(
        *(manager.asave_message(sid, Message(role="user", content=f"m{i}")) for i in range(20))
    )
    assert sorted(ids) == [m.id for m in await manager.aget_messages(sid)]
    recent = await manager.aget_recent_messages(sid, 50)
    assert recent[0].role == "system"
    assert recent[-1].id == max(ids)
    assert [s.id for s in await manager.alist_sessions(user_id="u")] == [sid]
    assert await manager.aclear_session(sid) == 20
    assert await manager.adelete_session(sid) is True
