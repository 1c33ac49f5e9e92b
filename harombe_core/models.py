"""The value types that cross every layer: messages, sessions, search hits, thread nodes.

They are plain dataclasses so that adapters can build them cheaply and tests can compare them
with ``==``. Validation happens once, at construction, so a bad message is refused before it can
reach a transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any, get_args

from harombe_core.errors import InvalidMessageError
from harombe_core.limits import Limits, current_limits
from harombe_core.validate import (
    Role,
    check_json,
    check_mapping,
    check_text,
    check_time,
    optional_text,
    show,
)

__all__ = [
    "MAX_CONTENT_CHARS",
    "ROLES",
    "ConversationNode",
    "Message",
    "MessageSummary",
    "Role",
    "SearchHit",
    "Session",
    "utc_now",
]

ROLES: frozenset[str] = frozenset(get_args(Role))

#: Largest message content accepted by default, in characters (``Limits.content_chars``).
#: Beyond this a message is almost certainly a pasted file or a bug; store such data elsewhere
#: and keep a reference in ``metadata``.
MAX_CONTENT_CHARS = Limits().content_chars


def utc_now() -> datetime:
    """Timezone-aware now: every stored time is UTC so sessions from many hosts sort together."""
    return datetime.now(UTC)


@dataclass(slots=True)
class Message:
    """One chat message, exactly as it is stored and returned.

    ``id``, ``session_id``, ``token_count`` and ``parent_id`` are filled in by the store; leave them
    ``None`` when creating a message. ``created_at`` may be set so imported history keeps its real
    times.
    """

    role: Role
    content: str
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime = field(default_factory=utc_now)
    id: int | None = None
    session_id: str | None = None
    token_count: int | None = None
    parent_id: int | None = None

    def __post_init__(self) -> None:
        # Every size is measured before anything costly is done with the value, so a runaway
        # field is refused in microseconds (see harombe_core.limits).
        limits = current_limits()
        if not isinstance(self.role, str) or self.role not in ROLES:
            raise InvalidMessageError(
                f"unknown role {show(self.role)}; use one of {sorted(ROLES)} "
                "(map 'human' to 'user' and 'ai' to 'assistant')."
            )
        check_text(
            self.content,
            "message content",
            limit=limits.content_chars,
            field="content_chars",
            error=InvalidMessageError,
            fix="Split it into several messages or store it elsewhere and keep a reference in "
            "metadata",
            hint=" Serialise structured content (for example with json.dumps) or put it in "
            "metadata.",
        )
        for attr in ("name", "tool_call_id"):
            optional_text(
                getattr(self, attr),
                f"message {attr}",
                limit=limits.name_chars,
                field="name_chars",
                error=InvalidMessageError,
            )
        self.metadata = check_mapping(
            self.metadata,
            "metadata",
            limit=limits.metadata_chars,
            field="metadata_chars",
            error=InvalidMessageError,
            nul=False,
        )
        if self.tool_calls is not None:
            if isinstance(self.tool_calls, (str, bytes)) or not isinstance(
                self.tool_calls, Sequence
            ):
                raise InvalidMessageError(
                    "tool_calls must be a list of dicts (OpenAI or LangChain shape)."
                )
            calls = list(self.tool_calls)
            if not all(isinstance(c, Mapping) for c in calls):
                raise InvalidMessageError("every tool call must be a dict.")
            self.tool_calls = [dict(c) for c in calls]
            check_json(
                self.tool_calls,
                "tool_calls",
                limit=limits.tool_calls_chars,
                field="tool_calls_chars",
                error=InvalidMessageError,
            )
        self.created_at = check_time(self.created_at, "created_at", error=InvalidMessageError)

    def with_ids(self, **changes: Any) -> Message:
        """A copy with store-assigned fields set (id, session_id, token_count, parent_id)."""
        if changes.keys() <= _STORE_FIELDS:
            # Only store-assigned fields change, so the validated content needs no re-check
            # (this runs on every save, so it copies slot by slot instead of re-validating).
            copy = Message.__new__(Message)
            for name in _FIELDS:
                setattr(copy, name, getattr(self, name))
            for name, value in changes.items():
                setattr(copy, name, value)
            return copy
        return replace(self, **changes)

    @classmethod
    def trusted(cls, **values: Any) -> Message:
        """Build without validation, for rows the store already validated when writing them."""
        message = cls.__new__(cls)
        if values.keys() == _FIELD_SET:  # every field given, as the store does
            for name, value in values.items():
                setattr(message, name, value)
            return message
        for spec in fields(cls):
            if spec.name in values:
                value = values[spec.name]
            elif spec.default is not MISSING:
                value = spec.default
            else:
                factory = spec.default_factory
                value = factory() if callable(factory) else None
            object.__setattr__(message, spec.name, value)
        return message

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form used by export and the adapters' serialisation."""
        return {
            "id": self.id,
            "session_id": self.session_id,
            "role": self.role,
            "content": self.content,
            "name": self.name,
            "tool_calls": self.tool_calls,
            "tool_call_id": self.tool_call_id,
            "metadata": self.metadata,
            "created_at": self.created_at.isoformat(),
            "token_count": self.token_count,
            "parent_id": self.parent_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """Inverse of :meth:`to_dict`; unknown keys are ignored, missing optional keys default."""
        if not isinstance(data, Mapping):
            raise InvalidMessageError(f"a message must be a mapping, got {type(data).__name__}.")
        created = data.get("created_at")
        if isinstance(created, str):
            try:
                created = datetime.fromisoformat(created)
            except ValueError as exc:
                raise InvalidMessageError(f"created_at {created!r} is not ISO 8601.") from exc
        elif isinstance(created, (int, float)) and not isinstance(created, bool):
            try:
                created = datetime.fromtimestamp(created, UTC)
            except (OverflowError, OSError, ValueError):
                raise InvalidMessageError(
                    f"created_at {show(created)} is not a Unix time harombe can store; give an "
                    "ISO 8601 time between 0001-01-01 and 9999-12-31 (UTC)."
                ) from None
        kwargs: dict[str, Any] = {
            "role": data.get("role"),
            "content": data.get("content"),
            "name": data.get("name"),
            "tool_calls": data.get("tool_calls"),
            "tool_call_id": data.get("tool_call_id"),
            "metadata": data.get("metadata") or {},
        }
        if created is not None:
            kwargs["created_at"] = created
        for key in ("id", "token_count", "parent_id"):
            value = data.get(key)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise InvalidMessageError(f"{key} must be an integer, got {value!r}.")
                kwargs[key] = value
        sid = data.get("session_id")
        if sid is not None:
            if isinstance(sid, bool) or not isinstance(sid, (str, int)) or (
                isinstance(sid, int) and sid.bit_length() > 64
            ):
                raise InvalidMessageError(f"session_id must be a str, got {show(sid)}.")
            kwargs["session_id"] = str(sid)
        return cls(**kwargs)


_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Message))
_FIELD_SET = frozenset(_FIELDS)
_STORE_FIELDS = frozenset({"id", "session_id", "token_count", "parent_id"})


