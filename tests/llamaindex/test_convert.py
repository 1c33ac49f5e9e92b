"""ChatMessage <-> Message: every LlamaIndex field survives the trip, through SQLite too."""

from __future__ import annotations

import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from llamaindex_harombe.convert import LI_KEY, from_llamaindex, to_llamaindex

CASES = [
    ChatMessage(role="user", content="hello"),
    ChatMessage(role="assistant", content=""),
    ChatMessage(role="system", content="be brief"),
    ChatMessage(role="developer", content="internal rules", additional_kwargs={"x": [1, 2]}),
    ChatMessage(role="chatbot", content="hi"),
    ChatMessage(role="model", content="hi"),
    ChatMessage(role="function", content="42", additional_kwargs={"name": "add"}),
    ChatMessage(role="tool", content="3", additional_kwargs={"tool_call_id": "call_1"}),
    ChatMessage(
        role="assistant",
        blocks=[
            TextBlock(text="let me add"),
            ToolCallBlock(tool_call_id="call_1", tool_name="add", tool_kwargs={"a": 1, "b": 2}),
        ],
    ),
    ChatMessage(
        role="assistant",
        content=None,
        additional_kwargs={
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "x"}'},
                }
            ]
        },
    ),
    ChatMessage(
        role="user",
        blocks=[
            TextBlock(text="what is this?"),
            ImageBlock(image=b"\x89PNG", image_mimetype="image/png"),
        ],
    ),
    ChatMessage(
        role="assistant",
        blocks=[ThinkingBlock(content="hmm", num_tokens=3), TextBlock(text="answer")],
    ),
    ChatMessage(role="user", content="ハロー héllo 👋", additional_kwargs={"name": "Ann"}),
]


@pytest.mark.parametrize("message", CASES, ids=lambda m: m.role.value)
def test_round_trip_in_memory(message: ChatMessage) -> None:
    assert to_llamaindex(from_llamaindex(message)) == message


@pytest.mark.parametrize("message", CASES, ids=lambda m: m.role.value)
def test_round_trip_through_the_store(message: ChatMessage, manager: MemoryManager) -> None:
    manager.save_message("s", from_llamaindex(message))
    (stored,) = manager.get_messages("s")
    assert to_llamaindex(stored) == message


def test_roles_harombe_lacks_are_mapped_and_restored() -> None:
    dev = from_llamaindex(ChatMessage(role=MessageRole.DEVELOPER, content="x"))
    assert (dev.role, dev.metadata[LI_KEY]["role"]) == ("system", "developer")
    assert from_llamaindex(ChatMessage(role="function", content="x")).role == "tool"
    assert from_llamaindex(ChatMessage(role="model", content="x")).role == "assistant"


def test_plain_messages_carry_no_reserved_metadata() -> None:
    assert from_llamaindex(ChatMessage(role="user", content="hi")).metadata == {}


def test_tool_calls_and_ids_are_first_class_fields() -> None:
    call = from_llamaindex(CASES[8])
    assert call.tool_calls == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
        }
    ]
    openai_shaped = from_llamaindex(CASES[9])
    assert openai_shaped.tool_calls is not None
    assert openai_shaped.tool_calls[0]["function"]["name"] == "lookup"
    result = from_llamaindex(CASES[7])
    assert (result.role, result.tool_call_id) == ("tool", "call_1")
    named = from_llamaindex(CASES[12])
    assert named.name == "Ann"
    # the text is what is counted and searched; the image stays in the reserved key
    image = from_llamaindex(CASES[10])
    assert image.content == "what is this?"
    assert [b["block_type"] for b in image.metadata[LI_KEY]["blocks"]] == ["text", "image"]


def test_caller_metadata_sits_beside_the_reserved_key() -> None:
    msg = from_llamaindex(ChatMessage(role="developer", content="x"), metadata={"topic": "a"})
    assert msg.metadata["topic"] == "a"
    assert msg.metadata[LI_KEY] == {"role": "developer"}


def test_messages_written_by_other_adapters_become_llamaindex_tool_calls() -> None:
    foreign = Message(
        role="assistant",
        content="",
        tool_calls=[{"id": "c7", "name": "search", "args": {"q": "cats"}, "type": "tool_call"}],
    )
    converted = to_llamaindex(foreign)
    blocks = [b for b in converted.blocks if isinstance(b, ToolCallBlock)]
    assert [(b.tool_call_id, b.tool_name, b.tool_kwargs) for b in blocks] == [
        ("c7", "search", {"q": "cats"})
    ]
    result = to_llamaindex(Message(role="tool", content="ok", tool_call_id="c7", name="search"))
    assert result.additional_kwargs == {"tool_call_id": "c7", "name": "search"}
