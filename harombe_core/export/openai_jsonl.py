"""The ``jsonl`` format: one OpenAI fine-tuning conversation per line. What that format has no
place for goes under the line's ``"harombe"`` key, so the line is still valid fine-tuning
data and importing it back restores everything.

A store's export also carries its users' facts (user memory): each fact record rides under
``"harombe": {"facts": [...]}`` of a line of its user (see
:func:`~harombe_core.export.records.place_facts`). Only an export with facts and no session
at all has a line without ``"messages"`` (:func:`facts_line`); drop it for fine-tuning.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from harombe_core.export import records
from harombe_core.export.records import (
    EXTRAS_KEY,
    FORMAT_VERSION,
    SessionRecord,
    session_fields,
)
from harombe_core.models import Message

__all__ = ["facts_line", "line_facts", "session_from_openai", "session_to_openai"]


def _openai_tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI ``{"id", "type": "function", "function": {"name", "arguments"}}`` tool call.

    LangChain's ``{"name", "args", "id"}`` shape is converted; anything unrecognised passes
    through unchanged (the original is kept in the extras either way).
    """
    function = call.get("function")
    if isinstance(function, Mapping):
        name, arguments = function.get("name"), function.get("arguments", "")
    elif "name" in call:
        name, arguments = call.get("name"), call.get("args", call.get("arguments", {}))
    else:
        return dict(call)
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    out: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call.get("id") is not None:
        out = {"id": call["id"], **out}
    return out


def session_to_openai(
    record: SessionRecord, facts: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """One session as one OpenAI fine-tuning example, with a ``"harombe"`` key for the rest.

    The session's system prompt becomes the leading ``system`` message, as the format expects.
    ``facts`` (``Fact.to_dict()`` records) ride under ``"harombe": {"facts": ...}``.
    """
    out_messages: list[dict[str, Any]] = []
    if record.system_prompt is not None:
        out_messages.append({"role": "system", "content": record.system_prompt})
    extras_messages: list[dict[str, Any]] = []
    for message in record.messages:
        item: dict[str, Any] = {"role": message.role, "content": message.content}
        extra: dict[str, Any] = {"created_at": message.created_at.isoformat()}
        if message.name is not None:
            item["name"] = message.name
        if message.tool_calls is not None:
            converted = [_openai_tool_call(c) for c in message.tool_calls]
            item["tool_calls"] = converted
            if converted != message.tool_calls:
                extra["tool_calls"] = message.tool_calls
        if message.tool_call_id is not None:
            item["tool_call_id"] = message.tool_call_id
        if message.metadata:
            extra["metadata"] = message.metadata
        if message.id is not None:
            extra["id"] = message.id
        if message.parent_id is not None:
            extra["parent_id"] = message.parent_id
        if message.id is not None and message.id in record.message_summaries:
            extra["summary"] = record.message_summaries[message.id]
        out_messages.append(item)
        extras_messages.append(extra)
    session: dict[str, Any] = {
        "session_id": record.session_id,
        "user_id": record.user_id,
        "system_prompt_first": record.system_prompt is not None,
        "metadata": record.metadata,
        "created_at": records.iso_time(record.created_at),
        "updated_at": records.iso_time(record.updated_at),
        "summary": record.summary,
        "summary_data": record.summary_data,
        "summary_until_id": record.summary_until_id,
    }
    if record.state is not None:
        session["state"] = record.state
    extras: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "session": session,
        "messages": extras_messages,
    }
    if facts:
        extras["facts"] = [dict(f) for f in facts]
    return {"messages": out_messages, EXTRAS_KEY: extras}


