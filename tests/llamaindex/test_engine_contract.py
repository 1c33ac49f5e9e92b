"""What the model is sent by LlamaIndex's engines and agents, on its memories and on ours.

``SimpleChatEngine``, ``CondensePlusContextChatEngine`` and ``FunctionAgent`` run unmodified
with mock models that record the messages of their last call. The memory is the parameter:
``ChatMemoryBuffer`` and ``Memory`` are the controls (see ``contract.py``), and the same script
on ``HarombeMemory`` must send the model what they send.
"""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core import Document, SummaryIndex
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.chat_engine import CondensePlusContextChatEngine, SimpleChatEngine
from llama_index.core.llms.mock import (
    MockFunctionCallingLLMWithChatMemoryOfLastCall,
    MockLLMWithChatMemoryOfLastCall,
)
from llama_index.core.memory import BaseMemory
from llama_index.core.tools import FunctionTool

from tests.llamaindex.conftest import MEMORY_KINDS, BuildMemory
from tests.llamaindex.contract import contract
from tests.llamaindex.engine_turn import agent_brain, dump, get_weather

ENGINES = ("simple", "condense_plus_context", "function_agent")
Sent = list[list[str]]


class Engine:
    """One engine (or agent) over ``memory`` whose model records what it was last sent."""

    def __init__(self, name: str, memory: BaseMemory) -> None:
        self.name = name
        self.memory = memory
        if name == "function_agent":
            self.llm: Any = MockFunctionCallingLLMWithChatMemoryOfLastCall(
                response_generator=agent_brain
            )
            self.agent = FunctionAgent(
                tools=[FunctionTool.from_defaults(fn=get_weather)],
                llm=self.llm,
                system_prompt="You answer weather questions.",
            )
            return
        self.llm = MockLLMWithChatMemoryOfLastCall(max_tokens=4, is_chat_model=True)
        if name == "simple":
            self.engine: Any = SimpleChatEngine.from_defaults(
                llm=self.llm, memory=memory, system_prompt="Be brief."
            )
        else:
            notes = SummaryIndex.from_documents([Document(text="The harbour opens at six.")])
            self.engine = CondensePlusContextChatEngine.from_defaults(
                retriever=notes.as_retriever(), llm=self.llm, memory=memory
            )

    async def turn(self, message: str) -> Sent:
        if self.name == "function_agent":
            await self.agent.run(user_msg=message, memory=self.memory)
        else:
            await self.engine.achat(message)
        return dump(self.llm.last_chat_messages)


def contents(sent: Sent) -> list[str]:
    return [content for _role, content in sent]


BIG = "Please read my notes about the harbour: " + "tide and swell " * 20


@pytest.mark.parametrize("kind", MEMORY_KINDS)
@pytest.mark.parametrize("engine", ENGINES)
async def test_an_oversized_message_reaches_the_model(
    build_memory: BuildMemory, kind: str, engine: str
) -> None:
    # A 60-token message, a 20-token limit: LlamaIndex's memories send it (ChatMemoryBuffer
    # its newest message, Memory its last turn); an empty history would hide it from the model.
    runner = Engine(engine, build_memory(kind, 20))
    first = await runner.turn(BIG)
    with contract(kind, "send the model the over-long message of the turn"):
        assert BIG in contents(first)
        assert next(role for role, _ in first if role != "system") == "user"
    assert "thanks" in contents(await runner.turn("thanks"))


def script(engine: str) -> list[str]:
    if engine == "function_agent":
        return ["weather in Paris?", "and tomorrow?", "and the day after?"]
    return ["When does the harbour open?", "Is it open on Sundays?", "Thanks, see you then."]


@pytest.mark.parametrize("limit", [40, 3000])
@pytest.mark.parametrize("engine", ENGINES)
async def test_the_model_is_sent_what_llamaindex_memories_send(
    build_memory: BuildMemory, engine: str, limit: int
) -> None:
    sent: dict[str, list[Sent]] = {}
    for kind in MEMORY_KINDS:
        runner = Engine(engine, build_memory(kind, limit))
        sent[kind] = [await runner.turn(message) for message in script(engine)]
    # ChatMemoryBuffer and HarombeMemory keep the newest messages whose text fits, counted the
    # same way (but ChatMemoryBuffer counts a tool call as nothing, harombe its arguments);
    # Memory flushes in chunks, so under a tight limit it keeps a different amount.
    if limit == 3000 or engine != "function_agent":
        assert sent["HarombeMemory"] == sent["ChatMemoryBuffer"]
    if limit == 3000:
        assert sent["HarombeMemory"] == sent["Memory"]
    if engine != "function_agent":
        last = contents(sent["HarombeMemory"][-1])
        assert script(engine)[1] in last  # the earlier turn is there, not only the new one
