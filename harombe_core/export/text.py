"""The ``text`` format: a readable transcript (write-only)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from harombe_core.export.records import SessionRecord

__all__ = ["describe_tool_call", "facts_transcript", "transcript"]


def describe_tool_call(call: Mapping[str, Any]) -> str:
    """``name(arguments) [id ...]`` for a tool call in OpenAI or LangChain shape."""
    function = call.get("function")
    if isinstance(function, Mapping):
        name, args = function.get("name"), function.get("arguments", "")
    else:
        name, args = call.get("name"), call.get("args", call.get("arguments", ""))
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    ident = f" [id {call['id']}]" if call.get("id") is not None else ""
    return f"{name}({args}){ident}"


def transcript(record: SessionRecord) -> str:
    """A readable transcript of one session: a header, the system prompt, then each message."""
    header = f"Session {record.session_id or '(unsaved)'}"
    details = []
    if record.user_id is not None:
        details.append(f"user {record.user_id}")
    details.append(f"{len(record.messages)} messages")
    if record.created_at is not None:
        details.append(f"started {record.created_at:%Y-%m-%d %H:%M} UTC")
    lines = [f"{header} ({', '.join(details)})"]
    if record.system_prompt is not None:
        lines.append(f"System prompt: {record.system_prompt}")
    lines.append("")
    for m in record.messages:
        who = m.role + (f" ({m.name})" if m.name else "")
        if m.tool_call_id is not None:
            who += f" [call {m.tool_call_id}]"
        body = m.content.replace("\n", "\n    ")
        lines.append(f"[{m.created_at:%Y-%m-%d %H:%M:%S}] {who}:{' ' if body else ''}{body}")
        for call in m.tool_calls or []:
            lines.append(f"    -> tool call {describe_tool_call(call)}")
    return "\n".join(lines) + "\n"


def facts_transcript(facts: Sequence[Mapping[str, Any]]) -> list[str]:
    """The user-memory section of a store's transcript: each user's facts (history included,
    with when each held and where it came from); empty without facts."""
    if not facts:
        return []
    lines = ["User memory"]
    for fact in facts:
        kind = fact.get("kind")
        label = (
            ""
            if kind == "fact"
            else f" ({kind}{', ' + fact['status'] if fact.get('status') else ''})"
        )
        held = f"from {str(fact.get('valid_from'))[:10]}"
        if fact.get("valid_to") is not None:
            held += f" to {str(fact['valid_to'])[:10]}"
        sources = ", ".join(
            f"{s}#{m}" if m is not None else str(s) for s, m in fact.get("sources") or []
        )
        line = f"- [{fact.get('user_id')}] {fact.get('text')}{label}, {held}"
        lines.append(line + (f" (from {sources})" if sources else ""))
    return ["\n".join(lines) + "\n"]
