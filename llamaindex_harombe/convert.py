"""One function each way between LlamaIndex ``ChatMessage`` and harombe ``Message``.

harombe keeps the plain text in ``content`` (what is counted, searched and embedded) and the
fields every framework shares (``name``, ``tool_calls``, ``tool_call_id``). Whatever LlamaIndex
has beyond that (``additional_kwargs``, multi-part ``blocks`` such as images, roles harombe does
not have such as ``developer`` or ``function``) is kept under the reserved metadata key
:data:`LI_KEY`, so a message read back is the message that was put.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    MessageRole,
    TextBlock,
    ToolCallBlock,
)
from pydantic_core import to_jsonable_python

from harombe_core.errors import InvalidMessageError
from harombe_core.models import Message
from harombe_core.validate import check_list

__all__ = ["LI_KEY", "from_llamaindex", "from_llamaindex_list", "to_llamaindex"]

#: The metadata key under which LlamaIndex-only data is kept.
LI_KEY = "li"

_ROLE_TO_HAROMBE: dict[str, str] = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "tool": "tool",
    "developer": "system",
    "function": "tool",
    "chatbot": "assistant",
    "model": "assistant",
}


def _jsonable(value: Any) -> Any:
    # Provider objects (OpenAI tool-call models, ToolSelection...) become plain JSON; bytes become
    # base64 through pydantic, which is how LlamaIndex itself serialises blocks.
    try:
        return to_jsonable_python(value, fallback=str, bytes_mode="base64")
    except (ValueError, RecursionError) as exc:  # nested too deeply, or an int too long
        raise InvalidMessageError(
            f"a message's additional_kwargs or blocks cannot be stored as JSON ({exc})."
        ) from None


def _dumped(block: Any) -> Any:
    """A block as LlamaIndex serialises it (JSON mode), or a typed error if it cannot be."""
    try:
        return block.model_dump(mode="json")
    except (ValueError, RecursionError) as exc:
        raise InvalidMessageError(f"a message block cannot be stored as JSON ({exc}).") from None


def _tool_call_from_block(block: ToolCallBlock) -> dict[str, Any]:
    args = block.tool_kwargs
    arguments = args if isinstance(args, str) else json.dumps(_jsonable(args), ensure_ascii=False)
    return {
        "id": block.tool_call_id,
        "type": "function",
        "function": {"name": block.tool_name, "arguments": arguments},
    }


def _tool_call_from_kwargs(call: Any) -> dict[str, Any] | None:
    data = _jsonable(call)
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("function"), dict):  # OpenAI shape
        fn = data["function"]
        args = fn.get("arguments", "")
        return {
            "id": data.get("id"),
            "type": "function",
            "function": {
                "name": fn.get("name", ""),
                "arguments": args if isinstance(args, str) else json.dumps(args),
            },
        }
    if "tool_name" in data:  # LlamaIndex ToolSelection shape
        args = data.get("tool_kwargs", {})
        return {
            "id": data.get("tool_id"),
            "type": "function",
            "function": {
                "name": data["tool_name"],
                "arguments": args if isinstance(args, str) else json.dumps(args),
            },
        }
    return None


def from_llamaindex(message: ChatMessage, *, metadata: dict[str, Any] | None = None) -> Message:
    """A harombe Message carrying everything in ``message`` (see the module docstring).

    ``metadata`` adds the caller's own keys beside the reserved one.
    """
    if not isinstance(message, ChatMessage):
        raise InvalidMessageError(
            f"expected a LlamaIndex ChatMessage, got {type(message).__name__}; build one with "
            "ChatMessage(role='user', content='...')."
        )
    role = message.role.value if isinstance(message.role, MessageRole) else str(message.role)
    kwargs = dict(message.additional_kwargs or {})
    text = message.content or ""
    tool_calls: list[dict[str, Any]] = []
    for block in message.blocks:
        if isinstance(block, ToolCallBlock):
            tool_calls.append(_tool_call_from_block(block))
    if not tool_calls:
        for call in kwargs.get("tool_calls") or ():
            converted = _tool_call_from_kwargs(call)
            if converted is not None:
                tool_calls.append(converted)
    extra: dict[str, Any] = {}
    if _ROLE_TO_HAROMBE.get(role, "user") != role:
        extra["role"] = role
    plain = len(message.blocks) == 1 and isinstance(message.blocks[0], TextBlock)
    if not plain:
        extra["blocks"] = [_dumped(b) for b in message.blocks]
    if kwargs:
        extra["additional_kwargs"] = _jsonable(kwargs)
    tool_call_id = kwargs.get("tool_call_id")
    name = kwargs.get("name")
    meta = dict(metadata or {})
    if extra:
        meta[LI_KEY] = extra
    return Message(
        role=_ROLE_TO_HAROMBE.get(role, "user"),  # type: ignore[arg-type]
        content=text,
        name=name if isinstance(name, str) else None,
        tool_calls=tool_calls or None,
        tool_call_id=str(tool_call_id) if tool_call_id is not None else None,
        metadata=meta,
    )


def from_llamaindex_list(
    messages: Any, what: str, *, metadata: dict[str, Any] | None = None
) -> list[Message]:
    """:func:`from_llamaindex` for the messages given to ``what`` (a lone one is refused)."""
    batch = check_list(
        messages,
        what,
        of="ChatMessages",
        single=(ChatMessage,),
        error=InvalidMessageError,
        hint="wrap a single ChatMessage in a list",
    )
    return [from_llamaindex(m, metadata=metadata) for m in batch]


def _blocks_for_tool_calls(calls: list[dict[str, Any]]) -> list[ToolCallBlock]:
    blocks = []
    for call in calls:
        nested = call.get("function")
        fn: dict[str, Any] = nested if isinstance(nested, dict) else call
        args: Any = fn.get("arguments", fn.get("args", {}))
        if isinstance(args, str):
            # Arguments that are not JSON (a model's malformed output) are kept as the string.
            with contextlib.suppress(ValueError, RecursionError):  # also ints too long to read
                args = json.loads(args) if args else {}
        blocks.append(
            ToolCallBlock(
                tool_call_id=call.get("id"), tool_name=str(fn.get("name", "")), tool_kwargs=args
            )
        )
    return blocks


def to_llamaindex(message: Message) -> ChatMessage:
    """The LlamaIndex ChatMessage for ``message``; inverse of :func:`from_llamaindex`.

    A message written by another adapter (no LlamaIndex data) gets its tool calls as
    ``ToolCallBlock``s and its ``tool_call_id`` / ``name`` in ``additional_kwargs``, where
    LlamaIndex's LLM integrations look for them.
    """
    extra = message.metadata.get(LI_KEY)
    extra = extra if isinstance(extra, dict) else {}
    role = extra.get("role", message.role)
    if "additional_kwargs" in extra:
        kwargs = dict(extra["additional_kwargs"])
    else:
        kwargs = {}
        if message.tool_call_id is not None:
            kwargs["tool_call_id"] = message.tool_call_id
        if message.name is not None:
            kwargs["name"] = message.name
    if "blocks" in extra:
        return ChatMessage.model_validate(
            {"role": role, "blocks": extra["blocks"], "additional_kwargs": kwargs}
        )
    blocks: list[Any] = [TextBlock(text=message.content)]
    if message.tool_calls and "additional_kwargs" not in extra:
        blocks.extend(_blocks_for_tool_calls(message.tool_calls))
    return ChatMessage(role=MessageRole(role), blocks=blocks, additional_kwargs=kwargs)
