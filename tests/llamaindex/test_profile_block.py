"""HarombeProfileBlock beside LlamaIndex's FactExtractionMemoryBlock in one ``Memory``.

Both put what is known about the user in front of the model. LlamaIndex's block asks its LLM
(a scripted MockLLM here) on every flush and keeps the facts in the block; harombe's reads the
user's facts from the database (extracted by the offline extractor, no LLM call), with the
open tasks, and extracts a flushed session kept in harombe.
"""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, ChatResponse
from llama_index.core.llms import MockLLM
from llama_index.core.memory import FactExtractionMemoryBlock, Memory

from harombe_core.errors import InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from llamaindex_harombe import HarombeDBChatStore, HarombeProfileBlock


class ScriptedLLM(MockLLM):
    """Answers every chat with the same facts, counting the calls."""

    calls: int = 0

    async def achat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        self.calls += 1
        text = "<facts><fact>The user lives in Lisbon.</fact></facts>"
        return ChatResponse(message=ChatMessage(role="assistant", content=text))


def _user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


async def test_profile_block_beside_fact_extraction_block(tmp_path: Any) -> None:
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        await mm.asave_messages(
            "past",
            [Message(role="user", content="I live in Lisbon. Remind me to renew my passport.")],
            user_id="ann",
        )
        await mm.aend_session("past")
        llm = ScriptedLLM()
        theirs = FactExtractionMemoryBlock(llm=llm)
        ours = HarombeProfileBlock(manager=mm, user_id="ann")
        memory = Memory.from_defaults(
            session_id="now",
            token_limit=200,
            token_flush_size=20,
            chat_history_token_ratio=0.5,
            memory_blocks=[theirs, ours],
            chat_store=HarombeDBChatStore(manager=mm, user_id="ann"),
        )
        await memory.aput_messages(
            [_user(f"I work as a nurse at the general hospital, shift {i}.") for i in range(8)]
        )
        window = await memory.aget(input="where do I live?")
        system = "\n".join(m.content or "" for m in window if m.role.value == "system")
        assert "<fact>The user lives in Lisbon.</fact>" in system  # theirs: from its LLM
        assert "Lives in Lisbon" in system  # ours: from the database, no LLM
        assert "Open tasks:\n- Renew their passport" in system
        assert llm.calls >= 1
        # the flushed turns were in harombe's queue: the block extracted them for the user
        texts = [f.text for f in await mm.aget_facts("ann")]
        assert any(t.startswith("Works as a nurse") for t in texts)
        ours_text = await ours.aget(messages=[_user("nurse shifts")])
        assert ours_text.splitlines()[0].startswith("- Works as a nurse")


async def test_harombe_memory_puts_the_profile_in_front_of_agents_and_engines(
    tmp_path: Any,
) -> None:
    """``HarombeMemory(profile_tokens=...)``: the README's memory knows the user, as the
    LangChain middleware's ``profile_tokens`` does, with the same text; without it (the
    default) or without a user, nothing of the profile is added."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.chat_engine import SimpleChatEngine
    from llama_index.core.llms.mock import MockFunctionCallingLLM

    from llamaindex_harombe import HarombeMemory

    with MemoryManager(str(tmp_path / "m.db"), embedding=None, user_memory=True) as mm:
        first = HarombeMemory.from_defaults(manager=mm, session_id="monday", user_id="ann")
        engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=first)
        await engine.achat("I live in Lisbon. Remind me to book the flights.")
        await mm.aflush()  # the background extractor has read the turn
        memory = HarombeMemory.from_defaults(
            manager=mm, session_id="tuesday", user_id="ann", profile_tokens=200
        )
        await FunctionAgent(tools=[], llm=MockFunctionCallingLLM()).run(
            "Which flights should I book?", memory=memory
        )
        sent = await memory.aget()
        plain = HarombeMemory.from_defaults(manager=mm, session_id="wednesday", user_id="ann")
        await plain.aput(ChatMessage(role="user", content="What should I do today?"))
        plain_window = await plain.aget()
        with pytest.raises(InvalidInputError, match="pass user_id"):  # whose profile?
            HarombeMemory.from_defaults(manager=mm, session_id="x", profile_tokens=200)
    assert [m.role.value for m in sent] == ["system", "user", "assistant"]
    system = sent[0].content or ""
    assert system.startswith("What you know about the user:\n- Lives in Lisbon")
    assert "Their open tasks:\n- Book the flights" in system
    # One system message: the profile first, then what is recalled of other sessions.
    assert "Relevant context from past conversations" in system
    assert system.index("Their open tasks") < system.index("Relevant context")
    assert "What you know" not in (plain_window[0].content or "")
