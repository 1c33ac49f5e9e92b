"""One conversational turn through a LlamaIndex chat engine or agent with HarombeMemory.

Imported by the tests and also run as a script in a fresh process (``python engine_turn.py
'{json}'``), so a test can prove that a conversation continues after a restart: everything the
turn needs is rebuilt from the database path. Prints what the model was sent as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core import Settings
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.chat_engine import (
    CondensePlusContextChatEngine,
    ContextChatEngine,
    SimpleChatEngine,
)
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.llms.mock import (
    MockFunctionCallingLLMWithChatMemoryOfLastCall,
    MockLLMWithChatMemoryOfLastCall,
)
from llama_index.core.tools import FunctionTool

from llamaindex_harombe import HarombeMemory, HarombeRetriever

ENGINES = ("simple", "context", "condense_plus_context", "function_agent", "agent_workflow")
MODES = ("chat", "stream", "achat", "astream")


def get_weather(city: str = "Paris") -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def agent_brain(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    """A scripted function-calling model: call the tool for a new question, then answer."""
    last = messages[-1]
    if last.role == MessageRole.TOOL:
        return ChatMessage(role="assistant", content=f"The forecast says {last.content}.")
    if kwargs.get("tools") and last.role == MessageRole.USER:
        return ChatMessage(
            role="assistant",
            blocks=[
                ToolCallBlock(
                    tool_call_id=f"call-{len(messages)}",
                    tool_name="get_weather",
                    tool_kwargs={"city": "Paris"},
                )
            ],
        )
    return ChatMessage(role="assistant", content="ok")


def offline() -> None:
    Settings.llm = MockLLM()
    Settings.embed_model = MockEmbedding(embed_dim=8)


def dump(messages: Sequence[ChatMessage] | None) -> list[list[str]]:
    return [[m.role.value, m.content or ""] for m in messages or ()]


async def run_turn(
    *,
    db: str,
    engine: str,
    mode: str,
    message: str,
    session_id: str,
    user_id: str | None = None,
    token_limit: int = 400,
    embedding: str | None = "default",
) -> dict[str, Any]:
    """Run one turn; return the reply, what the model was last sent, and the stored history."""
    memory = HarombeMemory.from_defaults(
        storage_path=db,
        session_id=session_id,
        user_id=user_id,
        token_limit=token_limit,
        embedding=embedding,
    )
    try:
        reply = await _dispatch(memory, engine, mode, message, session_id, user_id)
        return {
            "reply": reply["reply"],
            "sent": reply["sent"],
            "history": dump(await memory.aget_all()),
            "window_tokens": memory.count_tokens(await memory.aget()),
        }
    finally:
        memory.close()


async def _dispatch(
    memory: HarombeMemory,
    engine: str,
    mode: str,
    message: str,
    session_id: str,
    user_id: str | None,
) -> dict[str, Any]:
    if engine in ("function_agent", "agent_workflow"):
        llm_fc = MockFunctionCallingLLMWithChatMemoryOfLastCall(response_generator=agent_brain)
        tool = FunctionTool.from_defaults(fn=get_weather)
        agent = FunctionAgent(
            name="weather",
            description="Answers weather questions",
            tools=[tool],
            llm=llm_fc,
            system_prompt="You answer weather questions.",
            streaming=mode in ("stream", "astream"),
        )
        workflow: Any = (
            AgentWorkflow(agents=[agent], root_agent="weather")
            if engine == "agent_workflow"
            else agent
        )
        handler = workflow.run(user_msg=message, memory=memory)
        if mode in ("stream", "astream"):
            async for _event in handler.stream_events():
                pass
        result = await handler
        return {"reply": str(result), "sent": dump(llm_fc.last_chat_messages)}

    llm = MockLLMWithChatMemoryOfLastCall(max_tokens=4, is_chat_model=True)
    if engine == "simple":
        chat_engine: Any = SimpleChatEngine.from_defaults(
            llm=llm, memory=memory, system_prompt="You are a helpful assistant."
        )
    else:
        retriever = HarombeRetriever(
            manager=memory.manager, user_id=user_id, exclude_session_id=session_id, top_k=3
        )
        if engine == "context":
            chat_engine = ContextChatEngine.from_defaults(
                retriever=retriever, llm=llm, memory=memory
            )
        else:
            # The mock model's "condensed question" would be filler text: search the message.
            chat_engine = CondensePlusContextChatEngine.from_defaults(
                retriever=retriever, llm=llm, memory=memory, skip_condense=True
            )
    if mode == "chat":
        reply = str(chat_engine.chat(message))
    elif mode == "achat":
        reply = str(await chat_engine.achat(message))
    elif mode == "stream":
        response = await asyncio.to_thread(chat_engine.stream_chat, message)
        reply = "".join(await asyncio.to_thread(lambda: list(response.response_gen)))
    else:
        response = await chat_engine.astream_chat(message)
        reply = "".join([d async for d in response.async_response_gen()])
    return {"reply": reply, "sent": dump(llm.last_chat_messages)}


def run_python(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python *argv`` in a fresh process that imports this checkout; fails the test if it
    fails."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def in_new_process(script: Path, args: dict[str, Any]) -> dict[str, Any]:
    """Run ``script`` (this file, or another like it) in a fresh Python process with ``args``
    as JSON; the JSON object it prints last."""
    done = run_python(str(script), json.dumps(args))
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":
    offline()
    args = json.loads(sys.argv[1])
    print(json.dumps(asyncio.run(run_turn(**args))))
