"""What travels through an export file: :class:`SessionRecord`, the import result, and
the checks every format's reader applies to a field (each names where in the file it was).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from harombe_core.errors import (
    ImportFormatError,
    InvalidMessageError,
)
from harombe_core.models import Message, Session

__all__ = [
    "EXPORT_FORMATS",
    "EXTENSIONS",
    "EXTRAS_KEY",
    "FORMAT_VERSION",
    "ExportFormat",
    "ImportResult",
    "SessionRecord",
    "check_version",
    "format_error",
    "iso_time",
    "json_object",
    "message_from",
    "optional_int",
    "optional_str",
    "parse_time",
    "place_facts",
    "session_fields",
    "state_field",
    "summary_field",
]


#: Version written into every JSON export; files of another major version are refused.
FORMAT_VERSION = "1.0"
ExportFormat = Literal["json", "jsonl", "text"]
EXPORT_FORMATS: tuple[str, ...] = ("json", "jsonl", "text")
#: Top-level key of a JSONL line that carries what the OpenAI format has no place for.
EXTRAS_KEY = "harombe"
EXTENSIONS = {"json": ".json", "jsonl": ".jsonl", "text": ".txt"}
_OPENAI_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")
_MAX_ID_CHARS = 512


@dataclass(slots=True)
class SessionRecord:
    """One session as it travels through a file: its fields, its messages, their summaries.

    ``messages`` keep the ids they had where they came from (``id`` and ``parent_id`` describe the
    thread inside the file); importing assigns new ids and rewires ``parent_id`` to them.
    ``message_summaries`` maps those ids to the per-message ``{"title", "summary"}``.
    ``state``: what user memory keeps of the session (``outcome``, ``important``, and
    ``facts_until_id``, the file's id of the last message its facts were extracted from, so
    an import does not extract them twice), or None.
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
    state: dict[str, Any] | None = None

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
    facts: int = 0  # user-memory facts the file carried (a store export's "facts")


def place_facts(
    records: Sequence[tuple[str | None, str | None]], facts: Sequence[Mapping[str, Any]]
) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Which record carries each user-memory fact, in formats that have no place for facts
    beside the sessions (a JSONL line, a file per session): ``(per record, left over)``.
    ``records``: the ``(session id, user id)`` of each record, in order.

    A fact rides with the newest exported session it came from, so that importing that one
    file keeps its sources; a fact with no exported source (one the user added) with its
    user's newest session; a fact of a user with no exported session with the last record.
    Only when there are no records at all is anything left over (the caller writes it on its
    own). Fact records carry their ``user_id``, so where one rides changes nothing on import.
    """
    placed: list[list[dict[str, Any]]] = [[] for _ in records]
    by_session = {sid: i for i, (sid, _) in enumerate(records) if sid is not None}
    by_user = {uid: i for i, (_, uid) in enumerate(records) if uid is not None}
    left: list[dict[str, Any]] = []
    for fact in facts:
        sessions = [s[0] for s in fact.get("sources") or [] if s and s[0] in by_session]
        if sessions:
            at = max(by_session[s] for s in sessions)
        else:
            at = by_user.get(str(fact.get("user_id")), len(records) - 1)
        (placed[at] if at >= 0 else left).append(dict(fact))
    return placed, left


def iso_time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def format_error(where: str, problem: str) -> ImportFormatError:
    return ImportFormatError(f"{where}: {problem}")


def parse_time(value: Any, where: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise format_error(where, f"{value!r} is not an ISO 8601 time.") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise format_error(where, f"a time must be an ISO 8601 string, got {type(value).__name__}.")


def optional_str(value: Any, where: str, *, identifier: bool = False) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise format_error(where, f"must be a string or null, got {type(value).__name__}.")
    if identifier and (not value or len(value) > _MAX_ID_CHARS or "\x00" in value):
        raise format_error(where, f"must be 1-{_MAX_ID_CHARS} characters without NUL bytes.")
    return value


def optional_int(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise format_error(where, f"must be an integer or null, got {value!r:.60}.")
    return value


def json_object(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise format_error(where, "must be a JSON object.")
    return value


def summary_field(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise format_error(
            where, 'a summary must be an object like {"title": ..., "summary": ...}.'
        )
    return dict(value)


def check_version(data: Mapping[str, Any], where: str) -> None:
    version = data.get("version")
    if version is None:
        raise format_error(
            where, f'no "version" key; a harombe JSON export has "version": "{FORMAT_VERSION}".'
        )
    if not isinstance(version, (str, int, float)) or str(version).split(".")[0] != "1":
        raise format_error(
            where,
            f"format version {version!r} is not supported (this harombe reads version 1.x); "
            "export it again with a matching harombe or upgrade harombe.",
        )


def message_from(fields: Mapping[str, Any], where: str) -> Message:
    try:
        return Message.from_dict(fields)
    except InvalidMessageError as exc:
        raise format_error(where, str(exc)) from exc


def session_fields(fields: Mapping[str, Any], at: str, metadata_key: str) -> dict[str, Any]:
    """The session fields every format stores the same way, read from ``fields`` and checked
    (``at`` names where they are in the file; ``metadata_key`` is the session metadata's key)."""
    return {
        "session_id": optional_str(fields.get("session_id"), f"{at}.session_id", identifier=True),
        "user_id": optional_str(fields.get("user_id"), f"{at}.user_id", identifier=True),
        "metadata": json_object(fields.get(metadata_key), f"{at}.{metadata_key}"),
        "created_at": parse_time(fields.get("created_at"), f"{at}.created_at"),
        "updated_at": parse_time(fields.get("updated_at"), f"{at}.updated_at"),
        "summary": optional_str(fields.get("summary"), f"{at}.summary"),
        "summary_data": summary_field(fields.get("summary_data"), f"{at}.summary_data"),
        "summary_until_id": optional_int(fields.get("summary_until_id"), f"{at}.summary_until_id"),
        "state": state_field(fields.get("state"), f"{at}.state"),
    }


def state_field(value: Any, where: str) -> dict[str, Any] | None:
    """A session's user-memory state as a file gives it, checked (see :class:`SessionRecord`)."""
    from harombe_core.facts.models import OUTCOMES  # lazily: the export reads it rarely

    if value is None:
        return None
    state = json_object(value, where)
    outcome = state.get("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        raise format_error(f"{where}.outcome", f"must be one of {', '.join(OUTCOMES)} or null.")
    important = state.get("important", False)
    if not isinstance(important, bool):
        raise format_error(f"{where}.important", "must be true or false.")
    until = optional_int(state.get("facts_until_id"), f"{where}.facts_until_id")
    return {"outcome": outcome, "important": important, "facts_until_id": until}
