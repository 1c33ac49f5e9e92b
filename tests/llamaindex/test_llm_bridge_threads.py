"""A LlamaIndex LLM driving harombe's summariser and thread node selector, sync and async."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLMWithChatMemoryOfLastCall

from harombe_core.chat_memory import ChatMemory
from harombe_core.models import Message, MessageSummary
from llamaindex_harombe import node_selector, summarizer


def scripted(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    """Summaries name the topic; thread selection always picks the oldest candidate."""
    prompt = messages[-1].content or ""
    if '"selected_node_id"' in prompt:
        ids = [int(i) for i in re.findall(r"^(\d+): ", prompt, re.MULTILINE)]
        return ChatMessage(role="assistant", content=json.dumps({"selected_node_id": ids[0]}))
    topic = "Boats" if "boat" in prompt.lower() else "Other"
    answer = {"title": topic, "summary": f"A message about {topic.lower()}."}
    return ChatMessage(role="assistant", content=json.dumps(answer))


def model() -> MockFunctionCallingLLMWithChatMemoryOfLastCall:
    return MockFunctionCallingLLMWithChatMemoryOfLastCall(
        response_generator=scripted, is_chat_model=True
    )


def test_summarizer_from_a_llamaindex_llm() -> None:
    llm = model()
    summary = summarizer(llm).summarize_message(Message(role="user", content="My boat leaks."))
    assert summary == MessageSummary(title="Boats", summary="A message about boats.")
    assert llm.last_chat_messages is not None
    assert "My boat leaks." in (llm.last_chat_messages[-1].content or "")


async def test_async_summarizer_uses_the_async_client() -> None:
    llm = model()
    summary = await summarizer(llm).asummarize_message(Message(role="user", content="a cat"))
    assert summary.title == "Other"
    assert "achat" in llm.last_called_chat_function  # the mock's achat calls chat inside


async def test_node_selector_threads_a_conversation() -> None:
    llm = model()
    memory = ChatMemory(node_selector=node_selector(llm), summarizer=summarizer(llm))
    first = memory.append("my boat leaks", "patch the hull")
    memory.append("what about sails?", "check the seams")
    third = await memory.aappend("and the hull again?", "use epoxy")
    # the scripted model chose the oldest candidate: the first exchange's assistant turn
    assert memory.graph.nodes[third[0]]["node"].parent_id == first[1]
    assert "achat" in llm.last_called_chat_function
    memory.close()
