"""Export sessions to files and import them back, losing nothing on the way.

Three formats:

``json``
    The unified chat-memory persistence format (``version``, ``metadata``, ``nodes`` with
    ``parent_id``, ``edges``), one session per document; a whole store is a bundle
    ``{"version", "metadata", "sessions": [...]}``. Every field of every message is kept, so it
    is the format for backups and for moving memory between machines.
``jsonl``
    The OpenAI chat fine-tuning format: one conversation per line, ``{"messages": [...]}`` with
    only the keys that format knows. What it has no place for (times, metadata, ids, threads,
    session fields) goes under a separate top-level ``"harombe"`` key, so a line is still valid
    fine-tuning data and importing it back restores everything.
``text``
    A readable transcript. Write-only.

The converters (:func:`session_to_dict`, :func:`session_from_dict`, :func:`session_to_openai`,
:func:`session_from_openai`, :func:`transcript`) are pure functions over
:class:`SessionRecord`, so anything holding messages in memory can reuse them; the store-facing
functions (:func:`export_store`, :func:`import_file`, ...) add file I/O and transactions.

An import is all or nothing. The file is validated completely before anything is written (a
file with one bad message anywhere changes nothing in the store), then written in one
transaction, so a failure or a killed process part-way leaves the store as it was and the same
import can be run again. Files are streamed a session at a time (:mod:`harombe_core.jsonstream`),
so a large export needs no more memory than its largest session.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import itertools
import json
import os
import re
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from harombe_core.errors import (
    ExportPathError,
    ImportFormatError,
    InvalidInputError,
    InvalidMessageError,
    SessionNotFoundError,
)
from harombe_core.jsonstream import JsonPart, json_document, json_parts, jsonl_values, sniff
from harombe_core.models import Message, Session, utc_now

if TYPE_CHECKING:
    from harombe_core.manager import MemoryManager

__all__ = [
    "EXPORT_FORMATS",
    "FORMAT_VERSION",
    "ExportFormat",
    "ImportResult",
    "SessionRecord",
    "aexport_store",
    "aimport_file",
    "describe_tool_call",
    "dumps",
    "export_store",
    "export_to_directory",
    "import_file",
    "import_records",
    "iter_records",
    "loads",
    "messages_from_dict",
    "messages_to_dict",
    "read_records",
    "read_session",
    "resolve_output_path",
    "safe_filename",
    "session_from_dict",
    "session_from_openai",
    "session_to_dict",
    "session_to_openai",
    "transcript",
    "write_records",
    "write_text",
]

#: Version written into every JSON export; files of another major version are refused.
FORMAT_VERSION = "1.0"
ExportFormat = Literal["json", "jsonl", "text"]
EXPORT_FORMATS: tuple[str, ...] = ("json", "jsonl", "text")
#: Top-level key of a JSONL line that carries what the OpenAI format has no place for.
EXTRAS_KEY = "harombe"
_EXTENSIONS = {"json": ".json", "jsonl": ".jsonl", "text": ".txt"}
_OPENAI_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")
_MAX_ID_CHARS = 512


@dataclass(slots=True)
class SessionRecord:
    """One session as it travels through a file: its fields, its messages, their summaries.

    ``messages`` keep the ids they had where they came from (``id`` and ``parent_id`` describe the
    thread inside the file); importing assigns new ids and rewires ``parent_id`` to them.
    ``message_summaries`` maps those ids to the per-message ``{"title", "summary"}``.
    """

    messages: list[Message]
    session_id: str | None = None
    user_id: str | None = None
    system_prompt: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    summary: str | None = None
    summary_data: dict[str, Any] | None = None
    summary_until_id: int | None = None
    message_summaries: dict[int, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_session(
        cls,
        session: Session | None,
        messages: Sequence[Message],
        summaries: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> SessionRecord:
        """A record from a stored session (or ``None`` for loose messages) and its messages."""
        record = cls(
            messages=list(messages),
            message_summaries={int(k): dict(v) for k, v in (summaries or {}).items()},
        )
        if session is not None:
            record.session_id = session.id
            record.user_id = session.user_id
            record.system_prompt = session.system_prompt
            record.metadata = dict(session.metadata)
            record.created_at = session.created_at
            record.updated_at = session.updated_at
            record.summary = session.summary
            record.summary_data = session.summary_data
            record.summary_until_id = session.summary_until_id
        return record


@dataclass(slots=True)
class ImportResult:
    """What an import wrote: the session ids created (in file order), and what it skipped."""

    session_ids: list[str] = field(default_factory=list)
    messages: int = 0
    skipped: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# small helpers


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _fail(where: str, problem: str) -> ImportFormatError:
    return ImportFormatError(f"{where}: {problem}")


def _parse_time(value: Any, where: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise _fail(where, f"{value!r} is not an ISO 8601 time.") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise _fail(where, f"a time must be an ISO 8601 string, got {type(value).__name__}.")


def _opt_str(value: Any, where: str, *, identifier: bool = False) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _fail(where, f"must be a string or null, got {type(value).__name__}.")
    if identifier and (not value or len(value) > _MAX_ID_CHARS or "\x00" in value):
        raise _fail(where, f"must be 1-{_MAX_ID_CHARS} characters without NUL bytes.")
    return value


def _opt_int(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, f"must be an integer or null, got {value!r:.60}.")
    return value


def _json_dict(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _fail(where, "must be a JSON object.")
    return value


def _summary(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _fail(where, 'a summary must be an object like {"title": ..., "summary": ...}.')
    return dict(value)


def _check_version(data: Mapping[str, Any], where: str) -> None:
    version = data.get("version")
    if version is None:
        raise _fail(
            where, f'no "version" key; a harombe JSON export has "version": "{FORMAT_VERSION}".'
        )
    if not isinstance(version, (str, int, float)) or str(version).split(".")[0] != "1":
        raise _fail(
            where,
            f"format version {version!r} is not supported (this harombe reads version 1.x); "
            "export it again with a matching harombe or upgrade harombe.",
        )


def _message(fields: Mapping[str, Any], where: str) -> Message:
    try:
        return Message.from_dict(fields)
    except InvalidMessageError as exc:
        raise _fail(where, str(exc)) from exc


# --------------------------------------------------------------------------------------------
# JSON (unified chat-memory format)


def _edges(messages: Sequence[Message]) -> list[dict[str, int]]:
    return [
        {"from": m.parent_id, "to": m.id}
        for m in messages
        if m.parent_id is not None and m.id is not None
    ]


def _node(message: Message, index: int, summary: Mapping[str, Any] | None) -> dict[str, Any]:
    created = message.created_at.isoformat()
    node: dict[str, Any] = {
        "id": message.id if message.id is not None else index + 1,
        "role": message.role,
        "content": message.content,
        "name": message.name,
        "tool_calls": message.tool_calls,
        "tool_call_id": message.tool_call_id,
        "metadata": message.metadata,
        "created_at": created,
        "timestamp": created,
        "parent_id": message.parent_id,
    }
    if summary is not None:
        node["summary"] = dict(summary)
    return node


def session_to_dict(
    record: SessionRecord,
    *,
    mode: str | None = None,
    exported_at: datetime | None = None,
) -> dict[str, Any]:
    """One session as a unified chat-memory JSON document (a plain ``dict``, ready to dump).

    ``mode`` is ``"graph"`` when any message has a parent, else ``"linear"``, unless given.
    Node ids are the messages' own ids (their position, 1-based, when they have none).
    """
    messages = record.messages
    threaded = any(m.parent_id is not None for m in messages)
    metadata: dict[str, Any] = {
        "created_at": _iso(record.created_at or (messages[0].created_at if messages else None)),
        "last_modified": _iso(exported_at or utc_now()),
        "mode": mode or ("graph" if threaded else "linear"),
        "total_messages": len(messages),
        "session_id": record.session_id,
        "user_id": record.user_id,
        "system_prompt": record.system_prompt,
        "session_metadata": record.metadata,
        "updated_at": _iso(record.updated_at),
        "summary": record.summary,
        "summary_data": record.summary_data,
        "summary_until_id": record.summary_until_id,
    }
    return {
        "version": FORMAT_VERSION,
        "metadata": metadata,
        "nodes": [
            _node(m, i, record.message_summaries.get(m.id) if m.id is not None else None)
            for i, m in enumerate(messages)
        ],
        "edges": _edges(messages),
    }


def session_from_dict(data: Any, *, where: str = "session") -> SessionRecord:
    """Validate one JSON session document and return it as a record (no store involved).

    Accepts what :func:`session_to_dict` writes and the plain unified chat-memory format
    (``timestamp`` instead of ``created_at``; parents given only by ``edges``). Raises
    :class:`ImportFormatError` naming the first thing that is wrong.
    """
    if not isinstance(data, Mapping):
        raise _fail(
            where,
            f"expected a JSON object with version, metadata and nodes, got {type(data).__name__}.",
        )
    _check_version(data, where)
    meta = _json_dict(data.get("metadata"), f"{where}.metadata")
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        raise _fail(where, '"nodes" must be a list of messages.')
    edges = data.get("edges", [])
    if not isinstance(edges, list):
        raise _fail(where, '"edges" must be a list of {"from": id, "to": id}.')

    messages: list[Message] = []
    summaries: dict[int, dict[str, Any]] = {}
    seen: set[int] = set()
    for i, node in enumerate(nodes):
        at = f"{where}.nodes[{i}]"
        if not isinstance(node, Mapping):
            raise _fail(at, "a node must be an object with role and content.")
        node_id = _opt_int(node.get("id"), f"{at}.id")
        if node_id is None:
            node_id = i + 1
        if node_id in seen:
            raise _fail(at, f"node id {node_id} appears twice.")
        seen.add(node_id)
        fields = {k: node.get(k) for k in ("role", "content", "name", "tool_calls", "tool_call_id")}
        fields["metadata"] = _json_dict(node.get("metadata"), f"{at}.metadata")
        created = node.get("created_at", node.get("timestamp"))
        fields["created_at"] = _parse_time(created, f"{at}.created_at")
        fields["id"] = node_id
        fields["parent_id"] = _opt_int(node.get("parent_id"), f"{at}.parent_id")
        message = _message(fields, at)
        summary = _summary(node.get("summary"), f"{at}.summary")
        if summary is not None:
            summaries[node_id] = summary
        messages.append(message)

    by_id = {m.id: m for m in messages}
    for j, edge in enumerate(edges):
        at = f"{where}.edges[{j}]"
        if not isinstance(edge, Mapping):
            raise _fail(at, 'an edge must be {"from": id, "to": id}.')
        src, dst = _opt_int(edge.get("from"), f"{at}.from"), _opt_int(edge.get("to"), f"{at}.to")
        if src not in by_id or dst not in by_id:
            raise _fail(at, f"edge {src} -> {dst} names a node that is not in the file.")
        target = by_id[dst]
        if target.parent_id is None:
            target.parent_id = src
        elif target.parent_id != src:
            raise _fail(at, f"node {dst} has parent_id {target.parent_id} but an edge from {src}.")
    for message in messages:
        if message.parent_id is not None and message.parent_id not in by_id:
            raise _fail(
                f"{where}.nodes",
                f"node {message.id} has parent_id {message.parent_id}, which is not in the file.",
            )

    return SessionRecord(
        messages=messages,
        session_id=_opt_str(
            meta.get("session_id"), f"{where}.metadata.session_id", identifier=True
        ),
        user_id=_opt_str(meta.get("user_id"), f"{where}.metadata.user_id", identifier=True),
        system_prompt=_opt_str(meta.get("system_prompt"), f"{where}.metadata.system_prompt"),
        metadata=_json_dict(meta.get("session_metadata"), f"{where}.metadata.session_metadata"),
        created_at=_parse_time(meta.get("created_at"), f"{where}.metadata.created_at"),
        updated_at=_parse_time(meta.get("updated_at"), f"{where}.metadata.updated_at"),
        summary=_opt_str(meta.get("summary"), f"{where}.metadata.summary"),
        summary_data=_summary(meta.get("summary_data"), f"{where}.metadata.summary_data"),
        summary_until_id=_opt_int(
            meta.get("summary_until_id"), f"{where}.metadata.summary_until_id"
        ),
        message_summaries=summaries,
    )


def messages_to_dict(
    messages: Sequence[Message],
    *,
    summaries: Mapping[int, Mapping[str, Any]] | None = None,
    session: Session | None = None,
    mode: str | None = None,
) -> dict[str, Any]:
    """Messages (optionally with their session and per-message summaries) as a JSON document.

    The shortcut for in-memory conversations: ``parent_id`` links and ids are written as they
    are, so a threaded conversation keeps its shape.
    """
    return session_to_dict(SessionRecord.from_session(session, messages, summaries), mode=mode)


def messages_from_dict(data: Any) -> list[Message]:
    """The messages of a JSON session document, with the ids and ``parent_id`` it gave them."""
    return session_from_dict(data).messages


def bundle_to_dict(records: Iterable[SessionRecord]) -> dict[str, Any]:
    """Several sessions (a whole store) as one JSON document."""
    now = utc_now()
    sessions = [session_to_dict(r, exported_at=now) for r in records]
    return {
        "version": FORMAT_VERSION,
        "metadata": {
            "kind": "harombe-store",
            "exported_at": now.isoformat(),
            "total_sessions": len(sessions),
        },
        "sessions": sessions,
    }


def _records_from_json(data: Any) -> list[SessionRecord]:
    if isinstance(data, list):
        return [session_from_dict(s, where=f"sessions[{i}]") for i, s in enumerate(data)]
    if isinstance(data, Mapping) and "sessions" in data:
        _check_version(data, "file")
        sessions = data["sessions"]
        if not isinstance(sessions, list):
            raise _fail("file", '"sessions" must be a list of session documents.')
        return [session_from_dict(s, where=f"sessions[{i}]") for i, s in enumerate(sessions)]
    if isinstance(data, Mapping) and "nodes" in data:
        return [session_from_dict(data, where="file")]
    if isinstance(data, Mapping) and "messages" in data:
        return [session_from_openai(data, where="file")]
    raise _fail(
        "file",
        'not a harombe export: expected a JSON object with "nodes" (one session), '
        '"sessions" (a store), or "messages" (OpenAI chat format).',
    )


# --------------------------------------------------------------------------------------------
# JSONL (OpenAI chat fine-tuning format)


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


def session_to_openai(record: SessionRecord) -> dict[str, Any]:
    """One session as one OpenAI fine-tuning example, with a ``"harombe"`` key for the rest.

    The session's system prompt becomes the leading ``system`` message, as the format expects.
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
        "created_at": _iso(record.created_at),
        "updated_at": _iso(record.updated_at),
        "summary": record.summary,
        "summary_data": record.summary_data,
        "summary_until_id": record.summary_until_id,
    }
    return {
        "messages": out_messages,
        EXTRAS_KEY: {"version": FORMAT_VERSION, "session": session, "messages": extras_messages},
    }


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
    raise _fail(
        at, f"content must be a string, null or a list of parts, got {type(value).__name__}."
    )