def facts_line(facts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The line of an export that has facts but no session to carry them."""
    return {EXTRAS_KEY: {"version": FORMAT_VERSION, "facts": [dict(f) for f in facts]}}


def line_facts(data: Any, where: str) -> tuple[list[Any], bool]:
    """The fact records a line (or a one-line file read as JSON) carries, and whether it is
    only that (:func:`facts_line`: no session to import)."""
    if not isinstance(data, Mapping):
        return [], False
    extras = data.get(EXTRAS_KEY)
    if not isinstance(extras, Mapping) or "facts" not in extras:
        return [], False
    facts = extras["facts"]
    if not isinstance(facts, list):
        raise records.format_error(where, f'"{EXTRAS_KEY}.facts" must be a list of fact records.')
    alone = "messages" not in data
    if alone:
        records.check_version(extras, f"{where}.{EXTRAS_KEY}")
    return facts, alone


def _openai_content(value: Any, metadata: dict[str, Any], at: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        # Multi-part content: keep the text readable and the parts themselves in metadata.
        texts = [
            p.get("text", "") for p in value if isinstance(p, Mapping) and p.get("type") == "text"
        ]
        metadata["openai_content_parts"] = value
        return "\n".join(t for t in texts if isinstance(t, str))
    raise records.format_error(
        at, f"content must be a string, null or a list of parts, got {type(value).__name__}."
    )


def session_from_openai(data: Any, *, where: str = "line 1") -> SessionRecord:
    """One OpenAI chat example (a JSONL line, parsed) as a record.

    With the ``"harombe"`` key everything is restored exactly; without it (a fine-tuning file
    from elsewhere) a leading ``system`` message becomes the session's system prompt and times
    are the time of import.
    """
    if not isinstance(data, Mapping):
        raise records.format_error(
            where, f'expected an object {{"messages": [...]}}, got {type(data).__name__}.'
        )
    raw = data.get("messages")
    if not isinstance(raw, list):
        raise records.format_error(
            where, 'no "messages" list; each line must be {"messages": [...]}.'
        )
    extras = data.get(EXTRAS_KEY)
    if extras is not None:
        if not isinstance(extras, Mapping):
            raise records.format_error(where, f'"{EXTRAS_KEY}" must be an object.')
        records.check_version(extras, f"{where}.{EXTRAS_KEY}")
    extras = extras or {}
    session = records.json_object(extras.get("session"), f"{where}.{EXTRAS_KEY}.session")
    extra_messages = extras.get("messages")
    if extra_messages is not None and not isinstance(extra_messages, list):
        raise records.format_error(where, f'"{EXTRAS_KEY}.messages" must be a list.')

    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise records.format_error(
                f"{where}.messages[{i}]", "a message must be an object with role and content."
            )
    system_first = session.get("system_prompt_first")
    if system_first is None:  # a foreign file: a leading system message is the system prompt
        system_first = bool(raw) and raw[0].get("role") == "system" and extras == {}
    system_prompt: str | None = None
    if system_first:
        if not raw or raw[0].get("role") != "system":
            raise records.format_error(
                where, "system_prompt_first is set but the first message is not a system message."
            )
        content = raw[0].get("content")
        system_prompt = _openai_content(content, {}, f"{where}.messages[0]")
        raw = raw[1:]
    if extra_messages is not None and len(extra_messages) != len(raw):
        raise records.format_error(
            where,
            f'"{EXTRAS_KEY}.messages" has {len(extra_messages)} entries for {len(raw)} messages; '
            "the line was edited by hand. Fix or drop the extras.",
        )

    messages: list[Message] = []
    summaries: dict[int, dict[str, Any]] = {}
    offset = 1 if system_first else 0
    for i, item in enumerate(raw):
        at = f"{where}.messages[{i + offset}]"
        extra = extra_messages[i] if extra_messages is not None else {}
        extra = records.json_object(extra, f"{where}.{EXTRAS_KEY}.messages[{i}]")
        metadata = dict(records.json_object(extra.get("metadata"), f"{at}.metadata"))
        fields: dict[str, Any] = {
            "role": item.get("role"),
            "content": _openai_content(item.get("content"), metadata, at),
            "name": item.get("name"),
            "tool_calls": extra["tool_calls"] if "tool_calls" in extra else item.get("tool_calls"),
            "tool_call_id": item.get("tool_call_id"),
            "metadata": metadata,
            "created_at": records.parse_time(extra.get("created_at"), f"{at}.created_at"),
            "id": records.optional_int(extra.get("id"), f"{at}.id"),
            "parent_id": records.optional_int(extra.get("parent_id"), f"{at}.parent_id"),
        }
        message = records.message_from(fields, at)
        summary = records.summary_field(extra.get("summary"), f"{at}.summary")
        if summary is not None and message.id is not None:
            summaries[message.id] = summary
        messages.append(message)

    ids = [m.id for m in messages if m.id is not None]
    if len(ids) != len(set(ids)):
        raise records.format_error(where, "two messages share an id.")
    for m in messages:
        if m.parent_id is not None and m.parent_id not in ids:
            raise records.format_error(
                where, f"message {m.id} has parent_id {m.parent_id}, which is not on this line."
            )

    return SessionRecord(
        messages=messages,
        system_prompt=system_prompt,
        message_summaries=summaries,
        **session_fields(session, f"{where}.{EXTRAS_KEY}.session", "metadata"),
    )
