"""The one place LangChain messages become harombe messages, and back.

harombe stores what every framework shares (role, plain-text content, name, tool calls,
tool_call_id) in its own columns, so keyword search, embeddings and token counts see real text.
Everything LangChain has beyond that (the message ``id``, ``additional_kwargs``, ``example``,
``response_metadata``, ``usage_metadata``, ``invalid_tool_calls``, a ToolMessage's ``artifact``
and ``status``, a ChatMessage's custom role, list-of-parts content) is kept under one reserved
metadata key, :data:`LC_KEY`, so :func:`to_langchain` rebuilds the exact message that was saved.
Messages written by other front ends (no :data:`LC_KEY`) are rebuilt from the shared columns.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from harombe_core.errors import InvalidMessageError
from harombe_core.models import MAX_CONTENT_CHARS, Message

__all__ = ["LC_KEY", "PARTIAL_KEY", "from_langchain", "storable_message", "to_langchain"]

#: Metadata key reserved for the LangChain fields harombe has no column for.
LC_KEY = "lc"
#: Metadata key marking a message kept in a storable form (see :func:`storable_message`).
PARTIAL_KEY = "harombe_partial"

_TYPE_TO_ROLE = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_CHAT_ROLE_TO_ROLE = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
}


def from_langchain(message: BaseMessage, *, metadata: dict[str, Any] | None = None) -> Message:
    """A harombe :class:`Message` holding everything ``message`` carries.

    ``metadata`` is merged into the message's metadata (the :data:`LC_KEY` entry is ours).
    Raises InvalidMessageError for a message type or a value that cannot be stored as JSON.
    """
    if not isinstance(message, BaseMessage):
        raise InvalidMessageError(
            f"expected a LangChain BaseMessage, got {type(message).__name__}; build one with "
            "HumanMessage(...)/AIMessage(...) or langchain_core.messages.convert_to_messages."
        )
    lc: dict[str, Any] = {"type": _base_type(message)}
    if message.id is not None:
        lc["id"] = message.id
    if message.additional_kwargs:
        lc["additional_kwargs"] = message.additional_kwargs
    if message.response_metadata:
        lc["response_metadata"] = message.response_metadata
    if not isinstance(message.content, str):
        lc["content"] = message.content
    if getattr(message, "example", False):  # a few-shot example (Human/AIMessage)
        lc["example"] = True
    role: str
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    if isinstance(message, AIMessage):
        role = "assistant"
        tool_calls = [dict(call) for call in message.tool_calls] or None
        if message.invalid_tool_calls:
            lc["invalid_tool_calls"] = [dict(c) for c in message.invalid_tool_calls]
        if message.usage_metadata is not None:
            lc["usage_metadata"] = dict(message.usage_metadata)
    elif isinstance(message, ToolMessage):
        role = "tool"
        tool_call_id = message.tool_call_id
        if message.artifact is not None:
            lc["artifact"] = message.artifact
        if message.status != "success":
            lc["status"] = message.status
    elif isinstance(message, ChatMessage):
        role = _CHAT_ROLE_TO_ROLE.get(message.role, "user")
        lc["role"] = message.role
    elif isinstance(message, FunctionMessage):
        role = "tool"
    elif isinstance(message, (HumanMessage, SystemMessage)):
        role = _TYPE_TO_ROLE[message.type]
    else:
        raise InvalidMessageError(
            f"cannot store a LangChain {type(message).__name__} (type {message.type!r}); "
            "convert it to a Human/AI/System/Tool/ChatMessage first."
        )
    merged = dict(metadata or {})
    merged[LC_KEY] = lc
    return Message(
        role=role,  # type: ignore[arg-type]
        content=message.text,
        name=message.name,
        tool_calls=tool_calls,
        tool_call_id=tool_call_id,
        metadata=merged,
    )


def storable_message(message: BaseMessage) -> Message:
    """:func:`from_langchain`, or, for a message harombe cannot store as it is, its text made
    storable.

    For copies of messages whose whole form is kept elsewhere (a LangGraph checkpoint): a
    message with NUL bytes, lone surrogates, text beyond the size limit or extras that are not
    JSON must still be searchable rather than fail the write. Its row then keeps the readable
    text (cleaned, cut to the limit), role, name, id and JSON tool calls, and
    ``metadata[PARTIAL_KEY]`` says why it is partial.
    """
    try:
        return from_langchain(message)
    except InvalidMessageError as exc:
        problem = str(exc)
    update: dict[str, Any] = {
        "content": _clean(message.text, MAX_CONTENT_CHARS),
        "name": None if message.name is None else _clean(message.name, 10_000),
        "additional_kwargs": {},
        "response_metadata": {},
    }
    if isinstance(message, AIMessage):
        update.update(invalid_tool_calls=[], usage_metadata=None)
        if not _is_json(message.tool_calls):
            update["tool_calls"] = []
    elif isinstance(message, ToolMessage):
        update.update(artifact=None, tool_call_id=_clean(message.tool_call_id, 10_000))
    elif isinstance(message, ChatMessage):
        update["role"] = _clean(message.role, 100)
    plain = message.model_copy(update=update)
    return from_langchain(plain, metadata={PARTIAL_KEY: problem[:500]})


def _clean(text: str, limit: int) -> str:
    """``text`` without NUL bytes or lone surrogates, cut to ``limit`` characters."""
    text = text.replace("\x00", "")
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text[:limit]


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _base_type(message: BaseMessage) -> str:
    # By class, not by ``message.type``: a chunk ("AIMessageChunk") is stored as the message it
    # adds up to ("ai").
    for cls, kind in _KINDS:
        if isinstance(message, cls):
            return kind
    return str(message.type)


_KINDS: tuple[tuple[type[BaseMessage], str], ...] = (
    (AIMessage, "ai"),
    (HumanMessage, "human"),
    (SystemMessage, "system"),
    (ToolMessage, "tool"),
    (ChatMessage, "chat"),
    (FunctionMessage, "function"),
)


def to_langchain(message: Message) -> BaseMessage:
    """The LangChain message ``message`` was saved from (or the natural one for its role)."""
    lc: dict[str, Any] = message.metadata.get(LC_KEY) or {}
    content: Any = lc.get("content", message.content)
    common: dict[str, Any] = {
        "content": content,
        "id": lc.get("id"),
        "name": message.name,
        "additional_kwargs": lc.get("additional_kwargs") or {},
        "response_metadata": lc.get("response_metadata") or {},
    }
    # Only a few-shot example passes the flag: an explicit False would still compare unequal.
    example: dict[str, Any] = {"example": True} if lc.get("example") else {}
    kind = lc.get("type") or {
        "user": "human",
        "assistant": "ai",
        "system": "system",
        "tool": "tool",
    }[message.role]
    if kind == "ai":
        return AIMessage(
            **common,
            **example,
            tool_calls=[_tool_call(c) for c in message.tool_calls or []],
            invalid_tool_calls=lc.get("invalid_tool_calls") or [],
            usage_metadata=lc.get("usage_metadata"),
        )
    if kind == "tool":
        return ToolMessage(
            **common,
            tool_call_id=message.tool_call_id or "",
            artifact=lc.get("artifact"),
            status=lc.get("status", "success"),
        )
    if kind == "chat":
        return ChatMessage(**common, role=lc.get("role", message.role))
    if kind == "function":
        return FunctionMessage(**{**common, "name": message.name or ""})
    if kind == "system":
        return SystemMessage(**common)
    return HumanMessage(**common, **example)


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """A LangChain ToolCall from either LangChain's shape or OpenAI's ``function`` shape.

    Tool calls written by other front ends can hold any JSON, so each part is taken only if
    it has the type LangChain requires (arguments that are not a JSON object are kept whole
    under ``"__raw__"``), and reading a history never fails on them.
    """
    nested = call.get("function")
    if isinstance(nested, dict) and "name" not in call:
        raw: Any = nested.get("arguments") or "{}"
        name = nested.get("name")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except (ValueError, RecursionError):  # ValueError: also ints too long to read
            args = None
    else:
        raw = call.get("args") or {}
        name, args = call.get("name"), raw
    call_id = call.get("id")
    return {
        "name": name if isinstance(name, str) else "",
        "args": args if isinstance(args, dict) else {"__raw__": raw},
        "id": call_id if isinstance(call_id, str) else None,
        "type": "tool_call",
    }
