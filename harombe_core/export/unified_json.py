"""The ``json`` format: the unified chat-memory document (``version``, ``metadata``, ``nodes``
with ``parent_id``, ``edges``), one session per document, or a bundle of them. Every field
of every message is kept, so it is the format for backups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from harombe_core.export.openai_jsonl import session_from_openai
from harombe_core.export.records import (
    FORMAT_VERSION,
    SessionRecord,
    check_version,
    format_error,
    iso_time,
    json_object,
    message_from,
    optional_int,
    optional_str,
    parse_time,
    session_fields,
    summary_field,
)
from harombe_core.models import Message, Session, utc_now

__all__ = [
    "bundle_to_dict",
    "messages_from_dict",
    "messages_to_dict",
    "records_from_json",
    "session_from_dict",
    "session_to_dict",
]


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
        "created_at": iso_time(record.created_at or (messages[0].created_at if messages else None)),
        "last_modified": iso_time(exported_at or utc_now()),
        "mode": mode or ("graph" if threaded else "linear"),
        "total_messages": len(messages),
        "session_id": record.session_id,
        "user_id": record.user_id,
        "system_prompt": record.system_prompt,
        "session_metadata": record.metadata,
        "updated_at": iso_time(record.updated_at),
        "summary": record.summary,
        "summary_data": record.summary_data,
        "summary_until_id": record.summary_until_id,
    }
    if record.state is not None:
        metadata["state"] = record.state
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
        raise format_error(
            where,
            f"expected a JSON object with version, metadata and nodes, got {type(data).__name__}.",
        )
    check_version(data, where)
    meta = json_object(data.get("metadata"), f"{where}.metadata")
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        raise format_error(where, '"nodes" must be a list of messages.')
    edges = data.get("edges", [])
    if not isinstance(edges, list):
        raise format_error(where, '"edges" must be a list of {"from": id, "to": id}.')

    messages: list[Message] = []
    summaries: dict[int, dict[str, Any]] = {}
    seen: set[int] = set()
    for i, node in enumerate(nodes):
        at = f"{where}.nodes[{i}]"
        if not isinstance(node, Mapping):
            raise format_error(at, "a node must be an object with role and content.")
        node_id = optional_int(node.get("id"), f"{at}.id")
        if node_id is None:
            node_id = i + 1
        if node_id in seen:
            raise format_error(at, f"node id {node_id} appears twice.")
        seen.add(node_id)
        fields = {k: node.get(k) for k in ("role", "content", "name", "tool_calls", "tool_call_id")}
        fields["metadata"] = json_object(node.get("metadata"), f"{at}.metadata")
        created = node.get("created_at", node.get("timestamp"))
        fields["created_at"] = parse_time(created, f"{at}.created_at")
        fields["id"] = node_id
        fields["parent_id"] = optional_int(node.get("parent_id"), f"{at}.parent_id")
        message = message_from(fields, at)
        summary = summary_field(node.get("summary"), f"{at}.summary")
        if summary is not None:
            summaries[node_id] = summary
        messages.append(message)

    by_id = {m.id: m for m in messages}
    for j, edge in enumerate(edges):
        at = f"{where}.edges[{j}]"
        if not isinstance(edge, Mapping):
            raise format_error(at, 'an edge must be {"from": id, "to": id}.')
        src, dst = (
            optional_int(edge.get("from"), f"{at}.from"),
            optional_int(edge.get("to"), f"{at}.to"),
        )
        if src not in by_id or dst not in by_id:
            raise format_error(at, f"edge {src} -> {dst} names a node that is not in the file.")
        target = by_id[dst]
        if target.parent_id is None:
            target.parent_id = src
        elif target.parent_id != src:
            raise format_error(
                at, f"node {dst} has parent_id {target.parent_id} but an edge from {src}."
            )
    for message in messages:
        if message.parent_id is not None and message.parent_id not in by_id:
            raise format_error(
                f"{where}.nodes",
                f"node {message.id} has parent_id {message.parent_id}, which is not in the file.",
            )

    return SessionRecord(
        messages=messages,
        system_prompt=optional_str(meta.get("system_prompt"), f"{where}.metadata.system_prompt"),
        message_summaries=summaries,
        **session_fields(meta, f"{where}.metadata", "session_metadata"),
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


def bundle_to_dict(
    records: Iterable[SessionRecord], facts: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """Several sessions (a whole store) as one JSON document; ``facts``: the user-memory
    facts of their users (``Fact.to_dict()`` records), under ``"facts"`` when there are any."""
    now = utc_now()
    sessions = [session_to_dict(r, exported_at=now) for r in records]
    extra: dict[str, Any] = {"facts": [dict(f) for f in facts]} if facts else {}
    return {
        "version": FORMAT_VERSION,
        "metadata": {
            "kind": "harombe-store",
            "exported_at": now.isoformat(),
            "total_sessions": len(sessions),
        },
        "sessions": sessions,
        **extra,
    }


def records_from_json(data: Any) -> list[SessionRecord]:
    if isinstance(data, list):
        return [session_from_dict(s, where=f"sessions[{i}]") for i, s in enumerate(data)]
    if isinstance(data, Mapping) and "sessions" in data:
        check_version(data, "file")
        sessions = data["sessions"]
        if not isinstance(sessions, list):
            raise format_error("file", '"sessions" must be a list of session documents.')
        return [session_from_dict(s, where=f"sessions[{i}]") for i, s in enumerate(sessions)]
    if isinstance(data, Mapping) and "nodes" in data:
        return [session_from_dict(data, where="file")]
    if isinstance(data, Mapping) and "messages" in data:
        return [session_from_openai(data, where="file")]
    raise format_error(
        "file",
        'not a harombe export: expected a JSON object with "nodes" (one session), '
        '"sessions" (a store), or "messages" (OpenAI chat format).',
    )