class _Vector:
    """Stands for a stored embedding in a repr: its length, not its hundreds of floats."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size

    def __repr__(self) -> str:
        return f"<{self.size} floats>"


def _summary_for_repr(data: dict[str, Any] | None) -> dict[str, Any] | None:
    embedding = (data or {}).get("embedding")
    if not isinstance(embedding, dict) or not isinstance(embedding.get("vector"), list):
        return data
    shown = {**embedding, "vector": _Vector(len(embedding["vector"]))}
    return {**(data or {}), "embedding": shown}


@dataclass(slots=True, repr=False)
class Session:
    """A conversation: its owner, its system prompt, and (once summarised) its summary.

    Its repr shows a stored summary embedding as its length, so printing a session (or a list
    of them) stays readable.
    """

    id: str
    user_id: str | None = None
    system_prompt: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime = field(default_factory=utc_now)
    updated_at: datetime = field(default_factory=utc_now)
    message_count: int = 0
    summary: str | None = None
    summary_data: dict[str, Any] | None = None
    summary_until_id: int | None = None

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        shown["summary_data"] = _summary_for_repr(self.summary_data)
        return f"Session({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


@dataclass(slots=True)
class SearchHit:
    """One retrieved message and why it ranked where it did.

    Every score reads the same on SQLite and PostgreSQL:

    * ``score``, 0..1: the weighted mean of the hit's evidence (its own match, its
      neighbours', its session's, and the speaker and time the query names, where it names
      them; see :class:`~harombe_core.retrieval.RetrievalSettings`), decayed by age when
      asked. 1.0 is the best possible on every count; hits are ranked by it.
    * ``vector_score``, -1..1: the cosine similarity of the message's vector to the query's
      (``None`` without semantic memory, or while the message waits to be embedded).
    * ``keyword_score``, 0..1: its keyword relevance (BM25 on SQLite, ``ts_rank`` on
      PostgreSQL) relative to the best keyword match of the same search, which scores 1.0
      (``None`` when none of the query's words is in it).
    """

    message: Message
    score: float
    vector_score: float | None = None
    keyword_score: float | None = None

    @property
    def session_id(self) -> str:
        """The session the message belongs to (always set on stored messages)."""
        return self.message.session_id or ""


@dataclass(slots=True)
class MessageSummary:
    """The seed's per-message summary: a short title and a two-sentence summary."""

    title: str
    summary: str


@dataclass(slots=True)
class ConversationNode:
    """A node of the thread graph: one message and where it hangs."""

    id: int
    message: Message
    summary: MessageSummary | None = None
    parent_id: int | None = None
    timestamp: datetime = field(default_factory=utc_now)
