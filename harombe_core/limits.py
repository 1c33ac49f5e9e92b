"""How large each stored field may be: one table, raised or lowered for the whole process.

Every value harombe stores is bounded, so a runaway tool result or a pasted file is refused
at once with :class:`~harombe_core.errors.InputTooLargeError` instead of being tokenised,
indexed and written for a minute. The defaults sit above what model APIs accept in one message
(OpenAI caps a message's text at about 10 MB, Anthropic a whole request at 32 MB, and an image
at 5 to 20 MB), so real conversations fit; message metadata gets the most room because the
adapters keep multi-part content (images as base64) there.

A :class:`~harombe_core.models.Message` is validated when it is built, before any manager sees
it, so the limits belong to the process rather than to one manager (as ``csv.field_size_limit``
does): change them with :func:`set_limits` at start-up. Ids (session, user) are keys, not data:
they stay at :data:`MAX_ID_CHARS`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields, replace
from typing import Any

from harombe_core.errors import InvalidInputError

__all__ = ["MAX_ID_CHARS", "Limits", "current_limits", "set_limits"]

#: Longest session id, user id or store key, in characters (they are index keys).
MAX_ID_CHARS = 512


@dataclass(frozen=True, slots=True)
class Limits:
    """Largest accepted size of each stored field, in characters (JSON fields: of their JSON).

    ``json_depth`` is how deeply lists and dicts may nest in any JSON field.
    """

    content_chars: int = 1_000_000
    name_chars: int = 10_000  # a message's name and tool_call_id
    tool_calls_chars: int = 1_000_000
    metadata_chars: int = 10_000_000  # per message; multi-part content (images) lives here
    session_metadata_chars: int = 100_000
    system_prompt_chars: int = 1_000_000
    summary_chars: int = 1_000_000  # a session's or a message's summary, text and data
    store_value_chars: int = 1_000_000  # one LangGraph store item's value
    json_depth: int = 200


_lock = threading.Lock()
_current = Limits()


def current_limits() -> Limits:
    """The limits in force now."""
    return _current


def set_limits(**changes: Any) -> Limits:
    """Change some limits for the whole process; returns the previous :class:`Limits`.

    ``set_limits(metadata_chars=50_000_000)`` lets bigger metadata in; pass the returned value
    back as ``set_limits(**dataclasses.asdict(previous))`` to restore. Values must be ints >= 1.
    """
    global _current
    known = {f.name for f in fields(Limits)}
    for name, value in changes.items():
        if name not in known:
            raise InvalidInputError(
                f"unknown limit {name!r}; the limits are {', '.join(sorted(known))}."
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"limit {name} must be an int >= 1, got {value!r}.")
    with _lock:
        previous = _current
        _current = replace(previous, **changes)
    return previous
