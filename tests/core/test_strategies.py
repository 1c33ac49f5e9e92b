"""Context strategies through MemoryManager.get_context: every budget is respected, the system
prompt always leads, important messages survive, and the threaded path is the newest thread."""

from __future__ import annotations

import pytest

from harombe_core.chat_memory import ChatMemory
from harombe_core.errors import InvalidBudgetError, InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.strategies import ContextBudget, is_important
from harombe_core.testing import FakeEmbedder
from harombe_core.threads import EmbeddingNodeSelector

STRATEGIES = ["simple", "summarization", "hybrid", "threaded"]
SYSTEM = "You are a careful assistant."


def _talk(manager: MemoryManager, turns: int = 30, **session: object) -> str:
    sid = manager.create_session(system_prompt=SYSTEM, **session)  # type: ignore[arg-type]
    messages = []
    for i in range(turns):
        messages.append(Message(role="user", content=f"Question {i} about topic {i % 4}: why?"))
        messages.append(Message(role="assistant", content=f"Answer {i}: because of reason {i}."))
    if turns > 3:
        messages[4].metadata["important"] = True  # an old message flagged important
        messages[6].metadata["importance"] = 0.9  # and one scored important
    manager.save_messages(sid, messages)
    return sid


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_never_over_budget_and_system_prompt_first(manager: MemoryManager, strategy: str) -> None:
    sid = _talk(manager)
    system_cost = manager.count_tokens([Message(role="system", content=SYSTEM)])
    for budget in [system_cost, system_cost + 5, 40, 80, 150, 400, 5000]:
        context = manager.get_context(sid, strategy, budget)
        assert manager.count_tokens(context) <= budget, (strategy, budget)
        assert context[0].role == "system"
        assert context[0].content == SYSTEM


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_budget_too_small_for_the_system_prompt(manager: MemoryManager, strategy: str) -> None:
    sid = _talk(manager, turns=2)
    with pytest.raises(InvalidBudgetError, match="system prompt"):
        manager.get_context(sid, strategy, 3)


def test_summarization_keeps_newest_verbatim_and_a_summary(manager: MemoryManager) -> None:
    sid = _talk(manager)
    context = manager.get_context(sid, "summarization", 2000, keep_last=4)
    assert context[1].role == "system"
    assert context[1].metadata == {"harombe": "summary"}
    assert context[1].content.startswith("Summary of the earlier conversation")
    assert [m.content for m in context[2:]] == [m.content for m in manager.get_messages(sid)[-4:]]
    session = manager.get_session(sid)
    newest_kept = manager.get_messages(sid)[-4].id
    assert session.summary_until_id is not None
    assert session.summary_until_id < newest_kept  # only what fell out of the window


def test_hybrid_keeps_important_messages(manager: MemoryManager) -> None:
    sid = _talk(manager)
    context = manager.get_context(sid, "hybrid", 400, keep_last=4)
    contents = [m.content for m in context]
    assert "Question 2 about topic 2: why?" in contents  # metadata["important"] is True
    assert "Question 3 about topic 3: why?" in contents  # metadata["importance"] = 0.9
    assert contents[-4:] == [m.content for m in manager.get_messages(sid)[-4:]]
    assert manager.count_tokens(context) <= 400
    simple = [m.content for m in manager.get_context(sid, "simple", 400)]
    assert "Question 2 about topic 2: why?" not in simple  # the plain window drops it


def test_is_important() -> None:
    assert is_important(Message(role="user", content="x", metadata={"important": True}))
    assert not is_important(Message(role="user", content="x", metadata={"important": "yes"}))
    assert is_important(Message(role="user", content="x", metadata={"importance": 0.7}))
    assert not is_important(Message(role="user", content="x", metadata={"importance": 0.2}))


def test_threaded_is_the_newest_thread_budgeted(manager: MemoryManager) -> None:
    sid = manager.create_session(system_prompt=SYSTEM)
    memory = ChatMemory(
        node_selector=EmbeddingNodeSelector(FakeEmbedder(), new_thread_threshold=0.3),
        memory=manager,
        session_id=sid,
    )
    memory.append("sourdough starter flour", "feed the sourdough starter flour")
    memory.append("quarterly tax deadline", "tax deadline in April")
    memory.append("sourdough starter rye flour", "rye flour helps a sourdough starter")
    memory.append("tax deadline extension form", "file the tax extension form")
    context = manager.get_context(sid, "threaded", 5000)
    assert [m.content for m in context[1:]] == [
        "quarterly tax deadline",
        "tax deadline in April",
        "tax deadline extension form",
        "file the tax extension form",
    ]
    small = manager.get_context(sid, "threaded", 40, start_on_user=True)
    assert manager.count_tokens(small) <= 40
    assert small[1].role == "user"


def test_unknown_strategy_and_bad_keep_last(manager: MemoryManager) -> None:
    sid = _talk(manager, turns=1)
    with pytest.raises(InvalidInputError, match="strategy"):
        manager.get_context(sid, "magic")
    with pytest.raises(InvalidInputError, match="keep_last"):
        manager.get_context(sid, "summarization", keep_last=-1)
    assert manager.get_context("no-such-session") == []


def test_context_budget_assembles_profile_and_past_sessions(manager: MemoryManager) -> None:
    old = _talk(manager, turns=6, user_id="u1")
    manager.end_session(old)
    sid = _talk(manager, turns=20, user_id="u1")
    context = manager.get_context(
        sid,
        "hybrid",
        600,
        budget=ContextBudget(),
        user_profile="Prefers short answers.",
        query="reason 3",
    )
    kinds = [m.metadata.get("harombe") for m in context]
    assert context[0].content == SYSTEM
    assert "profile" in kinds
    assert "summaries" in kinds
    assert manager.count_tokens(context) <= 600
    with pytest.raises(InvalidBudgetError):
        ContextBudget(user_profile=0.5, session_summaries=0.5)


async def test_aget_context(manager: MemoryManager) -> None:
    sid = _talk(manager, turns=5)
    context = await manager.aget_context(sid, "summarization", 200, keep_last=2)
    assert manager.count_tokens(context) <= 200
    assert context[-1].content == "Answer 4: because of reason 4."


def test_threaded_on_an_unthreaded_session_is_the_window(manager: MemoryManager) -> None:
    sid = _talk(manager, turns=5)
    assert manager.get_context(sid, "threaded", 120) == manager.get_context(sid, "simple", 120)