def session_from_openai(data: Any, *, where: str = "line 1") -> SessionRecord:
    """One OpenAI chat example (a JSONL line, parsed) as a record.

    With the ``"harombe"`` key everything is restored exactly; without it (a fine-tuning file
    from elsewhere) a leading ``system`` message becomes the session's system prompt and times
    are the time of import.
    """
    if not isinstance(data, Mapping):
        raise _fail(where, f'expected an object {{"messages": [...]}}, got {type(data).__name__}.')
    raw = data.get("messages")
    if not isinstance(raw, list):
        raise _fail(where, 'no "messages" list; each line must be {"messages": [...]}.')
    extras = data.get(EXTRAS_KEY)
    if extras is not None:
        if not isinstance(extras, Mapping):
            raise _fail(where, f'"{EXTRAS_KEY}" must be an object.')
        _check_version(extras, f"{where}.{EXTRAS_KEY}")
    extras = extras or {}
    session = _json_dict(extras.get("session"), f"{where}.{EXTRAS_KEY}.session")
    extra_messages = extras.get("messages")
    if extra_messages is not None and not isinstance(extra_messages, list):
        raise _fail(where, f'"{EXTRAS_KEY}.messages" must be a list.')

    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise _fail(
                f"{where}.messages[{i}]", "a message must be an object with role and content."
            )
    system_first = session.get("system_prompt_first")
    if system_first is None:  # a foreign file: a leading system message is the system prompt
        system_first = bool(raw) and raw[0].get("role") == "system" and extras == {}
    system_prompt: str | None = None
    if system_first:
        if not raw or raw[0].get("role") != "system":
            raise _fail(
                where, "system_prompt_first is set but the first message is not a system message."
            )
        content = raw[0].get("content")
        system_prompt = _openai_content(content, {}, f"{where}.messages[0]")
        raw = raw[1:]
    if extra_messages is not None and len(extra_messages) != len(raw):
        raise _fail(
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
        extra = _json_dict(extra, f"{where}.{EXTRAS_KEY}.messages[{i}]")
        metadata = dict(_json_dict(extra.get("metadata"), f"{at}.metadata"))
        fields: dict[str, Any] = {
            "role": item.get("role"),
            "content": _openai_content(item.get("content"), metadata, at),
            "name": item.get("name"),
            "tool_calls": extra["tool_calls"] if "tool_calls" in extra else item.get("tool_calls"),
            "tool_call_id": item.get("tool_call_id"),
            "metadata": metadata,
            "created_at": _parse_time(extra.get("created_at"), f"{at}.created_at"),
            "id": _opt_int(extra.get("id"), f"{at}.id"),
            "parent_id": _opt_int(extra.get("parent_id"), f"{at}.parent_id"),
        }
        message = _message(fields, at)
        summary = _summary(extra.get("summary"), f"{at}.summary")
        if summary is not None and message.id is not None:
            summaries[message.id] = summary
        messages.append(message)

    ids = [m.id for m in messages if m.id is not None]
    if len(ids) != len(set(ids)):
        raise _fail(where, "two messages share an id.")
    for m in messages:
        if m.parent_id is not None and m.parent_id not in ids:
            raise _fail(
                where, f"message {m.id} has parent_id {m.parent_id}, which is not on this line."
            )

    return SessionRecord(
        messages=messages,
        session_id=_opt_str(session.get("session_id"), f"{where}.session_id", identifier=True),
        user_id=_opt_str(session.get("user_id"), f"{where}.user_id", identifier=True),
        system_prompt=system_prompt,
        metadata=_json_dict(session.get("metadata"), f"{where}.session.metadata"),
        created_at=_parse_time(session.get("created_at"), f"{where}.session.created_at"),
        updated_at=_parse_time(session.get("updated_at"), f"{where}.session.updated_at"),
        summary=_opt_str(session.get("summary"), f"{where}.session.summary"),
        summary_data=_summary(session.get("summary_data"), f"{where}.session.summary_data"),
        summary_until_id=_opt_int(
            session.get("summary_until_id"), f"{where}.session.summary_until_id"
        ),
        message_summaries=summaries,
    )


# --------------------------------------------------------------------------------------------
# plain-text transcript


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


# --------------------------------------------------------------------------------------------
# serialising records to and from text


def dumps(
    records: Sequence[SessionRecord], fmt: str = "json", *, bundle: bool | None = None
) -> str:
    """Records as the text of an export file in ``fmt`` (``json``, ``jsonl`` or ``text``).

    JSON of a single record is one session document unless ``bundle=True``; several records are
    always a bundle.
    """
    fmt = _check_format(fmt)
    if fmt == "jsonl":
        return "".join(
            json.dumps(session_to_openai(r), ensure_ascii=False, allow_nan=False) + "\n"
            for r in records
        )
    if fmt == "text":
        return "\n".join(transcript(r) for r in records)
    if bundle is None:
        bundle = len(records) != 1
    data = bundle_to_dict(records) if bundle else session_to_dict(records[0])
    return json.dumps(data, ensure_ascii=False, allow_nan=False, indent=2) + "\n"


def loads(text: str, fmt: str | None = None) -> list[SessionRecord]:
    """Parse and validate the text of an export (format sniffed unless ``fmt`` is given)."""
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ImportFormatError(
            f"the text is not valid Unicode ({exc.reason} at character {exc.start})."
        ) from None
    return list(_records(io.BytesIO(raw), fmt))


def _records(handle: IO[bytes], fmt: str | None) -> Iterator[SessionRecord]:
    """Validated records from an export file, one at a time (see :func:`iter_records`)."""
    if fmt is not None and _check_format(fmt) == "text":
        raise ImportFormatError("text transcripts cannot be imported; export as json or jsonl.")
    kind = sniff(handle)
    if kind == "empty":
        return  # what an export of an empty store writes in JSONL
    if (fmt or kind) == "jsonl":
        for number, data in jsonl_values(handle):
            yield session_from_openai(data, where=f"line {number}")
        return
    parts = json_parts(handle, "sessions")
    try:
        first = next(parts, None)
    except ImportFormatError as exc:
        if fmt is None and str(exc).startswith("not valid JSON"):
            raise ImportFormatError(
                f"not a JSON or JSONL file ({str(exc).partition('(')[2]}; harombe imports the "
                "json and jsonl files that `harombe export` writes."
            ) from None
        raise
    yield from _records_from_parts(parts if first is None else itertools.chain([first], parts))


def _records_from_parts(parts: Iterable[JsonPart]) -> Iterator[SessionRecord]:
    """Records from the parts of a JSON document; a bundle's sessions one at a time."""
    top: dict[str, Any] = {}
    whole: list[Any] = []  # an empty list, or a document that is not an object or a list
    listed = streamed = checked = False
    for key, index, value in parts:
        if index is None:
            if key is None:
                whole.append(value)
            else:
                top[key] = value
            continue
        if key is None:  # a list of session documents
            listed = True
        else:  # a bundle: its version first (if it came before the sessions)
            streamed = True
            if not checked and "version" in top:
                _check_version(top, "file")
                checked = True
        yield session_from_dict(value, where=f"sessions[{index}]")
    if streamed and not checked:
        _check_version(top, "file")
    if whole:
        yield from _records_from_json(whole[0])
    elif not (listed or streamed):
        yield from _records_from_json(top)


def _check_format(fmt: str) -> str:
    if fmt not in EXPORT_FORMATS:
        raise InvalidInputError(
            f"unknown export format {fmt!r}; use one of {', '.join(EXPORT_FORMATS)}."
        )
    return fmt


# --------------------------------------------------------------------------------------------
# paths


def safe_filename(name: str, suffix: str = "") -> str:
    """A file name made from ``name`` that cannot leave its folder or hide (no ``/``, ``..``).

    Characters other than letters, digits, ``.``, ``_`` and ``-`` become ``_``; if anything had
    to change, a short hash of the original keeps two different names from colliding.
    """
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")[:100] or "session"
    if cleaned != name:
        cleaned += "-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return cleaned + suffix


def resolve_output_path(
    out: str | os.PathLike[str], directory: str | os.PathLike[str] | None = None
) -> Path:
    """Where an export named ``out`` goes; inside ``directory`` when one is given.

    Raises :class:`ExportPathError` if the path (after ``..`` and symlinks are resolved) would
    leave ``directory``, names a folder, or its folder does not exist.
    """
    target = Path(out).expanduser()
    if directory is not None:
        base = Path(directory).expanduser().resolve()
        if not base.is_dir():
            raise ExportPathError(f"export folder {base} does not exist; create it first.")
        target = (base / target).resolve()
        if not target.is_relative_to(base) or target == base:
            raise ExportPathError(
                f"refusing to write {out!s}: it resolves to {target}, outside the export folder "
                f"{base}. Give a plain file name inside that folder."
            )
    if target.is_dir():
        raise ExportPathError(f"{target} is a folder; give a file name to write the export to.")
    if not target.parent.is_dir():
        raise ExportPathError(
            f"folder {target.parent} does not exist; create it or choose another path."
        )
    return target


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically: a reader sees the old file or the new, never half.

    The temporary file is renamed over ``path``, which replaces a symlink there rather than
    writing through it.
    """
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
                handle.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise ExportPathError(
            f"cannot write {path}: {exc.strerror or exc}. Choose another path."
        ) from exc
    return path


def write_records(
    records: Sequence[SessionRecord],
    out: str | os.PathLike[str],
    fmt: str = "json",
    *,
    directory: str | os.PathLike[str] | None = None,
    bundle: bool | None = None,
) -> Path:
    """Write records to a file (atomically; confined to ``directory`` when one is given)."""
    return write_text(resolve_output_path(out, directory), dumps(records, fmt, bundle=bundle))


def iter_records(path: str | os.PathLike[str], fmt: str | None = None) -> Iterator[SessionRecord]:
    """Read and validate an export file a session at a time, without touching any store.

    The file is streamed: memory follows its largest session, not its size. Raises
    :class:`ImportFormatError` naming the file and the line or node at fault.
    """
    with _export_file(path) as (file, handle):
        if not handle.seekable():
            raise ImportFormatError(
                f"{file} is not a regular file (a pipe?); an import reads its file twice (to "
                "check it, then to write it), so save the export to a file and import that."
            )
        yield from _records(handle, fmt)


@contextlib.contextmanager
def _export_file(path: str | os.PathLike[str]) -> Iterator[tuple[Path, IO[bytes]]]:
    """The file at ``path`` opened for reading; every failure, opening it or reading it, is an
    ImportFormatError that names the file (and where in it)."""
    file = Path(path).expanduser()
    try:
        handle = file.open("rb")
    except FileNotFoundError:
        raise ImportFormatError(f"no file at {file}; check the path.") from None
    except IsADirectoryError:
        raise ImportFormatError(f"{file} is a folder; give the export file itself.") from None
    except OSError as exc:
        raise ImportFormatError(f"cannot read {file}: {exc.strerror or exc}.") from exc
    with handle:
        try:
            yield file, handle
        except ImportFormatError as exc:  # say which file, then where in it
            raise ImportFormatError(f"{file.name}: {exc}") from exc
        except OSError as exc:
            raise ImportFormatError(f"cannot read {file}: {exc.strerror or exc}.") from exc


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON document in the file at ``path``, whole (a ChatMemory file, not a store's
    export); every failure is an ImportFormatError naming the file."""
    with _export_file(path) as (_, handle):
        return json_document(handle)


def read_records(path: str | os.PathLike[str], fmt: str | None = None) -> list[SessionRecord]:
    """Read and validate a whole export file without touching any store (see
    :func:`iter_records`, which holds one session at a time)."""
    return list(iter_records(path, fmt))


# --------------------------------------------------------------------------------------------
# the store side


def read_session(manager: MemoryManager, session_id: str) -> SessionRecord:
    """A stored session with all its messages and per-message summaries.

    Raises SessionNotFoundError if there is no such session.
    """
    session = manager.get_session(session_id)
    if session is None:
        raise SessionNotFoundError.of(session_id, manager.store.location)
    messages = manager.get_messages(session_id)
    ids = [m.id for m in messages if m.id is not None]
    summaries = manager.store.get_message_summaries(ids) if ids else {}
    return SessionRecord.from_session(session, messages, summaries)


def _session_ids(manager: MemoryManager, user_id: str | None) -> list[str]:
    # Oldest activity first, so an export reads (and re-imports) in the order it happened.
    return [s.id for s in reversed(manager.list_sessions(limit=None, user_id=user_id))]


def export_store(
    manager: MemoryManager,
    fmt: str = "json",
    *,
    session_id: str | None = None,
    user_id: str | None = None,
) -> str:
    """The text of an export: one session (``session_id``) or every session (of ``user_id``).

    A single session in JSON is one session document; a store export is a bundle.
    """
    _check_format(fmt)
    if session_id is not None:
        return dumps([read_session(manager, session_id)], fmt, bundle=False)
    records = [read_session(manager, sid) for sid in _session_ids(manager, user_id)]
    return dumps(records, fmt, bundle=True)


def export_to_directory(
    manager: MemoryManager,
    directory: str | os.PathLike[str],
    fmt: str = "json",
    *,
    user_id: str | None = None,
    session_ids: Sequence[str] | None = None,
) -> list[Path]:
    """One file per session in ``directory``, named from the session id by :func:`safe_filename`."""
    _check_format(fmt)
    ids = list(session_ids) if session_ids is not None else _session_ids(manager, user_id)
    written = []
    for sid in ids:
        path = resolve_output_path(safe_filename(sid, _EXTENSIONS[fmt]), directory)
        written.append(write_text(path, dumps([read_session(manager, sid)], fmt, bundle=False)))
    return written


async def aexport_store(
    manager: MemoryManager,
    fmt: str = "json",
    *,
    session_id: str | None = None,
    user_id: str | None = None,
) -> str:
    """Async twin of :func:`export_store` (runs on a worker thread)."""
    return await asyncio.to_thread(
        export_store, manager, fmt, session_id=session_id, user_id=user_id
    )


OnConflict = Literal["error", "new_id", "skip"]


def import_records(
    manager: MemoryManager,
    records: Iterable[SessionRecord],
    *,
    on_conflict: OnConflict = "error",
    user_id: str | None = None,
) -> ImportResult:
    """Write validated records into the store in one transaction: all of them, or none.

    A session id already in the store is an error (``on_conflict="error"``), is imported under
    a new id (``"new_id"``) or is left alone (``"skip"``). Records without an id get a new one.
    ``user_id`` overrides the owner recorded in the file. Message ids are assigned by the store;
    ``parent_id`` links and summaries are rewired to the new ids. If anything fails, or the
    process is killed part-way, the store is left as it was, so the same import can simply be
    run again. With semantic memory, the imported messages are embedded in the background like
    any saved message (see :func:`import_file`).
    """
    held = records if isinstance(records, Sequence) else list(records)
    return _import(manager, lambda: iter(held), on_conflict, user_id)


def _import(
    manager: MemoryManager,
    produce: Callable[[], Iterator[SessionRecord]],
    on_conflict: str,
    user_id: str | None,
) -> ImportResult:
    """Check every record (``produce()`` yields them afresh each time), then write them all in
    one transaction."""
    if on_conflict not in ("error", "new_id", "skip"):
        raise InvalidInputError(
            f"on_conflict must be 'error', 'new_id' or 'skip', got {on_conflict!r}."
        )
    # First pass, outside any transaction: a bad file never holds the write lock, and ids
    # already stored are reported all at once.
    seen: set[str] = set()
    for record in produce():
        _check_unique(record, seen)
    existing = [sid for sid in seen if manager.session_exists(sid)]
    if existing and on_conflict == "error":
        raise _conflict(existing[0], len(existing))

    def write() -> dict[str, Any]:
        # Runs inside the transaction (again, if a PostgreSQL transaction is retried): the
        # ids are checked once more, as another writer may have added one since.
        result = ImportResult()
        written: set[str] = set()
        for record in produce():
            _check_unique(record, written)
            sid = record.session_id
            if sid is not None and manager.session_exists(sid):
                if on_conflict == "error":
                    raise _conflict(sid, 1)
                if on_conflict == "skip":
                    result.skipped.append(sid)
                    continue
                sid = None
            sid = sid or uuid.uuid4().hex
            _write_record(manager, sid, record, user_id if user_id is not None else record.user_id)
            result.session_ids.append(sid)
            result.messages += len(record.messages)
        return asdict(result)

    return ImportResult(**manager.atomic(write))


def _check_unique(record: SessionRecord, seen: set[str]) -> None:
    if record.session_id is None:
        return
    if record.session_id in seen:
        raise ImportFormatError(f"session {record.session_id!r} appears twice in the file.")
    seen.add(record.session_id)


def _conflict(session_id: str, count: int) -> InvalidInputError:
    return InvalidInputError(
        f"session {session_id!r} is already in the store ({count} of the file's sessions are); "
        "nothing was imported. Import under new ids (on_conflict='new_id', CLI --on-conflict "
        "new-id) or skip them (on_conflict='skip')."
    )


def _write_record(
    manager: MemoryManager, sid: str, record: SessionRecord, user_id: str | None
) -> None:
    store = manager.store
    prompt_tokens = (
        0
        if record.system_prompt is None
        else manager.token_counter.count_message(
            Message(role="system", content=record.system_prompt)
        )
    )
    store.create_session(
        sid,
        user_id=user_id,
        system_prompt=record.system_prompt,
        system_prompt_tokens=prompt_tokens,
        metadata=record.metadata,
        created_at=record.created_at,
    )
    unlinked = [
        m.with_ids(id=None, session_id=None, parent_id=None, token_count=None)
        for m in record.messages
    ]
    new_ids = manager.save_messages(sid, unlinked)
    mapping = {
        m.id: new for m, new in zip(record.messages, new_ids, strict=True) if m.id is not None
    }
    for message, new_id in zip(record.messages, new_ids, strict=True):
        if message.parent_id is not None:
            store.set_parent(new_id, mapping[message.parent_id])
        if message.id is not None and message.id in record.message_summaries:
            store.set_message_summary(new_id, record.message_summaries[message.id])
    if record.summary is not None or record.summary_data is not None:
        store.update_session(
            sid,
            summary=record.summary,
            summary_data=record.summary_data,
            summary_until_id=mapping.get(record.summary_until_id)
            if record.summary_until_id is not None
            else None,
        )


def import_file(
    manager: MemoryManager,
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    on_conflict: OnConflict = "error",
    user_id: str | None = None,
) -> ImportResult:
    """Import a JSON or JSONL export into the store (format from the content unless ``fmt``).

    All or nothing: the whole file is validated first, a bad file raises
    :class:`ImportFormatError` naming the line or node at fault and writes nothing, and the
    sessions are then written in one transaction, so a failure or a killed process leaves the
    store as it was and the import can be run again. The file is streamed (read twice, a
    session at a time), so memory follows its largest session. Imported sessions keep their
    dates: their last activity is their newest message, so they sort among live sessions by
    when they happened (and ``prune_old_sessions`` or ``auto_prune_days`` treats old history
    as old).

    When ``manager`` has semantic memory, the imported messages are embedded in the background
    as soon as the import commits, as saved messages are: it returns without waiting (a large
    import takes minutes to embed on a CPU), search finds the messages by their keywords until
    each is embedded, and ``manager.flush()`` waits for all of them (with a progress bar on a
    terminal; ``flush(progress=callback)`` reports to a function).
    """
    return _import(manager, lambda: iter_records(path, fmt), on_conflict, user_id)


async def aimport_file(
    manager: MemoryManager,
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    on_conflict: OnConflict = "error",
    user_id: str | None = None,
) -> ImportResult:
    """Async twin of :func:`import_file` (runs on a worker thread)."""
    return await asyncio.to_thread(
        import_file, manager, path, fmt=fmt, on_conflict=on_conflict, user_id=user_id
    )
