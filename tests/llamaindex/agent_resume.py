"""An agent run paused or finished in one process and continued from its serialised ``Context``
in another, with HarombeMemory as its memory.

Imported by ``test_agent_resume.py`` for the first half and run as a script (``python
agent_resume.py '{json}'``) for the second, so the second half has nothing in memory but the
serialised context and the database file. Prints what the model was sent and what is stored.
"""

# (No ``from __future__ import annotations``: LlamaIndex finds a tool's ``ctx: Context``
# parameter by its annotation, which must then be the class, not a string.)
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLMWithChatMemoryOfLastCall
from llama_index.core.tools import FunctionTool
from workflows import Context
from workflows.context.serializers import JsonPickleSerializer, JsonSerializer
from workflows.events import HumanResponseEvent, InputRequiredEvent

from llamaindex_harombe import HarombeMemory

AGENTS = ("function", "react", "workflow")


async def book_trip(ctx: Context, city: str = "Paris") -> str:
    """Book a trip, once a person has said yes."""
    answer = await ctx.wait_for_event(
        HumanResponseEvent, waiter_id="approve", waiter_event=InputRequiredEvent(prefix=city)
    )
    return f"booked {city}" if answer.response == "yes" else "cancelled"


def function_brain(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    last = messages[-1]
    if last.role == MessageRole.TOOL:
        return ChatMessage(role="assistant", content=f"Done: {last.content}.")
    if kwargs.get("tools") and last.role == MessageRole.USER:
        call = ToolCallBlock(
            tool_call_id="c1", tool_name="book_trip", tool_kwargs={"city": "Lisbon"}
        )
        return ChatMessage(role="assistant", blocks=[call])
    return ChatMessage(role="assistant", content="ok")


def react_brain(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    if "Observation:" in (messages[-1].content or ""):
        return ChatMessage(
            role="assistant",
            content="Thought: I can answer without using any more tools.\nAnswer: Done.",
        )
    return ChatMessage(
        role="assistant",
        content="Thought: I need to use a tool to help me answer the question.\n"
        'Action: book_trip\nAction Input: {"city": "Lisbon"}',
    )


def build(kind: str) -> tuple[Any, MockFunctionCallingLLMWithChatMemoryOfLastCall]:
    brain = react_brain if kind == "react" else function_brain
    llm = MockFunctionCallingLLMWithChatMemoryOfLastCall(response_generator=brain)
    tools = [FunctionTool.from_defaults(async_fn=book_trip)]
    if kind == "react":
        return ReActAgent(name="trips", description="Books trips", tools=tools, llm=llm), llm
    agent = FunctionAgent(name="trips", description="Books trips", tools=tools, llm=llm)
    if kind == "workflow":
        return AgentWorkflow(agents=[agent], root_agent="trips"), llm
    return agent, llm


def serializer(name: str) -> JsonSerializer:
    return JsonPickleSerializer() if name == "pickle" else JsonSerializer()


def stored(messages: Sequence[ChatMessage]) -> list[list[str]]:
    return [[m.role.value, m.content or ""] for m in messages]


async def pause(*, db: str, kind: str, ser: str, path: str) -> None:
    """Ask for a trip; when the tool waits for a person, save the context and stop."""
    workflow, _llm = build(kind)
    memory = HarombeMemory.from_defaults(
        storage_path=db, session_id="trip", user_id="ann", embedding=None
    )
    handler = workflow.run(user_msg="Book me a trip.", memory=memory)
    async for event in handler.stream_events():
        if isinstance(event, InputRequiredEvent):
            assert handler.ctx is not None
            Path(path).write_text(json.dumps(handler.ctx.to_dict(serializer=serializer(ser))))
            break
    await handler.cancel_run()
    memory.close()


async def resume(*, kind: str, ser: str, path: str) -> dict[str, Any]:
    """In a new process: restore the context, say yes, and finish the run."""
    workflow, llm = build(kind)
    data = json.loads(Path(path).read_text())
    ctx = Context.from_dict(workflow, data, serializer=serializer(ser))
    handler = workflow.run(ctx=ctx)
    handler.ctx.send_event(HumanResponseEvent(response="yes"))
    reply = await handler
    memory = await ctx.store.get("memory")
    try:
        return {
            "reply": str(reply),
            "sent": stored(llm.last_chat_messages or []),
            "stored": stored(await memory.aget_all()),
        }
    finally:
        memory.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(resume(**json.loads(sys.argv[1])))))
